"""A run's data, read once: the source loaded on first use and kept, with its unlabelled texts.

A ``sentiment train`` run reads its source from several places: the default's profile and rules
(``auto.py``), the pretraining stage (``pretrain.py``), the fit's labelled splits (``setup.py``) and
distillation's unlabelled reviews (``distill.py``). Each takes its part from one :class:`RunData`, so
the files are read once (:func:`~sentiment_cli.data.sources.load_source`, and the ``[data] unlabelled``
file); each part is then drawn from the loaded rows exactly as a fresh read would draw it (the same rows,
in the same order). The fit's splits hold their texts lazily (:class:`~sentiment_cli.data.text_column.Texts`:
read from the source when iterated, never all in memory at once). Once the run's tokenizer exists, each text is
tokenized once (:meth:`RunData.ids`), into a temporary file (:class:`~sentiment_cli.data.token_ids.TokenIds`):
the refit's second run and the search's trials, which take their splits from the same object, find their
reviews' ids there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tokenizers import Tokenizer

from ..config import DataConfig
from ..data.sources import Source, load_source
from ..data.splits import PRETRAIN_ALONE_HINT, DataSpec, Split, pretraining_texts_of, train_validation_of
from ..data.text_column import Texts
from ..data.token_ids import TokenIds
from ..data.tokenizer import build_tokenizer, encode_token_ids, save_tokenizer
from ..data.unlabelled import Unlabelled, unlabelled_texts

KEPT_TOKENIZERS = 2   # the ids of this many tokenizers are kept at once (RunData.ids)


class RunData:
    """The source ``source`` (a Hub id, folder or file), loaded on first use and kept for the whole run.

    Attributes:
        source: the source as the run's config names it (absolute for local paths).
    """

    def __init__(self, source: str):
        self.source = source
        self._src: Source | None = None
        self._unlabelled: dict[tuple[str, str], Unlabelled | None] = {}
        self._pretraining: dict[tuple[DataSpec, str], list[str]] = {}
        self._ids: dict[tuple[Any, ...], dict[Any, tuple[Any, TokenIds]]] = {}   # the latest KEPT_TOKENIZERS
        self._shared: dict[Any, Any] = {}

    def shared(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()``, computed once per ``key`` for the whole run and kept: the work that the search's trials (and
        a refit) would otherwise each repeat on the same rows (the n-gram score's fit, the rule-negated
        sentences, distillation's teacher labels: ``setup.py``). ``key`` must name everything the result depends
        on; the result must not be changed by its users."""
        if key not in self._shared:
            self._shared[key] = make()
        return self._shared[key]

    def tokenizer_json(self, train: Split, config: DataConfig, on_stage: Callable[[str], None] | None = None) -> str:
        """The tokenizer ``config`` names built on the training split ``train``, as ``tokenizer.json`` text, once per
        run for the same rows and ``[data]`` keys: the n-gram stage, the search's trials and the n-gram score alone's
        run share it (a Unigram trainer takes minutes on Wisesight's messages). ``on_stage`` is told when it is
        built."""
        key = ("tokenizer", train.fingerprint(), config.tokenizer, config.vocab_size, config.min_frequency,
               config.pre_tokenizer, config.max_length)
        if not self.has_shared(key) and on_stage is not None:
            on_stage(f"building the tokenizer on {len(train):,} training texts")
        return self.shared(key, lambda: save_tokenizer(build_tokenizer(train.texts, config, length=len(train))))

    def ngram_fit(self, key: str, make: Callable[[], Any]) -> Any:
        """The n-gram estimator fitted earlier in the run on the same rows and settings (``key``:
        :func:`~sentiment_cli.ngram.fit.fit_key`: the rows' and labels' digest joined with the settings), else
        ``make()``, kept: the search's n-gram stage leaves its winner's fit here for the encoder trials
        (:meth:`shared`)."""
        return self.shared(("ngram estimator", key), make)

    def has_shared(self, key: Any) -> bool:
        """Whether :meth:`shared` has computed ``key`` already."""
        return key in self._shared

    @property
    def loaded(self) -> bool:
        """Whether the source has been read already."""
        return self._src is not None

    @property
    def src(self) -> Source:
        """The loaded source (read now, the first time).

        Raises:
            DataError, UsageError: as :func:`~sentiment_cli.data.sources.load_source`.
        """
        if self._src is None:
            self._src = load_source(self.source)
        return self._src

    def _check(self, spec: DataSpec) -> None:
        if spec.source != self.source:
            raise ValueError(f"a spec of {spec.source!r} asked of the run's data, {self.source!r}")

    def splits(self, spec: DataSpec) -> tuple[Split, Split]:
        """``(train, validation)`` as :func:`~sentiment_cli.data.splits.load_train_validation` draws them, their
        texts lazy (:class:`~sentiment_cli.data.text_column.Texts`).

        Raises:
            DataError, UsageError, ConfigError: as that function.
            ValueError: ``spec`` names another source.
        """
        self._check(spec)
        return train_validation_of(self.src, spec, lazy=True)

    def unlabelled(self, spec: DataSpec) -> Unlabelled | None:
        """The run's unlabelled texts (:func:`~sentiment_cli.data.unlabelled.unlabelled_texts`), read once.

        Raises:
            DataError: as that function.
            ValueError: ``spec`` names another source.
        """
        self._check(spec)
        key = (spec.unlabelled, spec.text_column)
        if key not in self._unlabelled:
            self._unlabelled[key] = unlabelled_texts(self.src, spec.unlabelled, spec.text_column)
        return self._unlabelled[key]

    def pretraining_texts(self, spec: DataSpec, splits: str, missing_hint: str = PRETRAIN_ALONE_HINT) -> list[str]:
        """The texts of ``splits`` (``unsupervised``, ``train`` or both), shuffled and cut as
        :func:`~sentiment_cli.data.splits.load_pretraining_texts` gives them; the same list each time.

        Raises:
            DataError: as that function (no unlabelled text: the message ends with ``missing_hint``).
            ValueError: ``spec`` names another source.
        """
        key = (spec, splits)
        if key not in self._pretraining:
            found = self.unlabelled(spec) if "unsupervised" in splits.split("+") else None
            self._pretraining[key] = pretraining_texts_of(self.src, spec, splits, found, missing_hint)
        return self._pretraining[key]

    def ids(self, tokenizer: Tokenizer, texts: Sequence[str], config: DataConfig) -> TokenIds:
        """``encode_texts(tokenizer, texts, config)`` as :class:`~sentiment_cli.data.token_ids.TokenIds`, each
        text tokenized once for the run's tokenizer.

        A text's ids depend on the text, the tokenizer and ``config``'s cut alone (not on the other texts of the
        batch), so ids kept from an earlier call are the ones a new call would give. Lazy texts
        (:class:`~sentiment_cli.data.text_column.Texts`, the fit's splits) are tokenized a whole source column at
        a time, in its row order, and each call gets the view of its rows; other sequences (distillation's
        unlabelled reviews: the same list each call) are kept by identity, and must not change afterwards. The
        ids of :data:`KEPT_TOKENIZERS` tokenizers (and cuts) are kept at a time, the latest used: the n-gram stage
        reads the run's words and the character peer's characters, and the trials then read one of them (issue
        75); a third one drops the least recently used. A tokenizer that pads
        (none the run builds; a crafted ``tokenizer.json`` could) gives ids that depend on the batch: they are
        made for ``texts`` as one batch, and not kept.
        """
        if tokenizer.padding is not None:
            return encode_token_ids(tokenizer, texts, config)
        key = (tokenizer.to_str(), config.max_length, config.truncation, config.head_fraction, config.negation_scope,
               config.blind_identity)
        known = self._ids.pop(key, {})
        self._ids[key] = known   # the latest used last
        while len(self._ids) > KEPT_TOKENIZERS:
            del self._ids[next(iter(self._ids))]
        if isinstance(texts, Texts):   # the column's every row, once; this call's rows are a view
            column = texts.column
            if column.key not in known:
                known[column.key] = (column.dataset, encode_token_ids(
                    tokenizer, (t for block in column.iter_texts() for t in block), config))
            return known[column.key][1][texts.rows]
        if id(texts) not in known:   # the object is kept with its ids: its id is not reused meanwhile
            known[id(texts)] = (texts, encode_token_ids(tokenizer, texts, config))
        return known[id(texts)][1]

"""A run's data, read once: the source loaded on first use and kept, with its unlabelled texts.

A ``sentiment train`` run reads its source from several places: the default's profile and rules
(``auto.py``), the pretraining stage (``pretrain.py``), the fit's labelled splits (``setup.py``) and
distillation's unlabelled reviews (``distill.py``). Each takes its part from one :class:`RunData`, so
the files are read once (:func:`~sentiment_cli.data.sources.load_source`, and the ``[data] unlabelled``
file); each part is then drawn from the loaded rows exactly as a fresh read would draw it (the same rows,
in the same order). Once the run's tokenizer exists, each text is tokenized once (:meth:`RunData.ids`):
the refit's second run, which takes its splits from the same object, finds its reviews' ids there.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer

from ..config import DataConfig
from ..data.sources import Source, load_source
from ..data.splits import PRETRAIN_ALONE_HINT, DataSpec, Split, pretraining_texts_of, train_validation_of
from ..data.tokenizer import encode_texts
from ..data.unlabelled import Unlabelled, unlabelled_texts


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
        self._ids: tuple[tuple[str, int, str, float], dict[str, list[int]]] | None = None

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
        """``(train, validation)`` as :func:`~sentiment_cli.data.splits.load_train_validation` draws them.

        Raises:
            DataError, UsageError, ConfigError: as that function.
            ValueError: ``spec`` names another source.
        """
        self._check(spec)
        return train_validation_of(self.src, spec)

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

    def ids(self, tokenizer: Tokenizer, texts: Sequence[str], config: DataConfig) -> list[list[int]]:
        """``encode_texts(tokenizer, texts, config)``, each text tokenized once for the run's tokenizer.

        A text's ids depend on the text, the tokenizer and ``config``'s cut alone (not on the other texts
        of the batch), so ids kept from an earlier call are the ones a new call would give. The ids of one
        tokenizer (and cut) are kept at a time: another one starts afresh. A tokenizer that pads (none the
        run builds; a crafted ``tokenizer.json`` could) gives ids that depend on the batch: it is not kept.
        The lists returned are shared; callers do not change them.
        """
        if tokenizer.padding is not None:
            return encode_texts(tokenizer, texts, config)
        key = (tokenizer.to_str(), config.max_length, config.truncation, config.head_fraction, config.negation_scope)
        if self._ids is None or self._ids[0] != key:
            self._ids = (key, {})
        known = self._ids[1]
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            known.update(zip(missing, encode_texts(tokenizer, missing, config)))
        return [known[t] for t in texts]

"""A run's data, read once: the source loaded on first use and kept, with its unlabelled texts.

A ``sentiment train`` run reads its source from several places: the default's profile and rules
(``auto.py``), the pretraining stage (``pretrain.py``), the fit's labelled splits (``setup.py``) and
distillation's unlabelled reviews (``distill.py``). Each takes its part from one :class:`RunData`, so
the files are read once (:func:`~sentiment_cli.data.sources.load_source`, and the ``[data] unlabelled``
file); each part is then drawn from the loaded rows exactly as a fresh read would draw it (the same rows,
in the same order). The refit's second run takes its splits from the same object.
"""

from __future__ import annotations

from ..data.sources import Source, load_source
from ..data.splits import PRETRAIN_ALONE_HINT, DataSpec, Split, pretraining_texts_of, train_validation_of
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

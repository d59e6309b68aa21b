"""Labelled splits of a source: train, validation and test as texts and label ids, and the validation hold-out.

A run reads its splits through :class:`DataSpec` (the ``[data]`` keys and the seed):
:func:`load_train_validation`, :func:`load_split` and, for pretraining, :func:`load_pretraining_texts`;
:func:`scoring_spec` gives the spec a trained run is scored on (its own data, or other data).
Validation is the source's own ``validation`` (or ``dev``) split when it has one, else a part of
``train`` held out at random (stratified by label) or in blocks (:func:`block_validation_indices`).

Sources are loaded by :mod:`sentiment_cli.data.sources`, their columns found by :mod:`sentiment_cli.data.columns`
and their labels mapped to ids by :mod:`sentiment_cli.data.labels`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .columns import LABEL_COLUMNS, TEXT_COLUMNS, check_text_column, resolve_column
from ..errors import DataError, UsageError
from .labels import LABELS, label_ids, label_set, raw_labels
from .multilabel import Options, Reading, describe, find_label_column, find_reading, read_split
from .sources import Source, is_single_file, load_source
from .text_column import TextColumn, Texts
from .tokenizer import clip_texts
from .unlabelled import Unlabelled, unlabelled_texts

SPLITS = ("train", "validation", "test")


@dataclass
class Split:
    """One labelled split: ``texts[i]`` has label id ``labels[i]``, whose name is ``label_names[labels[i]]``.

    A multi-label split (``multi_label``) holds ``labels`` as a ``(rows, num_labels)`` uint8 matrix instead:
    ``labels[i, j]`` is 1 when text ``i`` carries label ``j`` (a row of zeros: no label).

    Attributes:
        texts: a list of strings, or (a training run's splits) a :class:`~.text_column.Texts` that reads them
            from the source when iterated.
        where: where the rows came from, for messages and the model card (a file, or ``source: split``).
        reading: a multi-label training split's one line on how its labels were read
            (:func:`~.multilabel.describe`); ``""`` otherwise.
    """

    name: str
    texts: Sequence[str]
    labels: Any   # list[int] (rows,), or np.ndarray (rows, num_labels) uint8 when multi_label
    label_names: tuple[str, ...] = LABELS
    where: str = ""
    multi_label: bool = False
    reading: str = ""

    def __len__(self) -> int:
        return len(self.texts)

    def class_counts(self) -> dict[str, int]:
        """Examples per class, ``{name: count}`` in label order (classes without examples count 0); with
        several labels per text, the texts that carry each label."""
        if self.multi_label:
            counts = np.asarray(self.labels, dtype=np.int64).reshape(len(self), len(self.label_names)).sum(axis=0)
        else:
            counts = np.bincount(np.asarray(self.labels, dtype=np.int64), minlength=len(self.label_names))
        return {name: int(c) for name, c in zip(self.label_names, counts)}

    def unlabelled_rows(self) -> int:
        """Texts that carry no label (multi-label only; 0 otherwise)."""
        if not self.multi_label or not len(self):
            return 0
        return int((np.asarray(self.labels).sum(axis=1) == 0).sum())

    def fingerprint(self) -> str:
        """``"sha256:<hex>"`` over the texts and labels, in order: equal splits give equal fingerprints.

        Each example contributes its label, the byte length of its UTF-8 text
        and the text, so no two different splits hash the same bytes.
        """
        h = hashlib.sha256()
        for text, label in zip(self.texts, self.labels):
            data = text.encode("utf-8", errors="surrogatepass")
            key = ",".join(map(str, np.flatnonzero(label))) + ";" if self.multi_label else str(int(label))
            h.update(f"{key}:{len(data)}:".encode("ascii"))
            h.update(data)
        return f"sha256:{h.hexdigest()}"


@dataclass
class _Labelled:
    """One split with its columns resolved and checked: the Arrow dataset and the label ids (``(rows,)``
    int64; multi-label: the ``(rows, num_labels)`` uint8 matrix, read as ``reading`` says)."""

    dataset: Any
    text_column: str
    ids: np.ndarray
    where: str
    label_column: str = ""
    reading: Reading | None = None
    source: Any = None   # the split's dataset as loaded (all columns): lazy texts read it (text_column.py)
    _column: TextColumn | None = dataclasses.field(default=None, repr=False)

    def column(self) -> TextColumn:
        """The texts as a :class:`~.text_column.TextColumn`, made once (train and its hold-out share it)."""
        if self._column is None:
            self._column = TextColumn(self.source, self.text_column)
        return self._column


def _labelled(src: Source, split: str, spec: "DataSpec", names: Sequence[str] | None
              ) -> tuple[_Labelled, tuple[str, ...]]:
    """Resolve and check ``split``'s columns and labels; ``(labelled, label names)``.

    ``names`` is the label set to map to (train's, or a trained model's); ``None`` derives it from this split
    (training), with ``spec.labels`` ([data] labels) fixing names and order. How labels are read (one or
    several per text) is decided on the source's training split (:func:`_reading`).

    Raises:
        DataError, UsageError, ConfigError: as :func:`load_train_validation`.
    """
    ds = src.splits[split]
    where = src.where(split)
    if len(ds) == 0:
        raise DataError(f"{where}: no rows")
    text = resolve_column(ds.column_names, spec.text_column, TEXT_COLUMNS, "text", where)
    reading = _reading(src, split, spec, text)
    if reading is not None and reading.multi_label:
        if reading.kind != "columns" and reading.column == text:
            raise UsageError(f"{where}: column {text!r} cannot hold both the texts and the labels")
        check_text_column(ds, text, where)
        matrix, names = read_split(ds, reading, where, split, names, spec.labels if names is None else ())
        return _Labelled(ds.select_columns([text]), text, matrix, where, reading.column, reading, ds), names
    label = find_label_column(ds.column_names, spec.label_column, where) \
        or resolve_column(ds.column_names, spec.label_column, LABEL_COLUMNS, "label", where)
    if text == label:
        raise UsageError(f"{where}: column {text!r} cannot hold both the texts and the labels")
    check_text_column(ds, text, where)
    raw = raw_labels(ds, label, where)
    training = names is None
    if training:
        if raw.keys.null_count:   # name the row before computing a label set from the rest
            label_ids(raw, (), where, label, False)
        names = label_set(raw, spec.labels, where)
    ids = label_ids(raw, names, where, label, training and bool(spec.labels))
    return _Labelled(ds.select_columns([text]), text, ids, where, label, source=ds), tuple(names)


def _reading(src: Source, split: str, spec: "DataSpec", text: str) -> Reading | None:
    """How the source's labels are read, decided on its training split (on ``split`` when it has none):
    see :func:`~.multilabel.find_reading`; ``None``: no label column was found.

    Raises:
        DataError, UsageError, ConfigError: as :func:`~.multilabel.find_reading`.
    """
    base = "train" if "train" in src.splits else split
    ds = src.splits[base]
    if base != split:
        text = resolve_column(ds.column_names, spec.text_column, TEXT_COLUMNS, "text", src.where(base))
    return find_reading(ds, text, spec.label_column,
                        Options(spec.multi_label, spec.label_separator, tuple(spec.label_columns)), src.where(base))


def _split(lab: _Labelled, name: str, names: tuple[str, ...], rows: np.ndarray | None = None,
           described: bool = False, lazy: bool = False) -> Split:
    """The split of ``rows`` (all rows when ``None``), in that order; ``described``: a multi-label split gets its
    ``reading`` line (the training split). Its texts are a list of strings, or with ``lazy`` a
    :class:`~.text_column.Texts` that reads them when iterated (training: memory does not grow with the rows)."""
    ids = lab.ids if rows is None else lab.ids[np.asarray(rows, dtype=np.int64)]
    if lazy:
        texts: Sequence[str] = Texts(lab.column(), None if rows is None else np.asarray(rows, dtype=np.int64))
    else:
        part = lab.dataset if rows is None else lab.dataset.select(rows)
        texts = list(part[lab.text_column])
    multi = lab.reading is not None and lab.reading.multi_label
    split = Split(name, texts, ids if multi else ids.tolist(), names, lab.where, multi)
    if multi and described:
        split.reading = describe(lab.reading, ids, names)
    return split


def _need(src: Source, split: str) -> None:
    if split not in src.splits:
        raise DataError(f"{src.name} has no {split!r} split (it has: {', '.join(src.splits)})")


def _hold_out(ids: np.ndarray, names: Sequence[str], validation_fraction: float, seed: int,
              validation_split: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows of train and of validation, each in the order a run reads them.

    ``validation_fraction`` 0: all rows shuffled with ``seed``, none for validation. ``blocks``: see
    :func:`block_validation_indices`. ``last``: see :func:`_last_rows`. ``random``: a stratified draw
    (``datasets``' ``train_test_split`` with ``seed``, as runs before label sets drew it: the same rows for the
    same labels). Multi-label ``ids`` (``(rows, num_labels)``): see :func:`_multi_label_hold_out`.

    Raises:
        DataError: a class too small to hold out, or too few rows.
    """
    import datasets

    n = len(ids)
    if validation_fraction == 0:
        return np.random.default_rng(seed).permutation(n), np.zeros(0, dtype=np.int64)
    if validation_split == "last":
        return _last_rows(ids, names, validation_fraction, seed, where)
    if np.ndim(ids) == 2:
        return _multi_label_hold_out(n, validation_fraction, seed, validation_split, where)
    _check_classes_can_be_held_out(ids, names, where)
    if validation_split == "blocks":
        try:
            held = block_validation_indices(ids, validation_fraction, seed)
        except ValueError as exc:
            raise DataError(f"{where}: cannot hold out validation: {exc}") from None
        keep = np.zeros(n, dtype=bool)
        keep[held] = True
        return (np.random.default_rng(seed).permutation(np.flatnonzero(~keep)),
                np.random.default_rng(seed).permutation(np.flatnonzero(keep)))
    # Only the labels and row numbers go through datasets: the draw depends on nothing else.
    rows = datasets.Dataset.from_dict(
        {"label": ids, "row": np.arange(n, dtype=np.int64)},
        features=datasets.Features({"label": datasets.ClassLabel(names=list(names)), "row": datasets.Value("int64")}))
    try:
        parts = rows.train_test_split(test_size=validation_fraction, stratify_by_column="label", seed=seed,
                                      shuffle=True)
    except ValueError as exc:
        raise DataError(f"{where}: cannot hold out validation ({validation_fraction:g} of the rows, "
                        f"stratified by label): {exc}") from None
    return np.asarray(parts["train"]["row"], dtype=np.int64), np.asarray(parts["test"]["row"], dtype=np.int64)


def _multi_label_hold_out(n: int, validation_fraction: float, seed: int, validation_split: str,
                          where: str) -> tuple[np.ndarray, np.ndarray]:
    """The hold-out of ``n`` multi-label rows, not stratified (a row carries several labels, or none):
    ``random``: ``ceil(validation_fraction * n)`` rows drawn with ``seed`` (as :func:`held_out_count` counts);
    ``blocks``: blocks of consecutive rows (:func:`block_validation_indices` with one class).

    Raises:
        DataError: fewer than two rows, or (blocks) too few rows to leave one block on each side.
    """
    rng = np.random.default_rng(seed)
    if validation_split == "blocks":
        try:
            held = block_validation_indices(np.zeros(n, dtype=np.int64), validation_fraction, seed)
        except ValueError:
            raise DataError(f"{where}: cannot hold out validation: {n:,} rows are too few to hold out "
                            "blocks") from None
        keep = np.zeros(n, dtype=bool)
        keep[held] = True
        return rng.permutation(np.flatnonzero(~keep)), np.random.default_rng(seed).permutation(held)
    k = _unstratified_count(n, validation_fraction, where)
    order = rng.permutation(n)
    return order[k:], order[:k]


def _unstratified_count(n: int, validation_fraction: float, where: str) -> int:
    """``ceil(validation_fraction * n)``: the rows an unstratified hold-out of ``n`` rows takes (a random draw of
    several labels per text, or the last rows), as :func:`held_out_count` counts them.

    Raises:
        DataError: fewer than two rows, or none left to train on.
    """
    k = math.ceil(validation_fraction * n)
    if n < 2 or k >= n:
        raise DataError(f"{where}: cannot hold out validation ({validation_fraction:g} of {n:,} rows): too few "
                        "rows to train on the rest; add rows or give a dev split")
    return k


def _last_rows(ids: np.ndarray, names: Sequence[str], validation_fraction: float, seed: int,
               where: str) -> tuple[np.ndarray, np.ndarray]:
    """The hold-out of rows in time order: the last ``ceil(validation_fraction * n)`` rows, in file order, validate;
    the others train, shuffled with ``seed``. Not stratified: validation then holds the newest text, as new text
    to predict will be (a random tenth of Reuters' older stories chose settings that did not carry to its later
    test stories: docs/data.md, "Text in time order").

    Raises:
        DataError: too few rows to train on the rest, or (one label per text) a class with every row in the last
            ones, which training would never see.
    """
    n = len(ids)
    k = _unstratified_count(n, validation_fraction, where)
    if np.ndim(ids) == 1:
        unseen = sorted(set(np.asarray(ids[n - k:]).tolist()) - set(np.asarray(ids[:n - k]).tolist()))
        if unseen:
            raise DataError(f"{where}: class {names[unseen[0]]!r} has all its rows among the last {k:,} rows, "
                            "held out for validation (validation_split 'last'), so training would never see it; "
                            "give a dev split, or use validation_split 'random'")
    return np.random.default_rng(seed).permutation(n - k), np.arange(n - k, n, dtype=np.int64)


def _check_classes_can_be_held_out(ids: np.ndarray, names: Sequence[str], where: str) -> None:
    """A stratified hold-out needs two rows of every class: one to train on, one to validate.

    Raises:
        DataError: naming the first class with a single row.
    """
    counts = np.bincount(ids, minlength=len(names))
    rare = [i for i in range(len(names)) if counts[i] == 1]   # absent classes are [data] labels' business
    if rare:
        raise DataError(f"{where}: class {names[rare[0]]!r} has 1 row, too few to hold out "
                        "validation (a class needs at least 2: one to train on, one to validate); add rows of it, "
                        "give a dev split, or drop the class")


@dataclass(frozen=True)
class DataSpec:
    """How to read a source's splits: the ``[data]`` keys that matter, and the run's seed.

    ``max_length`` (``[data] max_length``; 0: none) cuts pretraining texts to what that many tokens can
    come from (:func:`~sentiment_cli.data.tokenizer.clip_text`); labelled splits keep their texts whole.
    ``multi_label`` (``auto``, ``true``, ``false``), ``label_separator`` and ``label_columns``: how labels
    are read, one or several per text (:mod:`~sentiment_cli.data.multilabel`).
    """

    source: str
    validation_fraction: float = 0.1
    seed: int = 1234
    validation_split: str = "random"
    text_column: str = ""
    label_column: str = ""
    labels: tuple[str, ...] = ()
    max_length: int = 0
    unlabelled: str = ""
    multi_label: str = "auto"
    label_separator: str = ""
    label_columns: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config, source: str | None = None) -> "DataSpec":
        """The spec of a run :class:`~sentiment_cli.config.Config` (``source`` overrides ``[data] source``)."""
        d = config.data
        return cls(source or d.source, d.validation_fraction, config.training.seed, d.validation_split,
                   d.text_column, d.label_column, tuple(d.labels), d.max_length, d.unlabelled,
                   d.multi_label, d.label_separator, tuple(d.label_columns))


def is_own_data(config, data: str | None) -> bool:
    """Whether ``data`` (``None``: not given) names the run's own source: the same string or the same local path."""
    return data is None or data == config.data.source \
        or Path(data).expanduser().resolve() == Path(config.data.source).expanduser().resolve()


def scoring_spec(config, split: str = "test", data: str | None = None, text_column: str | None = None,
                 label_column: str | None = None, *, single_file_hint: str,
                 label_columns: Sequence[str] | None = None, multi_label: bool | None = None) -> DataSpec:
    """What a trained run scores ``split`` of: its own data (its columns, label set and hold-out) or ``data``.

    Shared by ``sentiment eval`` and ``sentiment export``'s parity check. ``data`` names the run's
    own source when it is the same string or the same local path; other data is read with its own
    column names unless ``text_column`` / ``label_column`` / ``label_columns`` name them. Both keep the run's
    ``multi_label`` and ``label_separator``: a run trained multi-label with ``multi_label = true`` reads
    other data as multi-label, and the caller maps its labels to the model's label names.

    Args:
        config: the run's :class:`~sentiment_cli.config.Config` (a checkpoint's).
        split: the split to be scored: ``train``, ``validation`` or ``test``.
        data: dataset to score instead of the run's own (Hub id, folder or file).
        text_column, label_column: its columns; default: the run's for its own data, else found by name.
        single_file_hint: what the error below tells the user to do instead (the caller's flags).
        label_columns: its 0/1 label columns (a multi-label model's); default as for the columns above.
        multi_label: whether the model is multi-label: the data is read so (``multi_label`` ``true`` /
            ``false``); ``None``: as the run's config says.

    Raises:
        UsageError: ``test`` of the single file the run was trained on: it has no test split, and
            scoring it would score training data. The message ends with ``single_file_hint``.
    """
    own = is_own_data(config, data)
    spec = DataSpec.from_config(config, source=data)
    if not own or text_column or label_column or label_columns:   # other data: its own column names, unless told
        spec = DataSpec(spec.source, spec.validation_fraction, spec.seed, spec.validation_split,
                        text_column or (spec.text_column if own else ""),
                        label_column or (spec.label_column if own else ""),
                        multi_label=spec.multi_label, label_separator=spec.label_separator,
                        label_columns=tuple(label_columns or (spec.label_columns if own else ())))
    if multi_label is not None:
        spec = dataclasses.replace(spec, multi_label="true" if multi_label else "false")
    if own and split == "test" and is_single_file(spec.source):
        raise UsageError(f"the checkpoint was trained on the single file {spec.source}, which has no test split; "
                         + single_file_hint)
    return spec


def _train_and_validation(src: Source, spec: DataSpec, names: Sequence[str] | None
                          ) -> tuple[_Labelled, tuple[str, ...], np.ndarray, _Labelled | None, np.ndarray]:
    """The training split's rows for train and validation, or the source's own validation split."""
    _need(src, "train")
    train, names = _labelled(src, "train", spec, names)
    if "validation" in src.splits and spec.validation_fraction > 0:   # the source's own (dev) split
        val, _ = _labelled(src, "validation", spec, names)
        return train, names, np.random.default_rng(spec.seed).permutation(len(train.ids)), val, np.arange(len(val.ids))
    train_rows, val_rows = _hold_out(train.ids, names, spec.validation_fraction, spec.seed, spec.validation_split,
                                     train.where)
    return train, names, train_rows, None, val_rows


def load_train_validation(source: str | DataSpec, validation_fraction: float = 0.1, seed: int = 1234,
                          validation_split: str = "random") -> tuple[Split, Split]:
    """``(train, validation)`` of a source, with the label set taken from its training split.

    Validation is the source's own ``validation`` (or ``dev``) split when it has one, with all of
    ``train`` (shuffled with ``seed``) for training; otherwise ``validation_fraction`` of ``train``
    held out as :func:`load_split` describes. With ``validation_fraction`` 0, validation is empty
    and train is all of ``train``.

    Args:
        source: a :class:`DataSpec`, or a source (then the other arguments apply, columns are
            found by name and the label set comes from the data).

    Raises:
        DataError: the source cannot be loaded or its data is unusable (missing or ambiguous
            column, empty text or label, one class, mixed label types, an unseen class in validation).
        UsageError: a named column is missing.
        ConfigError: ``[data] labels`` disagrees with the training data.
    """
    spec = source if isinstance(source, DataSpec) else DataSpec(source, validation_fraction, seed, validation_split)
    return train_validation_of(load_source(spec.source), spec)


def train_validation_of(src: Source, spec: DataSpec, lazy: bool = False) -> tuple[Split, Split]:
    """:func:`load_train_validation` of a source already loaded (``src``, :func:`load_source`'s for ``spec``).
    With ``lazy`` the splits' texts are :class:`~.text_column.Texts`, read when iterated (training's splits).

    Raises:
        DataError, UsageError, ConfigError: as :func:`load_train_validation`.
    """
    train, names, train_rows, val, val_rows = _train_and_validation(src, spec, None)
    return (_split(train, "train", names, train_rows, described=True, lazy=lazy),
            _split(val if val is not None else train, "validation", names, val_rows, lazy=lazy))


def load_split(source: str | DataSpec, name: str, validation_fraction: float = 0.1, seed: int = 1234,
               validation_split: str = "random", *, label_names: Sequence[str] | None = None) -> Split:
    """One split as texts and label ids.

    ``train`` and ``validation`` are drawn as in :func:`load_train_validation`. ``test`` is the
    whole ``test`` split; a single-file source has none, so its ``test`` is the whole file (to
    score a file: ``sentiment eval --data FILE``).

    Args:
        source: a :class:`DataSpec`, or a source (see :func:`load_train_validation`).
        name: ``train``, ``validation`` or ``test``.
        label_names: a trained model's label set: labels are mapped to it, and one it lacks is an
            error. ``None``: the label set comes from the training split.

    Raises:
        UsageError: ``name`` is not train, validation or test, or it is validation and
            ``validation_fraction`` is 0 (and the source has no validation split).
        DataError: as :func:`load_train_validation`; also a missing split, or a label the model never saw.
    """
    spec = source if isinstance(source, DataSpec) else DataSpec(source, validation_fraction, seed, validation_split)
    if name not in SPLITS:
        raise UsageError(f"unknown split {name!r}; choose one of {', '.join(SPLITS)}")
    if name == "validation" and spec.validation_fraction == 0:
        raise UsageError("no validation split: [data] validation_fraction is 0 (the run trained on all of train)")
    src = load_source(spec.source)
    names = tuple(label_names) if label_names is not None else None
    if name == "test":
        split = "train" if src.single_file else "test"
        _need(src, split)
        if names is None:   # the label set of training, from the training split
            _need(src, "train")
            _, names = _labelled(src, "train", spec, None)
        lab, _ = _labelled(src, split, spec, names)
        return _split(lab, "test", names)
    train, names, train_rows, val, val_rows = _train_and_validation(src, spec, names)
    if name == "train":
        return _split(train, "train", names, train_rows, described=True)
    return _split(val if val is not None else train, "validation", names, val_rows)


# What to do when pretraining asks for unlabelled text and there is none.
PRETRAIN_ALONE_HINT = ("give unlabelled text with --unlabelled PATH, or pretrain on the training reviews alone "
                       "with --set pretrain.splits=train")


def load_pretraining_texts(source: str | DataSpec, splits: str, validation_fraction: float = 0.1, seed: int = 1234,
                           validation_split: str = "random", missing_hint: str = PRETRAIN_ALONE_HINT) -> list[str]:
    """Unlabelled texts for pretraining (``sentiment pretrain``), shuffled with ``seed``, each cut by
    :func:`~sentiment_cli.data.tokenizer.clip_text` when the spec has a ``max_length``.

    ``splits`` is ``unsupervised`` (the source's ``unsupervised`` split, e.g. IMDB's 50,000 unlabelled
    reviews, and the spec's ``unlabelled`` texts: :func:`~.unlabelled.unlabelled_texts`), ``train`` (the training
    part of ``train``: validation, drawn as by :func:`load_split`, is left out so it stays unseen;
    all of it when the fraction is 0) or ``unsupervised+train``. The ``test`` split is never read.

    Raises:
        DataError: see :func:`load_source` and :func:`~.unlabelled.load_unlabelled`; also no unlabelled
            text when it is asked for (the message ends with ``missing_hint``).
    """
    spec = source if isinstance(source, DataSpec) else DataSpec(source, validation_fraction, seed, validation_split)
    src = load_source(spec.source)
    found = unlabelled_texts(src, spec.unlabelled, spec.text_column) if "unsupervised" in splits.split("+") else None
    return pretraining_texts_of(src, spec, splits, found, missing_hint)


def pretraining_texts_of(src: Source, spec: DataSpec, splits: str, found: Unlabelled | None,
                         missing_hint: str = PRETRAIN_ALONE_HINT) -> list[str]:
    """:func:`load_pretraining_texts` of a source already loaded (``src``), with its unlabelled texts already
    read (``found``: :func:`~.unlabelled.unlabelled_texts`' for ``spec``; read only when ``splits`` has
    ``unsupervised``).

    Raises:
        DataError: as :func:`load_pretraining_texts`.
    """
    parts = splits.split("+")
    texts: list[str] = []
    if "unsupervised" in parts:
        if found is None:
            raise DataError(f"{spec.source} has no 'unsupervised' split (it has: {', '.join(src.splits)}) and "
                            f"[data] unlabelled is empty; {missing_hint}")
        texts += found.texts
    if "train" in parts:
        train, names, train_rows, _, _ = _train_and_validation(src, spec, None)
        texts += _split(train, "train", names, train_rows).texts
    order = np.random.default_rng(spec.seed).permutation(len(texts))
    texts = [texts[i] for i in order]
    return clip_texts(texts, spec.max_length) if spec.max_length else texts


BLOCK_ROWS = 100

HOLD_OUT_WAYS = {"random": "stratified", "blocks": "stratified, in blocks",
                 "last": "its last rows in file order"}
"""``[data] validation_split``'s ways of holding out validation, in words (the rules' note, the model card), for one
label per text; with several, rows are drawn unstratified (:func:`hold_out_way`)."""


def hold_out_way(validation_split: str, multi_label: bool = False) -> str:
    """How :func:`_hold_out` holds out validation, in words: :data:`HOLD_OUT_WAYS`, unstratified with several labels
    per text (:func:`_multi_label_hold_out`)."""
    if multi_label and validation_split != "last":
        return {"random": "drawn at random", "blocks": "in blocks"}[validation_split]
    return HOLD_OUT_WAYS[validation_split]


def held_out_count(class_counts: Sequence[int], validation_fraction: float, seed: int,
                   validation_split: str = "random") -> tuple[int, int]:
    """``(rows, forced)``: how many of train's rows the hold-out of :func:`_hold_out` takes for these class
    counts, and of how many classes it holds out a row although ``validation_fraction`` of them rounds to none.

    ``random`` (a stratified draw) and ``last`` hold out ``ceil(validation_fraction * rows)`` and force nothing.
    ``blocks`` holds out at least one block, at least one row, of every class (:func:`block_validation_indices`):
    with many small classes that is far more than ``validation_fraction`` (300 classes of 2 rows: 300 of 600).
    The count is exact: the draw's sizes depend only on each class's count and the seed. With several labels per
    text, pass one count, the rows (:func:`_multi_label_hold_out` draws rows, not labels).
    """
    counts = np.asarray([c for c in class_counts if c > 0], dtype=np.int64)
    n = int(counts.sum())
    if validation_fraction == 0 or n == 0:
        return 0, 0
    if validation_split != "blocks":
        return math.ceil(validation_fraction * n), 0
    forced = int((np.rint(validation_fraction * counts) == 0).sum())   # round() as block_validation_indices
    try:
        rows = len(block_validation_indices(np.repeat(np.arange(len(counts)), counts), validation_fraction, seed))
    except ValueError:   # a class too small for blocks: the hold-out itself says so
        rows = int(sum(max(1, round(validation_fraction * c)) for c in counts))
    return rows, forced


def block_validation_indices(labels: Sequence[int], validation_fraction: float, seed: int) -> np.ndarray:
    """Rows held out for validation as whole runs ("blocks") of consecutive reviews of one label.

    IMDB keeps a movie's reviews together: rows are ordered by review id, and
    one movie's reviews (up to 30) sit within a few rows of each other.
    A random 10% of ``train`` therefore shares movies with the other 90%, and
    a model that memorises a movie's names and title is rewarded on validation
    but not on ``test`` (other movies). Holding out blocks of ``BLOCK_ROWS``
    consecutive rows keeps most movies on one side.

    For each label, its rows (in dataset order) are cut into blocks of
    ``min(BLOCK_ROWS, k // 10)`` rows (at least 1), where ``k`` =
    ``round(validation_fraction * rows)``, and ``round(k / block)`` blocks
    drawn with ``seed`` go to validation: about ``validation_fraction`` of each
    label, in at least ~10 blocks.

    Args:
        labels: label of each row, in dataset order.
        validation_fraction: share of each label to hold out, in (0, 1).
        seed: seed of the draw.

    Returns:
        Sorted row indices, int64.

    Raises:
        ValueError: a label has too few rows to leave one block on each side.
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    chosen = []
    for label in np.unique(labels):
        rows = np.flatnonzero(labels == label)
        k = round(validation_fraction * len(rows))
        block = max(1, min(BLOCK_ROWS, k // 10))
        starts = np.arange(0, len(rows), block)
        take = max(1, round(k / block))
        if take >= len(starts):
            raise ValueError(f"label {label} has {len(rows)} rows: too few to hold out blocks")
        for start in rng.choice(starts, size=take, replace=False):
            chosen.append(rows[start:start + block])
    return np.sort(np.concatenate(chosen))


@dataclass
class Rows:
    """One split of a source whole, in the source's own row order (``sentiment audit``).

    Attributes:
        split: the texts and label ids, row ``i`` of the source at index ``i``; its label set comes from
            this split (or ``[data] labels``), as training derives one.
        dataset: the split's ``datasets.Dataset`` with all its columns, in the same order.
        file: the file the split was read from, or ``None`` (a Hub dataset, the Hub layout, ``aclImdb``).
        text_column, label_column: the columns found (or named); ``label_column`` is ``""`` for 0/1 label
            columns (one per label: ``split.label_names``).
    """

    split: Split
    dataset: Any
    file: str | None
    text_column: str
    label_column: str


def load_rows(source: str | DataSpec, name: str = "train") -> Rows:
    """The labelled rows of split ``name`` of a source, whole and unshuffled (no validation hold-out).

    A single-file source has only ``train`` (the whole file).

    Raises:
        UsageError: ``name`` is not train, validation or test; a named column is missing.
        DataError: as :func:`load_train_validation`; also a split the source does not have.
    """
    spec = source if isinstance(source, DataSpec) else DataSpec(source)
    if name not in SPLITS:
        raise UsageError(f"unknown split {name!r}; choose one of {', '.join(SPLITS)}")
    src = load_source(spec.source)
    _need(src, name)
    lab, names = _labelled(src, name, spec, None)
    return Rows(_split(lab, name, names, described=True), src.splits[name], src.files.get(name), lab.text_column,
                lab.label_column)

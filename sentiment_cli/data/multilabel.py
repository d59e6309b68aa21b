"""Multi-label data: recognising several labels per text, and reading them as a multi-hot matrix.

How a source's labels are read (a :class:`Reading`) is decided once, on its training split
(:func:`find_reading`), and applied to every split (:func:`read_split`):

- ``lists``: the label column holds lists (a JSON list in JSON Lines, an Arrow list in Parquet);
- ``joined``: the label column holds text, several labels joined by a separator (``"approval,neutral"``);
  with no separator (``multi_label = true`` on single labels) each row carries its one label;
- ``columns``: one 0/1 column per label (int, bool, or the text ``"0"`` / ``"1"``), named by
  ``[data] label_columns`` or, when no label column is found by name, every column besides the text
  column and id-like ones (``id``, ``*_id``, case-insensitive) when there are two or more and all hold only 0/1;
- ``single``: one label per row (:mod:`sentiment_cli.data.labels` reads it).

The label column is found as for single labels (:data:`~.columns.LABEL_COLUMNS`), then by the name ``labels``.

**Separator rule** (``[data] label_separator`` empty): a separator among ``,`` ``;`` ``|`` joins labels when
(1) some distinct label value holds it, (2) every value split on it gives pieces that are not blank after
stripping, and (3) some piece occurs in two distinct values (``neutral`` alone and in ``approval,neutral``;
or ``a`` in ``a,b`` and ``a,c``): a name that recurs is a label, which a free-text class such as
``"Hello, world"`` is not. Two separators passing the rule are an error (name one with
``label_separator``). A named ``label_separator`` joins labels wherever it occurs. With ``multi_label =
true`` condition (3) is dropped; with ``false``, labels that pass the rule are an error that suggests
``--multi-label``.

A multi-label split's labels are a ``(rows, num_labels)`` uint8 matrix; a row of zeros (an empty list, an
empty field) is a text without a label. Label columns are read with Arrow compute (no Python object per
row), except a JSON column whose values differ in type (decoded row by row to name the bad row).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, DataError, UsageError
from ..wording import listed, plural
from .columns import LABEL_COLUMNS, resolve_column
from .labels import RESERVED_LABELS, raw_labels

SEPARATORS = (",", ";", "|")
MORE_LABEL_COLUMNS = ("labels",)   # looked for when no column has a usual single-label name
ID_COLUMN = re.compile(r"^(id|.*_id)$", re.IGNORECASE)
RESERVED = RESERVED_LABELS + ("micro", "samples")   # the multi-label averages of the metrics
MULTI_LABEL_FLAG = "--multi-label ([data] multi_label = true)"
_INTEGER = re.compile(r"^[+-]?[0-9]+$")


@dataclass(frozen=True)
class Options:
    """The ``[data]`` keys of multi-label reading: ``multi_label`` (auto, true, false), ``label_separator``
    (empty: found by the rule) and ``label_columns`` (empty: found)."""

    multi_label: str = "auto"
    separator: str = ""
    columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reading:
    """How a source's labels are read: ``kind`` (``single``, ``lists``, ``joined``, ``columns``), the label
    ``column`` (not for ``columns``), the ``separator`` of ``joined`` (empty: one label per row), and the
    0/1 ``columns`` in file (or ``label_columns``) order."""

    kind: str
    column: str = ""
    separator: str = ""
    columns: tuple[str, ...] = ()

    @property
    def multi_label(self) -> bool:
        return self.kind != "single"


def find_label_column(columns: Sequence[str], wanted: str, where: str) -> str | None:
    """The label column: ``wanted`` (``[data] label_column``), else the one named like
    :data:`~.columns.LABEL_COLUMNS`, else the one named ``labels``; ``None`` when there is none.

    Raises:
        UsageError: ``wanted`` is not a column.
        DataError: several columns have a usual name.
    """
    if wanted or any(c.lower() in LABEL_COLUMNS for c in columns):
        return resolve_column(columns, wanted, LABEL_COLUMNS, "label", where)
    hits = [c for c in columns if c.lower() in MORE_LABEL_COLUMNS]
    return hits[0] if len(hits) == 1 else None


def find_reading(ds, text: str, label_column: str, options: Options, where: str) -> Reading | None:
    """How the labels of ``ds`` (a training split, its texts in column ``text``) are read; ``None`` when
    there is no label column and no 0/1 columns (the caller reports the missing column).

    Raises:
        ConfigError: ``label_columns`` with ``multi_label`` false.
        UsageError: a named column is missing, or ``label_columns`` names the text column.
        DataError: a label column that mixes formats; several separators; with ``multi_label`` false,
            lists or joined labels (the message suggests ``--multi-label``).
    """
    if options.columns:
        if options.multi_label == "false":
            raise ConfigError("[data] label_columns names one 0/1 column per label, which is multi-label, but "
                              "[data] multi_label is false; drop one of them")
        check_columns(ds.column_names, options.columns, text, where, named=True)
        return Reading("columns", columns=tuple(options.columns))
    label = find_label_column(ds.column_names, label_column, where)
    if label is None:
        found = binary_columns(ds, text) if options.multi_label != "false" else ()
        return Reading("columns", columns=found) if found else None
    if label == text:
        return Reading("single", label)   # the single-label path refuses it
    return _column_reading(ds, label, options, where)


def _column_reading(ds, label: str, options: Options, where: str) -> Reading:
    """The reading of label column ``label`` (see :func:`find_reading`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    mode, col = options.multi_label, ds.data.column(label)
    if _is_list(col.type):
        if mode == "false":
            raise DataError(f"{where}: column {label!r} holds lists of labels (several per text) and [data] "
                            f"multi_label is false; train multi-label with {MULTI_LABEL_FLAG}")
        return Reading("lists", label)
    if type(ds.features[label]).__name__ == "Json":
        values = _json_values(col)
        if any(isinstance(v, list) for v in values):
            _refuse_mixed_formats(values, label, where)
            return Reading("lists", label)
        return Reading("single", label)   # scalars of several types: the single-label path names them
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return Reading("joined", label) if mode == "true" else Reading("single", label)
    keys = pc.utf8_trim_whitespace(col.combine_chunks().cast(pa.string()))
    values = [v for v in pc.unique(keys).to_pylist() if v]
    sep = _separator(values, options, strict=mode != "true", where=f"{where}: column {label!r}")
    if mode == "false" and sep:
        first = next(v for v in values if sep in v)
        raise DataError(f"{where}, row {pc.index(keys, first).as_py() + 1}: label {first!r} in column {label!r} "
                        f"holds several labels joined by {sep!r}, but [data] multi_label is false; train "
                        f"multi-label with {MULTI_LABEL_FLAG}")
    if mode == "true" or (mode == "auto" and sep):
        return Reading("joined", label, sep)
    return Reading("single", label)


def _separator(values: list[str], options: Options, strict: bool, where: str) -> str:
    """The separator joining labels among the distinct non-blank ``values``, or ``""`` (the module's rule).

    Raises:
        DataError: two separators pass the rule.
    """
    if options.separator:
        return options.separator if any(options.separator in v for v in values) else ""
    found = [s for s in SEPARATORS if _joins(values, s, strict)]
    if len(found) > 1:
        raise DataError(f"{where}: labels are joined by both {found[0]!r} and {found[1]!r}; name the separator "
                        "with --set data.label_separator=...")
    return found[0] if found else ""


def _joins(values: list[str], sep: str, strict: bool) -> bool:
    """Whether ``sep`` joins labels in ``values``: it occurs, every piece is non-blank and (``strict``) some
    piece recurs in two distinct values."""
    if not any(sep in v for v in values):
        return False
    pieces = [{p.strip() for p in v.split(sep)} for v in values]
    if any("" in p for p in pieces):
        return False
    if not strict:
        return True
    seen = Counter(p for ps in pieces for p in ps)
    return any(seen[p] > 1 for ps in pieces if len(ps) > 1 for p in ps)


def _is_list(arrow_type) -> bool:
    import pyarrow as pa

    return pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) \
        or pa.types.is_fixed_size_list(arrow_type)


def _json_values(col) -> list:
    """A ``Json`` column's values decoded (``None``: missing)."""
    import pyarrow as pa

    return [None if v is None else json.loads(v) for v in col.cast(pa.string()).to_pylist()]


def _refuse_mixed_formats(values: list, column: str, where: str) -> None:
    """Raise :class:`DataError` naming a list row and a row of another format, when ``values`` mix them."""
    first = next(i for i, v in enumerate(values) if isinstance(v, list))
    other = next((i for i, v in enumerate(values) if v is not None and not isinstance(v, list)), None)
    if other is not None:
        raise DataError(f"{where}: column {column!r} mixes formats: row {first + 1} holds a list "
                        f"({values[first]!r}), row {other + 1} {type(values[other]).__name__} "
                        f"({values[other]!r}); write every row's labels as a list")


def binary_columns(ds, text: str) -> tuple[str, ...]:
    """The 0/1 label columns of ``ds`` found without a name: every column besides ``text`` and id-like
    ones (:data:`ID_COLUMN`), in file order, when there are two or more and all hold only 0/1; else ``()``."""
    others = [c for c in ds.column_names if c != text and not ID_COLUMN.match(c)]
    if len(others) < 2 or any(_zero_one(ds.data.column(c))[0] is None for c in others):
        return ()
    return tuple(others)


def check_columns(columns: Sequence[str], wanted: Sequence[str], text: str, where: str, named: bool) -> None:
    """Check that the 0/1 label columns ``wanted`` are among ``columns`` and are not the text column.

    Raises:
        UsageError: a column is missing (``named``: the user named it) or is the text column.
        DataError: a column found in train is missing here.
    """
    for c in wanted:
        if c == text:
            raise UsageError(f"{where}: column {c!r} cannot hold both the texts and a label")
        if c not in columns:
            found = ", ".join(columns) or "none"
            if named:
                raise UsageError(f"{where}: no column {c!r} (--label-columns, [data] label_columns); "
                                 f"columns: {found}")
            raise DataError(f"{where}: no column {c!r}, one of the 0/1 label columns of train; columns: {found}")


def _zero_one(col) -> tuple[np.ndarray | None, int]:
    """``(values (rows,) uint8, -1)`` of a 0/1 column (int, float, bool, or text ``"0"``/``"1"``), else
    ``(None, the first row that is missing or not 0 or 1)``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    t = col.type
    if pa.types.is_boolean(t):
        good, ones = pc.is_valid(col), col
    elif pa.types.is_integer(t) or pa.types.is_floating(t):
        good, ones = pc.is_in(col, value_set=pa.array([0, 1]).cast(t)), pc.equal(col, pa.scalar(1).cast(t))
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        col = pc.utf8_trim_whitespace(col)
        good, ones = pc.is_in(col, value_set=pa.array(["0", "1"], t)), pc.equal(col, pa.scalar("1", t))
    else:
        return None, 0
    good = pc.fill_null(good, False)
    if len(col) and not pc.all(good).as_py():
        return None, pc.indices_nonzero(pc.invert(good))[0].as_py()
    return pc.fill_null(ones, False).to_numpy(zero_copy_only=False).astype(np.uint8), -1


def _columns_matrix(ds, columns: Sequence[str], where: str) -> np.ndarray:
    """The ``(rows, len(columns))`` uint8 matrix of 0/1 columns.

    Raises:
        DataError: a value that is missing or not 0 or 1 (naming the row, the column and the value).
    """
    matrix = np.zeros((len(ds), len(columns)), dtype=np.uint8)
    for j, c in enumerate(columns):
        col = ds.data.column(c)
        values, bad = _zero_one(col)
        if values is None:
            value = col[bad].as_py() if len(col) else None
            what = "no value" if value is None else f"{value!r}"
            raise DataError(f"{where}, row {bad + 1}: column {c!r} holds {what}; a label column holds 0 or 1 "
                            "(1: the text carries the label)")
        matrix[:, j] = values
    return matrix


def _check_format(ds, reading: Reading, where: str) -> None:
    """Check that this split's label column has train's format.

    Raises:
        DataError: the column is missing, or holds lists where train's holds text or the other way round.
    """
    if reading.column not in ds.column_names:
        raise DataError(f"{where}: no column {reading.column!r}, the label column of train; columns: "
                        f"{', '.join(ds.column_names) or 'none'}")
    col = ds.data.column(reading.column)
    lists = _is_list(col.type) or (type(ds.features[reading.column]).__name__ == "Json"
                                   and any(isinstance(v, list) for v in _json_values(col)))
    if lists != (reading.kind == "lists"):
        mine, train = ("lists", "single or joined labels") if lists else ("single or joined labels", "lists")
        raise DataError(f"{where}: column {reading.column!r} mixes formats: it holds {mine} here but {train} in "
                        "train; write every split's labels one way")


def _label_keys(ds, reading: Reading, where: str):
    """``(rows (k,) int64, names: pyarrow string array (k,))``: one entry per label a row carries.

    Raises:
        DataError: a list holding something other than strings or integers, a missing or blank label in
            a list, an empty label between separators, a list mixed with other values.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    _check_format(ds, reading, where)
    col = ds.data.column(reading.column).combine_chunks()
    if reading.kind == "lists":
        if type(ds.features[reading.column]).__name__ == "Json":
            values = _json_values(col)
            _refuse_mixed_formats(values, reading.column, where)
            col = _typed_lists(values, reading.column, where)
        return _list_keys(col, reading.column, where, "in a list")
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        col = raw_labels(ds, reading.column, where).keys   # integers, bools, ClassLabel names as text
    keys = pc.utf8_trim_whitespace(col.cast(pa.string()))
    keys = pc.if_else(pc.equal(keys, ""), pa.scalar(None, pa.string()), keys)   # a blank field: no label
    if reading.separator:
        return _list_keys(pc.split_pattern(keys, reading.separator), reading.column, where,
                          f"between separators ({reading.separator!r})")
    rows = pc.indices_nonzero(pc.is_valid(keys)).to_numpy(zero_copy_only=False).astype(np.int64)
    return rows, pc.drop_null(keys)


def _typed_lists(values: list, column: str, where: str):
    """A JSON column of lists whose items differ in type, as an Arrow list of strings (integers as text).

    Raises:
        DataError: an item that is not a string or an integer (naming its row).
    """
    import pyarrow as pa

    for i, v in enumerate(values):
        for item in v or ():
            if item is not None and (isinstance(item, bool) or not isinstance(item, (str, int))):
                raise DataError(f"{where}, row {i + 1}: column {column!r} holds {item!r} in a list; labels in "
                                "a list are strings or integers")
    return pa.array([None if v is None else [None if x is None else str(x) for x in v] for v in values],
                    pa.list_(pa.string()))


def _list_keys(col, column: str, where: str, place: str):
    """``(rows, names)`` of an Arrow list column of labels, each stripped.

    Raises:
        DataError: an item that is not a string or an integer, or a missing or blank one (naming its row).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = pc.list_parent_indices(col).to_numpy(zero_copy_only=False).astype(np.int64)
    items = pc.list_flatten(col)
    t = items.type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)):
        raise DataError(f"{where}: column {column!r} holds lists of {t}; labels in a list are strings or integers")
    items = pc.utf8_trim_whitespace(items.cast(pa.string()))
    blank = pc.fill_null(pc.equal(items, ""), True)
    if pc.any(blank).as_py():
        row = int(rows[pc.indices_nonzero(blank)[0].as_py()])
        raise DataError(f"{where}, row {row + 1}: an empty label {place} in column {column!r}")
    return rows, items


def _sorted_names(names: Sequence[str]) -> tuple[str, ...]:
    """Distinct label names sorted: by value when every one is an integer, else as text."""
    if names and all(_INTEGER.match(n) for n in names):
        return tuple(sorted(names, key=int))
    return tuple(sorted(names))


def _train_names(found: Sequence[str], configured: Sequence[str], where: str, what: str) -> tuple[str, ...]:
    """The label set of training: ``configured`` ([data] labels) when given, else ``found``.

    Raises:
        ConfigError: ``configured`` lacks a label of the data (or, for 0/1 columns, names a column the
            data has not).
        DataError: fewer than two labels, or a label named like an average of the metrics.
    """
    if configured:
        missing = [n for n in found if n not in configured]
        if missing:
            raise ConfigError(f"[data] labels does not list {plural(len(missing), what)} of {where}: "
                              f"{listed(map(repr, missing))}")
        found = tuple(configured)
    if len(found) < 2:
        raise DataError(f"{where}: {plural(len(found), 'label')} ({listed(found)}) in the training data; a "
                        "multi-label classifier needs at least two")
    if reserved := [n for n in found if n in RESERVED]:
        raise DataError(f"{where}: a label named {reserved[0]!r} would clash with the {reserved[0]} average in "
                        "the metrics; rename it")
    return tuple(found)


def _multi_hot(rows: np.ndarray, keys, n: int, names: Sequence[str], where: str, split: str,
               training: bool) -> np.ndarray:
    """The ``(n, len(names))`` uint8 matrix with a 1 at each ``(rows[k], id of keys[k])``.

    Raises:
        ConfigError: (``training``) a label that ``[data] labels`` does not list.
        DataError: a label outside ``names`` (naming the label, the split and the row).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pc.index_in(keys, value_set=pa.array(list(names), pa.string()))
    if ids.null_count:
        k = pc.indices_nonzero(pc.is_null(ids))[0].as_py()
        label, row = keys[k].as_py(), int(rows[k]) + 1
        if training:
            raise ConfigError(f"[data] labels does not list {label!r}, a label of {where}, row {row} "
                              f"(listed: {listed(names)})")
        raise DataError(f"{where} ({split} split), row {row}: label {label!r} is not one of the "
                        f"{len(names)} labels seen in training ({listed(names)})")
    matrix = np.zeros((n, len(names)), dtype=np.uint8)
    matrix[rows, ids.to_numpy(zero_copy_only=False).astype(np.int64)] = 1
    return matrix


def _by_names(matrix: np.ndarray, columns: Sequence[str], names: Sequence[str], where: str) -> np.ndarray:
    """The 0/1 columns' matrix with its columns in the order of ``names``.

    Raises:
        DataError: a column that is not a label of ``names``, or a label without a column.
    """
    if extra := [c for c in columns if c not in names]:
        raise DataError(f"{where}: label column {extra[0]!r} is not one of the {len(names)} labels seen in "
                        f"training ({listed(names)})")
    if missing := [n for n in names if n not in columns]:
        raise DataError(f"{where}: no 0/1 column for {plural(len(missing), 'label')} seen in training: "
                        f"{listed(missing)}")
    return matrix[:, [list(columns).index(n) for n in names]]


def read_split(ds, reading: Reading, where: str, split: str, names: Sequence[str] | None,
               configured: Sequence[str] = ()) -> tuple[np.ndarray, tuple[str, ...]]:
    """One split's labels read as ``reading`` says: ``(matrix (rows, num_labels) uint8, label names)``.

    ``names`` is the label set to map to (train's, or a trained model's); ``None`` derives it from this
    split (training): ``configured`` ([data] labels) when given, else the sorted distinct names (0/1
    columns: their order).

    Raises:
        ConfigError: ``configured`` lacks a label of the data.
        DataError: as :func:`_label_keys` and :func:`_columns_matrix`; a label outside ``names`` (naming
            it, the split and the row); in training, fewer than two labels or a label never positive.
    """
    training = names is None
    if reading.kind == "columns":
        check_columns(ds.column_names, reading.columns, "", where, named=False)
        matrix = _columns_matrix(ds, reading.columns, where)
        if training:
            names = _train_names(reading.columns, configured, where, "0/1 column")
        matrix = _by_names(matrix, reading.columns, names, where)
    else:
        rows, keys = _label_keys(ds, reading, where)
        if training:
            import pyarrow.compute as pc

            names = _train_names(_sorted_names(pc.unique(keys).to_pylist()), configured, where, "label")
        matrix = _multi_hot(rows, keys, len(ds), names, where, split, training and bool(configured))
    if training:
        _check_positive(matrix, names, where)
    return matrix, tuple(names)


def _check_positive(matrix: np.ndarray, names: Sequence[str], where: str) -> None:
    """Every label of training is carried by some text.

    Raises:
        DataError: naming the labels no text carries (at most 20, and their count).
    """
    never = [n for n, c in zip(names, matrix.sum(axis=0)) if c == 0]
    if never:
        raise DataError(f"{where}: {plural(len(never), 'label')} never positive in the training data "
                        f"({listed(never)}); a label needs a text to learn from: add texts that carry it, or "
                        "drop it from [data] labels / label_columns")


def describe(reading: Reading, matrix: np.ndarray, names: Sequence[str]) -> str:
    """One line on how a multi-label split was read, e.g. ``multi-label: column 'labels', labels joined by ','
    (28 labels; 6,541 of 43,410 rows carry several; 0 carry none)``."""
    per_row = np.asarray(matrix).sum(axis=1)
    counts = (f"{int((per_row > 1).sum()):,} of {len(per_row):,} rows carry several; "
              f"{int((per_row == 0).sum()):,} carry none")
    if reading.kind == "columns":
        return f"multi-label: {len(names)} 0/1 columns ({listed(names)}; {counts})"
    how = {"lists": "lists of labels", "joined": f"labels joined by {reading.separator!r}"}[reading.kind]
    if reading.kind == "joined" and not reading.separator:
        how = "one label per row"
    return f"multi-label: column {reading.column!r}, {how} ({plural(len(names), 'label')}; {counts})"

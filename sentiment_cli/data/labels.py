"""The label set of a dataset and each row's label id.

Labels are integers or strings (or a ``ClassLabel``); the label set comes from the training split (the
``ClassLabel``'s names, else the sorted distinct values) unless ``[data] labels`` fixes names and order.
A label's id is its position in the set. IMDB's ``ClassLabel`` names ``neg``/``pos`` are reported as
``negative``/``positive`` (:data:`LABELS`), its names before label sets became configurable.

Label columns are read with Arrow compute: no Python object per row.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError
from ..wording import plural

LABELS = ("negative", "positive")   # IMDB's label names, by id; also those of checkpoints that predate label sets
# Two-class sentiment's labels, the one definition: LABELS, and the other names data gives them (IMDB's ClassLabel
# "neg" / "pos"): what negation augmentation flips (training/augment.py) and the built-in behavioural suite expects.
SENTIMENT_ALIASES = {"negative": ("neg",), "positive": ("pos",)}
NUM_LABELS = len(LABELS)
# Per-class metrics sit beside these averages in `eval --json` (precision: {"neg": .., "macro": ..}).
RESERVED_LABELS = ("macro", "weighted")
# A dataset's ClassLabel names -> the names this tool reports: IMDB keeps its output contract.
CLASSLABEL_ALIASES = {tuple(SENTIMENT_ALIASES[name][0] for name in LABELS): LABELS}

_INTEGER = r"^\s*[+-]?[0-9]+\s*$"
IMBALANCE_RATIO = 5.0   # classes balanced (train's loss, the audit's fits) above this largest-to-smallest ratio
MAX_INTEGER_LABEL_CHARS = 40   # an integer label is a class number; int() of thousands of digits is refused


@dataclass
class RawLabels:
    """A split's labels as text keys (``None`` = missing), and what they were: ``classlabel``, ``int``, ``str``, ``bool``."""

    keys: Any            # pyarrow string array, one per row
    kind: str
    names: tuple[str, ...] = ()   # ClassLabel names (aliased), when kind is classlabel


def raw_labels(ds, column: str, where: str) -> RawLabels:
    """Read a label column as text keys, one per row (Arrow compute: no Python objects per row).

    Integers and integer strings (``"4"``, as every CSV field is text) both give ``"4"``, so a CSV
    and a JSON file of the same labels agree. String labels are stripped of surrounding whitespace and
    otherwise kept as written (``"01"`` stays ``"01"``): see :func:`_string_labels`.

    Raises:
        DataError: labels that are fractional, NaN, infinite or beyond 2**53 (naming the row), lists, of
            mixed types (naming the first row whose type differs from the first row's), or two labels
            that are one after stripping, or one number written two ways (naming both).
    """
    import datasets
    import pyarrow as pa
    import pyarrow.compute as pc

    feature = ds.features[column]
    col = ds.data.column(column).combine_chunks()
    if isinstance(feature, datasets.ClassLabel):
        names = tuple(CLASSLABEL_ALIASES.get(tuple(feature.names), feature.names))
        ids = pc.if_else(pc.less(col, 0), pa.scalar(None, col.type), col)   # -1: unlabelled (as on the Hub)
        return RawLabels(pc.take(pa.array(names, pa.string()), ids), "classlabel", names)
    dtype = getattr(feature, "dtype", None)
    if dtype in ("string", "large_string"):
        return _string_labels(col.cast(pa.string()), column, where)
    if dtype and (dtype.startswith("int") or dtype.startswith("uint")):
        return RawLabels(pc.cast(col, pa.string()), "int")
    if dtype == "bool":
        return RawLabels(pc.if_else(col, "true", "false"), "bool")
    if dtype and dtype.startswith("float"):
        _check_whole_numbers(col, column, where)
        return RawLabels(pc.cast(pc.cast(col, pa.int64()), pa.string()), "int")
    if type(feature).__name__ == "Json":   # JSON values of several types in one column
        values = [None if v is None else json.loads(v) for v in col.cast(pa.string()).to_pylist()]
        _mixed(where, column, [(_json_kind(v), v) for v in values])
    raise DataError(f"{where}: column {column!r} holds {feature}; labels must be integers or strings")


def _string_labels(col, column: str, where: str) -> RawLabels:
    """String labels (``col``: a pyarrow string array) stripped of surrounding whitespace: ``str``, or
    ``int`` when every label is an integer (sorted by value, kept as written).

    This is the one normalisation: ``"pos "`` is ``"pos"``, and nothing else is merged (no case
    folding, no parsing of ``"01"`` as ``1``).

    Raises:
        DataError: two distinct labels that strip to one (``"pos"`` and ``"pos "``), one integer written
            two ways (``"1"`` and ``"01"``), or integers mixed with other strings; naming both and their rows.
    """
    import pyarrow.compute as pc

    col = _stripped(col, column, where)
    valid = pc.drop_null(col)
    n_int = pc.sum(pc.match_substring_regex(valid, _INTEGER)).as_py() or 0
    if n_int == 0:
        return RawLabels(col, "str")
    if n_int < len(valid):
        kinds = pc.match_substring_regex(col, _INTEGER)
        _mixed(where, column, [("an integer" if k else "a string", v) for k, v in zip(kinds.to_pylist(), col.to_pylist())])
    values = _refuse_merged(col, column, where, _integer_key, "are one number written two ways (labels are "
                                                              "compared as text)")
    if long := next((v for v in values if len(v) > MAX_INTEGER_LABEL_CHARS), None):
        raise DataError(f"{where}, row {pc.index(col, long).as_py() + 1}: label {long[:40]}… in column {column!r} "
                        f"has {len(long):,} characters; integer labels are class numbers")
    return RawLabels(col, "int")


def _integer_key(label: str) -> str:
    """The number an integer label (``[+-]?[0-9]+``) is, as text: ``"+01"`` -> ``"1"``, ``"-0"`` -> ``"0"``."""
    digits = label.lstrip("+-").lstrip("0")
    return ("-" if label.startswith("-") and digits else "") + (digits or "0")


def _stripped(col, column: str, where: str):
    """``col`` with each label stripped of surrounding whitespace (Python objects per distinct label only).

    Raises:
        DataError: two distinct labels strip to one.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    values = _refuse_merged(col, column, where, str.strip, "differ only in surrounding whitespace (labels are "
                                                           "compared with it stripped)")
    if all(v == v.strip() for v in values):
        return col
    return pc.take(pa.array([v.strip() for v in values], pa.string()),
                   pc.index_in(col, value_set=pa.array(values, pa.string())))


def _refuse_merged(col, column: str, where: str, key, why: str) -> list[str]:
    """The distinct labels of ``col`` (first seen first); raise :class:`DataError` naming the first two
    (and their first rows) that ``key`` maps to one value, saying ``why`` that is refused."""
    import pyarrow.compute as pc

    values = [v for v in pc.unique(col).to_pylist() if v is not None]
    seen: dict = {}
    for value in values:
        other = seen.setdefault(key(value), value)
        if other != value:
            rows = [pc.index(col, v).as_py() + 1 for v in (other, value)]
            raise DataError(f"{where}: labels {other!r} (row {rows[0]}) and {value!r} (row {rows[1]}) in column "
                            f"{column!r} {why}; write each class one way")
    return values


def _check_whole_numbers(col, column: str, where: str) -> None:
    """Refuse float labels that are not whole numbers a class id can be read from.

    Raises:
        DataError: the first row holding NaN, an infinity, a fractional number, or one beyond 2**53
            (where floats stop holding every integer).
    """
    import math

    import pyarrow.compute as pc

    bad = pc.or_(pc.invert(pc.is_finite(col)),
                 pc.or_(pc.not_equal(pc.floor(col), col), pc.greater(pc.abs(col), 2.0 ** 53)))
    bad = pc.fill_null(bad, False)
    if not pc.any(bad).as_py():
        return
    row = pc.indices_nonzero(bad)[0].as_py()
    value = col[row].as_py()
    if not math.isfinite(value):
        raise DataError(f"{where}, row {row + 1}: label {'NaN' if math.isnan(value) else value} in column "
                        f"{column!r} is not a number; labels must be integers or strings")
    if value != math.floor(value):
        raise DataError(f"{where}, row {row + 1}: column {column!r} holds fractional numbers such as {value}; "
                        "labels must be integers or strings (classes, not scores)")
    raise DataError(f"{where}, row {row + 1}: label {value:g} in column {column!r} is too large for a class "
                    "number; labels must be integers or strings")


def _json_kind(value: Any) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), "a list or object")


def _mixed(where: str, column: str, kinds: list[tuple[str, Any]]) -> None:
    """Raise :class:`DataError` naming the first row whose kind differs from the first labelled row's."""
    first = next(((i, k, v) for i, (k, v) in enumerate(kinds) if v is not None), None)
    if first is not None:
        i0, k0, v0 = first
        for i, (k, v) in enumerate(kinds):
            if v is not None and k != k0:
                raise DataError(f"{where}: mixed label types in column {column!r}: row {i0 + 1} holds {k0} "
                                f"({v0!r}), row {i + 1} {k} ({v!r}); use one type for all labels")
    raise DataError(f"{where}: column {column!r}: labels must be integers or strings")


def label_set(raw: RawLabels, configured: Sequence[str], where: str) -> tuple[str, ...]:
    """The label names, by id: ``configured`` ([data] labels) when given, else the ClassLabel names,
    else the sorted distinct values (integers by value).

    Raises:
        ConfigError: ``configured`` lacks a label the data has, or lists one it does not have.
        DataError: fewer than two classes, or a label named like an average (``macro``, ``weighted``).
    """
    import pyarrow.compute as pc

    present = [v for v in pc.unique(raw.keys).to_pylist() if v is not None]
    if raw.kind == "classlabel":
        found = raw.names
    elif raw.kind == "int":
        found = tuple(sorted(present, key=int))
    else:
        found = tuple(sorted(present))
    if configured:
        configured = tuple(configured)
        missing = [v for v in found if v not in configured and (raw.kind != "classlabel" or v in present)]
        extra = [v for v in configured if v not in found]
        if missing or extra:
            what = "; ".join(x for x in (f"it does not list {', '.join(map(repr, missing))}" if missing else "",
                                        f"the data has no {', '.join(map(repr, extra))}" if extra else "") if x)
            raise ConfigError(f"[data] labels = {list(configured)} disagrees with {where}: {what} "
                              f"(labels in the data: {', '.join(found)})")
        found = configured
    if len(set(present)) < 2:
        only = f" ({present[0]!r})" if present else ""
        raise DataError(f"{where}: only one class{only} in the training data; a classifier needs at least two")
    reserved = [n for n in found if n in RESERVED_LABELS]
    if reserved:
        raise DataError(f"{where}: a label named {reserved[0]!r} would clash with the {reserved[0]} average in "
                        "the metrics; rename it")
    return tuple(found)


def label_ids(raw: RawLabels, names: Sequence[str], where: str, column: str, training: bool) -> np.ndarray:
    """Label ids (``(rows,)`` int64) of ``raw`` in the label set ``names``.

    Raises:
        DataError: a row without a label, or with a label outside ``names`` (naming ``where`` and the row).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = raw.keys
    if keys.null_count:
        row = pc.indices_nonzero(pc.is_null(keys))[0].as_py()
        raise DataError(f"{where}, row {row + 1}: no label (column {column!r} is empty; "
                        f"{plural(keys.null_count, 'such row')})")
    ids = pc.index_in(keys, value_set=pa.array(list(names), pa.string()))
    if ids.null_count:
        row = pc.indices_nonzero(pc.is_null(ids))[0].as_py()
        value = keys[row].as_py()
        if training:
            raise ConfigError(f"[data] labels does not list {value!r}, the label of {where}, row {row + 1} "
                              f"(listed: {', '.join(names)})")
        raise DataError(f"{where}, row {row + 1}: label {value!r} is not one of the {len(names)} classes "
                        f"seen in training ({', '.join(names)})")
    if blank := [n for n in names if not n.strip()]:
        raise DataError(f"{where}: a label is empty or only whitespace ({blank[0]!r})")
    return ids.to_numpy(zero_copy_only=False).astype(np.int64)


def imbalance(class_counts: Sequence[int]) -> float:
    """Rows of the largest class over rows of the smallest, ``inf`` when a class has none: the ratio that
    ``train``'s ``training.class_weight`` rule and the audit's fits compare with :data:`IMBALANCE_RATIO`."""
    low = min(class_counts)
    return math.inf if low == 0 else max(class_counts) / low

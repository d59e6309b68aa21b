"""The label set of a dataset and each row's label id.

Labels are integers or strings (or a ``ClassLabel``); the label set comes from the training split (the
``ClassLabel``'s names, else the sorted distinct values) unless ``[data] labels`` fixes names and order.
A label's id is its position in the set. IMDB's ``ClassLabel`` names ``neg``/``pos`` are reported as
``negative``/``positive`` (:data:`LABELS`), its names before label sets became configurable.

Label columns are read with Arrow compute: no Python object per row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError

LABELS = ("negative", "positive")   # IMDB's label names, by id; also those of checkpoints that predate label sets
NUM_LABELS = len(LABELS)
# Per-class metrics sit beside these averages in `eval --json` (precision: {"neg": .., "macro": ..}).
RESERVED_LABELS = ("macro", "weighted")
# A dataset's ClassLabel names -> the names this tool reports: IMDB keeps its output contract.
CLASSLABEL_ALIASES = {("neg", "pos"): LABELS}

_INTEGER = r"^\s*[+-]?[0-9]+\s*$"


@dataclass
class RawLabels:
    """A split's labels as text keys (``None`` = missing), and what they were: ``classlabel``, ``int``, ``str``, ``bool``."""

    keys: Any            # pyarrow string array, one per row
    kind: str
    names: tuple[str, ...] = ()   # ClassLabel names (aliased), when kind is classlabel


def raw_labels(ds, column: str, where: str) -> RawLabels:
    """Read a label column as text keys, one per row (Arrow compute: no Python objects per row).

    Integers and integer strings (``"4"``, as every CSV field is text) both give ``"4"``, so a CSV
    and a JSON file of the same labels agree.

    Raises:
        DataError: labels that are fractional numbers, lists, or of mixed types (naming the first row
            whose type differs from the first row's).
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
        col = col.cast(pa.string())
        valid = pc.drop_null(col)
        integer = pc.match_substring_regex(valid, _INTEGER)
        n_int = pc.sum(integer).as_py() or 0
        if n_int == 0:
            return RawLabels(col, "str")
        if n_int == len(valid):
            as_int = pc.cast(pc.utf8_trim_whitespace(col), pa.int64())
            return RawLabels(pc.cast(as_int, pa.string()), "int")
        kinds = pc.match_substring_regex(col, _INTEGER)
        _mixed(where, column, [("an integer" if k else "a string", v) for k, v in zip(kinds.to_pylist(), col.to_pylist())])
    if dtype and (dtype.startswith("int") or dtype.startswith("uint")):
        return RawLabels(pc.cast(col, pa.string()), "int")
    if dtype == "bool":
        return RawLabels(pc.if_else(col, "true", "false"), "bool")
    if dtype and dtype.startswith("float"):
        valid = pc.drop_null(col)
        if len(valid) and not pc.all(pc.equal(pc.floor(valid), valid)).as_py():
            bad = next(v for v in valid.to_pylist() if v != int(v))
            raise DataError(f"{where}: column {column!r} holds fractional numbers such as {bad}; labels must be "
                            "integers or strings (classes, not scores)")
        return RawLabels(pc.cast(pc.cast(col, pa.int64()), pa.string()), "int")
    if type(feature).__name__ == "Json":   # JSON values of several types in one column
        values = [None if v is None else json.loads(v) for v in col.cast(pa.string()).to_pylist()]
        _mixed(where, column, [(_json_kind(v), v) for v in values])
    raise DataError(f"{where}: column {column!r} holds {feature}; labels must be integers or strings")


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
                        f"{keys.null_count} such row{'s' if keys.null_count > 1 else ''})")
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

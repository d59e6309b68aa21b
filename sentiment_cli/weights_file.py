"""The weights file's tensors: a table whose rows are mostly zero is stored as its non-zero rows.

The n-gram score's hashed tables are sized before the data is seen (``[model] ngram_buckets``, 2,097,152 rows of
28 labels for GoEmotions), and the fit leaves every bucket no training n-gram fell in at exactly zero (L2-regularised
logistic regression starting from zero never moves a weight whose feature is never non-zero); the hashed bigram
embedding starts at zero and AdamW never moves a row no batch used. So most of those rows are zero, and storing
them as ``(rows, values)`` keeps the checkpoint the size of what the data used, losslessly: the model read back is
the one written, bit for bit. A packed float32 table whose values are all exact in float16 (the n-gram score's
weights, which :meth:`~.ngram.score.NgramScore.keep_half_precision` rounds to float16's precision) stores its
values as float16 and is read back as float32: half the bytes, still bit for bit (checkpoint ``format_version`` 3).

In ``model.safetensors`` a packed tensor ``NAME`` of shape ``(n, *rest)`` is two tensors, ``NAME@rows`` ``(k,)``
int32 (the non-zero rows, strictly ascending, each below ``n``) and ``NAME@values`` ``(k, *rest)`` in ``NAME``'s
dtype (float16 standing for float32, see above), and the file's metadata ``"packed_rows"`` maps ``NAME`` to
``[n, *rest]`` (checkpoint ``format_version`` 2; every tensor of a version-1 file is whole). The trainer state's
tensors file (``training/state.py``) packs its tables the same way. Reading treats the file as untrusted: the
shapes are checked against the header before anything is allocated, and the row indices before they are used.

A compressed checkpoint (``model/compress.py``, checkpoint ``format_version`` 4) stores each of its compressed
tables ``NAME`` as the rows that differ from what an unstored row reads (:mod:`~sentiment_cli.compact_table`):
``NAME@rows`` ``(k,)`` int32 or ``NAME@mask`` (a bit a row, uint8), whichever is smaller (neither when every row is
stored), ``NAME@values`` ``(k, *rest)`` (int8 codes, or float16 / float32) and, for int8 codes, ``NAME@exponents``
int8 (each stored row's power-of-two scale, or each block's of a one-dimensional table);
the metadata ``"compact_rows"`` maps ``NAME`` to ``{"shape", "bits", "fill", "block"}``. The loader holds such a
table as those rows (:func:`compact_tables`); :func:`unpack` rebuilds it whole, bit for bit as it was written.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from .compact_table import CompactTable, TableCode, check_stored, encode
from .decoding import json_loads

PACK_MIN_ROWS = 1 << 16     # smaller tables are stored whole: the index would save too little to be worth a format
PACK_MAX_SHARE = 0.9        # packed when its rows and their int32 indices take at most this share of the table
ROWS, VALUES, EXPONENTS, MASK = "@rows", "@values", "@exponents", "@mask"
METADATA_KEY = "packed_rows"
COMPACT_KEY = "compact_rows"
_PARTS = (ROWS, VALUES, EXPONENTS, MASK)


def nonzero_rows(tensor: torch.Tensor) -> torch.Tensor:
    """``(k,)`` int64: the rows of ``tensor`` ``(n, ...)`` that hold a non-zero value, ascending (what :func:`pack`
    keeps, and the ONNX export's table of used rows, :func:`~.ngram.score.compact_rows`)."""
    flat = tensor.reshape(tensor.shape[0], -1)
    return torch.nonzero(flat.ne(0).any(dim=1), as_tuple=False).flatten()


def exact_half(values: torch.Tensor) -> torch.Tensor | None:
    """``values`` as float16 when they are float32 and each is exact in float16 (read back as float32, bit for
    bit), else ``None``. The one test of it: the weights file's packed values, and the ONNX export's n-gram table
    (:meth:`~.ngram.score.NgramScore.compact_table`)."""
    if values.dtype != torch.float32 or not values.numel():
        return None
    half = values.to(torch.float16)
    return half if torch.equal(half.to(torch.float32), values) else None


def _stored_values(values: torch.Tensor) -> torch.Tensor:
    """A packed table's ``values`` as stored: float16 when :func:`exact_half` allows (so :func:`unpack` gives them
    back bit for bit), else as they are."""
    half = exact_half(values)
    return values if half is None else half


def _worth_packing(tensor: torch.Tensor, values: torch.Tensor) -> bool:
    """Whether a table's non-zero rows ``values`` as stored, with an int32 index each, take at most
    :data:`PACK_MAX_SHARE` of ``tensor``'s ``(n, ...)`` bytes (for a two-class n-gram score's float32 rows: 45% of
    them non-zero, 60% stored as float16; for a 64-wide float32 embedding's: 88%; for float16 rows of four labels:
    every row)."""
    stored = values.numel() * values.element_size() + 4 * values.shape[0]
    return stored <= PACK_MAX_SHARE * tensor.numel() * tensor.element_size()


def pack(weights: dict[str, torch.Tensor], codes: dict[str, TableCode] | None = None
         ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and metadata to save for ``weights``: each table ``codes`` names stored compactly (its
    ``NAME@rows``, ``NAME@values`` and ``NAME@exponents``, :func:`~sentiment_cli.compact_table.encode`); each other
    floating-point table of at least :data:`PACK_MIN_ROWS` rows whose non-zero rows and their index take at most
    :data:`PACK_MAX_SHARE` of its bytes, as ``NAME@rows`` and ``NAME@values`` (float16 when float32 loses nothing
    by it); every other tensor as it is.

    Args:
        weights: a state dict, CPU tensors by name (none named with ``@``).
        codes: how each compressed table is stored (``model/compress.py``'s ``table_codes``); none by default.

    Returns:
        ``(tensors, metadata)``: ``metadata`` holds ``"packed_rows"`` (JSON) when a table was packed and
        ``"compact_rows"`` when one was stored compactly, else is empty.

    Raises:
        ValueError: a table of ``codes`` is missing, or is not what its compression gives (storing it would change
            it).
    """
    tensors: dict[str, torch.Tensor] = {}
    shapes: dict[str, list[int]] = {}
    compact: dict[str, dict[str, Any]] = {}
    for name, code in (codes or {}).items():
        if name not in weights:
            raise ValueError(f"no table {name} to store compactly")
        try:
            stored = encode(weights[name], code)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
        tensors.update({f"{name}@{part}": t for part, t in stored.items()})
        compact[name] = code.record(tuple(weights[name].shape))
    for name, tensor in weights.items():
        if name in compact:
            continue
        if tensor.is_floating_point() and tensor.dim() >= 1 and tensor.shape[0] >= PACK_MIN_ROWS:
            rows = nonzero_rows(tensor)
            values = _stored_values(tensor.index_select(0, rows).contiguous())
            if _worth_packing(tensor, values):
                tensors[name + ROWS] = rows.to(torch.int32).contiguous()
                tensors[name + VALUES] = values
                shapes[name] = list(tensor.shape)
                continue
        tensors[name] = tensor
    metadata = {METADATA_KEY: json.dumps(shapes, sort_keys=True)} if shapes else {}
    if compact:
        metadata[COMPACT_KEY] = json.dumps(compact, sort_keys=True)
    return tensors, metadata


def packed_shapes(metadata: dict[str, Any] | None) -> dict[str, tuple[int, ...]]:
    """``{NAME: shape}`` of the packed tables a file's metadata names (empty when none).

    Raises:
        ValueError: the metadata's ``"packed_rows"`` is not a JSON object of names to lists of non-negative ints.
    """
    raw = (metadata or {}).get(METADATA_KEY)
    if raw is None:
        return {}
    shapes = json_loads(raw) if isinstance(raw, str) else None
    if not isinstance(shapes, dict) or not all(
            isinstance(s, list) and s and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in s)
            for s in shapes.values()):
        raise ValueError(f"its metadata {METADATA_KEY!r} is not a map of names to shapes")
    return {str(name): tuple(shape) for name, shape in shapes.items()}


def compact_codes(metadata: dict[str, Any] | None) -> dict[str, tuple[tuple[int, ...], TableCode]]:
    """``{NAME: (shape, code)}`` of the tables a file's metadata says are stored compactly (empty when none).

    Raises:
        ValueError: the metadata's ``"compact_rows"`` is not a JSON object of names to ``{"shape", "bits", "fill",
            "block"}`` with a list of non-negative ints, ``null`` or 8, ``null`` or an int, and an int.
    """
    raw = (metadata or {}).get(COMPACT_KEY)
    if raw is None:
        return {}
    entries = json.loads(raw) if isinstance(raw, str) else None
    if not isinstance(entries, dict):
        raise ValueError(f"its metadata {COMPACT_KEY!r} is not a map of names to tables")
    out = {}
    for name, entry in entries.items():
        shape = entry.get("shape") if isinstance(entry, dict) else None
        fill, bits, block = (entry.get(key) for key in ("fill", "bits", "block")) if shape is not None else (0,) * 3
        if (not isinstance(shape, list) or not shape or not all(_count(n) for n in shape) or bits not in (None, 8)
                or isinstance(bits, (bool, float))
                or not (fill is None or _count(fill)) or not _count(block)):
            raise ValueError(f"its metadata {COMPACT_KEY!r} describes {name} as {str(entry)[:120]}")
        out[str(name)] = (tuple(shape), TableCode(bits, fill, block))
    return out


def _count(n: Any) -> bool:
    """Whether ``n`` is a JSON integer >= 0 (not a bool)."""
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def dense_specs(found: dict[str, tuple[Any, tuple[int, ...]]], shapes: dict[str, tuple[int, ...]],
                compact: dict[str, tuple[tuple[int, ...], TableCode]] | None = None
                ) -> dict[str, tuple[Any, tuple[int, ...]]]:
    """Each tensor's ``(dtype, shape)`` as the model will hold it: the header's ``found``, with each packed table's
    two entries replaced by the table (its values' dtype, float32 for float16 values; the metadata's shape), and
    each compact table's (``compact``, :func:`compact_codes`) by the float32 table of its metadata's shape.

    Raises:
        ValueError: a packed table's rows or values are missing, of another dtype or shape, or more than its rows;
            a compact table's tensors do not fit its shape and code
            (:func:`~sentiment_cli.compact_table.check_stored`); a table stored both whole and packed or compact;
            a ``@`` tensor of no packed or compact table.
    """
    compact = compact or {}
    specs = {name: spec for name, spec in found.items() if not any(part in name for part in _PARTS)}
    for name, shape in shapes.items():
        rows, values = found.get(name + ROWS), found.get(name + VALUES)
        if name in found or name in compact:
            raise ValueError(f"the table {name} is stored both whole and packed")
        if rows is None or values is None:
            raise ValueError(f"the packed table {name} has no {ROWS[1:]} or {VALUES[1:]}")
        k = rows[1][0] if len(rows[1]) == 1 else -1
        if rows[0] != torch.int32 or not 0 <= k <= shape[0] or tuple(values[1]) != (k, *shape[1:]) \
                or found.get(name + EXPONENTS) is not None or found.get(name + MASK) is not None:
            raise ValueError(f"the packed table {name} has rows {rows[0]} {rows[1]} and values {values[1]} "
                             f"for a shape {list(shape)}")
        specs[name] = (torch.float32 if values[0] == torch.float16 else values[0], tuple(shape))
    for name, (shape, code) in compact.items():
        if name in found:
            raise ValueError(f"the table {name} is stored both whole and compact")
        try:
            check_stored(shape, {part[1:]: found[name + part] for part in _PARTS if name + part in found}, code)
        except ValueError as exc:
            raise ValueError(f"the compact table {name}: {exc}") from None
        specs[name] = (torch.float32, tuple(shape))
    stray = sorted(n for n in found if any(part in n for part in _PARTS)
                   and n.rsplit("@", 1)[0] not in shapes and n.rsplit("@", 1)[0] not in compact)
    if stray:
        raise ValueError(f"the tensor {stray[0]} belongs to no packed table")
    return specs


def unpack(state: dict[str, torch.Tensor], shapes: dict[str, tuple[int, ...]],
           compact: dict[str, tuple[tuple[int, ...], TableCode]] | None = None) -> dict[str, torch.Tensor]:
    """The state dict a file's tensors ``state`` stand for: each packed table rebuilt whole, zeros where no row
    was stored, and each compact table whole as it was written. Call :func:`dense_specs` on the header first (it
    checks the shapes).

    Raises:
        ValueError: a packed or compact table's rows are not strictly ascending or not below its length; a compact
            table's fill row is not stored, or its exponents lie outside their range.
    """
    rest, tables = compact_tables(state, compact or {})
    out = {name: t for name, t in rest.items() if name.rsplit("@", 1)[0] not in shapes}
    for name, shape in shapes.items():
        rows, values = rest[name + ROWS], rest[name + VALUES]
        if rows.numel() and (int(rows[0]) < 0 or int(rows[-1]) >= shape[0] or bool((rows[1:] <= rows[:-1]).any())):
            raise ValueError(f"the packed table {name}'s rows are not ascending within its {shape[0]} rows")
        values = values.to(torch.float32) if values.dtype == torch.float16 else values
        dense = torch.zeros(shape, dtype=values.dtype)
        dense.index_copy_(0, rows.long(), values)
        out[name] = dense
    return out | {name: table.dense() for name, table in tables.items()}


def compact_tables(state: dict[str, torch.Tensor], compact: dict[str, tuple[tuple[int, ...], TableCode]]
                   ) -> tuple[dict[str, torch.Tensor], dict[str, CompactTable]]:
    """``(rest, tables)``: the file's tensors ``state`` other than the compact tables', and each compact table as a
    :class:`~sentiment_cli.compact_table.CompactTable` (its stored rows only; never the whole table). Call
    :func:`dense_specs` on the header first (it checks the shapes).

    Raises:
        ValueError: a compact table's rows are not strictly ascending or not below its length, its fill row is not
            stored, or its exponents lie outside their range.
    """
    rest = {name: t for name, t in state.items() if name.rsplit("@", 1)[0] not in compact}
    tables = {}
    for name, (shape, code) in compact.items():
        stored = {part[1:]: state[name + part] for part in _PARTS if name + part in state}
        try:
            tables[name] = CompactTable.of(shape, stored, code)
        except ValueError as exc:
            raise ValueError(f"the compact table {name}: {exc}") from None
    return rest, tables

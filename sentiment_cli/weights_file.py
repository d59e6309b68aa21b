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
"""

from __future__ import annotations

import json
from typing import Any

import torch

from .decoding import json_loads

PACK_MIN_ROWS = 1 << 16     # smaller tables are stored whole: the index would save too little to be worth a format
PACK_MAX_SHARE = 0.9        # packed when its rows and their int32 indices take at most this share of the table
ROWS, VALUES = "@rows", "@values"
METADATA_KEY = "packed_rows"


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


def pack(weights: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and metadata to save for ``weights``: each floating-point table of at least
    :data:`PACK_MIN_ROWS` rows whose non-zero rows and their index take at most :data:`PACK_MAX_SHARE` of its
    bytes, as ``NAME@rows`` and ``NAME@values`` (float16 when float32 loses nothing by it); every other tensor as
    it is.

    Args:
        weights: a state dict, CPU tensors by name (none named with ``@``).

    Returns:
        ``(tensors, metadata)``: ``metadata`` holds ``"packed_rows"`` (JSON) when a table was packed, else is empty.
    """
    tensors: dict[str, torch.Tensor] = {}
    shapes: dict[str, list[int]] = {}
    for name, tensor in weights.items():
        if tensor.is_floating_point() and tensor.dim() >= 1 and tensor.shape[0] >= PACK_MIN_ROWS:
            rows = nonzero_rows(tensor)
            values = _stored_values(tensor.index_select(0, rows).contiguous())
            if _worth_packing(tensor, values):
                tensors[name + ROWS] = rows.to(torch.int32).contiguous()
                tensors[name + VALUES] = values
                shapes[name] = list(tensor.shape)
                continue
        tensors[name] = tensor
    return tensors, ({METADATA_KEY: json.dumps(shapes, sort_keys=True)} if shapes else {})


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


def dense_specs(found: dict[str, tuple[Any, tuple[int, ...]]],
                shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[Any, tuple[int, ...]]]:
    """Each tensor's ``(dtype, shape)`` as the model will hold it: the header's ``found``, with each packed table's
    two entries replaced by the table (its values' dtype, float32 for float16 values; the metadata's shape).

    Raises:
        ValueError: a packed table's rows or values are missing, of another dtype or shape, or more than its rows;
            a table stored both whole and packed; a ``@`` tensor of no packed table.
    """
    specs = {name: spec for name, spec in found.items() if ROWS not in name and VALUES not in name}
    for name, shape in shapes.items():
        rows, values = found.get(name + ROWS), found.get(name + VALUES)
        if name in found:
            raise ValueError(f"the table {name} is stored both whole and packed")
        if rows is None or values is None:
            raise ValueError(f"the packed table {name} has no {ROWS[1:]} or {VALUES[1:]}")
        k = rows[1][0] if len(rows[1]) == 1 else -1
        if rows[0] != torch.int32 or not 0 <= k <= shape[0] or tuple(values[1]) != (k, *shape[1:]):
            raise ValueError(f"the packed table {name} has rows {rows[0]} {rows[1]} and values {values[1]} "
                             f"for a shape {list(shape)}")
        specs[name] = (torch.float32 if values[0] == torch.float16 else values[0], tuple(shape))
    stray = sorted(n for n in found if (ROWS in n or VALUES in n) and n.rsplit("@", 1)[0] not in shapes)
    if stray:
        raise ValueError(f"the tensor {stray[0]} belongs to no packed table")
    return specs


def unpack(state: dict[str, torch.Tensor], shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    """The state dict a file's tensors ``state`` stand for: each packed table rebuilt whole, zeros where no row
    was stored. Call :func:`dense_specs` on the header first (it checks the shapes).

    Raises:
        ValueError: a packed table's rows are not strictly ascending or not below its length.
    """
    out = {name: t for name, t in state.items() if name.rsplit("@", 1)[0] not in shapes}
    for name, shape in shapes.items():
        rows, values = state[name + ROWS], state[name + VALUES]
        if rows.numel() and (int(rows[0]) < 0 or int(rows[-1]) >= shape[0] or bool((rows[1:] <= rows[:-1]).any())):
            raise ValueError(f"the packed table {name}'s rows are not ascending within its {shape[0]} rows")
        values = values.to(torch.float32) if values.dtype == torch.float16 else values
        dense = torch.zeros(shape, dtype=values.dtype)
        dense.index_copy_(0, rows.long(), values)
        out[name] = dense
    return out

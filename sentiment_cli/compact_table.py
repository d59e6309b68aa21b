"""A table held as its stored rows: int8 values with a power-of-two scale, or float values, looked up by row id.

A compressed checkpoint (``model/compress.py``) keeps only some rows of its large tables (the token embedding, the
hashed word-bigram embedding, the n-gram score's weights); every other row reads as the table's *fill*: zeros, or
the values of one stored row (the token embedding's ``<unk>``). Its stored values are either floats (float16 where
that is exact) or int8 codes ``q`` with a scale ``2**e`` shared by a block of values: one row of a two-dimensional
table, or ``block`` consecutive row ids of a one-dimensional one (a two-class n-gram score's one weight a bucket).
The value a row stands for is ``float32(q) * 2**e``: block floating point, the shared power-of-two scale of the
OCP Microscaling formats' MXINT8 (Rouhani et al. 2023, "Microscaling Data Formats for Deep Learning"), after the
int8 rows with a scale each of FastText.zip (Joulin et al. 2016). A power of two is chosen over the row's own
``max|x| / 127`` because every product ``q * 2**e`` is exact in float32: the float table that
:func:`quantized` gives, an embedding that gathers int8 rows and scales them, and an ONNX graph that does the same
(``Cast``, ``Mul``) all hold bit-identical values, and encoding that float table again gives back the same codes
(:func:`encode` checks it). The price is up to one bit of the code's resolution (the largest code of a block lies
in 64..127 rather than at 127).

:class:`CompactTable` is the ``nn.Module`` that holds such a table in memory (int8 rows, their float32 scales,
the stored rows' ids) and looks rows up without ever building the whole float table: a batch gathers its rows
and scales only them. Rows are found by binary search in the sorted ids (``torch.searchsorted``; a fixed number
of branch-free steps while ``torch.onnx`` traces it, ONNX having no such operator), so no map of every row is
held. This module knows no model: the names of the tables and their fills are ``model/compress.py``'s.
"""

from __future__ import annotations

import math

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

CODE_MAX = 127                       # int8 codes lie in -127..127 (the symmetric range: -128 is never written)
EXPONENT_RANGE = (-126, 120)         # 2**e a normal float32, and 127 * 2**e far below float32's largest value
_FLOAT16_POWERS = (-24, 15)          # the powers of two float16 holds exactly (subnormals included)


@dataclass(frozen=True)
class TableCode:
    """How one table is stored compactly.

    Attributes:
        bits: 8: int8 codes with a power-of-two scale per block (:func:`quantized`); ``None``: the rows' float values
            (float16 where each is exact in it, else float32).
        fill: the row whose values every row not stored reads (it is always stored), or ``None``: zeros.
        block: rows of a one-dimensional table that share one scale (consecutive row ids); 1 for a table of rows
            (``(n, width)``: one scale a row). Unused without ``bits``.
    """

    bits: int | None = 8
    fill: int | None = None
    block: int = 1

    def record(self, shape: tuple[int, ...]) -> dict[str, Any]:
        """The table's entry in the weights file's metadata: ``{"shape", "bits", "fill", "block"}``."""
        return {"shape": list(shape), "bits": self.bits, "fill": self.fill, "block": self.block}


def powers_of_two(exponents: Tensor) -> Tensor:
    """``2**e`` as float32, built from its bits (exact, whatever the platform's ``exp2``).

    Args:
        exponents: any shape, integers within :data:`EXPONENT_RANGE`.

    Returns:
        float32 of the same shape.
    """
    return ((exponents.to(torch.int32) + 127) << 23).view(torch.float32)


def block_exponents(amax: Tensor) -> Tensor:
    """The least ``e`` with ``amax <= 127 * 2**e``, per block (0 for a block of zeros), as int8.

    Args:
        amax: ``(blocks,)`` float32, each block's largest absolute value (finite, >= 0).

    Returns:
        ``(blocks,)`` int8; a block whose ``e`` would be below :data:`EXPONENT_RANGE` (values under ``2**-119``)
        gets ``EXPONENT_RANGE[0]``, and its codes round to zero.

    Raises:
        ValueError: a block's values are too large for a scale within :data:`EXPONENT_RANGE`.
    """
    wide = amax.double()
    _, x = torch.frexp(wide)                                   # amax = m * 2**x, m in [0.5, 1)
    e = x.long() - 7
    e = torch.where(wide <= CODE_MAX * torch.ldexp(torch.ones_like(wide), e), e, e + 1)
    e = torch.where(wide > 0, e, torch.zeros_like(e))
    if e.numel() and int(e.max()) > EXPONENT_RANGE[1]:
        raise ValueError(f"values up to {float(amax.max()):.3g} are beyond an int8 code's scale")
    return e.clamp_min(EXPONENT_RANGE[0]).to(torch.int8)


def _blocks(table: Tensor, block: int) -> Tensor:
    """``table`` as ``(blocks, values)``: a row a block for a table of rows, else ``block`` values a block (the
    last one padded with zeros)."""
    if table.dim() > 1:
        return table.flatten(1)
    pad = (-table.shape[0]) % block
    return torch.cat([table, table.new_zeros(pad)]).view(-1, block)


def encode_int8(table: Tensor, block: int = 1) -> tuple[Tensor, Tensor]:
    """``(codes, exponents)`` of a float32 table: int8 codes of its shape, and the int8 exponent of each block
    (``(n,)`` for a table of rows, ``(ceil(n / block),)`` for a one-dimensional one).

    Raises:
        ValueError: values not finite, or too large (:func:`block_exponents`).
    """
    if table.numel() and not bool(torch.isfinite(table).all()):
        raise ValueError("a table to quantize holds NaN or infinite values")
    blocks = _blocks(table.float(), block)
    exponents = block_exponents(blocks.abs().amax(dim=1) if blocks.shape[1] else blocks.new_zeros(len(blocks)))
    scaled = blocks.double() * torch.ldexp(torch.ones(len(blocks), dtype=torch.float64), -exponents.long())[:, None]
    codes = scaled.round().clamp(-CODE_MAX, CODE_MAX).to(torch.int8)
    return codes.reshape(-1)[:table.numel()].view(table.shape), exponents


def decode_int8(codes: Tensor, exponents: Tensor, block: int = 1) -> Tensor:
    """The float32 table that :func:`encode_int8`'s ``codes`` and ``exponents`` stand for: ``q * 2**e``, exact."""
    if codes.dim() > 1:
        return codes.float() * powers_of_two(exponents).view(-1, *([1] * (codes.dim() - 1)))
    scales = powers_of_two(exponents).repeat_interleave(block)[:codes.shape[0]]
    return codes.float() * scales


def quantized(table: Tensor, block: int = 1) -> Tensor:
    """``table`` (float32, ``(n, ...)``) as int8 codes with a power-of-two scale per block give it back: what a
    compressed checkpoint computes with. Idempotent: ``quantized(quantized(t)) == quantized(t)``, bit for bit.

    Raises:
        ValueError: as :func:`encode_int8`.
    """
    return decode_int8(*encode_int8(table, block), block)


def _stored_rows(table: Tensor, fill: int | None) -> Tensor:
    """``(k,)`` int64: the rows of ``table`` that differ from what an unstored row reads (zeros, or row ``fill``),
    ascending, ``fill`` itself included."""
    flat = table.reshape(table.shape[0], -1)
    reference = flat[fill] if fill is not None else flat.new_zeros(flat.shape[1])
    differs = flat.ne(reference).any(dim=1)
    if fill is not None:
        differs[fill] = True
    return torch.nonzero(differs, as_tuple=False).flatten()


def _row_bytes(table: Tensor, code: TableCode) -> int:
    """Bytes one stored row of ``table`` takes: its values (int8, or float16 / float32) and, for int8 rows of a
    table of rows, its exponent."""
    values = table[0].numel() if table.dim() > 1 else 1
    if code.bits is None:
        return values * (2 if torch.equal(table.to(torch.float16).float(), table) else 4)
    return values + (1 if table.dim() > 1 else 0)


def pack_mask(rows: Tensor, num_rows: int) -> Tensor:
    """``(ceil(num_rows / 8),)`` uint8: a bit a row, set for each of ``rows`` (bit ``j`` of byte ``i`` is row
    ``8 * i + j``)."""
    bits = torch.zeros(-(-num_rows // 8) * 8, dtype=torch.uint8)
    bits[rows.long()] = 1
    return (bits.view(-1, 8) << torch.arange(8, dtype=torch.uint8)).sum(dim=1, dtype=torch.uint8)


def unpack_mask(mask: Tensor, num_rows: int) -> Tensor:
    """``(k,)`` int32: the rows whose bit :func:`pack_mask`'s ``mask`` sets, ascending.

    Raises:
        ValueError: a bit set beyond ``num_rows``.
    """
    bits = (mask.view(-1, 1) >> torch.arange(8, dtype=torch.uint8)) & 1              # (bytes, 8) uint8
    rows = torch.nonzero(bits.flatten(), as_tuple=False).flatten()
    if rows.numel() and int(rows[-1]) >= num_rows:
        raise ValueError(f"its mask sets a row beyond its {num_rows} rows")
    return rows.to(torch.int32)


def _index(rows: Tensor, num_rows: int, row_bytes: int) -> dict[str, Tensor] | None:
    """The cheapest index of the stored ``rows``: ``{"rows": int32}`` (4 bytes a stored row), ``{"mask": uint8}``
    (a bit a row of the table), or ``None``: every row stored (no index; ``row_bytes`` a row)."""
    costs = {"rows": len(rows) * (row_bytes + 4), "mask": -(-num_rows // 8) + len(rows) * row_bytes,
             "every": num_rows * row_bytes}
    kind = min(costs, key=lambda name: (costs[name], name != "every"))
    if kind == "every":
        return None
    return {"rows": rows.to(torch.int32)} if kind == "rows" else {"mask": pack_mask(rows, num_rows)}


def encode(table: Tensor, code: TableCode) -> dict[str, Tensor]:
    """The tensors that store ``table`` compactly: the rows that differ from the fill, indexed by ``rows`` ``(k,)``
    int32 or by ``mask`` (a bit a row, :func:`pack_mask`), whichever takes fewer bytes, or every row and no index
    when that is fewer still; ``values`` ``(k, ...)``; and, with ``bits``, ``exponents`` int8 (per stored row for
    a table of rows, per block of row ids otherwise).

    Lossless: :meth:`CompactTable.dense` of them gives ``table`` back bit for bit, which is checked; so ``table``
    must be what :func:`quantized` (with ``bits``) and the fill make of a table.

    Raises:
        ValueError: ``table`` is not such a table (its values are not int8 codes of power-of-two scales, or a
            row not stored would read other values).
    """
    rows = _stored_rows(table, code.fill)
    index = _index(rows, table.shape[0], _row_bytes(table, code))
    every = index is None
    stored = table if every else table.index_select(0, rows)
    index = index or {}
    if code.bits is None:
        half = stored.to(torch.float16)
        out = {**index, "values": half if torch.equal(half.float(), stored) else stored}
    else:
        codes, exponents = encode_int8(stored if table.dim() > 1 else table, code.block)
        values = codes if table.dim() > 1 or every else codes.index_select(0, rows)
        out = {**index, "values": values, "exponents": exponents}
    back = CompactTable.of(tuple(table.shape), out, code).dense()
    if not torch.equal(back, table.float()):
        raise ValueError(f"a table of shape {list(table.shape)} is not what compression gives: storing it as int8 "
                         f"rows would change it" if code.bits else "its rows not stored would not read as stored")
    return out


def check_stored(shape: tuple[int, ...], found: dict[str, tuple[Any, tuple[int, ...]]], code: TableCode) -> None:
    """Check a stored table's tensors (``found``: ``(dtype, shape)`` of ``rows``, ``values``, ``exponents``, from a
    file's header) against its ``shape`` and ``code``, before anything is allocated.

    Raises:
        ValueError: a tensor is missing, extra, or of another dtype or shape; or the code is not one this reads.
    """
    if code.bits not in (None, 8) or not 1 <= code.block <= 1 << 16 or (len(shape) > 1 and code.block != 1):
        raise ValueError(f"a code of bits {code.bits} and block {code.block} for a table {list(shape)}")
    if code.fill is not None and not 0 <= code.fill < shape[0]:
        raise ValueError(f"a fill row {code.fill} outside its {shape[0]} rows")
    rows, values, mask = found.get("rows"), found.get("values"), found.get("mask")
    if values is None or len(values[1]) != len(shape) or (rows is not None and mask is not None):
        raise ValueError("no values of its rank, or both rows and a mask")
    if rows is not None and (rows[0] != torch.int32 or len(rows[1]) != 1):
        raise ValueError(f"rows {rows[0]} {list(rows[1])}, not int32 (k,)")
    if mask is not None and (mask[0] != torch.uint8 or tuple(mask[1]) != (-(-shape[0] // 8),)):
        raise ValueError(f"a mask {mask[0]} {list(mask[1])} for {shape[0]} rows")
    k = rows[1][0] if rows is not None else values[1][0] if mask is not None else shape[0]
    if not 0 <= k <= shape[0] or tuple(values[1]) != (k, *shape[1:]):
        raise ValueError(f"{k} rows and values {list(values[1])} for a table {list(shape)}")
    if code.bits is None:
        if values[0] not in (torch.float16, torch.float32) or "exponents" in found:
            raise ValueError(f"values {values[0]} for a table of float rows")
        return
    blocks = k if len(shape) > 1 else -(-shape[0] // code.block)
    exponents = found.get("exponents")
    if values[0] != torch.int8 or exponents is None or exponents[0] != torch.int8 or tuple(exponents[1]) != (blocks,):
        raise ValueError(f"values {values[0]} and exponents {exponents} for an int8 table of {blocks} blocks")


class CompactTable(nn.Module):
    """A ``(num_rows, *width)`` float32 table held as its stored rows, looked up by row id: the stand-in for an
    ``nn.Embedding`` (its forward takes ids) and for the n-gram score's table of weights.

    Args:
        shape: the table's ``(num_rows, *width)``.
        rows: ``(k,)`` int32, the stored rows' ids, strictly ascending, each below ``num_rows``; ``None``: every
            row is stored (``k`` is ``num_rows``).
        values: ``(k, *width)``: int8 codes (with ``scales``), or float16 / float32 values.
        scales: float32 powers of two, per stored row (a table of rows) or per ``block`` row ids; ``None`` for float
            values.
        fill: the row every unstored row reads (a stored one), or ``None``: zeros.
        block: row ids per scale of a one-dimensional table.

    Raises:
        ValueError: ``rows`` not ascending, outside the table, or without ``fill``.
    """

    def __init__(self, shape: tuple[int, ...], rows: Tensor | None, values: Tensor, scales: Tensor | None = None,
                 fill: int | None = None, block: int = 1):
        super().__init__()
        self.shape, self.fill, self.block = tuple(shape), fill, block
        if len(values) != (shape[0] if rows is None else len(rows)):
            raise ValueError(f"{len(values)} stored values for {shape[0] if rows is None else len(rows)} rows")
        if rows is not None and rows.numel() and (int(rows[0]) < 0 or int(rows[-1]) >= shape[0]
                                                  or bool((rows[1:] <= rows[:-1]).any())):
            raise ValueError(f"its stored rows are not ascending within its {shape[0]} rows")
        self.fill_slot = fill if rows is None else None
        if fill is not None and rows is not None:
            slot = int(torch.searchsorted(rows, torch.tensor([fill], dtype=rows.dtype))[0]) if rows.numel() else 0
            if slot >= len(rows) or int(rows[slot]) != fill:
                raise ValueError(f"its fill row {fill} is not stored")
            self.fill_slot = slot
        # not in state_dict: a checkpoint stores the codes (weights_file.py), never these buffers by name
        self.register_buffer("rows", None if rows is None else rows.to(torch.int32).contiguous(), persistent=False)
        self.register_buffer("values", values.contiguous(), persistent=False)
        self.register_buffer("scales", None if scales is None else scales.contiguous(), persistent=False)

    @classmethod
    def of(cls, shape: tuple[int, ...], stored: dict[str, Tensor], code: TableCode) -> "CompactTable":
        """The table that :func:`encode`'s tensors ``stored`` (``rows``, ``values``, ``exponents``) stand for.

        Raises:
            ValueError: as the constructor, float values not finite, or exponents outside :data:`EXPONENT_RANGE`.
        """
        exponents, values, rows = stored.get("exponents"), stored["values"], stored.get("rows")
        if "mask" in stored:
            rows = unpack_mask(stored["mask"], shape[0])
        if values.is_floating_point() and values.numel() and not bool(torch.isfinite(values).all()):
            raise ValueError("its values hold NaN or infinite values")
        scales = None
        if exponents is not None:
            if exponents.numel() and not (EXPONENT_RANGE[0] <= int(exponents.min())
                                          and int(exponents.max()) <= EXPONENT_RANGE[1]):
                raise ValueError(f"its exponents lie outside {EXPONENT_RANGE[0]}..{EXPONENT_RANGE[1]}")
            scales = powers_of_two(exponents)
        return cls(shape, rows, values, scales, code.fill, code.block).held_cheapest()

    def held_cheapest(self) -> "CompactTable":
        """This table, or the same one holding every row (no row ids, no search) when that takes fewer bytes in
        memory: the ids cost 4 bytes a stored row, where a file's bitmap cost a bit a row of the table. A table of
        one column with a fill row is left as it is (its scale goes by row id)."""
        if self.rows is None or (len(self.shape) == 1 and self.fill is not None):
            return self
        row_bytes = math.prod(self.shape[1:]) * self.values.element_size() + (4 if len(self.shape) > 1 and
                                                                              self.scales is not None else 0)
        k, n = len(self.rows), self.shape[0]
        if k * (row_bytes + 4) < n * row_bytes:
            return self
        slot = torch.full((n,), k if self.fill_slot is None else self.fill_slot, dtype=torch.long)
        slot[self.rows.long()] = torch.arange(k)
        values = torch.cat([self.values, self.values.new_zeros(1, *self.shape[1:])]).index_select(0, slot)
        scales = self.scales
        if scales is not None and len(self.shape) > 1:
            scales = torch.cat([scales, scales.new_zeros(1)]).index_select(0, slot)
        return CompactTable(self.shape, None, values, scales, self.fill, self.block)

    @property
    def num_rows(self) -> int:
        """The table's rows, stored or not."""
        return self.shape[0]

    def numel(self) -> int:
        """Values in the whole table (as a float table of :attr:`shape` would hold)."""
        n = 1
        for size in self.shape:
            n *= size
        return n

    def _find(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """``(slot, hit)`` of flat int64 ``ids``: the position in :attr:`rows` of the last stored row ``<=`` each id
        (0 when none), and whether it is the id itself; with every row stored, the ids themselves."""
        if self.rows is None:
            return ids, torch.ones_like(ids, dtype=torch.bool)
        k, ids32 = self.rows.shape[0], ids.to(torch.int32)
        if torch.compiler.is_exporting():   # branch-free binary search: ONNX has no searchsorted
            slot, step = torch.zeros_like(ids), 1 << (k.bit_length() - 1)
            while step:
                ahead = slot + step
                ok = (ahead < k) & (self.rows.index_select(0, ahead.clamp(max=k - 1)) <= ids32)
                slot, step = torch.where(ok, ahead, slot), step >> 1
        else:
            slot = (torch.searchsorted(self.rows, ids32, right=True) - 1).clamp_(min=0)
        return slot, self.rows.index_select(0, slot) == ids32

    def forward(self, ids: Tensor) -> Tensor:
        """The rows of ``ids`` (int64, any shape, each below ``num_rows``), float32: ``(*ids.shape, *width)``; an
        unstored row reads the fill. Only the rows gathered are dequantized."""
        width, flat = self.shape[1:], ids.reshape(-1)
        if self.values.shape[0] == 0:
            return torch.zeros(*ids.shape, *width, device=ids.device)
        slot, row = flat, flat
        if self.rows is not None:
            slot, hit = self._find(flat)
            if self.fill_slot is not None:   # an unstored row reads the fill row's slot (and scale)
                slot = torch.where(hit, slot, torch.full_like(slot, self.fill_slot))
                row = torch.where(hit, flat, torch.full_like(flat, self.fill))
        # index_select, not indexing: torch.onnx then keeps one copy of each table (indexing gave a copy a use)
        out = self.values.index_select(0, slot).to(torch.float32)                   # (m, *width)
        if self.scales is not None:
            scale = self.scales.index_select(0, slot if len(width) else row // self.block)   # (m,)
            out = out * scale.to(torch.float32).view(-1, *([1] * len(width)))
        if self.rows is not None and self.fill_slot is None:   # an unstored row reads zeros
            keep = hit.view(-1, *([1] * len(width)))
            out = torch.where(keep, out, torch.zeros((), dtype=out.dtype, device=out.device))
        return out.view(*ids.shape, *width)

    def dense(self) -> Tensor:
        """The whole table, ``(num_rows, *width)`` float32 (what :func:`quantized` and the fill make of the table the
        codes came from): for scoring with numpy, and for reading a checkpoint's weights as a state dict."""
        width = self.shape[1:]
        if self.values.shape[0] == 0:
            return torch.zeros(self.shape)
        rows = torch.arange(self.shape[0]) if self.rows is None else self.rows.long()
        stored = self.values.to(torch.float32)
        if self.scales is not None:
            if len(width):
                stored = stored * self.scales.view(-1, *([1] * len(width)))
            else:
                stored = stored * self.scales.repeat_interleave(self.block)[rows]
        if self.rows is None:
            return stored
        out = (stored[self.fill_slot].expand(*self.shape).clone() if self.fill_slot is not None
               else torch.zeros(self.shape))
        out.index_copy_(0, rows, stored)
        return out

    @contextmanager
    def for_export(self):
        """Within the block, the scales are float16 where every one is exact in it (the powers of two of
        ``2**-24..2**15``): half their bytes in an ONNX graph, the same values once cast back."""
        saved = self.scales
        if saved is not None and saved.numel():
            e = torch.frexp(saved)[1] - 1
            if _FLOAT16_POWERS[0] <= int(e.min()) and int(e.max()) <= _FLOAT16_POWERS[1]:
                self.scales = saved.to(torch.float16)
        try:
            yield
        finally:
            self.scales = saved

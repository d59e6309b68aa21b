"""Compression of a trained classifier's large tables: rows pruned, values rounded to int8.

Three tables hold nearly all of a checkpoint's bytes: the token embedding ``(vocab_size, d_model)``, the hashed
word-bigram embedding ``(bigram_buckets + 1, d_model)`` and the n-gram score's weights ``(ngram_buckets + 1,)`` or
``(ngram_buckets + 1, num_labels)``, with its idf when TF-IDF weighted (:data:`TABLES`). A :class:`Compression`
keeps a share of each table's used rows (fastText's ``quantize -cutoff``, Joulin et al. 2016, "FastText.zip"), a
share for each table (a word's row weighs far more than a hashed bigram's): the most frequent words (the lowest
ids), the hashed rows of the largest L2 norm (:data:`TABLES`). It stores the values as int8 codes with a
power-of-two scale per row (per block of buckets for a one-column table; ``compact_table.py``), as FastText.zip
stores its rows with a scale each.

A pruned row reads as the table's own "nothing known" row: a hashed bigram or n-gram as zeros (row 0, "no
bigram" / "no n-gram", which every bucket no training text used reads already), and a word of the vocabulary as
``<unk>`` (its row is the one the encoder saw for every word it did not know, word dropout's included), not as a
zero vector, which it never saw. ``<pad>``, ``<unk>`` and each table's row 0 are never pruned.

:func:`compress` gives the float weights the compressed model computes with: scoring them with the ordinary
model gives exactly the logits the folder gives once written (``checkpoint.write_checkpoint`` with the record's
``compression``) and loaded, where those tables are held as their stored int8 rows (:func:`install_tables`).
:func:`ladder` lists the candidates a run tries, largest first; ``checkpoint.weights_bytes`` says what each takes
on disk.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ..compact_table import CompactTable, TableCode, quantized
from ..data.tokenizer import PAD_ID, UNK_ID
from .classifier import SentimentClassifier

# Buckets of a one-column n-gram table (two classes) that share one scale, a storage format's constant: 64 costs
# 1/64 byte a bucket; on IMDB 16, 64 and 256 gave the same test accuracy, 256 a little more log-loss
# (docs/decisions.md#compressed-checkpoints). The compressions a run tries are its policy's
# (training/policy.py, ShipPolicy).
BLOCK = 64


class Table(NamedTuple):
    """A compressible table: its name in a checkpoint's weights, its key in a :class:`Compression`'s record, the
    row an unstored row reads (``None``: zeros), the rows never pruned, how its rows are ranked for pruning
    (:func:`kept_rows`' ``by``), and the table whose pruned rows it shares (``None``: its own)."""

    name: str
    key: str
    fill: int | None
    protected: tuple[int, ...]
    by: str = "norm"
    follows: str | None = None


# Words are ranked by frequency (their ids), not by norm: the rows start random (or from standardised word2vec
# vectors), so a norm says little of a word's use; keeping half of TREC-6's words by norm cost the seed preset 21
# points of dev accuracy, by frequency none (docs/decisions.md#compressed-checkpoints). Hashed rows start at
# zero (bigrams) or are a linear fit's weights (n-grams): their norm is what they add. A TF-IDF score's idf
# (ngram_idf) loses the rows its weights lose: a pruned n-gram is gone, from the text's norm too, as fastText's
# cutoff removes a feature; its kept values are int8 as the weights'.
TABLES = (Table("token_embedding.weight", "words", UNK_ID, (PAD_ID, UNK_ID), by="id"),
          Table("bigram_embedding.weight", "bigrams", None, (0,)),
          Table("ngram_weight", "ngrams", None, (0,)),
          Table("ngram_idf", "ngrams", None, (0,), follows="ngram_weight"))
_BY_NAME = {t.name: t for t in TABLES}


@dataclass(frozen=True)
class Compression:
    """What is done to a checkpoint's compressible tables (:data:`TABLES`).

    Attributes:
        words, bigrams, ngrams: the share of the token embedding's, the bigram embedding's and the n-gram score's
            used (non-zero) rows kept, each in (0, 1] (the most frequent words, the hashed rows of the largest
            L2 norm: :func:`kept_rows`); 1.0 prunes none. The rows never
            pruned (``<pad>``, ``<unk>``, row 0) are kept besides; a TF-IDF score's idf loses the rows its weights
            lose.
        bits: 8: int8 values with a power-of-two scale per row (``compact_table.py``); ``None``: float values.

    Raises:
        ValueError: a share outside (0, 1], or ``bits`` neither 8 nor ``None``.
    """

    words: float = 1.0
    bigrams: float = 1.0
    ngrams: float = 1.0
    bits: int | None = 8

    def __post_init__(self):
        for key in ("words", "bigrams", "ngrams"):
            share = getattr(self, key)
            if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
                raise ValueError(f"compression: {key} must be a share in (0, 1], got {share!r}")
        if self.bits is not None and (type(self.bits) is not int or self.bits != 8):
            raise ValueError(f"compression: bits must be 8 or None, got {self.bits!r}")

    def keep(self, name: str) -> float:
        """The share kept of table ``name`` (one of :data:`TABLES`)."""
        return float(getattr(self, _BY_NAME[name].key))

    @property
    def changes(self) -> bool:
        """Whether it changes anything (pruning or int8)."""
        return self.bits is not None or min(self.words, self.bigrams, self.ngrams) < 1

    def describe(self) -> str:
        """In a phrase: ``"rows kept: words 100%, bigrams 10%, n-grams 25%; int8 values with a power-of-two scale
        a row"``."""
        values = "float values" if self.bits is None else "int8 values with a power-of-two scale a row"
        return f"rows kept: words {self.words:.0%}, bigrams {self.bigrams:.0%}, n-grams {self.ngrams:.0%}; {values}"

    def record(self) -> dict[str, Any]:
        """Its JSON record (``config.json``'s and ``metrics.json``'s ``"compression"``): ``keep`` (the share of
        each table's used rows kept: ``words``, ``bigrams``, ``ngrams``), ``bits``, ``block`` (buckets per scale of
        a one-column table) and ``method`` (in words)."""
        return {"keep": {t.key: self.keep(t.name) for t in TABLES}, "bits": self.bits, "block": BLOCK,
                "method": self.describe()}

    @classmethod
    def from_record(cls, raw: Any) -> "Compression":
        """The compression a record (:meth:`record`, read from an untrusted ``config.json``) describes.

        Raises:
            ValueError: not an object with ``keep`` an object of shares in (0, 1] and ``bits`` 8 or ``null``.
        """
        keep = raw.get("keep") if isinstance(raw, dict) else None
        if not isinstance(keep, dict) or set(keep) - {t.key for t in TABLES}:
            raise ValueError(f"compression must be an object with keep: {{words, bigrams, ngrams}}, got "
                             f"{str(raw)[:120]}")
        return cls(**{key: keep.get(key, 1.0) for key in ("words", "bigrams", "ngrams")}, bits=raw.get("bits"))


def ladder(rungs: Iterable[tuple[float, float, float]], bits: int | None = 8) -> tuple[Compression, ...]:
    """The compressions of ``rungs`` (``(words, bigrams, ngrams)`` shares kept, largest first; a run's are its
    policy's, ``ShipPolicy.rungs``), each with ``bits``: a rule scores each on validation with :func:`compress`'s
    weights and keeps the smallest within its tolerance of the full model."""
    return tuple(Compression(words, bigrams, ngrams, bits) for words, bigrams, ngrams in rungs)


def compressible(weights: dict[str, Tensor]) -> tuple[str, ...]:
    """The names of :data:`TABLES` that ``weights`` (a state dict) holds, in order (a model without bigrams or an
    n-gram score has fewer)."""
    return tuple(t.name for t in TABLES if t.name in weights)


def compress(weights: dict[str, Tensor], c: Compression, names: Iterable[str] | None = None) -> dict[str, Tensor]:
    """The float weights the compressed model computes with: in each named table, the rows outside the kept share
    read as the fill (zeros, or ``<unk>``'s row), and with ``bits`` every value is rounded through its int8 code.

    Loading the folder written from them (with ``c`` as the record's compression) gives bit-identical logits to
    the ordinary model holding them. The other tensors are returned as they are (not copied).

    Args:
        weights: a classifier's state dict (CPU tensors by name, float32 tables).
        c: the compression.
        names: the tables to compress (names of :data:`TABLES`); default: :func:`compressible`.

    Returns:
        A new state dict, the named tables replaced.

    Raises:
        ValueError: a name is not one of :data:`TABLES` or not in ``weights``, or a table holds NaN or infinite
            values.
    """
    out = dict(weights)
    for name in compressible(weights) if names is None else tuple(names):
        if name not in _BY_NAME or name not in weights:
            raise ValueError(f"no compressible table {name} in these weights")
        spec = _BY_NAME[name]
        kept = kept_rows(weights[spec.follows or name], c.keep(name), spec.protected, spec.by)
        out[name] = _compressed_table(weights[name], spec.fill, kept, c.bits)
    return out


def _compressed_table(table: Tensor, fill: int | None, kept: Tensor, bits: int | None) -> Tensor:
    """One table as :func:`compress` leaves it: the ``kept`` rows (``(n,)`` bool), then int8 values, then the fill
    (a row, or ``None``: zeros) in the pruned rows."""
    table = table.detach().to("cpu", torch.float32)
    pruned = torch.where(kept.view(-1, *([1] * (table.dim() - 1))), table, torch.zeros((), dtype=table.dtype))
    if bits is not None:
        pruned = quantized(pruned, 1 if table.dim() > 1 else BLOCK)
    if fill is not None:
        pruned[~kept] = pruned[fill].clone()
    return pruned


def kept_rows(table: Tensor, keep: float, protected: Iterable[int] = (), by: str = "norm") -> Tensor:
    """``(n,)`` bool: the rows of ``table`` ``(n, ...)`` that a compression keeping ``keep`` of its used rows
    keeps: the first ``ceil(keep * used)`` of the used (non-zero) rows that are not ``protected``, ranked ``by``
    ``"norm"`` (the largest L2 norm first; ties: the lower row) or ``"id"`` (the lower row first: a vocabulary's
    ids run from its most frequent token down, as the tokenizer trainers number them); the ``protected`` rows; and
    the unused (zero) rows, which nothing prunes.

    Raises:
        ValueError: ``keep`` outside (0, 1], or ``by`` neither ``"norm"`` nor ``"id"``.
    """
    if not 0 < keep <= 1 or by not in ("norm", "id"):
        raise ValueError(f"keep must be a share in (0, 1] and by norm or id, got {keep} by {by!r}")
    norms = table.reshape(table.shape[0], -1).double().norm(dim=1)
    guard = torch.tensor([r for r in protected if r < len(norms)], dtype=torch.long)
    candidates = norms.clone()
    candidates[guard] = 0
    kept = candidates == 0
    used = len(norms) - int(kept.sum())
    if used and keep < 1:
        rank = -candidates if by == "norm" else torch.where(kept, math.inf, torch.arange(len(norms)).double())
        order = torch.sort(rank, stable=True).indices
        kept[order[:math.ceil(keep * used - 1e-9)]] = True
    elif used:
        kept[:] = True
    return kept


def table_codes(weights: dict[str, Tensor], c: Compression | None) -> dict[str, TableCode]:
    """How the writer stores each compressed table of ``weights`` (``weights_file.pack``'s ``codes``): none
    without a compression or with one that changes nothing."""
    if c is None or not c.changes:
        return {}
    return {name: TableCode(c.bits, _BY_NAME[name].fill, 1 if weights[name].dim() > 1 else BLOCK)
            for name in compressible(weights)}


def install_tables(model: SentimentClassifier, tables: dict[str, CompactTable]) -> None:
    """Put a loaded checkpoint's compact tables (``weights_file.compact_tables``) in ``model`` in place of its float
    ones, which are freed: the embeddings become the tables themselves, the n-gram score reads its weights from one.

    Raises:
        ValueError: a table that is not one of :data:`TABLES`, that ``model`` does not have, or of another shape.
    """
    for name, table in tables.items():
        current = _current(model, name)
        if current is None or tuple(current) != table.shape:
            raise ValueError(f"a compact table {name} {list(table.shape)} for a model whose table is "
                             f"{None if current is None else list(current)}")
        if name == "token_embedding.weight":
            model.token_embedding = table
        elif name == "bigram_embedding.weight":
            model.bigram_embedding = table
        else:
            model.ngram_score.use_table(table, "weight" if name == "ngram_weight" else "idf")


def _current(model: SentimentClassifier, name: str) -> tuple[int, ...] | None:
    """The shape of ``model``'s table ``name`` (one of :data:`TABLES`), or ``None`` when it has none."""
    module = {"token_embedding.weight": model.token_embedding, "bigram_embedding.weight": model.bigram_embedding,
              "ngram_weight": model.ngram_score, "ngram_idf": model.ngram_score}.get(name)
    if module is None:
        return None
    if name == "ngram_idf":
        return tuple(module.idf.shape) if getattr(module, "idf", None) is not None else None
    return tuple(module.weight_shape if name == "ngram_weight" else module.shape if isinstance(module, CompactTable)
                 else module.weight.shape)

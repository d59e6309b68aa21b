"""The n-gram score as one ``nn.Module`` of the classifier: its buffers, their names in a checkpoint, its logits.

``[model] ngram_buckets`` > 0 gives the classifier an :class:`NgramScore`: ``ngram_scale * (w . x + b)`` joins
the logits (the positive class's with two classes, one score per class with more), where ``x`` are the text's
hashed token 1-n-grams, binarised or TF-IDF rows (``features.py``; ``[model] ngram_max_n``, ``ngram_weighting``,
read from the model's own token ids) and ``w``, ``b`` the
linear model that :class:`~.estimator.NgramEstimator` fits (``fit.py``: on the training split, by scikit-learn,
seconds to a minute, rather than by gradient). Its weights are buffers that the optimizer never touches, saved
with the model as ``ngram_weight`` and ``ngram_bias`` in the same shapes whatever the form.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager

import numpy as np
import torch
from torch import Tensor, nn

from ..compact_table import CompactTable
from ..config import ModelConfig
from ..weights_file import exact_half, nonzero_rows
from .features import (MAX_N, PIECES_PER_WORD, TFIDF, first_occurrences, ngram_buckets, ngram_features,
                       occurrence_counts, term_frequency, word_pieces)
from .forms import form_phrase

HALF_MAX = float(np.finfo(np.float16).max)   # 65,504
# the names in a checkpoint's weights
_STATE_NAMES = {"weight": "ngram_weight", "bias": "ngram_bias", "idf": "ngram_idf", "pieces": "ngram_pieces"}


class NgramScore(nn.Module):
    """The n-gram score's share of the logits, per token.

    With two classes it is one score, the log-odds of the second class (NB-LR or binary LR; stored as
    ``weight`` ``(buckets + 1,)`` and ``bias`` ``()``); with more, one score per class (one-vs-rest
    NB-LR or multinomial LR; ``weight`` ``(buckets + 1, num_labels)`` and ``bias`` ``(num_labels,)``).

    Args:
        buckets: hashed n-gram buckets (``[model] ngram_buckets``).
        scale: ``[model] ngram_scale``, the score's weight in the logits.
        num_labels: the classifier's classes, 2 or more.
        form: the form of its weights, ``"nb-lr"`` or ``"lr"``, when known (a pinned ``[model] ngram_fit``,
            or a fit's); ``None`` while unknown.
        max_n: the longest token n-gram it reads (``[model] ngram_max_n``; 3 in every checkpoint before it).
        weighting: ``"binary"`` (each distinct n-gram counts 1, every checkpoint before ``[model]
            ngram_weighting``), ``"tfidf"``: each counts its idf and the text's n-grams are L2-normalised
            (:func:`~.features.tfidf_rows`), or ``"sublinear"``: as ``"tfidf"``, each counting ``1 + ln(count)``
            times its idf; with an idf, its ``idf`` buffer ``(buckets + 1,)`` is saved as ``ngram_idf``.
        word_chars: ``[model] ngram_word_chars``: with 2 or more, each token also counts its character
            2-``word_chars``-grams (:func:`~.features.word_pieces`), from a ``pieces`` buffer ``(vocab_size,
            P)`` int32 saved as ``ngram_pieces`` and filled by :meth:`set_vocabulary`; 0: none.
        vocab_size: the tokenizer's vocabulary size (the rows of ``pieces``).

    Attributes:
        form: as the argument; :meth:`load_fit` sets it to the fit's.
        intercept: the fit's float64 intercepts while at hand (``bias`` is float32), else ``None``.

    Raises:
        ValueError: ``num_labels`` is below 2.
    """

    def __init__(self, buckets: int, scale: float = 1.0, num_labels: int = 2, form: str | None = None,
                 max_n: int = MAX_N, weighting: str = "binary", word_chars: int = 0, vocab_size: int = 0):
        super().__init__()
        if num_labels < 2:
            raise ValueError(f"the n-gram score needs at least two classes, got num_labels {num_labels}")
        self.buckets, self.scale, self.num_labels, self.form = buckets, scale, num_labels, form
        self.max_n, self.weighting, self.word_chars = max_n, weighting, word_chars
        # Buffers, not parameters: fitted by scikit-learn, never by the optimizer, yet saved with the
        # weights. Row 0 (no n-gram) stays zero. Zeroed by nn.init, so that a model built to be loaded
        # (model/skeleton.py's no_init) never writes the millions of zeros a checkpoint replaces.
        shape = (buckets + 1,) if num_labels == 2 else (buckets + 1, num_labels)
        self.register_buffer("weight", nn.init.zeros_(torch.empty(shape)))
        self.register_buffer("bias", torch.zeros(shape[1:]))
        if weighting in TFIDF:   # the weights hold w * idf; the norm reads idf itself
            self.register_buffer("idf", nn.init.zeros_(torch.empty(buckets + 1)))
        if word_chars:   # each token's character n-grams' buckets; derived from the vocabulary, saved with it
            self.register_buffer("pieces", nn.init.zeros_(torch.empty((vocab_size, PIECES_PER_WORD),
                                                                        dtype=torch.int32)))
        else:
            self.pieces: Tensor | None = None
        self.intercept: np.ndarray | None = None
        # A compressed checkpoint's weights (and idf), held as their stored int8 rows in place of ``weight``
        # (and ``idf``): use_table
        self.table: CompactTable | None = None
        self.idf_table: CompactTable | None = None
        # Only while the ONNX export traces the score (compact_table): each bucket's row in a table of used rows
        self.register_buffer("row_index", None, persistent=False)
        # A checkpoint names them ngram_weight / ngram_bias beside the classifier's own tensors (as
        # before the score was a module of its own); the parent reads them back with load_hook.
        self.register_state_dict_post_hook(_flat_names)

    @classmethod
    def from_config(cls, config: ModelConfig, num_labels: int, vocab_size: int = 0) -> "NgramScore | None":
        """The score ``[model]`` asks for (its form known when ``ngram_fit`` pins it), or ``None`` with
        ``ngram_buckets`` 0; ``vocab_size``: the rows of its word pieces' table (``[model] ngram_word_chars``).

        Raises:
            ValueError: ``num_labels`` is below 2.
        """
        if not config.ngram_buckets:
            return None
        pinned = None if config.ngram_fit == "auto" else config.ngram_fit
        return cls(config.ngram_buckets, config.ngram_scale, num_labels, pinned, config.ngram_max_n,
                   config.ngram_weighting, config.ngram_word_chars, vocab_size)

    @property
    def term_frequency(self) -> str:
        """What a distinct n-gram of a text counts before its idf: ``"sublinear"`` (``1 + ln(count)``) with that
        weighting, else ``"binary"``."""
        return term_frequency(self.weighting)

    @property
    def weight_shape(self) -> tuple[int, ...]:
        """``(buckets + 1,)`` or ``(buckets + 1, num_labels)``: the weights' shape, held whole or as a table."""
        return self.table.shape if self.table is not None else tuple(self.weight.shape)

    def use_table(self, table: CompactTable, part: str = "weight") -> None:
        """Read the weights (``part`` ``"weight"``) or the idf (``"idf"``) from ``table`` (a compressed checkpoint's,
        ``model/compress.py``) in place of that buffer, which is freed: logits and explanations are the same as
        from ``table.dense()`` held whole. A score so loaded scores and explains; it is not fitted again.

        Raises:
            ValueError: ``table`` is not of the buffer's shape, or the score has no idf.
        """
        current = self.weight_shape if part == "weight" else \
            (self.buckets + 1,) if part == "idf" and self.weighting in TFIDF else None
        if current is None or table.shape != tuple(current):
            raise ValueError(f"a table {list(table.shape)} for the n-gram score's {part} "
                             f"{'(none)' if current is None else list(current)}")
        self.register_buffer(part, None)
        if part == "weight":
            self.table = table
        else:
            self.idf_table = table

    def dense_weight(self) -> Tensor:
        """The weights whole, ``weight_shape`` float32 (a compressed score's built from its table)."""
        return self.table.dense() if self.table is not None else self.weight

    def _weight_rows(self, flat: Tensor) -> Tensor:
        """The weights of buckets ``flat`` (int64, any shape): ``(*flat.shape, *weight_shape[1:])``."""
        return self.table(flat) if self.table is not None else self.weight[flat]

    def _idf_rows(self, flat: Tensor) -> Tensor:
        """The idf of buckets ``flat`` (int64, any shape), float32 of its shape (with an idf's weighting)."""
        return self.idf_table(flat) if self.idf_table is not None else self.idf[flat]

    def set_vocabulary(self, tokens: Sequence[str]) -> None:
        """Fill the word pieces' table from the tokenizer's vocabulary (``tokens[i]`` is id ``i``'s;
        :func:`~.features.word_pieces`); nothing without ``word_chars``.

        Raises:
            ValueError: ``tokens`` is not one per row of the table.
        """
        if self.pieces is None:
            return
        if len(tokens) != self.pieces.shape[0]:
            raise ValueError(f"a vocabulary of {len(tokens):,} tokens for a word pieces' table of "
                             f"{self.pieces.shape[0]:,} rows")
        with torch.no_grad():
            self.pieces.copy_(torch.from_numpy(word_pieces(tokens, self.buckets, self.word_chars)))

    def pieces_problem(self, table: Tensor) -> str | None:
        """Why a checkpoint's ``ngram_pieces`` ``table`` cannot be this score's (a bucket outside ``[0,
        buckets]``: an untrusted folder's out-of-range index), or ``None``."""
        if table.numel() and (int(table.min()) < 0 or int(table.max()) > self.buckets):
            return f"tensor ngram_pieces holds buckets outside 0..{self.buckets:,}"
        return None

    def description(self, form: str | None = None, multi_label: bool = False) -> str:
        """What the score is, in a phrase (the model card's architecture line), in ``form`` when given (a
        training run's report), else in :attr:`form`; ``multi_label``: one binary fit per label."""
        form = form or self.form
        source = "" if form == "lr" else ", Wang & Manning 2012"
        tfidf = {"tfidf": "TF-IDF of ", "sublinear": "sublinear TF-IDF of "}.get(self.weighting, "")
        return (f"{self.scale:g} x an n-gram score ({form_phrase(form, self.num_labels, multi_label)} over {tfidf}"
                f"token 1-{self.max_n}-grams{self.pieces_phrase()} "
                f"hashed into {self.buckets:,} buckets{source})")

    def pieces_phrase(self) -> str:
        """`` and character 2-5-grams within each token`` with word pieces, else ``""``."""
        return f" and character 2-{self.word_chars}-grams within each token" if self.word_chars else ""

    def load_fit(self, weights: np.ndarray, intercepts: np.ndarray, form: str | None = None,
                 idf: np.ndarray | None = None) -> None:
        """Take a fit made elsewhere (an :class:`~.estimator.NgramEstimator`'s ``coef_`` and ``intercept_``, or a
        cross-fit's fold) as this score's.

        Args:
            weights: ``(buckets + 1,)`` or ``(buckets + 1, 1)`` with two classes, ``(buckets + 1, num_labels)``
                with more; row 0 (no n-gram) is set to zero.
            intercepts: ``(1,)`` or ``()`` with two classes, ``(num_labels,)`` with more (float64 kept as
                :attr:`intercept`).
            form: the form they come from, when known.
            idf: with an idf's ``weighting`` (:data:`TFIDF`), the ``(buckets + 1,)`` idf the weights were fitted on
                (:func:`~.features.idf_weights`): folded into the weights and kept for the norm.

        Raises:
            ValueError: the shapes do not fit this score, or ``idf`` is missing (or given) for its weighting.
        """
        if (idf is None) == (self.weighting in TFIDF):
            raise ValueError(f"an n-gram score weighted {self.weighting!r} takes idf weights "
                             f"{'with' if self.weighting in TFIDF else 'without'} its fit")
        weights = np.array(weights, dtype=np.float32).reshape(-1, *self.weight.shape[1:])
        if idf is not None:
            idf = np.asarray(idf, np.float32).reshape(-1)
            weights = weights * idf.reshape(-1, *([1] * (weights.ndim - 1)))
        intercepts = np.asarray(intercepts, dtype=np.float64).reshape(self.bias.shape or (1,))
        if weights.shape != tuple(self.weight.shape):
            raise ValueError(f"n-gram weights of shape {weights.shape} do not fit a score of shape "
                             f"{tuple(self.weight.shape)}")
        weights[0] = 0.0   # "no n-gram" is never a feature
        self.intercept, self.form = intercepts, form
        with torch.no_grad():
            self.weight.copy_(torch.from_numpy(weights))
            self.bias.copy_(torch.from_numpy(intercepts).float().view(self.bias.shape))
            if idf is not None:
                self.idf.copy_(torch.from_numpy(idf))

    def keep_half_precision(self) -> None:
        """Round ``weight`` (idf folded in) to float16's precision, 11 significant bits (:func:`half_precision`;
        float32 kept where one is beyond float16's range), so that the checkpoint stores it in half the bytes
        without a change (``weights_file.py``). A training run's fit does this once (``ngram/fit.py``); measured
        on six checkpoints' validation and test splits, no metric moved (``docs/decisions.md#packed-tables-and-half-precision``, "Half-precision
        n-gram weights")."""
        with torch.no_grad():
            self.weight.copy_(half_precision(self.weight))

    def copy_fit(self, other: "NgramScore") -> None:
        """Take ``other``'s fit as it stands: its buffers (``weight``, ``bias``, and ``idf`` when TF-IDF weighted),
        float64 intercepts and form. A run's trials fit the same rows with the same settings once and copy it.

        Raises:
            ValueError: ``other`` is weighted otherwise or its weights have another shape.
        """
        if other.weighting != self.weighting or tuple(other.weight.shape) != tuple(self.weight.shape):
            raise ValueError(f"an n-gram fit {other.weighting} {tuple(other.weight.shape)} does not fit a score "
                             f"{self.weighting} {tuple(self.weight.shape)}")
        theirs = dict(other.named_buffers())
        with torch.no_grad():
            for name, buffer in self.named_buffers():
                buffer.copy_(theirs[name])
        self.intercept = None if other.intercept is None else np.array(other.intercept, dtype=np.float64)
        self.form = other.form

    def margins(self, ids: Sequence[Sequence[int]], batch_size: int = 256) -> np.ndarray:
        """Unscaled scores ``w . x + b`` of each text: ``(len(ids),)`` float32, the log-odds of the second
        class, with two classes; ``(len(ids), num_labels)``, one per class, with more.

        Computed a batch at a time, so the n-gram matrix of 50,000 reviews is never held whole. Right
        after :meth:`load_fit` the intercepts are the fit's own (float64); a loaded score has the stored float32.
        """
        weight = self.dense_weight().cpu().numpy()
        bias = self.bias.cpu().numpy().astype(np.float64) if self.intercept is None else self.intercept
        if self.num_labels == 2:
            bias = float(bias if np.ndim(bias) == 0 else bias[0])
        out = [self._features(ids[lo:lo + batch_size]) @ weight + bias for lo in range(0, len(ids), batch_size)]
        empty = np.zeros((0,) + weight.shape[1:], np.float32)
        return np.concatenate(out).astype(np.float32) if out else empty

    def _features(self, ids: Sequence[Sequence[int]]):
        """The rows :meth:`margins` reads: binarised n-grams, or with an idf their term frequencies over their
        norms (the weights hold ``w * idf``)."""
        x = ngram_features(ids, self.buckets, max_n=self.max_n, pieces=self.pieces, tf=self.term_frequency)
        if self.weighting not in TFIDF:
            return x
        import scipy.sparse as sp

        idf = (self.idf_table.dense() if self.idf_table is not None else self.idf).cpu().numpy()
        norms = np.sqrt(np.asarray(x.multiply(x) @ (idf * idf)).ravel())
        return sp.diags(np.where(norms > 0, 1.0 / np.maximum(norms, 1e-12), 0.0).astype(np.float32)) @ x

    def logits(self, ids: Sequence[Sequence[int]]) -> np.ndarray:
        """``(len(ids), num_labels)`` float32 unscaled logits: ``[0, margin]`` with two classes."""
        m = self.margins(ids)
        return np.stack([np.zeros_like(m), m], 1) if self.num_labels == 2 else m

    def probabilities(self, ids: Sequence[Sequence[int]]) -> torch.Tensor:
        """``(len(ids), num_labels)`` float32: the score's own class probabilities (the sigmoid of the
        margin with two classes, the softmax of the one-vs-rest scores with more)."""
        m = torch.from_numpy(self.margins(ids))
        if self.num_labels == 2:
            p = torch.sigmoid(m)
            return torch.stack([1 - p, p], 1).float()
        return torch.softmax(m, 1).float()

    def token_logits(self, input_ids: Tensor) -> Tensor:
        """Each token's share of the score's logits: the scaled weights of the distinct n-grams that end
        at it (a repeated n-gram counts at its first occurrence only, its whole count with sublinear tf).

        Args:
            input_ids: ``(batch, seq_len)`` int64 token ids.

        Returns:
            ``(batch, seq_len, num_labels)``; with two classes, 0 for the first class and the share of
            the second.
        """
        # (batch, seq_len, n): n is max_n, plus P with word pieces
        buckets = ngram_buckets(input_ids, self.buckets, self.max_n, self.pieces)
        flat = buckets.flatten(1)                                           # (batch, seq_len * n)
        if self.row_index is not None:   # the ONNX export's table of used rows (compact_table)
            flat = self.row_index[flat].long()                              # (batch, seq_len * n)
        if self.term_frequency == "sublinear":   # 1 + ln(count) at each n-gram's first entry
            counts = occurrence_counts(flat).to(self.bias.dtype)            # (batch, seq_len * n)
            present = torch.where(counts > 0, 1 + torch.log(counts.clamp_min(1)), torch.zeros_like(counts))
        else:
            present = first_occurrences(flat).to(self.bias.dtype)           # (batch, seq_len * n)
        if self.weighting in TFIDF:   # each text's n-grams over the L2 norm of their tf * idf (tfidf_rows)
            norm = ((self._idf_rows(flat) * present) ** 2).sum(1, keepdim=True).sqrt()   # (batch, 1)
            present = present / norm.clamp_min(1e-12)
        if self.num_labels == 2:
            share = (self._weight_rows(flat).to(present.dtype) * present).view(buckets.shape).sum(-1)   # (b, seq_len)
            share = share * self.scale
            return torch.stack([torch.zeros_like(share), share], dim=-1)    # (batch, seq_len, 2)
        rows = self._weight_rows(flat).to(present.dtype) * present.unsqueeze(-1)  # (batch, seq_len * n, num_labels)
        return rows.view(*buckets.shape, self.num_labels).sum(2) * self.scale   # (batch, seq_len, num_labels)

    def logit_bias(self) -> Tensor:
        """``(num_labels,)``: the score's intercepts, scaled (with two classes, on the second class only)."""
        b = self.bias * self.scale
        return torch.stack([torch.zeros_like(b), b]) if self.num_labels == 2 else b

    @contextmanager
    def compact_table(self):
        """Within the block, the score's tables take the fewest bytes that give the same logits, for the ONNX export,
        whose graph stores them as traced: ``weight`` in float16 when that loses nothing (:func:`half_precision`'s
        weights always are), read back as float32 after its gather; and, where it takes fewer bytes
        (:func:`compact_rows`: several labels, or an idf), only the rows an n-gram uses, found through ``row_index``.
        A compressed score's table is compact already (the export makes its scales float16 where exact:
        :meth:`~sentiment_cli.compact_table.CompactTable.for_export`), and left as it is."""
        if self.table is not None or self.idf_table is not None:
            yield
            return
        saved = {"weight": self.weight, "row_index": self.row_index}
        if self.weighting in TFIDF:
            saved["idf"] = self.idf
        half = exact_half(self.weight)
        index, weight, idf = compact_rows(self.weight if half is None else half, saved.get("idf"))
        self.weight, self.row_index = weight, index
        if idf is not None:
            self.idf = idf
        try:
            yield
        finally:
            for name, value in saved.items():
                setattr(self, name, value)

    def load_hook(self, parent, state_dict, prefix, *args) -> None:
        """A load-state-dict pre-hook for the module that holds this one: a checkpoint's flat
        ``ngram_weight`` / ``ngram_bias`` become this module's ``weight`` / ``bias``."""
        child = next(name for name, module in parent.named_children() if module is self)
        for name, flat in _STATE_NAMES.items():
            if prefix + flat in state_dict:
                state_dict[f"{prefix}{child}.{name}"] = state_dict.pop(prefix + flat)

    def forward(self, input_ids: Tensor) -> tuple[Tensor, Tensor]:
        """``(token_logits, bias)``: ``(batch, seq_len, num_labels)`` and ``(num_labels,)``; the score's
        logits are ``token_logits.sum(1) + bias``."""
        return self.token_logits(input_ids), self.logit_bias()


def compact_rows(weight: Tensor, idf: Tensor | None) -> tuple[Tensor | None, Tensor, Tensor | None]:
    """``(row_index, rows, idf_rows)``: the rows of an n-gram table that some n-gram uses (a non-zero weight, or a
    non-zero idf, which counts in a text's norm), after a zero row 0, and each bucket's row among them (0 for an
    unused bucket), when that index and the used rows take fewer bytes than the table; else ``(None, weight, idf)``.
    A two-class score's float16 table alone (2 bytes a bucket) is never smaller so; with an idf (6 bytes a bucket)
    it is when under a third of the buckets are used; several labels' tables (2 bytes a label) often are.

    Args:
        weight: ``(buckets + 1,)`` or ``(buckets + 1, num_labels)``, any float dtype; row 0 is no n-gram.
        idf: ``(buckets + 1,)`` float32, or ``None``.

    Returns:
        ``row_index`` ``(buckets + 1,)`` int32, ``rows`` ``(used + 1, ...)`` and ``idf_rows`` ``(used + 1,)``; or the
        inputs as they are, with ``None``.
    """
    rows = nonzero_rows(weight) if idf is None else torch.cat([nonzero_rows(weight), nonzero_rows(idf)]).unique()
    rows = rows[rows > 0]   # row 0 (no n-gram) is the zero row every unused bucket reads
    row_bytes = weight[0].numel() * weight.element_size() + (idf.element_size() if idf is not None else 0)
    if len(weight) * 4 + (len(rows) + 1) * row_bytes >= len(weight) * row_bytes:
        return None, weight, idf
    index = torch.zeros(len(weight), dtype=torch.int32, device=weight.device)
    index[rows] = torch.arange(1, len(rows) + 1, dtype=torch.int32, device=weight.device)
    keep = torch.cat([torch.zeros(1, dtype=rows.dtype, device=rows.device), rows])
    return index, weight[keep], None if idf is None else idf[keep]


def half_precision(weights: Tensor) -> Tensor:
    """``weights`` (float32, any shape, any device) rounded to the nearest float16 and back, unless one is beyond
    float16's range (then as they are): what a checkpoint can store in two bytes a weight, bit for bit."""
    if weights.numel() and float(weights.abs().max()) > HALF_MAX:
        return weights
    return weights.to(torch.float16).to(weights.dtype)


def _outer(prefix: str) -> str:
    """The parent module's prefix of a submodule's state-dict prefix (``"a.ngram_score."`` -> ``"a."``)."""
    return prefix[: prefix.rstrip(".").rfind(".") + 1]


def _flat_names(module, state_dict, prefix, local_metadata) -> None:
    for name, flat in _STATE_NAMES.items():
        if prefix + name in state_dict:
            state_dict[_outer(prefix) + flat] = state_dict.pop(prefix + name)

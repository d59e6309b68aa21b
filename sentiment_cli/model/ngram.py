"""The n-gram score: a linear model over a review's hashed word 1-3-grams, fitted by NB-LR, added to the logits.

``[model] ngram_buckets`` > 0 gives the classifier an :class:`NgramScore`:
``ngram_scale * (w . x + b)`` joins the positive class's logit, where ``x`` are
the review's binarised hashed token 1-3-grams (read from the model's own token
ids) and ``w``, ``b`` an NB-LR model: binarised counts scaled by their
naive-Bayes log-count ratios, then an L2 logistic regression, the ratios folded
into the weights (Wang & Manning 2012, "Baselines and Bigrams: Simple, Good
Sentiment and Topic Classification", ACL 2012). ``train`` fits it on the
training split (:meth:`NgramScore.fit`, liblinear, seconds) rather than by
gradient; its weights are buffers that the optimizer never touches, saved with
the model as ``ngram_weight`` and ``ngram_bias``.

The same fit is the teacher of distillation (``training/distill.py``).

Shapes use ``batch``, ``seq_len`` and ``max_n`` (the longest n-gram, 3). Token
id 0 is ``<pad>`` and 1 is ``<unk>``. scikit-learn and scipy are imported
inside the fitting functions, so inference never pays for them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..data.tokenizer import UNK_ID
from ..errors import DataError

HASH_MULTIPLIER = 1_000_003   # as the bigram embedding's hash: a prime larger than any vocabulary here
MAX_N = 3                     # the score reads word 1-3-grams
FIT_C = 0.1                   # inverse L2 strength; IMDB's block hold-out: C 0.03-1 within 0.1 point
TEACHER_BUCKETS = 1 << 22     # buckets of a teacher of distillation alone ([model] ngram_buckets 0)
_POSITION_BASE = 1 << 32      # more entries than any review has n-grams
_STATE_NAMES = {"weight": "ngram_weight", "bias": "ngram_bias"}   # the names in a checkpoint's weights


def ngram_buckets(input_ids: Tensor, buckets: int, max_n: int = MAX_N) -> Tensor:
    """The hashed bucket of each word n-gram ending at each token, for n = 1 .. ``max_n``.

    The hashing trick of fastText (Joulin et al. 2017, 2.2), one order at a time:
    ``h_1 = id mod buckets`` and ``h_n[t] = (h_(n-1)[t-1] * 1_000_003 + id[t]) mod buckets``,
    stored as ``h + 1``. Bucket 0 means "no n-gram": where any of its tokens is ``<pad>`` or
    ``<unk>``, or the review starts within it. Unigrams and longer n-grams share one bucket space.

    Args:
        input_ids: ``(batch, seq_len)`` int64 token ids.
        buckets: number of hashed buckets, at least 1.
        max_n: longest n-gram.

    Returns:
        ``(batch, seq_len, max_n)`` int64 in ``[0, buckets]``; ``[..., n - 1]`` holds the n-grams.
    """
    token_real = input_ids > UNK_ID                                           # (batch, seq_len)
    hashed, real = input_ids % buckets, token_real                            # the unigrams
    orders = [torch.where(real, hashed + 1, torch.zeros_like(hashed))]
    for _ in range(2, max_n + 1):
        hashed = (nn.functional.pad(hashed[:, :-1], (1, 0)) * HASH_MULTIPLIER + input_ids) % buckets
        real = nn.functional.pad(real[:, :-1], (1, 0), value=False) & token_real
        orders.append(torch.where(real, hashed + 1, torch.zeros_like(hashed)))
    return torch.stack(orders, dim=-1)                                       # (batch, seq_len, max_n)


def first_occurrences(buckets: Tensor) -> Tensor:
    """Which entries are the first (leftmost) of their bucket in their row, bucket 0 never.

    The score reads binarised counts (an n-gram present or not, as NB-LR is fitted), so a
    repeated n-gram counts once.

    Args:
        buckets: ``(batch, k)`` int64, e.g. :func:`ngram_buckets` flattened to ``(batch, seq_len * max_n)``.

    Returns:
        ``(batch, k)`` bool.
    """
    # Sorting (bucket, position) pairs, all distinct, puts each bucket's leftmost entry first without
    # a stable sort (which ONNX export lacks). The base is a constant, not k, so that an exported
    # graph does not freeze the traced length into it; buckets < 2**22 keep the key below 2**63.
    key = buckets * _POSITION_BASE + torch.arange(buckets.shape[1], device=buckets.device)   # (batch, k)
    ordered_key, order = torch.sort(key, dim=1)                              # (batch, k) each
    ordered = torch.div(ordered_key, _POSITION_BASE, rounding_mode="floor")  # (batch, k) buckets, ascending
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    first = first & (ordered > 0)
    return torch.zeros_like(first).scatter(1, order, first)                  # back to input order


def ngram_features(ids: Sequence[Sequence[int]], buckets: int, batch_size: int = 256):
    """Binarised hashed token 1-3-grams, exactly as :meth:`NgramScore.token_logits` reads them.

    Args:
        ids: token ids per review (as the model gets them: encoded and truncated).
        buckets: number of hashed buckets.
        batch_size: reviews hashed at a time (memory only; the result does not depend on it).

    Returns:
        ``(len(ids), buckets + 1)`` float32 scipy CSR matrix of 0/1; column 0 ("no n-gram") is empty.
    """
    import scipy.sparse as sp

    from ..data.batching import collate

    blocks = []
    for lo in range(0, len(ids), batch_size):
        input_ids, _ = collate(ids[lo:lo + batch_size])
        flat = ngram_buckets(input_ids, buckets).flatten(1)                     # (batch, seq_len * max_n)
        rows = torch.arange(flat.shape[0]).unsqueeze(1).expand_as(flat)
        keep = flat > 0
        x = sp.csr_matrix((np.ones(int(keep.sum()), np.float32), (rows[keep].numpy(), flat[keep].numpy())),
                          shape=(flat.shape[0], buckets + 1))
        x.sum_duplicates()
        x.data[:] = 1.0
        blocks.append(x)
    return sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, buckets + 1), dtype=np.float32)


def log_count_ratio(x, y: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """NB log-count ratio per feature, ``r = log((p / |p|_1) / (q / |q|_1))`` (Wang & Manning 2012, eq. 2).

    Args:
        x: binarised feature counts, a ``(n_reviews, n_features)`` scipy sparse matrix of 0/1.
        y: ``(n_reviews,)`` labels, 1 positive, 0 negative.
        alpha: additive smoothing: ``p = alpha + sum of x over positive reviews``, ``q`` likewise.

    Returns:
        ``(n_features,)`` float64 array: positive where a feature is more common in positive reviews.
    """
    y = np.asarray(y)
    p = alpha + np.asarray(x[y == 1].sum(axis=0)).ravel()
    q = alpha + np.asarray(x[y == 0].sum(axis=0)).ravel()
    return np.log((p / p.sum()) / (q / q.sum()))


def nb_lr(x, y: np.ndarray, C: float = FIT_C):
    """``(r, classifier)``: the log-count ratios of ``x`` (:func:`log_count_ratio`) and the L2 logistic
    regression (inverse strength ``C``) fitted on ``x * r``. Deterministic (liblinear, fixed seed).

    Args:
        x: ``(n_reviews, n_features)`` scipy sparse binarised counts.
        y: ``(n_reviews,)`` label ids 0 and 1, both present.
        C: inverse L2 strength.

    Returns:
        ``(n_features,)`` float32 ratios and a fitted scikit-learn ``LogisticRegression``.
    """
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    r = log_count_ratio(x, y).astype(np.float32)
    # liblinear's dual solver: the fast one when features (millions of n-grams) far outnumber reviews
    classifier = LogisticRegression(C=C, solver="liblinear", dual=True, max_iter=1000, random_state=0)
    classifier.fit(x @ sp.diags(r), y)
    return r, classifier


def label_ids(labels: Sequence[int], num_labels: int) -> np.ndarray:
    """``labels`` as an int array, checked for the fit: ids in ``[0, num_labels)``, at least two classes present.

    Raises:
        DataError: fewer than two classes among the labels, or an id out of range.
    """
    y = np.asarray(labels, dtype=np.int64)
    found = np.unique(y)
    if len(found) < 2 or found.min() < 0 or found.max() >= num_labels:
        raise DataError(f"the n-gram score needs labelled texts of at least two of its {num_labels} classes; "
                        f"got label ids {found.tolist()[:10]}")
    return y


def nb_lr_columns(x, y: np.ndarray, num_labels: int, C: float = FIT_C) -> tuple[np.ndarray, np.ndarray]:
    """NB-LR's weights, one column per scored class: the second class against the first with two classes
    (Wang & Manning 2012), else each class against the rest (one-vs-rest NB-LR).

    Args:
        x: ``(n_texts, n_features)`` scipy sparse binarised counts.
        y: ``(n_texts,)`` label ids in ``[0, num_labels)``.
        num_labels: classes.
        C: inverse L2 strength.

    Returns:
        ``(n_features, k)`` float32 weights (the ratios folded in) and ``(k,)`` float64 intercepts, with
        ``k = 1`` for two classes and ``num_labels`` otherwise. A class absent from ``y`` (a fold of a
        cross-fit) gets zero weights and an intercept of -10: it is never predicted.
    """
    targets = [y] if num_labels == 2 else [(y == c).astype(np.int64) for c in range(num_labels)]
    weights = np.zeros((x.shape[1], len(targets)), np.float32)
    intercepts = np.full(len(targets), -10.0)
    for k, target in enumerate(targets):
        if len(np.unique(target)) < 2:
            continue
        r, classifier = nb_lr(x, target, C)
        weights[:, k] = (r * classifier.coef_[0]).astype(np.float32)
        intercepts[k] = float(classifier.intercept_[0])
    return weights, intercepts


class NgramScore(nn.Module):
    """The n-gram score's share of the logits, per token, and its fit.

    With two classes it is one score, the log-odds of the second class (NB-LR; stored as ``weight``
    ``(buckets + 1,)`` and ``bias`` ``()``); with more, one score per class, each against the rest
    (one-vs-rest NB-LR; ``weight`` ``(buckets + 1, num_labels)`` and ``bias`` ``(num_labels,)``).

    Args:
        buckets: hashed n-gram buckets (``[model] ngram_buckets``).
        scale: ``[model] ngram_scale``, the score's weight in the logits.
        num_labels: the classifier's classes, 2 or more.

    Raises:
        ValueError: ``num_labels`` is below 2.
    """

    def __init__(self, buckets: int, scale: float = 1.0, num_labels: int = 2):
        super().__init__()
        if num_labels < 2:
            raise ValueError(f"the n-gram score needs at least two classes, got num_labels {num_labels}")
        self.buckets, self.scale, self.num_labels = buckets, scale, num_labels
        # Buffers, not parameters: fitted by NB-LR, never by the optimizer, yet saved with the weights.
        # Row 0 (no n-gram) stays zero.
        shape = (buckets + 1,) if num_labels == 2 else (buckets + 1, num_labels)
        self.register_buffer("weight", torch.zeros(shape))
        self.register_buffer("bias", torch.zeros(shape[1:]))
        self.intercept: np.ndarray | None = None   # the fit's float64 intercepts, while at hand (bias is float32)
        # A checkpoint names them ngram_weight / ngram_bias beside the classifier's own tensors (as
        # before the score was a module of its own); the parent reads them back with load_hook.
        self.register_state_dict_post_hook(_flat_names)

    @classmethod
    def from_config(cls, config: ModelConfig, num_labels: int) -> "NgramScore | None":
        """The score ``[model]`` asks for, or ``None`` with ``ngram_buckets`` 0.

        Raises:
            ValueError: ``num_labels`` is below 2.
        """
        return cls(config.ngram_buckets, config.ngram_scale, num_labels) if config.ngram_buckets else None

    @property
    def description(self) -> str:
        """What the score is, in a phrase (the model card's architecture line)."""
        fit = "NB-LR" if self.num_labels == 2 else "one-vs-rest NB-LR"
        return (f"{self.scale:g} x an n-gram score ({fit} over token 1-3-grams hashed into {self.buckets:,} "
                "buckets, Wang & Manning 2012)")

    def fit(self, ids: Sequence[Sequence[int]], labels: Sequence[int], C: float = FIT_C) -> None:
        """Fit NB-LR (:func:`nb_lr_columns`) on the training texts' hashed token 1-3-grams and keep it as the score.

        Deterministic, so every DDP rank and a resumed run fit the same weights.

        Args:
            ids: the training texts' token ids (encoded and truncated, as the model reads them).
            labels: their label ids, in ``[0, num_labels)``.
            C: inverse L2 strength of the logistic regressions.

        Raises:
            DataError: fewer than two classes among the labels, or an id out of range.
        """
        y = label_ids(labels, self.num_labels)
        weights, intercepts = nb_lr_columns(ngram_features(ids, self.buckets), y, self.num_labels, C)
        weights[0] = 0.0   # "no n-gram" is never a feature
        self.intercept = intercepts
        with torch.no_grad():
            self.weight.copy_(torch.from_numpy(weights).view(self.weight.shape))
            self.bias.copy_(torch.from_numpy(intercepts).view(self.bias.shape))

    def margins(self, ids: Sequence[Sequence[int]], batch_size: int = 256) -> np.ndarray:
        """Unscaled scores ``w . x + b`` of each text: ``(len(ids),)`` float32, the log-odds of the second
        class, with two classes; ``(len(ids), num_labels)``, one per class, with more.

        Computed a batch at a time, so the n-gram matrix of 50,000 reviews is never held whole. Right
        after :meth:`fit` the intercepts are the fit's own (float64); a loaded score has the stored float32.
        """
        weight = self.weight.cpu().numpy()
        bias = self.bias.cpu().numpy().astype(np.float64) if self.intercept is None else self.intercept
        if self.num_labels == 2:
            bias = float(bias if np.ndim(bias) == 0 else bias[0])
        out = [ngram_features(ids[lo:lo + batch_size], self.buckets) @ weight + bias
               for lo in range(0, len(ids), batch_size)]
        empty = np.zeros((0,) + weight.shape[1:], np.float32)
        return np.concatenate(out).astype(np.float32) if out else empty

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
        at it (a repeated n-gram counts at its first occurrence only).

        Args:
            input_ids: ``(batch, seq_len)`` int64 token ids.

        Returns:
            ``(batch, seq_len, num_labels)``; with two classes, 0 for the first class and the share of
            the second.
        """
        buckets = ngram_buckets(input_ids, self.buckets)                    # (batch, seq_len, max_n)
        flat = buckets.flatten(1)                                           # (batch, seq_len * max_n)
        present = first_occurrences(flat).to(self.weight.dtype)             # (batch, seq_len * max_n)
        if self.num_labels == 2:
            share = (self.weight[flat] * present).view(buckets.shape).sum(-1)   # (batch, seq_len)
            share = share * self.scale
            return torch.stack([torch.zeros_like(share), share], dim=-1)    # (batch, seq_len, 2)
        rows = self.weight[flat] * present.unsqueeze(-1)                    # (batch, seq_len * max_n, num_labels)
        return rows.view(*buckets.shape, self.num_labels).sum(2) * self.scale   # (batch, seq_len, num_labels)

    def logit_bias(self) -> Tensor:
        """``(num_labels,)``: the score's intercepts, scaled (with two classes, on the second class only)."""
        b = self.bias * self.scale
        return torch.stack([torch.zeros_like(b), b]) if self.num_labels == 2 else b

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


def _outer(prefix: str) -> str:
    """The parent module's prefix of a submodule's state-dict prefix (``"a.ngram."`` -> ``"a."``)."""
    return prefix[: prefix.rstrip(".").rfind(".") + 1]


def _flat_names(module, state_dict, prefix, local_metadata) -> None:
    for name, flat in _STATE_NAMES.items():
        if prefix + name in state_dict:
            state_dict[_outer(prefix) + flat] = state_dict.pop(prefix + name)


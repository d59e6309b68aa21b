"""The n-gram score: a linear model over a text's hashed word 1-3-grams, fitted on the training split, in the logits.

``[model] ngram_buckets`` > 0 gives the classifier an :class:`NgramScore`:
``ngram_scale * (w . x + b)`` joins the logits (the positive class's with two
classes, one score per class with more), where ``x`` are the review's
binarised hashed token 1-3-grams (read from the model's own token ids) and
``w``, ``b`` a linear model in one of two forms (``[model] ngram_fit``):

- ``"nb-lr"``: NB-LR: binarised counts scaled by their naive-Bayes log-count
  ratios, then an L2 logistic regression, the ratios folded into the weights
  (Wang & Manning 2012, "Baselines and Bigrams: Simple, Good Sentiment and
  Topic Classification", ACL 2012); one-vs-rest with more than two classes.
- ``"lr"``: a plain L2 logistic regression on the binarised counts, binary
  with two classes and multinomial (softmax) with more.
- ``"auto"`` (the default): the form and its inverse L2 strength ``C`` that
  :func:`select_fit` picks by k-fold cross-validation on (a seeded sample of)
  the training texts alone, then fitted on all of them.

``train`` fits the score on the training split (:meth:`NgramScore.fit`,
scikit-learn, seconds to a minute) rather than by gradient; its weights are
buffers that the optimizer never touches, saved with the model as
``ngram_weight`` and ``ngram_bias`` in the same shapes whatever the form.

The same fit is the teacher of distillation (``training/distill.py``); both forms, each at its own
cross-validated C (:func:`select_forms`), are what ``sentiment audit`` cross-fits (``audit/crossfit.py``).

Shapes use ``batch``, ``seq_len`` and ``max_n`` (the longest n-gram, 3). Token
id 0 is ``<pad>`` and 1 is ``<unk>``. scikit-learn and scipy are imported
inside the fitting functions, so inference never pays for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..config import NGRAM_FIT_GB, ModelConfig
from ..data.tokenizer import UNK_ID
from ..errors import DataError

HASH_MULTIPLIER = 1_000_003   # as the bigram embedding's hash: a prime larger than any vocabulary here
MAX_N = 3                     # the score reads word 1-3-grams
FIT_C = 0.1                   # NB-LR's inverse L2 strength; IMDB's block hold-out: C 0.03-1 within 0.1 point
LR_C = 10.0                   # plain LR's, when pinned (ngram_fit = "lr"); see FIT_GRID
FIT_FORMS = ("nb-lr", "lr")   # the fitted forms, in the order that breaks a tie of cross-validation
# The C select_fit tries per form: on TREC-6, Subj, SST-5 (sentences, phrases) and IMDB, NB-LR's cross-validated
# accuracy rose up to C 1 and was flat beyond, LR's flat from C 1 to 30 (docs/experiments.md, bench/ngram_forms.py).
FIT_GRID = {"nb-lr": (0.1, 0.3, 1.0), "lr": (1.0, 10.0, 30.0)}
CV_FOLDS = 3                  # folds of select_fit's cross-validation
CV_TEXTS = 10_000             # at most this many training texts (a seeded sample) are cross-validated
CV_SEED = 0                   # the sample's and the folds' seed: every rank and a resumed run choose alike
UNSEEN_INTERCEPT = -10.0      # a class absent from a fit (a fold of a cross-fit) is never predicted
TEACHER_BUCKETS = 1 << 22     # buckets of a teacher of distillation alone ([model] ngram_buckets 0)
FIT_GB = NGRAM_FIT_GB         # the most memory a fit may take, in GB: [training] ngram_fit_gb's default, audit's
DENSE_COPIES = 3              # (buckets + 1, k) float32 matrices alive at once: the score's, the fit's, load_fit's
LBFGS_VECTORS = 28            # float64 vectors of the parameters L-BFGS keeps: 2m + 5 (scipy, m = 10) + 3 (sklearn)
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


def fit_bytes(buckets: int, num_labels: int, seen: int = 0, lr: bool = True) -> int:
    """The bytes a fit of the n-gram score takes at its peak, estimated before anything is allocated.

    The weights are ``(buckets + 1, k)`` float32, ``k`` = 1 with two classes, else ``num_labels``, of which
    :data:`DENSE_COPIES` are alive at once; logistic regression (``lr``: the form may be ``"lr"``) adds
    L-BFGS's :data:`LBFGS_VECTORS` float64 vectors of its parameters, one per class and column of the ``seen``
    columns that occur in the texts (``(seen + 1) * num_labels`` parameters, 1 class with two).
    The texts' features themselves are linear in their tokens and not counted.

    Args:
        buckets: hashed buckets.
        num_labels: classes, 2 or more.
        seen: columns that occur in the training texts (0 before they are known).
        lr: whether a logistic regression may be fitted (``ngram_fit`` ``"auto"`` or ``"lr"``).
    """
    k = 1 if num_labels == 2 else num_labels
    dense = DENSE_COPIES * (buckets + 1) * k * 4
    return dense + (LBFGS_VECTORS * 8 * (seen + 1) * k if lr and seen else 0)


@dataclass(frozen=True)
class FitLimit:
    """The most memory a fit of the n-gram score may take, and what the refusal tells the user.

    Attributes:
        gb: the limit, in GB (10^9 bytes).
        setting: what raises it, as the message names it.
        instead: what else the user may do, a phrase (e.g. fewer buckets), or empty.
        without_lr: what else, when the weights alone fit and logistic regression's copies do not, or empty.
    """

    gb: float = FIT_GB
    setting: str = "--set training.ngram_fit_gb=N ([training] ngram_fit_gb)"
    instead: str = ""
    without_lr: str = ""

    def check(self, buckets: int, num_labels: int, seen: int = 0, lr: bool = True) -> None:
        """Refuse a fit that :func:`fit_bytes` puts above :attr:`gb`, before it allocates anything.

        Raises:
            DataError: one line: the size, the limit, :attr:`setting` and :attr:`instead`.
        """
        need = fit_bytes(buckets, num_labels, seen, lr)
        if need <= self.gb * 1e9:
            return
        part = f", and logistic regression's working copies for {seen:,} n-gram columns" if lr and seen else ""
        other = [self.instead] if self.instead else []
        if part and self.without_lr and fit_bytes(buckets, num_labels) <= self.gb * 1e9:
            other.append(self.without_lr)
        raise DataError(f"the n-gram score of {buckets:,} buckets x {num_labels:,} classes needs about "
                        f"{need / 1e9:,.1f} GB to fit (its weights{part}), above the limit of {self.gb:g} GB; "
                        f"raise it with {self.setting}" + "".join(f", or {o}" for o in other))


def buckets_within(num_labels: int, limit_gb: float) -> int:
    """The most buckets whose weights alone (:func:`fit_bytes` without logistic regression) fit ``limit_gb``, as a
    power of two (0 when not even one does): what a message suggests."""
    k = 1 if num_labels == 2 else num_labels
    most = int(limit_gb * 1e9) // (DENSE_COPIES * k * 4) - 1
    return 1 << (most.bit_length() - 1) if most >= 1 else 0


def log_count_ratio(x, y: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """NB log-count ratio per feature, ``r = log((p / |p|_1) / (q / |q|_1))`` (Wang & Manning 2012, eq. 2).

    The norms run over the features that occur in ``x``, the vocabulary of the paper: a hashed
    bucket no text fills is no feature, and counting its smoothing would push both norms towards
    ``alpha * n_features``, cancelling the ``log(|q| / |p|)`` offset that one-vs-rest needs when the
    rest has many times the class's counts (SST-5's dev accuracy of the score alone: 38.3% with
    every bucket counted, 40.9% with the seen ones; unchanged on IMDB and Subj).

    Args:
        x: binarised feature counts, a ``(n_reviews, n_features)`` scipy sparse matrix of 0/1.
        y: ``(n_reviews,)`` labels, 1 positive, 0 negative.
        alpha: additive smoothing: ``p = alpha + sum of x over positive reviews``, ``q`` likewise.

    Returns:
        ``(n_features,)`` float64 array: positive where a feature is more common in positive reviews.
    """
    y = np.asarray(y)
    p = np.asarray(x[y == 1].sum(axis=0)).ravel()
    q = np.asarray(x[y == 0].sum(axis=0)).ravel()
    seen = (p + q) > 0
    p, q = p + alpha, q + alpha
    return np.log((p / p[seen].sum()) / (q / q[seen].sum()))


def nb_lr(x, y: np.ndarray, C: float = FIT_C, class_weight: str | None = None):
    """``(r, classifier)``: the log-count ratios of ``x`` (:func:`log_count_ratio`) and the L2 logistic
    regression (inverse strength ``C``) fitted on ``x * r``. Deterministic (liblinear, fixed seed).

    Args:
        x: ``(n_reviews, n_features)`` scipy sparse binarised counts.
        y: ``(n_reviews,)`` label ids 0 and 1, both present.
        C: inverse L2 strength.
        class_weight: scikit-learn's: ``None``, or ``"balanced"`` (each class's rows weigh
            ``n / (2 * n_class)``).

    Returns:
        ``(n_features,)`` float32 ratios and a fitted scikit-learn ``LogisticRegression``.
    """
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    r = log_count_ratio(x, y).astype(np.float32)
    # liblinear's dual solver: the fast one when features (millions of n-grams) far outnumber reviews
    classifier = LogisticRegression(C=C, solver="liblinear", dual=True, max_iter=1000, random_state=0,
                                    class_weight=class_weight)
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


def nb_lr_columns(x, y: np.ndarray, num_labels: int, C: float = FIT_C,
                  class_weight: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """NB-LR's weights, one column per scored class: the second class against the first with two classes
    (Wang & Manning 2012), else each class against the rest (one-vs-rest NB-LR).

    Args:
        x: ``(n_texts, n_features)`` scipy sparse binarised counts.
        y: ``(n_texts,)`` label ids in ``[0, num_labels)``.
        num_labels: classes.
        C: inverse L2 strength.
        class_weight: each fit's (:func:`nb_lr`): ``None`` or ``"balanced"`` (a class against the rest).

    Returns:
        ``(n_features, k)`` float32 weights (the ratios folded in) and ``(k,)`` float64 intercepts, with
        ``k = 1`` for two classes and ``num_labels`` otherwise. A class absent from ``y`` (a fold of a
        cross-fit) gets zero weights and an intercept of -10: it is never predicted.
    """
    targets = [y] if num_labels == 2 else [(y == c).astype(np.int64) for c in range(num_labels)]
    weights = np.zeros((x.shape[1], len(targets)), np.float32)
    intercepts = np.full(len(targets), UNSEEN_INTERCEPT)
    for k, target in enumerate(targets):
        if len(np.unique(target)) < 2:
            continue
        r, classifier = nb_lr(x, target, C, class_weight)
        weights[:, k] = (r * classifier.coef_[0]).astype(np.float32)
        intercepts[k] = float(classifier.intercept_[0])
    return weights, intercepts


def lr_columns(x, y: np.ndarray, num_labels: int, C: float = LR_C,
               class_weight: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Plain L2 logistic regression's weights on the binarised counts, in :func:`nb_lr_columns`' layout:
    one column, the second class's log-odds, with two classes (binary LR); one per class with more
    (multinomial LR: the softmax over the columns is its probability).

    Fitted by L-BFGS on the columns that occur in ``x`` only: with an L2 penalty a column that is
    zero in every text has weight 0 at the optimum, and leaving out the millions of empty hashed
    buckets makes the fit far faster (TREC-6: 4 s instead of 4.5 minutes). Deterministic.

    Args:
        x: ``(n_texts, n_features)`` scipy CSR matrix of binarised counts.
        y: ``(n_texts,)`` label ids in ``[0, num_labels)``.
        num_labels: classes.
        C: inverse L2 strength.
        class_weight: scikit-learn's: ``None``, or ``"balanced"`` (each class's rows weigh
            ``n / (classes present * n_class)``).

    Returns:
        ``(n_features, k)`` float32 weights and ``(k,)`` float64 intercepts, ``k`` as :func:`nb_lr_columns`.
        A class absent from ``y`` gets zero weights and an intercept of -10; with only two of more classes
        present, theirs are ``[0, binary LR]`` (the same softmax).
    """
    from sklearn.linear_model import LogisticRegression

    k, present = (1 if num_labels == 2 else num_labels), np.unique(y)
    weights = np.zeros((x.shape[1], k), np.float32)
    intercepts = np.full(k, UNSEEN_INTERCEPT)
    if len(present) < 2:
        return weights, intercepts
    seen = np.unique(x.indices)                                          # columns with an entry
    classifier = LogisticRegression(C=C, solver="lbfgs", max_iter=1000, class_weight=class_weight).fit(x[:, seen], y)
    coef, bias = classifier.coef_.T, classifier.intercept_               # (n_seen, 1 or n_present), (1 or n_present,)
    if k > 1 and coef.shape[1] == 1:                                     # two classes present: binary form
        coef, bias = np.concatenate([np.zeros_like(coef), coef], 1), np.array([0.0, bias[0]])
    columns = [0] if k == 1 else present
    weights[np.ix_(seen, columns)] = coef
    intercepts[columns] = bias
    return weights, intercepts


DEFAULT_C = {"nb-lr": FIT_C, "lr": LR_C}   # each form's C when the config pins it
_CHOSEN_BY = ("cross-validation", "config", "caller")
_COLUMNS = {"nb-lr": nb_lr_columns, "lr": lr_columns}


def form_phrase(form: str | None, num_labels: int) -> str:
    """A fitted ``form`` (``"nb-lr"`` or ``"lr"``) in words, as the model card names it, per the number of
    classes; both candidates when ``form`` is ``None`` (not known)."""
    two = num_labels == 2
    return {"nb-lr": "NB-LR" if two else "one-vs-rest NB-LR",
            "lr": "logistic regression" if two else "multinomial logistic regression"}.get(
        form, "NB-LR or logistic regression, as cross-validation chose,")


def fit_columns(x, y: np.ndarray, num_labels: int, form: str, C: float,
                class_weight: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The weights of ``form`` (``"nb-lr"``: :func:`nb_lr_columns`, ``"lr"``: :func:`lr_columns`, which take
    ``class_weight``: ``None`` or ``"balanced"``), fitted
    on one thread: bit-for-bit the same on any machine, and L-BFGS's OpenMP threads, on cores that
    other work shares, made it ~5x slower (TREC-6: 20 s against 4 s).

    Raises:
        ValueError: an unknown form.
    """
    from threadpoolctl import threadpool_limits

    if form not in _COLUMNS:
        raise ValueError(f"unknown n-gram fit {form!r}; known: {', '.join(FIT_FORMS)}")
    with threadpool_limits(limits=1):
        return _COLUMNS[form](x, y, num_labels, C, class_weight)


def predicted(scores: np.ndarray) -> np.ndarray:
    """``(n,)`` label ids from :func:`fit_columns`' scores ``x @ w + b``, ``(n, k)``: the sign of the one
    column with two classes, the largest column with more."""
    return (scores[:, 0] > 0).astype(np.int64) if scores.shape[1] == 1 else scores.argmax(1)


@dataclass(frozen=True)
class NgramFit:
    """The form an n-gram score is fitted in, and how it was chosen.

    Attributes:
        form: ``"nb-lr"`` or ``"lr"`` (:data:`FIT_FORMS`).
        C: inverse L2 strength.
        chosen_by: ``"cross-validation"`` (:func:`select_fit`), ``"config"`` (``[model] ngram_fit``
            pinned the form; C is its :data:`DEFAULT_C`) or ``"caller"`` (given to :meth:`NgramScore.fit`).
        cv_accuracy: cross-validated accuracy of each candidate, keyed ``"nb-lr C=0.1"``; empty without.
        cv_texts: the training texts cross-validated (0 without).
        cv_folds: their folds (0 without).
    """

    form: str
    C: float
    chosen_by: str = "caller"
    cv_accuracy: dict[str, float] = field(default_factory=dict)
    cv_texts: int = 0
    cv_folds: int = 0

    def report(self) -> dict[str, Any]:
        """What ``metrics.json``'s ``"teacher"`` says of the fit."""
        out = {"form": self.form, "C": self.C, "chosen_by": self.chosen_by}
        if self.cv_texts:
            out.update(cv_folds=self.cv_folds, cv_texts=self.cv_texts, cv_accuracy=self.cv_accuracy)
        return out

    @classmethod
    def from_report(cls, report: Any) -> "NgramFit | None":
        """The fit a :meth:`report` (read back from ``metrics.json``) names, or ``None`` where it names none
        (a run before forms were chosen, or anything malformed)."""
        if not isinstance(report, Mapping) or report.get("form") not in FIT_FORMS:
            return None
        C = report.get("C")
        if isinstance(C, bool) or not isinstance(C, (int, float)) or not 0 < C < float("inf"):
            return None
        chosen_by = report.get("chosen_by")
        return cls(report["form"], float(C), chosen_by if chosen_by in _CHOSEN_BY else "caller")


def select_fit(x, y: np.ndarray, num_labels: int, *, grid: Mapping[str, Sequence[float]] = FIT_GRID,
               folds: int = CV_FOLDS, max_texts: int = CV_TEXTS, seed: int = CV_SEED,
               class_weight: str | None = None) -> NgramFit:
    """Choose the form and C by k-fold cross-validation on the training texts alone.

    At most ``max_texts`` texts, a seeded sample, are split into ``folds`` seeded folds; each
    candidate (every form of ``grid``, each of its C) is fitted on all folds but one and scored on
    that one, and the candidate right most often wins, a tie going to the earlier form and C.
    Deterministic: every DDP rank and a resumed run choose the same.

    Args:
        x: ``(n_texts, n_features)`` scipy sparse binarised counts (CSR).
        y: ``(n_texts,)`` label ids in ``[0, num_labels)``.
        num_labels: classes.
        grid: the C to try per form, in order.
        folds, max_texts, seed: the cross-validation's folds, sample size and seed.
        class_weight: every candidate's fit's (:func:`fit_columns`); the score is still accuracy.

    Returns:
        The winner, with every candidate's accuracy (``chosen_by="cross-validation"``).
    """
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(y), max_texts, replace=False)) if len(y) > max_texts else np.arange(len(y))
    xs, ys = x[rows], np.asarray(y)[rows]
    fold = rng.permutation(len(rows)) % folds
    candidates = [(form, float(C)) for form, Cs in grid.items() for C in Cs]
    right = np.zeros(len(candidates), np.int64)
    for k in range(folds):
        inside, outside = fold != k, fold == k
        for i, (form, C) in enumerate(candidates):
            w, b = fit_columns(xs[inside], ys[inside], num_labels, form, C, class_weight)
            right[i] += int((predicted(xs[outside] @ w + b) == ys[outside]).sum())
    form, C = candidates[int(np.argmax(right))]                           # the first of equals
    accuracy = {f"{f} C={c:g}": float(r / len(rows)) for (f, c), r in zip(candidates, right)}
    return NgramFit(form, C, "cross-validation", accuracy, len(rows), folds)


@dataclass(frozen=True)
class NgramForms:
    """Every form of the n-gram score, each at the C cross-validation scored best for it: what a cross-fit
    (``sentiment audit``, ``audit/crossfit.py``) refits on each fold's training rows. Made by :func:`select_forms`.

    Attributes:
        choice: :func:`select_fit`'s result: the winning form and C, with every candidate's accuracy.
        C: each form's best C (a tie: the first tried), in :data:`FIT_GRID`'s order (NB-LR first).
        num_labels: classes.
        class_weight: every fit's (:func:`fit_columns`): ``None`` or ``"balanced"``.
    """

    choice: NgramFit
    C: dict[str, float]
    num_labels: int
    class_weight: str | None = None

    def fit(self, x, y: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Each form fitted at its C on features ``x`` and labels ``y``, as :meth:`NgramScore.fit` fits one.

        Args:
            x: ``(n_texts, buckets + 1)`` scipy sparse binarised counts (:func:`ngram_features`).
            y: ``(n_texts,)`` label ids in ``[0, num_labels)``.

        Returns:
            ``{form: (weights, intercepts)}`` in :attr:`C`'s order: ``(buckets + 1, k)`` float64 weights with
            row 0 ("no n-gram") zero, and ``(k,)`` intercepts, ``k`` = 1 with two classes (the log-odds of the
            second), else ``num_labels``; a text's scores are ``x @ weights + intercepts``.
        """
        fitted = {}
        for form, C in self.C.items():
            weights, intercepts = fit_columns(x, y, self.num_labels, form, C, self.class_weight)
            weights[0] = 0.0   # "no n-gram" is never a feature
            fitted[form] = (weights, intercepts)
        return fitted


def select_forms(x, y: np.ndarray, num_labels: int, class_weight: str | None = None) -> NgramForms:
    """Choose each form's C by :func:`select_fit`'s cross-validation (at most :data:`CV_TEXTS` texts,
    :data:`CV_FOLDS` folds, deterministic), for a cross-fit that refits every form on each fold
    (:meth:`NgramForms.fit`).

    Args:
        x: ``(n_texts, buckets + 1)`` scipy sparse binarised counts (:func:`ngram_features`).
        y: ``(n_texts,)`` label ids in ``[0, num_labels)``.
        num_labels: classes.
        class_weight: every fit's, in the choice and after it (:func:`fit_columns`).
    """
    choice = select_fit(x, y, num_labels, class_weight=class_weight)
    best: dict[str, tuple[float, float]] = {}
    for name, accuracy in choice.cv_accuracy.items():   # "nb-lr C=0.1": accuracy, in the grid's order
        form, C = name.split(" C=")
        if form not in best or accuracy > best[form][0]:
            best[form] = (accuracy, float(C))
    return NgramForms(choice, {form: C for form, (_, C) in best.items()}, num_labels, class_weight)


class NgramScore(nn.Module):
    """The n-gram score's share of the logits, per token, and its fit.

    With two classes it is one score, the log-odds of the second class (NB-LR or binary LR; stored as
    ``weight`` ``(buckets + 1,)`` and ``bias`` ``()``); with more, one score per class (one-vs-rest
    NB-LR or multinomial LR; ``weight`` ``(buckets + 1, num_labels)`` and ``bias`` ``(num_labels,)``).

    Args:
        buckets: hashed n-gram buckets (``[model] ngram_buckets``).
        scale: ``[model] ngram_scale``, the score's weight in the logits.
        num_labels: the classifier's classes, 2 or more.
        fit: ``[model] ngram_fit``: ``"auto"`` (:func:`select_fit` chooses), ``"nb-lr"`` or ``"lr"``.

    Attributes:
        fitted: the :class:`NgramFit` of the last :meth:`fit` (or, for a loaded checkpoint, as its
            ``metrics.json`` says); ``None`` when unknown.

    Raises:
        ValueError: ``num_labels`` is below 2, or an unknown ``fit``.
    """

    def __init__(self, buckets: int, scale: float = 1.0, num_labels: int = 2, fit: str = "auto"):
        super().__init__()
        if num_labels < 2:
            raise ValueError(f"the n-gram score needs at least two classes, got num_labels {num_labels}")
        if fit not in ("auto", *FIT_FORMS):
            raise ValueError(f"unknown n-gram fit {fit!r}; known: auto, {', '.join(FIT_FORMS)}")
        self.buckets, self.scale, self.num_labels, self.fit_form = buckets, scale, num_labels, fit
        # Buffers, not parameters: fitted by scikit-learn, never by the optimizer, yet saved with the
        # weights. Row 0 (no n-gram) stays zero.
        shape = (buckets + 1,) if num_labels == 2 else (buckets + 1, num_labels)
        self.register_buffer("weight", torch.zeros(shape))
        self.register_buffer("bias", torch.zeros(shape[1:]))
        self.intercept: np.ndarray | None = None   # the fit's float64 intercepts, while at hand (bias is float32)
        self.fitted: NgramFit | None = None
        # A checkpoint names them ngram_weight / ngram_bias beside the classifier's own tensors (as
        # before the score was a module of its own); the parent reads them back with load_hook.
        self.register_state_dict_post_hook(_flat_names)

    @classmethod
    def from_config(cls, config: ModelConfig, num_labels: int) -> "NgramScore | None":
        """The score ``[model]`` asks for, or ``None`` with ``ngram_buckets`` 0.

        Raises:
            ValueError: ``num_labels`` is below 2.
        """
        if not config.ngram_buckets:
            return None
        return cls(config.ngram_buckets, config.ngram_scale, num_labels, config.ngram_fit)

    @property
    def form(self) -> str | None:
        """The form fitted (:attr:`fitted`), else the pinned one, else ``None`` (a loaded checkpoint of
        ``ngram_fit = "auto"`` whose report is not at hand)."""
        return self.fitted.form if self.fitted is not None else None if self.fit_form == "auto" else self.fit_form

    @property
    def form_phrase(self) -> str:
        """:attr:`form` in words (:func:`form_phrase`)."""
        return form_phrase(self.form, self.num_labels)

    def read_report(self, report: Any) -> None:
        """Take the form a training run reported for this score (``metrics.json``'s ``"teacher"``), so that
        :attr:`description` names it for a loaded checkpoint; a report naming none leaves it unknown."""
        self.fitted = NgramFit.from_report(report)

    @property
    def description(self) -> str:
        """What the score is, in a phrase (the model card's architecture line)."""
        source = "" if self.form == "lr" else ", Wang & Manning 2012"
        return (f"{self.scale:g} x an n-gram score ({self.form_phrase} over token 1-3-grams hashed into "
                f"{self.buckets:,} buckets{source})")

    def choose(self, x, y: np.ndarray, class_weight: str | None = None) -> NgramFit:
        """The fit ``[model] ngram_fit`` asks for on features ``x`` and labels ``y``: :func:`select_fit`'s
        choice with ``"auto"`` (its fits weighted by ``class_weight``), else the pinned form with its
        :data:`DEFAULT_C`."""
        if self.fit_form == "auto":
            return select_fit(x, y, self.num_labels, class_weight=class_weight)
        return NgramFit(self.fit_form, DEFAULT_C[self.fit_form], "config")

    def fit(self, ids: Sequence[Sequence[int]], labels: Sequence[int], form: str | None = None,
            C: float | None = None, class_weight: str | None = None, limit: FitLimit | None = None) -> NgramFit:
        """Fit the score on the training texts' hashed token 1-3-grams: in ``form`` with ``C`` when given
        (a cross-fit's folds repeat the full fit's choice), else as :meth:`choose` says.

        Deterministic, so every DDP rank and a resumed run fit the same weights.

        Args:
            ids: the training texts' token ids (encoded and truncated, as the model reads them).
            labels: their label ids, in ``[0, num_labels)``.
            form: ``"nb-lr"`` or ``"lr"``; ``None``: as ``[model] ngram_fit`` says.
            C: inverse L2 strength; ``None``: the form's :data:`DEFAULT_C`.
            class_weight: ``None``, or ``"balanced"``: each class's texts weigh inversely to its count
                (scikit-learn's ``class_weight``, :func:`fit_columns`), as ``[training] class_weight``
                weighs the encoder's loss.
            limit: the memory the fit may take (:class:`FitLimit`; default: :data:`FIT_GB`), checked once the
                texts' n-gram columns are known, before scikit-learn allocates.

        Returns:
            The :class:`NgramFit` fitted (also kept as :attr:`fitted`).

        Raises:
            DataError: fewer than two classes among the labels, an id out of range, or a fit above ``limit``.
            ValueError: an unknown ``form``.
        """
        if form is not None and form not in FIT_FORMS:
            raise ValueError(f"unknown n-gram fit {form!r}; known: {', '.join(FIT_FORMS)}")
        y = label_ids(labels, self.num_labels)
        x = ngram_features(ids, self.buckets)
        lr = form == "lr" if form is not None else self.fit_form in ("auto", "lr")
        (limit or FitLimit()).check(self.buckets, self.num_labels, len(np.unique(x.indices)), lr)
        if form is None:
            choice = self.choose(x, y, class_weight)
        else:
            choice = NgramFit(form, DEFAULT_C[form] if C is None else C)
        weights, intercepts = fit_columns(x, y, self.num_labels, choice.form, choice.C, class_weight)
        self.load_fit(weights, intercepts, choice)
        return choice

    def load_fit(self, weights: np.ndarray, intercepts: np.ndarray, fitted: NgramFit | None = None) -> None:
        """Take a fit made elsewhere (:func:`fit_columns`' output, or a cross-fit's fold) as this score's.

        Args:
            weights: ``(buckets + 1,)`` with two classes, ``(buckets + 1, num_labels)`` with more; row 0
                (no n-gram) is set to zero.
            intercepts: ``(1,)`` or ``()`` with two classes, ``(num_labels,)`` with more (float64 kept as
                :attr:`intercept`).
            fitted: the :class:`NgramFit` they come from, when known.

        Raises:
            ValueError: the shapes do not fit this score.
        """
        weights = np.array(weights, dtype=np.float32).reshape(-1, *self.weight.shape[1:])
        intercepts = np.asarray(intercepts, dtype=np.float64).reshape(self.bias.shape or (1,))
        if weights.shape != tuple(self.weight.shape):
            raise ValueError(f"n-gram weights of shape {weights.shape} do not fit a score of shape "
                             f"{tuple(self.weight.shape)}")
        weights[0] = 0.0   # "no n-gram" is never a feature
        self.intercept, self.fitted = intercepts, fitted
        with torch.no_grad():
            self.weight.copy_(torch.from_numpy(weights))
            self.bias.copy_(torch.from_numpy(intercepts).float().view(self.bias.shape))

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


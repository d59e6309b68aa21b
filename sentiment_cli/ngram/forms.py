"""The n-gram score's two forms, fitted by scikit-learn on binarised hashed n-gram counts.

- ``"nb-lr"``: NB-LR: binarised counts scaled by their naive-Bayes log-count ratios, then an L2 logistic
  regression, the ratios folded into the weights (Wang & Manning 2012, "Baselines and Bigrams: Simple, Good
  Sentiment and Topic Classification", ACL 2012); one-vs-rest with more than two classes.
- ``"lr"``: a plain L2 logistic regression on the binarised counts, binary with two classes and multinomial
  (softmax) with more.

Both give weights in one layout, ``(n_features, k)`` and ``(k,)`` intercepts, ``k`` = 1 with two classes (the
log-odds of the second) and ``num_labels`` with more. scikit-learn and scipy are imported inside the fitting
functions, so inference never pays for them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import DataError

FIT_C = 0.1                   # NB-LR's inverse L2 strength; IMDB's block hold-out: C 0.03-1 within 0.1 point
LR_C = 10.0                   # plain LR's, when pinned (ngram_fit = "lr"); see selection.FIT_GRID
FIT_FORMS = ("nb-lr", "lr")   # the fitted forms, in the order that breaks a tie of cross-validation
UNSEEN_INTERCEPT = -10.0      # a class absent from a fit (a fold of a cross-fit) is never predicted
DEFAULT_C = {"nb-lr": FIT_C, "lr": LR_C}   # each form's C when the config pins it


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


def nb_lr(x, y: np.ndarray, C: float = FIT_C, class_weight: str | None = None, fit_intercept: bool = True):
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
    import warnings

    import scipy.sparse as sp
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    r = log_count_ratio(x, y).astype(np.float32)
    # liblinear's dual solver: the fast one when features (millions of n-grams) far outnumber reviews
    classifier = LogisticRegression(C=C, solver="liblinear", dual=True, max_iter=1000, random_state=0,
                                    class_weight=class_weight, fit_intercept=fit_intercept)
    with warnings.catch_warnings():   # a rare label's fit may stop at max_iter: the fit is still used, as is
        warnings.simplefilter("ignore", ConvergenceWarning)
        classifier.fit(x @ sp.diags(r), y)
    return r, classifier


def label_ids(labels: Sequence[int], num_labels: int) -> np.ndarray:
    """``labels`` as an int array, checked for the fit: ids in ``[0, num_labels)``, at least two classes present;
    a ``(n_texts, num_labels)`` 0/1 matrix (several labels per text) is returned as int64, unchecked.

    Raises:
        DataError: fewer than two classes among the labels, or an id out of range.
    """
    y = np.asarray(labels, dtype=np.int64)
    if y.ndim == 2:
        return y
    found = np.unique(y)
    if len(found) < 2 or found.min() < 0 or found.max() >= num_labels:
        raise DataError(f"the n-gram score needs labelled texts of at least two of its {num_labels} classes; "
                        f"got label ids {found.tolist()[:10]}")
    return y


def nb_lr_columns(x, y: np.ndarray, num_labels: int, C: float = FIT_C,
                  class_weight: str | None = None, fit_intercept: bool = True) -> tuple[np.ndarray, np.ndarray]:
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
    targets = _binary_targets(y, num_labels)
    weights = np.zeros((x.shape[1], len(targets)), np.float32)
    intercepts = np.full(len(targets), UNSEEN_INTERCEPT)
    for k, target in enumerate(targets):
        if len(np.unique(target)) < 2:
            continue
        r, classifier = nb_lr(x, target, C, class_weight, fit_intercept)
        weights[:, k] = (r * classifier.coef_[0]).astype(np.float32)
        intercepts[k] = float(np.ravel(classifier.intercept_)[0])
    return weights, intercepts


def _binary_targets(y: np.ndarray, num_labels: int) -> list[np.ndarray]:
    """The binary problems one-vs-rest fits: the label ids with two classes; each class against the rest with
    more; each label's column of a ``(n_texts, num_labels)`` 0/1 matrix (several labels per text)."""
    if y.ndim == 2:
        return [np.asarray(y[:, j], dtype=np.int64) for j in range(y.shape[1])]
    return [y] if num_labels == 2 else [(y == c).astype(np.int64) for c in range(num_labels)]


def _binary_lr_columns(x, y: np.ndarray, C: float, class_weight: str | None,
                       fit_intercept: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Multi-label plain LR: one binary L2 logistic regression per label (one-vs-rest), in
    :func:`nb_lr_columns`' layout, on the columns that occur in ``x`` (see :func:`lr_columns`)."""
    from sklearn.linear_model import LogisticRegression

    seen = np.unique(x.indices)
    xs = x[:, seen]
    weights = np.zeros((x.shape[1], y.shape[1]), np.float32)
    intercepts = np.full(y.shape[1], UNSEEN_INTERCEPT)
    for j, target in enumerate(_binary_targets(y, y.shape[1])):
        if len(np.unique(target)) < 2:
            continue
        classifier = LogisticRegression(C=C, solver="lbfgs", max_iter=1000, class_weight=class_weight,
                                        fit_intercept=fit_intercept).fit(xs, target)
        weights[seen, j] = classifier.coef_[0]
        intercepts[j] = float(np.ravel(classifier.intercept_)[0])
    return weights, intercepts


def lr_columns(x, y: np.ndarray, num_labels: int, C: float = LR_C,
               class_weight: str | None = None, fit_intercept: bool = True) -> tuple[np.ndarray, np.ndarray]:
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

    if y.ndim == 2:
        return _binary_lr_columns(x, y, C, class_weight, fit_intercept)
    k, present = (1 if num_labels == 2 else num_labels), np.unique(y)
    weights = np.zeros((x.shape[1], k), np.float32)
    intercepts = np.full(k, UNSEEN_INTERCEPT)
    if len(present) < 2:
        return weights, intercepts
    seen = np.unique(x.indices)                                          # columns with an entry
    classifier = LogisticRegression(C=C, solver="lbfgs", max_iter=1000, class_weight=class_weight,
                                    fit_intercept=fit_intercept).fit(x[:, seen], y)
    coef = classifier.coef_.T                                            # (n_seen, 1 or n_present)
    bias = np.broadcast_to(classifier.intercept_, coef.shape[1:]).astype(np.float64)   # (1 or n_present,); 0.0 unfitted
    if k > 1 and coef.shape[1] == 1:                                     # two classes present: binary form
        coef, bias = np.concatenate([np.zeros_like(coef), coef], 1), np.array([0.0, bias[0]])
    columns = [0] if k == 1 else present
    weights[np.ix_(seen, columns)] = coef
    intercepts[columns] = bias
    return weights, intercepts


_COLUMNS = {"nb-lr": nb_lr_columns, "lr": lr_columns}


def form_phrase(form: str | None, num_labels: int, multi_label: bool = False) -> str:
    """A fitted ``form`` (``"nb-lr"`` or ``"lr"``) in words, as the model card names it, per the number of
    classes (``multi_label``: one binary fit per label); both candidates when ``form`` is ``None`` (not known)."""
    if multi_label and form in ("nb-lr", "lr"):
        return {"nb-lr": "NB-LR", "lr": "logistic regression"}[form] + " per label"
    two = num_labels == 2
    return {"nb-lr": "NB-LR" if two else "one-vs-rest NB-LR",
            "lr": "logistic regression" if two else "multinomial logistic regression"}.get(
        form, "NB-LR or logistic regression, as cross-validation chose,")


def fit_columns(x, y: np.ndarray, num_labels: int, form: str, C: float,
                class_weight: str | None = None, fit_intercept: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The weights of ``form`` (``"nb-lr"``: :func:`nb_lr_columns`, ``"lr"``: :func:`lr_columns`, which take
    ``class_weight``: ``None`` or ``"balanced"``; ``fit_intercept`` false: intercepts 0, so a text with no
    n-gram scores 0, ``[model] ngram_intercept``), fitted
    on one thread: bit-for-bit the same on any machine, and L-BFGS's OpenMP threads, on cores that
    other work shares, made it ~5x slower (TREC-6: 20 s against 4 s).

    Raises:
        ValueError: an unknown form.
    """
    from threadpoolctl import threadpool_limits

    if form not in _COLUMNS:
        raise ValueError(f"unknown n-gram fit {form!r}; known: {', '.join(FIT_FORMS)}")
    with threadpool_limits(limits=1):
        return _COLUMNS[form](x, y, num_labels, C, class_weight, fit_intercept)


def multi_label_loss(scores: np.ndarray, y: np.ndarray) -> float:
    """Summed binary log-loss of ``(n, num_labels)`` scores (logits) against a ``(n, num_labels)`` 0/1 matrix:
    how cross-validation ranks multi-label fits (lower is better)."""
    z = np.asarray(scores, dtype=np.float64)
    return float((np.logaddexp(0.0, z) - np.asarray(y) * z).sum())


def predicted(scores: np.ndarray) -> np.ndarray:
    """``(n,)`` label ids from :func:`fit_columns`' scores ``x @ w + b``, ``(n, k)``: the sign of the one
    column with two classes, the largest column with more."""
    return (scores[:, 0] > 0).astype(np.int64) if scores.shape[1] == 1 else scores.argmax(1)

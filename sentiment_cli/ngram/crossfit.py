"""Cross-fitting the n-gram score: each text's scores from fits on the folds that hold it out.

On the texts it was fitted on, a fit of the n-gram score is near-certain. What a text's label would look like
to a score that never saw it comes from cross-fitting (out-of-fold predictions, as in stacking: Wolpert 1992,
"Stacked Generalization"): the texts are split into folds, and each fold's texts are scored by a fit on the
others. Two users share :func:`cross_fit`:

- training's residual scores (``[training] ngram_residual``, :func:`residual_logits`): the full fit's form and C
  on :data:`RESIDUAL_FOLDS` seeded random folds;
- ``sentiment audit``'s out-of-fold probabilities (``audit/probabilities.py``): both forms, each at its
  cross-validated C, on stratified folds; with several labels per text (``y`` a 0/1 matrix,
  ``audit/multilabel.py``) on seeded random folds (:func:`random_splits`: stratification by one label id does
  not apply), one column per label.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .estimator import NgramEstimator
from .memory import FitLimit

RESIDUAL_FOLDS = 5   # ngram_residual: folds of the training split for the cross-fitted scores


@dataclass
class FoldFits:
    """Out-of-fold scores of every text, per form, and each fold's fits.

    Attributes:
        scores: ``{form: (n, k) float32}``: each text's unscaled scores ``x @ w + b`` from the fold's fit that
            held it out; ``k`` = 1 with two classes (the second class's log-odds), else ``num_labels``.
        fold: ``(n,)`` int64: the fold each text was held out in.
        fits: per fold, ``{form: keep(fitted NgramEstimator)}`` (the estimator itself by default).
    """

    scores: dict[str, np.ndarray]
    fold: np.ndarray
    fits: list[dict[str, NgramEstimator]]


def cross_fit(x, y: np.ndarray, splits: Iterable[tuple[np.ndarray, np.ndarray]], forms: Mapping[str, float],
              num_labels: int, *, class_weight: str | None = None, limit: FitLimit | None = None,
              score: Callable[[NgramEstimator, Any], np.ndarray] = NgramEstimator.decision_function,
              on_fold_start: Callable[[int, int, int], None] | None = None,
              on_fold_end: Callable[[int, int], None] | None = None,
              keep: Callable[[NgramEstimator], Any] | None = None) -> FoldFits:
    """Fit every form of ``forms`` (form -> C) on each split's inside rows and score its outside rows.

    Args:
        x: ``(n, buckets + 1)`` scipy CSR binarised counts (:func:`~.features.ngram_features`).
        y: ``(n,)`` label ids in ``[0, num_labels)``, or a ``(n, num_labels)`` 0/1 matrix (several labels per
            text: one binary fit per label, ``k = num_labels`` columns, each a label's logit).
        splits: ``(inside, outside)`` row indices per fold; every row is outside exactly once.
        forms: the forms to fit and each one's C, in order.
        num_labels: classes.
        class_weight: every fit's (:class:`~.estimator.NgramEstimator`).
        limit: every fit's memory bound, or ``None``.
        score: a fit's scores of rows ``x[outside]``, ``(outside, k)``:
            :meth:`~.estimator.NgramEstimator.decision_function` (float64, rounded to float32 when stored) or
            :meth:`~.estimator.NgramEstimator.margins` (as the model's score computes them).
        on_fold_start: called with ``(fold, inside rows, outside rows)`` (fold from 0) before a fold's fits.
        on_fold_end: called with ``(fold, outside rows)`` after them.
        keep: what a fold keeps of each fit once its rows are scored (``None``: the estimator); e.g.
            ``lambda e: None`` where the weights are not needed (a multi-label fit's are ``(buckets + 1,
            num_labels)`` float32, about 470 MB at 4M buckets and 28 labels, per form and fold).

    Returns:
        The :class:`FoldFits`.

    Raises:
        DataError: a fold's inside rows hold fewer than two classes, or a fit above ``limit``.
    """
    k = y.shape[1] if y.ndim == 2 else 1 if num_labels == 2 else num_labels
    scores = {form: np.zeros((len(y), k), np.float32) for form in forms}
    fold = np.zeros(len(y), np.int64)
    fits: list[dict[str, NgramEstimator]] = []
    for f, (inside, outside) in enumerate(splits):
        if on_fold_start is not None:
            on_fold_start(f, len(inside), len(outside))
        fits.append({})
        for form, C in forms.items():
            fitted = NgramEstimator(num_labels, form, C, class_weight, limit).fit(x[inside], y[inside])
            scores[form][outside] = score(fitted, x[outside])
            fits[f][form] = fitted if keep is None else keep(fitted)
        fold[outside] = f
        if on_fold_end is not None:
            on_fold_end(f, len(outside))
    return FoldFits(scores, fold, fits)


def random_splits(n: int, folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``folds`` seeded random folds of ``n`` rows (row ``i`` in fold ``permutation[i] % folds``), as
    ``(inside, outside)`` index arrays."""
    fold = np.random.default_rng([seed, folds]).permutation(n) % folds
    return [(np.flatnonzero(fold != k), np.flatnonzero(fold == k)) for k in range(folds)]


def full_logits(scores: np.ndarray, num_labels: int) -> np.ndarray:
    """``(n, num_labels)`` logits from a score's ``(n, k)`` columns: ``[0, margin]`` with two classes."""
    return np.concatenate([np.zeros_like(scores), scores], 1) if num_labels == 2 else scores


def residual_logits(x, labels: Sequence[int], num_labels: int, seed: int, *, form: str, C: float,
                    class_weight: str | None = None, limit: FitLimit | None = None) -> np.ndarray:
    """``(n, num_labels)`` float32: each training text's unscaled n-gram logits from a score fitted on the other
    folds (:data:`RESIDUAL_FOLDS` seeded random folds), each in ``form`` with ``C`` (the full fit's choice, not
    chosen again per fold), ``class_weight`` (the full fit's) and ``limit``.

    Raises:
        DataError: a fold's training texts hold fewer than two classes, or a fit above ``limit``.
    """
    y = np.asarray(labels)
    fits = cross_fit(x, y, random_splits(len(y), RESIDUAL_FOLDS, seed), {form: C}, num_labels,
                     class_weight=class_weight, limit=limit, score=NgramEstimator.margins)
    return full_logits(fits.scores[form], num_labels)

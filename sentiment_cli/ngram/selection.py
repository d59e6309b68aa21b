"""The cross-validated choice of the n-gram score's form and C, on the training texts alone.

Every form of :data:`FIT_GRID` at each of its C is fitted on all folds but one of (a seeded sample of) the
training texts and scored on that one; the candidate right most often wins (:func:`select_fit`). A cross-fit
that refits every form on each fold takes each form at its own best C (:func:`select_forms`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .forms import fit_columns, multi_label_loss, predicted

# The C select_fit tries per form: on TREC-6, Subj, SST-5 (sentences, phrases) and IMDB, NB-LR's cross-validated
# accuracy rose up to C 1 and was flat beyond, LR's flat from C 1 to 30 (docs/decisions.md#the-n-gram-scores-form-and-c,
# bench/ngram_forms.py). The default's search has its own grid, measured on validation (training/policy.py).
FIT_GRID = {"nb-lr": (0.1, 0.3, 1.0), "lr": (1.0, 10.0, 30.0)}
CV_FOLDS = 3                  # folds of select_fit's cross-validation
CV_TEXTS = 10_000             # at most this many training texts (a seeded sample) are cross-validated
CV_SEED = 0                   # the sample's and the folds' seed: every rank and a resumed run choose alike


@dataclass(frozen=True)
class Selection:
    """What cross-validation chose, and what it measured.

    Attributes:
        form: ``"nb-lr"`` or ``"lr"``.
        C: inverse L2 strength.
        cv_accuracy: cross-validated accuracy of each candidate, keyed ``"nb-lr C=0.1"``, in the grid's order.
        cv_texts: the training texts cross-validated.
        cv_folds: their folds.
    """

    form: str
    C: float
    cv_accuracy: dict[str, float] = field(default_factory=dict)
    cv_texts: int = 0
    cv_folds: int = 0

    def best_C(self) -> dict[str, float]:
        """Each form's best C (a tie: the first tried), in the grid's order (NB-LR first)."""
        best: dict[str, tuple[float, float]] = {}
        for name, accuracy in self.cv_accuracy.items():   # "nb-lr C=0.1": accuracy, in the grid's order
            form, C = name.split(" C=")
            if form not in best or accuracy > best[form][0]:
                best[form] = (accuracy, float(C))
        return {form: C for form, (_, C) in best.items()}


def select_fit(x, y: np.ndarray, num_labels: int, *, grid: Mapping[str, Sequence[float]] = FIT_GRID,
               folds: int = CV_FOLDS, max_texts: int = CV_TEXTS, seed: int = CV_SEED,
               class_weight: str | None = None) -> Selection:
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
        class_weight: every candidate's fit's (:func:`~.forms.fit_columns`); the score is still accuracy.

    Returns:
        The winner, with every candidate's accuracy.
    """
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(y), max_texts, replace=False)) if len(y) > max_texts else np.arange(len(y))
    xs, ys = x[rows], np.asarray(y)[rows]
    fold = rng.permutation(len(rows)) % folds
    candidates = [(form, float(C)) for form, Cs in grid.items() for C in Cs]
    right = np.zeros(len(candidates), np.float64)
    for k in range(folds):
        inside, outside = fold != k, fold == k
        for i, (form, C) in enumerate(candidates):
            w, b = fit_columns(xs[inside], ys[inside], num_labels, form, C, class_weight)
            right[i] += _fold_score(xs[outside] @ w + b, ys[outside])
    form, C = candidates[int(np.argmax(right))]                           # the first of equals
    accuracy = {f"{f} C={c:g}": float(r / len(rows)) for (f, c), r in zip(candidates, right)}
    return Selection(form, C, accuracy, len(rows), folds)


def _fold_score(scores: np.ndarray, y: np.ndarray) -> float:
    """A held-out fold's score of a candidate (higher is better): texts right; with several labels per text
    (``y`` a 0/1 matrix), minus the summed binary log-loss (:func:`~.forms.multi_label_loss`)."""
    if y.ndim == 2:
        return -multi_label_loss(scores, y)
    return float((predicted(scores) == y).sum())


def select_forms(x, y: np.ndarray, num_labels: int,
                 class_weight: str | None = None) -> tuple[Selection, dict[str, float]]:
    """``(selection, {form: C})``: :func:`select_fit`'s choice (at most :data:`CV_TEXTS` texts, :data:`CV_FOLDS`
    folds, deterministic) and each form at its own best C (:meth:`Selection.best_C`), for a cross-fit that refits
    every form on each fold (``sentiment audit``).

    Args:
        x: ``(n_texts, buckets + 1)`` scipy sparse binarised counts (:func:`~.features.ngram_features`).
        y: ``(n_texts,)`` label ids in ``[0, num_labels)``.
        num_labels: classes.
        class_weight: every fit's in the choice (:func:`~.forms.fit_columns`).
    """
    selection = select_fit(x, y, num_labels, class_weight=class_weight)
    return selection, selection.best_C()

"""``sentiment audit`` on multi-label data (several labels per text): out-of-fold per-label probabilities and
cleanlab's multi-label confident learning.

A multi-label split's labels are a ``(rows, L)`` 0/1 matrix (``data/multilabel.py``). Each label is its own
binary question, so the audit is the single-label one (``audit/probabilities.py``, ``audit/label_issues.py``)
made one-vs-rest:

1. **Probabilities.** The n-gram score's two forms, NB-LR and logistic regression, one binary fit per label
   (``ngram/forms.py``: ``fit_columns`` with a 0/1 matrix), each at the C that 3-fold cross-validation scored
   best by summed binary log-loss (``ngram/selection.py``), are cross-fitted over ``folds`` seeded random folds
   (``ngram/crossfit.py``: ``random_splits``; folds stratified by one label id do not apply to label sets).
   Each form's out-of-fold logits are divided by a temperature *per label* (``inference/multilabel.py``:
   ``fit_label_temperatures``, Guo et al. 2017 per sigmoid output), the two averaged, and a last temperature
   per label fitted on the average; label ``j``'s probability is ``sigmoid(z_j / T_j)``, rows not summing
   to 1. No class weights: a balanced weight per label would move a rare label's probabilities up on every
   row, which a temperature cannot undo, and cleanlab's per-label thresholds already adapt to the label's
   base rate.
2. **Issues.** cleanlab's ``multilabel_classification.filter.find_label_issues`` (one-vs-rest confident
   learning per label, Northcutt et al. 2021; ``filter_by="prune_by_noise_rate"``, cleanlab's default, which
   with two classes per label flags what ``"both"`` flags) gives the flagged rows, ranked by
   ``multilabel_classification.rank.get_label_quality_scores`` (each label's self-confidence, aggregated by
   an exponential moving average that weighs the worst label most; in [0, 1], low is suspicious);
   ``find_multilabel_issues_per_class`` says which labels of a row it flags.
3. **The suggested label set** is the given set with cleanlab's flagged labels flipped: a given label it flags
   is *unlikely* (given, but the out-of-fold probability is below cleanlab's threshold for "not this label"),
   an absent label it flags is *missing* (not given, but the probability reaches the label's threshold: the
   mean out-of-fold probability of the label on the rows given it). So every flagged row's suggestion differs
   from its given set in exactly the labels cleanlab doubts, and per-label thresholds, not one 0.5, decide it:
   a rare label's probabilities rarely reach 0.5 even on its own rows. Where every row of the data carries a
   label (GoEmotions), a suggestion that would be empty (all given labels doubted, none missing) is the row's
   most probable label instead (``audit/label_sets.py``).

The findings carry no token reasons (the single-label path's exact split of one margin): a label set's
suggestion is several binary margins, and keeping every fold's ``(buckets, L)`` weights for them would take
gigabytes at GoEmotions' size (``ngram/crossfit.py``'s ``keep``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError
from ..inference.multilabel import fit_label_temperatures
from ..ngram.crossfit import cross_fit as cross_fit_forms
from ..ngram.crossfit import random_splits
from ..ngram.features import ngram_features
from ..ngram.memory import FIT_GB, FitLimit
from ..ngram.selection import select_forms
from ..wording import plural
from .callbacks import AuditCallbacks
from .probabilities import FOLDS, SEED, CrossFit, Warned, audit_buckets

FILTER_BY = "prune_by_noise_rate"   # cleanlab's multi-label default (module docstring)
# Each fold fits 2 L binary models (GoEmotions: 56 fits on 35k-39k texts, about 1-2 minutes a fold on a shared
# 2-core machine), so a multi-label audit defaults to 5 folds, not the single-label path's 10.
LABEL_SET_FOLDS = 5
DECISION = 0.5                      # the out-of-fold accuracy's decision per label (method record only)


def check_label_folds(labels: np.ndarray, label_names: Sequence[str], folds: int, where: str) -> None:
    """Multi-label cross-fitting needs at least ``folds`` rows and some label given on some row.

    Args:
        labels: ``(n, L)`` 0/1 matrix.

    Raises:
        DataError: fewer rows than folds, or no label given anywhere.
    """
    y = np.asarray(labels)
    if len(y) < folds:
        raise DataError(f"{where}: {plural(len(y), 'row')}, too few for {folds} folds; lower --folds or add rows")
    if not y.any():
        raise DataError(f"{where}: no row carries any of the {len(label_names)} labels; nothing to audit")


def cross_fit_labels(ids: Sequence[Sequence[int]], labels: np.ndarray, num_labels: int, folds: int = FOLDS,
                     seed: int = SEED, callbacks: AuditCallbacks | None = None, fit_gb: float = FIT_GB) -> CrossFit:
    """Out-of-fold per-label logits of the n-gram score for every row (module docstring, step 1).

    Args:
        ids: each text's token ids (:func:`~.probabilities.encode`).
        labels: ``(n, L)`` 0/1 matrix, ``L = num_labels``.
        num_labels: labels.
        folds: seeded random folds, at least 2.
        seed: the folds' draw.
        callbacks: progress (the choice of C, each fold).
        fit_gb: the most memory a fit's weights may take, in GB (the buckets shrink to fit).

    Returns:
        A :class:`~.probabilities.CrossFit` with ``temperatures`` ``(L,)`` set (its ``probabilities()`` are
        per-label sigmoids), ``logits`` ``(n, L)`` float32, no fold weights (``weights`` and ``intercepts`` empty),
        ``scale`` ``{form: (L,) list}``. Work: each fold fits ``2 L`` binary models on the other folds.

    Raises:
        DataError: the fit would need more than ``fit_gb`` GB.
    """
    warned = Warned()
    with warned.catch():
        cross = _cross_fit_labels(ids, labels, num_labels, folds, seed, callbacks or AuditCallbacks(), fit_gb)
    cross.notes = warned.notes()
    return cross


def _cross_fit_labels(ids, labels, num_labels: int, folds: int, seed: int, cb: AuditCallbacks,
                      fit_gb: float) -> CrossFit:
    """:func:`cross_fit_labels`, warnings not caught."""
    start = time.perf_counter()
    y = np.asarray(labels, dtype=np.int64)
    buckets = audit_buckets(ids, num_labels, fit_gb)
    limit = FitLimit(fit_gb, "--fit-gb N", "audit fewer labels")
    limit.check(buckets, num_labels)
    x = ngram_features(ids, buckets)
    limit.check(buckets, num_labels, len(np.unique(x.indices)), multi_label=True)
    cb.on_stage(f"choosing C for NB-LR and logistic regression (one binary fit per label) by 3-fold "
                f"cross-validation on {min(len(y), 10_000):,} rows")
    selection, forms = select_forms(x, y, num_labels)
    fits = cross_fit_forms(x, y, random_splits(len(y), folds, seed), forms, num_labels,
                           on_fold_start=lambda f, inside, outside: cb.on_fold_start(f + 1, folds, inside, outside),
                           on_fold_end=lambda f, outside: cb.on_fold_end(f + 1, outside), keep=lambda e: None)
    scale = {form: 1.0 / (len(forms) * fit_label_temperatures(z, y)) for form, z in fits.scores.items()}
    average = sum(scale[form][None, :] * z for form, z in fits.scores.items()).astype(np.float32)
    return CrossFit(average, fits.fold, [], [], selection, forms, {f: s.tolist() for f, s in scale.items()}, 1.0,
                    buckets, num_labels, time.perf_counter() - start, None,
                    temperatures=fit_label_temperatures(average, y))


@dataclass
class LabelSetIssues:
    """The flagged rows of a multi-label split, ranked, and which of their labels cleanlab doubts.

    Attributes:
        ranked: ``(m,)`` int64 flagged row indices, lowest quality first.
        quality: ``(n,)`` float64 every row's label quality in [0, 1] (module docstring, step 2).
        wrong: ``(n, L)`` bool: label ``j`` of row ``i`` looks wrong (given and unlikely, or absent and probable).
    """

    ranked: np.ndarray
    quality: np.ndarray
    wrong: np.ndarray

    def suggested(self, labels: np.ndarray) -> np.ndarray:
        """``(n, L)`` bool: the given set with the doubted labels flipped (module docstring, step 3)."""
        return np.asarray(labels, dtype=bool) ^ self.wrong


def label_lists(labels: np.ndarray) -> list[list[int]]:
    """cleanlab's multi-label input: each row's given label ids, from a ``(n, L)`` 0/1 matrix."""
    y = np.asarray(labels, dtype=bool)
    rows, cols = np.nonzero(y)
    out: list[list[int]] = [[] for _ in range(len(y))]
    for r, c in zip(rows.tolist(), cols.tolist()):
        out[r].append(c)
    return out


def find_label_set_issues(labels: np.ndarray, probabilities: np.ndarray) -> LabelSetIssues:
    """Rank the likely label-set errors with cleanlab's multi-label functions (module docstring, step 2).

    Args:
        labels: ``(n, L)`` 0/1 given labels.
        probabilities: ``(n, L)`` out-of-fold per-label probabilities.

    Returns:
        The :class:`LabelSetIssues`.
    """
    from cleanlab.multilabel_classification.filter import find_label_issues, find_multilabel_issues_per_class
    from cleanlab.multilabel_classification.rank import get_label_quality_scores

    given = label_lists(labels)
    p = np.asarray(probabilities, dtype=np.float64)
    ranked = find_label_issues(given, p, filter_by=FILTER_BY, return_indices_ranked_by="self_confidence", n_jobs=1)
    wrong = np.asarray(find_multilabel_issues_per_class(given, p, filter_by=FILTER_BY, n_jobs=1), dtype=bool)
    quality = get_label_quality_scores(given, p)
    return LabelSetIssues(np.asarray(ranked, dtype=np.int64), np.asarray(quality, dtype=np.float64), wrong)


def label_set_summary(labels: np.ndarray, probabilities: np.ndarray, issues: LabelSetIssues,
                      label_names: Sequence[str]) -> dict[str, Any]:
    """The estimated noise per label: cleanlab's one-vs-rest ``estimate_joint`` (``(L, 2, 2)``: per label, the
    joint share of rows by given and estimated true membership).

    Returns:
        ``{"rows", "flagged", "estimated_error_rate", "classes", "pairs"}`` in the single-label summary's shape:
        ``estimated_error_rate`` the share of (row, label) memberships estimated wrong (mean over labels);
        ``classes`` per label ``{"label", "rows"`` (given it), ``"flagged"`` (given it and it is unlikely),
        ``"missing"`` (not given it, and it is probable), ``"estimated_error_rate"`` (the share of the rows given
        it estimated not to have it)``}``; ``pairs`` empty (labels are not confused one for another).
    """
    from cleanlab.count import estimate_joint

    y = np.asarray(labels, dtype=bool)
    joint = estimate_joint(label_lists(y), np.asarray(probabilities, dtype=np.float64), multi_label=True)
    given = joint[:, 1, :].sum(1)
    rate = np.where(given > 0, joint[:, 1, 0] / np.maximum(given, 1e-12), 0.0)
    classes = [{"label": name, "rows": int(y[:, j].sum()), "flagged": int((issues.wrong[:, j] & y[:, j]).sum()),
                "missing": int((issues.wrong[:, j] & ~y[:, j]).sum()), "estimated_error_rate": float(rate[j])}
               for j, name in enumerate(label_names)]
    off = float(np.mean(joint[:, 0, 1] + joint[:, 1, 0]))
    return {"rows": len(y), "flagged": int(len(issues.ranked)), "estimated_error_rate": off, "classes": classes,
            "pairs": []}


def out_of_fold_scores(labels: np.ndarray, probabilities: np.ndarray) -> dict[str, float]:
    """``{"out_of_fold_accuracy"`` (subset accuracy: the whole set right), ``"out_of_fold_micro_f1"}`` of the
    out-of-fold probabilities at :data:`DECISION` per label, against the given ``(n, L)`` labels."""
    y = np.asarray(labels, dtype=bool)
    pred = np.asarray(probabilities) >= DECISION
    tp = float((pred & y).sum())
    f1 = 2 * tp / max(float(pred.sum() + y.sum()), 1.0)
    return {"out_of_fold_accuracy": float((pred == y).all(1).mean()), "out_of_fold_micro_f1": f1}

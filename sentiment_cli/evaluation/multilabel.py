"""Multi-label evaluation and decisions: metrics, per-label thresholds, per-label temperatures.

A multi-label model (several labels per text, e.g. GoEmotions' 28 emotions) scores each label on its own:
label ``j``'s probability is ``sigmoid(z_j / T_j)`` of its logit ``z_j`` and its temperature ``T_j``, and the
label is predicted when that probability reaches the label's threshold.

- :func:`multilabel_metrics`: ``eval --json``'s record of a multi-label model: micro / macro / weighted
  precision, recall and F1, each label's, subset accuracy, Hamming loss, label ranking average precision and
  the expected calibration error of each label's probability (scikit-learn's metrics, ``zero_division=0``).
- :func:`fit_thresholds`: each label's threshold chosen for its F1 on the validation split; labels with too
  few validation positives to choose one share a single threshold.
- :func:`decide`: the labels a text gets from its probabilities, thresholds and ``[predict] min_labels``.
- :func:`fit_label_temperatures` and :func:`sigmoid`: temperature scaling (Guo et al. 2017, section 4.2)
  per label, for sigmoid outputs.

Torch-free: NumPy, scikit-learn's metrics and SciPy's bounded scalar search, imported where they are used.
:func:`sigmoid` and :func:`decide` live in ``inference/multilabel.py`` (prediction needs them, and ``inference/``
may not import ``evaluation/``) and are imported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .calibration import ECE_BINS, bin_index
from ..inference.multilabel import Decision, decide, sigmoid  # noqa: F401  (the decision rule: inference's)

MIN_SUPPORT = 5
"""Validation positives a label needs for a threshold of its own. With ``k`` positives one example moves the
label's recall by ``1 / k``; below 5 the F1-maximising threshold is set by one or two texts (it lands just
under the probability of whichever positive happened to score lowest) and does not carry to new text. Such a
label takes the shared threshold, which all labels' validation positives choose."""

THRESHOLD_GRID = np.round(np.arange(0.05, 0.951, 0.01), 2)
"""The thresholds tried: 0.05 to 0.95 by 0.01 (91 values). A fixed grid, not the distinct validation
probabilities: the choice cannot fall on a value that one validation text's probability set to fifteen
decimals, it costs ``91 x n`` comparisons a label whatever the split's size, and the ends keep a label from
being predicted for nearly every text (below 0.05) or almost never (above 0.95)."""

_LOG_T_BOUNDS = (math.log(0.05), math.log(20.0))   # as calibration.py: beyond these, a broken model, not a fit


def _check_matrices(y_true, y_pred, probabilities, label_names) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three ``(n, L)`` matrices as int64 0/1, bool and float64.

    Raises:
        ValueError: no rows, shapes that differ or are not ``(n, len(label_names))``, a true label other than
            0/1, or a probability outside [0, 1] (NaN included).
    """
    y = np.asarray(y_true)
    pred = np.asarray(y_pred)
    p = np.asarray(probabilities, dtype=np.float64)
    shape = (y.shape[0] if y.ndim == 2 else -1, len(label_names))
    for name, m in (("y_true", y), ("y_pred", pred), ("probabilities", p)):
        if m.ndim != 2 or m.shape != shape:
            raise ValueError(f"multilabel_metrics: {name} has shape {m.shape}, expected (n, {len(label_names)})")
    if shape[0] == 0:
        raise ValueError("multilabel_metrics needs at least one example")
    if not np.isin(y, (0, 1)).all() or not np.isin(pred, (0, 1)).all():
        raise ValueError("multilabel_metrics: y_true and y_pred must hold only 0 and 1")
    if not ((p >= 0) & (p <= 1)).all():
        raise ValueError("multilabel_metrics: probabilities must lie in [0, 1]")
    return y.astype(np.int64), pred.astype(bool), p


def binary_ece(probability: np.ndarray, truth: np.ndarray, bins: int = ECE_BINS) -> float:
    """The expected calibration error of one label's probability, in [0, 1].

    ``probability`` (``(n,)``, the label's) is binned in ``bins`` equal-width bins on [0, 1] (``(lo, hi]``, the
    first ``[0, hi]``, as ``calibration.reliability``) and each bin's gap between the share of texts that carry
    the label and the mean probability is averaged, weighted by the bin's size: Guo et al. 2017, eq. 3 (Naeini
    et al. 2015), with the label's probability in place of the top-class confidence; summed over labels and
    averaged it is the class-wise ECE of Kull et al. 2019 ("Beyond temperature scaling"). Binning ``p`` itself,
    not ``max(p, 1 - p)``, keeps a label that the model scores near 0 for most texts (most labels of a
    multi-label set) from hiding its miscalibration in the top bin.

    Args:
        probability: ``(n,)`` floats in [0, 1].
        truth: ``(n,)`` 0/1.
        bins: number of bins.

    Raises:
        ValueError: no examples, or ``bins < 1``.
    """
    p = np.asarray(probability, dtype=np.float64)
    y = np.asarray(truth, dtype=np.float64)
    if len(p) == 0 or bins < 1:
        raise ValueError("binary_ece needs at least one example and one bin")
    gap = np.bincount(bin_index(p, bins), weights=y - p, minlength=bins)   # per bin: sum(y) - sum(p)
    return float(np.abs(gap).sum() / len(p))


def _averages(y: np.ndarray, pred: np.ndarray) -> dict[str, dict[str, float]]:
    """Micro, macro and weighted precision / recall / F1 (scikit-learn, ``zero_division=0``)."""
    from sklearn.metrics import precision_recall_fscore_support

    out = {}
    for average in ("micro", "macro", "weighted"):
        prec, rec, f1, _ = precision_recall_fscore_support(y, pred, average=average, zero_division=0)
        out[average] = {"precision": float(prec), "recall": float(rec), "f1": float(f1)}
    return out


def multilabel_metrics(y_true: np.ndarray, y_pred: np.ndarray, probabilities: np.ndarray,
                       label_names: Sequence[str], bins: int = ECE_BINS) -> dict[str, Any]:
    """``eval --json``'s metrics of a multi-label model, JSON-ready.

    Precision, recall and F1 are scikit-learn's (``zero_division=0``): ``micro`` pools every (text, label)
    decision, ``macro`` is the labels' mean, ``weighted`` their mean weighted by support. ``subset_accuracy``
    is the share of texts whose whole label set is right; ``hamming_loss`` the share of wrong (text, label)
    decisions; ``lrap`` scikit-learn's label ranking average precision of the probabilities (Tsoumakas et al.
    2010; a text with no true label, or with all of them, scores 1, as scikit-learn has it). ``ece`` is the mean
    over labels of :func:`binary_ece` (``bins`` equal-width bins; Guo et al. 2017, Naeini et al. 2015).

    Args:
        y_true: ``(n, L)`` 0/1, the true labels.
        y_pred: ``(n, L)`` bool, the decided labels (:func:`decide`).
        probabilities: ``(n, L)`` floats in [0, 1], each label's probability.
        label_names: the ``L`` label names, by column.
        bins: the ECE's bins.

    Returns:
        ``{"multi_label": True, "examples": n, "micro" | "macro" | "weighted": {"precision", "recall", "f1"},
        "per_label": {name: {"precision", "recall", "f1", "support"}}, "subset_accuracy", "hamming_loss",
        "lrap", "ece", "ece_per_label": {name: ece}}``; rates in [0, 1], support a count of texts.

    Raises:
        ValueError: see :func:`_check_matrices`.
    """
    from sklearn.metrics import (accuracy_score, hamming_loss, label_ranking_average_precision_score,
                                 precision_recall_fscore_support)

    y, pred, p = _check_matrices(y_true, y_pred, probabilities, label_names)
    prec, rec, f1, support = precision_recall_fscore_support(y, pred, average=None, zero_division=0)
    per_label = {name: {"precision": float(prec[j]), "recall": float(rec[j]), "f1": float(f1[j]),
                        "support": int(support[j])} for j, name in enumerate(label_names)}
    ece = {name: binary_ece(p[:, j], y[:, j], bins) for j, name in enumerate(label_names)}
    return {"multi_label": True, "examples": int(len(y)), **_averages(y, pred), "per_label": per_label,
            "subset_accuracy": float(accuracy_score(y, pred)), "hamming_loss": float(hamming_loss(y, pred)),
            "lrap": float(label_ranking_average_precision_score(y, p)),
            "ece": float(np.mean(list(ece.values()))), "ece_per_label": ece}


def _grid_counts(p: np.ndarray, y: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per label and threshold: true positives, predicted positives (both ``(L, G)``) and positives (``(L,)``).

    ``p`` and ``y`` are ``(n, L)``, ``grid`` ``(G,)``; one label at a time, so memory is ``n x G`` bools.
    """
    tp = np.empty((p.shape[1], len(grid)), dtype=np.int64)
    predicted = np.empty_like(tp)
    for j in range(p.shape[1]):
        on = p[:, j, None] >= grid[None, :]                  # (n, G)
        tp[j] = (on & y[:, j, None]).sum(axis=0)
        predicted[j] = on.sum(axis=0)
    return tp, predicted, y.sum(axis=0)


def _f1(tp: np.ndarray, predicted: np.ndarray, positives: np.ndarray) -> np.ndarray:
    """F1 = 2 tp / (predicted + positives), 0 where both are 0 (``zero_division=0``)."""
    denominator = predicted + positives
    return np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)


def _best(scores: np.ndarray, grid: np.ndarray) -> float:
    """The grid value of the highest score; of tied values the middle one (the middle of a plateau of F1
    between two validation probabilities, rather than its edge next to one of them)."""
    tied = np.flatnonzero(scores >= scores.max() - 1e-12)
    return float(grid[tied[len(tied) // 2]])


def fit_thresholds(probabilities: np.ndarray, y_true: np.ndarray, min_support: int = MIN_SUPPORT,
                   grid: Sequence[float] | np.ndarray = THRESHOLD_GRID) -> tuple[np.ndarray, float, list[int]]:
    """Per-label decision thresholds, each maximising its label's F1 on the validation split.

    A label with at least ``min_support`` validation positives gets the grid value that maximises its own F1
    (ties: the middle tied value). The others (``rare``) get ``shared``: the grid value that maximises the
    micro-F1 over **all** labels, the one operating point that every label's validation positives inform.
    Micro-F1 over the rare labels alone would rest on the few positives that made them rare (none at all, for
    a label absent from validation), the very estimate ``min_support`` refuses for one label. See
    :data:`MIN_SUPPORT` and :data:`THRESHOLD_GRID` for the defaults.

    Args:
        probabilities: ``(n, L)`` validation probabilities in [0, 1] (after the label temperatures).
        y_true: ``(n, L)`` 0/1 validation labels.
        min_support: positives a label needs for a threshold of its own (0: every label gets its own).
        grid: the thresholds tried, each in [0, 1].

    Returns:
        ``(thresholds, shared, rare)``: ``(L,)`` float64 thresholds; the shared threshold; the ids of the
        labels that took it, ascending.

    Raises:
        ValueError: no rows, shapes that differ, an empty grid or one outside [0, 1], ``min_support < 0``.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(y_true).astype(bool)
    g = np.asarray(grid, dtype=np.float64).ravel()
    if p.ndim != 2 or p.shape != y.shape or len(p) == 0:
        raise ValueError(f"fit_thresholds: probabilities {p.shape} and y_true {y.shape} must be the same (n, L), n > 0")
    if len(g) == 0 or not ((g >= 0) & (g <= 1)).all():
        raise ValueError("fit_thresholds: the grid must hold at least one threshold, each in [0, 1]")
    if min_support < 0:
        raise ValueError(f"fit_thresholds: min_support must be >= 0, not {min_support}")
    tp, predicted, positives = _grid_counts(p, y, g)
    shared = _best(_f1(tp.sum(axis=0), predicted.sum(axis=0), positives.sum()), g)
    per_label = _f1(tp, predicted, positives[:, None])             # (L, G)
    thresholds = np.array([_best(per_label[j], g) for j in range(p.shape[1])], dtype=np.float64)
    rare = [int(j) for j in np.flatnonzero(positives < min_support)]
    thresholds[rare] = shared
    return thresholds, shared, rare


def binary_nll(logits: np.ndarray, truth: np.ndarray, temperature: float = 1.0) -> float:
    """Mean binary negative log-likelihood (nats per text) of ``truth`` (``(n,)`` 0/1) under
    ``sigmoid(logits / temperature)`` (``logits`` ``(n,)``), from the logits (no log of a rounded 0)."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    y = np.asarray(truth, dtype=np.float64)
    return float(np.mean(np.logaddexp(0.0, z) - y * z))   # -[y log s(z) + (1 - y) log(1 - s(z))]


def fit_label_temperatures(logits: np.ndarray, y_true: np.ndarray, tol: float = 1e-6) -> np.ndarray:
    """Per-label temperatures ``T_j`` minimising each label's validation NLL of ``sigmoid(z_j / T_j)``.

    Temperature scaling (Guo et al. 2017, section 4.2) for each sigmoid output on its own. Each label's NLL
    is convex in ``1 / T`` (a logistic regression on the logit, without intercept), hence unimodal in
    ``log T``, so a bounded scalar search (SciPy's ``minimize_scalar``, Brent's method) over ``log T`` in
    [log 0.05, log 20] finds its minimum, as ``calibration.fit_temperature`` does for the softmax. ``T`` does
    not move a label's probability across 0.5, but does move it across a threshold: fit the temperatures
    first, then :func:`fit_thresholds` on the scaled probabilities. A label whose validation texts all carry
    it, or none do, pushes ``T`` to a bound (the NLL keeps falling as the probabilities sharpen).

    Args:
        logits: ``(n, L)`` validation logits.
        y_true: ``(n, L)`` 0/1 validation labels.
        tol: the search's tolerance on ``log T``.

    Returns:
        ``(L,)`` float64 temperatures, each in [0.05, 20].

    Raises:
        ValueError: no rows, shapes that differ, or non-finite logits.
    """
    from scipy.optimize import minimize_scalar

    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(y_true, dtype=np.float64)
    if z.ndim != 2 or z.shape != y.shape or len(z) == 0:
        raise ValueError(f"fit_label_temperatures: logits {z.shape} and y_true {y.shape} must be the same (n, L), "
                         "n > 0")
    if not np.isfinite(z).all():
        raise ValueError("fit_label_temperatures: the logits are not all finite")
    out = np.empty(z.shape[1], dtype=np.float64)
    for j in range(z.shape[1]):
        fit = minimize_scalar(lambda log_t: binary_nll(z[:, j], y[:, j], math.exp(log_t)),
                              bounds=_LOG_T_BOUNDS, method="bounded", options={"xatol": tol})
        out[j] = math.exp(fit.x)
    return out


def mean_ece(probabilities: np.ndarray, y_true: np.ndarray, bins: int = ECE_BINS) -> float:
    """The mean over labels of each label's binary expected calibration error (:func:`binary_ece`), for
    ``(n, L)`` probabilities and 0/1 labels: what a multi-label model reports as its ECE."""
    p, y = np.asarray(probabilities), np.asarray(y_true)
    return float(np.mean([binary_ece(p[:, j], y[:, j], bins) for j in range(p.shape[1])])) if p.size else 0.0


def fit_decision(logits: np.ndarray, y_true: np.ndarray,
                 min_labels: int = 0) -> tuple[Decision, np.ndarray, float, list[int]]:
    """The decision rule fitted on validation ``(n, L)`` logits and 0/1 labels: a temperature per label
    (:func:`fit_label_temperatures`), then a threshold per label on the scaled probabilities (:func:`fit_thresholds`).

    Returns:
        ``(decision, probabilities, shared, rare)``: the :class:`~sentiment_cli.inference.multilabel.Decision`,
        the ``(n, L)`` calibrated probabilities, the shared threshold and the labels that take it.

    Raises:
        ValueError: as :func:`fit_label_temperatures`.
    """
    temperatures = fit_label_temperatures(logits, y_true)
    probabilities = sigmoid(logits, temperatures)
    thresholds, shared, rare = fit_thresholds(probabilities, y_true)
    rule = Decision(tuple(map(float, temperatures)), tuple(map(float, thresholds)), min_labels)
    return rule, probabilities, shared, rare

"""Multi-label evaluation: metrics, each label's calibration error.

A multi-label model (several labels per text, e.g. GoEmotions' 28 emotions) scores each label on its own:
label ``j``'s probability is ``sigmoid(z_j / T_j)`` of its logit ``z_j`` and its temperature ``T_j``, and the
label is predicted when that probability reaches the label's threshold.

- :func:`multilabel_metrics`: ``eval --json``'s record of a multi-label model: micro / macro / weighted
  precision, recall and F1, each label's, subset accuracy, Hamming loss, label ranking average precision and
  the expected calibration error of each label's probability (scikit-learn's metrics, ``zero_division=0``).
- :func:`binary_ece`, :func:`mean_ece`: each label's expected calibration error, and their mean.

The decision rule and its fit on validation (per-label temperatures, F1 thresholds: ``fit_decision``) live in
``inference/multilabel.py``, beside :class:`~sentiment_cli.inference.multilabel.Decision`: one place for the
rule. Torch-free: NumPy and scikit-learn's metrics, imported where they are used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .calibration import ECE_BINS, bin_index

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
        y_pred: ``(n, L)`` bool, the decided labels (:func:`~sentiment_cli.inference.multilabel.decide`).
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


def mean_ece(probabilities: np.ndarray, y_true: np.ndarray, bins: int = ECE_BINS) -> float:
    """The mean over labels of each label's binary expected calibration error (:func:`binary_ece`), for
    ``(n, L)`` probabilities and 0/1 labels: what a multi-label model reports as its ECE."""
    p, y = np.asarray(probabilities), np.asarray(y_true)
    return float(np.mean([binary_ece(p[:, j], y[:, j], bins) for j in range(p.shape[1])])) if p.size else 0.0

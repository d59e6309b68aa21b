"""Probabilities people can trust: expected calibration error and temperature scaling.

A classifier is calibrated when, among the reviews it labels with confidence
0.8, about 80% are right. Its expected calibration error (ECE; Naeini et al.
2015, in the form of Guo et al. 2017, "On Calibration of Modern Neural
Networks", eq. 3) sorts predictions into ``bins`` equal-width bins of
confidence (the top softmax probability) and averages, weighted by bin size,
the gap between each bin's accuracy and its mean confidence:

    ECE = sum_b |B_b| / n * |acc(B_b) - conf(B_b)|

Temperature scaling (Guo et al. 2017, section 4.2) divides every logit by
one scalar ``T > 0`` fitted to minimise the negative log-likelihood on the
validation split. It never changes a prediction's label (the argmax), only
how sure the probabilities say the model is.

NumPy only (no torch). The softmax with the temperature, which both backends apply to every prediction, is
``inference/probabilities.py``'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..inference.probabilities import softmax

ECE_BINS = 15   # Guo et al. 2017 use 15 bins
_LOG_T_RANGE = (math.log(0.05), math.log(20.0))   # temperatures beyond these mean a broken model, not a fit


def nll(logits: np.ndarray, labels: Sequence[int], temperature: float = 1.0) -> float:
    """Mean negative log-likelihood (nats per example) of ``labels`` under ``softmax(logits / temperature)``.

    Args:
        logits: ``(n, num_labels)``.
        labels: ``n`` class ids.
    """
    return float(row_nll(logits, labels, temperature).mean())


def row_nll(logits: np.ndarray, labels: Sequence[int], temperature: float = 1.0) -> np.ndarray:
    """``(n,)`` float64: each example's negative log-likelihood (nats) of its label under
    ``softmax(logits / temperature)``; :func:`nll` is their mean.

    Args:
        logits: ``(n, num_labels)``.
        labels: ``n`` class ids.
    """
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max(axis=-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    y = np.asarray(labels, dtype=np.int64)
    return -log_p[np.arange(len(y)), y]


@dataclass(frozen=True)
class Reliability:
    """Per-bin statistics of a reliability diagram (``bins`` equal-width confidence bins on [0, 1]).

    Attributes:
        edges: ``bins + 1`` bin edges, 0 to 1.
        counts: predictions per bin.
        accuracy: share of correct predictions per bin (0 where the bin is empty).
        confidence: mean confidence per bin (0 where the bin is empty).
        ece: the expected calibration error, in [0, 1].
    """

    edges: list[float]
    counts: list[int]
    accuracy: list[float]
    confidence: list[float]
    ece: float

    def to_dict(self) -> dict:
        """JSON-ready form (``eval --json``'s ``reliability``)."""
        return {"edges": self.edges, "counts": self.counts, "accuracy": self.accuracy,
                "confidence": self.confidence, "ece": self.ece}


def bin_index(confidence: np.ndarray, bins: int = ECE_BINS) -> np.ndarray:
    """Each confidence's bin among ``bins`` equal-width bins on [0, 1]: ``(lo, hi]``, the first ``[0, hi]``, so a
    confidence of exactly ``k / bins`` falls in bin ``k - 1`` (Guo et al. 2017). ``(n,)`` int64 in ``[0, bins)``."""
    return np.clip(np.ceil(np.asarray(confidence) * bins).astype(np.int64) - 1, 0, bins - 1)


def reliability(probabilities: np.ndarray, labels: Sequence[int], bins: int = ECE_BINS) -> Reliability:
    """Bin predictions by confidence and compute the ECE (Guo et al. 2017, eq. 3).

    A confidence of exactly ``k / bins`` falls in bin ``k - 1`` (bins are
    ``(lo, hi]``, the first ``[0, hi]``), as in Guo et al.

    Args:
        probabilities: ``(n, num_labels)`` softmax probabilities.
        labels: ``n`` true class ids.
        bins: number of equal-width bins.

    Raises:
        ValueError: no examples, or ``bins < 1``.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    if len(y) == 0 or bins < 1:
        raise ValueError("reliability needs at least one example and one bin")
    confidence = p.max(axis=1)
    correct = (p.argmax(axis=1) == y).astype(np.float64)
    which = bin_index(confidence, bins)
    counts = np.bincount(which, minlength=bins)
    acc_sum = np.bincount(which, weights=correct, minlength=bins)
    conf_sum = np.bincount(which, weights=confidence, minlength=bins)
    nonzero = np.maximum(counts, 1)
    acc, conf = acc_sum / nonzero, conf_sum / nonzero
    ece = float(np.sum(counts / len(y) * np.abs(acc - conf)))
    return Reliability(edges=np.linspace(0.0, 1.0, bins + 1).tolist(), counts=counts.tolist(),
                       accuracy=acc.tolist(), confidence=conf.tolist(), ece=ece)


def expected_calibration_error(probabilities: np.ndarray, labels: Sequence[int], bins: int = ECE_BINS) -> float:
    """The ECE of ``probabilities`` (``(n, num_labels)``) against ``labels``, in [0, 1]; see :func:`reliability`."""
    return reliability(probabilities, labels, bins).ece


def fit_temperature(logits: np.ndarray, labels: Sequence[int], tol: float = 1e-6) -> float:
    """The temperature ``T`` that minimises the validation NLL of ``softmax(logits / T)`` (Guo et al. 2017, 4.2).

    The NLL is convex in ``1 / T``, so a golden-section search over ``log T``
    in [log 0.05, log 20] finds the minimum; it is deterministic and needs no
    learning rate. ``T > 1`` softens over-confident probabilities.

    Args:
        logits: ``(n, num_labels)`` validation logits.
        labels: ``n`` validation class ids.
        tol: stop once the bracket on ``log T`` is narrower than this.

    Returns:
        ``T`` in [0.05, 20].

    Raises:
        ValueError: no examples, or non-finite logits.
    """
    z = np.asarray(logits, dtype=np.float64)
    if len(z) == 0:
        raise ValueError("fit_temperature needs at least one example")
    if not np.isfinite(z).all():
        raise ValueError("fit_temperature: the logits are not all finite")
    invphi = (math.sqrt(5) - 1) / 2
    a, b = _LOG_T_RANGE
    c, d = b - invphi * (b - a), a + invphi * (b - a)
    fc, fd = nll(z, labels, math.exp(c)), nll(z, labels, math.exp(d))
    while b - a > tol:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - invphi * (b - a)
            fc = nll(z, labels, math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + invphi * (b - a)
            fd = nll(z, labels, math.exp(d))
    return math.exp((a + b) / 2)


def calibration_report(logits: np.ndarray, labels: Sequence[int], calibrated: np.ndarray, temperature: float = 1.0,
                       bins: int = ECE_BINS) -> dict:
    """ECE after and before the temperature, with both reliability diagrams' bins (``eval --json``'s keys).

    Args:
        logits: ``(n, num_labels)``; before the temperature: ``softmax(logits)`` is the uncalibrated side.
        labels: ``n`` true class ids.
        calibrated: ``(n, num_labels)`` float64 probabilities after the temperature, as the predictor's
            postprocess gives them (:meth:`~sentiment_cli.inference.predictor.Predictor.postprocess`).
        temperature: the checkpoint's ``T`` that ``calibrated`` applied (1.0: none fitted; then both diagrams
            are the same); recorded.
        bins: equal-width confidence bins.

    Returns:
        ``{"ece", "ece_uncalibrated", "temperature", "reliability": {"calibrated", "uncalibrated"}}``,
        each reliability entry as :meth:`Reliability.to_dict`.

    Raises:
        ValueError: no examples.
    """
    after = reliability(calibrated, labels, bins)
    before = reliability(softmax(logits), labels, bins)
    return {"ece": after.ece, "ece_uncalibrated": before.ece, "temperature": float(temperature),
            "reliability": {"calibrated": after.to_dict(), "uncalibrated": before.to_dict()}}

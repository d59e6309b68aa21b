"""Torch-free: how a multi-label model's logits become labels (several per text, or none), and the rule's fit.

Each label is its own binary decision (one-vs-rest): its probability is ``sigmoid(logit / T_j)`` with a
temperature per label (Guo et al. 2017's temperature scaling, one per output), and the label is predicted
when that probability reaches the label's threshold, fitted on validation for the label's F1 (Fan & Lin
2007, "A study on threshold selection for multi-label classification"). With ``min_labels`` 1 a text
whose probabilities reach no threshold still gets its most probable label.

:func:`fit_decision` fits the rule on validation logits: :func:`fit_label_temperatures`, then
:func:`fit_thresholds` on the scaled probabilities (labels with too few validation positives share one
threshold). NumPy; SciPy's bounded scalar search, imported where it is used.

The record lives in the checkpoint's ``config.json`` as ``"multi_label"``
(``{"temperatures": [...], "thresholds": [...], "min_labels": 0 | 1}``), read as untrusted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..untrusted import stored_decision

MIN_SUPPORT = 1
"""Validation positives a label needs for a threshold of its own: one. A label absent from validation has no F1 to
maximise and takes the shared threshold, which all labels' validation positives choose. Pooling every label under 5
positives as well (the rule before 2026-11-29) cost macro-F1 on new text: on 20 random halvings of the validation
split (thresholds fitted on one half, scored on the other) 0.5411 against 0.5637 on Reuters and 0.4837 against
0.4862 on GoEmotions, each with ties broken as :func:`_best` does
(``docs/decisions.md#thresholds-for-rare-labels``)."""

THRESHOLD_GRID = np.round(np.arange(0.05, 0.951, 0.01), 2)
"""The thresholds tried: 0.05 to 0.95 by 0.01 (91 values). A fixed grid, not the distinct validation
probabilities: the choice cannot fall on a value that one validation text's probability set to fifteen
decimals, it costs ``91 x n`` comparisons a label whatever the split's size, and the ends keep a label from
being predicted for nearly every text (below 0.05) or almost never (above 0.95)."""

_LOG_T_BOUNDS = (math.log(0.05), math.log(20.0))   # as calibration.py: beyond these, a broken model, not a fit


def sigmoid(logits: np.ndarray, temperatures: np.ndarray | float = 1.0, dtype=np.float64) -> np.ndarray:
    """``sigmoid(logits / T)`` elementwise, each column by its label's temperature (Guo et al. 2017, 4.2).

    Computed as ``exp(-log(1 + exp(-x)))`` (``np.logaddexp``), which neither overflows nor loses a
    probability near 0 for large ``|x|``.

    Args:
        logits: ``(n, L)`` (or any shape whose last axis is the labels).
        temperatures: ``(L,)`` temperatures ``T > 0``, or one for all labels; 1 leaves the logits as they are.
        dtype: the arithmetic's precision, as ``inference.probabilities.softmax``.

    Returns:
        Probabilities in [0, 1] of ``logits``' shape and ``dtype``.
    """
    z = np.asarray(logits, dtype=dtype) / np.asarray(temperatures, dtype=dtype)
    return np.exp(-np.logaddexp(dtype(0), -z))


def decide(probabilities: np.ndarray, thresholds: np.ndarray | float, min_labels: int = 0) -> np.ndarray:
    """The labels each text gets: label ``j`` when its probability is at least threshold ``j``.

    With ``min_labels`` ``k > 0``, a text given fewer than ``k`` labels also gets its ``k`` most probable ones
    (``k = 1``: a text with none gets its most probable label; ties to the lower label id). ``[predict]
    min_labels = -1`` (auto) is the caller's to resolve to 0 or 1 first.

    Args:
        probabilities: ``(n, L)`` probabilities.
        thresholds: ``(L,)`` thresholds, or one for every label.
        min_labels: the fewest labels a text gets, 0 to ``L``.

    Returns:
        ``(n, L)`` bool.

    Raises:
        ValueError: ``probabilities`` not 2-D, thresholds not ``(L,)`` or a scalar, ``min_labels`` out of range.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    t = np.asarray(thresholds, dtype=np.float64)
    if p.ndim != 2:
        raise ValueError(f"decide: probabilities must be (n, L), not {p.shape}")
    if t.ndim > 1 or (t.ndim == 1 and t.shape[0] != p.shape[1]):
        raise ValueError(f"decide: thresholds {t.shape} do not match {p.shape[1]} labels")
    if not 0 <= min_labels <= p.shape[1]:
        raise ValueError(f"decide: min_labels must be 0 to {p.shape[1]}, not {min_labels} (resolve -1 first)")
    chosen = p >= t
    if min_labels > 0:
        short = np.flatnonzero(chosen.sum(axis=1) < min_labels)
        if len(short):
            top = np.argsort(-p[short], axis=1, kind="stable")[:, :min_labels]
            chosen[short[:, None], top] = True
    return chosen


@dataclass(frozen=True)
class Decision:
    """A multi-label checkpoint's decision rule (see the module docstring).

    Attributes:
        temperatures: ``(num_labels,)`` each > 0.
        thresholds: ``(num_labels,)`` each in (0, 1].
        min_labels: 1: every text gets at least its most probable label; 0: a text may get none.
    """

    temperatures: tuple[float, ...]
    thresholds: tuple[float, ...]
    min_labels: int = 0

    @classmethod
    def untrained(cls, num_labels: int, min_labels: int = 0) -> "Decision":
        """Temperature 1 and threshold 0.5 for every label: the rule before validation fits one."""
        return cls((1.0,) * num_labels, (0.5,) * num_labels, min_labels)

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """``(n, num_labels)`` calibrated probabilities of ``(n, num_labels)`` logits."""
        return sigmoid(logits, np.asarray(self.temperatures))

    def labels(self, probabilities: np.ndarray) -> np.ndarray:
        """``(n, num_labels)`` bool: :func:`decide` with this rule's thresholds and ``min_labels``."""
        return decide(probabilities, np.asarray(self.thresholds), self.min_labels)

    def to_json(self) -> dict[str, Any]:
        """``config.json``'s ``"multi_label"`` record."""
        return {"temperatures": [float(t) for t in self.temperatures],
                "thresholds": [float(t) for t in self.thresholds], "min_labels": int(self.min_labels)}

    @classmethod
    def from_json(cls, raw: Any, num_labels: int) -> "Decision":
        """The record read back, checked as untrusted input (:func:`~sentiment_cli.untrusted.stored_decision`).

        Raises:
            ValueError: as :func:`~sentiment_cli.untrusted.stored_decision`.
        """
        d = stored_decision(raw, num_labels)
        return cls(tuple(d["temperatures"]), tuple(d["thresholds"]), d["min_labels"])


@dataclass
class LabelSet:
    """One text's multi-label result: the labels it gets (most probable first) and every label's probability.

    Attributes:
        text: the text as given.
        labels: the predicted label names, most probable first (may be empty with ``min_labels`` 0).
        probabilities: every label of the model, in label-id order, to its calibrated probability.
    """

    text: str
    labels: list[str]
    probabilities: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        """The ``predict --json`` object of a multi-label model: ``{"text", "labels", "probabilities"}``."""
        return {"text": self.text, "labels": self.labels, "probabilities": self.probabilities}


def label_sets(texts: Sequence[str], logits: np.ndarray, names: Sequence[str], decision: Decision,
               probabilities: np.ndarray | None = None) -> list[LabelSet]:
    """One :class:`LabelSet` per text from ``(len(texts), num_labels)`` logits (``probabilities``: their
    ``decision.probabilities``, float64, when already computed: the predictor's postprocess)."""
    probs = decision.probabilities(logits) if probabilities is None else probabilities
    chosen = decision.labels(probs)
    out = []
    for text, p, c in zip(texts, probs.tolist(), chosen):
        picked = sorted(np.flatnonzero(c).tolist(), key=lambda j: -p[j])
        out.append(LabelSet(text, [names[j] for j in picked], dict(zip(names, p))))
    return out


# ----------------------------------------------------------------------------- the rule fitted on validation

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
    """The grid value of the highest score; of tied values the lowest (``grid`` ascending). A plateau of F1 lies
    between a label's highest-scoring validation negative and its lowest-scoring positive; new positives score
    lower than the few that set its upper edge, so the lowest value keeps more of them. Measured against the
    middle of the plateau on 20 halvings of validation: macro-F1 0.5637 against 0.5298 on Reuters, 0.4862 against
    0.4811 on GoEmotions (every label its own threshold)."""
    tied = np.flatnonzero(scores >= scores.max() - 1e-12)
    return float(grid[tied[0]])


def fit_thresholds(probabilities: np.ndarray, y_true: np.ndarray, min_support: int = MIN_SUPPORT,
                   grid: Sequence[float] | np.ndarray = THRESHOLD_GRID) -> tuple[np.ndarray, float, list[int]]:
    """Per-label decision thresholds, each maximising its label's F1 on the validation split.

    A label with at least ``min_support`` validation positives gets the grid value that maximises its own F1
    (ties: the lowest tied value). The others (``rare``: by default, labels absent from validation) get
    ``shared``: the grid value that maximises the micro-F1 over **all** labels, the one operating point that
    every label's validation positives inform. See
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
    return float(np.mean(_binary_nll_terms(logits, truth, temperature)))


def _binary_nll_terms(logits: np.ndarray, truth: np.ndarray, temperatures: np.ndarray | float) -> np.ndarray:
    """Each entry's binary negative log-likelihood (nats) of ``truth`` under ``sigmoid(logits / temperatures)``,
    from the logits (no log of a rounded 0); the shape of ``logits``."""
    z = np.asarray(logits, dtype=np.float64) / np.asarray(temperatures, dtype=np.float64)
    y = np.asarray(truth, dtype=np.float64)
    return np.logaddexp(0.0, z) - y * z   # -[y log s(z) + (1 - y) log(1 - s(z))]


def row_binary_nll(logits: np.ndarray, truth: np.ndarray, temperatures: np.ndarray | float = 1.0) -> np.ndarray:
    """Each text's binary negative log-likelihood (nats), the mean over its labels: ``(n,)`` float64 from ``(n, L)``
    logits and 0/1 ``truth`` under ``sigmoid(logits / temperatures)`` (``temperatures``: ``(L,)`` or one). Its mean
    is :func:`binary_nll`'s over the whole matrix; row by row it pairs two models' losses on the same texts (the
    search's one-standard-error rule)."""
    return _binary_nll_terms(logits, truth, temperatures).mean(axis=1)


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

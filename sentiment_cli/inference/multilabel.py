"""Torch-free: how a multi-label model's logits become labels (several per text, or none).

Each label is its own binary decision (one-vs-rest): its probability is ``sigmoid(logit / T_j)`` with a
temperature per label (Guo et al. 2017's temperature scaling, one per output), and the label is predicted
when that probability reaches the label's threshold, fitted on validation for the label's F1 (Fan & Lin
2007, "A study on threshold selection for multi-label classification"). With ``min_labels`` 1 a text
whose probabilities reach no threshold still gets its most probable label.

The record lives in the checkpoint's ``config.json`` as ``"multi_label"``
(``{"temperatures": [...], "thresholds": [...], "min_labels": 0 | 1}``), read as untrusted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..untrusted import stored_decision



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


def label_sets(texts: Sequence[str], logits: np.ndarray, names: Sequence[str], decision: Decision) -> list[LabelSet]:
    """One :class:`LabelSet` per text from ``(len(texts), num_labels)`` logits."""
    probs = decision.probabilities(logits)
    chosen = decision.labels(probs)
    out = []
    for text, p, c in zip(texts, probs.tolist(), chosen):
        picked = sorted(np.flatnonzero(c).tolist(), key=lambda j: -p[j])
        out.append(LabelSet(text, [names[j] for j in picked], dict(zip(names, p))))
    return out

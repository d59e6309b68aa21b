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



def sigmoid(logits: np.ndarray, temperatures: np.ndarray | float = 1.0) -> np.ndarray:
    """``1 / (1 + exp(-logits / T))``, elementwise, without overflow.

    Args:
        logits: ``(n, num_labels)``.
        temperatures: ``(num_labels,)`` one per label, or one for all (> 0).

    Returns:
        ``(n, num_labels)`` float64 probabilities in [0, 1].
    """
    z = np.asarray(logits, dtype=np.float64) / np.asarray(temperatures, dtype=np.float64)
    out = np.empty_like(z)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    e = np.exp(z[~pos])
    out[~pos] = e / (1.0 + e)
    return out


def decide(probabilities: np.ndarray, thresholds: np.ndarray, min_labels: int) -> np.ndarray:
    """The labels each text gets: ``(n, num_labels)`` bool, ``p >= threshold`` per label; with ``min_labels``
    1 a row with none gets its most probable label (the first of equals).

    Args:
        probabilities: ``(n, num_labels)`` in [0, 1].
        thresholds: ``(num_labels,)`` in (0, 1].
        min_labels: 0 or 1.
    """
    p = np.asarray(probabilities)
    chosen = p >= np.asarray(thresholds)[None, :]
    if min_labels and len(p):
        empty = ~chosen.any(axis=1)
        chosen[np.flatnonzero(empty), p[empty].argmax(axis=1)] = True
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

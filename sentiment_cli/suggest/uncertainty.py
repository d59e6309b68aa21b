"""How unsure a checkpoint is of a text, from its calibrated class probabilities: margin and entropy.

The *margin* between the two most probable classes (Scheffer et al. 2001; Settles 2009, "Active Learning
Literature Survey", 3.1), or the *entropy* of the distribution (Shannon entropy, divided by
``log(num_labels)`` so that it lies in ``[0, 1]``). Small margin, high entropy: uncertain.

A multi-label model (a sigmoid and a decision threshold per label, ``inference/multilabel.py``) asks one
binary question per label, so both measures are taken per label and then over the labels:

- *margin*: the label nearest its own decision threshold decides: per label ``j``, the distance of
  ``p_j`` from its threshold ``t_j`` as a share of the room on that side (``(p_j - t_j) / (1 - t_j)`` above,
  ``(t_j - p_j) / t_j`` below: 0 at the threshold, 1 at 0 or 1), and the text's margin is the smallest.
  Thresholds, not 0.5: a label is predicted at its F1 threshold (often 0.1-0.3), and a text one label's nudge
  away from another predicted label set is the one a label settles (the minimum over the binary
  classifiers' margins: Brinker 2006, "On Active Learning in Multi-label Classification").
- *entropy*: the mean over labels of each label's binary entropy ``H(p_j) / log 2``, in ``[0, 1]``.
"""

from __future__ import annotations

import numpy as np

from ..errors import UsageError

MEASURES = ("margin", "entropy")


def margins(probabilities: np.ndarray) -> np.ndarray:
    """``(n,)`` the top class's probability minus the second's, from ``(n, num_labels)`` probabilities."""
    top2 = np.sort(probabilities, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def entropies(probabilities: np.ndarray) -> np.ndarray:
    """``(n,)`` Shannon entropy of each row of ``(n, num_labels)`` probabilities, over ``log(num_labels)``: in
    ``[0, 1]``."""
    p = np.clip(probabilities, 1e-12, 1.0)
    return -(p * np.log(p)).sum(axis=1) / np.log(probabilities.shape[1])


def label_margins(probabilities: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """``(n,)`` multi-label margin (module docstring) of ``(n, L)`` per-label probabilities against ``(L,)``
    thresholds in (0, 1]: the smallest over labels of ``|p_j - t_j|`` over the room on its side, in ``[0, 1]``."""
    p = np.asarray(probabilities, dtype=np.float64)
    t = np.asarray(thresholds, dtype=np.float64)
    above = (p - t) / np.maximum(1.0 - t, 1e-12)
    below = (t - p) / np.maximum(t, 1e-12)
    return np.clip(np.where(p >= t, above, below), 0.0, 1.0).min(axis=1)


def label_entropies(probabilities: np.ndarray) -> np.ndarray:
    """``(n,)`` the mean over labels of each label's binary entropy over ``log 2``, from ``(n, L)`` per-label
    probabilities: in ``[0, 1]``."""
    p = np.clip(np.asarray(probabilities, dtype=np.float64), 1e-12, 1 - 1e-12)
    return (-(p * np.log(p) + (1 - p) * np.log(1 - p)) / np.log(2)).mean(axis=1)


def uncertainty(probabilities: np.ndarray, measure: str = "margin",
                thresholds: np.ndarray | None = None) -> np.ndarray:
    """``(n,)`` uncertainty in ``[0, 1]``, higher = less sure: ``1 - margin`` or the normalised entropy.

    Args:
        probabilities: ``(n, num_labels)``: a softmax's rows, or with ``thresholds`` per-label sigmoids.
        measure: ``margin`` or ``entropy``.
        thresholds: a multi-label model's ``(num_labels,)`` decision thresholds (:func:`label_margins`,
            :func:`label_entropies`); ``None``: single-label.

    Raises:
        UsageError: an unknown ``measure``.
    """
    if thresholds is not None and measure in MEASURES:
        return 1.0 - label_margins(probabilities, thresholds) if measure == "margin" \
            else label_entropies(probabilities)
    if measure == "margin":
        return 1.0 - margins(probabilities)
    if measure == "entropy":
        return entropies(probabilities)
    raise UsageError(f"unknown uncertainty measure {measure!r}; use one of: {', '.join(MEASURES)}")

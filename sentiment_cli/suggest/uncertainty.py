"""How unsure a checkpoint is of a text, from its calibrated class probabilities: margin and entropy.

The *margin* between the two most probable classes (Scheffer et al. 2001; Settles 2009, "Active Learning
Literature Survey", 3.1), or the *entropy* of the distribution (Shannon entropy, divided by
``log(num_labels)`` so that it lies in ``[0, 1]``). Small margin, high entropy: uncertain.
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


def uncertainty(probabilities: np.ndarray, measure: str = "margin") -> np.ndarray:
    """``(n,)`` uncertainty in ``[0, 1]``, higher = less sure: ``1 - margin`` or the normalised entropy.

    Raises:
        UsageError: an unknown ``measure``.
    """
    if measure == "margin":
        return 1.0 - margins(probabilities)
    if measure == "entropy":
        return entropies(probabilities)
    raise UsageError(f"unknown uncertainty measure {measure!r}; use one of: {', '.join(MEASURES)}")

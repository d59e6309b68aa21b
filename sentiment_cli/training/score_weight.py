"""The n-gram score's weight in the logits, chosen on the validation rows after training.

The model's logits are ``encoder + ngram_scale * score`` (``model/ngram.py``). The encoder learns from the
labels alone; the score is a linear model fitted on the same rows. On a few thousand rows the encoder
reaches 100% training accuracy within a few epochs and its logits outgrow what it knows, so the sum
trails the score's own fit. With ``[training] fit_ngram_scale`` the kept weights' validation logits choose
``ngram_scale`` from :data:`SCALES`: the scale whose logits, each after its own temperature, give the
lowest validation NLL. That fits two weights on held-out rows, the encoder's ``1 / T`` and the score's
``ngram_scale / T``: stacked generalisation (Wolpert 1992) with temperature scaling's loss (Guo et al.
2017). A short grid, not a free weight, because a few hundred validation rows choose it; and one-sided,
from 1 up, because the failure it mends is the encoder's overfitting (scales below 1 were chosen on half of
Subj's dev and cost 0.8 point on the other half). Dev evidence: ``docs/experiments.md``, "Small sets: the
n-gram score's weight".

The arithmetic is NumPy only; ``calibrate.py`` computes the two parts' logits and stores the choice.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..evaluation import calibration

SCALES = (1.0, 1.5, 2.0, 3.0, 5.0)   # ngram_scale's candidates; 1: the sum as trained


def choose_scale(encoder_logits: np.ndarray, score_logits: np.ndarray, labels: Sequence[int],
                 scales: Sequence[float] = SCALES) -> tuple[float, dict[float, float]]:
    """The ``ngram_scale`` whose logits ``encoder + scale * score`` have the lowest NLL after their temperature.

    Args:
        encoder_logits: ``(n, num_labels)`` validation logits of the encoder alone.
        score_logits: ``(n, num_labels)`` the n-gram score's logits at scale 1 (its shares summed, plus bias).
        labels: ``n`` validation class ids.
        scales: the candidates; of two with the same NLL, the one nearer 1 (the sum as trained).

    Returns:
        ``(scale, {scale: nll})``: the choice, and each candidate's validation NLL (nats per example)
        after its own temperature.

    Raises:
        ValueError: no examples, mismatched shapes, or non-finite logits.
    """
    enc, score = np.asarray(encoder_logits, np.float64), np.asarray(score_logits, np.float64)
    if enc.shape != score.shape:
        raise ValueError(f"encoder logits {enc.shape} and score logits {score.shape} differ in shape")
    losses = {}
    for s in scales:
        z = enc + s * score
        losses[float(s)] = calibration.nll(z, labels, calibration.fit_temperature(z, labels))
    best = min(losses, key=lambda s: (losses[s], abs(s - 1.0)))   # equal NLL: nearer the trained sum
    return best, losses

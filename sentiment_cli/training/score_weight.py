"""The n-gram score's weight in the logits, chosen on the validation rows after training.

The model's logits are ``encoder + ngram_scale * score`` (``ngram/score.py``). The encoder learns from the
labels alone; the score is a linear model fitted on the same rows. On a few thousand rows the encoder
reaches 100% training accuracy within a few epochs and its logits outgrow what it knows, so the sum
trails the score's own fit. With ``[training] fit_ngram_scale`` the kept weights' validation logits choose
``ngram_scale`` from the policy's ladder (:attr:`~.policy.FitPolicy.ngram_scales`, from 1 up by default): the scale whose logits, each after its own temperature, give the
lowest validation NLL. That fits two weights on held-out rows, the encoder's ``1 / T`` and the score's
``ngram_scale / T``: stacked generalisation (Wolpert 1992) with temperature scaling's loss (Guo et al.
2017). A short grid, not a free weight, because a few hundred validation rows choose it; and from 1 up
by default, because the failure it mends is the encoder's overfitting (scales below 1 were chosen on half of
Subj's dev and cost 0.8 point on the other half). ``[training] ngram_scale_min`` opens the grid below 1 for
validation texts longer than the training texts (SST-5's sentences against its phrases, set by the default's
data rules): the score sums over a text's n-grams, so on texts longer than those it was trained on its logits
outgrow the encoder's, whose max-pool does not grow with length. Dev evidence: ``docs/decisions.md``, the n-gram
score's weight.

``calibrate.py`` calls :func:`fit` before it fits the temperature, and puts the choice in the checkpoint record's
config with :func:`configured` (the refit gives its weights the held-out run's choice the same way).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ..config import Config, TrainingConfig
from ..evaluation import calibration
from ..inference.multilabel import binary_nll, fit_label_temperatures
from ..inference.torch_backend import batched_logits
from ..model.classifier import SentimentClassifier
from .policy import DEFAULT

def candidates(smallest: float = 1.0, ladder: Sequence[float] = DEFAULT.fit.ngram_scales) -> tuple[float, ...]:
    """The weights of ``ladder`` (:attr:`~.policy.FitPolicy.ngram_scales`) from ``smallest`` up (``[training]
    ngram_scale_min``; the largest one at least)."""
    return tuple(s for s in ladder if s >= min(smallest, max(ladder)))


def choose_scale(encoder_logits: np.ndarray, score_logits: np.ndarray, labels: Sequence[int],
                 scales: Sequence[float] = candidates()) -> tuple[float, dict[float, float]]:
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
        losses[float(s)] = _loss_after_temperature(enc + s * score, labels)
    best = min(losses, key=lambda s: (losses[s], abs(s - 1.0)))   # equal NLL: nearer the trained sum
    return best, losses


def _loss_after_temperature(z: np.ndarray, labels) -> float:
    """Validation NLL of logits ``z`` after their temperature: softmax with one temperature, or with several
    labels per text (``labels`` a 0/1 matrix) the mean binary NLL with a temperature per label."""
    y = np.asarray(labels)
    if y.ndim == 2:
        return binary_nll(z, y, fit_label_temperatures(z, y))
    return calibration.nll(z, labels, calibration.fit_temperature(z, labels))


def fit(kept: SentimentClassifier, val_ids: list[list[int]], labels: list[int], logits: np.ndarray,
        training: TrainingConfig, device: torch.device,
        on_stage: Callable[[str], None] = lambda _: None,
        ladder: Sequence[float] = DEFAULT.fit.ngram_scales) -> tuple[np.ndarray, dict[str, Any]]:
    """Choose the weight for the kept weights (put in the record's config with :func:`configured` by the caller).

    A no-op unless ``[training] fit_ngram_scale`` is on and the model has a score of positive weight.

    Args:
        kept: the kept epoch's model, on ``device``.
        val_ids: the validation rows' token ids.
        labels: their label ids.
        logits: ``(len(val_ids), num_labels)`` the kept model's validation logits at the configured weight.
        training: ``[training]`` (``fit_ngram_scale``, ``ngram_scale_min``, ``eval_batch_size``, ``autocast_bf16``).
        device: where ``kept`` is.
        on_stage: told the step's name (progress).
        ladder: the candidate weights (:attr:`~.policy.FitPolicy.ngram_scales`).

    Returns:
        The validation logits at the chosen weight, and ``metrics.json``'s ``calibration`` entries of the
        choice: ``ngram_scale``, ``ngram_scale_nll`` (each candidate's NLL) and the validation ``accuracy``
        at the chosen weight (empty without a choice).
    """
    t, term = training, kept.ngram_score
    if not (t.fit_ngram_scale and term is not None and term.scale > 0):
        return logits, {}
    on_stage("choosing the n-gram score's weight on the validation split")
    encoder = batched_logits(kept, val_ids, batch_size=t.eval_batch_size, device=device,
                             bf16=t.autocast_bf16, encoder_only=True).numpy().astype(np.float64)
    score = (logits - encoder) / term.scale                                 # (n, num_labels), at weight 1
    scale, losses = choose_scale(encoder, score, labels, candidates(t.ngram_scale_min, ladder))
    logits = encoder + scale * score
    chosen = {"ngram_scale": scale, "ngram_scale_nll": {f"{s:g}": v for s, v in losses.items()}}
    if np.ndim(labels) == 1:
        chosen["accuracy"] = float((logits.argmax(1) == np.asarray(labels)).mean())
    return logits, chosen


def configured(config: Config, fitted: dict[str, Any]) -> Config:
    """``config`` with the weight chosen earlier (``fitted``: a ``calibration`` record) as ``[model] ngram_scale``;
    ``config`` itself without one. The refit gives its weights the held-out run's choice with it.

    Raises:
        ValueError: the weight is not a finite number of at least 0 (what loading accepts).
    """
    if "ngram_scale" not in fitted:
        return config
    scale = fitted["ngram_scale"]
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale >= 0):
        raise ValueError(f"ngram_scale must be a finite number of at least 0, got {scale!r}")
    return dataclasses.replace(config, model=dataclasses.replace(config.model, ngram_scale=float(scale)))

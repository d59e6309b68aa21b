"""Temperature scaling after training: fit ``T`` on the kept epoch's validation logits, store it with the weights.

With ``[training] fit_ngram_scale`` the same logits first choose the n-gram score's weight
(``score_weight.py``), stored in ``config.json`` as ``[model] ngram_scale``; the temperature is then fitted
at that weight.

Temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural
Networks", section 4.2): the ``T`` minimising the validation NLL of
``softmax(logits / T)``. The training loop calls :func:`calibrate` once, on
rank 0, after its last epoch; the math (the fit, ECE, NLL) is the torch-free
``evaluation/calibration.py``, which the ONNX Runtime path shares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors.torch import load as st_load

from ..checkpoint import WEIGHTS_FILE, load_weights, write_ngram_scale, write_temperature
from ..evaluation import calibration
from ..inference.torch_backend import batched_logits
from ..model.classifier import SentimentClassifier
from . import score_weight

if TYPE_CHECKING:
    from .loop import RunContext


def calibrate(ctx: RunContext, trained: SentimentClassifier, val_ids: list[list[int]],
              val_labels: list[int]) -> dict[str, Any]:
    """Fit the temperature on the kept epoch's validation logits and store it in ``config.json``.

    The folder (``ctx.output``) holds the best epoch's weights, not necessarily the last epoch's in
    ``trained``, so they are read back from disk into a model of ``trained``'s shape. It runs once,
    after the last epoch, so it changes nothing a resumed run replays. Without validation reviews the
    temperature is 1.0.

    Args:
        ctx: the run's context (config, output folder, device, progress hooks).
        trained: the model the run trained (its vocabulary size and label count are the checkpoint's).
        val_ids: the validation reviews' token ids (empty without a validation split).
        val_labels: their label ids.

    Returns:
        ``metrics.json``'s ``calibration``: ``temperature``, and with validation ``bins`` and the
        validation ``ece`` / ``nll`` after and ``ece_uncalibrated`` / ``nll_uncalibrated`` before it;
        with a fitted n-gram score's weight also ``ngram_scale``, ``ngram_scale_nll`` (each candidate's
        validation NLL) and the validation ``accuracy`` at the chosen weight.

    Raises:
        CheckpointError: the saved weights cannot be read back.
    """
    if not val_ids:
        write_temperature(ctx.output, 1.0)
        return {"temperature": 1.0}
    labels = list(val_labels)
    kept = _kept_model(ctx, trained)
    logits, fitted = _logits_at_fitted_scale(ctx, kept, val_ids, labels)
    ctx.cb.on_stage("fitting the temperature on the validation split")
    temperature = calibration.fit_temperature(logits, labels)
    write_temperature(ctx.output, temperature)
    return {**fitted, "temperature": temperature, "bins": calibration.ECE_BINS,
            "ece": calibration.expected_calibration_error(calibration.softmax(logits, temperature), labels),
            "ece_uncalibrated": calibration.expected_calibration_error(calibration.softmax(logits), labels),
            "nll": calibration.nll(logits, labels, temperature), "nll_uncalibrated": calibration.nll(logits, labels)}


def _kept_model(ctx: RunContext, trained: SentimentClassifier) -> SentimentClassifier:
    """The weights saved in ``ctx.output`` (the kept epoch's), in a model of ``trained``'s shape on the device."""
    kept = SentimentClassifier.from_config(ctx.config, trained.vocab_size, trained.num_labels)
    weights = ctx.output / WEIGHTS_FILE
    load_weights(kept, st_load(weights.read_bytes()), weights)
    return kept.to(ctx.device)


def _logits_at_fitted_scale(ctx: RunContext, kept: SentimentClassifier, val_ids: list[list[int]],
                            labels: list[int]) -> tuple[np.ndarray, dict[str, Any]]:
    """The kept weights' ``(len(val_ids), num_labels)`` validation logits, at the n-gram score's fitted weight
    when ``[training] fit_ngram_scale`` is on and the model has a score (else at the configured one).

    Returns:
        The logits, and the ``calibration`` entries of the fit (empty without one). The chosen weight is
        written to ``config.json``.
    """
    t = ctx.config.training
    term = kept.logit_term
    run = dict(batch_size=t.eval_batch_size, device=ctx.device, bf16=t.autocast_bf16)
    logits = batched_logits(kept, val_ids, **run).numpy().astype(np.float64)
    if not (t.fit_ngram_scale and term is not None and term.scale > 0):
        return logits, {}
    ctx.cb.on_stage("choosing the n-gram score's weight on the validation split")
    encoder = batched_logits(kept, val_ids, encoder_only=True, **run).numpy().astype(np.float64)
    score = (logits - encoder) / term.scale                                 # (n, num_labels), at weight 1
    scale, losses = score_weight.choose_scale(encoder, score, labels)
    write_ngram_scale(ctx.output, scale)
    logits = encoder + scale * score
    accuracy = float((logits.argmax(1) == np.asarray(labels)).mean())
    return logits, {"ngram_scale": scale, "ngram_scale_nll": {f"{s:g}": v for s, v in losses.items()},
                    "accuracy": accuracy}

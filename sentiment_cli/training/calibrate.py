"""Temperature scaling after training: fit ``T`` on the kept epoch's validation logits, store it with the weights.

The same logits may first choose the weight of the logits' parts (``score_weight.py``); the temperature is
then fitted at that weight.

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

from ..checkpoint import WEIGHTS_FILE, load_weights, write_temperature
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
        with a chosen weight also :func:`~.score_weight.fit`'s entries.

    Raises:
        CheckpointError: the saved weights cannot be read back.
    """
    if not val_ids:
        write_temperature(ctx.output, 1.0)
        return {"temperature": 1.0}
    t, labels = ctx.config.training, list(val_labels)
    kept = _kept_model(ctx, trained)
    logits = batched_logits(kept, val_ids, batch_size=t.eval_batch_size, device=ctx.device,
                            bf16=t.autocast_bf16).numpy().astype(np.float64)
    logits, fitted = score_weight.fit(ctx, kept, val_ids, labels, logits)
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

"""Temperature scaling after training: fit ``T`` on the kept epoch's validation logits (:func:`calibrate`).

The same logits may first choose the weight of the logits' parts (``score_weight.py``); the temperature is
then fitted at that weight.

Temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural
Networks", section 4.2): the ``T`` minimising the validation NLL of
``softmax(logits / T)``. The orchestrator (``run.py``) calls :func:`calibrate` once, on
rank 0, after the last epoch, with the kept epoch's model in memory, and the :class:`Calibration` it returns
gives its part of the checkpoint record (:meth:`Calibration.applied`), which ``checkpoint.py`` writes; the math (the fit, ECE, NLL) is the torch-free
``evaluation/calibration.py``, which the ONNX Runtime path shares.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..checkpoint import CheckpointRecord
from ..config import TrainingConfig
from ..evaluation import calibration, multilabel
from ..inference.multilabel import Decision, binary_nll, fit_decision, row_binary_nll, sigmoid
from ..inference.torch_backend import batched_logits
from ..model.classifier import SentimentClassifier
from . import score_weight
from .policy import DEFAULT


@dataclass(frozen=True)
class Calibration:
    """What the post-fit steps chose: their part of the checkpoint record (:meth:`applied`).

    Attributes:
        temperature: ``T`` (1.0 without validation reviews).
        report: ``metrics.json``'s ``calibration``: ``temperature``, and with validation ``bins`` and the
            validation ``ece`` / ``nll`` after and ``ece_uncalibrated`` / ``nll_uncalibrated`` before it;
            with a chosen weight also :func:`~.score_weight.fit`'s entries (``ngram_scale`` among them).
        row_nll: ``(n_validation,)`` float64, each validation row's log-loss (nats) after the temperature (with
            several labels per text, the mean of its labels' binary log-losses after theirs), whose mean is the
            report's ``nll``; ``None`` without validation (the search compares candidates row by row with it).
    """

    temperature: float
    report: dict[str, Any] = field(default_factory=dict)
    row_nll: np.ndarray | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_report(cls, report: dict[str, Any]) -> "Calibration":
        """The record of an earlier run, from its ``metrics.json`` ``calibration`` (the refit keeps it)."""
        return cls(float(report["temperature"]), dict(report))

    @property
    def decision(self) -> dict[str, Any] | None:
        """A multi-label model's decision rule (``inference/multilabel.py``'s ``Decision.to_json``), else ``None``."""
        return self.report.get("decision")

    def applied(self, kept: CheckpointRecord, metrics: dict[str, Any]) -> CheckpointRecord:
        """``kept`` (the kept epoch's record) with this part: the weight chosen as the config's ``[model]
        ngram_scale`` (when any), the temperature, a multi-label decision, and ``metrics``.

        Raises:
            ValueError: a weight that loading would refuse (a temperature or decision: when written).
        """
        return dataclasses.replace(kept, config=score_weight.configured(kept.config, self.report),
                                   temperature=self.temperature, decision=self.decision, metrics=metrics)


def calibrate(kept: SentimentClassifier, val_ids: list[list[int]], val_labels: list[int], training: TrainingConfig,
              device: torch.device, on_stage: Callable[[str], None] = lambda _: None,
              min_labels: int | None = None, ladder: tuple[float, ...] = DEFAULT.fit.ngram_scales) -> Calibration:
    """Fit the temperature (and, with ``[training] fit_ngram_scale``, the n-gram score's weight first) on the
    kept epoch's validation logits.

    It runs once, after the last epoch, so it changes nothing a resumed run replays. Without validation
    reviews the temperature is 1.0.

    Args:
        kept: the kept epoch's model (the folder's weights, not necessarily the last epoch's), on ``device``.
        val_ids: the validation reviews' token ids (empty without a validation split).
        val_labels: their label ids.
        training: ``[training]`` (``eval_batch_size``, ``autocast_bf16``, the weight's settings).
        device: where ``kept`` is.
        on_stage: told each step's name (progress).
        min_labels: a multi-label model's ``[predict] min_labels``, resolved (0 or 1); ``None`` for one label
            per text. With several labels per text (``val_labels`` a ``(n, num_labels)`` 0/1 matrix) the record
            is :func:`_multi_label`'s.
        ladder: the n-gram score's candidate weights (:attr:`~.policy.FitPolicy.ngram_scales`).

    Returns:
        :class:`Calibration`.
    """
    if np.ndim(val_labels) == 2 or min_labels is not None:
        return _multi_label(kept, val_ids, np.asarray(val_labels), training, device, min_labels or 0, on_stage, ladder)
    if not val_ids:
        return Calibration(1.0, {"temperature": 1.0})
    labels = list(val_labels)
    logits = batched_logits(kept, val_ids, batch_size=training.eval_batch_size, device=device,
                            bf16=training.autocast_bf16).numpy().astype(np.float64)
    logits, fitted = score_weight.fit(kept, val_ids, labels, logits, training, device, on_stage, ladder)
    on_stage("fitting the temperature on the validation split")
    temperature = calibration.fit_temperature(logits, labels)
    rows = calibration.row_nll(logits, labels, temperature)
    return Calibration(temperature, {
        **fitted, "temperature": temperature, "bins": calibration.ECE_BINS,
        "ece": calibration.expected_calibration_error(calibration.softmax(logits, temperature), labels),
        "ece_uncalibrated": calibration.expected_calibration_error(calibration.softmax(logits), labels),
        "nll": float(rows.mean()), "nll_uncalibrated": calibration.nll(logits, labels)}, rows)


def _multi_label(kept: SentimentClassifier, val_ids: list[list[int]], y: np.ndarray, training: TrainingConfig,
                 device: torch.device, min_labels: int, on_stage: Callable[[str], None],
                 ladder: tuple[float, ...]) -> Calibration:
    """Several labels per text: the n-gram score's weight (as for one label), then a temperature per label and
    a threshold per label for F1 (a shared one for labels too rare to fit), all on the validation split
    (``y``: ``(n, num_labels)`` 0/1). Without validation: temperature 1 and threshold 1/2 for every label."""
    num_labels = kept.num_labels
    if not val_ids:
        rule = Decision.untrained(num_labels, min_labels)
        return Calibration(1.0, {"temperature": 1.0, "multi_label": True, "decision": rule.to_json()})
    logits = batched_logits(kept, val_ids, batch_size=training.eval_batch_size, device=device,
                            bf16=training.autocast_bf16).numpy().astype(np.float64)
    logits, fitted = score_weight.fit(kept, val_ids, y, logits, training, device, on_stage, ladder)
    on_stage("fitting a temperature and a threshold per label on the validation split")
    rule, probabilities, shared, rare = fit_decision(logits, y, min_labels)
    temperatures = np.asarray(rule.temperatures)
    rows = row_binary_nll(logits, y, temperatures)
    return Calibration(1.0, {
        **fitted, "temperature": 1.0, "multi_label": True, "decision": rule.to_json(),
        "shared_threshold": float(shared), "shared_threshold_labels": [int(j) for j in rare],
        "bins": calibration.ECE_BINS, "ece": multilabel.mean_ece(probabilities, y),
        "ece_uncalibrated": multilabel.mean_ece(sigmoid(logits), y),
        "nll": float(rows.mean()), "nll_uncalibrated": binary_nll(logits, y)}, rows)

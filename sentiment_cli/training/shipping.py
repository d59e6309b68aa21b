"""The model a run ships: the smallest compression of its tables that validation cannot tell from the full model.

A finished run's record is the full model (float32 tables). :func:`ship` scores each compression of the
:class:`~.policy.ShipPolicy` (rows of the token, bigram and n-gram tables pruned, int8 values; ``model/compress.py``)
on the validation split, each after a temperature of its own, and keeps the smallest whose log-loss is within
:attr:`~.policy.ShipPolicy.margin` nats of the full model's (about 0.2 point of accuracy), or within
:attr:`~.policy.ShipPolicy.se` paired standard errors of it (the search's one-standard-error rule, Breiman et al.
1984: on a small validation split), row by row on the same validation texts; fastText's ``quantize`` (Joulin et al. 2016,
"FastText.zip") prunes and quantizes alike, by its own fixed cutoffs. The record then holds the compressed weights,
their temperature (or a multi-label model's decision, fitted again) and ``metrics.json``'s ``"compression"``: every
candidate's bytes and validation figures, and the choice. A refit's second run, which trains on the validation rows,
takes its held-out run's choice (:func:`apply_choice`). ``[training] compress = "none"`` ships the full model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch

from ..checkpoint import CheckpointRecord, weights_bytes
from ..evaluation import calibration
from ..inference.multilabel import fit_decision, row_binary_nll
from ..inference.torch_backend import batched_logits
from ..model.compress import Compression, ladder
from .policy import ShipPolicy

__all__ = ["apply_choice", "ship"]


def ship(record: CheckpointRecord, val_ids: list, val_labels: Any, policy: ShipPolicy, device: torch.device,
         batch_size: int, min_labels: int | None = None) -> CheckpointRecord:
    """``record`` compressed as validation allows (module docstring), its ``"compression"`` record in its metrics;
    ``record`` itself when it has no validation rows or no table to compress.

    Args:
        record: the run's full record, calibrated (its temperature, or a multi-label model's decision).
        val_ids: the validation texts' token ids.
        val_labels: their label ids ``(n,)``, or a ``(n, L)`` 0/1 matrix with several labels per text.
        policy: the compressions tried and the rule's tolerance.
        device: where the models are scored.
        batch_size: texts per forward pass.
        min_labels: a multi-label model's ``[predict] min_labels`` (its decision is fitted again).

    Raises:
        CheckpointError: the record's weights do not fit its config.
    """
    if not len(val_ids) or record.compression is not None:
        return record
    score = _Scorer(val_ids, np.asarray(val_labels), device, batch_size, min_labels)
    full = score(record)
    rows = [_row("full", record, None, full)]
    chosen, chosen_fit = record, full
    for c in ladder(policy.rungs, policy.bits or None):
        small = record.compressed(c)
        fit = score(small)
        within = _within(fit["losses"], full["losses"], policy.se, policy.margin)
        rows.append(_row(c.describe(), small, c, fit, within))
        if within:
            chosen, chosen_fit = small, fit
    report = _report(rows, policy)
    if chosen is not record:   # what a refit of the run applies to its own weights (apply_choice)
        report.update({k: chosen_fit[k] for k in ("temperature", "decision") if k in chosen_fit})
    return dataclasses.replace(chosen, metrics={**record.metrics, "compression": report},
                               temperature=chosen_fit.get("temperature", record.temperature),
                               decision=chosen_fit.get("decision", record.decision),
                               full=record if chosen is not record else None)


def apply_choice(record: CheckpointRecord, held_out: dict[str, Any]) -> CheckpointRecord:
    """A refitted ``record`` compressed as its held-out run chose (``held_out``: that run's ``metrics.json``), with
    the temperature (or decision) fitted on the held-out run's compressed model; ``record`` itself when that run
    shipped the full model."""
    report = held_out.get("compression") or {}
    chosen = report.get("chosen")
    if not chosen or record.compression is not None:
        return record
    small = record.compressed(Compression.from_record(chosen))
    return dataclasses.replace(small, metrics={**record.metrics, "compression": report},
                               temperature=report.get("temperature", record.temperature),
                               decision=report.get("decision", record.decision), full=record)


class _Scorer:
    """A record's validation figures: its logits, a temperature (or a multi-label decision) fitted on them, each
    row's log-loss after it, and its accuracy."""

    def __init__(self, val_ids: list, y: np.ndarray, device: torch.device, batch_size: int, min_labels: int | None):
        self.val_ids, self.y, self.device, self.batch_size, self.min_labels = val_ids, y, device, batch_size, min_labels

    def __call__(self, record: CheckpointRecord) -> dict[str, Any]:
        logits = batched_logits(record.model(self.device), self.val_ids, batch_size=self.batch_size,
                                device=self.device).numpy().astype(np.float64)
        if self.y.ndim == 2:
            rule, probabilities, _, _ = fit_decision(logits, self.y, self.min_labels or 0)
            losses = row_binary_nll(logits, self.y, np.asarray(rule.temperatures))
            exact = float((rule.labels(probabilities) == self.y.astype(bool)).all(1).mean())
            return {"losses": losses, "accuracy": exact, "decision": rule.to_json()}
        temperature = calibration.fit_temperature(logits, self.y)
        losses = calibration.row_nll(logits, self.y, temperature)
        return {"losses": losses, "accuracy": float((logits.argmax(1) == self.y).mean()), "temperature": temperature}


def _within(losses: np.ndarray, full: np.ndarray, ses: float, margin: float) -> bool:
    """Whether the mean of ``losses - full`` (paired, row by row; nats) is at most ``margin`` or at most ``ses``
    standard errors of it."""
    d = losses - full
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else 0.0
    return float(d.mean()) <= max(margin, ses * se)


def _row(name: str, record: CheckpointRecord, c: Compression | None, fit: dict[str, Any],
         within: bool | None = None) -> dict[str, Any]:
    """One candidate's line of the report."""
    row = {"name": name, "bytes": weights_bytes(record.weights, c), "validation_nll": float(fit["losses"].mean()),
           "validation_accuracy": fit["accuracy"], "compression": None if c is None else c.record()}
    if within is not None:
        row["within"] = within
    return row


def _report(rows: list[dict[str, Any]], policy: ShipPolicy) -> dict[str, Any]:
    """``metrics.json``'s ``"compression"``: the rule, every candidate, the choice (the last within the rule)."""
    picked = next((r for r in reversed(rows) if r["compression"] is not None and r.get("within")), rows[0])
    return {"rule": f"the smallest compression within {policy.margin:g} nats or {policy.se:g} paired standard "
                    "error of the full model's validation log-loss, each after its own temperature",
            "candidates": rows, "chosen": picked["compression"], "chosen_name": picked["name"],
            "full_bytes": rows[0]["bytes"], "bytes": picked["bytes"]}

"""The n-gram score's record in a checkpoint's ``metrics.json``, and reading it from new and old checkpoints.

A training run files what it fitted under :data:`REPORT_KEY` (``"ngram_score"``): the form and C, how they were
chosen (and every candidate's cross-validated accuracy), the buckets, whether the score is in the logits, its
validation accuracy. Checkpoints written before the score had one name filed it under :data:`OLD_KEY`
(``"teacher"``, with distillation's numbers beside it); :func:`read_report` reads either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .forms import FIT_FORMS

REPORT_KEY = "ngram_score"
OLD_KEY = "teacher"   # metrics.json's key for the same record before the n-gram score had one name


def read_report(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The n-gram score's record in ``metrics`` (a ``metrics.json``): :data:`REPORT_KEY`'s, else an older
    checkpoint's :data:`OLD_KEY`'s; ``{}`` when neither holds an object."""
    for key in (REPORT_KEY, OLD_KEY):
        report = metrics.get(key)
        if isinstance(report, Mapping):
            return dict(report)
    return {}


def fitted_form(metrics: Mapping[str, Any]) -> str | None:
    """The form the run fitted (``"nb-lr"`` or ``"lr"``) as its record names it, or ``None`` where it names none
    (a run before forms were chosen, or anything malformed)."""
    form = read_report(metrics).get("form")
    return form if form in FIT_FORMS else None


def model_phrase(metrics: Mapping[str, Any]) -> str | None:
    """The fitted score's model in words (the record's ``model``), or ``None``."""
    model = read_report(metrics).get("model")
    return model if isinstance(model, str) else None

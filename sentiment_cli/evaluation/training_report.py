"""After training: the training curves (``curves.png``) and the model card (``README.md``) written into the
checkpoint folder (:func:`write_training_report`).

Without matplotlib the run still succeeds, without the picture. This module prints nothing and never imports
rich: the CLI says what was written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..card.facts import CURVES_FILE
from ..card.readme import write_card
from ..checkpoint import read_metrics
from .plots import PlotUnavailable, curves_png, write_png


@dataclass
class TrainingReport:
    """What :func:`write_training_report` wrote: ``curves`` is ``None`` without matplotlib, and ``note`` says why."""

    card: Path
    curves: Path | None
    note: str | None = None


def write_training_report(directory: str | Path) -> TrainingReport:
    """Write ``curves.png`` (when matplotlib is there) and ``README.md`` into a trained checkpoint folder.

    Without matplotlib the run still succeeds: no picture (a stale one from
    an earlier run in the same folder is removed) and ``note`` says how to
    get it.

    Raises:
        OSError: the folder is not writable.
        CheckpointError: the folder holds no valid checkpoint.
    """
    directory = Path(directory)
    metrics = read_metrics(directory)
    curves, note = directory / CURVES_FILE, None
    trained = [r for r in metrics.get("history") or [] if r.get("train_loss") is not None]
    try:
        if not trained:   # epochs = 0: the n-gram score alone has no training curve
            raise PlotUnavailable("no encoder epoch (the n-gram score alone)")
        png = curves_png(trained, metrics.get("best_epoch"), title=f"{directory.resolve().name}: training curves")
    except PlotUnavailable as exc:
        curves.unlink(missing_ok=True)
        curves, note = None, f"no {CURVES_FILE}: {exc}"
    else:
        write_png(curves, png)
    return TrainingReport(write_card(directory), curves, note)

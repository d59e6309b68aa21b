"""The refit: after a run that held part of train out, train once more on every training row.

A run of the default on data without a dev split holds out a stratified slice of train
(``training/auto.py``, the validation rule). The slice picks the best epoch and fits the temperature.
With ``[training] refit = true`` it is then trained on, as issue 25 asks ("held out to fit the
temperature, then trained on"). A second run learns from all rows of train, for the first run's best
epoch count, with nothing held out. Its weights replace the first run's in the checkpoint folder, and
they keep the first run's temperature.

This is scikit-learn's ``refit=True`` for the one setting validation chose here (the epoch count), as
in AutoGluon's ``refit_full``. The temperature was fitted on the first model's held-out logits. The
refitted model trains on ``1 / (1 - validation_fraction)`` times the rows for as many epochs, so its
confidence is close to the first model's. Dev evidence is in ``docs/decisions.md#the-refit``; it costs a
second fine-tuning.

The refit trains into a hidden sibling folder (``.<output>.refit``), which holds only its trainer state; its record
stays in memory until the orchestrator writes the output folder once. A stop during it writes the first run's
record, complete and calibrated, into the output folder. It is resumable: when it starts, ``<output>/trainer_state/refit.json`` records that the refit is in
progress and in which folder (``state.REFIT_FILE``); the second run saves its own trainer state there after
every epoch, and a stop updates the record with the epochs it saved. ``train --resume <output>`` then finds
the first run finished and the record present, and continues the refit (:func:`saved_refit`) from its last saved
epoch, or starts it again when it saved none; either way the weights end bit-identical to an uninterrupted
run's, as the second run is seeded on its own and resumes as any run does.

This module holds the refit's pieces (its config, its folder, its record, the merged metrics); the orchestrator
(``run.py``) runs the second fit with them and writes the result.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Any

from ..checkpoint import METRICS_FILE, _read_json
from ..config import Config
from ..errors import CheckpointError, Interrupted
from ..wording import plural
from .callbacks import TrainResult
from .context import RunContext
from .state import (TrainerState, has_trainer_state, load_trainer_state, refit_record_path, state_path,
                    write_refit_record)

# What metrics.json keeps of the first run, under "held_out_run".
FIRST_RUN_KEYS = ("history", "best_epoch", "best_validation_accuracy", "best_validation_f1_macro",
                  "stopped_early", "wall_time_seconds")


def wanted(config: Config, first: TrainResult) -> bool:
    """Whether ``first`` is to be refitted: ``[training] refit`` is on, and its validation rows were held
    out of train (not the source's own dev split, which is no training data) and gave a best epoch (0: the
    n-gram score alone, ``epochs = 0``, refitted on every row too)."""
    data = first.metrics.get("data") or {}
    return bool(config.training.refit and data.get("validation_examples")
                and data.get("validation_from") is None and first.metrics.get("best_epoch") is not None)


def second_config(config: Config, first: TrainResult) -> Config:
    """The refit's config: ``config`` with nothing held out, for ``first``'s best epoch count, without patience."""
    return (config.override("training", origin="the refit", epochs=int(first.metrics["best_epoch"]), patience=0,
                            refit=False)
            .override("data", origin="the refit", validation_fraction=0.0))


def partial_folder(output: Path) -> Path:
    """The hidden sibling folder the refit of ``output`` trains into: ``.<name>.refit``."""
    return output.parent / f".{output.name}.refit"


def start(ctx: RunContext, first: TrainResult) -> Path:
    """Begin the refit of ``first`` (``ctx``: the first run's context): say so, empty its folder and record it
    in progress in the output's trainer state (rank 0). Returns the folder it trains into.

    Raises:
        OSError: the record cannot be written.
    """
    data, best = first.metrics["data"], int(first.metrics["best_epoch"])
    rows = data["train_examples"] + data["validation_examples"]
    negated, words = data.get("negation_augment") or 0, data.get("lexicon_prior") or 0
    extra = "".join([f", the {2 * negated:,} rule-negated sentences" if negated else "",
                     f", the lexicon's {words:,} one-word rows" if words else ""])
    ctx.cb.on_stage(f"refit: training again on all {rows:,} training rows ({data['validation_examples']:,} held "
                    f"out until now){extra} for {plural(best, 'epoch')}, the held-out run's best")
    partial = partial_folder(ctx.output)   # the same name on every torchrun rank; rank 0 writes it
    if ctx.info.is_main:
        shutil.rmtree(partial, ignore_errors=True)
        write_refit_record(ctx.output, {"stage": "refit", "folder": partial.name, "epochs": best, "epochs_saved": 0})
    return partial


def saved_refit(ctx: RunContext) -> tuple[TrainResult, TrainerState | None]:
    """The refit recorded in ``ctx.output``'s trainer state (``state.refit_in_progress``), the first run done:
    ``(first, saved)``, the first run's result and the second run's trainer state to continue in
    :func:`partial_folder`, on ``ctx``'s device. ``saved`` is ``None`` when none was saved, or one was saved
    for another config than the refit of this run's (a folder left by an earlier refit): the refit then
    starts again (it is seeded on its own, so the weights are an uninterrupted run's).

    Raises:
        CheckpointError: the output's ``metrics.json`` or the refit's trainer state is damaged, or records no
            held-out run to refit.
    """
    metrics_path = ctx.output / METRICS_FILE
    first = TrainResult(ctx.output, _read_json(metrics_path), ctx.info.is_main)
    if not wanted(ctx.config, first):
        raise CheckpointError(f"{metrics_path}: records no held-out run to refit; remove "
                              f"{refit_record_path(ctx.output)} and resume again")
    partial = partial_folder(ctx.output)
    saved = load_trainer_state(partial) if has_trainer_state(partial) else None
    again = second_config(ctx.config, first)
    if saved is None or saved.config.override("training", device=ctx.config.training.device).to_dict() \
            != again.to_dict():
        return first, None
    return first, saved


def interrupted(ctx: RunContext, partial: Path, exc: Interrupted) -> Interrupted:
    """The error a stop during the refit raises; records in the output's trainer state the epochs it saved.

    A refit that saved no epoch leaves nothing in ``partial`` worth keeping: the folder goes, and resuming
    starts the refit again.
    """
    saved = _read_json(state_path(partial)).get("epoch", 0) if has_trainer_state(partial) else 0
    epochs = None
    if ctx.info.is_main:
        marker = refit_record_path(ctx.output)
        record = _read_json(marker) if marker.is_file() else {"stage": "refit", "folder": partial.name}
        epochs = record.get("epochs")
        write_refit_record(ctx.output, {**record, "epochs_saved": saved})
        if not saved:
            shutil.rmtree(partial, ignore_errors=True)
    where = (f"epoch {saved}{f' of {epochs}' if epochs else ''} of the refit is saved in {partial}" if saved
             else "the refit had saved no epoch yet and starts again")
    return Interrupted(f"interrupted by {ctx.stop.reason or 'a signal'} during the refit on all rows; "
                       f"{ctx.output} keeps the held-out run's checkpoint, complete and calibrated; {where}; "
                       f"resume with: sentiment train --resume {shlex.quote(str(ctx.output))}",
                       exit_code=exc.exit_code, resumable=True)


def merged_metrics(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """The refitted folder's ``metrics.json``: the second run's, with the first run's ``calibration`` (the
    temperature the weights keep, and its held-out ECE) and its record as ``"held_out_run"``."""
    metrics = dict(second)
    metrics["held_out_run"] = {**{k: first.get(k) for k in FIRST_RUN_KEYS},
                               "validation_examples": first["data"]["validation_examples"],
                               "class_counts": first["data"]["class_counts"]}
    # rank 0 fitted the temperature; other torchrun ranks have no "calibration" (and write nothing)
    metrics["calibration"] = {**(first.get("calibration") or {}), "fitted_on": "the held-out run's validation rows"}
    metrics["wall_time_seconds"] = (first.get("wall_time_seconds") or 0.0) + (second.get("wall_time_seconds") or 0.0)
    return metrics


def done(partial: Path, output: Path) -> None:
    """The refit is over and its record in memory: its folder goes, and the output's record of a refit in progress
    (the orchestrator then writes the refitted record into ``output`` once)."""
    shutil.rmtree(partial, ignore_errors=True)
    refit_record_path(output).unlink(missing_ok=True)

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
confidence is close to the first model's. Dev evidence is in ``docs/experiments.md`` ("The hold-out,
trained on"); it costs a second fine-tuning.

The refit trains into a hidden sibling folder (``.<output>.refit``) and moves its files into place only once
it is done, so a stop during it leaves the first run's checkpoint, complete and calibrated, in the output
folder. It is resumable: when it starts, ``<output>/trainer_state/refit.json`` records that the refit is in
progress and in which folder (``state.REFIT_FILE``); the second run saves its own trainer state there after
every epoch, and a stop updates the record with the epochs it saved. ``train --resume <output>`` then finds
the first run finished and the record present, and continues the refit (:func:`resume`) from its last saved
epoch, or starts it again when it saved none; either way the weights end bit-identical to an uninterrupted
run's, as the second run is seeded on its own and resumes as any run does.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checkpoint import METRICS_FILE, Checkpoint, _read_json, write_json, write_temperature
from ..config import Config
from ..errors import CheckpointError, Interrupted
from ..evaluation.training_report import write_training_report
from ..wording import plural
from . import distributed, score_weight
from .callbacks import TrainResult
from .pretrain import load_pretrained
from .state import (TrainerState, clear_trainer_state, has_trainer_state, load_trainer_state, refit_record_path,
                    state_path, write_refit_record)

if TYPE_CHECKING:
    from .loop import RunContext

# What metrics.json keeps of the first run, under "held_out_run".
FIRST_RUN_KEYS = ("history", "best_epoch", "best_validation_accuracy", "best_validation_f1_macro",
                  "stopped_early", "wall_time_seconds")


def wanted(ctx: RunContext, first: TrainResult) -> bool:
    """Whether ``first`` is to be refitted: ``[training] refit`` is on, and its validation rows were held
    out of train (not the source's own dev split, which is no training data) and gave a best epoch."""
    data = first.metrics.get("data") or {}
    return bool(ctx.config.training.refit and data.get("validation_examples")
                and data.get("validation_from") is None and first.metrics.get("best_epoch"))


def refit(ctx: RunContext, first: TrainResult, pretrained: Checkpoint | None) -> TrainResult:
    """Train again on every training row for ``first``'s best epoch count; the weights replace ``first``'s.

    Args:
        ctx: the first run's context (its config has ``refit`` on and a hold-out of train).
        first: the first run's result; its folder holds the best epoch and the fitted temperature.
        pretrained: the pretrained encoder the first run started from, or ``None`` (it is loaded again
            from ``init_from`` when the first run was resumed and did not load it).

    Returns:
        The refitted folder's :class:`TrainResult`: the second run's ``metrics.json``, with the first run's
        ``calibration`` and, under ``"held_out_run"``, its history, best epoch and wall time.

    Raises:
        Interrupted: stopped during the second run; the output keeps the first run's checkpoint.
        DataError, CheckpointError, SentimentError: as :func:`~.loop.train`.
    """
    config, output, best = ctx.config, ctx.output, int(first.metrics["best_epoch"])
    data = first.metrics["data"]
    rows = data["train_examples"] + data["validation_examples"]
    again = _second_config(config, best)
    if pretrained is None and config.training.init_from:
        pretrained = load_pretrained(config.training.init_from, config)   # read the hold-out as the first run did
    ctx.cb.on_stage(f"refit: training again on all {rows:,} training rows ({data['validation_examples']:,} held "
                    f"out until now) for {plural(best, 'epoch')}, the held-out run's best")
    partial = partial_folder(output)   # the same name on every torchrun rank; rank 0 writes it
    if ctx.info.is_main:
        shutil.rmtree(partial, ignore_errors=True)
        write_refit_record(output, {"stage": "refit", "folder": partial.name, "epochs": best, "epochs_saved": 0})
    return _second_run(ctx, first, again, partial, saved=None, pretrained=pretrained)


def _second_config(config: Config, best: int) -> Config:
    """The refit's config: ``config`` with nothing held out, for the ``best`` epochs, without patience."""
    return (config.override("training", origin="the refit", epochs=best, patience=0, refit=False)
            .override("data", origin="the refit", validation_fraction=0.0))


def partial_folder(output: Path) -> Path:
    """The hidden sibling folder the refit of ``output`` trains into: ``.<name>.refit``."""
    return output.parent / f".{output.name}.refit"


def resume(ctx: RunContext) -> TrainResult:
    """Continue the refit recorded in ``ctx.output``'s trainer state (``state.refit_in_progress``), the first run done.

    The second run resumes from the last epoch it saved in :func:`partial_folder`, on ``ctx``'s device; with
    none saved, or one saved for another config than the refit of this run's (a folder left by an earlier
    refit), the refit starts again (it is seeded on its own, so the weights are an uninterrupted run's).

    Raises:
        CheckpointError: the output's ``metrics.json`` or the refit's trainer state is damaged.
        Interrupted, DataError, SentimentError: as :func:`refit`.
    """
    metrics_path = ctx.output / METRICS_FILE
    first = TrainResult(ctx.output, _read_json(metrics_path), ctx.info.is_main)
    if not wanted(ctx, first):
        raise CheckpointError(f"{metrics_path}: records no held-out run to refit; remove "
                              f"{refit_record_path(ctx.output)} and resume again")
    partial = partial_folder(ctx.output)
    saved = load_trainer_state(partial) if has_trainer_state(partial) else None
    device = ctx.config.training.device
    again = _second_config(ctx.config, int(first.metrics["best_epoch"]))
    if saved is None or saved.config.override("training", device=device).to_dict() != again.to_dict():
        ctx.cb.on_stage("the refit had saved no epoch of this run's refit: starting it again")
        return refit(ctx, first, None)
    ctx.cb.on_stage(f"refit: continuing the training on all rows saved in {partial}")
    return _second_run(ctx, first, saved.config.override("training", device=device), partial, saved=saved,
                       pretrained=None)


def _second_run(ctx: RunContext, first: TrainResult, config: Config, partial: Path, *,
                saved: TrainerState | None, pretrained: Checkpoint | None) -> TrainResult:
    """Run (or, with ``saved``, resume) the refit's second run in ``partial``, then move it into place.

    Raises:
        Interrupted: stopped; the second run's last completed epoch stays in ``partial`` to resume from.
        DataError, CheckpointError, SentimentError: as :func:`~.loop.train`.
    """
    from .loop import run_training   # here, not at the top: the loop calls this module

    try:
        second = run_training(config, partial, ctx.cb, ctx.stop, saved=saved, data_rules=ctx.data_rules,
                              pretrained=pretrained, report=False)   # written once, after the move
    except Interrupted as exc:
        raise _interrupted(ctx, partial, exc) from None
    metrics = _merged_metrics(first.metrics, second.metrics)
    distributed.barrier(ctx.info)   # every rank is done with the second run before rank 0 moves its files
    report = None
    if ctx.info.is_main:
        report = _move_into_place(partial, ctx.output, metrics, first.metrics["calibration"])
    return TrainResult(ctx.output, metrics, ctx.info.is_main, report)


def _interrupted(ctx: RunContext, partial: Path, exc: Interrupted) -> Interrupted:
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


def _merged_metrics(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
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


def _move_into_place(partial: Path, output: Path, metrics: dict[str, Any], fitted: dict[str, Any]):
    """Give the refitted weights the first run's temperature (and the weight ``score_weight.py`` chose, if
    any), then replace the output's files with them.

    The first run's trainer state goes first: resuming it would continue other weights than the folder's.
    Returns the rewritten card and curves (:func:`~sentiment_cli.evaluation.training_report.write_training_report`).
    """
    write_temperature(partial, fitted["temperature"])
    score_weight.keep(partial, fitted)
    write_json(partial / METRICS_FILE, metrics)
    clear_trainer_state(partial)
    clear_trainer_state(output)
    for path in sorted(partial.iterdir()):
        if path.is_file() and not path.name.startswith("."):   # not the lock file (output's own is held)
            os.replace(path, output / path.name)
    shutil.rmtree(partial, ignore_errors=True)
    return write_training_report(output)

"""The one writer of a training run's checkpoint folder: the command's final record written once, at the end
(:func:`publish`), or the record kept so far written once at a stop (:func:`write_on_stop`).

The orchestrator (``run.py``) calls it once per command (rank 0). Before the write the record gets the built-in
behavioural suite's part (two-class sentiment read as English words); after it, the curves and the card; then the
trainer state goes unless the user kept it, and with ``--keep-full`` the model before compression is written beside.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..checkpoint import STATE_DIR, CheckpointRecord, write_checkpoint
from ..evaluation.training_report import write_training_report
from .callbacks import TrainCallbacks, TrainResult
from .state import clear_trainer_state

FULL_FOLDER = "full"   # --keep-full's folder, inside the output


def publish(output: Path, result: TrainResult, cb: TrainCallbacks, *, keep_state: bool = False,
            keep_full: bool = False) -> TrainResult:
    """``result``'s record (with :func:`with_behaviour`'s part) written once into ``output`` with its curves and
    card; the trainer state removed unless ``keep_state`` (after a refit always: it would continue other weights
    than the folder's); with ``keep_full``, the model before compression written into ``output/full``.

    Returns:
        The command's :class:`TrainResult`, its report (the card and curves) set.

    Raises:
        OSError: the folder cannot be written.
    """
    record = with_behaviour(result.record, output, cb)
    write_checkpoint(output, record)
    report = write_training_report(output)
    if keep_full and record.full is not None:   # the model before compression, a folder of its own
        full = output / FULL_FOLDER
        write_checkpoint(full, dataclasses.replace(record.full, metrics={
            k: v for k, v in record.metrics.items() if k != "compression"}))
        write_training_report(full)
        cb.on_note(f"the model before compression: {full} (--keep-full)")
    if not keep_state or record.metrics.get("held_out_run"):
        clear_trainer_state(output)
    else:
        cb.on_note(f"the trainer state is kept in {output / STATE_DIR} (--keep-state): train --resume --epochs N "
                   "trains it longer")
    return TrainResult(output, record.metrics, True, report, record, result.validation_losses)


def with_behaviour(record: CheckpointRecord, output: Path, cb: TrainCallbacks) -> CheckpointRecord:
    """``record`` with the built-in behavioural suite's test half (``behaviour/``) run on its model in memory, when
    the labels are two-class sentiment's and the model reads English words: kept in ``metrics.json`` as
    ``"behaviour"`` (and so in the model card); ``record`` itself otherwise."""
    from ..behaviour.run import builtin_applies, builtin_record
    from ..data.tokenizer import tokenizer_from_str

    tokenizer = tokenizer_from_str(record.tokenizer_json, output)
    if not builtin_applies((record.metrics.get("data") or {}).get("labels") or (), tokenizer):
        return record   # another label set: no model is built for it
    cb.on_stage("behavioural tests (the built-in suite's test half)")
    record.metrics["behaviour"] = builtin_record(record.loaded(output))
    return record


def write_on_stop(output: Path, record: CheckpointRecord | None, report: bool = False) -> None:
    """At a stop (not a search trial's), the record kept so far written once into ``output``: the folder then holds
    a model to use while its trainer state holds the run to resume. ``report``: its card too."""
    if record is None:
        return
    write_checkpoint(output, record)
    if report:
        write_training_report(output)

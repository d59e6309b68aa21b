"""A training run from end to end: :func:`train` and :func:`resume`, the only callers of the fit.

It reads top to bottom:

- :func:`train` fixes the source (read once, :class:`~.run_data.RunData`), fits the default's settings
  to it (``auto.py``) and calls ``_run``; :func:`resume` loads the saved trainer state (``resume.py``)
  and calls ``_run`` with it.
- ``_run`` fixes the run's :class:`~.context.RunContext` (config, output folder, callbacks, stop flag,
  ranks, device), holds the output folder's lock (``lock.py``), makes the pretrained encoder first when
  ``init_from`` asks for one (``pretrain.py``), opens the process group, then runs ``_fit`` and, when
  wanted, the refit (``refit.py``: a second ``_run`` on every training row, into its own folder).
- ``_fit``: the epochs (``loop.py``, which keeps the best epoch's checkpoint record in memory), then the
  post-fit steps on the kept model in memory, each giving its part of the record (the n-gram score's weight
  and the temperature, ``calibrate.py``; the behavioural record, on the run's final model), the record
  written once (:func:`~sentiment_cli.checkpoint.write_checkpoint`), then the curves and the model card.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from . import auto, calibrate, distributed, loop, refit, search
from ..checkpoint import Checkpoint, CheckpointRecord, check_writable, load_weights, read_record, write_checkpoint
from ..config import Config
from ..data.sources import absolute_source
from ..data.splits import Split
from ..errors import Interrupted, SentimentError, UsageError
from ..model.classifier import SentimentClassifier
from ..evaluation.training_report import write_training_report
from ..outputs import check_output_folder
from ..runtime import native_bf16, resolve_device
from .calibrate import Calibration
from .callbacks import TrainCallbacks, TrainResult
from .context import RunContext
from .interrupts import StopFlag
from .lock import output_lock
from .pretrain import ensure_pretrained, load_pretrained
from .resume import saved_run
from .run_data import RunData
from .setup import Fit
from .state import TrainerState, clear_trainer_state, refit_in_progress

__all__ = ["resume", "train"]


def train(config: Config, output: str | Path, callbacks: TrainCallbacks | None = None, *,
          stop: StopFlag | None = None, fit_to_data: frozenset[str] | None = None,
          force: bool = False) -> TrainResult:
    """Train a classifier and write the best epoch (by validation accuracy) to ``output``.

    After every epoch the best checkpoint is refreshed (if the epoch improved; every epoch when ``[data]
    validation_fraction`` is 0, so the last one is kept) and then the resumable state of that epoch is written to
    ``output/trainer_state/`` (see :func:`resume`). Under ``torchrun`` the run is data-parallel (``distributed.py``).

    Args:
        config: the whole run configuration.
        output: checkpoint folder; created if needed. A trainer state left there by an earlier run is removed first.
        callbacks: progress hooks (called on rank 0 only).
        stop: polled at every step; once set, the run stops before the next optimizer step (the epoch in progress
            is dropped).
        fit_to_data: apply the default's data rules (``auto.py``) to every key not in this set of
            ``section.key`` names (those the command line set), then, with ``[training] time_budget`` > 0,
            search on the validation split (``search.py``); ``None``: apply none, and train once.
        force: write into an existing folder this tool did not make (never into the data or ``init_from``).

    Returns:
        :class:`TrainResult` with the folder and its metrics.

    With ``[training] init_from`` set, the run starts from that ``sentiment pretrain`` folder: its tokenizer and
    weights, with a freshly initialised dense head. When the folder is missing, the run makes it first (the
    pretraining stage, :func:`~.pretrain.ensure_pretrained`). The source is read once
    (:class:`~.run_data.RunData`): the default's rules, the pretraining stage and the fit take their parts from it.

    A run with an n-gram score (or distillation) first fits it on the training split, in seconds
    (``ngram/fit.py``; distillation's soft targets on unlabelled reviews: ``training/distill.py``). The
    encoder's loss leaves the score out; validation, evaluation and prediction add it.

    ``output`` is checked (:func:`~sentiment_cli.outputs.check_output_folder`) and locked (``lock.py``) before
    the data is read, and stays locked to the end, the search's trials included.

    Raises:
        UsageError: unusable device or output folder (a folder of other files without ``force``, or the data's).
        FolderInUse: another run holds ``output``'s lock.
        CheckpointError, ConfigError: ``init_from`` is damaged, incomplete or does not fit the config.
        DataError: the dataset cannot be loaded, or the n-gram score's labels hold fewer than two classes.
        Interrupted: ``stop`` was set; the last completed epoch is saved to resume from.
        SentimentError: the loss became NaN or infinite.
    """
    began = time.monotonic()   # the search's budget counts from here: reading the data and its rules count too
    config = dataclasses.replace(config, data=dataclasses.replace(config.data,
                                                                  source=absolute_source(config.data.source)))
    data = RunData(config.data.source)   # read once: the profile, pretraining and the fit share it
    created, main = not Path(output).exists(), distributed.from_env().is_main
    if main:   # never into the data, --force or not
        check_output_folder(output, force=True, inputs=_inputs(config))
    try:
        if main:   # refuse an unusable folder, then one of the user's files, before reading the data
            check_writable(Path(output))
            check_output_folder(output, force=force)
        return _locked_run(config, Path(output), callbacks or TrainCallbacks(), stop or StopFlag(), data, fit_to_data,
                           main, began)
    except BaseException:
        if created:   # a run that stopped before writing anything leaves no empty folder behind
            _remove_if_empty(Path(output))
        raise


def _locked_run(config: Config, output: Path, callbacks: TrainCallbacks, stop: StopFlag, data: RunData,
                fit_to_data: frozenset[str] | None, main: bool, began: float) -> TrainResult:
    """:func:`train` once ``output`` is checked: its lock held from before the data is read to the end (one
    writer), the data rules, then the search or one fit (``began``: :func:`train`'s start, ``time.monotonic()``)."""
    choices: list[auto.Choice] = []
    with output_lock(output, enabled=main, share=True):
        if fit_to_data is not None:   # other torchrun ranks read the same data and reach the same choices
            config, choices = auto.fit_to_data(config, fit_to_data, callbacks if main else TrainCallbacks(), data)
        return _search_or_run(config, output, callbacks, stop, data, fit_to_data, [c.to_dict() for c in choices],
                              began)


def _inputs(config: Config) -> list[tuple[str, str]]:
    """What a run reads from disk, never written into: the data, the unlabelled reviews, ``init_from``."""
    named = [("the --data", config.data.source), ("[data] unlabelled", config.data.unlabelled),
             ("--init", config.training.init_from)]
    return [(what, path) for what, path in named if path]


def _with_behaviour(record: CheckpointRecord, ctx: RunContext) -> CheckpointRecord:
    """``record`` (the run's final one, rank 0) with the built-in behavioural suite's test half (``behaviour/``)
    run on its model in memory, when the labels are two-class sentiment's and the model reads English words: kept in
    ``metrics.json`` as ``"behaviour"`` (and so in the model card); ``record`` itself otherwise."""
    from ..behaviour.run import builtin_applies, builtin_record
    from ..data.tokenizer import tokenizer_from_str

    tokenizer = tokenizer_from_str(record.tokenizer_json, ctx.output)
    if not builtin_applies((record.metrics.get("data") or {}).get("labels") or (), tokenizer):
        return record   # another label set: no model is built for it
    ctx.cb.on_stage("behavioural tests (the built-in suite's test half)")
    record.metrics["behaviour"] = builtin_record(record.loaded(ctx.output))
    return record


def _search_or_run(config: Config, output: Path, callbacks: TrainCallbacks, stop: StopFlag, data: RunData,
                   given: frozenset[str] | None, rules: list[dict[str, Any]], began: float) -> TrainResult:
    """The default's search within ``[training] time_budget`` (``search.py``) counted from ``began``
    (:func:`train`'s start), when the data rules were applied (``given`` is the command line's keys, not ``None``)
    and the run can search; else one run. A run that cannot search says why in a note (no validation split, or
    torchrun).

    Raises:
        UsageError: an unusable device (before the search starts).
        Interrupted, DataError, CheckpointError, ConfigError, SentimentError: as :func:`train`.
    """
    if given is not None and config.training.time_budget > 0:
        why = search.searchable(config) or ("torchrun runs one fit" if distributed.from_env().enabled else None)
        if why is None:
            resolve_device(config.training.device)   # an unusable device stops before the search
            return search.search(config, output, callbacks, stop, data, given, _runner(output, data, rules),
                                 started=began)
        callbacks.on_note(f"no search: {why}; one run with the data rules' settings")
    return _run(config, output, callbacks, stop, data, saved=None, data_rules=rules)


def resume(directory: str | Path, callbacks: TrainCallbacks | None = None, *, epochs: int | None = None,
           device: str | None = None, stop: StopFlag | None = None) -> TrainResult:
    """Continue the run saved in ``directory/trainer_state/`` from its last completed epoch.

    The model, optimizer and scheduler state, RNG states, best-so-far and
    history are restored, and the saved config is used, so that on the same
    hardware (CPU, fixed seed) the resumed run ends with the same metrics and
    bit-identical weights as a run that was never stopped. Only ``epochs``
    (to train longer; a decaying schedule is then stretched to the new
    length from the resumed step on) and ``device`` may change. A run that
    already finished (or stopped early) is returned as it is, unless it was
    stopped during its refit (``refit.py``): the refit then continues, to the
    weights an uninterrupted run ends with. The source is read again, once, and checked to be the
    saved run's (:func:`~.resume.check_same_data`).

    Raises:
        CheckpointError: nothing to resume, or the trainer state is damaged.
        UsageError: ``epochs`` is fewer than the epochs already completed.
        Interrupted, DataError, SentimentError: as :func:`train`.
    """
    directory = Path(directory)
    saved, config, state = saved_run(directory, epochs, device)
    cb, stop = callbacks or TrainCallbacks(), stop or StopFlag()
    if saved.epoch == config.training.epochs or state.metrics.get("stopped_early"):
        if refit_in_progress(directory):   # the held-out run is done; its refit on all rows is not
            return _run(config, directory, cb, stop, RunData(config.data.source), saved=saved, refit_only=True)
        why = "stopped early" if state.metrics.get("stopped_early") else "finished"
        if distributed.from_env().is_main:
            cb.on_stage(f"nothing to resume: the run in {directory} {why} after epoch {saved.epoch} "
                        f"(pass --epochs N to train longer)")
        return TrainResult(directory, state.metrics, distributed.from_env().is_main)
    return _run(config, directory, cb, stop, RunData(config.data.source), saved=saved)


def _remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` if it exists and is empty (``rmdir`` refuses anything else)."""
    try:
        folder.rmdir()
    except OSError:
        pass


def _run(config: Config, output: Path, callbacks: TrainCallbacks, stop: StopFlag, data: RunData, *,
         saved: TrainerState | None, data_rules: list[dict[str, Any]] | None = None,
         pretrained: Checkpoint | None = None, report: bool = True, refit_only: bool = False,
         refit_after: bool = True) -> TrainResult:
    """Run training from setup to the written report: a new run, or the saved one ``saved`` continued.

    ``data``: the run's data, read once (the refit's second run shares the first's). ``data_rules``: the
    default's choices made for this data (:func:`~.auto.fit_to_data`), kept in ``metrics.json``.
    ``pretrained``: the encoder to start from, already loaded (the refit's); ``None``: ``init_from``'s,
    made first when missing. ``report``: write the curves and the model card at the end (the refit's
    second run does not: its files are moved into place and the report is written then). ``refit_only``:
    ``saved`` is finished and its refit was stopped; continue the refit alone. ``refit_after``: ``False`` leaves
    the refit to the caller (the search's trials: the winner's is run once it is known).

    Rank 0 holds the output folder's lock (``lock.py``) from before the pretraining stage to the end, the
    refit (``refit.py``: with ``[training] refit``, a second run on every training row) included.

    Raises:
        FolderInUse: another process holds the output folder's lock (its pid named).
        UsageError, CheckpointError, ConfigError, DataError, Interrupted, SentimentError: as :func:`train`
            and :func:`resume`; under torchrun, a failing collective as a ``SentimentError`` naming the rank.
    """
    ctx = _context(config, output, callbacks, stop, data_rules or [], report)
    with output_lock(ctx.output, enabled=ctx.info.is_main):   # one writer: refuse a second train or --resume
        if pretrained is None and saved is None and config.training.init_from:
            # pretrain, or refuse an unfit folder, before the data loads
            pretrained, made = ensure_pretrained(config, ctx.cb, stop=stop, data=data)
            pretrained.metrics["made_by_this_run"] = made
            ctx.cb.on_stage(f"starting from the pretrained weights in {config.training.init_from}")
        try:
            with distributed.process_group(ctx.info, ctx.device):   # one group for both runs of a refit
                if refit_only:
                    return _resume_refit(ctx, data)
                result = _fit(ctx, data, saved, pretrained, refit_after)
                wanted = refit_after and refit.wanted(ctx.config, result)
                return _refit(ctx, data, result, pretrained) if wanted else result
        except RuntimeError as exc:   # e.g. a collective failing because another rank stopped on an error
            if not ctx.info.enabled:
                raise
            raise SentimentError(f"rank {ctx.info.rank}: {' '.join(str(exc).split())[:240]}") from exc


def _context(config: Config, output: Path, cb: TrainCallbacks, stop: StopFlag,
             data_rules: list[dict[str, Any]], report: bool = True) -> RunContext:
    """This process's context: its rank, its device (checked for bf16), and the output folder checked
    writable (rank 0).

    Raises:
        UsageError: unusable device, a GPU without bfloat16 for ``autocast_bf16``, or an unwritable output.
    """
    t = config.training
    info = distributed.from_env()
    if not info.is_main:
        cb = TrainCallbacks()   # rank 0 alone reports progress
    device = distributed.device_for(info, resolve_device(t.device))
    if t.autocast_bf16 and not native_bf16(device):
        if device.type == "cuda":
            raise UsageError("[training] autocast_bf16: this GPU does not support bfloat16; set it to false")
        cb.on_note("this CPU has no bfloat16 instructions (AVX512-BF16 or AMX), so bf16 autocast may "
                   "train slower than float32; [training] autocast_bf16 = false turns it off")
    if info.is_main:
        check_writable(output)
    return RunContext(config, output, cb, stop, info, device, data_rules, report)


def _fit(ctx: RunContext, data: RunData, saved: TrainerState | None, pretrained: Checkpoint | None,
         refit_after: bool = True) -> TrainResult:
    """The fit (``loop.py``), then its checkpoint record (rank 0): the kept epoch's, with the post-fit steps'
    parts (the n-gram score's weight, the temperature; the behavioural record when this run's is the final
    one: ``ctx.report``, and no refit follows), written once (``checkpoint.py``); then the curves and the model
    card (rank 0, unless ``ctx.report`` is off).

    Raises:
        DataError, CheckpointError, Interrupted, SentimentError: as :func:`train` and :func:`resume`.
    """
    run = loop.fit(ctx, data, saved, pretrained)
    metrics = run.state.metrics
    fitted = _post_fit(ctx, run) if ctx.info.is_main else None
    metrics["wall_time_seconds"] = run.wall_time()
    record = None
    if fitted is not None:
        metrics["calibration"] = fitted.report
        record = fitted.applied(run.kept, metrics)
        if ctx.report and not (refit_after and refit.wanted(ctx.config, TrainResult(ctx.output, metrics))):
            record = _with_behaviour(record, ctx)
        write_checkpoint(ctx.output, record)
    report = write_training_report(ctx.output) if ctx.info.is_main and ctx.report else None
    distributed.barrier(ctx.info)
    return TrainResult(ctx.output, metrics, ctx.info.is_main, report, record,
                       None if fitted is None else fitted.row_nll)


def _post_fit(ctx: RunContext, run: Fit) -> calibrate.Calibration:
    """The temperature (and the n-gram score's weight) fitted on the kept epoch's validation logits, by the
    kept epoch's model rebuilt in memory from ``run.kept`` (not necessarily the last epoch's, in ``run.model``).

    Raises:
        CheckpointError: the kept weights do not fit the run's config.
    """
    data, t = run.data, ctx.config.training
    min_labels = min_labels_of(ctx.config, data.train) if data.train.multi_label else None
    if not data.val_ids:
        return calibrate.calibrate(run.model, [], [], t, ctx.device, min_labels=min_labels)
    kept = SentimentClassifier.from_config(ctx.config, run.model.vocab_size, run.model.num_labels)
    load_weights(kept, run.kept.weights, "the kept weights", against="the run's config")
    return calibrate.calibrate(kept.to(ctx.device), data.val_ids, data.validation.labels, t, ctx.device,
                               ctx.cb.on_stage, min_labels=min_labels)


def min_labels_of(config: Config, train: Split) -> int:
    """``[predict] min_labels`` resolved for a multi-label run: as set, or (-1, auto) 1 when every training
    text has a label (GoEmotions) and 0 when some have none."""
    if config.predict.min_labels >= 0:
        return config.predict.min_labels
    return 0 if train.unlabelled_rows() else 1


# ----------------------------------------------------------------------------- the search's fits

def _runner(output: Path, data: RunData, rules: list[dict[str, Any]]) -> search.Runner:
    """The fits the default's search (``search.py``) runs: a trial into its folder (its refit and report left to
    the winner's adoption), the
    winning trial adopted as the run in ``output``, and a run into ``output`` (the n-gram score alone)."""
    def fit(config: Config, folder: Path, cb: TrainCallbacks, stop: StopFlag) -> TrainResult:
        return _run(config, folder, cb, stop, data, saved=None, data_rules=rules, report=False, refit_after=False)

    def finish(config: Config, trial: Path, cb: TrainCallbacks, stop: StopFlag) -> TrainResult:
        return _adopt(config, trial, output, cb, stop, data, rules)

    def final(config: Config, cb: TrainCallbacks, stop: StopFlag) -> TrainResult:
        return _run(config, output, cb, stop, data, saved=None, data_rules=rules)

    return search.Runner(fit=fit, finish=finish, final=final)


def _adopt(config: Config, trial: Path, output: Path, cb: TrainCallbacks, stop: StopFlag, data: RunData,
           rules: list[dict[str, Any]]) -> TrainResult:
    """The search's winning trial as the run in ``output``: its files moved into place (its trainer state too, so
    that a stopped refit resumes), then refitted when ``config`` says (:func:`~.refit.wanted`), its report written.

    Raises:
        Interrupted: stopped during the refit; ``output`` keeps the trial's checkpoint, complete and calibrated.
        DataError, CheckpointError, SentimentError: as :func:`train`.
    """
    ctx = _context(config, output, cb, stop, rules)
    with output_lock(ctx.output, enabled=ctx.info.is_main):
        clear_trainer_state(output)
        for path in sorted(trial.iterdir()):
            if not path.name.startswith("."):   # not the trial's lock file
                os.replace(path, output / path.name)
        record = read_record(output) if ctx.info.is_main else None
        first = TrainResult(output, record.metrics if record else {}, ctx.info.is_main, None, record)
        with distributed.process_group(ctx.info, ctx.device):
            if refit.wanted(config, first):
                return _refit(ctx, data, first, None)
        if record is not None:   # the final record: the behavioural one added, written once into output
            write_checkpoint(output, _with_behaviour(record, ctx))
        return TrainResult(output, first.metrics, ctx.info.is_main, write_training_report(output), record)


# ----------------------------------------------------------------------------- the refit

def _refit(ctx: RunContext, data: RunData, first: TrainResult, pretrained: Checkpoint | None) -> TrainResult:
    """Train again on every training row for ``first``'s best epoch count; the weights replace ``first``'s
    (``refit.py``). ``pretrained``: the encoder the first run started from, or ``None`` (it is loaded again
    from ``init_from`` when the first run was resumed and did not load it).

    Returns:
        The refitted folder's :class:`TrainResult` (:func:`~.refit.merged_metrics`).

    Raises:
        Interrupted: stopped during the second run; the output keeps the first run's checkpoint.
        DataError, CheckpointError, SentimentError: as :func:`train`.
    """
    config = ctx.config
    again = refit.second_config(config, first)
    if pretrained is None and config.training.init_from:
        pretrained = load_pretrained(config.training.init_from, config)   # read the hold-out as the first run did
    partial = refit.start(ctx, first)
    return _second_run(ctx, data, first, again, partial, saved=None, pretrained=pretrained)


def _resume_refit(ctx: RunContext, data: RunData) -> TrainResult:
    """Continue the refit recorded in ``ctx.output`` (:func:`~.refit.saved_refit`), or start it again when
    its second run saved no epoch of this refit.

    Raises:
        CheckpointError: as :func:`~.refit.saved_refit`.
        Interrupted, DataError, SentimentError: as :func:`_refit`.
    """
    first, saved = refit.saved_refit(ctx)
    if saved is None:
        ctx.cb.on_stage("the refit had saved no epoch of this run's refit: starting it again")
        return _refit(ctx, data, first, None)
    partial = refit.partial_folder(ctx.output)
    ctx.cb.on_stage(f"refit: continuing the training on all rows saved in {partial}")
    return _second_run(ctx, data, first, saved.config.override("training", device=ctx.config.training.device),
                       partial, saved=saved, pretrained=None)


def _second_run(ctx: RunContext, data: RunData, first: TrainResult, config: Config, partial: Path, *,
                saved: TrainerState | None, pretrained: Checkpoint | None) -> TrainResult:
    """Run (or, with ``saved``, resume) the refit's second run in ``partial``, then move it into place.

    Raises:
        Interrupted: stopped; the second run's last completed epoch stays in ``partial`` to resume from.
        DataError, CheckpointError, SentimentError: as :func:`train`.
    """
    try:
        second = _run(config, partial, ctx.cb, ctx.stop, data, saved=saved, data_rules=ctx.data_rules,
                      pretrained=pretrained, report=False)   # written once, after the move
    except Interrupted as exc:
        raise refit.interrupted(ctx, partial, exc) from None
    metrics = refit.merged_metrics(first.metrics, second.metrics)
    distributed.barrier(ctx.info)   # every rank is done with the second run before rank 0 moves its files
    report = record = None
    if ctx.info.is_main:   # the refitted weights keep the first run's temperature (and weight)
        record = Calibration.from_report(first.metrics["calibration"]).applied(second.record, metrics)
        report = refit.move_into_place(partial, ctx.output, _with_behaviour(record, ctx))
    return TrainResult(ctx.output, metrics, ctx.info.is_main, report, record)

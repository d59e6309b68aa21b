"""A training run from end to end: :func:`train` and :func:`resume`, the only callers of the fit, and the one writer
of the checkpoint folder.

It reads top to bottom:

- :func:`train` fixes the source (read once, :class:`~.run_data.RunData`) and the command's
  :class:`~.budget.Budget`, fits the default's settings to the data (``auto.py``, with the
  :class:`~.policy.Policy`'s rules), then runs the search (``search.py``) or one run (``_run``);
  :func:`resume` loads the saved trainer state (``resume.py``) and calls ``_run`` with it.
- ``_run`` fixes the run's :class:`~.context.RunContext`, holds the output folder's lock (``lock.py``), makes the
  pretrained encoder first when ``init_from`` asks for one (``pretrain.py``), opens the process group, then runs
  ``_fit`` and, when wanted, the refit (``refit.py``: a second ``_run`` on every training row, in its own folder).
- ``_fit``: the epochs (``loop.py``, which keeps the best epoch's record in memory and saves only its trainer state),
  then the post-fit steps on the kept model in memory, each giving its part of the record (the n-gram score's
  weight and the temperature, ``calibrate.py``).
- :func:`_publish`: the command's final record gets the behavioural suite's part and is written once
  (:func:`~sentiment_cli.checkpoint.write_checkpoint`), then the curves and the model card; the trainer state goes
  (``keep_state`` keeps it). Nothing else writes the checkpoint's files: a stop writes the record kept so far,
  once, so that the folder holds a model to use while its trainer state holds the run to resume.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from . import auto, calibrate, distributed, loop, publish, refit, search, shipping
from ..checkpoint import Checkpoint, CheckpointRecord, check_writable, load_weights
from ..config import Config
from ..data.sources import absolute_source
from ..data.splits import Split
from ..errors import Interrupted, SentimentError, UsageError
from ..model.classifier import SentimentClassifier
from ..outputs import check_output_folder
from ..runtime import native_bf16, resolve_device
from .budget import Budget, StepLimit
from .calibrate import Calibration
from .callbacks import TrainCallbacks, TrainResult
from .context import RunContext
from .interrupts import StopFlag
from .lock import output_lock
from .policy import DEFAULT, Policy
from .pretrained import ensure_pretrained, load_pretrained
from .resume import saved_run
from .run_data import RunData
from .setup import Fit, setup
from .state import STATE_DIR, TrainerState, clear_trainer_state, refit_in_progress
from .trials import Runner

__all__ = ["resume", "train"]


def train(config: Config, output: str | Path, callbacks: TrainCallbacks | None = None, *,
          stop: StopFlag | None = None, fit_to_data: frozenset[str] | None = None,
          force: bool = False, policy: Policy = DEFAULT, keep_state: bool = False,
          keep_full: bool = False) -> TrainResult:
    """Train a classifier and write its checkpoint folder to ``output``, once, at the end.

    Every epoch saves the resumable state of the run (``output/trainer_state/``, with the best epoch's weights; see
    :func:`resume`); the checkpoint's files are written once the run is done (the best epoch by validation accuracy,
    calibrated), or once at a stop (the best epoch so far). Under ``torchrun`` the run is data-parallel
    (``distributed.py``).

    Args:
        config: the whole run configuration.
        output: checkpoint folder; created if needed. A trainer state left there by an earlier run stays until this
            run saves its own first epoch.
        callbacks: progress hooks (called on rank 0 only).
        stop: polled at every step; once set, the run stops before the next optimizer step (the epoch in progress
            is dropped).
        fit_to_data: apply the default's data rules (``auto.py``) to every key not in this set of
            ``section.key`` names (those the command line set), then, with ``[training] time_budget`` > 0,
            search on the validation split (``search.py``) within one budget from this call's start; ``None``:
            apply none, and train once.
        force: write into an existing folder this tool did not make (never into the data or ``init_from``).
        policy: the tuning numbers of the data rules, the search and the fit (:class:`~.policy.Policy`).
        keep_state: keep the trainer state (optimizer moments, RNG states) in the finished folder, so that
            ``train --resume --epochs N`` can train it longer; a stopped run always keeps it.
        keep_full: when the run ships a compressed model (``shipping.py``), also write the model before
            compression into ``output/full`` (a checkpoint folder of its own).

    Returns:
        :class:`TrainResult` with the folder and its metrics.

    Raises:
        UsageError: unusable device or output folder (a folder of other files without ``force``, or the data's).
        FolderInUse: another run holds ``output``'s lock.
        CheckpointError, ConfigError: ``init_from`` is damaged, incomplete or does not fit the config.
        DataError: the dataset cannot be loaded, or the n-gram score's labels hold fewer than two classes.
        Interrupted: ``stop`` was set; the last completed epoch is saved to resume from.
        SentimentError: the loss became NaN or infinite.
    """
    began = time.monotonic()   # the budget counts from here: reading the data and its rules count too
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
        job = _Job(Path(output), callbacks or TrainCallbacks(), stop or StopFlag(), data, policy, keep_state, main,
                   keep_full)
        return _locked_run(config, job, fit_to_data, began)
    except BaseException:
        if created:   # a run that stopped before writing anything leaves no empty folder behind
            _remove_if_empty(Path(output))
        raise


@dataclasses.dataclass(frozen=True)
class _Job:
    """What one ``train`` or ``--resume`` command is given: its output folder, hooks, stop flag, data, policy,
    whether the finished folder keeps its trainer state, whether this process is rank 0, and whether the model
    before compression is written beside (``full/``)."""

    output: Path
    cb: TrainCallbacks
    stop: StopFlag
    data: RunData
    policy: Policy = DEFAULT
    keep_state: bool = False
    main: bool = True
    keep_full: bool = False


def _locked_run(config: Config, job: _Job, fit_to_data: frozenset[str] | None, began: float) -> TrainResult:
    """:func:`train` once ``output`` is checked: its lock held from before the data is read to the end (one
    writer), the data rules, then the search or one fit, then the one write (``began``: :func:`train`'s start,
    ``time.monotonic()``)."""
    choices: list[auto.Choice] = []
    with output_lock(job.output, enabled=job.main, share=True):
        if fit_to_data is not None:   # other torchrun ranks read the same data and reach the same choices
            config, choices = auto.fit_to_data(config, fit_to_data, job.cb if job.main else TrainCallbacks(),
                                               job.data, job.policy.rules)
        rules = [c.to_dict() for c in choices]
        budget = Budget(began, config.training.time_budget)
        result = _search_or_run(config, job, fit_to_data, rules, budget)
        return _publish(job, config, result)


def _inputs(config: Config) -> list[tuple[str, str]]:
    """What a run reads from disk, never written into: the data, the unlabelled reviews, ``init_from``."""
    named = [("the --data", config.data.source), ("[data] unlabelled", config.data.unlabelled),
             ("--init", config.training.init_from)]
    return [(what, path) for what, path in named if path]


def _search_or_run(config: Config, job: _Job, given: frozenset[str] | None, rules: list[dict[str, Any]],
                   budget: Budget) -> TrainResult:
    """The default's search within ``budget`` (``search.py``), when the data rules were applied (``given`` is the
    command line's keys, not ``None``) and the run can search; else one run. A run that cannot search says why in a
    note (no validation split, or torchrun). The result's record is not written yet.

    Raises:
        UsageError: an unusable device (before the search starts).
        Interrupted, DataError, CheckpointError, ConfigError, SentimentError: as :func:`train`.
    """
    if given is not None and config.training.time_budget > 0:
        why = search.searchable(config) or ("torchrun runs one fit" if distributed.from_env().enabled else None)
        if why is None:
            resolve_device(config.training.device)   # an unusable device stops before the search
            return search.search(config, job.output, job.cb, job.stop, job.data, given, _runner(job, rules),
                                 budget, job.policy)
        job.cb.on_note(f"no search: {why}; one run with the data rules' settings")
    return _run(config, job, saved=None, data_rules=rules)


def resume(directory: str | Path, callbacks: TrainCallbacks | None = None, *, epochs: int | None = None,
           device: str | None = None, stop: StopFlag | None = None, keep_state: bool = False) -> TrainResult:
    """Continue the run saved in ``directory/trainer_state/`` from its last completed epoch.

    The model, optimizer and scheduler state, RNG states, best-so-far, the kept epoch's weights and history are
    restored, and the saved config is used, so that on the same hardware (CPU, fixed seed) the resumed run ends
    with the same metrics and bit-identical weights as a run that was never stopped. Only ``epochs`` (to train
    longer; a decaying schedule is then stretched to the new length from the resumed step on) and ``device`` may
    change. A run that already finished (or stopped early) is returned as it is, unless it was stopped during its
    refit (``refit.py``): the refit then continues, to the weights an uninterrupted run ends with. The source is
    read again, once, and checked to be the saved run's (:func:`~.resume.check_same_data`).

    Raises:
        CheckpointError: nothing to resume (a finished run keeps no trainer state without ``--keep-state``), or the
            trainer state is damaged.
        UsageError: ``epochs`` is fewer than the epochs already completed.
        Interrupted, DataError, SentimentError: as :func:`train`.
    """
    directory = Path(directory)
    saved, config, state = saved_run(directory, epochs, device)
    info = distributed.from_env()
    job = _Job(directory, callbacks or TrainCallbacks(), stop or StopFlag(), RunData(config.data.source),
               keep_state=keep_state, main=info.is_main)
    if saved.epoch == config.training.epochs or state.metrics.get("stopped_early"):
        if refit_in_progress(directory):   # the held-out run is done; its refit on all rows is not
            return _publish(job, config, _run(config, job, saved=saved, refit_only=True))
        why = "stopped early" if state.metrics.get("stopped_early") else "finished"
        if info.is_main:
            job.cb.on_stage(f"nothing to resume: the run in {directory} {why} after epoch {saved.epoch} "
                            f"(pass --epochs N to train longer)")
        return TrainResult(directory, state.metrics, info.is_main)
    return _publish(job, config, _run(config, job, saved=saved))


def _remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` if it exists and is empty (``rmdir`` refuses anything else)."""
    try:
        folder.rmdir()
    except OSError:
        pass


# ----------------------------------------------------------------------------- the one write

def _publish(job: _Job, config: Config, result: TrainResult) -> TrainResult:
    """The command's final result written once into ``job.output`` by rank 0 (``publish.py``); torchrun's other
    ranks write nothing."""
    if not job.main or result.record is None:
        return dataclasses.replace(result, checkpoint=job.output)
    return publish.publish(job.output, result, job.cb, keep_state=job.keep_state, keep_full=job.keep_full)


def _write_on_stop(ctx: RunContext, record: CheckpointRecord | None, report: bool = False) -> None:
    """At a stop, rank 0 writes the record kept so far (:func:`~.publish.write_on_stop`)."""
    if ctx.info.is_main:
        publish.write_on_stop(ctx.output, record, report)


# ----------------------------------------------------------------------------- one run

def _run(config: Config, job: _Job, *, saved: TrainerState | None, data_rules: list[dict[str, Any]] | None = None,
         pretrained: Checkpoint | None = None, refit_only: bool = False, refit_after: bool = True,
         output: Path | None = None, steps: StepLimit | None = None, cb: TrainCallbacks | None = None,
         stop: StopFlag | None = None) -> TrainResult:
    """One run from setup to its record in memory (not written): a new run, or the saved one ``saved`` continued,
    and its refit when wanted.

    ``output``: where the run's trainer state goes (``job.output``, or a trial's or the refit's folder).
    ``data_rules``: the default's choices made for this data (:func:`~.auto.fit_to_data`), kept in ``metrics.json``.
    ``pretrained``: the encoder to start from, already loaded (the refit's); ``None``: ``init_from``'s, made first
    when missing. ``refit_only``: ``saved`` is finished and its refit was stopped; continue the refit alone.
    ``refit_after``: ``False`` leaves the refit to the caller (the search's trials). ``steps``: a search trial's step
    limit. ``cb`` and ``stop``: a trial's own (``job``'s otherwise).

    Raises:
        FolderInUse: another process holds the output folder's lock (its pid named).
        UsageError, CheckpointError, ConfigError, DataError, Interrupted, SentimentError: as :func:`train`
            and :func:`resume`; under torchrun, a failing collective as a ``SentimentError`` naming the rank.
    """
    ctx = _context(config, output or job.output, cb or job.cb, stop or job.stop, data_rules or [], steps,
                   job.policy)
    with output_lock(ctx.output, enabled=ctx.info.is_main):   # one writer: refuse a second train or --resume
        if pretrained is None and saved is None and config.training.init_from:
            # pretrain, or refuse an unfit folder, before the data loads
            pretrained, made = ensure_pretrained(config, ctx.cb, stop=ctx.stop, data=job.data)
            pretrained.metrics["made_by_this_run"] = made
            ctx.cb.on_stage(f"starting from the pretrained weights in {config.training.init_from}")
        try:
            with distributed.process_group(ctx.info, ctx.device):   # one group for both runs of a refit
                if refit_only:
                    return _resume_refit(ctx, job)
                result = _fit(ctx, job.data, saved, pretrained, final=output is None)
                wanted = refit_after and refit.wanted(ctx.config, result)
                return _refit(ctx, job, result, pretrained) if wanted else result
        except RuntimeError as exc:   # e.g. a collective failing because another rank stopped on an error
            if not ctx.info.enabled:
                raise
            raise SentimentError(f"rank {ctx.info.rank}: {' '.join(str(exc).split())[:240]}") from exc


def _context(config: Config, output: Path, cb: TrainCallbacks, stop: StopFlag, data_rules: list[dict[str, Any]],
             steps: StepLimit | None = None, policy: Policy = DEFAULT) -> RunContext:
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
    return RunContext(config, output, cb, stop, info, device, data_rules, steps, policy)


def _fit(ctx: RunContext, data: RunData, saved: TrainerState | None, pretrained: Checkpoint | None,
         final: bool = True) -> TrainResult:
    """The fit (``loop.py``), then its checkpoint record in memory (rank 0): the kept epoch's, with the post-fit
    steps' parts (the n-gram score's weight, the temperature). ``final``: the run is its command's (not a search
    trial's or a refit's second run), so a stop writes the record kept so far.

    Raises:
        DataError, CheckpointError, Interrupted, SentimentError: as :func:`train` and :func:`resume`.
    """
    run = setup(ctx, data, saved, pretrained)
    try:
        loop.run_epochs(run)
    except Interrupted:
        if final:
            _write_on_stop(ctx, run.kept)
        raise
    metrics = run.state.metrics
    fitted = _post_fit(ctx, run) if ctx.info.is_main else None
    metrics["wall_time_seconds"] = run.wall_time()
    record = None
    if fitted is not None:
        metrics["calibration"] = fitted.report
        record = fitted.applied(run.kept, metrics)
        if final:   # the command's own run: the model it ships (a trial's is chosen once it wins)
            min_labels = min_labels_of(ctx.config, run.data.train) if run.data.train.multi_label else None
            record = _shipped(ctx, record, run.data.val_ids, run.data.validation.labels, min_labels)
            metrics = record.metrics
    distributed.barrier(ctx.info)
    return TrainResult(ctx.output, metrics, ctx.info.is_main, None, record,
                       None if fitted is None else fitted.row_nll)


def _shipped(ctx: RunContext, record: CheckpointRecord, val_ids: Any, val_labels: Any,
             min_labels: int | None) -> CheckpointRecord:
    """``record`` as the run ships it (``shipping.py``): the smallest compression validation allows, unless
    ``[training] compress = "none"`` (or the run has no validation rows)."""
    t = ctx.config.training
    if t.compress == "none" or not len(val_ids):
        return record
    ctx.cb.on_stage("choosing the model to ship: each compression of its tables scored on the validation split")
    shipped = shipping.ship(record, val_ids, val_labels, ctx.policy.ship, ctx.device, t.eval_batch_size, min_labels)
    report = shipped.metrics.get("compression") or {}
    if report:
        ctx.cb.on_note(f"shipped: {report['chosen_name']}, {report['bytes'] / 1e6:,.2f} MB of weights (the full "
                       f"model's {report['full_bytes'] / 1e6:,.2f} MB), its validation log-loss within "
                       f"{ctx.policy.ship.margin:g} nats or {ctx.policy.ship.se:g} standard error of the full model's")
    return shipped


def _post_fit(ctx: RunContext, run: Fit) -> calibrate.Calibration:
    """The temperature (and the n-gram score's weight) fitted on the kept epoch's validation logits, by the
    kept epoch's model rebuilt in memory from ``run.kept`` (not necessarily the last epoch's, in ``run.model``).

    Raises:
        CheckpointError: the kept weights do not fit the run's config.
    """
    data, t = run.data, ctx.config.training
    min_labels = min_labels_of(ctx.config, data.train) if data.train.multi_label else None
    scales = ctx.policy.fit.ngram_scales
    if not data.val_ids:
        return calibrate.calibrate(run.model, [], [], t, ctx.device, min_labels=min_labels, ladder=scales)
    kept = SentimentClassifier.from_config(ctx.config, run.model.vocab_size, run.model.num_labels)
    load_weights(kept, run.kept.weights, "the kept weights", against="the run's config")
    return calibrate.calibrate(kept.to(ctx.device), data.val_ids, data.validation.labels, t, ctx.device,
                               ctx.cb.on_stage, min_labels=min_labels, ladder=scales)


def min_labels_of(config: Config, train: Split) -> int:
    """``[predict] min_labels`` resolved for a multi-label run: as set, or (-1, auto) 1 when every training
    text has a label (GoEmotions) and 0 when some have none."""
    if config.predict.min_labels >= 0:
        return config.predict.min_labels
    return 0 if train.unlabelled_rows() else 1


# ----------------------------------------------------------------------------- the search's fits

def _runner(job: _Job, rules: list[dict[str, Any]]) -> Runner:
    """The fits the default's search (``search.py``) runs: a trial into its folder (its refit left to the winner),
    the winning trial made the run in the output folder, and the n-gram score alone's run; none writes the output
    folder's checkpoint."""
    def fit(config: Config, folder: Path, cb: TrainCallbacks, stop: StopFlag, steps: StepLimit) -> TrainResult:
        return _run(config, job, saved=None, data_rules=rules, refit_after=False, output=folder, steps=steps,
                    cb=cb, stop=stop)

    def finish(config: Config, trial: TrainResult, cb: TrainCallbacks, stop: StopFlag) -> TrainResult:
        return _adopt(config, trial, job, cb, stop, rules)

    def final(config: Config, cb: TrainCallbacks, stop: StopFlag) -> TrainResult:
        return _run(config, job, saved=None, data_rules=rules, cb=cb, stop=stop)

    return Runner(fit=fit, finish=finish, final=final)


def _adopt(config: Config, trial: TrainResult, job: _Job, cb: TrainCallbacks, stop: StopFlag,
           rules: list[dict[str, Any]]) -> TrainResult:
    """The search's winning trial as the run in ``job.output``: refitted when ``config`` says (:func:`~.refit.wanted`),
    its trainer state moved there first (so that a stopped refit resumes; and with ``--keep-state``); its record
    stays in memory.

    Raises:
        Interrupted: stopped during the refit; ``output`` holds the trial's record, complete and calibrated.
        DataError, CheckpointError, SentimentError: as :func:`train`.
    """
    ctx = _context(config, job.output, cb, stop, rules, policy=job.policy)
    with output_lock(ctx.output, enabled=ctx.info.is_main):
        first = dataclasses.replace(trial, checkpoint=job.output)
        if first.record is not None:   # the model to ship, chosen on the trial's validation rows
            record = _shipped(ctx, first.record, *_validation(job, config, first.record))
            first = dataclasses.replace(first, metrics=record.metrics, record=record)
        wanted = refit.wanted(config, first)
        if ctx.info.is_main and (wanted or job.keep_state):
            clear_trainer_state(job.output)
            if (trial.checkpoint / STATE_DIR).is_dir():
                os.replace(trial.checkpoint / STATE_DIR, job.output / STATE_DIR)
        if wanted:
            with distributed.process_group(ctx.info, ctx.device):
                return _refit(ctx, job, first, None)
        return first


def _validation(job: _Job, config: Config, record: CheckpointRecord) -> tuple[Any, Any, int | None]:
    """``(token ids, labels, min_labels)`` of ``config``'s validation rows, read as ``record``'s tokenizer reads them
    (the run's data keeps the ids it made)."""
    from ..data.splits import DataSpec
    from ..data.tokenizer import tokenizer_from_str

    train, val = job.data.splits(DataSpec.from_config(config))
    ids = job.data.ids(tokenizer_from_str(record.tokenizer_json, "the trial's tokenizer"), val.texts, config.data)
    return ids, val.labels, (min_labels_of(config, train) if train.multi_label else None)


# ----------------------------------------------------------------------------- the refit

def _refit(ctx: RunContext, job: _Job, first: TrainResult, pretrained: Checkpoint | None) -> TrainResult:
    """Train again on every training row for ``first``'s best epoch count; the weights replace ``first``'s in the
    record (``refit.py``). ``pretrained``: the encoder the first run started from, or ``None`` (it is loaded again
    from ``init_from`` when the first run was resumed and did not load it).

    Raises:
        Interrupted: stopped during the second run; the output folder gets ``first``'s record, written then.
        DataError, CheckpointError, SentimentError: as :func:`train`.
    """
    config = ctx.config
    again = refit.second_config(config, first)
    if pretrained is None and config.training.init_from:
        pretrained = load_pretrained(config.training.init_from, config)   # read the hold-out as the first run did
    partial = refit.start(ctx, first)
    return _second_run(ctx, job, first, again, partial, saved=None, pretrained=pretrained)


def _resume_refit(ctx: RunContext, job: _Job) -> TrainResult:
    """Continue the refit recorded in ``ctx.output`` (:func:`~.refit.saved_refit`), or start it again when
    its second run saved no epoch of this refit.

    Raises:
        CheckpointError: as :func:`~.refit.saved_refit`.
        Interrupted, DataError, SentimentError: as :func:`_refit`.
    """
    first, saved = refit.saved_refit(ctx)
    if saved is None:
        ctx.cb.on_stage("the refit had saved no epoch of this run's refit: starting it again")
        return _refit(ctx, job, first, None)
    partial = refit.partial_folder(ctx.output)
    ctx.cb.on_stage(f"refit: continuing the training on all rows saved in {partial}")
    return _second_run(ctx, job, first, saved.config.override("training", device=ctx.config.training.device),
                       partial, saved=saved, pretrained=None)


def _second_run(ctx: RunContext, job: _Job, first: TrainResult, config: Config, partial: Path, *,
                saved: TrainerState | None, pretrained: Checkpoint | None) -> TrainResult:
    """Run (or, with ``saved``, resume) the refit's second run in ``partial``; the refitted record in memory, with
    ``first``'s temperature (and weight) and the merged metrics.

    Raises:
        Interrupted: stopped; the second run's last completed epoch stays in ``partial`` to resume from, and the
            output folder gets ``first``'s record and card, written then.
        DataError, CheckpointError, SentimentError: as :func:`train`.
    """
    try:
        second = _run(config, job, saved=saved, data_rules=ctx.data_rules, pretrained=pretrained, output=partial,
                      cb=ctx.cb, stop=ctx.stop)
    except Interrupted as exc:
        if saved is None:   # a resumed refit's output folder holds the first run's record already
            _write_on_stop(ctx, first.record, report=True)
        raise refit.interrupted(ctx, partial, exc) from None
    metrics = refit.merged_metrics(first.metrics, second.metrics)
    distributed.barrier(ctx.info)   # every rank is done with the second run before rank 0 removes its folder
    record = None
    if ctx.info.is_main:   # the refitted weights keep the first run's temperature (and weight)
        record = Calibration.from_report(first.metrics["calibration"]).applied(second.record, metrics)
        record = shipping.apply_choice(record, first.metrics)   # the held-out run's choice of what to ship
        metrics = record.metrics
        refit.done(partial, ctx.output)
    return TrainResult(ctx.output, metrics, ctx.info.is_main, None, record, first.validation_losses)

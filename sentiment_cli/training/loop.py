"""The training loop: tokenizer on train, AdamW over length-bucketed batches, best epoch kept.

Progress is reported through :class:`TrainCallbacks` (the CLI renders it
with rich); this module prints nothing itself. Every epoch ends by saving a
resumable trainer state (``resume.py`` continues it); a
:class:`~.interrupts.StopFlag` stops the loop between steps; under
``torchrun`` the same loop runs data-parallel (``distributed.py``).

It reads top to bottom, as nanoGPT's does:

- :func:`train` (and :func:`~.resume.resume`) call :func:`run_training`,
  which fixes the run's :class:`RunContext` (config, output folder,
  callbacks, stop flag, ranks, device), makes the pretrained encoder first
  when ``init_from`` asks for one (``pretrain.py``) and opens the process
  group.
- ``_setup``, in this order (it decides what the seeded RNGs draw):
  ``_load_data`` (splits, tokenizer, token ids: :class:`_Data`),
  ``_build_model``, ``_fit_ngram`` (the n-gram score, ``ngram/fit.py``, and
  distillation's targets, ``distill.py``), the class weights (``imbalance.py``),
  ``_optimizer_and_schedule``, then the loop state: a new run's
  (``_fresh_state``) or the saved one (``resume.py``).
- for each epoch: ``_train_epoch`` (one ``_step`` per batch),
  ``_validate``, ``_end_of_epoch`` (history, best epoch and patience, saving).
- ``_finish``: the temperature (``calibrate.py``), the final ``metrics.json``,
  the curves and the model card.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from . import auto, distill, distributed, imbalance, refit
from ..checkpoint import (METRICS_FILE, TOKENIZER_FILE, Checkpoint, check_writable, load_weights, save_checkpoint,
                          write_json)
from ..config import Config
from ..data.batching import collate, make_batches
from ..data.sources import absolute_source
from ..data.splits import DataSpec, Split, load_train_validation
from ..data.tokenizer import UNK_ID, build_tokenizer, encode_texts, save_tokenizer, tokenizer_from_str
from ..errors import Interrupted, SentimentError, UsageError
from ..ngram.fit import FittedScore, check_fit_size, fit_ngram_score
from ..ngram.report import REPORT_KEY
from ..evaluation.training_report import write_training_report
from ..evaluation.evaluate import evaluate_ids
from ..model.classifier import SentimentClassifier
from ..runtime import autocast, device_name, native_bf16, resolve_device, seed_everything, versions
from .calibrate import calibrate
from .callbacks import TrainCallbacks, TrainResult
from .interrupts import StopFlag
from .lock import output_lock
from .optim import lr_lambda, make_optimizer, optimizer_step
from .pretrain import ensure_pretrained, pretrained_weights
from .resume import check_same_data, resume, resumed_state, rng_states   # resume: re-exported, an entry point
from .state import STATE_DIR, LoopState, TrainerState, clear_trainer_state, save_trainer_state, state_path

__all__ = ["RunContext", "adversarial_perturbation", "resume", "run_training", "train", "word_dropout"]


def train(config: Config, output: str | Path, callbacks: TrainCallbacks | None = None, *,
          stop: StopFlag | None = None, fit_to_data: frozenset[str] | None = None) -> TrainResult:
    """Train a classifier and write the best epoch (by validation accuracy) to ``output``.

    After every epoch the best checkpoint is refreshed (if the epoch
    improved; every epoch when ``[data] validation_fraction`` is 0, so the
    last one is kept) and then the resumable state of that epoch is written to
    ``output/trainer_state/`` (see :func:`~.resume.resume`). Under ``torchrun``
    the run is data-parallel (see ``distributed.py``).

    Args:
        config: the whole run configuration.
        output: checkpoint folder; created if needed. A trainer state left
            there by an earlier run is removed first.
        callbacks: progress hooks (called on rank 0 only).
        stop: polled at every step; once set, the run stops before the next
            optimizer step (the epoch in progress is dropped).
        fit_to_data: apply the default's data rules (``auto.py``) to every key not in this set of
            ``section.key`` names (those the command line set); ``None``: apply none.

    Returns:
        :class:`TrainResult` with the folder and its metrics.

    With ``[training] init_from`` set, the run starts from that
    ``sentiment pretrain`` folder: its tokenizer and weights, with a freshly
    initialised dense head. When the folder is missing, the run makes it
    first (the pretraining stage, :func:`~.pretrain.ensure_pretrained`).

    A run with an n-gram score (or distillation) first fits it on the training split, in seconds
    (``ngram/fit.py``; distillation's soft targets on unlabelled reviews: ``training/distill.py``). The
    encoder's loss leaves the score out; validation, evaluation and prediction add it.

    Raises:
        UsageError: unusable device or output folder.
        CheckpointError, ConfigError: ``init_from`` is damaged, incomplete or does not fit the config.
        DataError: the dataset cannot be loaded, or the n-gram score's labels hold fewer than two classes.
        Interrupted: ``stop`` was set; the last completed epoch is saved to resume from.
        SentimentError: the loss became NaN or infinite.
    """
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, source=absolute_source(config.data.source)))
    callbacks = callbacks or TrainCallbacks()
    choices: list[auto.Choice] = []
    created = not Path(output).exists()
    try:
        if fit_to_data is not None and distributed.from_env().is_main:
            check_writable(Path(output))   # refuse an unusable folder before reading the data
            config, choices = auto.fit_to_data(config, fit_to_data, callbacks)
        elif fit_to_data is not None:   # other torchrun ranks read the same data and reach the same choices
            config, choices = auto.fit_to_data(config, fit_to_data, TrainCallbacks())
        return run_training(config, Path(output), callbacks, stop or StopFlag(), saved=None,
                            data_rules=[c.to_dict() for c in choices])
    except BaseException:
        if created:   # a run that stopped before writing anything leaves no empty folder behind
            _remove_if_empty(Path(output))
        raise


def _remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` if it exists and is empty (``rmdir`` refuses anything else)."""
    try:
        folder.rmdir()
    except OSError:
        pass


@dataclass(frozen=True)
class RunContext:
    """What a run is given and keeps from its first step to its last.

    Attributes:
        config: the whole run configuration.
        output: the checkpoint folder.
        cb: progress hooks (silent ones on torchrun ranks other than 0: rank 0 alone reports).
        stop: the stop flag, polled at every step.
        info: this process's rank and the world size (``distributed.py``).
        device: where this rank trains.
        data_rules: the default's choices for this data (``auto.py``), as ``metrics.json`` keeps them.
        report: whether the run ends by writing its curves and model card (rank 0).
    """

    config: Config
    output: Path
    cb: TrainCallbacks
    stop: StopFlag
    info: distributed.DistInfo
    device: torch.device
    data_rules: list[dict[str, Any]] = field(default_factory=list)
    report: bool = True

    @property
    def local_batch(self) -> int:
        """Reviews per step on this rank (``batch_size`` stays the global batch per step)."""
        return math.ceil(self.config.training.batch_size / self.info.world_size)


def run_training(config: Config, output: Path, callbacks: TrainCallbacks, stop: StopFlag, *,
                 saved: TrainerState | None, data_rules: list[dict[str, Any]] | None = None,
                 pretrained: Checkpoint | None = None, report: bool = True, refit_only: bool = False) -> TrainResult:
    """Run training from setup to the written report: a new run, or the saved one ``saved`` continued.

    :func:`train` and :func:`~.resume.resume` call it once they have the config (``resume``: the saved
    one, with its ``epochs`` and ``device`` overridden). ``data_rules`` are the default's choices made
    for this data (:func:`~.auto.fit_to_data`), kept in ``metrics.json``. ``pretrained``: the encoder to
    start from, already loaded (the refit's); ``None``: ``init_from``'s, made first when missing.
    ``report``: write the curves and the model card at the end (the refit's second run does not: its
    files are moved into place and the report is written then). ``refit_only``: ``saved`` is finished and
    its refit was stopped; continue the refit alone (:func:`~.refit.resume`).

    Rank 0 holds the output folder's lock (``lock.py``) from before the pretraining stage to the end, the
    refit (``refit.py``: with ``[training] refit``, a second run on every training row) included.

    Raises:
        FolderInUse: another process holds the output folder's lock (its pid named).
        UsageError, CheckpointError, ConfigError, DataError, Interrupted, SentimentError: as :func:`train`
            and :func:`~.resume.resume`; under torchrun, a failing collective as a ``SentimentError``
            naming the rank.
    """
    ctx = _context(config, output, callbacks, stop, data_rules or [], report)
    with output_lock(ctx.output, enabled=ctx.info.is_main):   # one writer: refuse a second train or --resume
        if pretrained is None and saved is None and config.training.init_from:
            # pretrain, or refuse an unfit folder, before the data loads
            pretrained, made = ensure_pretrained(config, ctx.cb, stop=stop)
            pretrained.metrics["made_by_this_run"] = made
            ctx.cb.on_stage(f"starting from the pretrained weights in {config.training.init_from}")
        try:
            with distributed.process_group(ctx.info, ctx.device):   # one group for both runs of a refit
                if refit_only:
                    return refit.resume(ctx)
                result = _train_loop(ctx, saved, pretrained)
                return refit.refit(ctx, result, pretrained) if refit.wanted(ctx, result) else result
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


def _train_loop(ctx: RunContext, saved: TrainerState | None, pretrained: Checkpoint | None) -> TrainResult:
    """The run itself: setup, epochs of steps (each epoch validated and saved), then the finish.

    Raises:
        DataError, CheckpointError, Interrupted, SentimentError: as :func:`train` and :func:`~.resume.resume`.
    """
    run = _setup(ctx, saved, pretrained)
    for epoch in range(run.state.epoch + 1, ctx.config.training.epochs + 1):
        totals = _train_epoch(run, epoch)
        validation = _validate(run)
        _end_of_epoch(run, epoch, totals, validation)
        if run.state.metrics["stopped_early"]:
            break
    return _finish(run)


# ----------------------------------------------------------------------------- setup

@dataclass
class _Data:
    """The run's reviews: the labelled splits, the tokenizer, and the token ids it trains and validates on.

    Attributes:
        train, validation: the labelled splits (``validation`` is empty with ``validation_fraction`` 0).
        tokenizer, tokenizer_json: the run's tokenizer, and its ``tokenizer.json`` text (saved with every epoch).
        train_ids: the training reviews' token ids; with distillation, the unlabelled reviews' follow
            (from ``num_labelled`` on).
        train_labels: ``(num_labelled,)`` int64 label ids of the training reviews.
        val_ids: the validation reviews' token ids, on rank 0 only (it validates; other ranks: empty).
        lengths: ``(len(train_ids),)`` token counts, for length-bucketed batches.
    """

    train: Split
    validation: Split
    tokenizer: Tokenizer
    tokenizer_json: str
    train_ids: list[list[int]]
    train_labels: torch.Tensor
    val_ids: list[list[int]]
    lengths: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.lengths = np.asarray([len(x) for x in self.train_ids])

    @property
    def num_labelled(self) -> int:
        """How many of ``train_ids`` are labelled reviews (the training split's)."""
        return len(self.train)

    @property
    def labels(self) -> tuple[str, ...]:
        """The label names, in label-id order."""
        return self.train.label_names

    @property
    def validated(self) -> bool:
        """Whether the run has a validation split at all (``validation_fraction`` > 0)."""
        return bool(len(self.validation))


@dataclass
class _Run:
    """What every epoch of one run works with, set up once by :func:`_setup`.

    Attributes:
        ctx, data: the run's context and its reviews.
        model: the classifier (saving and validation use it).
        net: ``model``, or its ``DistributedDataParallel`` wrapper under torchrun (forward and backward
            go through it).
        ngram: the fitted n-gram score, or ``None`` without one (``ngram/fit.py``).
        distillation: the soft targets and loss weights of distillation, or ``None`` without it.
        class_weights: ``(num_classes,)`` float32 loss weights by class (``[training] class_weight =
            "balanced"``, ``imbalance.py``), or ``None``.
        state: where the run stands (epochs done, best so far, ``metrics.json``).
        start, wall_before: when this process started the run (``time.perf_counter``), and the wall
            time of the run's earlier sessions (resumed runs), in seconds.
    """

    ctx: RunContext
    data: _Data
    model: SentimentClassifier
    net: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    ngram: FittedScore | None
    distillation: distill.Distillation | None
    class_weights: torch.Tensor | None
    state: LoopState
    start: float
    wall_before: float

    def wall_time(self) -> float:
        """Seconds the run has taken so far, earlier sessions included."""
        return self.wall_before + time.perf_counter() - self.start


def _setup(ctx: RunContext, saved: TrainerState | None, pretrained: Checkpoint | None) -> _Run:
    """Seed, then data and tokenizer, model, n-gram score, optimizer and schedule, and the loop state.

    A fresh run removes an older run's trainer state from ``ctx.output``; a resumed one (``saved``)
    restores weights, optimizer, scheduler, RNG states and progress instead of initialising them.

    Raises:
        DataError, CheckpointError: as :func:`train` and :func:`~.resume.resume`.
    """
    t = ctx.config.training
    start = time.perf_counter()
    seed_everything(t.seed)
    if saved is None and ctx.info.is_main:
        clear_trainer_state(ctx.output)   # a fresh run: an older run's state must not be resumed by mistake
    data = _load_data(ctx, saved, pretrained)
    check_fit_size(ctx.config, len(data.labels))   # before the model holds the n-gram score's weights
    model = _build_model(ctx, data, saved, pretrained)
    ngram, distillation = _fit_ngram(ctx, model, data)
    if distillation is not None:   # the unlabelled reviews follow the labelled ones
        data = dataclasses.replace(data, train_ids=data.train_ids + distillation.ids)
    class_weights = imbalance.class_weights(data.train.labels, len(data.labels), t.class_weight)
    optimizer, scheduler = _optimizer_and_schedule(ctx, model, data.num_labelled)
    if saved is not None:
        state = resumed_state(ctx, saved, optimizer, scheduler, data.validated)
    else:
        if ctx.info.enabled:
            torch.manual_seed(t.seed + ctx.info.rank)   # each rank its own dropout masks
        state = _fresh_state(ctx.config, model, data, pretrained, ngram, distillation,
                             imbalance.weights_report(class_weights, data.labels))
        if ctx.data_rules:
            state.metrics["data_rules"] = ctx.data_rules
    state.metrics.update({"device": str(ctx.device), "device_name": device_name(ctx.device),
                          "world_size": ctx.info.world_size, "versions": versions(), "config": ctx.config.to_dict()})
    net = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None) if ctx.info.enabled else model
    return _Run(ctx=ctx, data=data, model=model, net=net, optimizer=optimizer, scheduler=scheduler, ngram=ngram,
                distillation=distillation, class_weights=class_weights, state=state, start=start,
                wall_before=state.metrics.get("wall_time_seconds") or 0.0)


def _load_data(ctx: RunContext, saved: TrainerState | None, pretrained: Checkpoint | None) -> _Data:
    """Load the splits, take the run's tokenizer and tokenize them.

    The tokenizer is the saved run's, the pretrained folder's, or one built on the training split (by
    rank 0, sent to the others).

    Raises:
        DataError: the dataset cannot be loaded, or (resuming) it changed since the run started.
    """
    config, info = ctx.config, ctx.info
    ctx.cb.on_stage(f"loading {config.data.source}")
    with distributed.main_first(info):   # rank 0 fills the datasets cache, then the others read it
        train_split, val_split = load_train_validation(DataSpec.from_config(config))
    if saved is not None:
        tokenizer_json = saved.tokenizer_json
        check_same_data(saved, train_split, val_split, config.data.source)
    elif pretrained is not None:
        tokenizer_json = pretrained.tokenizer.to_str()
    else:
        ctx.cb.on_stage(f"building the tokenizer on {len(train_split):,} training reviews")
        built = save_tokenizer(build_tokenizer(train_split.texts, config.data, length=len(train_split))) \
            if info.is_main else ""
        tokenizer_json = distributed.broadcast_bytes(info, built.encode(), ctx.device).decode()
    tokenizer = tokenizer_from_str(tokenizer_json, ctx.output / STATE_DIR / TOKENIZER_FILE)
    ctx.cb.on_stage("tokenizing")
    return _Data(train=train_split, validation=val_split, tokenizer=tokenizer, tokenizer_json=tokenizer_json,
                 train_ids=encode_texts(tokenizer, train_split.texts, config.data),
                 val_ids=encode_texts(tokenizer, val_split.texts, config.data) if info.is_main else [],
                 train_labels=torch.tensor(train_split.labels, dtype=torch.long))


def _build_model(ctx: RunContext, data: _Data, saved: TrainerState | None,
                 pretrained: Checkpoint | None) -> SentimentClassifier:
    """The classifier, freshly initialised, then given the saved run's weights or the pretrained folder's.

    Raises:
        CheckpointError: the saved weights do not fit the model.
    """
    model = SentimentClassifier.from_config(ctx.config, data.tokenizer.get_vocab_size(), len(data.labels))
    if saved is not None:
        load_weights(model, saved.model, saved.tensors_path or state_path(ctx.output), against="state.json's config")
    elif pretrained is not None:
        model.load_state_dict({**model.state_dict(), **pretrained_weights(pretrained)})
    return model


def _fit_ngram(ctx: RunContext, model: SentimentClassifier,
               data: _Data) -> tuple[FittedScore | None, distill.Distillation | None]:
    """``(score, distillation)``: the n-gram score fitted on the training split (``ngram/fit.py``), and
    distillation's unlabelled reviews with their soft targets (``training/distill.py``); each ``None`` when
    the run has none.

    Raises:
        DataError: no or too few unlabelled reviews for distillation.
    """
    fitted = fit_ngram_score(ctx.config, model.ngram_score, len(data.labels), data.train_ids, data.train.labels,
                             data.val_ids, data.validation.labels, ctx.cb.on_stage)
    return fitted, distill.distillation(ctx.config, data.tokenizer, fitted, data.train.labels, ctx.cb)


def _optimizer_and_schedule(ctx: RunContext, model: SentimentClassifier,
                            num_labelled: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """Move the model to the device; AdamW over it, and the learning-rate schedule over every step of the run.

    An epoch trains on ``num_labelled`` reviews, plus ``distill_reviews`` unlabelled ones with distillation,
    sharded over the ranks in batches of :attr:`RunContext.local_batch`.
    """
    t = ctx.config.training
    model.to(ctx.device)
    optimizer = make_optimizer(model, ctx.config)
    per_epoch = num_labelled + t.distill_reviews   # distill_reviews is 0 without distillation
    steps_per_epoch = math.ceil(math.ceil(per_epoch / ctx.info.world_size) / ctx.local_batch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(t.schedule, t.warmup_fraction,
                                                                       steps_per_epoch * t.epochs))
    return optimizer, scheduler


def _fresh_state(config: Config, model: SentimentClassifier, data: _Data, pretrained: Checkpoint | None,
                 ngram: FittedScore | None, distillation: distill.Distillation | None,
                 class_weights: dict[str, float] | None) -> LoopState:
    """The loop state of a new run: no epoch yet, and the metrics that describe the run (with the n-gram
    score's report ``ngram_score``, distillation's ``distillation`` and the ``class_weights`` by label name,
    when the run has them)."""
    t, train_split, val_split = config.training, data.train, data.validation
    state = LoopState(metrics={
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "seed": t.seed,
        "num_parameters": model.num_parameters(),
        "data": {"source": config.data.source, "train_examples": len(train_split),
                 "validation_examples": len(val_split), "fingerprint": train_split.fingerprint(),
                 "labels": list(train_split.label_names),
                 "class_counts": {"train": train_split.class_counts(), "validation": val_split.class_counts()},
                 "validation_from": val_split.where if val_split.where != train_split.where else None},
        "config": config.to_dict(),
        "pretrained": None if pretrained is None else {
            "from": str(Path(t.init_from).resolve()), "epochs": len(pretrained.metrics.get("history", [])),
            "wall_time_seconds": pretrained.metrics.get("wall_time_seconds"),
            "made_by_this_run": pretrained.metrics.get("made_by_this_run", False),
            "reviews": pretrained.metrics.get("data", {}).get("reviews")},
        "history": [], "best_epoch": None, "best_validation_accuracy": None, "best_validation_f1_macro": None,
        "stopped_early": False, "wall_time_seconds": None,
    })
    if ngram is not None:
        state.metrics[REPORT_KEY] = ngram.report
    if distillation is not None:
        state.metrics["distillation"] = distillation.report
    if class_weights is not None:
        state.metrics["class_weights"] = class_weights
    return state


# ----------------------------------------------------------------------------- one epoch

@dataclass
class _EpochTotals:
    """One epoch's training figures, summed over all ranks: loss x examples, correct predictions (of
    labelled reviews), examples, labelled examples, and the epoch's seconds."""

    loss_sum: float
    correct: float
    seen: float
    labelled: float
    seconds: float


def _train_epoch(run: _Run, epoch: int) -> _EpochTotals:
    """One pass over this rank's shard of the training split (and, with distillation, of the epoch's
    draw of unlabelled reviews: :func:`~.distill.epoch_reviews`), in length-bucketed batches.

    Raises:
        Interrupted: a stop was requested (checked at every step, on every rank).
        SentimentError: the loss is not finite.
    """
    ctx, t = run.ctx, run.ctx.config.training
    run.net.train()
    reviews = distill.epoch_reviews(run.data.num_labelled, run.distillation, ctx.config, epoch)
    shard = reviews[distributed.shard(len(reviews), ctx.info, seed=t.seed, epoch=epoch)]
    ctx.cb.on_epoch_start(epoch, t.epochs, len(shard))
    epoch_start = time.perf_counter()
    loss_sum, correct, seen, labelled = 0.0, 0, 0, 0
    for local in make_batches(run.data.lengths[shard], ctx.local_batch, shuffle=True, seed=t.seed * 100_003 + epoch,
                              bucket=t.bucket_batches):
        batch = shard[local]
        loss, right, with_label = _step(run, epoch, batch)
        n = len(batch)
        loss_sum += loss * n
        correct += right
        seen += n
        labelled += with_label
        ctx.cb.on_step(n, loss_sum / seen, correct / max(labelled, 1), seen / (time.perf_counter() - epoch_start))
    loss_sum, correct, seen, labelled = distributed.all_reduce(ctx.info, [loss_sum, correct, seen, labelled],
                                                               ctx.device)
    return _EpochTotals(loss_sum, correct, seen, labelled, time.perf_counter() - epoch_start)


def _step(run: _Run, epoch: int, batch: np.ndarray) -> tuple[float, int, int]:
    """One optimizer step on the reviews ``batch`` indexes: forward, loss, backward (twice with
    adversarial training), clip and step.

    Returns:
        ``(loss, correct, labelled)``: the batch's mean cross-entropy (before the step; weighted by class
        with ``class_weight``; weighted, and against the teacher's probabilities for unlabelled reviews,
        with distillation), how many of its labelled reviews the model got right, and how many it has.

    Raises:
        Interrupted: a stop was requested; the step is dropped (the last completed epoch is on disk).
        SentimentError: the loss is not finite on some rank.
    """
    ctx, data, t, device = run.ctx, run.data, run.ctx.config.training, run.ctx.device
    input_ids, padding_mask = collate(data.train_ids, batch)
    if t.token_dropout > 0:
        input_ids = word_dropout(input_ids, padding_mask, t.token_dropout)
    index = torch.as_tensor(batch)
    loss_of = distill.loss_function(ctx.config, run.distillation, data.train_labels, index, device, run.class_weights)
    with_label = index < data.num_labelled
    target = data.train_labels[index[with_label]].to(device)
    input_ids, padding_mask = input_ids.to(device), padding_mask.to(device)
    # With adversarial training, a zero perturbation whose gradient is the embeddings' gradient
    delta = torch.zeros(*input_ids.shape, ctx.config.model.d_model, device=device, requires_grad=True) \
        if t.adversarial_epsilon > 0 else None
    offset = 0.0 if run.ngram is None else \
        run.ngram.residual_offset(index, data.num_labelled, ctx.config.model.ngram_scale, device)
    with autocast(device, t.autocast_bf16):
        # the encoder's logits (the n-gram score is left out; see ngram/fit.py), plus any residual offset
        logits = run.net(input_ids, padding_mask, delta, encoder_only=True).logits + offset
    loss = loss_of(logits)
    stop_now, diverged = distributed.all_reduce(
        ctx.info, [float(ctx.stop.requested), float(not torch.isfinite(loss))], device, op="max")
    if diverged:
        raise SentimentError(f"training diverged at epoch {epoch} (loss {loss.item()}); lower --lr")
    if stop_now:   # drop this step: the last completed epoch is on disk
        raise _interrupted(run, epoch)
    loss.backward()
    if delta is not None:   # second pass on the worst-case perturbed embeddings; gradients add up
        with autocast(device, t.autocast_bf16):
            adv_logits = run.net(input_ids, padding_mask, adversarial_perturbation(delta.grad, t.adversarial_epsilon),
                                 encoder_only=True).logits + offset
        loss_of(adv_logits).backward()
    optimizer_step(run.optimizer, run.scheduler, run.model.parameters(), t.grad_clip)
    right = int((logits.argmax(1)[with_label.to(device)] == target).sum())
    return loss.item(), right, int(with_label.sum())


def word_dropout(input_ids: torch.Tensor, padding_mask: torch.Tensor, rate: float) -> torch.Tensor:
    """Replace each real token by ``<unk>`` with probability ``rate`` (word dropout, Iyyer et al. 2015).

    No single word can then carry a review on its own, which discourages
    memorising rare words such as the names in one movie's reviews.

    Args:
        input_ids: ``(batch, seq_len)`` int64.
        padding_mask: ``(batch, seq_len)`` bool, ``True`` at padding (left as it is).
        rate: probability in [0, 1); draws from torch's global CPU generator.

    Returns:
        ``(batch, seq_len)`` int64, a new tensor.
    """
    dropped = (torch.rand(input_ids.shape) < rate) & ~padding_mask
    return input_ids.masked_fill(dropped, UNK_ID)


def adversarial_perturbation(grad: torch.Tensor, epsilon: float) -> torch.Tensor:
    """The worst-case perturbation of a review's token embeddings to first order (Miyato et al. 2017,
    "Adversarial Training Methods for Semi-Supervised Text Classification", eq. 2).

    ``r = epsilon * g / ||g||_2``, the norm taken over each review's whole ``(seq_len, d_model)``
    gradient, so each review moves by ``epsilon`` in total (padding has zero gradient and stays put).

    Args:
        grad: ``(batch, seq_len, d_model)`` gradient of the loss with respect to the token embeddings.
        epsilon: L2 norm of each review's perturbation, in embedding units (the pretrained and the
            random embeddings have about unit variance per dimension).

    Returns:
        ``(batch, seq_len, d_model)``, detached from the graph.
    """
    g = grad.detach().float()
    norm = g.flatten(1).norm(dim=1).clamp_min(1e-12)                     # (batch,)
    return epsilon * g / norm[:, None, None]


def _interrupted(run: _Run, epoch: int) -> Interrupted:
    """The error a stop during ``epoch`` raises: what is saved, and how to resume it."""
    stop, epochs, completed, output = run.ctx.stop, run.ctx.config.training.epochs, run.state.epoch, run.ctx.output
    if completed:
        msg = (f"interrupted by {stop.reason} during epoch {epoch} of {epochs}; epoch {completed} is saved; "
               f"resume with: sentiment train --resume {shlex.quote(str(output))}")
    else:
        msg = (f"interrupted by {stop.reason} during epoch {epoch} of {epochs}, before any epoch was saved; "
               "nothing to resume: start the run again")
    return Interrupted(msg, exit_code=stop.exit_code, resumable=bool(completed))


def _validate(run: _Run) -> tuple[float | None, float | None, float | None]:
    """``(loss, accuracy, macro F1)`` on the whole validation split (``evaluate_ids``' metrics), computed
    on rank 0 and shared with the others; ``(None, None, None)`` without a validation split
    (``validation_fraction`` 0)."""
    if not run.data.validated:   # every epoch then replaces the last
        return None, None, None
    ctx, t = run.ctx, run.ctx.config.training
    val = [0.0, 0.0, 0.0]
    if ctx.info.is_main:
        ctx.cb.on_validation_start(len(run.data.val_ids))
        m = evaluate_ids(run.model, run.data.val_ids, run.data.validation.labels, run.data.labels,
                         batch_size=t.eval_batch_size, device=ctx.device, bf16=t.autocast_bf16,
                         on_batch=ctx.cb.on_validation_step)
        val = [m["loss"], m["accuracy"], m["f1"]["macro"]]
    val_loss, val_acc, val_f1 = distributed.broadcast_floats(ctx.info, val, 3, ctx.device)
    return val_loss, val_acc, val_f1


# ----------------------------------------------------------------------------- end of epoch, end of run

def _end_of_epoch(run: _Run, epoch: int, totals: _EpochTotals,
                  validation: tuple[float | None, float | None, float | None]) -> None:
    """Record the epoch in the history, track the best epoch and patience, save, and report the epoch.

    Saving (rank 0): the checkpoint when the epoch improved (else only ``metrics.json``), then the
    trainer state of this epoch.
    """
    val_loss, val_acc, val_f1 = validation
    record = {"epoch": epoch, "train_loss": totals.loss_sum / totals.seen,
              "train_accuracy": totals.correct / max(totals.labelled, 1),
              "validation_loss": val_loss, "validation_accuracy": val_acc, "validation_f1_macro": val_f1,
              "train_examples_per_second": totals.seen / totals.seconds, "train_seconds": totals.seconds,
              "learning_rate": run.scheduler.get_last_lr()[0], "train_examples": int(totals.seen)}
    improved = _track_best(run, epoch, record, val_acc)
    rng = rng_states(run.ctx.info, run.ctx.device)   # a collective: every rank takes part
    if run.ctx.info.is_main:
        _save_epoch(run, epoch, improved, rng)
    distributed.barrier(run.ctx.info)
    run.ctx.cb.on_epoch_end(record)


def _track_best(run: _Run, epoch: int, record: dict[str, Any], val_acc: float | None) -> bool:
    """Add ``record`` to the history and update the best epoch, patience and wall time; whether the
    epoch improved on the best (always, without a validation split; see :func:`_improves`)."""
    t, state = run.ctx.config.training, run.state
    improved = _improves(state, val_acc, record["validation_loss"])
    record["best"] = improved
    state.epoch = epoch
    state.metrics["history"].append(record)
    if improved:
        state.best_accuracy, state.since_best = -1.0 if val_acc is None else val_acc, 0
        state.metrics["best_epoch"], state.metrics["best_validation_accuracy"] = epoch, val_acc
        state.metrics["best_validation_f1_macro"] = record["validation_f1_macro"]
    else:
        state.since_best += 1
    state.metrics["stopped_early"] = bool(t.patience and state.since_best >= t.patience)
    state.metrics["wall_time_seconds"] = run.wall_time()
    return improved


def _improves(state: LoopState, val_acc: float | None, val_loss: float | None) -> bool:
    """Whether an epoch beats the best so far: a higher validation accuracy, or the same accuracy with a
    lower validation loss (always, without a validation split).

    Accuracy ties are common on a hold-out of a few hundred rows. Dev evidence for the loss as their
    tie-break: ``docs/experiments.md``, "Validation ties".
    """
    if val_acc is None or val_acc != state.best_accuracy:
        return val_acc is None or val_acc > state.best_accuracy
    best = next((r for r in state.metrics["history"] if r["epoch"] == state.metrics.get("best_epoch")), None)
    return bool(best and val_loss is not None and best.get("validation_loss") is not None
                and val_loss < best["validation_loss"])


def _save_epoch(run: _Run, epoch: int, improved: bool, rng: dict[str, torch.Tensor]) -> None:
    """Write the checkpoint (when ``improved``; else only ``metrics.json``), then the epoch's trainer state."""
    ctx, data, state = run.ctx, run.data, run.state
    # Order matters: a crash between the two leaves the trainer state one epoch behind the best
    # checkpoint, and resuming re-runs that epoch identically; the other order could not.
    if improved:
        save_checkpoint(ctx.output, config=ctx.config, model=run.model, tokenizer_json=data.tokenizer_json,
                        metrics=state.metrics, labels=data.labels)
    else:
        write_json(ctx.output / METRICS_FILE, state.metrics)
    save_trainer_state(ctx.output, TrainerState(
        epoch=epoch, config=ctx.config, vocab_size=run.model.vocab_size, progress=state.progress(),
        model=run.model.state_dict(), optimizer=run.optimizer.state_dict(),
        scheduler=run.scheduler.state_dict(), rng=rng, tokenizer_json=data.tokenizer_json,
        world_size=ctx.info.world_size))


def _finish(run: _Run) -> TrainResult:
    """Fit the temperature (``calibrate.py``), write the final ``metrics.json`` (wall time), then the
    curves and the model card (rank 0, unless ``ctx.report`` is off)."""
    ctx = run.ctx
    if ctx.info.is_main:
        run.state.metrics["calibration"] = calibrate(ctx, run.model, run.data.val_ids, run.data.validation.labels)
    run.state.metrics["wall_time_seconds"] = run.wall_time()
    if ctx.info.is_main:
        write_json(ctx.output / METRICS_FILE, run.state.metrics)
    report = write_training_report(ctx.output) if ctx.info.is_main and ctx.report else None
    distributed.barrier(ctx.info)
    return TrainResult(ctx.output, run.state.metrics, ctx.info.is_main, report)

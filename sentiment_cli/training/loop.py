"""The training loop: tokenizer on train, AdamW over length-bucketed batches, best epoch kept.

Progress is reported through :class:`TrainCallbacks` (the CLI renders it
with rich); this module prints nothing itself. Every epoch ends by saving a
resumable trainer state (:func:`resume`); a :class:`~.interrupts.StopFlag`
stops the loop between steps; under ``torchrun`` the same loop runs
data-parallel (``distributed.py``).

The loop reads top to bottom, as nanoGPT's does: ``_setup`` (data,
tokenizer, model, the teacher and distillation's targets (``distill.py``), optimizer,
schedule, loop state), then for each epoch
``_train_epoch`` (one ``_step`` per batch), ``_validate`` and
``_end_of_epoch`` (history, best epoch, saving), and ``_finish``.
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
import torch.nn.functional as F
from safetensors.torch import load as st_load

from ..evaluation import calibration
from . import distill, distributed
from ..data.batching import collate, make_batches
from .callbacks import TrainCallbacks, TrainResult
from ..evaluation.card import write_training_report
from ..checkpoint import (METRICS_FILE, WEIGHTS_FILE, check_writable, load_weights, save_checkpoint, write_json,
                         write_temperature)
from ..config import Config
from ..data.splits import DataSpec, Split, load_pretraining_texts, load_train_validation
from ..errors import CheckpointError, DataError, Interrupted, SentimentError, UsageError
from ..evaluation.evaluate import evaluate_ids
from .interrupts import StopFlag
from ..model.classifier import SentimentClassifier
from .optim import lr_lambda, make_optimizer, optimizer_step
from ..inference.torch_backend import batched_logits
from .pretrain import ensure_pretrained, pretrained_weights
from ..runtime import autocast, device_name, native_bf16, resolve_device, seed_everything, versions
from ..data.sources import absolute_source
from ..data.tokenizer import UNK_ID, build_tokenizer, encode_texts, save_tokenizer, tokenizer_from_str
from .state import (STATE_DIR, TOKENIZER_FILE, TrainerState, clear_trainer_state, load_trainer_state,
                            save_trainer_state, state_path)


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


@dataclass
class LoopState:
    """Where a run stands after ``epoch`` completed epochs; saved in ``trainer_state/`` after each epoch.

    Attributes:
        epoch: completed epochs (0 before the first one ends).
        best_accuracy: best validation accuracy so far (-1 before the first epoch).
        since_best: epochs since the best one (compared with ``patience``).
        metrics: the ``metrics.json`` content (history, best epoch, wall time...).
    """

    epoch: int = 0
    best_accuracy: float = -1.0
    since_best: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)

    def progress(self) -> dict[str, Any]:
        """The JSON the trainer state keeps (it stores ``epoch`` itself)."""
        return {"best_accuracy": self.best_accuracy, "since_best": self.since_best, "metrics": self.metrics}

    @classmethod
    def from_saved(cls, saved: TrainerState, where: Path) -> "LoopState":
        """The loop state of a saved run.

        Raises:
            CheckpointError: the saved progress is malformed (the message names ``where``).
        """
        p = saved.progress
        try:
            state = cls(saved.epoch, float(p["best_accuracy"]), int(p["since_best"]), dict(p["metrics"]))
            ok = isinstance(state.metrics["history"], list) and len(state.metrics["history"]) == saved.epoch
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise CheckpointError(f"{where}: malformed progress (best_accuracy, since_best, "
                                  f"metrics with {saved.epoch} history entries expected)")
        return state


def train(config: Config, output: str | Path, callbacks: TrainCallbacks | None = None, *,
          stop: StopFlag | None = None) -> TrainResult:
    """Train a classifier and write the best epoch (by validation accuracy) to ``output``.

    After every epoch the best checkpoint is refreshed (if the epoch
    improved; every epoch when ``[data] validation_fraction`` is 0, so the
    last one is kept) and then the resumable state of that epoch is written to
    ``output/trainer_state/`` (see :func:`resume`). Under ``torchrun`` the run
    is data-parallel (see ``distributed.py``).

    Args:
        config: the whole run configuration.
        output: checkpoint folder; created if needed. A trainer state left
            there by an earlier run is removed first.
        callbacks: progress hooks (called on rank 0 only).
        stop: polled at every step; once set, the run stops before the next
            optimizer step (the epoch in progress is dropped).

    Returns:
        :class:`TrainResult` with the folder and its metrics.

    With ``[training] init_from`` set, the run starts from that
    ``sentiment pretrain`` folder: its tokenizer and weights, with a freshly
    initialised dense head. When the folder is missing, the run makes it
    first (the pretraining stage, :func:`~.pretrain.ensure_pretrained`).

    A run with a teacher first fits it on the training split, in seconds (``training/distill.py``:
    the model's logit term, and distillation's soft targets on unlabelled reviews). The encoder's
    loss leaves the logit term out; validation, evaluation and prediction add it.

    Raises:
        UsageError: unusable device or output folder.
        CheckpointError, ConfigError: ``init_from`` is damaged, incomplete or does not fit the config.
        DataError: the dataset cannot be loaded, or a teacher meets other than two classes.
        Interrupted: ``stop`` was set; the last completed epoch is saved to resume from.
        SentimentError: the loss became NaN or infinite.
    """
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, source=absolute_source(config.data.source)))
    return _run(config, Path(output), callbacks or TrainCallbacks(), stop or StopFlag(), saved=None)


def resume(directory: str | Path, callbacks: TrainCallbacks | None = None, *, epochs: int | None = None,
           device: str | None = None, stop: StopFlag | None = None) -> TrainResult:
    """Continue the run saved in ``directory/trainer_state/`` from its last completed epoch.

    The model, optimizer and scheduler state, RNG states, best-so-far and
    history are restored, and the saved config is used, so that on the same
    hardware (CPU, fixed seed) the resumed run ends with the same metrics and
    bit-identical weights as a run that was never stopped. Only ``epochs``
    (to train longer; a decaying schedule is then stretched to the new
    length from the resumed step on) and ``device`` may change. A run that
    already finished (or stopped early) is returned as it is.

    Raises:
        CheckpointError: nothing to resume, or the trainer state is damaged.
        UsageError: ``epochs`` is fewer than the epochs already completed.
        Interrupted, DataError, SentimentError: as :func:`train`.
    """
    directory = Path(directory)
    saved = load_trainer_state(directory)
    config = saved.config.override("training", epochs=epochs, device=device)
    cb = callbacks or TrainCallbacks()
    if config.training.epochs < saved.epoch:
        raise UsageError(f"--epochs {config.training.epochs}: the run in {directory} already completed "
                         f"{saved.epoch} epochs")
    state = LoopState.from_saved(saved, state_path(directory))
    if saved.epoch == config.training.epochs or state.metrics.get("stopped_early"):
        why = "stopped early" if state.metrics.get("stopped_early") else "finished"
        if distributed.from_env().is_main:
            cb.on_stage(f"nothing to resume: the run in {directory} {why} after epoch {saved.epoch} "
                        f"(pass --epochs N to train longer)")
        return TrainResult(directory, state.metrics, distributed.from_env().is_main)
    return _run(config, directory, cb, stop or StopFlag(), saved=saved)


def _run(config: Config, output: Path, cb: TrainCallbacks, stop: StopFlag, saved: TrainerState | None) -> TrainResult:
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
    pretrained = None
    if saved is None and t.init_from:   # pretrain, or refuse a folder that does not fit, before the data loads
        pretrained, made = ensure_pretrained(config, cb, stop=stop)
        pretrained.metrics["made_by_this_run"] = made
        cb.on_stage(f"starting from the pretrained weights in {t.init_from}")
    with distributed.process_group(info, device):
        try:
            return _train_loop(config, output, cb, stop, saved, pretrained, info, device)
        except RuntimeError as exc:   # e.g. a collective failing because another rank stopped on an error
            if not info.enabled:
                raise
            raise SentimentError(f"rank {info.rank}: {' '.join(str(exc).split())[:240]}") from exc


@dataclass
class _Run:
    """What every epoch of one run works with, set up once by :func:`_setup`.

    Attributes:
        net: ``model``, or its ``DistributedDataParallel`` wrapper under torchrun (forward and backward
            go through it; saving and validation use ``model``).
        train_ids, train_labels, lengths: the training split (token ids, ``(num_examples,)`` int64
            labels, token counts); with distillation, ``train_ids`` and ``lengths`` go on with the
            unlabelled reviews (``num_labelled`` onwards).
        num_labelled: how many of ``train_ids`` are labelled reviews.
        teacher: the fitted teacher, or ``None`` without one (``training/distill.py``).
        distillation: the soft targets and loss weights of distillation, or ``None`` without it.
        val_ids, val_labels: the validation split, on rank 0 only (other ranks: empty).
        validated: whether there is a validation split at all (``validation_fraction`` > 0).
        local_batch: reviews per step on this rank (``batch_size`` is the global batch).
        start, wall_before: when this process started the run (``time.perf_counter``), and the wall
            time of the run's earlier sessions (resumed runs), in seconds.
    """

    config: Config
    output: Path
    cb: TrainCallbacks
    stop: StopFlag
    info: distributed.DistInfo
    device: torch.device
    model: SentimentClassifier
    net: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    tokenizer_json: str
    labels: tuple[str, ...]
    train_ids: list[list[int]]
    train_labels: torch.Tensor
    lengths: np.ndarray
    num_labelled: int
    teacher: distill.Teacher | None
    distillation: distill.Distillation | None
    val_ids: list[list[int]]
    val_labels: list[int]
    validated: bool
    local_batch: int
    state: LoopState
    start: float
    wall_before: float


def _train_loop(config: Config, output: Path, cb: TrainCallbacks, stop: StopFlag, saved: TrainerState | None,
                pretrained, info: distributed.DistInfo, device: torch.device) -> TrainResult:
    """The run from setup to the written report: epochs of steps, each epoch validated and saved.

    Raises:
        DataError, CheckpointError, Interrupted, SentimentError: as :func:`train` and :func:`resume`.
    """
    run = _setup(config, output, cb, stop, saved, pretrained, info, device)
    for epoch in range(run.state.epoch + 1, config.training.epochs + 1):
        totals = _train_epoch(run, epoch)
        validation = _validate(run)
        _end_of_epoch(run, epoch, totals, validation)
        if run.state.metrics["stopped_early"]:
            break
    return _finish(run)


# ----------------------------------------------------------------------------- setup

def _setup(config: Config, output: Path, cb: TrainCallbacks, stop: StopFlag, saved: TrainerState | None,
           pretrained, info: distributed.DistInfo, device: torch.device) -> _Run:
    """Seed, load and tokenize the data, build the model, optimizer and schedule, and the loop state.

    A fresh run removes an older run's trainer state from ``output``; a resumed one (``saved``)
    restores weights, optimizer, scheduler, RNG states and progress instead of initialising them.
    """
    t = config.training
    start = time.perf_counter()
    seed_everything(t.seed)
    if saved is None and info.is_main:
        clear_trainer_state(output)   # a fresh run: an older run's state must not be resumed by mistake
    train_split, val_split, tokenizer_json = _data_and_tokenizer(config, output, cb, saved, pretrained, info, device)
    tokenizer = tokenizer_from_str(tokenizer_json, output / STATE_DIR / TOKENIZER_FILE)
    cb.on_stage("tokenizing")
    train_ids = encode_texts(tokenizer, train_split.texts, config.data)
    val_ids = encode_texts(tokenizer, val_split.texts, config.data) if info.is_main else []   # rank 0 validates
    train_labels = torch.tensor(train_split.labels, dtype=torch.long)

    distill.check_labels(config, len(train_split.label_names))
    model = SentimentClassifier.from_config(config, tokenizer.get_vocab_size(), len(train_split.label_names))
    if saved is not None:
        load_weights(model, saved.model, saved.tensors_path or state_path(output), against="state.json's config")
    elif pretrained is not None:
        model.load_state_dict({**model.state_dict(), **pretrained_weights(pretrained)})
    teacher = distill.fit_teacher(config, model, train_ids, train_split.labels, val_ids, val_split.labels, cb)
    distillation = distill.distillation(config, tokenizer, teacher, train_split.labels, cb)
    num_labelled = len(train_ids)
    if distillation is not None:
        train_ids = train_ids + distillation.ids
    model.to(device)
    optimizer = make_optimizer(model, config)
    local_batch = math.ceil(t.batch_size / info.world_size)   # batch_size stays the global batch per step
    per_epoch = num_labelled + t.distill_reviews   # distill_reviews is 0 without distillation
    steps_per_epoch = math.ceil(math.ceil(per_epoch / info.world_size) / local_batch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(t.schedule, t.warmup_fraction,
                                                                            steps_per_epoch * t.epochs))
    if saved is not None:
        state = _resumed_state(config, output, cb, saved, optimizer, scheduler, info, device, bool(len(val_split)))
    else:
        if info.enabled:
            torch.manual_seed(t.seed + info.rank)   # each rank its own dropout masks
        state = _fresh_state(config, model, train_split, val_split, pretrained)
        if teacher is not None:
            state.metrics["teacher"] = distill.teacher_report(teacher, distillation)
    state.metrics.update({"device": str(device), "device_name": device_name(device),
                          "world_size": info.world_size, "versions": versions(), "config": config.to_dict()})
    net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None) \
        if info.enabled else model
    return _Run(config=config, output=output, cb=cb, stop=stop, info=info, device=device, model=model, net=net,
                optimizer=optimizer, scheduler=scheduler, tokenizer_json=tokenizer_json,
                labels=train_split.label_names, train_ids=train_ids,
                train_labels=train_labels, lengths=np.asarray([len(x) for x in train_ids]),
                num_labelled=num_labelled, teacher=teacher, distillation=distillation, val_ids=val_ids,
                val_labels=val_split.labels, validated=bool(len(val_split)), local_batch=local_batch, state=state,
                start=start, wall_before=state.metrics.get("wall_time_seconds") or 0.0)


def _data_and_tokenizer(config: Config, output: Path, cb: TrainCallbacks, saved: TrainerState | None, pretrained,
                        info: distributed.DistInfo, device: torch.device) -> tuple[Split, Split, str]:
    """``(train, validation, tokenizer.json text)``: the saved run's tokenizer, the pretrained folder's,
    or one built on the training split (by rank 0, sent to the others).

    Raises:
        DataError: the dataset cannot be loaded, or (resuming) its size changed since the run started.
    """
    cb.on_stage(f"loading {config.data.source}")
    with distributed.main_first(info):   # rank 0 fills the datasets cache, then the others read it
        train_split, val_split = load_train_validation(DataSpec.from_config(config))
    if saved is not None:
        tokenizer_json = saved.tokenizer_json
        _check_same_data(saved, train_split, val_split, config.data.source)
    elif pretrained is not None:
        tokenizer_json = pretrained.tokenizer.to_str()
    else:
        cb.on_stage(f"building the tokenizer on {len(train_split):,} training reviews")
        built = save_tokenizer(build_tokenizer(train_split.texts, config.data, length=len(train_split))) \
            if info.is_main else ""
        tokenizer_json = distributed.broadcast_bytes(info, built.encode(), device).decode()
    return train_split, val_split, tokenizer_json


def _fresh_state(config: Config, model: SentimentClassifier, train_split: Split, val_split: Split,
                 pretrained) -> LoopState:
    """The loop state of a new run: no epoch yet, and the metrics that describe the run."""
    t = config.training
    return LoopState(metrics={
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
        "history": [], "best_epoch": None, "best_validation_accuracy": None,
        "stopped_early": False, "wall_time_seconds": None,
    })


def _resumed_state(config: Config, output: Path, cb: TrainCallbacks, saved: TrainerState, optimizer, scheduler,
                   info: distributed.DistInfo, device: torch.device, validated: bool) -> LoopState:
    """Restore the optimizer, scheduler and RNG states of a saved run; its loop state, with the resume noted.

    Raises:
        CheckpointError: the saved state does not fit the model, or is malformed.
    """
    where = state_path(output)
    _restore_optimizer(optimizer, scheduler, saved, where)
    state = LoopState.from_saved(saved, where)
    state.metrics.setdefault("resumed", []).append(
        {"after_epoch": state.epoch, "at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    note = _restore_rng(saved, info, device, where)
    best = (f"best so far: epoch {state.metrics['best_epoch']}, validation accuracy {state.best_accuracy:.2%}"
            if validated else "no validation split")
    cb.on_stage(f"resuming after epoch {state.epoch} of {config.training.epochs} ({best}){note}")
    return state


# ----------------------------------------------------------------------------- one epoch

@dataclass
class _EpochTotals:
    """One epoch's training figures, summed over all ranks: loss x examples, correct predictions (of
    labelled reviews), examples, labelled examples."""

    loss_sum: float
    correct: float
    seen: float
    labelled: float
    seconds: float


def _train_epoch(run: _Run, epoch: int) -> _EpochTotals:
    """One pass over this rank's shard of the training split (and, with distillation, of the epoch's
    draw of unlabelled reviews: :func:`_epoch_reviews`), in length-bucketed batches.

    Raises:
        Interrupted: a stop was requested (checked at every step, on every rank).
        SentimentError: the loss is not finite.
    """
    t = run.config.training
    run.net.train()
    reviews = distill.epoch_reviews(run.num_labelled, run.distillation, run.config, epoch)
    shard = reviews[distributed.shard(len(reviews), run.info, seed=t.seed, epoch=epoch)]
    run.cb.on_epoch_start(epoch, t.epochs, len(shard))
    epoch_start = time.perf_counter()
    loss_sum, correct, seen, labelled = 0.0, 0, 0, 0
    for local in make_batches(run.lengths[shard], run.local_batch, shuffle=True, seed=t.seed * 100_003 + epoch,
                              bucket=t.bucket_batches):
        batch = shard[local]
        loss, right, with_label = _step(run, epoch, batch)
        n = len(batch)
        loss_sum += loss * n
        correct += right
        seen += n
        labelled += with_label
        run.cb.on_step(n, loss_sum / seen, correct / max(labelled, 1), seen / (time.perf_counter() - epoch_start))
    loss_sum, correct, seen, labelled = distributed.all_reduce(run.info, [loss_sum, correct, seen, labelled],
                                                               run.device)
    return _EpochTotals(loss_sum, correct, seen, labelled, time.perf_counter() - epoch_start)


def _step(run: _Run, epoch: int, batch: np.ndarray) -> tuple[float, int, int]:
    """One optimizer step on the reviews ``batch`` indexes: forward, loss, backward (twice with
    adversarial training), clip and step.

    Returns:
        ``(loss, correct, labelled)``: the batch's mean cross-entropy (before the step; weighted, and
        against the teacher's probabilities for unlabelled reviews, with distillation), how many of
        its labelled reviews the model got right, and how many it has.

    Raises:
        Interrupted: a stop was requested; the step is dropped (the last completed epoch is on disk).
        SentimentError: the loss is not finite on some rank.
    """
    t, device = run.config.training, run.device
    input_ids, padding_mask = collate(run.train_ids, batch)
    if t.token_dropout > 0:
        input_ids = word_dropout(input_ids, padding_mask, t.token_dropout)
    index = torch.as_tensor(batch)
    loss_of = distill.loss_function(run.config, run.distillation, run.train_labels, index, device)
    with_label = index < run.num_labelled
    target = run.train_labels[index[with_label]].to(device)
    input_ids, padding_mask = input_ids.to(device), padding_mask.to(device)
    # With adversarial training, a zero perturbation whose gradient is the embeddings' gradient
    delta = torch.zeros(*input_ids.shape, run.config.model.d_model, device=device, requires_grad=True) \
        if t.adversarial_epsilon > 0 else None
    offset = distill.residual_offset(run.teacher, run.config, index, run.num_labelled, device)
    with autocast(device, t.autocast_bf16):
        # the encoder's logits (the logit term is left out; see training/distill.py), plus any residual offset
        logits = run.net(input_ids, padding_mask, delta, encoder_only=True).logits + offset
    loss = loss_of(logits)
    stop_now, diverged = distributed.all_reduce(
        run.info, [float(run.stop.requested), float(not torch.isfinite(loss))], device, op="max")
    if diverged:
        raise SentimentError(f"training diverged at epoch {epoch} (loss {loss.item()}); lower --lr")
    if stop_now:   # drop this step: the last completed epoch is on disk
        raise _interrupted(run.stop, epoch, t.epochs, run.state.epoch, run.output)
    loss.backward()
    if delta is not None:   # second pass on the worst-case perturbed embeddings; gradients add up
        with autocast(device, t.autocast_bf16):
            adv_logits = run.net(input_ids, padding_mask, adversarial_perturbation(delta.grad, t.adversarial_epsilon),
                                 encoder_only=True).logits + offset
        loss_of(adv_logits).backward()
    optimizer_step(run.optimizer, run.scheduler, run.model.parameters(), t.grad_clip)
    right = int((logits.argmax(1)[with_label.to(device)] == target).sum())
    return loss.item(), right, int(with_label.sum())


def _validate(run: _Run) -> tuple[float | None, float | None]:
    """``(loss, accuracy)`` on the whole validation split, computed on rank 0 and shared with the
    others; ``(None, None)`` without a validation split (``validation_fraction`` 0)."""
    if not run.validated:   # every epoch then replaces the last
        return None, None
    t = run.config.training
    val = [0.0, 0.0]
    if run.info.is_main:
        run.cb.on_validation_start(len(run.val_ids))
        m = evaluate_ids(run.model, run.val_ids, run.val_labels, run.labels, batch_size=t.eval_batch_size,
                         device=run.device, bf16=t.autocast_bf16, on_batch=run.cb.on_validation_step)
        val = [m["loss"], m["accuracy"]]
    val_loss, val_acc = distributed.broadcast_floats(run.info, val, 2, run.device)
    return val_loss, val_acc


# ----------------------------------------------------------------------------- end of epoch, end of run

def _end_of_epoch(run: _Run, epoch: int, totals: _EpochTotals, validation: tuple[float | None, float | None]) -> None:
    """Record the epoch in the history, track the best epoch and patience, save, and report the epoch.

    Saving (rank 0): the checkpoint when the epoch improved (else only ``metrics.json``), then the
    trainer state of this epoch.
    """
    t, state = run.config.training, run.state
    val_loss, val_acc = validation
    record = {"epoch": epoch, "train_loss": totals.loss_sum / totals.seen,
              "train_accuracy": totals.correct / max(totals.labelled, 1),
              "validation_loss": val_loss, "validation_accuracy": val_acc,
              "train_examples_per_second": totals.seen / totals.seconds, "train_seconds": totals.seconds,
              "learning_rate": run.scheduler.get_last_lr()[0], "train_examples": int(totals.seen)}
    improved = val_acc is None or val_acc > state.best_accuracy
    record["best"] = improved
    state.epoch = epoch
    state.metrics["history"].append(record)
    if improved:
        state.best_accuracy, state.since_best = -1.0 if val_acc is None else val_acc, 0
        state.metrics["best_epoch"], state.metrics["best_validation_accuracy"] = epoch, val_acc
    else:
        state.since_best += 1
    state.metrics["stopped_early"] = bool(t.patience and state.since_best >= t.patience)
    state.metrics["wall_time_seconds"] = run.wall_before + time.perf_counter() - run.start
    rng = _rng_states(run.info, run.device)   # a collective: every rank takes part
    if run.info.is_main:
        # Order matters: a crash between the two leaves the trainer state one epoch behind the best
        # checkpoint, and resuming re-runs that epoch identically; the other order could not.
        if improved:
            save_checkpoint(run.output, config=run.config, model=run.model, tokenizer_json=run.tokenizer_json,
                            metrics=state.metrics, labels=run.labels)
        else:
            write_json(run.output / METRICS_FILE, state.metrics)
        save_trainer_state(run.output, TrainerState(
            epoch=epoch, config=run.config, vocab_size=run.model.vocab_size, progress=state.progress(),
            model=run.model.state_dict(), optimizer=run.optimizer.state_dict(),
            scheduler=run.scheduler.state_dict(), rng=rng, tokenizer_json=run.tokenizer_json,
            world_size=run.info.world_size))
    distributed.barrier(run.info)
    run.cb.on_epoch_end(record)


def _finish(run: _Run) -> TrainResult:
    """Fit the temperature, write the final ``metrics.json`` (wall time), then the curves and the model
    card (rank 0)."""
    if run.info.is_main:
        run.state.metrics["calibration"] = _calibrate(run)
    run.state.metrics["wall_time_seconds"] = run.wall_before + time.perf_counter() - run.start
    if run.info.is_main:
        write_json(run.output / METRICS_FILE, run.state.metrics)
    report = write_training_report(run.output) if run.info.is_main else None
    distributed.barrier(run.info)
    return TrainResult(run.output, run.state.metrics, run.info.is_main, report)


def _calibrate(run: _Run) -> dict[str, Any]:
    """Fit the temperature on the kept epoch's validation logits and store it in ``config.json`` (rank 0).

    Temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural Networks", section 4.2): the
    ``T`` minimising the validation NLL of ``softmax(logits / T)``. The folder holds the best epoch's
    weights, not necessarily the last epoch's in ``run.model``, so they are read back from disk. It runs
    once, after the last epoch, so it changes nothing a resumed run replays. Without a validation split
    the temperature is 1.0.

    Returns:
        ``metrics.json``'s ``calibration``: ``temperature``, and with validation ``bins`` and the
        validation ``ece`` / ``nll`` after and ``ece_uncalibrated`` / ``nll_uncalibrated`` before it.
    """
    if not run.validated or not run.val_ids:
        write_temperature(run.output, 1.0)
        return {"temperature": 1.0}
    t = run.config.training
    run.cb.on_stage("fitting the temperature on the validation split")
    best = SentimentClassifier.from_config(run.config, run.model.vocab_size, len(run.labels))
    weights = run.output / WEIGHTS_FILE
    load_weights(best, st_load(weights.read_bytes()), weights)
    logits = batched_logits(best.to(run.device), run.val_ids, batch_size=t.eval_batch_size, device=run.device,
                            bf16=t.autocast_bf16).numpy()
    labels = list(run.val_labels)
    temperature = calibration.fit_temperature(logits, labels)
    write_temperature(run.output, temperature)
    return {"temperature": temperature, "bins": calibration.ECE_BINS,
            "ece": calibration.expected_calibration_error(calibration.softmax(logits, temperature), labels),
            "ece_uncalibrated": calibration.expected_calibration_error(calibration.softmax(logits), labels),
            "nll": calibration.nll(logits, labels, temperature), "nll_uncalibrated": calibration.nll(logits, labels)}


def _interrupted(stop: StopFlag, epoch: int, epochs: int, completed: int, output: Path) -> Interrupted:
    if completed:
        msg = (f"interrupted by {stop.reason} during epoch {epoch} of {epochs}; epoch {completed} is saved; "
               f"resume with: sentiment train --resume {shlex.quote(str(output))}")
    else:
        msg = (f"interrupted by {stop.reason} during epoch {epoch} of {epochs}, before any epoch was saved; "
               "nothing to resume: start the run again")
    return Interrupted(msg, exit_code=stop.exit_code, resumable=bool(completed))


def _check_same_data(saved: TrainerState, train_split, val_split, source: str) -> None:
    data = saved.progress.get("metrics", {}).get("data", {})
    want = (data.get("train_examples"), data.get("validation_examples"))
    if want != (len(train_split), len(val_split)):
        raise DataError(f"{source}: now {len(train_split)} training / {len(val_split)} validation reviews, "
                        f"but the saved run had {want[0]} / {want[1]}; the data changed since the run started")
    labels = tuple(data.get("labels") or ("negative", "positive"))   # runs saved before label sets: IMDB's
    if labels != train_split.label_names:
        raise DataError(f"{source}: now labels {', '.join(train_split.label_names)}, but the saved run had "
                        f"{', '.join(labels)}; the data changed since the run started")


def _restore_optimizer(optimizer: torch.optim.Optimizer, scheduler, saved: TrainerState, where: Path) -> None:
    """Load the saved optimizer and scheduler state after checking it fits the model's parameters.

    Raises:
        CheckpointError: the state does not match (group sizes, tensor shapes or dtypes, non-finite values).
    """
    try:
        optimizer.load_state_dict(saved.optimizer)
        scheduler.load_state_dict(saved.scheduler)
    except (ValueError, KeyError, TypeError, RuntimeError, AttributeError) as exc:
        raise CheckpointError(f"{where}: optimizer state does not fit the model "
                              f"({' '.join(str(exc).split())[:160]})") from None
    for group in optimizer.param_groups:
        for p in group["params"]:
            for key, value in optimizer.state.get(p, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and (
                        value.shape != p.shape or value.dtype != p.dtype or not bool(torch.isfinite(value).all())):
                    raise CheckpointError(f"{where}: optimizer tensor {key} is {value.dtype} {tuple(value.shape)} "
                                          f"(or not finite) for a parameter of {p.dtype} {tuple(p.shape)}")


def _rng_states(info: distributed.DistInfo, device: torch.device) -> dict[str, torch.Tensor]:
    """Every rank's torch RNG states (CPU, and CUDA on GPUs), keyed ``rank{r}.cpu`` / ``rank{r}.cuda``."""
    out = {f"rank{r}.cpu": s for r, s in enumerate(distributed.all_gather_tensor(info, torch.get_rng_state(), device))}
    if device.type == "cuda":
        cuda = distributed.all_gather_tensor(info, torch.cuda.get_rng_state(device), device)
        out.update({f"rank{r}.cuda": s for r, s in enumerate(cuda)})
    return out


def _restore_rng(saved: TrainerState, info: distributed.DistInfo, device: torch.device, where: Path) -> str:
    """Restore this rank's saved RNG states; returns a note when they cannot be (world size changed)."""
    t = saved.config.training
    cpu, cuda = saved.rng.get(f"rank{info.rank}.cpu"), saved.rng.get(f"rank{info.rank}.cuda")
    if saved.world_size != info.world_size or cpu is None:
        torch.manual_seed(t.seed + 1_000 * saved.epoch + info.rank)
        return (f"; {saved.world_size} process(es) saved it, {info.world_size} resume it: data shards and "
                "dropout masks change, so the result will differ from an uninterrupted run")
    try:
        torch.set_rng_state(cpu)
        if device.type == "cuda":
            if cuda is not None:
                torch.cuda.set_rng_state(cuda, device)
            else:
                torch.cuda.manual_seed(t.seed + 1_000 * saved.epoch + info.rank)
                return "; saved on CPU, resumed on CUDA: dropout masks will differ from an uninterrupted run"
    except (RuntimeError, TypeError) as exc:
        raise CheckpointError(f"{where}: unusable RNG state ({str(exc)[:120]})") from None
    return ""



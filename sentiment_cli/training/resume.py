"""Restoring a run from its ``trainer_state/``: everything that continues a saved run.

Every epoch of a run ends by saving a trainer state (``state.py`` is its file
format): the model, optimizer and scheduler state, every rank's RNG states
(:func:`rng_states`) and the loop's progress (:class:`~.state.LoopState`).
The orchestrator's ``resume`` (``run.py``) loads it (:func:`saved_run`) and
runs the fit again with the saved config; the fit's setup builds the run as a
new one would, in the same order, and then, instead of initialising it, checks
that the data is the saved run's (:func:`check_same_data`), loads the saved
weights and calls :func:`resumed_state` (optimizer and scheduler, progress,
RNG states). On the same hardware the resumed run then ends bit-identical to
a run that was never stopped.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import torch

from . import distributed
from ..config import Config
from ..data.labels import LABELS
from ..data.splits import Split
from ..errors import CheckpointError, DataError, UsageError
from .context import RunContext
from .state import LoopState, TrainerState, load_trainer_state, state_path


def saved_run(directory: Path, epochs: int | None, device: str | None) -> tuple[TrainerState, Config, LoopState]:
    """``(saved, config, state)``: the trainer state saved in ``directory``, its config with ``epochs`` and
    ``device`` overridden (``None``: kept), and its loop state.

    Raises:
        CheckpointError: nothing to resume, or the trainer state is damaged.
        UsageError: ``epochs`` is fewer than the epochs already completed.
    """
    saved = load_trainer_state(directory)
    config = saved.config.override("training", epochs=epochs, device=device)
    if config.training.epochs < saved.epoch:
        raise UsageError(f"--epochs {config.training.epochs}: the run in {directory} already completed "
                         f"{saved.epoch} epochs")
    return saved, config, _saved_loop_state(saved, state_path(directory))


def check_same_data(saved: TrainerState, train_split: Split, val_split: Split, source: str, augmented: int = 0) -> None:
    """Refuse to resume on other data than the saved run's (split sizes and label set). ``augmented``: the
    rule-negated sentence pairs at the end of ``train_split`` (not the user's rows; states saved before
    2026-12-07 counted them).

    Raises:
        DataError: the training or validation split's size, or the label set, differs from the saved
            run's (the message names ``source``).
    """
    data = saved.progress.get("metrics", {}).get("data", {})
    want = (data.get("train_examples"), data.get("validation_examples"))
    rows = len(train_split) - 2 * augmented
    if want not in ((rows, len(val_split)), (len(train_split), len(val_split))):
        raise DataError(f"{source}: now {rows} training / {len(val_split)} validation texts, "
                        f"but the saved run had {want[0]} / {want[1]}; the data changed since the run started")
    labels = tuple(data.get("labels") or LABELS)   # runs saved before label sets: IMDB's
    if labels != train_split.label_names:
        raise DataError(f"{source}: now labels {', '.join(train_split.label_names)}, but the saved run had "
                        f"{', '.join(labels)}; the data changed since the run started")


def resumed_state(ctx: RunContext, saved: TrainerState, optimizer: torch.optim.Optimizer,
                  scheduler: torch.optim.lr_scheduler.LRScheduler, validated: bool) -> LoopState:
    """Restore the optimizer, scheduler and RNG states of a saved run; its loop state, with the resume noted.

    Called once the model (with the saved weights), optimizer and scheduler are built, last in the
    setup: the RNG states it restores are the ones the next epoch draws from.

    Args:
        ctx: the run's context (its output folder, ranks, device and progress hooks).
        saved: the loaded trainer state.
        optimizer, scheduler: built as for a new run; their state is replaced by the saved one.
        validated: whether the run has a validation split (for the message).

    Raises:
        CheckpointError: the saved state does not fit the model, or is malformed.
    """
    where = state_path(ctx.output)
    _restore_optimizer(optimizer, scheduler, saved, where)
    state = _saved_loop_state(saved, where)
    state.metrics.setdefault("resumed", []).append(
        {"after_epoch": state.epoch, "at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    note = _restore_rng(saved, ctx.info, ctx.device, where)
    best = (f"best so far: epoch {state.metrics['best_epoch']}, validation accuracy {state.best_accuracy:.2%}"
            if validated else "no validation split")
    ctx.cb.on_stage(f"resuming after epoch {state.epoch} of {ctx.config.training.epochs} ({best}){note}")
    return state


def _saved_loop_state(saved: TrainerState, where: Path) -> LoopState:
    """The loop state of a saved run.

    Raises:
        CheckpointError: the saved progress is malformed (the message names ``where``).
    """
    p = saved.progress
    try:
        state = LoopState(saved.epoch, float(p["best_accuracy"]), int(p["since_best"]), dict(p["metrics"]))
        ok = isinstance(state.metrics["history"], list) and len(state.metrics["history"]) == saved.epoch
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise CheckpointError(f"{where}: malformed progress (best_accuracy, since_best, "
                              f"metrics with {saved.epoch} history entries expected)")
    return state


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


def rng_states(info: distributed.DistInfo, device: torch.device) -> dict[str, torch.Tensor]:
    """Every rank's torch RNG states (CPU, and CUDA on GPUs), keyed ``rank{r}.cpu`` / ``rank{r}.cuda``.

    A collective under torchrun: every rank must call it. The values are ``uint8`` tensors, as
    ``torch.get_rng_state`` returns them; the trainer state saves them for :func:`resumed_state`.
    """
    out = {f"rank{r}.cpu": s for r, s in enumerate(distributed.all_gather_tensor(info, torch.get_rng_state(), device))}
    if device.type == "cuda":
        cuda = distributed.all_gather_tensor(info, torch.cuda.get_rng_state(device), device)
        out.update({f"rank{r}.cuda": s for r, s in enumerate(cuda)})
    return out


def _restore_rng(saved: TrainerState, info: distributed.DistInfo, device: torch.device, where: Path) -> str:
    """Restore this rank's saved RNG states; returns a note when they cannot be (world size changed).

    Raises:
        CheckpointError: a saved state torch cannot use.
    """
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

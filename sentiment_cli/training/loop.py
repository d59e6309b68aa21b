"""The epoch loop: AdamW over length-bucketed batches, each epoch validated, the best epoch kept.

Progress is reported through :class:`~.callbacks.TrainCallbacks` (the CLI renders it with rich); this
module prints nothing itself. Every epoch ends by saving a resumable trainer state (``resume.py``
restores it), with the kept (best) epoch's weights in it; the loop writes nothing else: the best epoch's
checkpoint record is kept in memory (``Fit.kept``) for the orchestrator to write once. A
:class:`~.interrupts.StopFlag` stops the loop between steps, and a :class:`~.budget.StepLimit` (the
context's ``steps``: a search trial's) ends it at a number of steps; under ``torchrun`` the same loop runs
data-parallel (``distributed.py``).

It reads top to bottom, as nanoGPT's does: the orchestrator sets the run up (``setup.py``), then :func:`run_epochs`
for each epoch ``_train_epoch`` (one ``_step`` per batch), ``_validate``, ``_end_of_epoch`` (history, best epoch
and patience, saving). What follows the last epoch (the temperature, the final ``metrics.json``, the
report) is the orchestrator's (``run.py``).
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import distill, distributed
from ..checkpoint import CheckpointRecord
from ..data.batching import collate, make_batches
from ..data.tokenizer import UNK_ID
from ..errors import Interrupted, SentimentError
from ..evaluation.evaluate import evaluate_ids
from ..runtime import autocast, free_threads, pinned_threads
from .optim import lr_lambda, optimizer_step
from .resume import rng_states
from .setup import Fit
from .state import LoopState, TrainerState, save_trainer_state

__all__ = ["adversarial_perturbation", "run_epochs", "word_dropout"]


def run_epochs(run: Fit) -> Fit:
    """Train the epochs of a run set up by :func:`~.setup.setup`, each validated and saved (its trainer state).

    Returns:
        ``run`` after its last epoch (its ``state`` holds ``metrics.json``, its ``kept`` the best epoch's record;
        the output folder holds the last epoch's trainer state, with the kept epoch's weights).

    Raises:
        Interrupted, SentimentError: as :func:`~.run.train` and :func:`~.run.resume` (``run.kept`` holds the best
            epoch so far).
    """
    ctx = run.ctx
    if ctx.config.training.epochs == 0:
        _ngram_alone(run)
        return run
    for epoch in range(run.state.epoch + 1, ctx.config.training.epochs + 1):
        try:
            totals = _train_epoch(run, epoch)
        except Interrupted:
            if not _budget_ends(run):
                raise
            run.state.metrics["ended_by_budget"] = {"epoch": epoch, "steps": run.scheduler.last_epoch}
            break   # the budget, not a signal: the best completed epoch is kept
        validation = _validate(run)
        _end_of_epoch(run, epoch, totals, validation)
        if run.state.metrics["stopped_early"] or _steps_spent(run):
            break
    return run


# ----------------------------------------------------------------------------- threads and a step budget

THREADS_EVERY = 100   # steps between two checks of the cores other processes leave free


def _fit_threads(run: Fit, first: bool) -> None:
    """On a CPU, one process (not torchrun), ``[training] threads = 0``: ``OMP_NUM_THREADS`` where the user set
    it, else as many threads as the cores other processes leave free (:func:`~sentiment_cli.runtime.free_threads`;
    this process counted as one runnable thread at the start, then as its threads); a set ``threads`` is taken as
    it is."""
    t, ctx = run.ctx.config.training, run.ctx
    if ctx.device.type != "cpu" or ctx.info.enabled:
        return
    wanted = t.threads or pinned_threads() or free_threads(1.0 if first else torch.get_num_threads())
    if wanted != torch.get_num_threads():
        torch.set_num_threads(wanted)


def _budget_ends(run: Fit) -> bool:
    """Whether a stop ends the run as finished rather than interrupted: the stop flag is a time budget's (a search
    trial's, not a signal), one process, and an epoch is complete to keep."""
    return run.ctx.stop.by_budget and run.state.epoch >= 1 and not run.ctx.info.enabled


def _step_cap(run: Fit) -> int | None:
    """The run's step limit (``ctx.steps``, sized by a search trial), or ``None``: its own schedule."""
    return None if run.ctx.steps is None else run.ctx.steps.steps


def _steps_spent(run: Fit) -> bool:
    """Whether the run's step limit is spent."""
    cap = _step_cap(run)
    return cap is not None and run.scheduler.last_epoch >= cap


def _follow_step_budget(run: Fit) -> None:
    """Fit the learning-rate schedule to the run's step limit when it was set or changed: the run's own
    schedule (warmup, then ``schedule``'s decay; ``constant`` decays linearly) over that many steps, so
    the rate reaches zero at the last step whatever the budget allows (budgeted training: Li, Yumer & Ramanan,
    "Budgeted Training: Rethinking Deep Neural Network Training Under Resource Constraints", ICLR 2020)."""
    cap = _step_cap(run)
    if cap is None or cap == run.step_budget:
        return
    t = run.ctx.config.training
    run.step_budget = cap
    shape = lr_lambda("linear" if t.schedule == "constant" else t.schedule, t.warmup_fraction, cap)
    run.scheduler.lr_lambdas = [shape] * len(run.optimizer.param_groups)
    step = run.scheduler.last_epoch
    for group, base in zip(run.optimizer.param_groups, run.scheduler.base_lrs):
        group["lr"] = base * shape(step)


def _ngram_alone(run: Fit) -> None:
    """``[training] epochs = 0``: no encoder epoch. The dense head is zeroed, so the logits are the n-gram score's
    alone (its token shares exact in every explanation; the encoder's are 0), then validated and kept as epoch 0
    (no trainer state: there is nothing to resume)."""
    ctx = run.ctx
    with torch.no_grad():
        run.model.head.weight.zero_()
        run.model.head.bias.zero_()
    val_loss, val_acc, val_f1 = _validate(run)
    record = {"epoch": 0, "train_loss": None, "train_accuracy": None, "validation_loss": val_loss,
              "validation_accuracy": val_acc, "validation_f1_macro": val_f1, "train_seconds": 0.0,
              "train_examples": 0, "ngram_score_alone": True}
    _track_best(run, 0, record, val_f1 if run.data.train.multi_label else val_acc)   # the first record: the best
    if ctx.info.is_main:
        _keep(run)


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


def _train_epoch(run: Fit, epoch: int) -> _EpochTotals:
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
    batches = make_batches(run.data.lengths[shard], ctx.local_batch, shuffle=True, seed=t.seed * 100_003 + epoch,
                           bucket=t.bucket_batches)
    for number, local in enumerate(batches):
        if number % THREADS_EVERY == 0:
            _fit_threads(run, first=epoch == 1 and number == 0)
        _follow_step_budget(run)
        if _steps_spent(run):   # the budget's last step: the epoch ends here, validated and saved
            break
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
    return _EpochTotals(loss_sum, correct, seen, labelled, max(time.perf_counter() - epoch_start, 1e-9))


def _step(run: Fit, epoch: int, batch: np.ndarray) -> tuple[float, int, int]:
    """One optimizer step on the reviews ``batch`` indexes: forward, loss, backward (twice with
    adversarial training), clip and step.

    Returns:
        ``(loss, correct, labelled)``: the batch's mean cross-entropy (before the step; weighted by class
        with ``class_weight``; weighted, and against the teacher's probabilities for unlabelled reviews,
        with distillation), how many of its labelled reviews the model got right (several labels per text:
        whose most probable label is one of theirs), and how many it has.

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
    adversarial = t.adversarial_epsilon > 0 and (
        t.adversarial_max_length == 0 or input_ids.shape[1] <= t.adversarial_max_length)
    delta = torch.zeros(*input_ids.shape, ctx.config.model.d_model, device=device, requires_grad=True) \
        if adversarial else None
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
    if target.dim() == 2:   # several labels per text: right when the most probable label is one of the text's
        top = logits[with_label.to(device)].argmax(1, keepdim=True)   # (its thresholds come after training)
        right = int(target.gather(1, top).sum())
    else:
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


def _interrupted(run: Fit, epoch: int) -> Interrupted:
    """The error a stop during ``epoch`` raises: what is saved, and how to resume it."""
    stop, epochs, completed, output = run.ctx.stop, run.ctx.config.training.epochs, run.state.epoch, run.ctx.output
    if completed:
        msg = (f"interrupted by {stop.reason} during epoch {epoch} of {epochs}; epoch {completed} is saved; "
               f"resume with: sentiment train --resume {shlex.quote(str(output))}")
    else:
        msg = (f"interrupted by {stop.reason} during epoch {epoch} of {epochs}, before any epoch was saved; "
               "nothing to resume: start the run again")
    return Interrupted(msg, exit_code=stop.exit_code, resumable=bool(completed))


def _validate(run: Fit) -> tuple[float | None, float | None, float | None]:
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


# ----------------------------------------------------------------------------- end of epoch

def _end_of_epoch(run: Fit, epoch: int, totals: _EpochTotals,
                  validation: tuple[float | None, float | None, float | None]) -> None:
    """Record the epoch in the history, track the best epoch and patience, save, and report the epoch.

    Saving (rank 0): the epoch's weights kept in memory when it improved, then the trainer state of this epoch.
    """
    val_loss, val_acc, val_f1 = validation
    record = {"epoch": epoch, "train_loss": totals.loss_sum / max(totals.seen, 1),
              "train_accuracy": totals.correct / max(totals.labelled, 1),
              "validation_loss": val_loss, "validation_accuracy": val_acc, "validation_f1_macro": val_f1,
              "train_examples_per_second": totals.seen / totals.seconds, "train_seconds": totals.seconds,
              "learning_rate": run.scheduler.get_last_lr()[0], "train_examples": int(totals.seen)}
    improved = _track_best(run, epoch, record, val_f1 if run.data.train.multi_label else val_acc)
    rng = rng_states(run.ctx.info, run.ctx.device)   # a collective: every rank takes part
    if run.ctx.info.is_main:
        _save_epoch(run, epoch, improved, rng)
    distributed.barrier(run.ctx.info)
    run.ctx.cb.on_epoch_end(record)


def _track_best(run: Fit, epoch: int, record: dict[str, Any], val_acc: float | None) -> bool:
    """Add ``record`` to the history and update the best epoch, patience and wall time; whether the
    epoch improved on the best (always, without a validation split; see :func:`_improves`). ``val_acc`` is
    what ranks epochs: validation accuracy, or with several labels per text validation macro-F1."""
    t, state = run.ctx.config.training, run.state
    improved = _improves(state, val_acc, record["validation_loss"])
    record["best"] = improved
    state.epoch = epoch
    state.metrics["history"].append(record)
    if improved:
        state.best_accuracy, state.since_best = -1.0 if val_acc is None else val_acc, 0
        state.metrics["best_epoch"], state.metrics["best_validation_accuracy"] = epoch, record["validation_accuracy"]
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
    tie-break: ``docs/decisions.md#validation-ties``.
    """
    if val_acc is None or val_acc != state.best_accuracy:
        return val_acc is None or val_acc > state.best_accuracy
    best = next((r for r in state.metrics["history"] if r["epoch"] == state.metrics.get("best_epoch")), None)
    return bool(best and val_loss is not None and best.get("validation_loss") is not None
                and val_loss < best["validation_loss"])


def _keep(run: Fit) -> None:
    """The epoch's weights become the kept ones: ``run.kept``, the record the post-fit steps start from and the
    orchestrator writes (in memory: nothing here writes or reads them back)."""
    ctx = run.ctx
    run.kept = CheckpointRecord.of(run.model, ctx.config, run.data.tokenizer_json, run.state.metrics, run.data.labels)


def _save_epoch(run: Fit, epoch: int, improved: bool, rng: dict[str, torch.Tensor]) -> None:
    """Keep the epoch's weights when ``improved``, then save the epoch's trainer state (with the kept epoch's)."""
    ctx, data, state = run.ctx, run.data, run.state
    if improved:
        _keep(run)
    save_trainer_state(ctx.output, TrainerState(
        epoch=epoch, config=ctx.config, vocab_size=run.model.vocab_size, progress=state.progress(),
        model=run.model.state_dict(), optimizer=run.optimizer.state_dict(),
        scheduler=run.scheduler.state_dict(), rng=rng, tokenizer_json=data.tokenizer_json,
        world_size=ctx.info.world_size, kept_epoch=state.metrics.get("best_epoch")))

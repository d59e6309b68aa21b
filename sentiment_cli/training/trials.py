"""The search's encoder trials: Optuna's study (TPE sampler, median pruner) over the encoder's settings, each trial a
training run sized to its part of the budget.

Each trial is a run of its own in a folder beside the output (its refit left to the winner), through the
:class:`Runner` the orchestrator gives (``run.py``). Its :class:`TrialStop` ends it at its :class:`~.budget.Budget`'s
end; its :class:`TrialCallbacks` measure its rate in a timing run and size its steps into a
:class:`~.budget.StepLimit`, or stop it at once when too few steps fit (the next trial is then a cheaper setting,
:func:`cheaper`). The study runs with :meth:`optuna.study.Study.optimize` until :attr:`SearchPolicy.max_trials`
trials or until the next would not end within the budget. Every number comes from the
:class:`~.policy.SearchPolicy`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..card.text import settings_phrase
from ..config import Config
from ..errors import Interrupted, SentimentError
from .budget import Budget, StepLimit
from .callbacks import TrainCallbacks, TrainResult
from .candidate import Candidate
from .interrupts import StopFlag
from .policy import SearchPolicy


@dataclass(frozen=True)
class Runner:
    """How the search runs a fit; the orchestrator (``run.py``) gives it. None of them writes the output folder:
    the orchestrator writes the winner's record once.

    Attributes:
        fit: ``fit(config, folder, callbacks, stop, steps) -> TrainResult``: one trial into ``folder`` (its
            trainer state there), its checkpoint record in memory (``TrainResult.record``), its refit left to
            ``finish``.
        finish: ``finish(config, trial, callbacks, stop) -> TrainResult``: the winning trial's result made the
            run in the output folder (its trainer state moved there), refitted when ``config``'s refit rule says.
        final: ``final(config, callbacks, stop) -> TrainResult``: the n-gram score alone as a run for the output
            folder, its refit included.
    """

    fit: Callable[[Config, Path, TrainCallbacks, "TrialStop", StepLimit], TrainResult]
    finish: Callable[[Config, TrainResult, TrainCallbacks, StopFlag], TrainResult]
    final: Callable[[Config, TrainCallbacks, StopFlag], TrainResult]


class TrialStop(StopFlag):
    """A trial's stop flag: the run's own (signals), or the trial's :class:`~.budget.Budget` spent, or a projection
    that the trial would end past it (``projected``). A stop by the budget after a completed epoch ends the run with
    its best epoch kept (``loop.py``)."""

    def __init__(self, outer: StopFlag, budget: Budget) -> None:   # no state of its own: the outer flag holds it
        self.outer, self.budget, self.projected = outer, budget, False

    @property
    def by_budget(self) -> bool:
        """Whether the budget, not a signal, stops the trial."""
        return not self.outer.requested and (self.projected or self.budget.over())

    @property
    def requested(self) -> bool:   # type: ignore[override]
        return self.outer.requested or self.by_budget

    def request(self, signum: int | None = None) -> None:
        self.outer.request(signum)

    @property
    def signum(self) -> int | None:   # type: ignore[override]
        return self.outer.signum

    @property
    def reason(self) -> str:
        return "the time budget" if self.by_budget else self.outer.reason


class Pruned(Exception):
    """Raised from a trial's epoch end when the pruner stops it."""


class TrialCallbacks(TrainCallbacks):
    """The run's progress hooks, plus the trial's: each epoch's validation accuracy reported to Optuna (and the
    pruner asked), and the trial's steps sized to its budget (:meth:`size`): from the rate of its timing run
    (:attr:`SearchPolicy.timing_steps` steps, or :attr:`~SearchPolicy.timing_min_steps` once they took
    :attr:`~SearchPolicy.timing_seconds`), then from the rate of all its steps at each epoch's end."""

    def __init__(self, inner: TrainCallbacks, trial: Any, stop: TrialStop, limit: StepLimit, epochs: int,
                 batch: int, val_rows: int, policy: SearchPolicy) -> None:
        self.inner, self.trial, self.stop, self.limit, self.policy = inner, trial, stop, limit, policy
        self.epochs, self.batch, self.val_rows = epochs, batch, val_rows
        self.clock = stop.budget.clock
        self.epoch, self.steps, self.total_steps, self.steps_per_epoch = 0, 0, 0, 1
        self.began, self.first_epoch_start, self.val_began, self.val_total = self.clock(), 0.0, 0.0, 0.0
        self.rate: float | None = None            # training examples a second in the timing run
        self.needs: float | None = None           # seconds the whole planned schedule would take at that rate
        self.sized: tuple[int, int] | None = None  # (steps allowed, steps planned) when the budget cut the schedule

    def on_stage(self, text: str) -> None:
        self.inner.on_stage(text)

    def on_note(self, text: str) -> None:
        self.inner.on_note(text)

    def on_epoch_start(self, epoch: int, epochs: int, num_examples: int) -> None:
        self.epoch, self.steps = epoch, 0
        self.steps_per_epoch = max(1, math.ceil(num_examples / self.batch))
        if epoch == 1:
            self.first_epoch_start = self.clock()
        self.inner.on_epoch_start(epoch, epochs, num_examples)

    def on_step(self, examples: int, loss: float, accuracy: float, examples_per_second: float) -> None:
        self.steps, self.total_steps = self.steps + 1, self.total_steps + 1
        p = self.policy
        timed = self.steps >= p.timing_steps or (self.steps >= p.timing_min_steps and
                                                 self.clock() - self.first_epoch_start >= p.timing_seconds)
        if self.epoch == 1 and self.rate is None and timed and examples_per_second > 0:
            self.rate = examples_per_second
            self.size(self.clock(), examples_per_second / self.batch,
                      self.val_rows / p.validation_speedup / examples_per_second, first=True)
        self.inner.on_step(examples, loss, accuracy, examples_per_second)

    def on_validation_start(self, num_examples: int) -> None:
        self.val_began = self.clock()
        self.inner.on_validation_start(num_examples)

    def on_validation_step(self, examples: int) -> None:
        self.inner.on_validation_step(examples)

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        self.inner.on_epoch_end(record)
        now = self.clock()
        validation = now - self.val_began if self.val_began else 0.0
        self.val_total += validation
        training = now - self.first_epoch_start - self.val_total
        if self.first_epoch_start and self.total_steps and training > 0:   # the rate measured again, each epoch
            self.size(now, self.total_steps / training, validation)
        accuracy = record.get("validation_accuracy")
        if accuracy is None:
            return
        self.trial.report(accuracy, record["epoch"])
        if record["epoch"] < self.epochs and self.trial.should_prune():
            raise Pruned(record["epoch"])

    def for_pretraining(self) -> TrainCallbacks:
        return self.inner.for_pretraining()

    def size(self, now: float, steps_per_second: float, validation_seconds: float, first: bool = False) -> None:
        """Fit the trial's schedule to its time left: the optimizer steps its measured rate allows (each epoch's
        validation and the post-fit pass counted) become its :class:`~.budget.StepLimit`, to which the loop fits
        the learning-rate schedule; the whole schedule when it fits. At the timing run's end (``first``), a trial
        that fits too few steps (:attr:`SearchPolicy.min_steps`, or half its schedule) is stopped at once."""
        planned = self.steps_per_epoch * self.epochs
        left = self.policy.size_margin * (self.stop.budget.end - now)
        affordable = 0
        for _ in range(2):   # the validation passes depend on the epochs the steps span
            spans = math.ceil(affordable / self.steps_per_epoch) if affordable else 1
            affordable = max(0, int(steps_per_second * (left - validation_seconds * (spans + 1))))
        self.needs = (now - self.began) + (planned - self.total_steps) / steps_per_second + \
            validation_seconds * (self.epochs - self.epoch + 2)
        fit = self.total_steps + affordable
        if first and affordable < min(self.policy.min_steps, planned // 2):
            self.stop.projected = True   # the next trial is a cheaper setting (cheaper)
            return
        if fit >= planned and self.limit.steps is None:
            return   # the whole schedule fits
        # once sized, the schedule stays a step limit (the loop's learning rate follows it), up to the whole one
        self.limit.steps = max(min(fit, planned), self.total_steps)
        self.sized = (self.limit.steps, planned) if self.limit.steps < planned else None


def study_for(config: Config, given: frozenset[str], policy: SearchPolicy) -> tuple[Any, dict[str, tuple[Any, ...]]]:
    """Optuna's study (TPE sampler, Bergstra et al. 2011; median pruner) with the data rules' settings enqueued
    first, and the space: :attr:`SearchPolicy.space` less the keys the command line set, each list joined by the
    rules' value, and the epochs (the rules' and half of them)."""
    import optuna

    space = {key: _choices(key, values, config) for key, values in policy.space_dict().items() if key not in given}
    if "training.epochs" not in given:   # validation keeps the best epoch; a shorter schedule is another setting
        space["training.epochs"] = tuple(sorted({max(1, config.training.epochs // 2), config.training.epochs}))
    if not config.training.fit_ngram_scale or not config.model.ngram_buckets:
        space.pop("training.ngram_scale_min", None)
    warmup = max(1, int(config.training.epochs * policy.prune_warmup))
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=config.training.seed),
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=warmup))
    study.enqueue_trial({key: value_of(config, key) for key in space})
    return study, space


def cheaper(config: Config, given: frozenset[str], level: int, settings: dict[str, Any]) -> dict[str, Any]:
    """The settings that make a trial cheaper after ``level`` trials too slow for their time (0: none), each
    level about half the cost of the one before: level 1 drops the adversarial step (about half of a step's
    time), the rule-negated sentences and half the epochs; level 2 also halves ``max_length`` and drops
    distillation's unlabelled reviews; level 3 halves ``max_length`` again (never below 32 tokens). Keys the
    command line set are kept as set."""
    if level <= 0:
        return {}
    t, epochs = config.training, settings.get("training.epochs", config.training.epochs)
    out: dict[str, Any] = {"training.adversarial_epsilon": 0.0, "training.negation_augment": 0,
                           "training.epochs": max(1, epochs // 2)}
    if level >= 2:
        out["training.distill_reviews"] = 0
        out["data.max_length"] = max(32, config.data.max_length // 2 ** (level - 1))
    drop = {"training.adversarial_epsilon": t.adversarial_epsilon == 0, "training.negation_augment":
            t.negation_augment == 0, "training.distill_reviews": t.distill_reviews == 0,
            "data.max_length": config.data.max_length <= 32}
    return {key: value for key, value in out.items() if key not in given and not drop.get(key, False)}


def next_level(level: int, needs: float | None, seconds: float, policy: SearchPolicy) -> int:
    """The cheaper level after a trial too slow for its ``seconds``: one halving per doubling its whole schedule
    ``needs`` over them (one at least), at most :attr:`SearchPolicy.max_level`."""
    over = (needs or 0.0) / max(1.0, seconds)
    halvings = math.ceil(math.log2(over)) if over > 1 else 1
    return min(policy.max_level, level + max(1, halvings))


def run_trial(config: Config, settings: dict[str, Any], number: int, trial: Any, cb: TrainCallbacks, stop: StopFlag,
              runner: Runner, folder: Path, budget: Budget, val_rows: int, policy: SearchPolicy) -> Candidate:
    """Run one encoder trial into ``folder`` within ``budget``; its :class:`Candidate` (its result, while it may
    win, in ``result``), ``ended`` saying why it ended.

    Raises:
        Interrupted: a signal stopped it.
        SentimentError subclasses (the data, the config, a checkpoint): every trial would fail alike.
    """
    name = f"encoder #{number}" + (" (data rules)" if number == 0 else "")
    cb.on_stage(f"the search: {name}" + (f": {settings_phrase(settings)}" if settings else ""))
    trial_config = config.with_keys(settings, "the search")
    flag, limit = TrialStop(stop, budget), StepLimit()
    t = trial_config.training
    hooks = TrialCallbacks(cb, trial, flag, limit, t.epochs, t.batch_size, val_rows, policy)
    began = budget.clock()
    c = Candidate(name, "encoder", settings, folder=folder)
    try:
        result = runner.fit(trial_config, folder, hooks, flag, limit)
    except Pruned as exc:
        c.status = f"pruned at epoch {exc.args[0]}"
    except Interrupted as exc:
        if not flag.by_budget:   # a signal: the trial's folder goes with the search, so there is nothing to resume
            raise Interrupted(f"interrupted by {stop.reason} during the search ({name}); the output folder is as "
                              "it was: run the same command again (--time-budget 0 trains once)",
                              exit_code=exc.exit_code, resumable=False) from None
        c.status = _stopped(hooks, flag)
    except SentimentError as exc:
        if type(exc) is not SentimentError:   # the data, the config, a checkpoint: every trial would fail alike
            raise
        c.status = f"failed: {exc}"   # e.g. diverged at a high learning rate: the search goes on
    else:
        cal = result.metrics.get("calibration") or {}
        c.accuracy = cal.get("accuracy", result.metrics.get("best_validation_accuracy"))
        c.nll, c.losses, c.result = cal.get("nll"), result.validation_losses, result
        c.ended = _ended(result.metrics, hooks)
    c.seconds = budget.clock() - began
    c.rate, c.needs = hooks.rate, hooks.needs
    return c


def _stopped(hooks: TrialCallbacks, flag: TrialStop) -> str:
    """Why the budget stopped a trial before it had an epoch to keep."""
    if flag.projected and hooks.rate:
        return (f"stopped: the budget (its timing run, {hooks.rate:,.0f} examples/s, fitted too few steps in the "
                f"time left; the whole schedule needs about {hooks.needs or 0:,.0f} s)")
    if hooks.rate is None:
        return "stopped: the budget (before its first steps: the setup took the time)"
    return "stopped: the budget (before its first epoch ended)"


def _ended(metrics: dict[str, Any], hooks: TrialCallbacks) -> str:
    """Why a trial that has scores ended: its own schedule, a step limit sized from its rate, or the deadline."""
    cut = metrics.get("ended_by_budget")
    if cut:
        return (f"cut short by the budget during epoch {cut['epoch']} (step {cut['steps']:,}); its best completed "
                f"epoch, {metrics.get('best_epoch')}, kept")
    if hooks.sized:
        return (f"sized to the budget: {hooks.sized[0]:,} of {hooks.sized[1]:,} steps at its measured rate, the "
                "learning rate decayed to zero at the last")
    if metrics.get("stopped_early"):
        return "stopped early (patience)"
    return "its schedule"


def value_of(config: Config, key: str) -> Any:
    """The value of ``section.key`` in ``config``."""
    section, name = key.split(".")
    return getattr(getattr(config, section), name)


def _choices(key: str, values: tuple[Any, ...], config: Config) -> tuple[Any, ...]:
    """``values`` with the data rules' value of ``key`` joined, sorted."""
    return tuple(sorted({*values, value_of(config, key)}))

"""The default decides on the user's data: candidates measured on the validation split, within a time budget.

``sentiment train`` with the default preset runs, with ``[training] time_budget`` > 0 (``--time-budget``):

1. **The n-gram score alone**, each form at each C of :data:`~sentiment_cli.ngram.selection.SEARCH_GRID`
   (NB-LR and logistic regression over hashed token 1-3-grams), fitted on the training split and scored on
   the validation split: seconds. It is the floor: a model that reads the text no better than a linear one.
2. **The encoder with the n-gram score**, in the settings Optuna's TPE sampler proposes (Bergstra et al.
   2011, "Algorithms for Hyper-Parameter Optimization"), the data rules' settings first (enqueued). Each is
   a training run of its own in a trial folder beside the output, its refit left to the winner. A trial is
   pruned after an epoch whose validation accuracy trails the median of the earlier trials' at that epoch
   (Optuna's ``MedianPruner``, from half of the schedule on), and stopped once its epochs (or, roughly, its
   first steps) say it would end past the budget. The n-gram score's weight is among the searched settings,
   down to 0 (``[training] ngram_scale_min``).
3. **The choice**: the lowest validation log-loss after each candidate's own temperature (Guo et al. 2017),
   ties broken by the higher validation accuracy. The log-loss is a proper score that every row moves by its
   confidence, where accuracy moves by whole rows: on a few hundred rows two candidates a row apart in
   accuracy are a coin's throw, and the log-loss still tells them apart (docs/experiments.md, "The search on
   the validation split"). The n-gram score alone is a candidate, so on the validation split the choice's
   log-loss is never above its by more than noise: the best finished encoder trial is kept over a better n-gram
   score alone within one paired standard error (:func:`choose`). The winner is then made the checkpoint as the
   refit rule says (``refit.py``: trained again on every row when the validation rows were held out of train),
   and calibrated. The n-gram score alone becomes a run of ``epochs = 0`` (the dense head zero; ``loop.py``).

Keys set on the command line (``--set``, ``--epochs``, ...) are fixed: they are not searched. Every candidate,
its settings, scores, seconds and fate are printed as a table, kept in ``metrics.json`` (``"search"``) and
shown by the model card. ``time_budget = 0`` trains once with the data rules' settings (the search's first
encoder candidate). How it was set up, on dev: ``docs/experiments.md``, "The search on the validation split".

This module sits below the orchestrator: it runs each fit through the :class:`Runner` that ``run.py`` gives it.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..card.text import encoder_missing, settings_phrase
from ..checkpoint import write_metrics
from ..config import Config
from ..data.splits import DataSpec
from ..errors import Interrupted, SentimentError
from ..evaluation.training_report import write_training_report
from .callbacks import TrainCallbacks, TrainResult
from .candidate import Candidate, result_line, within_se
from .interrupts import StopFlag
from .ngram_stage import ngram_candidates, reads_terms
from .run_data import RunData

METRIC = ("validation log-loss after the temperature; ties: the higher validation accuracy; the best encoder trial "
          "over the n-gram score alone within one standard error")
# The n-gram score alone beats the best finished encoder trial only by more than this many paired standard errors
# of the two validation log-losses (the one-standard-error rule, Breiman et al. 1984; Hastie, Tibshirani & Friedman,
# "The Elements of Statistical Learning" 7.10): within it the two tie on validation, and the tie goes to the model
# family the tool exists for, whose encoder can read what validation barely weighs (word order, negation). On IMDB
# the built-in suite's negation tests fail 67.9% for the n-gram score alone, 20.8% with an encoder trained its whole
# schedule, 35.8% with one sized to 1,199 steps on a busy machine and 73.5% with one sized to 1,093 steps in a
# 900 s budget: what the encoder adds grows with its schedule (docs/experiments.md, 2026-11-28, third session).
ENCODER_SE = 1.0
REFIT_FACTOR = 1.15      # a refit on every row takes this many times its held-out run (10% more rows, no validation)
FIRST_TRIAL_SHARE = 0.5  # with a refit to come, the first encoder trial must end within this share of the budget
# The n-gram score alone as the checkpoint: its fit is the stage's, kept (RunData.ngram_fit); what it costs again is
# its refit on every row, when the run refits. Two fits were kept back before the stage's fit was kept: on Reuters
# (a dev split, no refit) a 99 s fit on a loaded machine then left no time for an encoder trial in a 300 s budget.
NGRAM_FINAL_FITS = 1
NGRAM_SHARE = 0.3        # the n-gram score alone's fits start within this share of the budget (one at least)
# Pretraining (word2vec on IMDB: five epochs of ~50 s on a quiet 2-core machine, ~230 s each at a load of 10)
# starts no epoch it would end past this share of the budget: on a busy machine the encoder keeps its time
PRETRAIN_SHARE = 0.25
# The budget counts from the run's start and holds the whole command: reading the data and its rules (IMDB: 7 s quiet)
# come before the search, and this share of it is kept for the work after the choice (the winner's checkpoint, the
# built-in behaviour suite, the card). Beside two busy processes IMDB's run went 14-33 s past its 30 minutes.
FINISH_SHARE = 0.02
MAX_TRIALS = 16          # encoder trials at most: a budget is an upper bound, and more trials on a few hundred
                         # validation rows fit their noise more than the data
PROJECT_AFTER = 30       # steps of a trial's first epoch: its timing run, whose rate sizes the trial's schedule;
TIMING_STEPS, TIMING_SECONDS = 10, 5.0   # or fewer steps (10 at least) once they took 5 s (a slow machine)
SIZE_MARGIN = 0.85       # a trial's steps are sized to fill this share of its time left (slower steps, saving)
VALIDATION_SPEEDUP = 3.0 # a validation row takes about this many times less than a training row (no backward)
MIN_STEPS = 50           # a trial that fits fewer optimizer steps than this (or half its schedule, when shorter)
                         # is stopped at once, and the next trial is a cheaper setting
MIN_TRIAL_SECONDS = 20.0 # no trial starts with less time than this before its deadline
MAX_LEVEL = 3            # cheaper settings: at most this many halvings (_cheaper)

# The encoder's settings the sampler proposes from, each list joined by the data rules' value. Chosen as the
# levers with dev evidence in docs/experiments.md: the epochs (validation keeps the best one), the learning rates
# (the small sets' embedding rate, "Small sets"), the regularisation, and the n-gram score's weight down to 0.
SPACE: dict[str, tuple[Any, ...]] = {
    "training.lr": (1e-3, 2e-3, 4e-3),
    "training.embedding_lr_scale": (1.0, 3.0, 10.0, 30.0),
    "model.dropout": (0.1, 0.2, 0.3),
    "training.token_dropout": (0.1, 0.2, 0.3),
    "training.ngram_scale_min": (0.0, 0.5, 1.0),
}


@dataclass(frozen=True)
class Runner:
    """How the search runs a fit; the orchestrator (``run.py``) gives it.

    Attributes:
        fit: ``fit(config, folder, callbacks, stop) -> TrainResult``: one run into ``folder``; its refit and report
            are left to ``finish`` (``config``'s refit is kept, so that a stopped refit of the winner resumes).
        finish: ``finish(config, trial_folder, callbacks, stop) -> TrainResult``: the winning trial moved into
            the output folder, refitted when ``config``'s refit rule says, its report written.
        final: ``final(config, callbacks, stop) -> TrainResult``: a run into the output folder (its refit and
            report included), for the n-gram score alone.
    """

    fit: Callable[[Config, Path, TrainCallbacks, Any], TrainResult]
    finish: Callable[[Config, Path, TrainCallbacks, Any], TrainResult]
    final: Callable[[Config, TrainCallbacks, Any], TrainResult]


class Deadline:
    """A trial's stop flag: the run's own (signals), or the trial's deadline (``time.monotonic`` seconds), or a
    projection that the trial would end past it (``projected``). It answers as :class:`StopFlag` does, and carries
    the trial's step budget (``max_steps``): the loop ends the run after that many optimizer steps, its learning
    rate decayed to zero there, and a stop by the budget after a completed epoch ends the run with its best epoch
    kept (``loop.py``)."""

    def __init__(self, outer: StopFlag, at: float) -> None:
        self.outer, self.at, self.projected = outer, at, False
        self.max_steps: int | None = None   # the trial's step budget, sized from its rate (the loop follows it)

    @property
    def budget(self) -> bool:
        """Whether the budget, not a signal, stops the trial."""
        return not self.outer.requested and (self.projected or time.monotonic() >= self.at)

    @property
    def requested(self) -> bool:
        return self.outer.requested or self.budget

    def request(self, signum: int | None = None) -> None:
        self.outer.request(signum)

    @property
    def signum(self) -> int | None:
        return self.outer.signum

    @property
    def exit_code(self) -> int:
        return self.outer.exit_code

    @property
    def reason(self) -> str:
        return "the time budget" if self.budget else self.outer.reason


class _TrialCallbacks(TrainCallbacks):
    """The run's progress hooks, plus the trial's: each epoch's validation accuracy reported to Optuna (and the
    pruner asked), and the trial sized to its deadline (:meth:`_size`): from the rate of its timing run (the first
    :data:`PROJECT_AFTER` steps, or :data:`TIMING_STEPS` once they took :data:`TIMING_SECONDS`), then from the
    rate of all its steps at each epoch's end."""

    def __init__(self, inner: TrainCallbacks, trial: Any, stop: Deadline, epochs: int, batch: int,
                 val_rows: int) -> None:
        self.inner, self.trial, self.stop, self.epochs, self.batch, self.val_rows = \
            inner, trial, stop, epochs, batch, val_rows
        self.epoch, self.steps, self.seen, self.per_epoch, self.first_epoch_start = 0, 0, 0, 0, 0.0
        self.total_steps, self.steps_per_epoch, self.began, self.val_began = 0, 1, time.monotonic(), 0.0
        self.val_total = 0.0                      # seconds of validation (and saving) so far
        self.rate: float | None = None            # training examples a second in the timing run
        self.needs: float | None = None           # seconds the whole planned schedule would take at that rate
        self.sized: tuple[int, int] | None = None  # (steps allowed, steps planned) when the budget cut the schedule

    def on_stage(self, text: str) -> None:
        self.inner.on_stage(text)

    def on_note(self, text: str) -> None:
        self.inner.on_note(text)

    def on_epoch_start(self, epoch: int, epochs: int, num_examples: int) -> None:
        self.epoch, self.steps, self.seen, self.per_epoch = epoch, 0, 0, num_examples
        self.steps_per_epoch = max(1, math.ceil(num_examples / self.batch))
        if epoch == 1:
            self.first_epoch_start = time.monotonic()
        self.inner.on_epoch_start(epoch, epochs, num_examples)

    def on_step(self, examples: int, loss: float, accuracy: float, examples_per_second: float) -> None:
        self.steps, self.seen, self.total_steps = self.steps + 1, self.seen + examples, self.total_steps + 1
        timed = self.steps >= PROJECT_AFTER or (self.steps >= TIMING_STEPS and
                                                 time.monotonic() - self.first_epoch_start >= TIMING_SECONDS)
        if self.epoch == 1 and self.rate is None and timed and examples_per_second > 0:
            self.rate = examples_per_second
            self._size(time.monotonic(), examples_per_second / self.batch, self.val_rows / VALIDATION_SPEEDUP /
                       examples_per_second, first=True)
        self.inner.on_step(examples, loss, accuracy, examples_per_second)

    def on_validation_start(self, num_examples: int) -> None:
        self.val_began = time.monotonic()
        self.inner.on_validation_start(num_examples)

    def on_validation_step(self, examples: int) -> None:
        self.inner.on_validation_step(examples)

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        self.inner.on_epoch_end(record)
        epoch, now = record["epoch"], time.monotonic()
        validation = now - self.val_began if self.val_began else 0.0   # with the epoch's saving
        self.val_total += validation
        training = now - self.first_epoch_start - self.val_total
        if self.first_epoch_start and self.total_steps and training > 0:   # the rate measured again, each epoch
            self._size(now, self.total_steps / training, validation)
        accuracy = record.get("validation_accuracy")
        if accuracy is None:
            return
        self.trial.report(accuracy, epoch)
        if epoch < self.epochs and self.trial.should_prune():
            raise _Pruned(epoch)

    def for_pretraining(self) -> TrainCallbacks:
        return self.inner.for_pretraining()

    def _size(self, now: float, steps_per_second: float, validation_seconds: float, first: bool = False) -> None:
        """Fit the trial's schedule to its time left: the optimizer steps its measured rate allows (each epoch's
        validation and the post-fit pass counted) become the stop flag's step budget, to which the loop fits the
        learning-rate schedule (``loop.py``); the whole schedule when it fits. At the timing run's end
        (``first``), a trial that fits too few steps is stopped at once."""
        planned = self.steps_per_epoch * self.epochs
        left = SIZE_MARGIN * (self.stop.at - now)
        affordable = 0
        for _ in range(2):   # the validation passes depend on the epochs the steps span
            spans = math.ceil(affordable / self.steps_per_epoch) if affordable else 1
            affordable = max(0, int(steps_per_second * (left - validation_seconds * (spans + 1))))
        self.needs = (now - self.began) + (planned - self.total_steps) / steps_per_second + \
            validation_seconds * (self.epochs - self.epoch + 2)
        fit = self.total_steps + affordable
        if first and affordable < min(MIN_STEPS, planned // 2):
            self.stop.projected = True   # the next trial is a cheaper setting (_encoder_trials)
            return
        if fit >= planned and self.stop.max_steps is None:
            return   # the whole schedule fits
        # once sized, the schedule stays a step budget (the loop's learning rate follows it), up to the whole one
        self.stop.max_steps = max(min(fit, planned), self.total_steps)
        self.sized = (self.stop.max_steps, planned) if self.stop.max_steps < planned else None


class _Pruned(Exception):
    """Raised from a trial's epoch end when the pruner stops it."""


# ----------------------------------------------------------------------------- the search

def searchable(config: Config) -> str | None:
    """Why ``config`` cannot be searched (one phrase), or ``None`` when it can: the search needs validation."""
    if config.data.validation_fraction == 0:
        return "no validation split ([data] validation_fraction = 0): nothing to measure candidates on"
    return None


def search(config: Config, output: Path, cb: TrainCallbacks, stop: StopFlag, data: RunData, given: frozenset[str],
           runner: Runner, started: float | None = None) -> TrainResult:
    """Choose the default's settings on the validation split within ``[training] time_budget`` seconds, and make
    the winner the checkpoint in ``output``.

    Args:
        config: the default preset with the data rules applied (``auto.py``).
        output: the checkpoint folder; untouched until the winner is known.
        cb: the run's progress hooks (each trial's run reports through them; ``on_note`` tells each result).
        stop: the run's stop flag (signals); a trial also stops at its deadline.
        data: the run's source, read once.
        given: the keys the command line set: not searched.
        runner: the fits (:class:`Runner`).
        started: when the run began (``time.monotonic()``; ``None``: now): the budget counts from there, so
            reading the data and its rules count too, and :data:`FINISH_SHARE` of it is kept for the work after
            the choice.

    Returns:
        The checkpoint's :class:`TrainResult`; its ``metrics.json`` holds ``"search"``.

    Raises:
        Interrupted: a signal stopped the search (the output folder is as it was; trial folders are removed).
        DataError, CheckpointError, SentimentError: as :func:`~.run.train`, from the final fit.
    """
    start = time.monotonic()
    budget = config.training.time_budget
    end = (start if started is None else started) + (1 - FINISH_SHARE) * budget
    refits = bool(config.training.refit and "validation" not in data.src.splits)
    workdir = output.parent / f".{output.name}.search"
    shutil.rmtree(workdir, ignore_errors=True)
    try:
        # the n-gram stage leaves the encoder most of the budget (a slow machine made it take two thirds)
        candidates = ngram_candidates(config, data, cb, given, min(end, start + NGRAM_SHARE * (end - start)), stop)
        # kept back for the n-gram score alone's own run should it win: its refit on every row
        best = max((c for c in candidates if c.complete), key=Candidate.rank_key, default=None)
        final = NGRAM_FINAL_FITS * (best.seconds if best and refits else 0.0)
        shared = _shared_work(config, cb, stop, data, PRETRAIN_SHARE * (end - start))
        val_rows = len(data.splits(DataSpec.from_config(config))[1])
        base = _with_ngram_fit(config, candidates, given)
        candidates += _encoder_trials(base, cb, stop, given, runner, workdir, end - final, refits, val_rows)
        winner, chosen_by = choose(candidates)
        if winner is None:
            raise SentimentError("the search measured no candidate within its time budget; raise --time-budget")
        cb.on_stage(f"the search chose {winner.name}: validation log-loss {winner.nll:.4f}, accuracy "
                    f"{winner.accuracy:.2%}" + ("" if chosen_by["rule"] == "log-loss" else
                                                f" ({chosen_by['why']})"))
        result = _make_checkpoint(base if winner.kind == "encoder" else config, winner, cb, stop, runner, refits, end)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result = _record(result, candidates, winner, chosen_by, config, time.monotonic() - start, shared)
    missing = encoder_missing(result.metrics["search"])
    if missing:
        cb.on_note(missing)
    return result


def choose(candidates: list[Candidate]) -> tuple[Candidate | None, dict[str, Any]]:
    """The winner among the finished candidates, and why: the lowest validation log-loss (:meth:`Candidate.rank_key`),
    except that the best finished encoder trial wins over a better n-gram score alone unless the score alone's
    log-loss is lower by more than :data:`ENCODER_SE` standard errors of the mean of the two's row-by-row
    differences (the same validation rows, both ``losses`` known; with several labels per text each row's loss is
    the mean of its labels' binary log-losses).

    Returns:
        ``(winner or None, {"rule": "log-loss" | "one standard error", "why": a phrase, and with the second rule
        "nll_difference" and "standard_error"})``.
    """
    done = [c for c in candidates if c.complete]
    best = max(done, key=Candidate.rank_key, default=None)
    chosen_by: dict[str, Any] = {"rule": "log-loss", "why": "the lowest validation log-loss"}
    encoder = max((c for c in done if c.kind == "encoder"), key=Candidate.rank_key, default=None)
    if best is None or best.kind == "encoder" or encoder is None:
        return best, chosen_by
    within = _within_se(encoder, best)
    if within is None:
        return best, chosen_by
    difference, se = within
    return encoder, {"rule": "one standard error", "nll_difference": round(difference, 6),
                     "standard_error": round(se, 6),
                     "why": f"{encoder.name}'s log-loss is within {ENCODER_SE:g} standard error of {best.name}'s "
                            f"({difference:+.4f}, SE {se:.4f}, paired over {len(encoder.losses):,} validation rows)"}


def _within_se(preferred: Candidate, best: Candidate) -> tuple[float, float] | None:
    """:func:`~.candidate.within_se` at :data:`ENCODER_SE` standard errors."""
    return within_se(preferred, best, ENCODER_SE)


def _with_ngram_fit(config: Config, candidates: list[Candidate], given: frozenset[str]) -> Config:
    """``config`` with the best n-gram candidate's settings (on validation) for every encoder trial: its form and C,
    so that each trial fits the score once instead of choosing its form again by cross-validation on the same
    rows (not when the command line or a multi-label run's rules pinned them, unless it reads term frequencies:
    :data:`~.ngram_stage.TERM_READING` has C's of its own), its reading, and its class weights when the
    stage chose them (:func:`~.ngram_stage._weighting_searched`); ``config`` itself when there is no n-gram
    candidate."""
    ngram = [c for c in candidates if c.kind == "ngram" and c.complete]
    if not ngram:
        return config
    best = _trials_ngram(ngram)
    settings = dict(best.settings)
    pinned = config.model.ngram_fit != "auto" and not reads_terms(settings)   # a term reading has its own C
    if pinned or given & {"model.ngram_fit", "model.ngram_c"}:
        settings.pop("model.ngram_fit", None), settings.pop("model.ngram_c", None)
    return config.with_keys(settings, "the search: the best n-gram score alone's form and C, and its class "
                            "weights") if settings else config


def _trials_ngram(ngram: list[Candidate]) -> Candidate:
    """The n-gram candidate whose features and fit the encoder trials read: the best on validation, except that the
    best on words alone is taken when its log-loss is within one standard error of a better one with word pieces
    (:func:`_within_se`). Each word's character n-grams made the n-gram score alone better on validation, and the
    encoder beside it no better: on TREC-6, NB-LR with them 0.3798 of log-loss against 0.3867 on words alone, and
    encoder #0 0.3576 against 0.3569, test 88.0% against 90.0% (docs/experiments.md, fourth session)."""
    best = max(ngram, key=Candidate.rank_key)
    words = [c for c in ngram if "model.ngram_word_chars" not in c.settings]
    if best in words or not words:
        return best
    alone = max(words, key=Candidate.rank_key)
    return alone if _within_se(alone, best) is not None else best


def _shared_work(config: Config, cb: TrainCallbacks, stop: StopFlag, data: RunData,
                 seconds: float | None = None) -> dict[str, float]:
    """The work every encoder trial would share, done once before them, under the run's stop flag (not a
    trial's deadline) and inside the budget: the pretrained encoder ``init_from`` names, made when missing
    (word2vec on IMDB: minutes). The n-gram score's fit, the rule-negated sentences and distillation's teacher
    labels are made by the first trial that needs them and kept for the others (:meth:`RunData.shared`).

    Args:
        seconds: pretraining's share of the budget (:data:`PRETRAIN_SHARE`): it starts no epoch it would end
            past it (the first always runs); ``None``: every epoch.

    Returns:
        ``{"pretraining_seconds": ...}`` (0 when the folder was there or the run starts from scratch).

    Raises:
        Interrupted, DataError, CheckpointError, SentimentError: as :func:`~.pretrain.ensure_pretrained`.
    """
    from .pretrain import ensure_pretrained

    began = time.monotonic()
    if config.training.init_from:
        ensure_pretrained(config, cb, stop=stop, data=data, seconds=seconds)
    return {"pretraining_seconds": round(time.monotonic() - began, 1)}


def _budget_hint(candidates: list[Candidate], record_seconds: float, budget: float) -> str | None:
    """The ``--time-budget`` (``"25m"``) that would have fitted one encoder trial: the time the search spent before
    its encoder trials, plus the fastest measured trial's whole schedule with a refit's share, rounded up to
    minutes; twice the budget when no trial measured its rate."""
    encoders = [c for c in candidates if c.kind == "encoder"]
    if not encoders:
        return None
    needs = [c.needs for c in encoders if c.needs]
    if needs:
        before = max(0.0, record_seconds - sum(c.seconds for c in encoders))
        seconds = before + (1 + REFIT_FACTOR) * min(needs) / SIZE_MARGIN
    else:
        seconds = 2 * budget
    return f"{math.ceil(seconds / 60)}m"


def _encoder_trials(config: Config, cb: TrainCallbacks, stop: StopFlag, given: frozenset[str], runner: Runner,
                    workdir: Path, end: float, refits: bool, val_rows: int) -> list[Candidate]:
    """The encoder's trials, proposed by Optuna's TPE sampler (the data rules' settings first), each a run in
    ``workdir`` sized to its time (:class:`_TrialCallbacks`), until no further trial fits before ``end`` (a refit's
    time kept back when ``refits``), or :data:`MAX_TRIALS` have run. A trial stopped before it had an epoch does
    not end the search: the next ones run a cheaper setting (:func:`_cheaper`).

    Raises:
        Interrupted: a signal (not the budget) stopped a trial.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study, space = _study(config, given)
    trials: list[Candidate] = []
    level = 0
    while True:
        done = [c for c in trials if c.complete]
        estimate = max((c.seconds for c in done), default=0.0)
        reserve = REFIT_FACTOR * estimate if refits else 0.0
        now = time.monotonic()
        if len(trials) >= MAX_TRIALS or (done and now + estimate + reserve > end):
            break
        if not done and refits:   # the first finished trial must leave its own refit time
            deadline = now + FIRST_TRIAL_SHARE * (end - now) if not trials else end
        else:
            deadline = end - reserve
        if deadline - now < MIN_TRIAL_SECONDS:
            break
        trial = study.ask()
        settings = {key: trial.suggest_categorical(key, values) for key, values in space.items()}
        settings.update(_cheaper(config, given, level, settings))
        c = _run_trial(config, settings, len(trials), trial, cb, stop, runner, workdir, deadline, val_rows)
        trials.append(c)
        if c.complete:
            study.tell(trial, c.accuracy)
        else:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED if c.status.startswith("pruned")
                       else optuna.trial.TrialState.FAIL)
        cb.on_note(result_line(c))
        if c.status.startswith("stopped"):   # too slow for its time: each level halves the cost, about
            over = (c.needs or 0.0) / max(1.0, deadline - now)
            level = min(MAX_LEVEL, level + max(1, math.ceil(math.log2(over)) if over > 1 else 1))
            if not any(x.complete for x in trials):   # the rules' settings again, cheaper, before the sampler's
                study.enqueue_trial({key: _value(config, key) for key in space})
    return trials


def _study(config: Config, given: frozenset[str]) -> tuple[Any, dict[str, tuple[Any, ...]]]:
    """Optuna's study (TPE sampler, median pruner) with the data rules' settings enqueued first, and the space."""
    import optuna

    space = {key: _choices(key, values, config) for key, values in SPACE.items() if key not in given}
    if "training.epochs" not in given:   # validation keeps the best epoch; a shorter schedule is another setting
        space["training.epochs"] = tuple(sorted({max(1, config.training.epochs // 2), config.training.epochs}))
    if not config.training.fit_ngram_scale or not config.model.ngram_buckets:
        space.pop("training.ngram_scale_min", None)
    # A few hundred validation rows move a point between epochs: no trial is pruned in the first half of the
    # preset's schedule, where the rules' own run is often still behind (TREC-6's dev: 86.4% after epoch 1, 89.4%
    # at the end).
    warmup = max(1, config.training.epochs // 2)
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=config.training.seed),
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=warmup))
    study.enqueue_trial({key: _value(config, key) for key in space})
    return study, space


def _cheaper(config: Config, given: frozenset[str], level: int, settings: dict[str, Any]) -> dict[str, Any]:
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


def _run_trial(config: Config, settings: dict[str, Any], number: int, trial: Any, cb: TrainCallbacks, stop: StopFlag,
               runner: Runner, workdir: Path, deadline: float, val_rows: int = 0) -> Candidate:
    """Run one encoder trial into ``workdir/trial-N``; its :class:`Candidate`, ``ended`` saying why it ended.

    Raises:
        Interrupted: a signal stopped it.
    """
    name = f"encoder #{number}" + (" (data rules)" if number == 0 else "")
    cb.on_stage(f"the search: {name}" + (f": {settings_phrase(settings)}" if settings else ""))
    trial_config = config.with_keys(settings, "the search")
    folder = workdir / f"trial-{number}"
    flag = Deadline(stop, deadline)
    t = trial_config.training
    hooks = _TrialCallbacks(cb, trial, flag, t.epochs, t.batch_size, val_rows)
    began = time.monotonic()
    c = Candidate(name, "encoder", settings, folder=folder)
    try:
        result = runner.fit(trial_config, folder, hooks, flag)
    except _Pruned as exc:
        c.status = f"pruned at epoch {exc.args[0]}"
    except Interrupted as exc:
        if not flag.budget:   # a signal: the trial's folder goes with the search, so there is nothing to resume
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
        c.nll = cal.get("nll")
        c.ended = _ended(result.metrics, hooks)
        c.losses = result.validation_losses
    c.seconds = time.monotonic() - began
    c.rate, c.needs = hooks.rate, hooks.needs
    return c


def _stopped(hooks: _TrialCallbacks, flag: Deadline) -> str:
    """Why the budget stopped a trial before it had an epoch to keep."""
    if flag.projected and hooks.rate:
        return (f"stopped: the budget (its timing run, {hooks.rate:,.0f} examples/s, fitted too few steps in the "
                f"time left; the whole schedule needs about {hooks.needs or 0:,.0f} s)")
    if hooks.rate is None:
        return "stopped: the budget (before its first steps: the setup took the time)"
    return "stopped: the budget (before its first epoch ended)"


def _ended(metrics: dict[str, Any], hooks: _TrialCallbacks) -> str:
    """Why a trial that has scores ended: its own schedule, a step budget sized from its rate, or the deadline."""
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


def _make_checkpoint(config: Config, winner: Candidate, cb: TrainCallbacks, stop: StopFlag, runner: Runner,
                     refits: bool, end: float) -> TrainResult:
    """The winner as the checkpoint: the n-gram score alone as a run of ``epochs = 0`` (its refit included), or
    the winning trial moved into place and refitted when the refit rule says and the budget leaves the time."""
    if winner.kind == "ngram":
        # refitted on every row whenever its validation rows were held out of train: a fit of seconds
        ngram_alone = config.with_keys({**winner.settings, "training.epochs": 0, "training.init_from": "",
                                        "training.distill_reviews": 0, "training.fit_ngram_scale": False,
                                        "training.adversarial_epsilon": 0.0, "training.refit": True}, "the search")
        return runner.final(ngram_alone, cb, stop)
    chosen = config.with_keys(winner.settings, "the search")
    if refits and winner.ended != "its schedule":   # its epochs do not say what a refit on every row would run
        cb.on_note(f"no refit on every row: {winner.name}'s schedule was {winner.ended}; the held-out run's weights "
                   "are kept")
        chosen = chosen.override("training", origin="the search", refit=False)
    elif refits and time.monotonic() + REFIT_FACTOR * winner.seconds > end:
        cb.on_note(f"no time left in the budget for the refit on every row: the held-out run's weights are kept "
                   f"(the refit takes about {REFIT_FACTOR * winner.seconds:.0f} s)")
        chosen = chosen.override("training", origin="the search", refit=False)
    return runner.finish(chosen, winner.folder, cb, stop)


def _record(result: TrainResult, candidates: list[Candidate], winner: Candidate, chosen_by: dict[str, Any],
            config: Config, seconds: float, shared: dict[str, float] | None = None) -> TrainResult:
    """``result`` with ``metrics.json``'s ``"search"``: the budget, the metric, the work shared by the trials,
    every candidate, the choice and the rule that made it (:func:`choose`), and, when no encoder trial finished,
    the budget that would have fitted one."""
    result.metrics["search"] = {
        "budget_seconds": config.training.time_budget, "seconds": round(seconds, 1), "metric": METRIC,
        "sampler": f"Optuna TPE (seed {config.training.seed}), median pruner on each epoch's validation accuracy",
        "shared_work": shared or {},
        "candidates": [c.to_dict() for c in candidates], "chosen": winner.name,
        "chosen_settings": winner.settings, "chosen_by": chosen_by}
    if not any(c.kind == "encoder" and c.complete for c in candidates):
        result.metrics["search"]["encoder_budget_hint"] = _budget_hint(candidates, seconds,
                                                                       config.training.time_budget)
    result.metrics["wall_time_seconds"] = round(seconds, 1)
    write_metrics(result.checkpoint, result.metrics)
    return dataclasses.replace(result, report=write_training_report(result.checkpoint))   # the card shows the search


# ----------------------------------------------------------------------------- settings

def _value(config: Config, key: str) -> Any:
    """The value of ``section.key`` in ``config``."""
    section, name = key.split(".")
    return getattr(getattr(config, section), name)


def _choices(key: str, values: tuple[Any, ...], config: Config) -> tuple[Any, ...]:
    """``values`` with the data rules' value of ``key`` joined, sorted."""
    return tuple(sorted({*values, _value(config, key)}))



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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..card.text import encoder_missing, settings_phrase
from ..checkpoint import write_metrics
from ..config import Config
from ..data.splits import DataSpec
from ..data.tokenizer import build_tokenizer, tokenizer_kind, vocabulary
from ..errors import Interrupted, SentimentError
from ..evaluation import calibration, multilabel
from ..evaluation.training_report import write_training_report
from ..ngram.crossfit import full_logits
from ..ngram.fit import fit_key, fit_weighting, rows_digest
from ..ngram.estimator import NgramEstimator
from ..ngram.features import idf_weights, ngram_features, tfidf_rows, word_pieces
from ..ngram.memory import fit_limit
from ..ngram.selection import SEARCH_GRID
from .callbacks import TrainCallbacks, TrainResult
from .interrupts import StopFlag
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
NGRAM_FINAL_FITS = 2     # the n-gram score alone as the checkpoint: its fit, and its refit on every row
NGRAM_SHARE = 0.3        # the n-gram score alone's fits start within this share of the budget (one at least)
# Words' character n-grams beside the words (fastText's subword units; scikit-learn's char_wb): with a word
# tokenizer the stage then fits PIECE_FITS with character 2-PIECE_CHARS-grams within each word, as TF-IDF rows for
# LR and binarised for NB-LR at its best C on words ("best"). Validation log-loss, the best on words alone against
# the best with them: Arabic tweets (ASTD) 0.8653 against 0.8243 (TF-IDF + LR C 3), Subj 0.2005 against 0.1768
# (NB-LR C 1), TREC-6 0.3867 against 0.3798, IMDB 0.2516 against 0.2681 (docs/experiments.md, fourth session).
PIECE_CHARS = 5
PIECE_FITS = (("lr", 3.0, "tfidf"), ("nb-lr", "best", "binary"), ("lr", 10.0, "tfidf"))
# Pretraining (word2vec on IMDB: five epochs of ~50 s on a quiet 2-core machine, ~230 s each at a load of 10)
# starts no epoch it would end past this share of the budget: on a busy machine the encoder keeps its time
PRETRAIN_SHARE = 0.25
MAX_TRIALS = 16          # encoder trials at most: a budget is an upper bound, and more trials on a few hundred
                         # validation rows fit their noise more than the data
FORM_NAMES = {"nb-lr": "NB-LR", "lr": "LR"}
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


@dataclass
class Candidate:
    """One setting measured on the validation split.

    Attributes:
        name: how the table names it (``n-gram alone, NB-LR C 1``, ``encoder #0 (data rules)``).
        kind: ``"ngram"`` or ``"encoder"``.
        settings: the ``section.key`` values it sets over the data rules' config.
        accuracy, nll: validation accuracy, and log-loss (nats per row) after its own temperature; ``None``
            when it did not finish.
        seconds: wall time it took.
        status: ``complete``, ``pruned at epoch N``, ``stopped: the budget`` or ``failed: ...``.
        folder: an encoder trial's folder while the search runs.
    """

    name: str
    kind: str
    settings: dict[str, Any]
    accuracy: float | None = None
    nll: float | None = None
    seconds: float = 0.0
    status: str = "complete"
    folder: Path | None = field(default=None, repr=False)
    ended: str = ""                 # why a trial with scores ended: its schedule, sized to the budget, cut short
    rate: float | None = None       # an encoder trial's training examples a second in its timing run
    needs: float | None = None      # seconds its whole planned schedule would have taken at that rate
    losses: np.ndarray | None = field(default=None, repr=False)   # (n_validation,) each row's log-loss, one
                                                                  # label per text; the paired comparison's
    fit: tuple[str, Any] | None = field(default=None, repr=False)  # an n-gram candidate's (fit_key, estimator),
                                                                   # while the stage runs

    @property
    def complete(self) -> bool:
        """Whether it has scores to compare (a trial sized to or cut short by the budget too: ``ended``)."""
        return self.status == "complete" and self.accuracy is not None

    def rank_key(self) -> tuple[float, float]:
        """Higher is better: the lower log-loss, then the higher accuracy."""
        return (-(self.nll if self.nll is not None else math.inf), self.accuracy or 0.0)

    def to_dict(self) -> dict[str, Any]:
        """Its ``metrics.json`` record."""
        out = {"name": self.name, "kind": self.kind, "settings": self.settings, "validation_accuracy": self.accuracy,
               "validation_nll": self.nll, "seconds": round(self.seconds, 2), "status": self.status}
        if self.kind == "encoder":
            out.update({"ended": self.ended or None, "examples_per_second": None if self.rate is None else
                        round(self.rate, 1), "needs_seconds": None if self.needs is None else round(self.needs, 1)})
        return out


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
           runner: Runner) -> TrainResult:
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

    Returns:
        The checkpoint's :class:`TrainResult`; its ``metrics.json`` holds ``"search"``.

    Raises:
        Interrupted: a signal stopped the search (the output folder is as it was; trial folders are removed).
        DataError, CheckpointError, SentimentError: as :func:`~.run.train`, from the final fit.
    """
    start = time.monotonic()
    end = start + config.training.time_budget
    refits = bool(config.training.refit and "validation" not in data.src.splits)
    workdir = output.parent / f".{output.name}.search"
    shutil.rmtree(workdir, ignore_errors=True)
    try:
        # the n-gram stage leaves the encoder most of the budget (a slow machine made it take two thirds)
        candidates = ngram_candidates(config, data, cb, given, min(end, start + NGRAM_SHARE * (end - start)), stop)
        # kept back for the n-gram score alone's own run should it win: the best one's fit and its refit's
        best = max((c for c in candidates if c.complete), key=Candidate.rank_key, default=None)
        final = NGRAM_FINAL_FITS * (best.seconds if best else 0.0)
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
    differences (the same validation rows; one label per text: both ``losses`` known).

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
    """``(mean difference, its standard error)`` of ``preferred``'s validation log-losses less ``best``'s, row by row,
    when that mean is at most :data:`ENCODER_SE` standard errors (the two tie within noise); ``None`` when it is
    more, or without row-by-row losses on the same rows (two at least) to pair."""
    a, b = preferred.losses, best.losses
    if a is None or b is None or len(a) != len(b) or len(a) < 2:
        return None
    d = a - b
    se = float(d.std(ddof=1) / math.sqrt(len(d)))
    return (float(d.mean()), se) if float(d.mean()) <= ENCODER_SE * se else None


def _with_ngram_fit(config: Config, candidates: list[Candidate], given: frozenset[str]) -> Config:
    """``config`` with the best n-gram candidate's settings (on validation) for every encoder trial: its form and C,
    so that each trial fits the score once instead of choosing its form again by cross-validation on the same
    rows (not when the command line or a multi-label run's rules pinned them), and its class weights when the
    stage chose them (:func:`_weighting_searched`); ``config`` itself when there is no n-gram candidate."""
    ngram = [c for c in candidates if c.kind == "ngram" and c.complete]
    if not ngram:
        return config
    best = _trials_ngram(ngram)
    settings = dict(best.settings)
    if config.model.ngram_fit != "auto" or given & {"model.ngram_fit", "model.ngram_c"}:
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


def ngram_candidates(config: Config, data: RunData, cb: TrainCallbacks, given: frozenset[str],
                     end: float, stop: StopFlag | None = None) -> list[Candidate]:
    """The n-gram score alone, each form at each C of ``SEARCH_GRID`` (a form or C the command line pinned: that
    one) in :func:`fit_order`, fitted on the training split and scored on the validation split, while the next fit
    (as long as the longest so far) ends before ``end`` (one fit at least). When the imbalance rule balanced the
    classes (:func:`_weighting_searched`), the first form and C is fitted unweighted too, second, even past
    ``end`` (the weighting is the encoder trials' loss's too: balanced weights can keep a short encoder schedule
    on the rare class, docs/experiments.md), and the other fits take whichever weighting scored better. With a
    word tokenizer, :data:`PIECE_FITS` follow with each word's character n-grams (:func:`_piece_fits`), the
    first of them both ways again when the weighting is searched.

    The texts are tokenized as the n-gram score alone's run will tokenize them (a vocabulary built on the
    training split), so that run reads the same ids (:meth:`~.run_data.RunData.ids` keeps them).

    Returns:
        One :class:`Candidate` per fit, ``settings`` naming ``model.ngram_fit`` and ``model.ngram_c``; none
        without an n-gram score (``[model] ngram_buckets = 0``).

    Raises:
        DataError: as the fit (too few classes, a fit above ``[training] ngram_fit_gb``).
        Interrupted: ``stop`` was set (a signal), checked before each fit.
    """
    m = config.model
    if not m.ngram_buckets:
        return []
    spec = DataSpec.from_config(config)
    train, val = data.splits(spec)
    cb.on_stage(f"the search: the n-gram score alone, on {len(train):,} training and {len(val):,} validation rows")
    tokenizer = build_tokenizer(train.texts, config.data, length=len(train))
    features = _StageFeatures(config, data, tokenizer, train, val)
    k, y_val = len(train.label_names), np.asarray(val.labels)
    grid = {form: Cs for form, Cs in SEARCH_GRID.items() if "model.ngram_fit" not in given or m.ngram_fit == form}
    if ("model.ngram_c" in given or train.multi_label) and m.ngram_c:   # multi-label: the rules' pinned form
        grid = {form: (m.ngram_c,) for form in grid if not train.multi_label or form == m.ngram_fit}

    def fit(form: str, C: float, class_weight: str, reading: tuple[int, str]) -> Candidate:
        x, xv, rows = features.of(*reading)
        key = fit_key(rows, form, C, fit_weighting(class_weight, train.labels), reading[1])
        return _ngram_fit(config, (form, C, class_weight), reading, (x, train.labels), (xv, y_val), k, cb, stop, key)

    fits = _Fits(fit, config.training.class_weight, _weighting_searched(config, given, train.multi_label))
    out = fits.out
    for i, (form, C) in enumerate(fit_order(grid, m.ngram_weighting)):
        if out and time.monotonic() + max(c.seconds for c in out) > end:   # the next fit would end past it
            break
        fits.add(form, C, (0, m.ngram_weighting), i == 0)
    if _tries_pieces(config, given, train.multi_label, tokenizer):
        pieces = _piece_fits(out, grid, features, end)
        if pieces:
            cb.on_stage(f"the search: the n-gram score alone with each word's character 2-{PIECE_CHARS}-grams")
        for i, (form, C, (chars, tf)) in enumerate(pieces):   # a weighting given on the command line stays
            fits.add(form, C, (chars, m.ngram_weighting if "model.ngram_weighting" in given else tf), i == 0)
    for c in out:   # the trials' fit, made once (issue 54): RunData keeps each reading's best
        if c.fit is not None:
            key, estimator = c.fit
            data.ngram_fit(key, lambda e=estimator: e)
            c.fit = None
    return out


class _Fits:
    """The n-gram stage's candidates, fitted one at a time by ``fit(form, C, class_weight, reading)``, each in the
    class weighting found better so far (``weighting``; ``searched``: :func:`_weighting_searched`)."""

    def __init__(self, fit: Callable[..., Candidate], weighting: str, searched: bool):
        self.fit, self.weighting, self.searched = fit, weighting, searched
        self.out: list[Candidate] = []

    def add(self, form: str, C: float, reading: tuple[int, str], first: bool) -> None:
        """One fit; the ``first`` of each reading both ways when the weighting is searched (past the share too: it is
        the encoder's loss's as well), the rest in the better (on ASTD's dev, TF-IDF + LR with word pieces lost 5.3
        points of accuracy to the balanced weights NB-LR on words alone chose)."""
        self.out.append(self.fit(form, C, self.weighting, reading))
        if first and self.searched:
            other = "none" if self.weighting == "balanced" else "balanced"
            self.out.append(self.fit(form, C, other, reading))
            if self.out[-1].rank_key() > self.out[-2].rank_key():
                self.weighting = other
        _keep_best_fit(self.out)


class _StageFeatures:
    """The n-gram stage's feature matrices ``(x, x_validation, rows_digest)``, made once for each reading ``(chars,
    weighting)``: words alone (``chars`` 0) or with their character 2-``chars``-grams
    (:func:`~sentiment_cli.ngram.features.word_pieces`), binarised or as TF-IDF rows, as the model's score reads them
    (``[model] ngram_word_chars``, ``ngram_weighting``)."""

    def __init__(self, config: Config, data: RunData, tokenizer: Any, train: Any, val: Any):
        self.config, self.tokenizer = config, tokenizer
        self.train_ids = data.ids(tokenizer, train.texts, config.data)
        self.val_ids = data.ids(tokenizer, val.texts, config.data)
        self.labels = train.labels
        self.made: dict[tuple[int, str], tuple[Any, Any, str]] = {}

    def pieces(self, chars: int) -> torch.Tensor | None:
        """The vocabulary's pieces table for ``chars`` (``None`` for 0)."""
        if not chars:
            return None
        return torch.from_numpy(word_pieces(vocabulary(self.tokenizer), self.config.model.ngram_buckets, chars))

    def of(self, chars: int, weighting: str) -> tuple[Any, Any, str]:
        """``(x, x_validation, rows_digest)`` of a reading; the digest is of the binarised rows (:func:`fit_key`)."""
        if (chars, weighting) not in self.made:
            m, pieces = self.config.model, self.pieces(chars)
            x = ngram_features(self.train_ids, m.ngram_buckets, max_n=m.ngram_max_n, pieces=pieces)
            xv = ngram_features(self.val_ids, m.ngram_buckets, max_n=m.ngram_max_n, pieces=pieces)
            rows = rows_digest(x, self.labels)
            if weighting == "tfidf":   # as the model's score weighs them (ngram/features.py)
                idf = idf_weights(x)
                x, xv = tfidf_rows(x, idf), tfidf_rows(xv, idf)
            self.made[(chars, weighting)] = (x, xv, rows)
        return self.made[(chars, weighting)]

    def size_ratio(self, chars: int, sample: int = 500) -> float:
        """How many times the entries of words alone the training matrix with ``chars`` pieces holds, measured on
        its first ``sample`` texts (a fit's time grows with them)."""
        m, ids = self.config.model, self.train_ids[:sample]
        alone = ngram_features(ids, m.ngram_buckets, max_n=m.ngram_max_n).nnz
        return ngram_features(ids, m.ngram_buckets, max_n=m.ngram_max_n, pieces=self.pieces(chars)).nnz / max(1, alone)


def _tries_pieces(config: Config, given: frozenset[str], multi_label: bool, tokenizer: Any) -> bool:
    """Whether the stage also fits words with their character n-grams: a word tokenizer, one label per text (a
    multi-label run's rules pin its form), and ``[model] ngram_word_chars`` neither set nor given."""
    return (not config.model.ngram_word_chars and "model.ngram_word_chars" not in given and not multi_label
            and tokenizer_kind(tokenizer) == "word")


def _piece_fits(out: list[Candidate], grid: dict[str, tuple[float, ...]], features: _StageFeatures,
                end: float) -> list[tuple[str, float, tuple[int, str]]]:
    """The fits ``(form, C, (chars, weighting))`` with word pieces: :data:`PIECE_FITS` of the forms in ``grid``
    (NB-LR at its best C on words alone), each kept while the fits' time (the slowest fit on words, times
    :meth:`_StageFeatures.size_ratio`) ends before ``end``."""
    done = [c for c in out if c.complete]
    if not done or time.monotonic() > end:
        return []
    best = {}
    for c in sorted(done, key=Candidate.rank_key, reverse=True):
        best.setdefault(c.settings["model.ngram_fit"], c.settings["model.ngram_c"])
    each = max(c.seconds for c in done) * features.size_ratio(PIECE_CHARS)
    kept, spent = [], time.monotonic()
    for form, C, weighting in PIECE_FITS:
        C = best.get(form) if C == "best" else C
        if C not in grid.get(form, ()):   # a form or C the command line left out
            continue
        spent += each
        if spent > end:
            break
        kept.append((form, C, (PIECE_CHARS, weighting)))
    return kept


def _keep_best_fit(candidates: list[Candidate]) -> None:
    """Drop every n-gram candidate's estimator but the best one's of each reading, words alone and with word pieces
    (on GoEmotions each holds 2,097,153 x 28 weights): the encoder trials take one of the two
    (:func:`_trials_ngram`)."""
    for pieces in (False, True):
        reading = [c for c in candidates if ("model.ngram_word_chars" in c.settings) == pieces]
        best = max(reading, key=Candidate.rank_key, default=None)
        for c in reading:
            if c is not best:
                c.fit = None


def _ngram_fit(config: Config, setting: tuple[str, float, str], reading: tuple[int, str], train: tuple[Any, Any],
               val: tuple[Any, np.ndarray], k: int, cb: TrainCallbacks, stop: StopFlag | None,
               key: str = "") -> Candidate:
    """One n-gram candidate: ``setting`` ``(form, C, class_weight)`` fitted on ``train`` ``(features, labels)`` of
    ``reading`` ``(chars, weighting)`` (``chars``: its word pieces' longest, 0 for none) and scored on ``val``; its
    line told through ``cb.on_note``; its ``fit`` is ``(key, the estimator)`` (``key``:
    :func:`~sentiment_cli.ngram.fit.fit_key`).

    Raises:
        Interrupted: ``stop`` was set (a signal), checked before the fit.
    """
    (form, C, class_weight), (chars, reading_weighting) = setting, reading
    if stop is not None and stop.requested:
        raise Interrupted(f"interrupted by {stop.reason} during the search; the output folder is as it "
                          "was: run the same command again", exit_code=stop.exit_code)
    began = time.perf_counter()
    weighting = fit_weighting(class_weight, train[1])
    fitted = NgramEstimator(k, form, C, class_weight=weighting, limit=fit_limit(config, k)).fit(*train)
    accuracy, nll, losses = _scored(np.asarray(fitted.decision_function(val[0]), np.float64), val[1], k)
    settings = {"model.ngram_fit": form, "model.ngram_c": float(C)}
    if class_weight != config.training.class_weight:
        settings["training.class_weight"] = class_weight
    if chars:
        settings["model.ngram_word_chars"] = chars
    if reading_weighting != config.model.ngram_weighting:
        settings["model.ngram_weighting"] = reading_weighting
    name = f"n-gram alone, {FORM_NAMES[form]} C {C:g}" + ("" if class_weight == "none" else ", classes balanced")
    name += (f", {'TF-IDF, ' if 'model.ngram_weighting' in settings else ''}characters 2-{chars} within words"
             if chars else "")
    c = Candidate(name, "ngram", settings,
                  accuracy=accuracy, nll=nll,
                  seconds=time.perf_counter() - began, losses=losses, fit=(key, fitted))
    cb.on_note(_line(c))
    return c


def fit_order(grid: dict[str, tuple[float, ...]], weighting: str) -> list[tuple[str, float]]:
    """The n-gram stage's fits in the order it makes them, so that a stage its time share cuts short has measured
    each form near its usual best first: each form's C from the middle of its grid outward, the forms
    interleaved, plain LR first over TF-IDF rows (the standard TF-IDF + LR; NB-LR's log-count ratios are defined on
    binary or count features, Wang & Manning 2012) and NB-LR first otherwise.

    >>> fit_order({"nb-lr": (0.1, 0.3, 1.0), "lr": (1.0, 10.0, 30.0)}, "binary")
    [('nb-lr', 0.3), ('lr', 10.0), ('nb-lr', 1.0), ('lr', 30.0), ('nb-lr', 0.1), ('lr', 1.0)]
    """
    def middle_out(Cs: tuple[float, ...]) -> list[float]:
        mid = (len(Cs) - 1) // 2   # the lower middle of an even grid: LR's 3 of (1, 3, 10, 30)
        return sorted(Cs, key=lambda C: (abs(Cs.index(C) - mid), -Cs.index(C)))

    forms = sorted(grid, key=lambda form: (form == "nb-lr") == (weighting == "tfidf"))
    ladders = {form: middle_out(grid[form]) for form in forms}
    return [(form, ladders[form][i]) for i in range(max(map(len, ladders.values()), default=0))
            for form in forms if i < len(ladders[form])]


def _weighting_searched(config: Config, given: frozenset[str], multi_label: bool) -> bool:
    """Whether the n-gram stage also fits unweighted: when the data rules balanced the
    classes (``training.class_weight``, the imbalance rule) and the command line did not pin it. Balanced
    weights help where the validation split's classes are spread unlike the training split's (SST-5's phrases
    and sentences) and cost accuracy where they are spread alike (Wisesight: 0.8 point of dev accuracy); the
    validation split says which (docs/experiments.md, "Class weights chosen on validation"). Single-label runs
    only: a multi-label run's weights are each label's positives'."""
    return (config.training.class_weight == "balanced" and "training.class_weight" not in given
            and not multi_label)


def _scored(scores: np.ndarray, y_val: np.ndarray, k: int) -> tuple[float, float, np.ndarray | None]:
    """``(accuracy, nll, losses)`` of the n-gram score alone on validation, as a trial's run records them: accuracy
    and the log-loss after the temperature, and each row's (``(n_validation,)``); with several labels per text
    (``y_val`` a 0/1 matrix) the subset accuracy at each label's F1 threshold, the binary log-loss after a
    temperature per label, and ``None``."""
    if y_val.ndim == 2:
        rule, p, _, _ = multilabel.fit_decision(scores, y_val)
        chosen = rule.labels(p)
        return float((chosen == y_val.astype(bool)).all(1).mean()), \
            multilabel.binary_nll(scores, y_val, np.asarray(rule.temperatures)), None
    logits = full_logits(scores, k)
    temperature = calibration.fit_temperature(logits, y_val)
    losses = calibration.row_nll(logits, y_val, temperature)
    return float((logits.argmax(1) == y_val).mean()), float(losses.mean()), losses


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
        cb.on_note(_line(c))
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


def _line(c: Candidate) -> str:
    """A candidate's result in one line (``on_note``)."""
    if not c.complete:
        return f"{c.name}: {c.status} after {c.seconds:.0f} s"
    ended = f" ({c.ended})" if c.ended and c.ended != "its schedule" else ""
    return f"{c.name}: validation accuracy {c.accuracy:.2%}, log-loss {c.nll:.4f}, {c.seconds:.1f} s{ended}"

"""The default decides on the user's data: candidates measured on the validation split, within one time budget.

``sentiment train`` with the default preset runs, with ``[training] time_budget`` > 0 (``--time-budget``), within
one :class:`~.budget.Budget` counted from the command's start, every number from the :class:`~.policy.Policy`:

1. **The n-gram score alone** (``ngram_stage.py``), each form and C fitted on the training split and scored on the
   validation split, within :attr:`~.policy.SearchPolicy.ngram_share` of the budget: seconds. It is the floor: a
   model that reads the text no better than a linear one.
2. **Pretraining** (``pretrain.py``: word2vec when the pretrained folder is missing), within
   :attr:`~.policy.SearchPolicy.pretrain_share`, and only when an encoder trial still fits after it
   (``costs.py`` measures both first): otherwise the encoder starts from random vectors, and the note says why.
3. **The encoder with the n-gram score** (``trials.py``), in the settings Optuna's TPE sampler proposes, the data
   rules' first, each trial sized to its part of the budget, while the cheapest trial worth running still fits.
4. **The choice** (:func:`choose`): the lowest validation log-loss after each candidate's own temperature (Guo et
   al. 2017), ties broken by the higher validation accuracy; the best finished encoder trial is kept over a better
   n-gram score alone within :attr:`~.policy.SearchPolicy.encoder_se` paired standard errors (the
   one-standard-error rule, ``docs/decisions.md``). The winner is made the checkpoint's record and refitted when
   the refit rule says and the budget holds it (``refit.py``); the time those take, and
   :attr:`~.policy.SearchPolicy.finish_share` for the work after them, were kept back from the start.

Keys set on the command line (``--set``, ``--epochs``, ...) are fixed: they are not searched. Every candidate, its
settings, scores, seconds and fate are kept in ``metrics.json`` (``"search"``) and shown by the model card.
``time_budget = 0`` trains once with the data rules' settings. This module writes nothing into the output folder:
it returns the winner's result, whose record the orchestrator (``run.py``) writes once.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

from ..card.text import peer_phrase
from ..config import Config
from ..data.splits import DataSpec
from ..errors import SentimentError
from ..runtime import resolve_device
from . import costs
from .budget import Budget
from .callbacks import TrainCallbacks, TrainResult
from .candidate import Candidate, result_line, within_se
from .interrupts import StopFlag
from .ngram_peers import peer_record
from .ngram_stage import NgramStage, ngram_candidates, reads_terms
from .policy import Policy, SearchPolicy
from .run_data import RunData
from .trials import Runner, cheaper, next_level, run_trial, study_for, value_of

__all__ = ["Runner", "choose", "search", "searchable"]


def metric(policy: SearchPolicy) -> str:
    """How the search chooses, in words (``metrics.json``'s ``"search"`` ``"metric"``)."""
    return ("validation log-loss after the temperature; ties: the higher validation accuracy; the best encoder trial "
            f"over the n-gram score alone within {policy.encoder_se:g} standard error")


def searchable(config: Config) -> str | None:
    """Why ``config`` cannot be searched (one phrase), or ``None`` when it can: the search needs validation."""
    if config.data.validation_fraction == 0:
        return "no validation split ([data] validation_fraction = 0): nothing to measure candidates on"
    return None


def search(config: Config, output: Path, cb: TrainCallbacks, stop: StopFlag, data: RunData, given: frozenset[str],
           runner: Runner, budget: Budget, policy: Policy) -> TrainResult:
    """Choose the default's settings on the validation split within ``budget``, and return the winner's result.

    Args:
        config: the default preset with the data rules applied (``auto.py``).
        output: the checkpoint folder (its trial folders are made beside it, and removed).
        cb: the run's progress hooks (each trial's run reports through them; ``on_note`` tells each result).
        stop: the run's stop flag (signals); a trial also stops at its budget's end.
        data: the run's source, read once.
        given: the keys the command line set: not searched.
        runner: the fits (:class:`~.trials.Runner`).
        budget: the whole command's, from its start (reading the data and its rules count too).
        policy: the numbers every stage reads.

    Returns:
        The winner's :class:`TrainResult`, its record in memory (not written), ``metrics.json``'s ``"search"`` in it.

    Raises:
        Interrupted: a signal stopped the search (trial folders are removed).
        DataError, CheckpointError, SentimentError: as :func:`~.run.train`.
    """
    sp = policy.search
    work = budget.less(sp.finish_share * budget.seconds)   # the work after the choice keeps its share
    refits = bool(config.training.refit and "validation" not in data.src.splits)
    workdir = output.parent / f".{output.name}.search"
    shutil.rmtree(workdir, ignore_errors=True)
    try:
        stage = ngram_candidates(config, data, cb, given, work.part(sp.ngram_share * work.seconds), stop,
                                 policy.ngram, policy.rules)
        candidates = list(stage.candidates)
        trials_budget = work.less(_ngram_final_seconds(stage, refits, sp))   # the n-gram score alone's own run
        base = _with_ngram_fit(config, candidates, given, policy)
        val_rows = len(data.splits(DataSpec.from_config(config))[1])
        base, shared, floor = _before_trials(base, cb, stop, data, stage, trials_budget, val_rows, policy)
        if floor is not None:
            candidates += _encoder_trials(base, cb, stop, given, runner, workdir, trials_budget, refits, val_rows,
                                          floor, sp)
        winner, chosen_by = choose(candidates, sp.encoder_se)
        if winner is None:
            raise SentimentError("the search measured no candidate within its time budget; raise --time-budget")
        peers = peer_record(candidates, winner, stage.peers_not_fitted)
        cb.on_stage(f"the search chose {winner.name}: validation log-loss {winner.nll:.4f}, accuracy "
                    f"{winner.accuracy:.2%}" + ("" if chosen_by["rule"] == "log-loss" else f" ({chosen_by['why']})")
                    + f"; {peer_phrase(peers)}")
        result = _make_checkpoint(base if winner.kind == "encoder" else config, winner, cb, stop, runner, refits,
                                  work, stage, sp)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return _recorded(result, candidates, winner, chosen_by, peers, config, budget, shared, sp)


def _ngram_final_seconds(stage: NgramStage, refits: bool, policy: SearchPolicy) -> float:
    """Seconds kept back for the n-gram score alone's own run, should it win: with a refit, its tokenizer,
    features and best fit made again on every row (:attr:`SearchPolicy.refit_factor` times the stage's); else
    nothing (its fit is the stage's, kept)."""
    best = max((c for c in stage.candidates if c.complete), key=Candidate.rank_key, default=None)
    if best is None or not refits:
        return 0.0
    return policy.refit_factor * (stage.setup_seconds + best.seconds)


def _before_trials(config: Config, cb: TrainCallbacks, stop: StopFlag, data: RunData, stage: NgramStage,
                   budget: Budget, val_rows: int, policy: Policy) -> tuple[Config, dict[str, Any], float | None]:
    """The cheapest encoder trial's seconds measured (``costs.py``), then pretraining when a trial still fits
    after it: ``(config, shared work, floor)``. ``floor`` is ``None`` when no trial fits (a note says so); the
    config drops ``init_from`` when pretraining does not fit (a note says so)."""
    t = config.training
    vocab, tokens = stage.units.get(config.data.tokenizer, (stage.vocab_size, stage.mean_tokens))   # their reading's
    step = costs.encoder_step_seconds(config, vocab or config.data.vocab_size, stage.num_labels,
                                      tokens or config.data.max_length, resolve_device(t.device))
    floor = costs.trial_floor(step, config, stage.train_rows, val_rows, policy.search)
    floor = max(floor, policy.search.min_trial_seconds)
    if not budget.fits(floor):
        cb.on_note(f"no encoder trial: the cheapest takes about {floor:,.0f} s here ({step:.2f} s a step), and "
                   f"{budget.remaining():,.0f} s are left in the budget")
        return config, {"pretraining_seconds": 0.0, "trial_floor_seconds": round(floor, 1)}, None
    config, seconds = _pretrain_if_it_fits(config, cb, stop, data, budget, floor, policy.search)
    return config, {"pretraining_seconds": seconds, "trial_floor_seconds": round(floor, 1)}, floor


def _pretrain_if_it_fits(config: Config, cb: TrainCallbacks, stop: StopFlag, data: RunData, budget: Budget,
                         floor: float, policy: SearchPolicy) -> tuple[Config, float]:
    """Make the pretrained encoder ``init_from`` names when it is missing, within :attr:`SearchPolicy.pretrain_share`
    of ``budget``, if its first epoch (measured on a sample, :func:`~.costs.word2vec_seconds`) ends within that share
    and an encoder trial of ``floor`` seconds still fits after it; else start the encoder from random vectors.
    Returns the config the trials read and the seconds pretraining took.

    Raises:
        Interrupted, DataError, CheckpointError, SentimentError: as :func:`~.pretrained.ensure_pretrained`.
    """
    from .pretrained import ensure_pretrained, is_pretrained

    t = config.training
    if not t.init_from or is_pretrained(t.init_from):
        return config, 0.0
    part = budget.part(policy.pretrain_share * budget.seconds)

    def worth(texts: list[str]) -> bool:   # word2vec's first epoch measured on a sample; other objectives run
        if config.pretrain.objective != "word2vec":
            return True
        estimate = costs.word2vec_seconds(config, texts)
        if part.fits(estimate) and budget.fits(estimate + floor):
            return True
        cb.on_note(f"no pretraining: word2vec's first epoch would take about {estimate:,.0f} s and an encoder trial "
                   f"{floor:,.0f} s more, with {budget.remaining():,.0f} s left (its share {part.seconds:,.0f} s); "
                   "the encoder starts from random vectors")
        return False

    began = budget.clock()
    pretrained, _ = ensure_pretrained(config, cb, stop=stop, data=data, budget=part, worth=worth)
    if pretrained is None:
        return config.with_keys({"training.init_from": ""}, "the search: no time to pretrain"), 0.0
    return config, round(budget.clock() - began, 1)


def _encoder_trials(config: Config, cb: TrainCallbacks, stop: StopFlag, given: frozenset[str], runner: Runner,
                    workdir: Path, budget: Budget, refits: bool, val_rows: int, floor: float,
                    policy: SearchPolicy) -> list[Candidate]:
    """The encoder's trials (Optuna's ``study.optimize``, at most :attr:`SearchPolicy.max_trials`), each a run in
    ``workdir`` within its part of ``budget`` (:func:`_trial_budget`), until the next would not fit. A trial stopped
    before it had an epoch does not end the search: the next ones run a cheaper setting (:func:`~.trials.cheaper`).
    Of the finished trials, only the best keeps its result (it alone may win).

    Raises:
        Interrupted: a signal (not the budget) stopped a trial.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study, space = study_for(config, given, policy)
    trials: list[Candidate] = []
    level = 0

    def objective(trial: Any) -> float:
        nonlocal level
        part = _trial_budget(trials, budget, refits, floor, policy)
        settings = {key: trial.suggest_categorical(key, values) for key, values in space.items()}
        settings.update(cheaper(config, given, level, settings))
        c = run_trial(config, settings, len(trials), trial, cb, stop, runner, workdir / f"trial-{len(trials)}",
                      part, val_rows, policy)
        trials.append(c)
        _keep_the_best_result(trials)
        cb.on_note(result_line(c))
        if c.status.startswith("stopped"):   # too slow for its time: each level halves the cost, about
            level = next_level(level, c.needs, part.seconds, policy)
            if not any(x.complete for x in trials):   # the rules' settings again, cheaper, before the sampler's
                study.enqueue_trial({key: value_of(config, key) for key in space})
        if c.status.startswith("pruned"):
            raise optuna.TrialPruned()
        if not c.complete:
            raise _NoScore(c.status)
        return c.accuracy

    def stop_when_none_fits(study: Any, _trial: Any) -> None:
        if _trial_budget(trials, budget, refits, floor, policy) is None:
            study.stop()

    first = _trial_budget(trials, budget, refits, floor, policy)
    if first is None:
        cb.on_note(f"no encoder trial: the cheapest takes about {floor:,.0f} s here, and the first trial's share of the "
                   f"budget is {budget.part(policy.first_trial_share * budget.remaining()).seconds:,.0f} s")
        return trials
    study.optimize(objective, n_trials=policy.max_trials, catch=(_NoScore,), callbacks=[stop_when_none_fits])
    return trials


class _NoScore(Exception):
    """A trial that ended without scores (stopped by the budget, or failed): Optuna records it as failed."""


def _trial_budget(trials: list[Candidate], budget: Budget, refits: bool, floor: float,
                  policy: SearchPolicy) -> Budget | None:
    """The next trial's part of ``budget``, or ``None`` when none fits: once a trial finished, the next must end with
    a refit's time left (:attr:`SearchPolicy.refit_factor` times the longest finished trial); before any did, the
    very first gets :attr:`~SearchPolicy.first_trial_share` of the time left when a refit is to come. No trial
    starts with less than ``floor`` seconds (the cheapest worth running)."""
    done = [c for c in trials if c.complete]
    longest = max((c.seconds for c in done), default=0.0)
    reserve = policy.refit_factor * longest if refits else 0.0
    if done and not budget.fits(longest + reserve):
        return None
    if refits and not trials:
        part = budget.part(policy.first_trial_share * budget.remaining())
    else:
        part = budget.less(reserve).part(math.inf)
    return part if part.seconds >= floor else None


def _keep_the_best_result(trials: list[Candidate]) -> None:
    """Drop the results of finished trials but the best one's (:meth:`Candidate.rank_key`): the choice keeps the
    best encoder trial or none, and each result holds the trial's weights."""
    done = [c for c in trials if c.complete]
    best = max(done, key=Candidate.rank_key, default=None)
    for c in done:
        if c is not best:
            c.result = None


def choose(candidates: list[Candidate], encoder_se: float = 1.0) -> tuple[Candidate | None, dict[str, Any]]:
    """The winner among the finished candidates, and why: the lowest validation log-loss (:meth:`Candidate.rank_key`),
    except that the best finished encoder trial wins over a better n-gram score alone unless the score alone's
    log-loss is lower by more than ``encoder_se`` standard errors of the mean of the two's row-by-row differences
    (the same validation rows, both ``losses`` known; with several labels per text each row's loss is the mean of
    its labels' binary log-losses).

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
    within = within_se(encoder, best, encoder_se)
    if within is None:
        return best, chosen_by
    difference, se = within
    return encoder, {"rule": "one standard error", "nll_difference": round(difference, 6),
                     "standard_error": round(se, 6),
                     "why": f"{encoder.name}'s log-loss is within {encoder_se:g} standard error of {best.name}'s "
                            f"({difference:+.4f}, SE {se:.4f}, paired over {len(encoder.losses):,} validation rows)"}


def _with_ngram_fit(config: Config, candidates: list[Candidate], given: frozenset[str], policy: Policy) -> Config:
    """``config`` with the n-gram candidate's settings every encoder trial reads (:func:`_trials_ngram`): its form
    and C, so that each trial fits the score once instead of choosing its form again by cross-validation on the
    same rows (not when the command line or a multi-label run's rules pinned them, unless it reads term
    frequencies, whose C's are their own), its reading, and its class weights when the stage chose them;
    ``config`` itself when there is no n-gram candidate."""
    ngram = [c for c in candidates if c.kind == "ngram" and c.complete]
    if not ngram:
        return config
    settings = dict(_trials_ngram(ngram, policy.search.encoder_se).settings)
    pinned = config.model.ngram_fit != "auto" and not reads_terms(settings)
    if pinned or given & {"model.ngram_fit", "model.ngram_c"}:
        settings.pop("model.ngram_fit", None), settings.pop("model.ngram_c", None)
    return config.with_keys(settings, "the search: the best n-gram score alone's form and C, and its class "
                            "weights") if settings else config


def _trials_ngram(ngram: list[Candidate], encoder_se: float) -> Candidate:
    """The n-gram candidate whose features and fit the encoder trials read: the best on validation, except that a
    reading of another tokenizer (the character peer's, ``ngram_peers.py``) is taken only when it beats the best on
    the run's own tokens by more than ``encoder_se`` standard errors (the encoder then reads other units: a change
    validation must show), and the best on words alone is taken when its log-loss is within ``encoder_se`` standard
    errors of a better one with word pieces: the pieces made the score alone better on validation and the encoder
    beside it no better (TREC-6: NB-LR with them 0.3798 against 0.3867 on words alone, encoder #0 0.3576 against
    0.3569, ``docs/decisions.md``, word pieces)."""
    best = max(ngram, key=Candidate.rank_key)
    own = [c for c in ngram if "data.tokenizer" not in c.settings]
    if best not in own:
        if not own or within_se(max(own, key=Candidate.rank_key), best, encoder_se) is None:
            return best
        best = max(own, key=Candidate.rank_key)
    words = [c for c in own if "model.ngram_word_chars" not in c.settings]
    if best in words or not words:
        return best
    alone = max(words, key=Candidate.rank_key)
    return alone if within_se(alone, best, encoder_se) is not None else best


def _make_checkpoint(config: Config, winner: Candidate, cb: TrainCallbacks, stop: StopFlag, runner: Runner,
                     refits: bool, budget: Budget, stage: NgramStage, policy: SearchPolicy) -> TrainResult:
    """The winner's result: the n-gram score alone as a run of ``epochs = 0`` (its refit included when the budget
    holds it), or the winning trial's, refitted when the refit rule says and the budget holds it."""
    if winner.kind == "ngram":
        refit = refits and budget.fits(policy.refit_factor * (stage.setup_seconds + winner.seconds))
        if refits and not refit:
            cb.on_note("no time left in the budget for the n-gram score's refit on every row: its fit on the "
                       "training split is kept")
        alone = config.with_keys({**winner.settings, "training.epochs": 0, "training.init_from": "",
                                  "training.distill_reviews": 0, "training.fit_ngram_scale": False,
                                  "training.adversarial_epsilon": 0.0, "training.negation_augment": 0,
                                  "training.lexicon_prior": 0,
                                  "training.refit": refit}, "the search")
        return runner.final(alone, cb, stop)
    chosen = config.with_keys(winner.settings, "the search")
    if refits and winner.ended != "its schedule":   # its epochs do not say what a refit on every row would run
        cb.on_note(f"no refit on every row: {winner.name}'s schedule was {winner.ended}; the held-out run's weights "
                   "are kept")
        chosen = chosen.override("training", origin="the search", refit=False)
    elif refits and not budget.fits(policy.refit_factor * winner.seconds):
        cb.on_note(f"no time left in the budget for the refit on every row: the held-out run's weights are kept "
                   f"(the refit takes about {policy.refit_factor * winner.seconds:.0f} s)")
        chosen = chosen.override("training", origin="the search", refit=False)
    return runner.finish(chosen, winner.result, cb, stop)


def _recorded(result: TrainResult, candidates: list[Candidate], winner: Candidate, chosen_by: dict[str, Any],
              peers: dict[str, Any], config: Config, budget: Budget, shared: dict[str, Any],
              policy: SearchPolicy) -> TrainResult:
    """``result`` with its record's ``metrics.json`` ``"search"``: the budget, the metric, the work shared by the
    trials, every candidate, the choice and the rule that made it (:func:`choose`), the linear peers' best
    candidates beside it (``peers``: :func:`~.ngram_peers.peer_record`), and, when no encoder trial finished, the
    budget that would have fitted one."""
    seconds = budget.elapsed()
    record = {"budget_seconds": config.training.time_budget, "seconds": round(seconds, 1), "metric": metric(policy),
              "sampler": f"Optuna TPE (seed {config.training.seed}), median pruner on each epoch's validation accuracy",
              "shared_work": shared, "candidates": [c.to_dict() for c in candidates], "chosen": winner.name,
              "chosen_settings": winner.settings, "chosen_by": chosen_by, "peers": peers}
    if not any(c.kind == "encoder" and c.complete for c in candidates):
        record["encoder_budget_hint"] = _budget_hint(candidates, seconds, config.training.time_budget, shared, policy)
    for metrics in (result.metrics, result.record.metrics if result.record is not None else {}):
        metrics["search"], metrics["wall_time_seconds"] = record, round(seconds, 1)
    return result


def _budget_hint(candidates: list[Candidate], seconds: float, budget: float, shared: dict[str, Any],
                 policy: SearchPolicy) -> str:
    """The ``--time-budget`` (``"25m"``) that would have fitted one encoder trial: the time the search spent before
    its encoder trials, plus the fastest measured trial's whole schedule (or the cheapest trial's measured floor)
    with a refit's share, rounded up to minutes; twice the budget when nothing was measured."""
    encoders = [c for c in candidates if c.kind == "encoder"]
    needs = [c.needs for c in encoders if c.needs] or ([shared["trial_floor_seconds"]]
                                                        if shared.get("trial_floor_seconds") else [])
    if needs:
        before = max(0.0, seconds - sum(c.seconds for c in encoders))
        total = before + (1 + policy.refit_factor) * min(needs) / policy.size_margin
    else:
        total = 2 * budget
    return f"{math.ceil(total / 60)}m"

"""The default's search on the validation split (training/search.py): the candidates, the choice, the budget.

The orchestration is tested with a stand-in runner (each trial's scores given); the n-gram candidates and the
n-gram score alone (``epochs = 0``) on the committed slices; the whole path through ``sentiment train`` in the
slow lane.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from sentiment_cli.cli import app
from sentiment_cli.config import load_config, parse_duration
from sentiment_cli.errors import ConfigError, DataError, Interrupted, SentimentError, UsageError
from sentiment_cli.inference.predictor import Predictor
from sentiment_cli.training import ngram_stage, search, trials
from sentiment_cli.training.budget import Budget, StepLimit
from sentiment_cli.training.callbacks import TrainCallbacks, TrainResult
from sentiment_cli.training.interrupts import StopFlag
from sentiment_cli.training.policy import DEFAULT
from sentiment_cli.training.run import train
from sentiment_cli.training.run_data import RunData

from .conftest import GOEMOTIONS_SMALL, SMALL_DATA, small_config

REVIEWS = SMALL_DATA.parent / "reviews_small" / "reviews.csv"   # 600 labelled reviews, no dev split
NGRAM = {"ngram_buckets": 1 << 16}
GRID = DEFAULT.ngram.grid_dict()
NO_PEERS = dataclasses.replace(DEFAULT, ngram=dataclasses.replace(DEFAULT.ngram, peer_readings=()))   # own reading
NO_EDGE = dataclasses.replace(NO_PEERS, ngram=dataclasses.replace(NO_PEERS.ngram, edge_steps=0))   # the grid alone


def _stage(cfg, source, given=frozenset(), seconds=600.0, policy=DEFAULT):
    """The n-gram stage's candidates on ``source`` within ``seconds``."""
    return ngram_stage.ngram_candidates(cfg, RunData(str(source)), TrainCallbacks(), given, Budget.starting_now(seconds),
                                        None, policy.ngram).candidates


def _default(source: Path, **training) -> "Config":  # noqa: F821
    """The default preset on ``source`` with the rules' kind of settings, shrunk (no word2vec, short texts)."""
    cfg = load_config("default").override("data", source=str(source), max_length=64, vocab_size=5000,
                                          validation_fraction=0.1)
    cfg = cfg.override("model", ngram_buckets=1 << 16)
    return cfg.override("training", **{"init_from": "", "distill_reviews": 0, "epochs": 2, "device": "cpu",
                                       "refit": True, **training})


# ----------------------------------------------------------------------------- durations and settings

@pytest.mark.parametrize("text, seconds", [("90", 90.0), ("90s", 90.0), ("2.5m", 150.0), ("5min", 300.0),
                                           ("1h", 3600.0), ("0", 0.0), (" 30s ", 30.0)])
def test_a_duration_reads_as_seconds(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-5", "5d", "1e3", "m"])
def test_a_bad_duration_is_a_usage_error(text):
    with pytest.raises(UsageError, match="--time-budget"):
        parse_duration(text)


def test_the_default_preset_searches_and_other_presets_do_not():
    assert load_config("default").training.time_budget == 1800.0
    assert load_config("seed").training.time_budget == 0.0 and load_config("sst5").training.time_budget == 0.0


def test_a_small_set_gets_a_five_minute_budget_by_a_rule():
    from sentiment_cli.training import auto

    small = auto.Profile(train_rows=5000, class_counts=(2500, 2500), has_validation=True, unlabelled=0,
                         length_quantile=30, tokens=60_000)
    large = auto.Profile(train_rows=25_000, class_counts=(12_500, 12_500), has_validation=False, unlabelled=50_000,
                         length_quantile=900, tokens=6_900_000)
    rules = {c.key: c.value for c in auto.data_rules(small, load_config("default"))}
    assert rules["training.time_budget"] == DEFAULT.rules.small_set_budget == 300.0
    assert "training.time_budget" not in {c.key for c in auto.data_rules(large, load_config("default"))}
    assert "training.time_budget" not in {c.key for c in auto.data_rules(small, load_config("seed"))}
    many_rows = auto.Profile(train_rows=21_641, class_counts=(11_000, 10_641), has_validation=True, unlabelled=0,
                             length_quantile=240, tokens=575_000)   # Wisesight read as subwords
    assert "training.time_budget" not in {c.key for c in auto.data_rules(many_rows, load_config("default"))}


def test_a_small_set_of_long_texts_gets_a_budget_for_the_tokens_its_runs_read():
    from sentiment_cli.training import auto

    # Turkish news topics: 2,750 articles, 854,357 tokens; 512 tokens at most, 10 epochs: 8.5M tokens a run
    articles = auto.Profile(train_rows=2750, class_counts=(459,) * 6, has_validation=True, unlabelled=0,
                            length_quantile=1295, tokens=854_357)
    chosen = {c.key: c for c in auto.data_rules(articles, load_config("default"))}
    budget = chosen["training.time_budget"]
    assert budget.value == 1080.0   # 300 s x 8.54M / 2.5M = 1,025 s, in whole minutes
    assert "a run reads 8.5M tokens" in budget.reason and "at most 18 minutes" in budget.reason
    assert chosen["training.epochs"].value == 10 and "data.max_length" not in chosen   # the preset's 512
    # cut at max_length: the same tokens in texts of at most 64 tokens read 2,750 x 64 x 10 = 1.8M
    short = auto.Profile(**{**articles.__dict__, "length_quantile": 60})
    assert {c.key: c.value for c in auto.data_rules(short, load_config("default"))}["training.time_budget"] == 300.0
    # never more than the config's own budget
    config = load_config("default").override("training", time_budget=600.0)
    assert {c.key: c.value for c in auto.data_rules(articles, config)}["training.time_budget"] == 600.0


def test_epochs_0_needs_an_ngram_score_and_ngram_c_a_pinned_form():
    with pytest.raises(ConfigError, match="epochs = 0 keeps the n-gram score alone"):
        small_config(epochs=0)
    with pytest.raises(ConfigError, match="ngram_c pins the C of a pinned form"):
        small_config().override("model", ngram_buckets=1 << 16, ngram_c=1.0)


# ----------------------------------------------------------------------------- the n-gram score alone

def test_epochs_0_is_the_ngram_score_alone_exactly_and_explained(tmp_path):
    cfg = small_config().override("model", **NGRAM, ngram_fit="lr", ngram_c=3.0).override("training", epochs=0)
    result = train(cfg, tmp_path / "alone")
    metrics = result.metrics
    assert metrics["best_epoch"] == 0 and metrics["ngram_score"]["C"] == 3.0 and metrics["ngram_score"]["form"] == "lr"
    assert metrics["history"][0]["train_loss"] is None and metrics["best_validation_accuracy"] > 0.5
    from sentiment_cli.checkpoint import read_weights
    weights = read_weights(tmp_path / "alone" / "model.safetensors")
    assert torch.count_nonzero(weights["head.weight"]) == 0 and torch.count_nonzero(weights["head.bias"]) == 0
    predictor = Predictor(tmp_path / "alone")
    text = "A moving, beautifully acted film with a dull ending."
    explained = predictor.explain([text])[0]
    logits = predictor.logits([text])[0]
    assert abs(sum(explained.scores) + explained.bias - float(logits[1] - logits[0])) < 1e-4
    assert not (tmp_path / "alone" / "curves.png").exists()


def test_the_ngram_score_alone_is_refitted_on_every_row_when_validation_was_held_out(tmp_path):
    cfg = small_config(refit=True).override("model", **NGRAM, ngram_fit="nb-lr") \
        .override("data", source=str(REVIEWS), validation_fraction=0.1).override("training", epochs=0)
    result = train(cfg, tmp_path / "alone")
    assert result.metrics["data"]["train_examples"] == 600 and result.metrics["held_out_run"]["best_epoch"] == 0


def test_several_labels_per_text_also_read_term_frequencies_with_cs_of_their_own():
    """A multi-label run's stage fits sublinear TF-IDF 1-2-grams in 2+ texts at C 100, the rules' binary LR at C 1,
    the first reading with each token's character 2-5-grams at C 100, then the first reading at C 300 and 30; the
    encoder trials take the best one's reading and C (the rules' pinned C only for theirs)."""
    cfg = _default(GOEMOTIONS_SMALL).override("model", ngram_fit="lr", ngram_c=1.0)
    found = _stage(cfg, GOEMOTIONS_SMALL)
    assert [c.settings.get("model.ngram_c") for c in found] == [100.0, 1.0, 100.0, 300.0, 30.0]
    assert found[1].settings == {"model.ngram_fit": "lr", "model.ngram_c": 1.0}
    term = {"model.ngram_weighting": "sublinear", "model.ngram_max_n": 2, "model.ngram_min_df": 2}
    assert all(c.settings.items() >= term.items() for c in found[:1] + found[2:])
    assert [c.settings.get("model.ngram_word_chars") for c in found] == [None, None, 5, None, None]
    assert found[0].name == "n-gram alone, LR C 100, sublinear TF-IDF 1-2-grams in 2+ texts"
    assert found[2].name == found[0].name + ", characters 2-5 within each token"
    assert len({round(c.nll, 6) for c in found}) == 5   # the readings and Cs differ on validation
    for c in found:   # each text's loss, the mean over its labels: the one-standard-error rule pairs them
        assert c.losses.ndim == 1 and c.losses.mean() == pytest.approx(c.nll, rel=1e-9)
    for best in found[:3]:
        trials = search._with_ngram_fit(cfg, [best], frozenset(), DEFAULT)
        assert trials.model.ngram_c == best.settings["model.ngram_c"]
        assert trials.model.ngram_weighting == best.settings.get("model.ngram_weighting", "binary")
        assert trials.model.ngram_word_chars == best.settings.get("model.ngram_word_chars", 0)
    given = _stage(cfg, GOEMOTIONS_SMALL, frozenset({"model.ngram_max_n"}))
    assert len(given) == 1   # a reading's setting given on the command line: no term reading
    pinned = _stage(cfg, GOEMOTIONS_SMALL, frozenset({"model.ngram_word_chars"}))
    assert [c.settings.get("model.ngram_word_chars") for c in pinned] == [None] * 4   # a given 0: no pieces


def test_ngram_candidates_cover_the_grid_and_a_pinned_form_keeps_to_it(monkeypatch):
    monkeypatch.setattr(ngram_stage, "_pieces_lose", lambda new, words: None)   # every fit with pieces (its own test)
    cfg = _default(REVIEWS)
    found = _stage(cfg, REVIEWS, policy=NO_EDGE)   # the grid alone (past its edges: the test below)
    words = [c for c in found if "model.ngram_word_chars" not in c.settings]
    assert [(c.settings["model.ngram_fit"], c.settings["model.ngram_c"]) for c in words] == \
        ngram_stage.fit_order(GRID, "binary")
    assert sorted(c.name for c in words) == sorted(f"n-gram alone, {name} C {C:g}" for name, Cs in
                                                   (("NB-LR", (0.1, 0.3, 1)), ("LR", (1, 3, 10, 30))) for C in Cs)
    # then with each word's character n-grams: TF-IDF + LR at C 3 and 10, NB-LR at its best C on words alone (in the
    # words' binary weighting), the form that did better on words first
    best_nb = max((c for c in words if c.settings["model.ngram_fit"] == "nb-lr"), key=search.Candidate.rank_key)
    lr = [("lr", 3.0, "tfidf"), ("lr", 10.0, "tfidf")]
    nb = [("nb-lr", best_nb.settings["model.ngram_c"], None)]
    first = max(words, key=search.Candidate.rank_key).settings["model.ngram_fit"]
    assert [(c.settings["model.ngram_fit"], c.settings["model.ngram_c"], c.settings.get("model.ngram_weighting"))
            for c in found[len(words):]] == (nb + lr if first == "nb-lr" else lr + nb)
    assert all(c.settings["model.ngram_word_chars"] == DEFAULT.ngram.piece_chars for c in found[len(words):])
    assert all(0.5 < c.accuracy <= 1 and c.nll > 0 for c in found)
    assert len({c.accuracy for c in found}) > 1   # the settings differ on the 60 held-out reviews
    pinned = cfg.override("model", ngram_fit="lr")
    found = _stage(pinned, REVIEWS, frozenset({"model.ngram_fit"}), policy=NO_EDGE)
    assert [c.settings["model.ngram_fit"] for c in found] == ["lr"] * 6
    # a pinned ngram_word_chars (or a character tokenizer) is not searched
    found = _stage(cfg, REVIEWS, frozenset({"model.ngram_word_chars"}), policy=NO_EDGE)
    assert len(found) == 7 and not any("model.ngram_word_chars" in c.settings for c in found)


def test_subword_tokens_get_their_character_ngrams_too():
    """Thai read as Unigram subwords (the units rule's reading, TF-IDF rows): the stage also fits each token's
    character n-grams, NB-LR in the words' own TF-IDF weighting, and never on a character tokenizer."""
    thai = SMALL_DATA.parent / "wisesight_small"
    cfg = _default(thai).override("data", tokenizer="unigram", vocab_size=400)
    cfg = cfg.override("model", ngram_weighting="tfidf")
    found = _stage(cfg, thai)
    pieces = [c for c in found if "model.ngram_word_chars" in c.settings]
    assert len(pieces) == 3 and all(c.settings.get("model.ngram_weighting", "tfidf") == "tfidf" for c in pieces)
    assert {c.settings["model.ngram_fit"] for c in pieces} == {"lr", "nb-lr"}
    chars = cfg.override("data", tokenizer="char").override("model", ngram_max_n=4)
    found = _stage(chars, thai)
    assert found and not any("model.ngram_word_chars" in c.settings for c in found)


def test_the_ngram_stage_measures_each_form_near_its_usual_best_first():
    """Cut short after three fits, the stage has both forms, each at its grid's middle C; over TF-IDF rows plain
    LR (the standard TF-IDF + LR) comes first, over binary features NB-LR."""
    assert ngram_stage.fit_order(GRID, "binary")[:3] == [("nb-lr", 0.3), ("lr", 3.0), ("nb-lr", 1.0)]
    assert ngram_stage.fit_order(GRID, "tfidf")[:4] == [("lr", 3.0), ("nb-lr", 0.3), ("lr", 10.0),
                                                                 ("nb-lr", 1.0)]
    assert sorted(ngram_stage.fit_order(GRID, "tfidf")) == sorted(
        (form, C) for form, Cs in GRID.items() for C in Cs)


def test_balanced_classes_are_checked_on_validation_against_unweighted_ones(monkeypatch):
    """The imbalance rule's balanced weights are a choice the validation split confirms or not: the first form
    and C fitted unweighted too, second (a stage its share cuts short has both), the rest with the better
    weighting; the winner's weighting is what every encoder trial then uses."""
    monkeypatch.setattr(ngram_stage, "_pieces_lose", lambda new, words: None)   # every fit with pieces
    cfg = _default(REVIEWS, class_weight="balanced")
    words = frozenset({"model.ngram_word_chars"})   # words alone: the fits with their characters come last
    found = _stage(cfg, REVIEWS, words, policy=NO_EDGE)
    assert len(found) == 8 and "training.class_weight" not in found[0].settings
    first, unweighted = found[0], found[1]
    assert unweighted.settings == {**first.settings, "training.class_weight": "none"}
    assert first.name.endswith("classes balanced") and not unweighted.name.endswith("classes balanced")
    better = "none" if unweighted.rank_key() > first.rank_key() else "balanced"
    assert all(c.settings.get("training.class_weight", "balanced") == better for c in found[2:])
    assert sorted((c.settings["model.ngram_fit"], c.settings["model.ngram_c"]) for c in found[1:]) == \
        sorted(ngram_stage.fit_order(GRID, "binary"))
    winner = search._with_ngram_fit(cfg, [unweighted], frozenset(), DEFAULT)
    assert winner.training.class_weight == "none" and winner.model.ngram_fit == first.settings["model.ngram_fit"]
    assert search._with_ngram_fit(cfg, [first], frozenset(), DEFAULT).training.class_weight == "balanced"
    # each word's character n-grams are other features: their first fit tests the weighting again, both ways
    found = _stage(cfg, REVIEWS, policy=NO_EDGE)
    pieces = [c for c in found if "model.ngram_word_chars" in c.settings]
    assert len(found) == 8 + 4 and len(pieces) == 4
    a, b = pieces[0].settings, pieces[1].settings
    assert {k: v for k, v in a.items() if k != "training.class_weight"} == \
        {k: v for k, v in b.items() if k != "training.class_weight"}
    assert {a.get("training.class_weight", "balanced"), b.get("training.class_weight", "balanced")} == \
        {"balanced", "none"}
    # pinned on the command line, or not balanced by the rules: no extra fit
    pinned = _stage(cfg, REVIEWS, words | {"training.class_weight"}, policy=NO_EDGE)
    assert len(pinned) == 7
    assert len(_stage(_default(REVIEWS), REVIEWS, words, policy=NO_EDGE)) == 7


def _fitted(form: str, nll_by_C: dict[float, float]) -> list:
    return [search.Candidate(f"n-gram alone, {form} C {C:g}", "ngram", {"model.ngram_fit": form, "model.ngram_c": C},
                             accuracy=0.8, nll=nll) for C, nll in nll_by_C.items()]


def test_the_ngram_stage_goes_past_a_grid_edge_where_the_best_C_is():
    """A form whose best C is its grid's largest (or smallest), by more than one standard error over its neighbour,
    has its optimum beyond: the next C of the ladder, EDGE_STEPS past the edge at most; not before the whole grid is
    fitted, nor for a grid of one C."""
    lr = {1.0: 0.32, 3.0: 0.27, 10.0: 0.25, 30.0: 0.24}
    grid = {"lr": (1.0, 3.0, 10.0, 30.0)}
    assert ngram_stage.past_the_edge(_fitted("lr", lr), grid) == ("lr", 100.0)
    assert ngram_stage.past_the_edge(_fitted("lr", lr | {100.0: 0.23}), grid) == ("lr", 300.0)
    assert ngram_stage.past_the_edge(_fitted("lr", lr | {100.0: 0.23, 300.0: 0.22}), grid) is None   # two steps
    assert ngram_stage.past_the_edge(_fitted("lr", lr | {100.0: 0.245}), grid) is None   # 30 stays the best
    assert ngram_stage.past_the_edge(_fitted("lr", {**lr, 10.0: 0.2}), grid) is None     # the best inside
    assert ngram_stage.past_the_edge(_fitted("lr", {1.0: 0.2, 3.0: 0.27, 10.0: 0.25, 30.0: 0.24}), grid) == \
        ("lr", 0.3)
    assert ngram_stage.past_the_edge(_fitted("lr", {3.0: 0.27, 10.0: 0.25, 30.0: 0.24}), grid) is None  # cut short
    assert ngram_stage.past_the_edge(_fitted("lr", {30.0: 0.24}), {"lr": (30.0,)}) is None   # a pinned C
    # only when the best beats its neighbour inside by more than one paired standard error of its rows' losses
    rows = np.random.default_rng(0).exponential(0.25, 400)
    flat = _fitted("lr", lr)
    for k, (c, shift) in enumerate(zip(flat, (0.05, 0.02, 0.001, 0.0))):   # C 30 beats C 10 by 0.001: within noise
        c.losses = rows + shift + np.random.default_rng(k).normal(0, 0.05, 400)
    assert ngram_stage.past_the_edge(flat, grid) is None
    for k, (c, shift) in enumerate(zip(flat, (0.08, 0.05, 0.03, 0.0))):   # by 0.03 a row: beyond it
        c.losses = rows + shift + np.random.default_rng(k).normal(0, 0.05, 400)
    assert ngram_stage.past_the_edge(flat, grid) == ("lr", 100.0)
    nb = _fitted("nb-lr", {0.1: 0.3, 0.3: 0.31, 1.0: 0.35})
    assert ngram_stage.past_the_edge(nb + _fitted("lr", lr), {"nb-lr": (0.1, 0.3, 1.0), **grid}) == ("nb-lr", 0.03)
    # the stage itself: after the grid, each fit past an edge follows a best C at that edge
    found = _stage(_default(REVIEWS), REVIEWS, frozenset({"model.ngram_word_chars"}), policy=NO_PEERS)
    order = ngram_stage.fit_order(GRID, "binary")
    assert [(c.settings["model.ngram_fit"], c.settings["model.ngram_c"]) for c in found[:len(order)]] == order
    for i in range(len(order), len(found)):
        edge = (found[i].settings["model.ngram_fit"], found[i].settings["model.ngram_c"])
        assert edge == ngram_stage.past_the_edge(found[:i], GRID)
    assert ngram_stage.past_the_edge(found, GRID) is None


def test_past_its_end_the_ngram_stage_still_measures_one_candidate():
    found = _stage(_default(REVIEWS), REVIEWS, seconds=0.0)
    assert len(found) == 1 and found[0].complete
    # with the classes balanced by the rules, that one both ways: the weighting is the encoder's loss's too
    found = _stage(_default(REVIEWS, class_weight="balanced"), REVIEWS, seconds=0.0)
    assert [c.settings.get("training.class_weight") for c in found] == [None, "none"]


def test_the_fits_on_words_leave_time_for_the_first_fit_with_word_pieces():
    """Fits that report 10 s each (and take none): a share of 35 s holds every C of the grid on words alone, but
    with 30 s kept for the fit with pieces only the first. What is kept: the first fit with pieces that still ends
    before the share's end, the best form's or a cheaper one's; nothing when none does."""
    grid = {"nb-lr": (0.3, 1.0, 3.0), "lr": (3.0, 10.0, 30.0)}   # each form's best C inside its grid: no edge

    def fit(form, C, class_weight, reading):
        middle = 1.0 if form == "nb-lr" else 10.0
        return search.Candidate(f"{form} {C}", "ngram", {"model.ngram_fit": form, "model.ngram_c": C}, accuracy=0.8,
                                nll=(0.3 if form == "nb-lr" else 0.4) + abs(np.log(C / middle)) / 100, seconds=10.0)

    words = ngram_stage.Reading(0, "binary", 3, 1)
    def fits_within(seconds):
        return ngram_stage._Fits(fit, "none", False, Budget.starting_now(seconds), DEFAULT.ngram)

    for reserve, fitted in ((None, 6), (lambda: 0.0, 6), (lambda: 30.0, 1)):
        fits = fits_within(35)
        fits.words(grid, words, reserve)
        assert len(fits.out) == fitted
    # a fit's price: its form's slowest fit on words, times the entries pieces add
    features = type("Features", (), {"size_ratio": lambda self, chars: 4.0})()
    done = [fit("nb-lr", 0.3, "none", words), fit("lr", 3.0, "none", words)]
    done[0].seconds, done[1].seconds = 12.0, 30.0
    clock = lambda: 0.0   # noqa: E731 (time stands still: each fit reports its seconds)

    def reserve(done, seconds):
        return ngram_stage._piece_reserve(done, grid, features, Budget(0.0, seconds, clock), DEFAULT.ngram)

    def piece_fits(done, seconds):
        return ngram_stage._piece_fits(done, grid, features, Budget(0.0, seconds, clock), DEFAULT.ngram)

    assert reserve(done, 300) == 48.0   # NB-LR's 12 s x 4, not LR's 30 s
    assert reserve([], 300) == 0.0
    done[1].nll = 0.2   # LR the better form: its fit with pieces first, while it fits
    assert reserve(done, 300) == 120.0
    assert [fit[0] for fit in piece_fits(done, 300)] == ["lr", "lr", "nb-lr"]
    # LR's 120 s no longer fits: NB-LR's 48 s is kept for, and fitted (busy Wisesight, 2026-11-30)
    assert reserve(done, 100) == 48.0
    assert [fit[:2] for fit in piece_fits(done, 100)] == [("nb-lr", 0.3)]
    # none fits: nothing is held back, the words take the time
    assert reserve(done, 40) == 0.0
    fits = ngram_stage._Fits(fit, "none", False, Budget(0.0, 35, clock), DEFAULT.ngram)
    fits.words(grid, words, lambda: ngram_stage._piece_reserve(fits.out, grid, features, fits.budget, DEFAULT.ngram))
    assert len(fits.out) == 6   # each fit with pieces 40 s: none fits in 35 s
    # several labels per text: a fit over terms with pieces is priced as the slowest over terms times the entries
    terms = ngram_stage.Reading(0, "sublinear", 2, 2)
    fits = ngram_stage._Fits(lambda form, C, w, reading: search.Candidate(
        "t", "ngram", {"model.ngram_fit": form, "model.ngram_c": C, "model.ngram_min_df": 2}, accuracy=0.5, nll=0.1,
        seconds=10.0), "none", False, Budget(0.0, 35, clock), DEFAULT.ngram)
    fits.terms(terms, (100.0,))
    fits.terms(terms._replace(chars=5), (100.0,), scale=4.0)   # 40 s: not in 35 s
    fits.terms(terms._replace(chars=5), (100.0,), scale=2.0)   # 20 s: made
    assert len(fits.out) == 2


def test_fits_with_word_pieces_stop_once_one_loses_to_its_form_on_words_beyond_one_standard_error():
    """Three fits with pieces are planned. Where pieces make each row's log-loss worse than the form's best fit on words
    by a margin far above the noise (IMDB's case), the first is the only one made, and a note says why; where they
    make it better, or worse only within one paired standard error, all three are made."""
    rng = np.random.default_rng(0)
    base = rng.gamma(2.0, 0.15, size=400)   # each validation row's log-loss on words alone

    def run(shift: float) -> tuple[list, list[str]]:
        def fit(form, C, class_weight, reading):
            settings = {"model.ngram_fit": form, "model.ngram_c": C}
            losses = base.copy()
            if reading.chars:
                settings["model.ngram_word_chars"] = reading.chars
                losses = base + shift + rng.normal(0.0, 0.05, size=base.size)
            return search.Candidate(f"{form} {C} {reading.chars}", "ngram", settings, accuracy=0.8,
                                    nll=float(losses.mean()), seconds=1.0, losses=losses)

        notes: list[str] = []
        cb = type("Notes", (TrainCallbacks,), {"on_note": lambda self, text: notes.append(text)})()
        grid = {"nb-lr": (1.0,), "lr": (3.0, 10.0)}
        fits = ngram_stage._Fits(fit, "none", False, Budget.starting_now(60), DEFAULT.ngram)
        fits.words(grid, ngram_stage.Reading(0, "binary", 3, 1))
        features = type("Features", (), {"size_ratio": lambda self, chars: 2.0})()
        ngram_stage._add_pieces(fits, load_config("default"), frozenset(), grid, features, cb)
        return [c for c in fits.out if "model.ngram_word_chars" in c.settings], notes

    pieces, notes = run(+0.02)   # worse by 0.02 a row, SE about 0.0025
    assert len(pieces) == 1 and len(notes) == 1 and "no further fit with word pieces" in notes[0]
    for shift in (-0.02, +0.001):   # better; worse within one standard error
        pieces, notes = run(shift)
        assert len(pieces) == 3 and not notes


# ----------------------------------------------------------------------------- the orchestration

class _Clock:
    """A fake clock: each trial the stand-in runner runs advances it by its ``seconds``."""

    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class _Runner:
    """A stand-in for run.py's fits: each encoder trial's validation accuracy from ``scores`` (in order), or
    the exception given there; records what was asked. Each trial takes ``seconds`` of ``clock``."""

    def __init__(self, scores, tmp_path: Path, clock: _Clock | None = None, seconds: float = 0.0):
        self.scores, self.tmp, self.trials, self.finished, self.finals = list(scores), tmp_path, [], [], []
        self.clock, self.seconds = clock, seconds

    def fit(self, config, folder, cb, stop, steps):
        self.trials.append(config)
        if self.clock is not None:
            self.clock.now += self.seconds
        score = self.scores.pop(0) if self.scores else 0.5
        if isinstance(score, BaseException):
            raise score
        folder.mkdir(parents=True)
        return TrainResult(folder, {"calibration": {"accuracy": score, "nll": 1 - score},
                                    "best_validation_accuracy": 0})

    def finish(self, config, trial, cb, stop):
        self.finished.append((config, trial.checkpoint.name))
        return TrainResult(self.tmp / "out", {"chosen": trial.checkpoint.name})

    def final(self, config, cb, stop):
        self.finals.append(config)
        return TrainResult(self.tmp / "out", {"chosen": "ngram"})

    def runner(self):
        return trials.Runner(fit=self.fit, finish=self.finish, final=self.final)


def _search(tmp_path, fake: _Runner, cfg, given=frozenset(), stop=None, budget=None, policy=DEFAULT):
    (tmp_path / "out").mkdir(exist_ok=True)
    budget = budget or Budget.starting_now(cfg.training.time_budget)
    return search.search(cfg, tmp_path / "out", TrainCallbacks(), stop or StopFlag(), RunData(str(REVIEWS)),
                         given, fake.runner(), budget, policy)


def _stops_after(fake: _Runner, n: int) -> None:
    """``fake``'s trials after the ``n``-th are stopped by the budget, as a trial's timing run stops one."""
    fit = fake.fit

    def few(config, folder, cb, stop, steps):
        if len(fake.trials) >= n:
            fake.trials.append(config)
            stop.projected = True
            raise Interrupted("over", resumable=False)
        return fit(config, folder, cb, stop, steps)

    fake.fit = few


def test_the_budget_counts_from_the_commands_start(tmp_path):
    """A run whose reading of the data took all but 10 s of its hour has no time for an encoder trial and says so;
    one that began a minute ago runs its trials, and the first (a refit to come) ends within half of what is left
    of the 98% the finish leaves (SearchPolicy.first_trial_share, finish_share)."""
    cfg = _default(REVIEWS, time_budget=3600.0).override("model", ngram_buckets=0)
    late = _Runner([0.8], tmp_path)
    with pytest.raises(SentimentError, match="raise --time-budget"):
        _search(tmp_path, late, cfg, budget=Budget(0.0, 3600.0, _Clock(3590.0)))
    assert late.trials == []
    clock, ends = _Clock(60.0), []
    fake = _Runner([0.8], tmp_path, clock)
    fit = fake.fit

    def one(config, folder, cb, stop, steps):   # one trial, then the budget is spent
        ends.append(stop.budget.end)
        if fake.trials:
            stop.projected = True
            raise Interrupted("over", resumable=False)
        return fit(config, folder, cb, stop, steps)

    fake.fit = one
    _search(tmp_path, fake, cfg, budget=Budget(0.0, 3600.0, clock))
    p = DEFAULT.search
    work = (1 - p.finish_share) * 3600.0
    assert ends[0] == pytest.approx(60.0 + p.first_trial_share * (work - 60.0))
    assert ends[1] == pytest.approx(work)   # the trials after the first: to the search's end


def test_a_swapped_policy_changes_the_search(tmp_path):
    """The stages read the policy they are given: two trials at most, and a first trial's share of 0.25."""
    cfg = _default(REVIEWS, time_budget=3600.0).override("model", ngram_buckets=0)
    policy = dataclasses.replace(DEFAULT, search=dataclasses.replace(DEFAULT.search, max_trials=2,
                                                                     first_trial_share=0.25))
    clock, ends = _Clock(0.0), []
    fake = _Runner([0.8, 0.85, 0.9, 0.9], tmp_path, clock, seconds=10.0)
    fit = fake.fit
    fake.fit = lambda config, folder, cb, stop, steps: (ends.append(stop.budget.end), fit(config, folder, cb, stop,
                                                                                         steps))[1]
    record = _search(tmp_path, fake, cfg, budget=Budget(0.0, 3600.0, clock), policy=policy).metrics["search"]
    assert len(fake.trials) == 2 and [c["kind"] for c in record["candidates"]] == ["encoder", "encoder"]
    assert ends[0] == pytest.approx(0.25 * 0.98 * 3600.0)


def test_the_rules_are_the_first_trial_and_fixed_keys_are_not_searched(tmp_path):
    cfg = _default(REVIEWS, time_budget=3600.0, lr=2e-3).override("model", ngram_buckets=0)
    fake = _Runner([0.80, 0.85, 0.82, SentimentError("training diverged at epoch 1"), 0.81], tmp_path)
    _stops_after(fake, 5)
    result = _search(tmp_path, fake, cfg, given=frozenset({"training.lr"}))
    record = result.metrics["search"]
    first = fake.trials[0]
    assert (first.training.embedding_lr_scale, first.model.dropout, first.training.token_dropout) == \
        (cfg.training.embedding_lr_scale, cfg.model.dropout, cfg.training.token_dropout)   # the rules' settings
    assert all(t.training.lr == 2e-3 and t.training.refit is True for t in fake.trials)   # fixed; kept for the winner
    assert all("training.lr" not in c["settings"] for c in record["candidates"])
    statuses = [c["status"] for c in record["candidates"]]
    assert statuses[:3] == ["complete"] * 3 and statuses[3].startswith("failed: training diverged")
    assert statuses[-1].startswith("stopped: the budget")
    assert record["chosen"] == "encoder #1" and fake.finished[0][1] == "trial-1"
    assert not (tmp_path / ".out.search").exists()   # the trial folders are gone


def test_the_ngram_score_alone_wins_when_no_encoder_trial_beats_it(tmp_path):
    cfg = _default(REVIEWS, time_budget=3600.0, negation_augment=50)
    fake = _Runner([0.10] + [0.2] * 3, tmp_path)
    _stops_after(fake, 3)
    result = _search(tmp_path, fake, cfg)
    record = result.metrics["search"]
    best = max((c for c in record["candidates"] if c["status"] == "complete"),
               key=lambda c: (-c["validation_nll"], c["validation_accuracy"]))
    assert record["chosen"] == best["name"] and best["kind"] == "ngram"
    alone = fake.finals[0]
    assert alone.training.epochs == 0 and alone.training.refit is True and alone.training.init_from == ""
    assert alone.training.negation_augment == 0   # the encoder's sentences: no work for the score alone
    assert (alone.model.ngram_fit, alone.model.ngram_c) == (best["settings"]["model.ngram_fit"],
                                                            best["settings"]["model.ngram_c"])


def test_a_stopped_trial_does_not_end_the_search_and_the_next_is_cheaper(tmp_path):
    cfg = _default(REVIEWS, time_budget=3600.0, adversarial_epsilon=2.0, negation_augment=50, epochs=4)
    cfg = cfg.override("model", ngram_buckets=0)
    fake = _Runner([0.9], tmp_path)
    fit = fake.fit

    def slow_first(config, folder, cb, stop, steps):   # the first trial's timing run: far too slow for its time
        if not fake.trials:
            fake.trials.append(config)
            cb.needs, cb.rate = 100_000.0, 5.0
            stop.projected = True
            raise Interrupted("over", resumable=False)
        if len(fake.trials) >= 2:
            stop.projected = True
            raise Interrupted("over", resumable=False)
        return fit(config, folder, cb, stop, steps)

    fake.fit = slow_first
    record = _search(tmp_path, fake, cfg).metrics["search"]
    first, second = fake.trials[0], fake.trials[1]
    assert record["candidates"][0]["status"].startswith("stopped: the budget (its timing run, 5 examples/s")
    assert record["candidates"][1]["status"] == "complete" and record["chosen"] == "encoder #1"
    assert (first.training.adversarial_epsilon, first.training.negation_augment) == (2.0, 50)
    # far too slow: the cheapest level at once (no adversarial step, no negated sentences, fewer epochs, shorter)
    assert (second.training.adversarial_epsilon, second.training.negation_augment) == (0.0, 0)
    assert second.training.epochs < first.training.epochs and second.data.max_length < first.data.max_length
    assert record["candidates"][1]["settings"]["training.adversarial_epsilon"] == 0.0
    assert "encoder_budget_hint" not in record


def test_when_no_encoder_finishes_train_says_what_the_user_got(tmp_path):
    from sentiment_cli.card.text import encoder_missing, search_facts

    cfg = _default(REVIEWS, time_budget=120.0)
    fake = _Runner([], tmp_path)

    def too_slow(config, folder, cb, stop, steps):   # every trial's timing run says it cannot fit
        fake.trials.append(config)
        cb.needs, cb.rate = 400.0, 20.0
        stop.projected = True
        raise Interrupted("over", resumable=False)

    fake.fit = too_slow
    record = _search(tmp_path, fake, cfg).metrics["search"]
    assert fake.finals and record["candidates"][record["candidates"].index(
        next(c for c in record["candidates"] if c["name"] == record["chosen"]))]["kind"] == "ngram"
    assert len(fake.trials) >= 2   # a stopped trial did not end the search
    assert record["encoder_budget_hint"].endswith("m") and int(record["encoder_budget_hint"][:-1]) >= 10
    said = encoder_missing(record)
    assert "n-gram score alone" in said and f"--time-budget {record['encoder_budget_hint']}" in said
    assert ("no encoder", said) in search_facts(record)


def test_no_trial_starts_when_the_cheapest_would_not_end_in_time(tmp_path, monkeypatch):
    """The cheapest trial worth running is measured first (costs.py); when it does not fit what the n-gram stage
    and the finish leave, no trial starts, a note says why, and the record says what a trial would need."""
    from sentiment_cli.training import costs

    monkeypatch.setattr(costs, "encoder_step_seconds", lambda *a, **k: 100.0)   # 9 steps: over 15 minutes
    notes = []
    cb = type("Notes", (TrainCallbacks,), {"on_note": lambda self, text: notes.append(text)})()
    cfg = _default(REVIEWS, time_budget=600.0)
    fake = _Runner([0.9], tmp_path)
    (tmp_path / "out").mkdir()
    result = search.search(cfg, tmp_path / "out", cb, StopFlag(), RunData(str(REVIEWS)), frozenset(), fake.runner(),
                           Budget.starting_now(600.0), DEFAULT)
    assert fake.trials == [] and fake.finals and any(n.startswith("no encoder trial: the cheapest takes") for n in notes)
    record = result.metrics["search"]
    assert record["shared_work"]["trial_floor_seconds"] > 900 and int(record["encoder_budget_hint"][:-1]) > 15


def test_the_lower_log_loss_chooses_and_accuracy_breaks_a_tie():
    a = search.Candidate("a", "ngram", {}, accuracy=0.91, nll=0.30)
    b = search.Candidate("b", "encoder", {}, accuracy=0.90, nll=0.25)
    c = search.Candidate("c", "encoder", {}, accuracy=0.95, nll=None, status="pruned at epoch 2")
    d = search.Candidate("d", "encoder", {}, accuracy=0.92, nll=0.25)
    assert max((x for x in (a, b, c) if x.complete), key=search.Candidate.rank_key) is b
    assert max((x for x in (a, b, d) if x.complete), key=search.Candidate.rank_key) is d


def test_a_signal_stops_the_search_and_leaves_the_output_as_it_was(tmp_path):
    cfg = _default(REVIEWS, time_budget=3600.0).override("model", ngram_buckets=0)
    stop = StopFlag()
    stop.request(15)
    fake = _Runner([Interrupted("interrupted by SIGTERM", exit_code=143, resumable=False)], tmp_path)
    with pytest.raises(Interrupted):
        _search(tmp_path, fake, cfg, stop=stop)
    assert not fake.finished and not fake.finals and not (tmp_path / ".out.search").exists()


def test_a_data_error_in_a_trial_stops_the_search(tmp_path):
    cfg = _default(REVIEWS, time_budget=3600.0).override("model", ngram_buckets=0)
    fake = _Runner([DataError("no unlabelled text")], tmp_path)
    with pytest.raises(DataError, match="no unlabelled text"):
        _search(tmp_path, fake, cfg)


def test_a_trials_stop_answers_as_a_stop_flag():
    outer, clock = StopFlag(), _Clock(0.0)
    flag = trials.TrialStop(outer, Budget(0.0, 3600.0, clock))
    assert not flag.requested and not flag.by_budget and not outer.by_budget
    clock.now = 3600.0   # its budget spent
    assert flag.requested and flag.by_budget and flag.reason == "the time budget"
    clock.now = 0.0
    flag.projected = True
    assert flag.requested and flag.by_budget
    outer.request(2)
    assert flag.requested and not flag.by_budget and flag.reason == "SIGINT" and flag.exit_code == 130


def test_without_validation_the_default_trains_once(tmp_path):
    assert search.searchable(_default(REVIEWS)) is None
    assert "no validation split" in search.searchable(_default(REVIEWS).override("data", validation_fraction=0.0))


# ----------------------------------------------------------------------------- the whole path

@pytest.mark.slow   # the default's search on 600 reviews: six n-gram fits, encoder trials, the refit (~1 minute)
def test_train_searches_within_its_budget_and_saves_the_winner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    began = time.monotonic()
    # 60 s: with a refit to come the first trial gets half the time left (FIRST_TRIAL_SHARE), and under
    # MIN_TRIAL_SECONDS (20 s) none starts, so 40 s left no encoder trial at all
    r = CliRunner().invoke(app, ["train", "--data", str(REVIEWS), "--time-budget", "60s", "--device", "cpu",
                                 "--set", "data.max_length=64", "--set", "data.vocab_size=5000",
                                 "--set", "model.ngram_buckets=65536", "--epochs", "2"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "checkpoints" / "default"
    metrics = json.loads((out / "metrics.json").read_text())
    record = metrics["search"]
    # + the refit of the winner, started only when its held-out run's time says it ends within the budget (an
    # encoder's refit may overrun that on a loaded machine: 125 s once, beside two other trainings)
    assert record["budget_seconds"] == 60.0 and record["seconds"] < 60 + 90
    kinds = [c["kind"] for c in record["candidates"]]
    assert kinds[:7] == ["ngram"] * 7 and "encoder" in kinds
    assert all("training.epochs" not in c["settings"] for c in record["candidates"])   # --epochs fixed it
    complete = [c for c in record["candidates"] if c["status"] == "complete"]
    best = max(complete, key=lambda c: (-c["validation_nll"], c["validation_accuracy"]))
    encoder = max((c for c in complete if c["kind"] == "encoder"), key=lambda c: (-c["validation_nll"],
                                                                                 c["validation_accuracy"]))
    by = record["chosen_by"]
    if by["rule"] == "one standard error":   # the encoder, within one standard error of a better n-gram score
        assert best["kind"] == "ngram" and record["chosen"] == encoder["name"]
        assert 0 <= by["nll_difference"] <= by["standard_error"] and by["why"] in " ".join(r.output.split())
        best = encoder
    assert record["chosen"] == best["name"]
    data = metrics["data"]   # refitted on every row; the rule-negated sentence pairs are counted apart
    assert data["train_examples"] == 600
    assert "the search on the validation split" in r.output and best["name"] in r.output
    assert "Search on the validation split" in (out / "README.md").read_text()
    assert not list(tmp_path.glob("checkpoints/.default.search*"))
    assert Predictor(out).predict(["A wonderful, moving film."])[0].label in ("neg", "pos")
    assert time.monotonic() - began < 180


def test_a_signal_during_the_ngram_stage_stops_it_at_once():
    stop = StopFlag()
    stop.request(2)
    with pytest.raises(Interrupted, match="interrupted by SIGINT during the search") as err:
        ngram_stage.ngram_candidates(_default(REVIEWS), RunData(str(REVIEWS)), TrainCallbacks(), frozenset(),
                                     Budget.starting_now(60), stop)
    assert err.value.exit_code == 130


# ----------------------------------------------------------------------------- a trial's budget in the loop

def _trial_run(tmp_path, config, steps: StepLimit, stop: StopFlag | None = None, cb: TrainCallbacks | None = None):
    """One search trial's run through the orchestrator's runner: its record in memory, its step limit ``steps``."""
    from sentiment_cli.training import run

    job = run._Job(tmp_path / "out", cb or TrainCallbacks(), stop or StopFlag(), RunData(config.data.source))
    return run._runner(job, []).fit(config, tmp_path / "trial", cb or TrainCallbacks(), stop or StopFlag(), steps)


def test_a_step_limit_ends_the_run_there_with_the_learning_rate_at_zero(tmp_path):
    # the committed slice: about 15 steps an epoch, so epoch 2 ends after 5 of them
    result = _trial_run(tmp_path, small_config(epochs=4, schedule="cosine"), StepLimit(20))
    history = result.metrics["history"]
    assert len(history) == 2 and history[-1]["learning_rate"] == 0.0
    per_epoch = history[0]["train_examples"]
    assert 0 < history[1]["train_examples"] < per_epoch   # the budget's last step ended epoch 2 early
    assert result.metrics["calibration"] and not result.metrics.get("ended_by_budget")
    assert result.record is not None and not (tmp_path / "trial" / "model.safetensors").exists()   # in memory


def test_a_trial_cut_short_by_the_budget_keeps_its_best_completed_epoch(tmp_path):
    flag = trials.TrialStop(StopFlag(), Budget.starting_now(3600))

    class CutInEpoch2(TrainCallbacks):
        def on_epoch_start(self, epoch, epochs, num_examples):
            flag.projected = epoch == 2

    result = train(small_config(epochs=3), tmp_path / "run", CutInEpoch2(), stop=flag)
    metrics = result.metrics
    assert metrics["ended_by_budget"]["epoch"] == 2 and [r["epoch"] for r in metrics["history"]] == [1]
    assert metrics["best_epoch"] == 1 and metrics["calibration"]["nll"] > 0   # calibrated, as a finished run is
    assert Predictor(tmp_path / "run").predict(["A wonderful film."])[0].label in ("negative", "positive")
    with pytest.raises(Interrupted):   # a signal still interrupts it
        stop = StopFlag()
        stop.request(2)
        train(small_config(epochs=3), tmp_path / "other", stop=trials.TrialStop(stop, Budget.starting_now(3600)))


def test_a_trial_is_sized_from_its_timing_run_or_stopped_when_too_few_steps_fit():
    p = DEFAULT.search

    def hooks(seconds_left):
        clock = _Clock(1000.0)
        flag, limit = trials.TrialStop(StopFlag(), Budget(1000.0, seconds_left, clock)), StepLimit()
        h = trials.TrialCallbacks(TrainCallbacks(), None, flag, limit, epochs=4, batch=64, val_rows=640, policy=p)
        h.on_epoch_start(1, 4, 6400)   # 100 steps an epoch, 400 planned
        h.total_steps = p.timing_steps
        return h, flag, limit

    h, flag, limit = hooks(30.0)   # 10 steps a second: about 240 steps fit in 30 s, validation counted
    h.size(1000.0, 10.0, 0.5, first=True)
    assert not flag.projected and p.timing_steps < limit.steps < 400 and h.sized == (limit.steps, 400)
    assert limit.steps <= p.timing_steps + 10 * 30 * p.size_margin
    h, flag, limit = hooks(1000.0)   # the whole schedule fits: no step limit
    h.size(1000.0, 10.0, 0.5, first=True)
    assert limit.steps is None and h.sized is None and not flag.projected
    h, flag, limit = hooks(5.0)   # under 50 steps fit: stopped at once, with what the whole schedule needs
    h.size(1000.0, 10.0, 0.5, first=True)
    assert flag.projected and h.needs > 37 and limit.steps is None


def test_training_threads_are_the_cores_other_processes_leave_free(monkeypatch):
    import os

    from sentiment_cli import runtime

    monkeypatch.setattr(runtime, "usable_cores", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.9, 0.0, 0.0))   # this process alone
    assert runtime.free_threads(own=1.0) == 2
    monkeypatch.setattr(os, "getloadavg", lambda: (3.9, 0.0, 0.0))   # two other CPU-bound processes beside it
    assert runtime.free_threads(own=2.0) == 1
    monkeypatch.setattr(os, "getloadavg", lambda: (2.2, 0.0, 0.0))   # this run's own two threads
    assert runtime.free_threads(own=2.0) == 2


def test_a_pinned_omp_num_threads_is_kept_over_the_load(monkeypatch):
    """OMP_NUM_THREADS set by the user fixes training's thread count, so float sums repeat whatever the load."""
    from sentiment_cli import runtime

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert runtime.pinned_threads() == 3
    for unset in ("", "0", "two", "-1"):
        monkeypatch.setenv("OMP_NUM_THREADS", unset)
        assert runtime.pinned_threads() is None
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert runtime.pinned_threads() is None


def test_the_ngram_stage_leaves_the_encoder_most_of_the_budget(tmp_path, monkeypatch):
    seen = {}
    real = search.ngram_candidates

    def spy(config, data, cb, given, budget, stop, policy, rules):
        seen["stage"] = budget.seconds
        return real(config, data, cb, given, budget, stop, policy, rules)

    monkeypatch.setattr(search, "ngram_candidates", spy)
    fake = _Runner([0.9], tmp_path)
    _search(tmp_path, fake, _default(REVIEWS, time_budget=1000.0))
    assert seen["stage"] <= DEFAULT.search.ngram_share * 1000.0 and fake.trials   # an encoder trial ran after it


def test_pretraining_gets_its_share_of_the_budget_when_a_trial_still_fits_after_it(tmp_path, monkeypatch):
    """The pretraining stage gets its share of what the search may spend, and starts only when its first epoch
    (measured on a sample) and the cheapest encoder trial after it end in time; else the trials start from random
    vectors and a note says why."""
    from sentiment_cli.training import costs
    from sentiment_cli.training import pretrained as pretrain_module

    seen = {}

    def fake_pretrained(config, cb=None, *, stop=None, data=None, budget=None, worth=None):
        seen["budget"], seen["worth"] = budget, worth(["a text"] * 10)
        return (object(), True) if seen["worth"] else (None, False)

    monkeypatch.setattr(pretrain_module, "ensure_pretrained", fake_pretrained)
    cfg = _default(REVIEWS, time_budget=1000.0, init_from=str(tmp_path / "missing"))
    cfg = cfg.override("model", ngram_buckets=0).override("pretrain", objective="word2vec")
    monkeypatch.setattr(costs, "word2vec_seconds", lambda config, texts: 10.0)
    fake = _Runner([0.9], tmp_path)
    _search(tmp_path, fake, cfg)
    assert seen["worth"] and seen["budget"].seconds <= DEFAULT.search.pretrain_share * 1000.0
    assert fake.trials[0].training.init_from == str(tmp_path / "missing")
    monkeypatch.setattr(costs, "word2vec_seconds", lambda config, texts: 900.0)   # past its 245 s share
    fake = _Runner([0.9], tmp_path)
    _search(tmp_path, fake, cfg)
    assert not seen["worth"] and fake.trials[0].training.init_from == ""


@pytest.mark.slow   # over 5 s on 2 cores: the full suite runs it, the fast lane does not (docs/development.md)
def test_the_trials_build_their_tokenizer_once_per_run():
    """Work done once: trials on the same rows and ``[data]`` keys share the tokenizer (a Unigram trainer takes
    minutes on Wisesight); another vocabulary size builds its own."""
    from sentiment_cli.data.splits import DataSpec

    class Stages(TrainCallbacks):
        def __init__(self):
            self.stages = []

        def on_stage(self, message):
            self.stages.append(message)

    cfg = _default(REVIEWS).override("data", tokenizer="unigram", vocab_size=400)
    run_data, cb = RunData(str(REVIEWS)), Stages()
    train_split, _ = run_data.splits(DataSpec.from_config(cfg))
    first = run_data.tokenizer_json(train_split, cfg.data, cb.on_stage)
    again = run_data.tokenizer_json(train_split, cfg.data, cb.on_stage)
    assert again is first and sum("building the tokenizer" in s for s in cb.stages) == 1
    other = run_data.tokenizer_json(train_split, cfg.override("data", vocab_size=300).data, cb.on_stage)
    assert other != first and sum("building the tokenizer" in s for s in cb.stages) == 2

"""The search's choice (issue 54): the best finished encoder trial over a better n-gram score alone when the two
validation log-losses are within one paired standard error, and the score alone when it is better by more."""

from __future__ import annotations

import numpy as np
import pytest

from sentiment_cli.card.text import search_facts
from sentiment_cli.evaluation import calibration
from sentiment_cli.training.search import Candidate, choose
from sentiment_cli.training.budget import Budget
from sentiment_cli.training.ngram_peers import READING_KEYS
from sentiment_cli.training.policy import DEFAULT


def _candidate(name, kind, losses):
    losses = np.asarray(losses, np.float64)
    return Candidate(name, kind, {}, accuracy=0.9, nll=float(losses.mean()), losses=losses)


def _pair(shift, noise=0.2, n=2000, seed=0):
    rng = np.random.default_rng(seed)
    ngram = rng.exponential(0.3, n)
    return ngram, ngram + shift + rng.normal(0, noise, n)


def test_a_tie_within_one_standard_error_keeps_the_encoder():
    ngram, encoder = _pair(0.002)          # SE = 0.2 / sqrt(2000) = 0.0045: within it
    winner, by = choose([_candidate("n-gram alone", "ngram", ngram), _candidate("encoder #0", "encoder", encoder)])
    assert winner.name == "encoder #0" and by["rule"] == "one standard error"
    assert 0 < by["nll_difference"] < by["standard_error"] and "within 1 standard error" in by["why"]


def test_an_encoder_worse_by_more_than_one_standard_error_loses():
    ngram, encoder = _pair(0.02)
    winner, by = choose([_candidate("n-gram alone", "ngram", ngram), _candidate("encoder #0", "encoder", encoder)])
    assert winner.name == "n-gram alone" and by["rule"] == "log-loss"


def test_the_lowest_log_loss_wins_otherwise():
    ngram, encoder = _pair(-0.01)
    winner, by = choose([_candidate("n-gram alone", "ngram", ngram), _candidate("encoder #0", "encoder", encoder)])
    assert winner.name == "encoder #0" and by["rule"] == "log-loss"
    # without row losses (several labels per text) there is nothing to pair: the lowest log-loss
    a, b = _candidate("n-gram alone", "ngram", ngram), _candidate("encoder #0", "encoder", ngram + 0.001)
    b.losses = None
    assert choose([a, b])[0] is a
    stopped = Candidate("x", "encoder", {}, status="stopped: the budget")
    assert choose([stopped]) == (None, {"rule": "log-loss", "why": "the lowest validation log-loss"})


def test_the_trials_read_words_alone_unless_word_pieces_are_better_by_more_than_one_standard_error():
    """The encoder trials take the n-gram stage's best on words alone when a better fit with each word's character
    n-grams is within one paired standard error of it, and the one with them when it is better by more."""
    from sentiment_cli.training.search import _trials_ngram

    def ngram(name, losses, pieces):
        c = _candidate(name, "ngram", losses)
        c.settings = {"model.ngram_fit": "nb-lr", "model.ngram_c": 1.0, **({"model.ngram_word_chars": 5} if pieces
                                                                            else {})}
        return c

    for shift, wanted in ((0.002, "words"), (0.02, "pieces")):
        words, pieces = _pair(shift)                 # pieces' losses are words' + shift: words lower by shift
        both = [ngram("words", pieces, False), ngram("pieces", words, True)]
        assert _trials_ngram(both, 1.0).name == wanted
    better_words = [ngram("words", _pair(0)[0], False), ngram("pieces", _pair(0.05)[1], True)]
    assert _trials_ngram(better_words, 1.0).name == "words"
    assert _trials_ngram([ngram("pieces", _pair(0)[0], True)], 1.0).name == "pieces"   # nothing else to read


def test_the_card_says_why():
    ngram, encoder = _pair(0.002)
    _, by = choose([_candidate("n-gram alone", "ngram", ngram), _candidate("encoder #0", "encoder", encoder)])
    facts = dict(search_facts({"chosen": "encoder #0", "chosen_by": by, "candidates": []}))
    assert facts["chosen"].startswith("encoder #0 (encoder #0's log-loss is within 1 standard error")


def test_row_nll_is_the_mean_nll():
    rng = np.random.default_rng(1)
    logits, y = rng.normal(size=(50, 4)), rng.integers(0, 4, 50)
    rows = calibration.row_nll(logits, y, 1.7)
    assert rows.shape == (50,) and (rows > 0).all() and calibration.nll(logits, y, 1.7) == pytest.approx(rows.mean())


@pytest.mark.slow   # over 5 s on 2 cores: the full suite runs it, the fast lane does not (docs/development.md)
def test_a_runs_row_losses_pair_with_the_ngram_stage_s_row_by_row(tmp_path):
    """The encoder trial's losses and the n-gram candidates' are the same validation rows in the same order: a run
    that is the n-gram score alone (``epochs = 0``, LR C 3) gives back the n-gram stage's LR C 3 losses row by row."""
    
    from sentiment_cli.training import ngram_stage, search
    from sentiment_cli.training.callbacks import TrainCallbacks
    from sentiment_cli.training.run import train
    from sentiment_cli.training.run_data import RunData

    from .test_search import REVIEWS, _default

    cfg = _default(REVIEWS, refit=False, fit_ngram_scale=False).override("model", ngram_fit="lr", ngram_c=3.0)
    stage = search.ngram_candidates(cfg, RunData(str(REVIEWS)), TrainCallbacks(),
                                    frozenset({"model.ngram_fit", "model.ngram_c"}), Budget.starting_now(60), None,
                                    DEFAULT.ngram).candidates
    (ngram,) = [c for c in stage if not READING_KEYS & set(c.settings)]   # words alone (no peer's reading)
    (pieces,) = [c for c in stage if c.settings.get("model.ngram_word_chars") == DEFAULT.ngram.piece_chars]
    assert pieces.settings == {"model.ngram_fit": "lr", "model.ngram_c": 3.0, "model.ngram_word_chars": 5,
                               "model.ngram_weighting": "tfidf"}   # LR C 10 left out: C 3 was given
    assert pieces.name == "n-gram alone, LR C 3, TF-IDF, characters 2-5 within each token"
    result = train(cfg.override("training", epochs=0, time_budget=0.0), tmp_path / "alone")
    assert result.validation_losses.shape == ngram.losses.shape == (58,)   # 542 + 58 rows
    assert np.corrcoef(result.validation_losses, ngram.losses)[0, 1] > 0.999
    assert result.validation_losses == pytest.approx(ngram.losses, rel=1e-3, abs=1e-4)
    # with the words' character n-grams, the run reads what the stage read: the same vocabulary's pieces
    chars = train(cfg.override("training", epochs=0, time_budget=0.0).with_keys(pieces.settings), tmp_path / "pieces")
    assert chars.validation_losses == pytest.approx(pieces.losses, rel=1e-3, abs=1e-4)
    assert np.abs(chars.validation_losses - result.validation_losses).max() > 1e-3   # and not the words' alone


def test_the_trials_take_the_ngram_stage_s_fit_instead_of_fitting_again(tmp_path, monkeypatch):
    """Work done once (issue 54): the n-gram stage leaves its best fit in the run's data, and a run on the same rows
    and settings (a trial) takes it: no second fit, the same weights."""
    
    from sentiment_cli.ngram.estimator import NgramEstimator
    from sentiment_cli.training import search
    from sentiment_cli.training.callbacks import TrainCallbacks
    from sentiment_cli.training.interrupts import StopFlag
    from sentiment_cli.training.run import _Job, _run
    from sentiment_cli.training.run_data import RunData

    from .test_search import REVIEWS, _default

    cfg = _default(REVIEWS, refit=False).override("model", ngram_fit="lr", ngram_c=3.0)
    data = RunData(str(REVIEWS))
    search.ngram_candidates(cfg, data, TrainCallbacks(), frozenset({"model.ngram_fit", "model.ngram_c"}),
                            Budget.starting_now(60), None, DEFAULT.ngram)
    fits = []
    real = NgramEstimator.fit
    monkeypatch.setattr(NgramEstimator, "fit", lambda self, x, y: fits.append(x.shape) or real(self, x, y))
    job = _Job(tmp_path / "out", TrainCallbacks(), StopFlag(), data)
    result = _run(cfg.override("training", epochs=0, time_budget=0.0), job, saved=None, refit_after=False,
                  output=tmp_path / "trial")
    assert fits == [] and result.metrics["ngram_score"]["C"] == 3.0
    # another C is another fit
    _run(cfg.override("model", ngram_c=10.0).override("training", epochs=0, time_budget=0.0), job, saved=None,
         refit_after=False, output=tmp_path / "other")
    assert len(fits) == 1


def test_the_progress_line_says_whether_the_fit_was_made_or_taken():
    from sentiment_cli.ngram.fit import _fitted
    from sentiment_cli.ngram.score import NgramScore

    from .test_search import _default, REVIEWS

    cfg = _default(REVIEWS).override("model", ngram_fit="lr", ngram_c=3.0, ngram_buckets=1 << 12)
    ids = [[2, 3, 4], [5, 6], [2, 7], [8, 9, 3]] * 5
    labels = [0, 1, 0, 1] * 5
    said, store = [], {}

    def cache(key, make):
        if key not in store:
            store[key] = make()
        return store[key]

    for _ in range(2):
        _fitted(cfg, NgramScore(1 << 12), 2, ids, labels, cache, said.append)
    assert said == [True, False]

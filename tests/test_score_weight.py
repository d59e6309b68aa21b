"""The n-gram score's weight, chosen on validation rows after training (training/score_weight.py)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from sentiment_cli.checkpoint import load_checkpoint
from sentiment_cli.evaluation import calibration
from sentiment_cli.inference.predictor import Predictor
from sentiment_cli.training.run import train
from sentiment_cli.training.policy import DEFAULT
from sentiment_cli.training.score_weight import candidates, choose_scale

LADDER = DEFAULT.fit.ngram_scales
SCALES = candidates()

from .conftest import small_config


def _parts(encoder_noise: float, score_noise: float, n: int = 600, seed: int = 0):
    """Two-class logits of two parts that see the same signal through noise of the given sizes."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    signal = np.where(y == 1, 1.0, -1.0)
    sign = np.array([-1.0, 1.0])
    enc = sign * (signal + rng.normal(0, encoder_noise, n))[:, None] * 2
    score = sign * (signal + rng.normal(0, score_noise, n))[:, None] / 2
    return enc, score, y


def _brute_force(enc, score, y):
    """The grid's choice by a direct search of each scale's best temperature over a fine grid of log T."""
    losses = {s: min(calibration.nll(enc + s * score, y, t) for t in np.exp(np.linspace(-3, 3, 601)))
              for s in SCALES}
    return min(losses, key=losses.get)


def test_a_noisy_encoder_gives_the_score_more_weight_and_a_noisy_score_keeps_the_sum():
    enc, score, y = _parts(encoder_noise=3.0, score_noise=0.5)
    scale, losses = choose_scale(enc, score, y)
    assert scale > 1 and scale == _brute_force(enc, score, y) and set(losses) == set(SCALES)
    enc, score, y = _parts(encoder_noise=0.5, score_noise=3.0)
    scale, losses = choose_scale(enc, score, y)
    assert scale == 1.0 == _brute_force(enc, score, y) and losses[1.0] < losses[1.5]


def test_parts_of_different_shapes_are_refused():
    with pytest.raises(ValueError, match="differ in shape"):
        choose_scale(np.zeros((3, 2)), np.zeros((3, 3)), [0, 1, 1])


# The score's form is fixed (nb-lr) where the weight's choice is what is checked: "auto" cross-validates the
# forms first (seconds per run), which tests/test_ngram.py and the refit's test here keep checking.
NGRAM = {"ngram_buckets": 1 << 16, "ngram_fit": "nb-lr"}


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    """A 2-epoch run that chose its score's weight, configured at 1.25, which is not a candidate: the stored
    weight can only be the choice. Read only: a test that writes into it copies it first."""
    out = tmp_path_factory.mktemp("scaled") / "run"
    train(small_config(epochs=2, fit_ngram_scale=True).override("model", **NGRAM, ngram_scale=1.25), out)
    return out


def test_training_stores_the_chosen_weight_and_predict_uses_it(scaled, tmp_path):
    out = shutil.copytree(scaled, tmp_path / "run")   # the test rewrites its config.json
    fitted = json.loads((out / "metrics.json").read_text())["calibration"]
    stored = json.loads((out / "config.json").read_text())
    assert fitted["ngram_scale"] in SCALES and stored["model"]["ngram_scale"] == fitted["ngram_scale"]
    assert set(fitted["ngram_scale_nll"]) == {f"{s:g}" for s in SCALES}
    assert fitted["nll"] <= fitted["ngram_scale_nll"]["1"] + 1e-9        # no worse than the sum as trained
    ckpt = load_checkpoint(out)
    assert ckpt.model.ngram_score.scale == fitted["ngram_scale"]
    # predict reads the weight from config.json: doubling it there moves its logits
    text = ["A moving, beautifully acted film with a thin plot."]
    scaled = Predictor(out).logits(text)
    stored["model"]["ngram_scale"] = fitted["ngram_scale"] * 2
    (out / "config.json").write_text(json.dumps(stored))
    doubled = Predictor(out).logits(text)
    assert not np.allclose(scaled, doubled)


def test_ngram_scale_min_opens_the_grid_below_1(tmp_path):
    assert candidates() == SCALES == (1.0, 1.5, 2.0, 3.0, 5.0) and candidates(0.5) == LADDER[1:]
    assert candidates(0.0) == LADDER and LADDER[0] == 0.0   # 0: the encoder alone, a candidate of the search
    assert candidates(0.75)[0] == 0.75 and candidates(5.0) == (5.0,)
    cfg = small_config(epochs=1, fit_ngram_scale=True, ngram_scale_min=0.5).override("model", **NGRAM)
    train(cfg, tmp_path / "run")
    fitted = json.loads((tmp_path / "run" / "metrics.json").read_text())["calibration"]
    assert set(fitted["ngram_scale_nll"]) == {"0.5", "0.75", "1", "1.5", "2", "3", "5"}
    assert fitted["ngram_scale"] == min(LADDER[1:], key=lambda s: (fitted["ngram_scale_nll"][f"{s:g}"], abs(s - 1)))


def test_without_the_option_the_configured_weight_stays(tmp_path):
    cfg = small_config(epochs=1).override("model", **NGRAM, ngram_scale=2.0)
    train(cfg, tmp_path / "run")
    assert json.loads((tmp_path / "run" / "config.json").read_text())["model"]["ngram_scale"] == 2.0
    assert "ngram_scale" not in json.loads((tmp_path / "run" / "metrics.json").read_text())["calibration"]


@pytest.mark.slow   # over 5 s on 2 cores: the full suite runs it, the fast lane does not (docs/development.md)
def test_a_refit_keeps_the_held_out_runs_weight(tmp_path):
    cfg = (small_config(epochs=2, fit_ngram_scale=True, refit=True)
           .override("model", ngram_buckets=1 << 16, ngram_scale=1.25).override("data", validation_fraction=0.1))
    train(cfg, tmp_path / "run")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert "held_out_run" in metrics                                       # the refit ran
    scale = metrics["calibration"]["ngram_scale"]
    assert scale in SCALES                                                 # not the configured 1.25
    assert json.loads((tmp_path / "run" / "config.json").read_text())["model"]["ngram_scale"] == scale
    assert load_checkpoint(tmp_path / "run").model.ngram_score.scale == scale


def test_the_model_card_names_the_chosen_weight(scaled):
    from sentiment_cli.card.facts import model_card
    from sentiment_cli.card.text import card_sections

    card = model_card(scaled)
    scale = json.loads((scaled / "metrics.json").read_text())["calibration"]["ngram_scale"]
    assert card["calibration"]["ngram_scale"] == scale
    rows = dict(dict(card_sections(card))["Calibration"])
    assert rows["n-gram score's weight"].startswith(f"{scale:g} ")

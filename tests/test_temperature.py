"""Temperature scaling end to end: fitted at the end of training, stored, applied by predict, reported by eval."""

import json
import shutil

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from sentiment_cli.evaluation import calibration
from sentiment_cli.inference.probabilities import softmax
from sentiment_cli.card.facts import model_card
from sentiment_cli.card.text import card_sections
from sentiment_cli.checkpoint import load_checkpoint, read_record, write_checkpoint
from sentiment_cli.cli import app
from sentiment_cli.data.splits import load_split
from sentiment_cli.errors import CheckpointError
from sentiment_cli.evaluation.evaluate import evaluate_checkpoint
from sentiment_cli.inference.predictor import Predictor
from sentiment_cli.training.run import train

from .conftest import SMALL_DATA, small_config

REVIEWS = ["A moving, beautifully acted film.", "Dull, predictable and far too long.",
           "The plot was thin, but the acting was superb.", "I want those two hours back."]


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    """A checkpoint that learned something (64% validation accuracy on the slice), so its fitted
    temperature is inside the search range rather than at the edge a chance-level model is sent to."""
    out = tmp_path_factory.mktemp("calibrated") / "ckpt"
    train(small_config(epochs=6, lr=5e-3), out)
    return out


def _copy(src, tmp_path, name="copy"):
    dst = tmp_path / name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("trainer_state"))
    return dst


def _config_json(folder):
    return json.loads((folder / "config.json").read_text())


def _validation_logits(folder):
    """The kept epoch's logits on the checkpoint's validation split, and its labels, recomputed from scratch."""
    ckpt = load_checkpoint(folder)
    cfg = ckpt.config
    split = load_split(cfg.data.source, "validation", cfg.data.validation_fraction, cfg.training.seed,
                       cfg.data.validation_split)
    return Predictor(folder).logits(split.texts), split.labels


def test_training_with_validation_fits_and_stores_the_temperature(learned):
    stored = _config_json(learned)["temperature"]
    assert isinstance(stored, float) and 0.05 < stored < 20 and stored != 1.0
    assert load_checkpoint(learned).temperature == stored
    logits, labels = _validation_logits(learned)
    assert stored == pytest.approx(calibration.fit_temperature(logits, labels), rel=1e-4)
    fitted = json.loads((learned / "metrics.json").read_text())["calibration"]
    assert fitted["temperature"] == stored and fitted["bins"] == 15
    assert fitted["ece"] == pytest.approx(calibration.expected_calibration_error(
        softmax(logits, stored), labels), abs=1e-6)
    assert fitted["ece_uncalibrated"] == pytest.approx(calibration.expected_calibration_error(
        softmax(logits), labels), abs=1e-6)
    assert fitted["nll"] <= fitted["nll_uncalibrated"]   # the fit minimises the validation NLL; T = 1 is a candidate


def test_training_without_validation_stores_temperature_one(tmp_path):
    cfg = small_config(epochs=1).override("data", validation_fraction=0.0)
    result = train(cfg, tmp_path / "noval")
    assert _config_json(tmp_path / "noval")["temperature"] == 1.0
    assert result.metrics["calibration"] == {"temperature": 1.0}
    assert load_checkpoint(tmp_path / "noval").temperature == 1.0


def test_predictor_applies_the_temperature_and_keeps_the_labels(learned, tmp_path):
    folder = _copy(learned, tmp_path)
    _set_temperature(folder, 2.5)
    predictor = Predictor(folder)
    assert predictor.temperature == 2.5
    logits = predictor.logits(REVIEWS)
    want = torch.softmax(torch.from_numpy(logits) / 2.5, dim=-1)
    untempered = Predictor(learned)
    for pred, p, u, z in zip(predictor.predict(REVIEWS), want.tolist(), untempered.predict(REVIEWS), logits):
        assert pred.label == u.label
        assert pred.label == ("positive" if z[1] > z[0] else "negative")
        assert list(pred.probabilities.values()) == pytest.approx(p, abs=1e-7)
        assert pred.probability == pytest.approx(max(p), abs=1e-7)
    for e, pred in zip(predictor.explain(REVIEWS), predictor.predict(REVIEWS)):   # explain says what predict says
        assert e.label == pred.label and e.probability == pytest.approx(pred.probability, abs=1e-5)


def test_a_checkpoint_written_before_temperatures_predicts_exactly_as_before(learned, tmp_path):
    folder = _copy(learned, tmp_path)
    raw = _config_json(folder)
    raw.pop("temperature")
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    metrics = json.loads((folder / "metrics.json").read_text())
    metrics.pop("calibration")
    (folder / "metrics.json").write_text(json.dumps(metrics))
    predictor = Predictor(folder)
    assert predictor.temperature == 1.0
    logits = predictor.logits(REVIEWS)
    probs = softmax(logits, 1.0, np.float32)      # the predictor's one post-processing, T = 1
    before = torch.softmax(torch.from_numpy(logits), dim=-1)   # the formula before temperatures existed
    for pred, p, b in zip(predictor.predict(REVIEWS), probs.tolist(), before.tolist()):
        k = int(p[1] > p[0])
        assert pred.label == ("negative", "positive")[k]
        assert list(pred.probabilities.values()) == p and pred.probability == p[k]   # bit for bit
        assert p == pytest.approx(b, abs=2e-7, rel=0)   # torch's softmax: the same to a float32 rounding
    card = model_card(folder)
    assert card["calibration"] == {"temperature": 1.0, "fitted": False, "ece": {}}
    assert "none fitted" in dict(dict(card_sections(card))["Calibration"])["temperature"]


@pytest.mark.parametrize("value", [0, -1.0, "hot", None, True])
def test_an_unusable_temperature_is_a_checkpoint_error_naming_the_file(learned, tmp_path, value):
    folder = _copy(learned, tmp_path)
    raw = _config_json(folder)
    raw["temperature"] = value
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match=r"config\.json: temperature must be a finite number > 0"):
        Predictor(folder)


def test_eval_reports_ece_after_and_before_the_temperature(learned, tmp_path):
    folder = _copy(learned, tmp_path)
    _set_temperature(folder, 3.0)
    r = evaluate_checkpoint(folder, "test", record=False)
    assert r["temperature"] == 3.0
    logits = Predictor(folder).logits(load_split(str(SMALL_DATA), "test", 0.1, 1234).texts)
    labels = load_split(str(SMALL_DATA), "test", 0.1, 1234).labels
    assert r["ece"] == pytest.approx(calibration.expected_calibration_error(softmax(logits, 3.0), labels))
    assert r["ece_uncalibrated"] == pytest.approx(calibration.expected_calibration_error(softmax(logits), labels))
    assert r["ece"] != r["ece_uncalibrated"]
    for key in ("calibrated", "uncalibrated"):
        assert sum(r["reliability"][key]["counts"]) == r["num_examples"] == 500
        assert len(r["reliability"][key]["edges"]) == 16
    _set_temperature(folder, 1.0)
    same = evaluate_checkpoint(folder, "test", record=False)
    assert same["ece"] == same["ece_uncalibrated"] and same["accuracy"] == r["accuracy"]   # labels never move


def test_eval_cli_shows_ece_writes_the_reliability_png_and_the_card_lists_it(learned, tmp_path):
    folder = _copy(learned, tmp_path)
    plot = tmp_path / "test.png"
    r = CliRunner().invoke(app, ["eval", "--checkpoint", str(folder), "--plot", str(plot)])
    assert r.exit_code == 0, r.output
    assert "calibration: ECE" in r.stdout and "without (15 bins)" in r.stdout
    reliability = tmp_path / "test-reliability.png"
    assert "test-reliability.png" in r.stdout
    for png in (plot, reliability):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    j = CliRunner().invoke(app, ["eval", "--checkpoint", str(folder), "--json"])
    out = json.loads(j.stdout)
    assert {"ece", "ece_uncalibrated", "temperature"} <= set(out)
    assert out["temperature"] == _config_json(folder)["temperature"]
    card = model_card(folder)["calibration"]
    assert card["fitted"] and set(card["ece"]) == {"validation", "test"}
    assert card["ece"]["test"]["ece"] == pytest.approx(out["ece"])
    info = CliRunner().invoke(app, ["info", "--checkpoint", str(folder)])
    assert "temperature" in info.stdout and "ECE, test" in info.stdout
    assert "## Calibration" in (folder / "README.md").read_text()


def test_calibration_report_with_temperature_one_has_equal_diagrams():
    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(200, 5)) * 3, rng.integers(0, 5, 200)
    r = calibration.calibration_report(logits, labels, softmax(logits, 1.0), 1.0)
    assert r["ece"] == r["ece_uncalibrated"]
    assert r["reliability"]["calibrated"] == r["reliability"]["uncalibrated"]
    hot = calibration.calibration_report(logits, labels, softmax(logits, 4.0), 4.0)
    assert hot["ece_uncalibrated"] == r["ece"] and hot["ece"] < r["ece"]   # random labels: softer is better


def _set_temperature(folder, temperature):
    """The checkpoint in ``folder`` written again with another temperature (its record read back, changed)."""
    record = read_record(folder)
    record.temperature = temperature
    write_checkpoint(folder, record)

"""Every scorer goes through the one ``Predictor`` (issue 53): its postprocess is what ``eval``, ``predict --data``,
``suggest`` and ``check`` report, and ``predict --explain --data`` runs one forward per batch."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sentiment_cli.behaviour.run import check_checkpoint
from sentiment_cli.behaviour.suite import builtin_suite
from sentiment_cli.cli import app
from sentiment_cli.evaluation.evaluate import evaluate_checkpoint
from sentiment_cli.inference.predictor import Predictor
from sentiment_cli.inference.probabilities import softmax
from sentiment_cli.inference.torch_backend import TorchBackend
from sentiment_cli.suggest import run as suggest_run

from .conftest import SMALL_DATA

runner = CliRunner()
TEST_PARQUET = next((SMALL_DATA / "plain_text").glob("test-*.parquet"))


def _swap_classes(monkeypatch):
    """Patch the predictor's postprocess to give each class the other's probability: a change only a caller
    that goes through it can show."""
    real = Predictor.postprocess

    def swapped(self, logits, dtype=np.float32):
        return np.ascontiguousarray(real(self, logits, dtype)[:, ::-1])

    monkeypatch.setattr(Predictor, "postprocess", swapped)


def test_eval_reports_the_predictors_postprocess(trained_checkpoint, monkeypatch):
    before = evaluate_checkpoint(trained_checkpoint, errors=3, record=False)
    _swap_classes(monkeypatch)
    after = evaluate_checkpoint(trained_checkpoint, errors=3, record=False)
    assert after["accuracy"] == before["accuracy"]                     # the logits' argmax: not postprocessed
    assert after["ece"] != before["ece"]                               # the calibrated side is the postprocess
    assert after["ece_uncalibrated"] == before["ece_uncalibrated"]
    # the listed mistakes are the postprocess's: each names the class the logits do not choose
    p = Predictor(trained_checkpoint)
    chosen = np.asarray(p.labels)[p.logits([e["text"] for e in after["errors"]]).argmax(axis=1)]
    assert after["errors"] and all(e["label"] != c for e, c in zip(after["errors"], chosen))


def test_eval_errors_give_the_probability_predict_gives(trained_checkpoint):
    result = evaluate_checkpoint(trained_checkpoint, errors=3, record=False)
    p = Predictor(trained_checkpoint)
    for e in result["errors"]:
        (pred,) = p.predict([e["text"]])
        # the same postprocess; only the batch differs (one text here, eval's batch there), and a matrix product
        # over another batch shape may round the last float32 bit differently on another CPU (CI saw 1 ulp)
        assert (pred.label, pred.probability) == (e["label"], pytest.approx(e["probability"], abs=0, rel=1e-6))


def test_suggest_and_check_report_the_predictors_postprocess(trained_checkpoint, monkeypatch):
    texts = pq.read_table(TEST_PARQUET).column("text").to_pylist()[:60]
    predictor = Predictor(trained_checkpoint)
    suite = builtin_suite()
    before = suggest_run.suggest(predictor, texts, 5)
    check_before, _ = check_checkpoint(trained_checkpoint, suite, "dev")
    _swap_classes(monkeypatch)
    after = suggest_run.suggest(predictor, texts, 5)
    check_after, _ = check_checkpoint(trained_checkpoint, suite, "dev")
    swapped = {p.text: p.probabilities for p in before.picks}
    for pick in after.picks:   # the same picks (the margin is symmetric), each class given the other's probability
        was = swapped[pick.text]
        assert pick.probabilities == {"negative": was["positive"], "positive": was["negative"]}
    assert check_after["overall"]["mean_failure_rate"] != check_before["overall"]["mean_failure_rate"]


def test_predict_data_columns_are_the_predictors_postprocess(trained_checkpoint, monkeypatch, tmp_path):
    out = tmp_path / "a.parquet"
    _swap_classes(monkeypatch)
    r = runner.invoke(app, ["predict", "--data", str(TEST_PARQUET), "--checkpoint", str(trained_checkpoint),
                            "--output", str(out)])
    assert r.exit_code == 0, r.output
    got = pq.read_table(out)
    p = Predictor(trained_checkpoint)
    want = softmax(p.logits(got.column("text").to_pylist()), p.temperature, np.float32)[:, ::-1]
    np.testing.assert_array_equal(got.column("p_negative").to_numpy(), want[:, 0])


def test_predict_explain_data_runs_one_forward_per_batch(trained_checkpoint, monkeypatch, tmp_path):
    texts = pq.read_table(TEST_PARQUET).column("text").to_pylist()[:300]   # 2 batches of 256 explained rows
    data = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": texts}), data)
    calls = []
    real = TorchBackend.forward

    def counted(self, rows, **kw):
        calls.append(len(rows))
        return real(self, rows, **kw)

    monkeypatch.setattr(TorchBackend, "forward", counted)
    r = runner.invoke(app, ["predict", "--data", str(data), "--checkpoint", str(trained_checkpoint), "--explain"])
    assert r.exit_code == 0, r.output
    assert calls == [256, 44]
    rows = [json.loads(line) for line in r.stdout.split("\n") if line]
    assert len(rows) == 300 and all(row["top_tokens"] for row in rows[:5])


def test_predict_and_explain_report_the_predictors_postprocess(trained_checkpoint, monkeypatch):
    texts = ["A moving, funny film.", "Dull and far too long."]
    p = Predictor(trained_checkpoint)
    before = [x.probabilities for x in p.predict(texts)]
    _swap_classes(monkeypatch)
    swapped = [{"negative": b["positive"], "positive": b["negative"]} for b in before]
    assert [x.probabilities for x in p.predict(texts)] == swapped
    assert [x.probabilities for x in p.explain(texts)] == swapped

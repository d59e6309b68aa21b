"""Every command on a compressed checkpoint (issue 77): eval, predict (--explain, --data), check, suggest, eval
--audit, info and the card, the Python API, serve, and export to ONNX with its int8 tables (predict --onnx and
serve --onnx without torch). Each answer is the float model's that ``compress`` gave, bit for bit where torch
computes it."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import sentiment_cli
from sentiment_cli import checkpoint as ck
from sentiment_cli.cli import app
from sentiment_cli.inference.predictor import Predictor

from .conftest import PYTHON, ROOT, SMALL_DATA, SUBPROCESS_ENV

runner = CliRunner()
TEXTS = ["A moving, beautifully acted film.", "bad", "not good, not bad, just boring " * 30, "!!!"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def folder(compressed_checkpoint, tmp_path_factory):
    """A copy of the compressed checkpoint (eval and export record themselves in the folder)."""
    return shutil.copytree(compressed_checkpoint, tmp_path_factory.mktemp("cmd") / "small")


@pytest.fixture(scope="module")
def float_predictor(folder):
    """The float model ``compress`` gave (``read_record``'s weights held whole), as a predictor: what every
    command on the folder must answer."""
    record = ck.read_record(folder)
    return Predictor(record.loaded(folder))


def test_eval_scores_the_compressed_model(folder, float_predictor):
    from sentiment_cli.data.splits import load_split

    r = invoke("eval", "--checkpoint", folder, "--split", "test", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    test = load_split(str(SMALL_DATA), "test", 0.0, 0)
    logits = float_predictor.logits(test.texts)
    assert out["num_examples"] == 500 and out["accuracy"] == pytest.approx(
        float((logits.argmax(1) == np.asarray(test.labels)).mean()), abs=1e-12)


def test_predict_and_its_explanations_are_the_float_models(folder, float_predictor):
    r = invoke("predict", "--checkpoint", folder, "--explain", "--json", *TEXTS)
    assert r.exit_code == 0, r.output
    got = [json.loads(line) for line in r.stdout.splitlines()]
    want = float_predictor.explain(TEXTS)
    assert [g["label"] for g in got] == [p.label for p in float_predictor.predict(TEXTS)]
    assert all(g["scores"] == pytest.approx(list(e.scores), abs=1e-6) and g["bias"] == pytest.approx(e.bias)
               for g, e in zip(got, want))
    # the explanation is exact: token scores and bias add up to the logit margin
    logits = Predictor(folder).logits(TEXTS)
    for e, row in zip(Predictor(folder).explain(TEXTS), logits):
        assert sum(e.scores) + e.bias == pytest.approx(float(row[1] - row[0]), abs=1e-4)


def test_predict_data_and_the_python_api(folder, float_predictor, tmp_path):
    data = tmp_path / "texts.csv"
    data.write_text("text\n" + "".join(f'"{t}"\n' for t in TEXTS), encoding="utf-8")
    out = tmp_path / "scored.jsonl"
    r = invoke("predict", "--checkpoint", folder, "--data", data, "--output", out)
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    api = sentiment_cli.load(folder)
    assert np.array_equal(api.predict_proba(TEXTS), float_predictor.predict_proba(TEXTS))
    assert [row["label"] for row in rows] == [p.label for p in api.predict(TEXTS)]


def test_check_suggest_and_eval_audit(folder, tmp_path):
    r = invoke("check", "--checkpoint", folder, "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["tests"] and report["overall"] is not None
    pool = tmp_path / "pool.txt"
    pool.write_text("\n".join(f"review {i}: {t}" for i, t in enumerate(TEXTS * 10)), encoding="utf-8")
    r = invoke("suggest", "--checkpoint", folder, "--unlabelled", pool, "-n", 5, "-o", tmp_path / "s.csv",
               "--strategy", "diverse")
    assert r.exit_code == 0, r.output
    assert len((tmp_path / "s.csv").read_text().splitlines()) == 6
    flags = tmp_path / "flags.jsonl"
    flags.write_text(json.dumps({"text": "x", "label": "negative", "given": "negative", "suggested": "positive",
                                 "quality": 0.1, "rank": 1, "line": 2, "reasons": ""}) + "\n")
    r = invoke("eval", "--checkpoint", folder, "--split", "test", "--errors", 3, "--audit", flags, "--json")
    assert r.exit_code == 0, r.output


def test_info_and_the_card_say_what_was_compressed_and_the_size(folder):
    r = invoke("info", "--checkpoint", folder, "--json")
    assert r.exit_code == 0, r.output
    card = json.loads(r.stdout)
    assert card["compression"]["keep"] == {"words": 0.5, "bigrams": 0.25, "ngrams": 0.5}
    assert card["compression"]["bits"] == 8
    assert card["size_bytes"] >= (folder / ck.WEIGHTS_FILE).stat().st_size
    assert card["metrics"]["validation"]["source"].endswith("before compression")
    r = invoke("info", "--checkpoint", folder)
    text = " ".join(r.stdout.split())
    assert "words 50%, word bigrams 25%, n-gram weights 50%; int8 values" in text and "MiB on disk" in text


def test_serve_answers_with_the_compressed_model(folder, float_predictor):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from sentiment_cli.serving.app import create_app
    from sentiment_cli.serving.settings import Loaded

    p = Predictor(folder)
    with TestClient(create_app(lambda: Loaded(p, p.card))) as client:
        for _ in range(600):
            if client.get("/ready").status_code == 200:
                break
        r = client.post("/v1/predict", json={"texts": TEXTS})
    assert r.status_code == 200, r.text
    assert [x["label"] for x in r.json()["predictions"]] == [x.label for x in float_predictor.predict(TEXTS)]


@pytest.fixture(scope="module")
def exported(folder):
    from sentiment_cli.inference.export import export_onnx

    return export_onnx(folder, parity_reviews=200)


@pytest.mark.slow   # a torch.onnx export (seconds)
def test_the_onnx_file_keeps_the_int8_rows_and_is_about_the_weights_size(folder, exported):
    import onnx

    graph = onnx.load(str(exported.path)).graph
    int8 = {t.name: tuple(t.dims) for t in graph.initializer if t.data_type == onnx.TensorProto.INT8}
    assert any(name.endswith("bigram_embedding.values") for name in int8)
    assert any(name.endswith("ngram_score.table.values") for name in int8)
    assert exported.record["parity"]["label_agreement"] == 1.0
    assert exported.record["parity"]["max_logit_difference"] <= 1e-5
    weights = (folder / ck.WEIGHTS_FILE).stat().st_size
    assert exported.path.stat().st_size < weights + 400_000   # + the tokenizer, config and card in its metadata
    onnx_p = Predictor(exported.path, onnx=True)
    assert np.abs(onnx_p.logits(TEXTS) - Predictor(folder).logits(TEXTS)).max() <= 1e-5
    e_onnx, e_torch = onnx_p.explain(TEXTS), Predictor(folder).explain(TEXTS)
    assert all(np.allclose(a.scores, b.scores, atol=1e-5) for a, b in zip(e_onnx, e_torch))


@pytest.mark.slow   # a torch.onnx export (seconds)
def test_serve_onnx_answers_with_the_compressed_model(folder, exported):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from sentiment_cli.serving.app import create_app
    from sentiment_cli.serving.settings import Loaded

    p = Predictor(exported.path, onnx=True)
    with TestClient(create_app(lambda: Loaded(p, p.card))) as client:
        for _ in range(600):
            if client.get("/ready").status_code == 200:
                break
        r = client.post("/v1/predict", json={"texts": TEXTS, "explain": True})
        info = client.get("/v1/info").json()
    assert r.status_code == 200, r.text
    assert [x["label"] for x in r.json()["predictions"]] == [x.label for x in Predictor(folder).predict(TEXTS)]
    assert info["compression"]["bits"] == 8


@pytest.mark.slow   # a process without torch
def test_predict_onnx_of_a_compressed_model_never_imports_torch(exported):
    from .test_export import NO_TORCH

    r = subprocess.run([PYTHON, "-c", NO_TORCH, "predict", "--onnx", "--explain", "--checkpoint",
                        str(exported.path), *TEXTS[:2]], cwd=ROOT, env=SUBPROCESS_ENV, capture_output=True,
                       text=True, timeout=120)
    assert "HEAVY [] EXIT 0" in r.stderr, r.stderr
    assert r.stdout.count("positive") + r.stdout.count("negative") >= 2


@pytest.mark.slow   # a torch.onnx export and ONNX Runtime's dynamic quantization
def test_export_int8_of_a_compressed_model(folder, tmp_path):
    from sentiment_cli.inference.export import export_onnx

    result = export_onnx(folder, tmp_path / "m.int8.onnx", quantize="int8", parity_reviews=100)
    assert result.record["int8"]["accuracy_after"] >= result.record["int8"]["accuracy_before"] - 0.01
    assert Predictor(result.path, onnx=True).predict(TEXTS)

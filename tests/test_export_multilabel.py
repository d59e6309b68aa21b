"""`sentiment export --format onnx` of a multi-label checkpoint (issue 42): its decision rule in the file, the parity
gate per label (every label's logits, the label sets), and `predict --onnx` / `serve --onnx` label sets equal to
PyTorch's."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the onnx extra is part of the test extra; install .[test]")

from sentiment_cli.inference.export import ParityError, export_onnx, multi_label_parity  # noqa: E402
from sentiment_cli.inference.multilabel import Decision  # noqa: E402
from sentiment_cli.inference.predictor import Predictor  # noqa: E402

from .conftest import PYTHON, ROOT, SUBPROCESS_ENV  # noqa: E402

TEXTS = ["I love this so much, thank you!", "This is terrible and I'm angry.", "what? why would anyone do that",
         "ok", "Ünïcödé ✓ — so sad to hear that 😢", "wow, I did not expect that at all " * 20]


# ----------------------------------------------------------------------------- the gate's figures (no export)

def test_multi_label_parity_is_per_label_and_compares_label_sets():
    labels = ("a", "b", "c")
    rule = Decision((1.0, 1.0, 1.0), (0.5, 0.5, 0.5), 0)
    reference = np.array([[3.0, -3.0, 0.0005], [-2.0, 2.0, -4.0]], dtype=np.float32)
    exported = reference.copy()
    exported[0, 2] = -0.0005   # label c's probability crosses its threshold: text 0's label set differs
    check = multi_label_parity(reference, exported, labels, rule)
    assert check["multi_label"] is True and check["reviews"] == 2
    assert check["label_agreement"] == 0.5
    assert check["max_logit_difference_by_label"] == pytest.approx({"a": 0.0, "b": 0.0, "c": 0.001})
    assert check["max_logit_difference"] == pytest.approx(0.001)
    same = multi_label_parity(reference, reference, labels, rule)
    assert same["label_agreement"] == 1.0 and same["max_logit_difference"] == 0.0


# ----------------------------------------------------------------------------- a real export

@pytest.fixture(scope="module")
def exported(tmp_path_factory, multilabel_checkpoint):
    """A copy of the multi-label checkpoint (the export records itself in the folder) and its export."""
    folder = tmp_path_factory.mktemp("ml-export") / "goemotions-small"
    shutil.copytree(multilabel_checkpoint, folder, ignore=shutil.ignore_patterns("trainer_state", "*.onnx", "export_*.json"))
    return folder, export_onnx(folder, parity_reviews=300)


@pytest.mark.slow   # a torch.onnx export of a 28-label model (about 30 s on 2 cores)
def test_export_carries_the_decision_and_checks_each_label(exported):
    from sentiment_cli.inference.onnx_backend import OnnxBackend

    folder, result = exported
    stored = json.loads((folder / "config.json").read_text())["multi_label"]
    backend = OnnxBackend(result.path)
    assert backend.decision == stored                 # the rule travels in the file's metadata
    check = result.record["parity"]
    assert check["multi_label"] is True and check["reviews"] == 300
    assert list(check["max_logit_difference_by_label"]) == list(backend.labels)
    assert max(check["max_logit_difference_by_label"].values()) == check["max_logit_difference"] <= 1e-3
    assert check["label_agreement"] == 1.0            # the label sets are equal on every parity text
    assert json.loads((folder / "export_onnx.json").read_text())["parity"]["multi_label"] is True
    # the graph holds the n-gram score's used rows only (float16), found through an int32 index of every bucket
    import onnx

    rows = json.loads((folder / "config.json").read_text())["model"]["ngram_buckets"] + 1
    tables = {t.data_type: list(t.dims) for t in onnx.load(str(result.path)).graph.initializer
              if t.dims[-1:] == [len(backend.labels)] or list(t.dims) == [rows]}
    assert tables[onnx.TensorProto.INT32] == [rows]
    assert 1 < tables[onnx.TensorProto.FLOAT16][0] < rows // 2   # the slice's model: 17,673 rows of 65,537


@pytest.mark.slow
def test_onnx_label_sets_equal_pytorchs(exported):
    folder, result = exported
    torch_p, onnx_p = Predictor(folder), Predictor(result.path, onnx=True)
    assert onnx_p.multi_label and onnx_p.decision == torch_p.decision
    np.testing.assert_allclose(onnx_p.logits(TEXTS), torch_p.logits(TEXTS), atol=1e-4)
    assert [p.labels for p in onnx_p.predict(TEXTS)] == [p.labels for p in torch_p.predict(TEXTS)]
    got, ref = onnx_p.explain(TEXTS), torch_p.explain(TEXTS)
    for g, r in zip(got, ref):
        assert g.labels == r.labels
        for x, y in zip(g.explanations, r.explanations):
            assert x.tokens == y.tokens and x.scores == pytest.approx(y.scores, abs=1e-4)


@pytest.mark.slow   # a `sentiment predict --onnx` process
def test_predict_onnx_cli_gives_pytorchs_label_sets(exported):
    folder, result = exported
    r = subprocess.run([PYTHON, "-m", "sentiment_cli", "predict", "--onnx", "--json", "--checkpoint",
                        str(result.path), *TEXTS], cwd=ROOT, env=SUBPROCESS_ENV, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in r.stdout.splitlines()]
    assert [g["labels"] for g in got] == [p.labels for p in Predictor(folder).predict(TEXTS)]
    assert all(set(g) == {"text", "labels", "probabilities"} for g in got)


@pytest.mark.slow
def test_serve_onnx_gives_pytorchs_label_sets(exported):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from sentiment_cli.serving.app import create_app
    from sentiment_cli.serving.settings import Loaded

    folder, result = exported
    onnx_p = Predictor(result.path, onnx=True)
    with TestClient(create_app(lambda: Loaded(onnx_p, onnx_p.card))) as client:
        for _ in range(600):
            if client.get("/ready").status_code == 200:
                break
        r = client.post("/v1/predict", json={"texts": TEXTS})
        info = client.get("/v1/info").json()
    assert r.status_code == 200, r.text
    assert [p["labels"] for p in r.json()["predictions"]] == [p.labels for p in Predictor(folder).predict(TEXTS)]
    assert info["multi_label"] is True and list(info["decision"]["thresholds"]) == list(onnx_p.labels)
    assert info["exports"]["onnx"]["parity"]["multi_label"] is True


@pytest.mark.slow   # an export that fails its gate
def test_a_label_off_by_more_than_the_tolerance_fails_the_gate(tmp_path, monkeypatch, multilabel_checkpoint):
    import sentiment_cli.inference.export as export

    real = export._onnx_logits_unsorted

    def one_label_off(*a, **k):
        out = real(*a, **k)
        out[:, 5] += np.float32(0.01)   # label 5 (caring) only
        return out

    monkeypatch.setattr(export, "_onnx_logits_unsorted", one_label_off)
    folder = tmp_path / "ml"
    shutil.copytree(multilabel_checkpoint, folder, ignore=shutil.ignore_patterns("trainer_state", "*.onnx", "export_*.json"))
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(ParityError, match=r"max logit difference 1\.0\de-02 \(label 'caring'\) .*nothing written"):
        export_onnx(folder, parity_reviews=100)
    assert sorted(p.name for p in folder.iterdir()) == before

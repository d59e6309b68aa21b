"""`sentiment export --format onnx`: exact graph (mask, max-pool, bigrams), N classes, temperature, the parity gate,
int8, torch-free use."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime", reason="the onnx extra is part of the test extra; install .[test]")

from sentiment_cli.inference.export import ParityError, export_onnx  # noqa: E402
from sentiment_cli.inference.predictor import Predictor  # noqa: E402

from .conftest import PYTHON, ROOT, SMALL_DATA, SUBPROCESS_ENV, small_config  # noqa: E402

pytestmark = pytest.mark.slow   # torch.onnx exports (seconds each), `sentiment` processes

SST5 = ROOT / "tests" / "data" / "sst5_small"

EDGE = ["A moving, beautifully acted film.", "bad", "Ünïcödé ✓ — fine 👍 <br /> really", "!!!",
        "not good, not bad, just boring and far too long " * 60]   # the last is truncated at max_length


@pytest.fixture(scope="module")
def reviews():
    from sentiment_cli.data.splits import load_split

    return load_split(str(SMALL_DATA), "test", 0.0, 0).texts[:120] + EDGE


@pytest.fixture(scope="module")
def exported(trained_checkpoint, tmp_path_factory):
    """A copy of the session checkpoint (the export records itself in the folder) and its export."""
    folder = tmp_path_factory.mktemp("export") / "ckpt"
    shutil.copytree(trained_checkpoint, folder)
    result = export_onnx(folder, parity_reviews=300)
    return folder, result


@pytest.fixture(scope="module")
def bigram_checkpoint(tmp_path_factory):
    """A tiny model with hashed word bigrams and an n-gram score, trained for 2 epochs (seconds)."""
    from sentiment_cli.training.run import train

    out = tmp_path_factory.mktemp("bigram") / "ckpt"
    train(small_config(epochs=2).override("model", bigram_buckets=997, ngram_buckets=65_537), out)
    return out


def _agree(folder: Path, onnx_file: Path, texts, tol=1e-5):
    torch_p, onnx_p = Predictor(folder), Predictor(onnx_file, onnx=True)
    ref, got = torch_p.logits(texts), onnx_p.logits(texts)
    assert got.shape == ref.shape
    assert np.abs(ref - got).max() <= tol
    assert (ref.argmax(1) == got.argmax(1)).all()
    # batch composition does not matter: one at a time gives the same logits
    alone = np.concatenate([onnx_p.logits([t]) for t in texts[:20]])
    assert np.abs(alone - got[:20]).max() <= tol
    return torch_p, onnx_p


def test_export_matches_pytorch_on_any_batch_and_length(exported, reviews):
    folder, result = exported
    assert result.path == folder / "model.onnx" and result.record["bytes"]["onnx"] == result.path.stat().st_size
    p = result.record["parity"]
    assert p["reviews"] == 300 and p["label_agreement"] == 1.0 and p["max_logit_difference"] < 1e-5
    torch_p, onnx_p = _agree(folder, result.path, reviews)
    assert onnx_p.labels == torch_p.labels == ("negative", "positive")


def _same_explanations(folder: Path, onnx_file: Path, texts):
    ref = Predictor(folder).explain(texts)
    got = Predictor(onnx_file, onnx=True).explain(texts)
    for r, g in zip(ref, got):
        assert g.tokens == r.tokens and g.ids == r.ids and g.spans == r.spans and g.label == r.label
        assert g.target == r.target
        assert g.scores == pytest.approx(r.scores, abs=1e-5)
        assert g.bias == pytest.approx(r.bias, abs=1e-6)
        assert g.margin == pytest.approx(r.margin, abs=1e-4)
        assert set(g.to_dict()) == set(r.to_dict())
    return ref, got


def test_explanations_match_pytorch(exported, reviews):
    folder, result = exported
    ref, _ = _same_explanations(folder, result.path, reviews[:30] + EDGE)
    assert {e.target for e in ref} == {"positive"}     # two classes: always the second label's margin
    assert {e.label for e in ref} == {"negative", "positive"}   # also on reviews predicted negative


@pytest.fixture(scope="module")
def sst5_export(tmp_path_factory):
    """A tiny five-class model trained on the committed SST-5 slice for one epoch (seconds), and its export."""
    from sentiment_cli.config import load_config
    from sentiment_cli.training.run import train

    cfg = load_config(ROOT / "configs" / "seed.toml").override("model", d_model=16, d_ff=32)
    cfg = cfg.override("data", source=str(SST5), vocab_size=2000, max_length=64)
    out = tmp_path_factory.mktemp("sst5") / "model"
    train(cfg.override("training", epochs=1, batch_size=32, device="cpu"), out)
    return out, export_onnx(out, parity_reviews=200)


def test_n_classes_export_with_their_names_logits_and_explanations(sst5_export):
    from sentiment_cli.data.splits import load_split

    folder, result = sst5_export
    texts = load_split(str(SST5), "test").texts[:60] + EDGE
    torch_p, onnx_p = _agree(folder, result.path, texts)
    assert onnx_p.labels == torch_p.labels == ("negative", "neutral", "positive", "very negative", "very positive")
    assert onnx_p.logits(texts).shape == (len(texts), 5)
    ref, got = _same_explanations(folder, result.path, texts)
    assert all(g.target == g.label for g in got)                        # 3+ classes: the predicted class
    assert len({g.target for g in got}) >= 2                            # several targets: not one fixed contrast
    for g, p in zip(got, onnx_p.predict(texts)):
        assert g.to_dict()["probabilities"] == pytest.approx(p.probabilities)


def test_the_checkpoints_temperature_scales_the_probabilities(exported, reviews, tmp_path):
    """config.json's top-level temperature (fitted after training; absent = 1.0): softmax(logits / T)."""
    from sentiment_cli.inference.probabilities import softmax

    folder, result = exported
    texts = reviews[:20]
    logits = Predictor(result.path, onnx=True).logits(texts)
    warm = tmp_path / "warm"
    shutil.copytree(folder, warm)
    config = json.loads((warm / "config.json").read_text())
    config["temperature"] = 2.5
    (warm / "config.json").write_text(json.dumps(config))
    onnx_file = export_onnx(warm, parity_reviews=50).path
    scaled = Predictor(onnx_file, onnx=True)
    assert scaled.temperature == 2.5
    probs = np.asarray([list(p.probabilities.values()) for p in scaled.predict(texts)])
    assert probs == pytest.approx(softmax(logits / 2.5), abs=1e-6)
    assert not probs == pytest.approx(softmax(logits), abs=1e-3)      # it did change them
    assert [p.label for p in scaled.predict(texts)] == [p.label for p in Predictor(result.path, onnx=True).predict(texts)]
    # the export carries the checkpoint's own temperature (fitted on its validation split)
    assert Predictor(result.path, onnx=True).temperature == pytest.approx(
        json.loads((folder / "config.json").read_text()).get("temperature", 1.0))


def test_bigram_hashing_is_reproduced_exactly(bigram_checkpoint, reviews, tmp_path):
    torch_p = Predictor(bigram_checkpoint)
    weight = torch_p.backend.checkpoint.model.bigram_embedding.weight
    assert float(weight[1:].detach().abs().sum()) > 0          # training moved the bigram rows: they matter
    result = export_onnx(bigram_checkpoint, tmp_path / "bigram.onnx", parity_reviews=200)
    _agree(bigram_checkpoint, result.path, reviews)
    # the check is not vacuous: without the bigram rows the logits move by more than the tolerance
    with_bigrams = torch_p.logits(reviews[:50])
    weight.data.zero_()
    assert float(np.abs(torch_p.logits(reviews[:50]) - with_bigrams).max()) > 1e-3


def test_the_ngram_score_is_reproduced_exactly(bigram_checkpoint, reviews, tmp_path):
    torch_p = Predictor(bigram_checkpoint)
    model = torch_p.backend.checkpoint.model
    assert float(model.ngram_score.weight.abs().sum()) > 0            # train fitted the score: it matters
    result = export_onnx(bigram_checkpoint, tmp_path / "ngram.onnx", parity_reviews=200)
    _, onnx_p = _agree(bigram_checkpoint, result.path, reviews)
    # the graph holds the n-gram table as float16 (exact: the fit's weights are kept at float16's precision)
    import onnx

    tables = [t for t in onnx.load(str(result.path)).graph.initializer if t.dims[:1] == [65_538]]
    assert [t.data_type for t in tables] == [onnx.TensorProto.FLOAT16]
    # its explanations add up as the checkpoint's do: token scores + bias = the logit margin
    logits = onnx_p.logits(reviews[:5])
    for e, row in zip(onnx_p.explain(reviews[:5]), logits):
        assert sum(e.scores) + e.bias == pytest.approx(float(row[1] - row[0]), abs=1e-3)
    with_score = torch_p.logits(reviews[:50])
    model.ngram_score.weight.zero_()
    model.ngram_score.bias.zero_()
    assert float(np.abs(torch_p.logits(reviews[:50]) - with_score).max()) > 1e-2


def test_sublinear_term_frequencies_of_bigrams_are_reproduced_exactly(reviews, tmp_path):
    """Sublinear TF-IDF over 1-2-grams in 2+ texts (what a multi-label stage may choose): torch.export once could not
    bound the bigrams' shifted axis (a traceback); now the export runs and matches, repeats counted."""
    from sentiment_cli.training.run import train

    cfg = small_config(epochs=1).override("model", ngram_buckets=65_537, ngram_fit="lr", ngram_c=10.0, ngram_max_n=2,
                                          ngram_weighting="sublinear", ngram_min_df=2)
    train(cfg, tmp_path / "ckpt")
    result = export_onnx(tmp_path / "ckpt", tmp_path / "sublinear.onnx", parity_reviews=100)
    _agree(tmp_path / "ckpt", result.path, reviews + ["great great great great film", "great film"])


def test_a_model_torch_onnx_cannot_trace_is_one_line_and_writes_nothing(trained_checkpoint, tmp_path, monkeypatch):
    import sentiment_cli.inference.export as export

    def fails(*args, **kwargs):
        raise RuntimeError("a long report\n\n## Exception summary\n\nAssertionError: a guard failed\n\n(Refer to x)")

    monkeypatch.setattr(torch.onnx, "export", fails)
    folder = tmp_path / "ckpt"
    shutil.copytree(trained_checkpoint, folder)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(export.TraceError, match=r"^torch.onnx could not export this model \(RuntimeError: "
                                                 r"AssertionError: a guard failed\); nothing was written$"):
        export_onnx(folder, tmp_path / "x.onnx", parity_reviews=10)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_failed_parity_check_writes_nothing(trained_checkpoint, tmp_path, monkeypatch):
    import sentiment_cli.inference.export as export

    real = export._onnx_logits_unsorted
    monkeypatch.setattr(export, "_onnx_logits_unsorted", lambda *a, **k: real(*a, **k) + np.float32(0.01))
    folder = tmp_path / "ckpt"
    shutil.copytree(trained_checkpoint, folder)
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(ParityError, match=r"max logit difference 1\.0\de-02 \(needs <= 1e-03\); nothing written"):
        export_onnx(folder, parity_reviews=100)
    assert sorted(p.name for p in folder.iterdir()) == before     # no file, no temp file, no record


def test_int8_reports_accuracy_and_sizes_and_runs(exported, reviews):
    folder, _ = exported
    # The slice's model is near chance (about 56%), so which of its 500 test reviews int8 flips depends on the CPU's
    # int8 kernels: within 1 point on the hosts CI ran on, 3.8 points on another (2026-11-29, also before the
    # change then tested); the gate is set to 5 points here, and the drop checked against it below.
    result = export_onnx(folder, quantize="int8", parity_reviews=100, max_accuracy_drop=0.05)
    assert result.path == folder / "model.int8.onnx"
    q, b = result.record["int8"], result.record["bytes"]
    # the recorded accuracy is the int8 file's own on the test split, scored here independently
    from sentiment_cli.data.splits import load_split

    test = load_split(str(SMALL_DATA), "test", 0.0, 0)
    got = [p.label for p in Predictor(result.path, onnx=True).predict(test.texts)]
    assert q["test_reviews"] == len(test) == 500
    assert q["accuracy_after"] == pytest.approx(np.mean([g == test.label_names[y] for g, y in zip(got, test.labels)]))
    # the gate's promise (signed: int8 may also score higher); a 500-review slice moves in steps of 0.2 point
    assert round((q["accuracy_before"] - q["accuracy_after"]) * 500) <= 25   # in reviews: at most 5 points
    assert abs(q["accuracy_before"] - q["accuracy_after"]) <= 0.06
    assert b["onnx_int8"] == result.path.stat().st_size < b["onnx"]
    preds = Predictor(result.path, onnx=True).predict(reviews[:10])
    assert all(p.label in ("negative", "positive") for p in preds)
    # the figures are in the model card, the folder's README and the exported file's own card
    from sentiment_cli.card.facts import model_card

    card = model_card(folder)
    assert set(card["exports"]) == {"onnx", "onnx-int8"}
    assert card["exports"]["onnx"]["parity"]["label_agreement"] == 1.0
    readme = (folder / "README.md").read_text()
    assert "## Exports" in readme and "model.int8.onnx" in readme
    assert Predictor(result.path, onnx=True).card["exports"]["onnx-int8"]["int8"] == q


def _cli(*args, check=True):
    r = subprocess.run([PYTHON, "-m", "sentiment_cli", *map(str, args)], cwd=ROOT, env=SUBPROCESS_ENV,
                       capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_predict_onnx_gives_what_predict_gives(exported):
    folder, result = exported
    for extra in ([], ["--explain"]):
        ref = [json.loads(x) for x in _cli("predict", "--json", "--checkpoint", folder, *extra, *EDGE).stdout.splitlines()]
        got = [json.loads(x) for x in _cli("predict", "--json", "--onnx", "--checkpoint", folder, *extra,
                                           *EDGE).stdout.splitlines()]
        assert len(got) == len(ref) == len(EDGE)
        for g, r in zip(got, ref):
            assert set(g) == set(r) and g["label"] == r["label"] and g["text"] == r["text"]
            assert g["probability"] == pytest.approx(r["probability"], abs=1e-5)
            if extra:
                assert g["tokens"] == r["tokens"] and g["scores"] == pytest.approx(r["scores"], abs=1e-5)


NO_TORCH = """
import sys
sys.argv = ["sentiment", *sys.argv[1:]]
from sentiment_cli.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in ("torch", "datasets") if m in sys.modules)
print("HEAVY", heavy, "EXIT", code, file=sys.stderr)
"""


@pytest.mark.parametrize("extra", [["--json"], ["--explain"], []])
def test_predict_onnx_never_imports_torch(exported, extra):
    folder, result = exported
    r = subprocess.run([PYTHON, "-c", NO_TORCH, "predict", "--onnx", "--checkpoint", str(result.path), *extra,
                        "A moving, beautifully acted film."], cwd=ROOT, env=SUBPROCESS_ENV,
                       capture_output=True, text=True, timeout=120)
    assert "HEAVY [] EXIT 0" in r.stderr, r.stderr
    assert "positive" in r.stdout or "negative" in r.stdout


def test_serve_onnx_runs_without_torch(exported):
    pytest.importorskip("fastapi")
    import httpx

    from .serving import start_cli_server

    folder, result = exported
    proc, url = start_cli_server("--onnx", "--checkpoint", str(folder))
    try:
        r = httpx.post(url + "/v1/predict", json={"texts": EDGE, "explain": True}, timeout=60)
        assert r.status_code == 200 and len(r.json()["predictions"]) == len(EDGE)
        assert httpx.get(url + "/v1/info").json()["exports"]["onnx"]["parity"]["reviews"] == 300
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert "onnxruntime" in maps and "libtorch" not in maps     # no torch library in the process
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_export_cli_and_its_errors(exported, tmp_path):
    folder, _ = exported
    r = _cli("export", "--format", "onnx", "--checkpoint", folder, "--output", tmp_path / "m.onnx",
             "--parity-reviews", 50, "--json")
    record = json.loads(r.stdout)
    assert record["parity"]["reviews"] == 50 and (tmp_path / "m.onnx").is_file()
    r = _cli("export", "--format", "onnx", "--checkpoint", folder, "--output", tmp_path / "no" / "m.onnx", check=False)
    assert r.returncode == 2 and r.stderr.startswith("error: --output") and "does not exist" in r.stderr
    r = _cli("export", "--format", "tflite", "--checkpoint", folder, check=False)
    assert r.returncode == 2
    r = _cli("predict", "--onnx", "--checkpoint", tmp_path, "good", check=False)
    assert r.returncode == 1 and "no ONNX model" in r.stderr and "sentiment export" in r.stderr


def test_negation_scope_marks_are_reproduced_exactly(tmp_path, reviews):
    """A model reading negation-scope marks (ids + SCOPE_OFFSET: the scope vector, the n-gram and bigram
    hashes of marked ids) exports exactly, and its explanations name the words as they are written."""
    from sentiment_cli.training.run import train

    folder = tmp_path / "scope"
    cfg = small_config(epochs=2, negation_augment=100).override("model", bigram_buckets=997, ngram_buckets=65_537)
    train(cfg.override("data", negation_scope="clause"), folder)
    torch_p = Predictor(folder)
    assert float(torch_p.backend.checkpoint.model.scope_embedding.weight[1].detach().abs().sum()) > 0   # learned
    negated = ["This is not a good movie.", "I didn't like it, but the cast was great."]
    result = export_onnx(folder, tmp_path / "scope.onnx", parity_reviews=200)
    _, onnx_p = _agree(folder, result.path, reviews + negated)
    e = onnx_p.explain(negated[:1])[0]
    assert [t for t, kind, _ in e.segments() if kind == "token"][:5] == ["This", "is", "not", "a", "good"]

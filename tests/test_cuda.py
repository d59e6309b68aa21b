"""The CUDA path: each preset's training steps, pretraining, resume across devices, inference, export and
serving on a GPU.

Every test here is marked ``cuda`` and skipped, with the reason, where torch sees no CUDA device (CI and
laptops): ``python -m pytest -m cuda`` runs them on a GPU machine. ``SENTIMENT_TEST_CUDA_DEVICE=cpu``
runs the same tests on the CPU, which checks the tests themselves (not the GPU) where there is none.
"""

from __future__ import annotations

import json
import os

import httpx
import numpy as np
import pytest
import torch

from sentiment_cli.checkpoint import read_weights
from sentiment_cli.config import load_config
from sentiment_cli.errors import Interrupted
from sentiment_cli.inference.export import export_onnx
from sentiment_cli.inference.predictor import Predictor
from sentiment_cli.training.interrupts import StopFlag
from sentiment_cli.training.run import resume, train
from sentiment_cli.training.pretrain import pretrain

from .conftest import SMALL_DATA, small_config
from .serving import start_cli_server
from .test_resume import StopAfter, resume_config

DEVICE = os.environ.get("SENTIMENT_TEST_CUDA_DEVICE", "cuda")
pytestmark = pytest.mark.cuda

TEXTS = ["A moving, beautifully acted film.", "Dull, predictable and far too long.",
         "Not bad at all.", "I can't say I enjoyed it, but the score was lovely and the cast did well."]


def shrunk(preset: str, bf16: bool, device: str = DEVICE):
    """``preset`` as shipped, on the committed slice, small enough for seconds: one epoch, no pretraining
    stage, no unlabelled text (the slice has none), its own layer sizes and switches kept."""
    data = SMALL_DATA.parent / "sst5_small" if preset == "sst5" else SMALL_DATA
    cfg = load_config(preset).override("data", source=str(data), vocab_size=5000, max_length=128,
                                       validation_fraction=0.1)
    return cfg.override("training", epochs=1, device=device, autocast_bf16=bf16, init_from="", distill_reviews=0,
                        patience=0)


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("preset", ["seed", "default", "sst5", "gpu"])
def test_each_preset_trains_on_the_gpu_and_its_checkpoint_loads_on_the_cpu(preset, bf16, tmp_path):
    result = train(shrunk(preset, bf16), tmp_path / "ck")
    record = result.metrics["history"][-1]
    assert result.metrics["device"].startswith(DEVICE)
    assert np.isfinite(record["train_loss"]) and np.isfinite(record["validation_loss"])
    weights = read_weights(tmp_path / "ck" / "model.safetensors")
    assert all(t.device.type == "cpu" and torch.isfinite(t).all() for t in weights.values())
    predictor = Predictor(tmp_path / "ck")
    probs = np.array([p.probability for p in predictor.predict(TEXTS)])
    assert ((probs >= 1 / len(predictor.labels) - 1e-6) & (probs <= 1.0)).all()   # the top label's, on the CPU


@pytest.mark.parametrize("objective", ["mlm", "electra"])
def test_pretraining_runs_on_the_gpu_under_bf16(objective, tmp_path):
    cfg = small_config(device=DEVICE, autocast_bf16=True).override(
        "pretrain", objective=objective, splits="train", epochs=2, negatives=256, lr=3e-3)
    metrics = pretrain(cfg, tmp_path / "enc").metrics
    first, last = metrics["history"]
    key = "rtd_loss" if objective == "electra" else "mlm_loss"
    assert last[key] < first[key] and metrics["device"].startswith(DEVICE)


@pytest.fixture(scope="module")
def gpu_checkpoint(tmp_path_factory):
    """A model trained on the GPU for a few epochs: what inference, export and serving read."""
    out = tmp_path_factory.mktemp("cuda") / "ck"
    train(small_config(epochs=3, device=DEVICE), out)
    return out


def _stopped_after_one_epoch(folder, device: str):
    stop = StopFlag()
    with pytest.raises(Interrupted):
        train(resume_config().override("training", device=device), folder, StopAfter(1, stop), stop=stop)


@pytest.mark.parametrize("first,then", [(DEVICE, "cpu"), ("cpu", DEVICE)], ids=["gpu-to-cpu", "cpu-to-gpu"])
def test_a_run_stopped_on_one_device_resumes_on_the_other(first, then, tmp_path):
    _stopped_after_one_epoch(tmp_path / "run", first)
    resumed = resume(tmp_path / "run", device=then)
    history = resumed.metrics["history"]
    assert [r["epoch"] for r in history] == [1, 2, 3] and resumed.metrics["device"].startswith(then)
    assert all(np.isfinite(r["train_loss"]) for r in history)
    # the same run, never stopped, on the first device: close (dropout draws differ across devices)
    full = train(resume_config().override("training", device=first), tmp_path / "full")
    assert abs(full.metrics["history"][-1]["validation_accuracy"] - history[-1]["validation_accuracy"]) <= 0.1


def test_predictions_and_explanations_on_the_gpu_equal_the_cpus(gpu_checkpoint):
    cpu, gpu = Predictor(gpu_checkpoint, device="cpu"), Predictor(gpu_checkpoint, device=DEVICE)
    assert np.abs(cpu.logits(TEXTS) - gpu.logits(TEXTS)).max() <= 1e-4
    for a, b in zip(cpu.explain(TEXTS), gpu.explain(TEXTS)):
        assert a.label == b.label and a.tokens == b.tokens
        assert np.abs(np.asarray(a.scores) - np.asarray(b.scores)).max() <= 1e-4


def test_a_gpu_trained_checkpoint_exports_through_the_parity_gate(gpu_checkpoint, tmp_path):
    pytest.importorskip("onnxruntime")
    result = export_onnx(gpu_checkpoint, tmp_path / "model.onnx", parity_reviews=200)
    onnx = Predictor(tmp_path / "model.onnx", onnx=True)
    assert np.abs(onnx.logits(TEXTS) - Predictor(gpu_checkpoint).logits(TEXTS)).max() <= 1e-4
    assert result.record["parity"]["label_agreement"] == 1.0


@pytest.mark.slow   # a `sentiment serve` process
def test_serve_on_the_gpu_answers_as_predict_does(gpu_checkpoint):
    proc, url = start_cli_server("--checkpoint", str(gpu_checkpoint), "--device", DEVICE)
    try:
        got = httpx.post(url + "/v1/predict", json={"texts": TEXTS}, timeout=30).json()["predictions"]
    finally:
        proc.terminate()
        proc.wait(30)
    want = Predictor(gpu_checkpoint).predict(TEXTS)
    assert [g["label"] for g in got] == [w.label for w in want]
    assert np.abs(np.array([g["probability"] for g in got]) - [w.probability for w in want]).max() <= 1e-4
    assert json.loads(json.dumps(got))   # plain JSON, no NaN

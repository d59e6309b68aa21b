import json
import os
import shutil

import numpy as np
import pytest
import torch

from sentiment_cli import checkpoint as ck
from sentiment_cli.errors import CheckpointError
from sentiment_cli.inference.predictor import Predictor

PROBE = ["A moving, beautifully acted film.", "Dull and far too long.", "ok"]


def test_round_trip_gives_identical_ids_and_logits(trained_checkpoint, tmp_path):
    first = ck.load_checkpoint(trained_checkpoint)
    # save what was loaded into a new folder, load that: same ids, same logits
    ck.write_checkpoint(tmp_path, ck.CheckpointRecord.of(first.model, first.config, first.tokenizer.to_str(),
                                                         first.metrics))
    second = ck.load_checkpoint(tmp_path)
    assert [e.ids for e in first.tokenizer.encode_batch(PROBE)] == [e.ids for e in second.tokenizer.encode_batch(PROBE)]
    a, b = Predictor(trained_checkpoint).logits(PROBE), Predictor(tmp_path).logits(PROBE)
    assert np.array_equal(a, b)


def test_predictor_batches_by_the_checkpoints_eval_batch_size(trained_checkpoint, tmp_path, monkeypatch):
    # `predict` (and Predictor) batch as `eval` does: the checkpoint's [training] eval_batch_size unless told.
    from sentiment_cli.inference import torch_backend as predict_module

    d = tmp_path / "ckpt"
    shutil.copytree(trained_checkpoint, d)
    _edit(d, training={"eval_batch_size": 2})
    sizes = []
    real = predict_module.batched_logits

    def spy(*args, **kwargs):
        sizes.append(kwargs["batch_size"])
        return real(*args, **kwargs)

    monkeypatch.setattr(predict_module, "batched_logits", spy)
    default, given = Predictor(d).logits(PROBE), Predictor(d, batch_size=5).logits(PROBE)
    assert sizes == [2, 5]
    assert np.allclose(default, given, atol=1e-5)   # the padding mask: batching never changes a result
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):   # not a silent fallback to 2
        Predictor(d, batch_size=0)


def test_checkpoint_folder_is_self_describing(trained_checkpoint):
    names = {p.name for p in trained_checkpoint.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "metrics.json"} <= names
    assert not [n for n in names if n.endswith(".tmp")]
    cfg = json.loads((trained_checkpoint / "config.json").read_text())
    assert cfg["format_version"] == ck.CHECKPOINT_FORMAT_VERSION and cfg["labels"] == ["negative", "positive"]
    assert {"model", "data", "training", "vocab_size"} <= set(cfg)
    metrics = json.loads((trained_checkpoint / "metrics.json").read_text())
    assert len(metrics["history"]) == 3 and metrics["best_epoch"] in (1, 2, 3)
    assert {"device", "wall_time_seconds", "seed", "versions", "config"} <= set(metrics)


def test_failed_write_leaves_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "model.safetensors"
    ck.atomic_write(path, b"good")

    def boom(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        ck.atomic_write(path, b"half-written new weights")
    assert path.read_bytes() == b"good"
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"]   # no temp file left behind


def test_missing_checkpoint_says_to_train(tmp_path):
    with pytest.raises(CheckpointError, match=r"no trained model at .*; run `sentiment train` first"):
        ck.load_checkpoint(tmp_path / "nothing")


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:1000]),
     "model.safetensors: corrupt or truncated"),
    (lambda d: (d / "model.safetensors").unlink(), "model.safetensors: missing"),
    (lambda d: (d / "tokenizer.json").write_text("{not json"), "tokenizer.json: not a valid tokenizer"),
    (lambda d: (d / "config.json").write_text("{"), "config.json: not valid JSON"),
    (lambda d: _edit(d, format_version=99), "config.json: format_version 99 is newer"),
    (lambda d: _edit(d, vocab_size=123), "tokenizer.json: vocabulary of"),
    (lambda d: _edit(d, model={"d_model": 64, "n_heads": 2}), "model.safetensors: does not match config.json"),
    (lambda d: _retype(d, dtype=torch.float16),
     "model.safetensors: does not match config.json: tensor head.weight is torch.float16 (2, 32), "
     "the model expects torch.float32 (2, 32)"),
    (lambda d: _retype(d, nan=True), "model.safetensors: tensor head.weight holds NaN or infinite values"),
    (lambda d: (d / "config.json").write_text("[1, 2, 3]"), "config.json: expected a JSON object"),
    (lambda d: (d / "config.json").write_text('"a string"'), "config.json: expected a JSON object"),
    (lambda d: (d / "metrics.json").write_text("[]"), "metrics.json: expected a JSON object"),
    (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json: missing"),
    (lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 64), "model.safetensors: corrupt or truncated"),
    (lambda d: _edit(d, model={"n_layers": 2}), "does not match config.json (missing encoder.layers.1"),
])
def test_damaged_checkpoint_is_a_one_line_error_naming_the_file(trained_checkpoint, tmp_path, damage, message):
    d = _copy(trained_checkpoint, tmp_path / "copy")
    damage(d)
    with pytest.raises(CheckpointError) as err:
        ck.load_checkpoint(d)
    assert message in str(err.value) and "\n" not in str(err.value)


def _edit(d, **changes):
    cfg = json.loads((d / "config.json").read_text())
    for k, v in changes.items():
        if isinstance(v, dict):
            cfg[k].update(v)
        else:
            cfg[k] = v
    (d / "config.json").write_text(json.dumps(cfg))


class _HalfWrite:
    """``os.fdopen`` stand-in whose ``write`` puts half the bytes on disk, then fails (disk full, crash)."""

    def __init__(self, fh, fail_on, calls):
        self.fh, self.fail_on, self.calls = fh, fail_on, calls

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()

    def write(self, data):
        self.calls.append(len(data))
        if len(self.calls) == self.fail_on:
            self.fh.write(data[: len(data) // 2])
            self.fh.flush()
            raise OSError(28, "No space left on device")
        return self.fh.write(data)

    def __getattr__(self, name):
        return getattr(self.fh, name)


@pytest.mark.parametrize("fail_on", [1, 2, 3, 4])   # weights, tokenizer, config, metrics
def test_a_write_failing_midway_leaves_the_previous_checkpoint_loadable(trained_checkpoint, tmp_path,
                                                                       monkeypatch, fail_on):
    d = _copy(trained_checkpoint, tmp_path / "copy")
    before = Predictor(d).logits(PROBE)
    old = ck.load_checkpoint(d)
    newer = ck.load_checkpoint(d).model
    with torch.no_grad():
        for p in newer.parameters():
            p.add_(0.5)                     # "the next epoch": other weights
    real_fdopen, calls = os.fdopen, []
    monkeypatch.setattr(os, "fdopen", lambda fd, mode: _HalfWrite(real_fdopen(fd, mode), fail_on, calls))
    with pytest.raises(OSError) as err:
        ck.write_checkpoint(d, ck.CheckpointRecord.of(newer, old.config, old.tokenizer.to_str(),
                                                      {**old.metrics, "best_epoch": 99}))
    monkeypatch.undo()
    assert err.value.filename == str(d / ["model.safetensors", "tokenizer.json", "config.json",
                                          "metrics.json"][fail_on - 1])   # the error names the file
    assert not [p for p in d.iterdir() if p.name.endswith(".tmp")]
    after = Predictor(d).logits(PROBE)           # loads: every file is whole, old or new
    if fail_on == 1:                             # the new weights never landed: identical predictions
        assert np.array_equal(after, before)
    else:                                        # the weights landed, the metrics did not
        assert not np.array_equal(after, before)
        assert ck.load_checkpoint(d).metrics["best_epoch"] != 99


def test_failing_rename_leaves_the_previous_checkpoint(trained_checkpoint, tmp_path, monkeypatch):
    d = _copy(trained_checkpoint, tmp_path / "copy")
    before = Predictor(d).logits(PROBE)
    old = ck.load_checkpoint(d)
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError(5, "Input/output error")))
    with torch.no_grad():
        old.model.head.bias.add_(3.0)
    with pytest.raises(OSError):
        ck.write_checkpoint(d, ck.CheckpointRecord.of(old.model, old.config, old.tokenizer.to_str(), old.metrics))
    monkeypatch.undo()
    assert np.array_equal(Predictor(d).logits(PROBE), before)


def _retype(d, dtype=None, nan=False):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
    path = d / "model.safetensors"
    state = load_file(path)
    with safe_open(path, "pt") as f:
        metadata = f.metadata()   # kept: it names the packed tables
    key = "head.weight"
    if dtype is not None:
        state[key] = state[key].to(dtype)
    if nan:
        state[key][0, 0] = float("nan")
    save_file(state, path, metadata=metadata)


def test_no_pickle_anywhere_in_the_package():
    """Checkpoints and trainer states are safetensors + JSON; nothing may unpickle (or pickle, in DDP)."""
    import re
    from pathlib import Path

    import sentiment_cli
    pattern = re.compile(r"\bimport pickle|\bpickle\.|torch\.load\(|torch\.save\(|_object(_list)?\(|"
                         r"\bdill\b|joblib")
    hits = [f"{p.name}:{i}" for p in Path(sentiment_cli.__file__).parent.rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []

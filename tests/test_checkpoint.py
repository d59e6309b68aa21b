import json
import os
import shutil

import pytest
import torch

from sentiment_cli import checkpoint as ck
from sentiment_cli.errors import CheckpointError
from sentiment_cli.predict import Predictor

PROBE = ["A moving, beautifully acted film.", "Dull and far too long.", "ok"]


def test_round_trip_gives_identical_ids_and_logits(trained_checkpoint, tmp_path):
    first = ck.load_checkpoint(trained_checkpoint)
    # save what was loaded into a new folder, load that: same ids, same logits
    ck.save_checkpoint(tmp_path, config=first.config, model=first.model,
                       tokenizer_json=first.tokenizer.to_str(), metrics=first.metrics)
    second = ck.load_checkpoint(tmp_path)
    assert [e.ids for e in first.tokenizer.encode_batch(PROBE)] == [e.ids for e in second.tokenizer.encode_batch(PROBE)]
    a, b = Predictor(trained_checkpoint).logits(PROBE), Predictor(tmp_path).logits(PROBE)
    assert torch.equal(a, b)


def test_checkpoint_folder_is_self_describing(trained_checkpoint):
    names = {p.name for p in trained_checkpoint.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "metrics.json"} <= names
    assert not [n for n in names if n.endswith(".tmp")]
    cfg = json.loads((trained_checkpoint / "config.json").read_text())
    assert cfg["format_version"] == ck.FORMAT_VERSION and cfg["labels"] == ["negative", "positive"]
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

"""A checkpoint folder, or an exported ONNX file, is untrusted input (issue 26, row 8).

Each crafted file is refused at load with one ``CheckpointError`` line naming the file, before the work it
would cost: token ids beyond the embedding's rows, sizes beyond the config's bounds, weights whose shapes do
not match the config, files that are not regular files inside the folder (a symlink to ``/dev/zero``, a FIFO,
a link leaving the folder, an oversized file), a temperature that makes the softmax NaN, and every malformed
variant of the export's metadata.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from sentiment_cli import checkpoint as ck
from sentiment_cli.cli import app
from sentiment_cli.config import build_config
from sentiment_cli.errors import CheckpointError, ConfigError
from sentiment_cli.inference.predictor import Predictor

from .conftest import ROOT

OLD = ROOT / "tests" / "data" / "imdb_checkpoint_v1"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit_json(path: Path, change) -> None:
    raw = json.loads(path.read_text())
    change(raw)
    path.write_text(json.dumps(raw))


def _refused(path, match: str, **kwargs) -> str:
    """Load ``path`` with the Predictor: a one-line CheckpointError holding ``match``; returns the message."""
    with pytest.raises(CheckpointError) as err:
        Predictor(path, **kwargs)
    message = str(err.value)
    assert match in message and "\n" not in message, message
    return message


def _bump_token_id(raw: dict, new_id: int) -> str:
    """Give one ordinary word of a tokenizer.json's vocabulary the id ``new_id`` (the vocabulary's size stays)."""
    vocab = raw["model"]["vocab"]
    word = next(w for w, i in vocab.items() if i == 57)
    vocab[word] = new_id
    return word


# ----------------------------------------------------------------------------- token ids


def test_a_token_id_beyond_the_embedding_rows_is_refused_at_load(trained_checkpoint, tmp_path):
    d = _copy(trained_checkpoint, tmp_path / "c")
    rows = json.loads((d / "config.json").read_text())["vocab_size"]
    _edit_json(d / "tokenizer.json", lambda raw: _bump_token_id(raw, rows))
    message = _refused(d, "tokenizer.json")
    assert f"id {rows}" in message and f"{rows} rows" in message


def test_a_padding_id_beyond_the_embedding_rows_is_refused(trained_checkpoint, tmp_path):
    d = _copy(trained_checkpoint, tmp_path / "c")
    _edit_json(d / "tokenizer.json", lambda raw: raw.update(padding={
        "strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": None,
        "pad_id": 10 ** 6, "pad_type_id": 0, "pad_token": "<pad>"}))
    _refused(d, "tokenizer.json")


def test_the_cli_says_one_line_and_exits_1(trained_checkpoint, tmp_path):
    d = _copy(trained_checkpoint, tmp_path / "c")
    rows = json.loads((d / "config.json").read_text())["vocab_size"]
    _edit_json(d / "tokenizer.json", lambda raw: _bump_token_id(raw, rows + 5))
    r = CliRunner().invoke(app, ["predict", "--checkpoint", str(d), "--json", "a fine film"])
    assert r.exit_code == 1, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "tokenizer.json" in lines[0]


# ----------------------------------------------------------------------------- sizes


@pytest.mark.parametrize("section, key, value", [
    ("data", "max_length", 4_000_000), ("model", "n_layers", 30_000), ("model", "d_model", 1 << 20),
    ("model", "d_ff", 1 << 30), ("model", "n_heads", 1 << 20), ("data", "vocab_size", 1 << 40),
    ("model", "bigram_buckets", 1 << 30), ("model", "ngram_buckets", 1 << 30),
])
def test_sizes_beyond_their_bounds_are_refused_before_the_model_is_built(trained_checkpoint, tmp_path,
                                                                          section, key, value):
    d = _copy(trained_checkpoint, tmp_path / "c")
    _edit_json(d / "config.json", lambda raw: raw[section].update({key: value}))
    start = time.perf_counter()
    _refused(d, f"[{section}] {key} must be <=")
    assert time.perf_counter() - start < 2.0
    with pytest.raises(ConfigError, match=f"{key} must be <="):   # the same bound for --set and config files
        build_config("seed", [f"{section}.{key}={value}"])


def test_the_top_level_vocab_size_is_bounded(trained_checkpoint, tmp_path):
    d = _copy(trained_checkpoint, tmp_path / "c")
    _edit_json(d / "config.json", lambda raw: raw.update(vocab_size=1 << 40))
    _refused(d, "config.json: vocab_size must be an integer from 3 to")


def test_weights_are_checked_against_the_config_before_the_model_is_allocated(trained_checkpoint, tmp_path,
                                                                               monkeypatch):
    """Within the bounds but not the weights' shapes: refused from the safetensors header alone."""
    d = _copy(trained_checkpoint, tmp_path / "c")
    _edit_json(d / "config.json", lambda raw: raw["model"].update(n_layers=48, d_model=512, d_ff=8192))
    built = []
    original = ck.SentimentClassifier.from_config

    def spy(*args, **kwargs):
        built.append(torch.empty(0).device.type)   # the default device the model is built on
        return original(*args, **kwargs)

    monkeypatch.setattr(ck.SentimentClassifier, "from_config", spy)
    _refused(d, "model.safetensors: does not match config.json")
    assert "cpu" not in built


# ----------------------------------------------------------------------------- files


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "model.safetensors", "metrics.json"])
def test_a_file_linked_to_dev_zero_is_refused(trained_checkpoint, tmp_path, name):
    d = _copy(trained_checkpoint, tmp_path / "c")
    (d / name).unlink()
    (d / name).symlink_to("/dev/zero")
    _refused(d, f"{name}: a link to a file outside")


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "model.safetensors"])
def test_a_fifo_is_refused_without_blocking(trained_checkpoint, tmp_path, name):
    d = _copy(trained_checkpoint, tmp_path / "c")
    (d / name).unlink()
    os.mkfifo(d / name)
    _refused(d, f"{name}: not a regular file")


def test_a_link_leaving_the_folder_is_refused_and_one_inside_is_read(trained_checkpoint, tmp_path):
    d = _copy(trained_checkpoint, tmp_path / "c")
    outside = tmp_path / "elsewhere.json"
    shutil.move(d / "tokenizer.json", outside)
    (d / "tokenizer.json").symlink_to(outside)
    _refused(d, "tokenizer.json: a link to a file outside")
    (d / "tokenizer.json").unlink()
    shutil.move(outside, d / "real-tokenizer.json")
    (d / "tokenizer.json").symlink_to("real-tokenizer.json")
    assert Predictor(d).predict(["a fine film"])[0].label in ("negative", "positive")


@pytest.mark.parametrize("name, size", [("config.json", 1 << 30), ("tokenizer.json", 1 << 32),
                                        ("model.safetensors", 1 << 40)])
def test_an_oversized_file_is_refused_without_reading_it(trained_checkpoint, tmp_path, name, size):
    d = _copy(trained_checkpoint, tmp_path / "c")
    with open(d / name, "r+b") as fh:   # sparse: costs no disk
        fh.truncate(size)
    start = time.perf_counter()
    _refused(d, f"{name}: larger than")
    assert time.perf_counter() - start < 2.0


def test_eval_records_and_the_digest_skip_what_is_not_a_regular_file(trained_checkpoint, tmp_path):
    d = _copy(trained_checkpoint, tmp_path / "c")
    (d / "eval_test.json").symlink_to("/dev/zero")
    assert ck.read_evals(d) == {}
    (d / "model.safetensors").unlink()
    (d / "model.safetensors").symlink_to("/dev/zero")
    with pytest.raises(CheckpointError, match="model.safetensors: a link to a file outside"):
        ck.weights_digest(d)


# ----------------------------------------------------------------------------- temperature


@pytest.mark.parametrize("value", [1e-310, 1e-4, 1e4, 1e300])
def test_a_temperature_outside_its_range_is_refused(trained_checkpoint, tmp_path, value):
    d = _copy(trained_checkpoint, tmp_path / "c")
    _edit_json(d / "config.json", lambda raw: raw.update(temperature=value))
    _refused(d, "config.json: temperature must be a finite number > 0")
    record = ck.read_record(trained_checkpoint)
    record.temperature = value
    with pytest.raises(ValueError, match="temperature"):   # the writer refuses what loading would
        ck.write_checkpoint(tmp_path / "new", record)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("value", [1e-3, 1e3])
def test_the_temperatures_at_the_bounds_give_valid_json(trained_checkpoint, tmp_path, value):
    d = _copy(trained_checkpoint, tmp_path / "c")
    _edit_json(d / "config.json", lambda raw: raw.update(temperature=value))
    r = CliRunner().invoke(app, ["predict", "--checkpoint", str(d), "--json", "a fine film", "awful, awful"])
    assert r.exit_code == 0, r.output
    for line in r.output.splitlines():
        record = json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))
        assert math.isfinite(record["probability"])


# ----------------------------------------------------------------------------- what loads today still loads


def test_the_committed_old_checkpoint_still_loads_and_predicts():
    p = Predictor(OLD)
    assert [x.label for x in p.predict(["a wonderful film", "a dull mess"])] != []


# ----------------------------------------------------------------------------- the exported ONNX file

onnx = pytest.importorskip("onnx", reason="the onnx extra is part of the test extra; install .[test]")


@pytest.fixture(scope="module")
def exported(trained_checkpoint, tmp_path_factory) -> Path:
    from sentiment_cli.inference.export import export_onnx

    folder = tmp_path_factory.mktemp("hostile-export") / "ckpt"
    shutil.copytree(trained_checkpoint, folder)
    return export_onnx(folder, parity_reviews=50).path


def _variant(src: Path, dst: Path, *, meta=None, drop_output: str | None = None) -> Path:
    """A copy of the exported file with metadata entries replaced (``meta``: key -> function of the old text)."""
    proto = onnx.load(str(src))
    for entry in proto.metadata_props:
        if meta and entry.key in meta:
            entry.value = meta[entry.key](entry.value)
    if drop_output:
        kept = [o for o in proto.graph.output if o.name != drop_output]
        del proto.graph.output[:]
        proto.graph.output.extend(kept)
    onnx.save(proto, str(dst))
    return dst


def _json_edit(change):
    def edit(text):
        raw = json.loads(text)
        out = change(raw)
        return json.dumps(raw if out is None else out)
    return edit


def _oob_tokenizer(text):
    raw = json.loads(text)
    _bump_token_id(raw, 10 ** 6)
    return json.dumps(raw)


@pytest.mark.slow   # one torch.onnx export for the module (seconds)
@pytest.mark.parametrize("variant, match", [
    ({"sentiment.labels": lambda t: json.dumps(["a", "b", "c"]),
      "sentiment.config": _json_edit(lambda raw: raw.update(labels=["a", "b", "c"])),
      "sentiment.head_bias": lambda t: json.dumps([0.0, 0.0, 0.0])}, "3 label names"),
    ({"sentiment.config": lambda t: json.dumps([1, 2, 3])}, "config is not a JSON object"),
    ({"sentiment.card": lambda t: "{not json"}, "sentiment.card"),
    ({"sentiment.card": lambda t: "[1]"}, "sentiment.card"),
    ({"sentiment.tokenizer": _oob_tokenizer}, "id 1000000"),
    ({"sentiment.config": _json_edit(lambda raw: raw.update(temperature=1e-310))}, "temperature must be"),
    ({"sentiment.config": _json_edit(lambda raw: raw["data"].update(max_length=4_000_000))}, "max_length"),
    ({"sentiment.head_bias": lambda t: '{"a": 1}'}, "sentiment.head_bias"),
    ({"sentiment.labels": lambda t: "7",
      "sentiment.config": _json_edit(lambda raw: raw.pop("labels") and None)}, "label names"),
])
def test_malformed_onnx_metadata_is_one_line(exported, tmp_path, variant, match):
    _refused(_variant(exported, tmp_path / "m.onnx", meta=variant), match, onnx=True)


@pytest.mark.slow   # the module's export
def test_a_graph_without_token_logits_is_refused(exported, tmp_path):
    _refused(_variant(exported, tmp_path / "m.onnx", drop_output="token_logits"), "token_logits", onnx=True)


@pytest.mark.slow   # the module's export
def test_the_onnx_file_must_be_a_regular_file_of_bounded_size(exported, tmp_path):
    link = tmp_path / "zero.onnx"
    link.symlink_to("/dev/zero")
    _refused(link, "zero.onnx: not a regular file", onnx=True)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "model.onnx").symlink_to(exported)       # leaves the folder
    _refused(folder, "a link to a file outside", onnx=True)
    big = tmp_path / "big.onnx"
    shutil.copy(exported, big)
    with open(big, "r+b") as fh:
        fh.truncate(1 << 40)
    _refused(big, "big.onnx: larger than", onnx=True)
    assert Predictor(exported, onnx=True).predict(["a fine film"])[0].label in ("negative", "positive")

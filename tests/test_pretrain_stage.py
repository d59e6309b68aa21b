"""`sentiment train` runs the pretraining stage itself when its `init_from` folder is missing, reuses a folder
that fits, refuses one that does not (naming the key), and never leaves a half-written folder behind."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess

import pytest

from sentiment_cli.errors import CheckpointError, ConfigError
from sentiment_cli.training.callbacks import TrainCallbacks
from sentiment_cli.training.run import train

from .conftest import PYTHON, ROOT, SMALL_DATA, SUBPROCESS_ENV, small_config


def stage_config(init_from, **pretrain):
    # The committed slice has no unsupervised split: word2vec on its training part (seconds).
    return (small_config(epochs=1, init_from=str(init_from))
            .override("pretrain", **{"objective": "word2vec", "splits": "train", "epochs": 2, **pretrain}))


class Stages(TrainCallbacks):
    def __init__(self):
        self.stages = []

    def on_stage(self, text):
        self.stages.append(text)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """A run whose init_from folder is missing, and its parent too: ``(folder, result, stages)``. The other tests
    read the folder it pretrained and never write into it."""
    pre = tmp_path_factory.mktemp("stage") / "checkpoints" / "pretrained"   # its parent does not exist yet either
    cb = Stages()
    result = train(stage_config(pre), tmp_path_factory.mktemp("stage-ft") / "ft", cb)
    return pre, result, cb


def test_train_pretrains_a_missing_folder_then_reuses_it(first_run, tmp_path):
    pre, result, cb = first_run
    metrics = json.loads((pre / "metrics.json").read_text())
    assert metrics["kind"] == "pretrained" and metrics["objective"] == "word2vec" and len(metrics["history"]) == 2
    assert result.metrics["pretrained"]["from"] == str(pre.resolve())
    first = next(i for i, s in enumerate(cb.stages) if s.startswith(f"no pretrained encoder in {pre}"))
    start = next(i for i, s in enumerate(cb.stages) if s.startswith("starting from the pretrained weights"))
    assert first < start
    assert sorted(p.name for p in pre.parent.iterdir()) == ["pretrained"]   # no temporary folder left
    # a second run with the same settings reuses the folder as it is
    before = (pre / "metrics.json").read_bytes(), (pre / "model.safetensors").read_bytes()
    cb = Stages()
    train(stage_config(pre), tmp_path / "ft2", cb)
    assert not any(s.startswith("no pretrained encoder") for s in cb.stages)
    assert ((pre / "metrics.json").read_bytes(), (pre / "model.safetensors").read_bytes()) == before


@pytest.fixture(scope="module")
def made(first_run):
    return first_run[0]


@pytest.mark.parametrize("change, message", [
    (lambda c: c.override("data", vocab_size=4000), "[data] vocab_size is 5000 there but 4000 in this config"),
    (lambda c: c.override("data", pre_tokenizer="punctuation"),
     "[data] pre_tokenizer is 'whitespace' there but 'punctuation' in this config"),
    (lambda c: c.override("model", d_model=16), "[model] d_model is 32 there but 16 in this config"),
    (lambda c: c.override("pretrain", splits="unsupervised+train"),
     "[pretrain] splits is 'train' there but 'unsupervised+train' in this config"),
    (lambda c: c.override("data", validation_fraction=0.2),
     "[data] validation_fraction is 0.1 there but 0.2 in this config"),
])
def test_a_folder_that_does_not_fit_is_refused_naming_the_key(made, tmp_path, change, message):
    with pytest.raises(ConfigError) as err:
        train(change(stage_config(made)), tmp_path / "ft")
    msg = str(err.value)
    assert msg.startswith(f"init_from {made}: {message}")
    assert f"delete {made} to pretrain it again" in msg and "\n" not in msg


def test_other_pretraining_data_is_refused(made, tmp_path):
    other = tmp_path / "imdb_copy"
    shutil.copytree(SMALL_DATA, other)
    with pytest.raises(ConfigError, match=r"\[data\] source is '.*imdb_small' there but '.*imdb_copy' in this"):
        train(stage_config(made).override("data", source=str(other)), tmp_path / "ft")


def test_an_interrupted_pretraining_folder_is_not_reused(made, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(made, partial)
    metrics = json.loads((partial / "metrics.json").read_text())
    (partial / "metrics.json").write_text(json.dumps({**metrics, "history": metrics["history"][:1]}))
    with pytest.raises(CheckpointError, match=rf"init_from {partial}: its pretraining stopped after epoch 1 of 2; "
                                              rf"delete {partial} to pretrain it again"):
        train(stage_config(partial), tmp_path / "ft")


def _toml(tmp_path, epochs):
    cfg = tmp_path / "stage.toml"
    cfg.write_text((ROOT / "configs" / "seed.toml").read_text().replace("vocab_size = 50000", "vocab_size = 5000")
                   + f'\n[pretrain]\nobjective = "word2vec"\nsplits = "train"\nepochs = {epochs}\n')
    return cfg


@pytest.mark.slow   # a `sentiment train` process
def test_cli_misfit_is_one_line_exit_2(made, tmp_path):
    r = subprocess.run([PYTHON, "-m", "sentiment_cli", "train", "--config", _toml(tmp_path, 2), "--data", SMALL_DATA,
                        "--init", made, "--output", tmp_path / "ft", "--set", "data.vocab_size=4000"],
                       cwd=tmp_path, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=240)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: init_from {made}: [data] vocab_size is 5000 there but 4000 in this config; delete {made} to "
        "pretrain it again with this config, or give another folder with --init"]


@pytest.mark.slow   # signals a real `sentiment train` process
def test_ctrl_c_during_the_pretraining_stage_exits_130_and_leaves_no_folder(tmp_path):
    pre = tmp_path / "pretrained"
    # many word2vec epochs: the stage is certainly still running when the signal arrives
    proc = subprocess.Popen([PYTHON, "-m", "sentiment_cli", "train", "--config", _toml(tmp_path, 2000),
                             "--data", SMALL_DATA, "--init", pre, "--output", tmp_path / "ft"],
                            cwd=tmp_path, env=SUBPROCESS_ENV, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    seen = []
    for line in proc.stderr:   # wait until word2vec runs
        seen.append(line)
        if line.startswith("word2vec on"):
            break
    else:
        pytest.fail(f"the pretraining stage never started: {proc.communicate()} {seen}")
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    stderr = "".join(seen) + rest
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("error: pretraining interrupted by SIGINT")
    assert not pre.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ft", "stage.toml"] or \
        sorted(p.name for p in tmp_path.iterdir()) == ["stage.toml"]   # no half-written folder anywhere


def test_cli_runs_the_stage_and_the_training_as_one_command(tmp_path):
    from typer.testing import CliRunner

    from sentiment_cli.cli import app

    r = CliRunner().invoke(app, ["train", "--config", str(_toml(tmp_path, 1)), "--data", str(SMALL_DATA),
                                 "--init", str(tmp_path / "pre"), "--output", str(tmp_path / "ft"), "--epochs", "1",
                                 "--device", "cpu"])
    assert r.exit_code == 0, r.output
    lines = r.stderr.splitlines()
    stage = next(i for i, line in enumerate(lines) if line.startswith("no pretrained encoder in"))
    pretrain_epoch = next(i for i, line in enumerate(lines) if line.startswith("epoch  1") and "texts/s" in line)
    train_epoch = next(i for i, line in enumerate(lines) if line.startswith("epoch  1") and "train loss" in line)
    assert stage < pretrain_epoch < train_epoch
    assert "best epoch 1" in r.stdout and (tmp_path / "pre" / "model.safetensors").exists()

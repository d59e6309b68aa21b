"""Resume: a run stopped after an epoch and resumed ends exactly where an uninterrupted run ends."""

import json

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from sentiment_cli.checkpoint import read_weights
from sentiment_cli.training import state as ts
from sentiment_cli.cli import app
from sentiment_cli.errors import CheckpointError, Interrupted, UsageError
from sentiment_cli.training.interrupts import StopFlag
from sentiment_cli.training.callbacks import TrainCallbacks
from sentiment_cli.training.run import resume, train

from .conftest import small_config

TIMING = {"train_seconds", "train_examples_per_second"}


def resume_config(epochs: int = 3):
    """Dropout (RNG), a warmup + cosine schedule (scheduler state) and AdamW (optimizer state) all matter here."""
    cfg = small_config(epochs=epochs, batch_size=50, schedule="cosine", warmup_fraction=0.2, patience=0)
    return cfg.override("model", dropout=0.1, head_dropout=0.1)


class StopAfter(TrainCallbacks):
    """Requests a stop when epoch ``k`` ends, as a signal handler would."""

    def __init__(self, k, stop):
        self.k, self.stop = k, stop

    def on_epoch_end(self, record):
        if record["epoch"] == self.k:
            self.stop.request()


def _history(metrics):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in metrics["history"]]


def _tensors(folder):
    state = json.loads((folder / "trainer_state" / "state.json").read_text())
    return (read_weights(folder / "model.safetensors"),
            load_file(folder / "trainer_state" / state["files"]["tensors"]["name"]))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An uninterrupted 3-epoch run, and the same run stopped after epoch 1 and resumed."""
    root = tmp_path_factory.mktemp("resume")
    full = train(resume_config(), root / "full", keep_state=True)
    stop = StopFlag()
    with pytest.raises(Interrupted) as err:
        train(resume_config(), root / "split", StopAfter(1, stop), stop=stop)
    stopped_state = json.loads((root / "split" / "trainer_state" / "state.json").read_text())
    resumed = resume(root / "split", keep_state=True)
    return full, resumed, err.value, stopped_state, root


def test_resumed_run_has_the_same_history_and_bit_identical_weights(runs):
    full, resumed, _, _, root = runs
    assert len(full.metrics["history"]) == 3
    assert _history(resumed.metrics) == _history(full.metrics)
    assert resumed.metrics["best_epoch"] == full.metrics["best_epoch"]
    for a, b in zip(_tensors(root / "full"), _tensors(root / "split")):   # best checkpoint, then last epoch
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), key


def test_resumed_run_fits_the_same_temperature(runs):
    full, resumed, _, _, root = runs
    temperature = [json.loads((root / r / "config.json").read_text())["temperature"] for r in ("full", "split")]
    assert temperature[0] == temperature[1]
    assert resumed.metrics["calibration"] == full.metrics["calibration"]


def test_the_stop_came_mid_run_and_said_how_to_resume(runs):
    _, resumed, err, stopped_state, root = runs
    assert stopped_state["epoch"] == 1   # the state on disk when the run stopped was epoch 1's
    assert err.exit_code == 130 and err.resumable
    assert "during epoch 2 of 3; epoch 1 is saved; resume with: sentiment train --resume" in str(err)
    assert str(root / "split") in str(err)
    assert [r["after_epoch"] for r in resumed.metrics["resumed"]] == [1]


def test_trainer_state_keeps_the_last_epoch_and_the_folder_the_best(runs):
    full, _, _, _, root = runs
    state = ts.load_trainer_state(root / "full")
    assert state.epoch == 3 and state.progress["metrics"]["history"] == full.metrics["history"]
    assert set(state.rng) == {"rank0.cpu"} and state.rng["rank0.cpu"].dtype == torch.uint8
    assert any(k.endswith("exp_avg_sq") for k in _tensors(root / "full")[1])   # AdamW moments are saved
    assert isinstance(state.optimizer["param_groups"][0]["betas"], tuple)
    assert [p.name for p in (root / "full" / "trainer_state").iterdir()] != []
    best = full.metrics["best_epoch"]   # the last epoch's file, and the kept (best) epoch's while it is another
    assert sorted(p.name for p in (root / "full" / "trainer_state").glob("epoch-*")) == \
        sorted({"epoch-0003.safetensors", f"epoch-{best:04d}.safetensors"})
    assert state.kept_epoch == best
    folder = read_weights(root / "full" / "model.safetensors")
    assert all(torch.equal(state.kept[k], v) for k, v in folder.items())   # the folder's weights are the kept ones


def test_a_finished_run_keeps_no_trainer_state_unless_asked(tmp_path):
    result = train(resume_config(epochs=1), tmp_path / "run")
    assert result.metrics["best_epoch"] == 1 and not (tmp_path / "run" / "trainer_state").exists()
    with pytest.raises(CheckpointError, match="a finished run keeps it only with --keep-state"):
        resume(tmp_path / "run")


def test_a_new_run_that_fails_at_once_leaves_the_stopped_runs_state(tmp_path):
    """A stopped run's trainer state survives a fresh train into its folder that fails before its first epoch."""
    stop = StopFlag()
    with pytest.raises(Interrupted):
        train(resume_config(), tmp_path / "run", StopAfter(1, stop), stop=stop)
    before = (tmp_path / "run" / "trainer_state" / "state.json").read_bytes()
    bad = resume_config().override("data", text_column="nope")
    with pytest.raises(UsageError, match="no column 'nope'"):
        train(bad, tmp_path / "run")
    assert (tmp_path / "run" / "trainer_state" / "state.json").read_bytes() == before
    assert resume(tmp_path / "run").metrics["best_epoch"] is not None   # still resumable


def test_resuming_a_finished_run_does_nothing(runs, capsys):
    full, _, _, _, root = runs
    before = (root / "full" / "metrics.json").read_bytes()
    again = resume(root / "full")
    assert again.metrics["history"] == full.metrics["history"]
    assert (root / "full" / "metrics.json").read_bytes() == before


runner = CliRunner()


@pytest.mark.parametrize("args, code, message", [
    (["--resume", "{full}", "--lr", "0.1", "--seed", "3"], 2,
     "--resume continues the saved run with its saved settings; drop --lr, --seed"),
    (["--resume", "{full}", "--epochs", "2"], 2, "--epochs 2: the run in {full} already completed 3 epochs"),
    (["--resume", "{full}", "--output", "{other}"], 2, "name different folders"),
    (["--resume", "{other}"], 1, "nothing to resume in {other}: no trainer_state/state.json"),
    (["--output", "{other}", "--resume"], 1, "nothing to resume in {other}"),   # bare --resume: --output's folder
])
def test_resume_cli_errors(runs, tmp_path, args, code, message):
    fill = {"full": str(runs[4] / "full"), "other": str(tmp_path / "other")}
    r = runner.invoke(app, ["train", *[a.format(**fill) for a in args]])
    assert r.exit_code == code, r.output
    assert r.stderr.startswith("error: ") and message.format(**fill) in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_bare_resume_uses_the_output_folder(runs):
    r = runner.invoke(app, ["train", "--resume", "--output", str(runs[4] / "full"), "--json"])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.stdout)["history"]) == 3


# ---------------------------------------------------------------------------- the trainer state on disk

def _state(epoch, scale=1.0):
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.fill_(scale)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(4, 3)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    return ts.TrainerState(epoch=epoch, config=small_config(), vocab_size=5000,
                           progress={"metrics": {"history": [{}] * epoch}}, model=model.state_dict(),
                           optimizer=opt.state_dict(), scheduler=sched.state_dict(),
                           rng={"rank0.cpu": torch.get_rng_state()}, tokenizer_json='{"x": 1}')


def test_state_dicts_round_trip_through_json_and_safetensors(tmp_path):
    saved = _state(2)
    ts.save_trainer_state(tmp_path, saved)
    back = ts.load_trainer_state(tmp_path)
    assert back.epoch == 2 and back.config == saved.config and back.tokenizer_json == saved.tokenizer_json
    assert back.optimizer["param_groups"] == saved.optimizer["param_groups"]
    for k, v in saved.optimizer["state"].items():
        for name, t in v.items():
            assert torch.equal(back.optimizer["state"][k][name], t)
    assert back.scheduler == saved.scheduler
    assert torch.equal(back.rng["rank0.cpu"], saved.rng["rank0.cpu"])
    assert not list((tmp_path / "trainer_state").glob(".*.tmp"))


def test_atomic_save_never_exposes_a_half_state(tmp_path, monkeypatch):
    """The write fails midway through the new tensors file (1), then through state.json (2): epoch 1 loads."""
    import os
    ts.save_trainer_state(tmp_path, _state(1, scale=1.0))
    for failing in (1, 2):
        calls = {"n": 0}
        real_fdopen = os.fdopen

        class HalfWriter:
            def __init__(self, fh):
                self.fh = fh

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.fh.close()

            def write(self, data):
                calls["n"] += 1
                if calls["n"] == failing:
                    self.fh.write(data[: len(data) // 2])
                    raise OSError(28, "No space left on device")
                return self.fh.write(data)

            def __getattr__(self, name):
                return getattr(self.fh, name)
        monkeypatch.setattr(os, "fdopen", lambda fd, mode: HalfWriter(real_fdopen(fd, mode)))
        with pytest.raises(OSError):
            ts.save_trainer_state(tmp_path, _state(2, scale=2.0))
        monkeypatch.undo()
        back = ts.load_trainer_state(tmp_path)
        assert back.epoch == 1 and torch.equal(back.model["weight"], _state(1, scale=1.0).model["weight"])
        assert not list((tmp_path / "trainer_state").glob(".*.tmp"))
    ts.save_trainer_state(tmp_path, _state(2, scale=2.0))   # the next good save commits and tidies up
    assert ts.load_trainer_state(tmp_path).epoch == 2
    assert [p.name for p in (tmp_path / "trainer_state").glob("epoch-*")] == ["epoch-0002.safetensors"]


def _edit_state(folder, **changes):
    path = folder / "trainer_state" / "state.json"
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "trainer_state" / "state.json").write_text("{"), "state.json: not valid JSON"),
    (lambda d: (d / "trainer_state" / "state.json").write_text("[1, 2]"), "state.json: expected a JSON object"),
    (lambda d: _edit_state(d, format_version=7), "state.json: format_version 7 is newer"),
    (lambda d: _edit_state(d, epoch="two"), "state.json: malformed trainer state"),
    (lambda d: _edit_state(d, files={"tensors": {"name": "../../etc/passwd", "sha256": "0"},
                                     "tokenizer": {"name": "tokenizer.json", "sha256": "0"}}),
     "must be a plain name"),
    (lambda d: next((d / "trainer_state").glob("epoch-*")).unlink(), "epoch-0002.safetensors: missing"),
    (lambda d: _truncate(next((d / "trainer_state").glob("epoch-*"))),
     "epoch-0002.safetensors: does not match"),
    (lambda d: (d / "trainer_state" / "tokenizer.json").write_text("{}"), "tokenizer.json: does not match"),
    (lambda d: _edit_state(d, optimizer={"state": {"__tensor__": "optimizer.nope"}, "param_groups": []}),
     "tensor 'optimizer.nope' is missing"),
])
def test_damaged_trainer_state_is_a_one_line_error_naming_the_file(tmp_path, damage, message):
    ts.save_trainer_state(tmp_path, _state(2))
    damage(tmp_path)
    with pytest.raises(CheckpointError) as err:
        ts.load_trainer_state(tmp_path)
    assert message in str(err.value) and "\n" not in str(err.value)


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-100])


def test_resume_refuses_weights_that_do_not_fit_the_model(runs, tmp_path):
    """A tampered trainer state (valid files, hashes updated, a wrong shape) is refused with the file named."""
    import shutil
    folder = tmp_path / "run"
    shutil.copytree(runs[4] / "full", folder)
    state = ts.load_trainer_state(folder)
    state.epoch = 2
    state.progress["metrics"]["history"] = state.progress["metrics"]["history"][:2]
    state.model["head.weight"] = torch.zeros(2, 7)
    ts.save_trainer_state(folder, state)
    with pytest.raises(CheckpointError, match=r"epoch-0002.safetensors: does not match state.json's config: "
                                              r"tensor head.weight is torch.float32 \(2, 7\)"):
        resume(folder)


@pytest.mark.slow   # over 5 s on 2 cores: the full suite runs it, the fast lane does not (docs/development.md)
def test_a_run_without_validation_resumes_to_the_same_end(tmp_path):
    cfg = resume_config().override("data", validation_fraction=0.0)
    full = train(cfg, tmp_path / "full", keep_state=True)
    stop = StopFlag()
    with pytest.raises(Interrupted):
        train(cfg, tmp_path / "split", StopAfter(1, stop), stop=stop)
    resumed = resume(tmp_path / "split", keep_state=True)
    assert _history(resumed.metrics) == _history(full.metrics) and resumed.metrics["best_epoch"] == 3
    for a, b in zip(_tensors(tmp_path / "full"), _tensors(tmp_path / "split")):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

"""The refit: a run that held part of train out trains again on every row, and keeps its temperature."""

from __future__ import annotations

import json

import pytest

from sentiment_cli.checkpoint import load_checkpoint
from sentiment_cli.errors import Interrupted
from sentiment_cli.training.callbacks import TrainCallbacks
from sentiment_cli.training.interrupts import StopFlag
from sentiment_cli.training.run import train

from .conftest import SMALL_DATA, small_config

SST5_SMALL = SMALL_DATA.parent / "sst5_small"   # has its own dev split


def _held_out_config(**training):
    return small_config(refit=True, **training).override("data", validation_fraction=0.1)


def test_a_refit_trains_on_every_row_for_the_best_epoch_count_and_keeps_the_temperature(tmp_path):
    out = tmp_path / "run"
    stages = []

    class Stages(TrainCallbacks):
        def on_stage(self, text):
            stages.append(text)

    result = train(_held_out_config(epochs=2), out, Stages())
    metrics = json.loads((out / "metrics.json").read_text())
    first = metrics["held_out_run"]
    assert first["validation_examples"] == 100 and first["best_epoch"] in (1, 2)
    assert metrics["data"]["train_examples"] == 1000 and metrics["data"]["validation_examples"] == 0
    assert len(metrics["history"]) == first["best_epoch"]                          # the best epoch count, again
    assert all(h["train_examples"] == 1000 for h in metrics["history"])           # the held-out rows included
    assert [h["validation_accuracy"] for h in first["history"]][0] is not None     # the first run's record stays
    config = json.loads((out / "config.json").read_text())
    assert config["temperature"] == metrics["calibration"]["temperature"] != 1.0    # fitted on the hold-out
    assert config["data"]["validation_fraction"] == 0 and config["training"]["refit"] is False
    assert config["training"]["epochs"] == first["best_epoch"]
    assert any(s.startswith("refit: training again on all 1,000 training rows (100 held out") for s in stages)
    assert not (out / "trainer_state").exists() and not (tmp_path / ".run.refit").exists()
    assert result.metrics["held_out_run"] == first
    assert load_checkpoint(out).model.num_labels == 2                              # a whole checkpoint
    assert "refit" in (out / "README.md").read_text()


def test_a_sources_own_dev_split_is_not_trained_on(tmp_path):
    cfg = small_config(refit=True, epochs=1).override("data", source=str(SST5_SMALL), validation_fraction=0.1)
    train(cfg, tmp_path / "run")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert "held_out_run" not in metrics and metrics["data"]["validation_examples"] > 0


def test_a_stop_during_the_refit_keeps_the_held_out_runs_checkpoint(tmp_path):
    out, stop = tmp_path / "run", StopFlag()

    class StopAtRefit(TrainCallbacks):
        def on_stage(self, text):
            if text.startswith("refit"):
                stop.request()

    with pytest.raises(Interrupted, match="during the refit on all rows; .* keeps the held-out run's checkpoint"):
        train(_held_out_config(epochs=1), out, StopAtRefit(), stop=stop)
    metrics = json.loads((out / "metrics.json").read_text())
    assert "held_out_run" not in metrics and metrics["data"]["validation_examples"] == 100
    assert json.loads((out / "config.json").read_text())["temperature"] == metrics["calibration"]["temperature"]
    load_checkpoint(out)
    assert not (tmp_path / ".run.refit").exists()

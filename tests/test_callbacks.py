"""The library's own progress lines (``sentiment_cli.train(..., progress=True)``)."""

from __future__ import annotations

import io

from sentiment_cli.api import _callbacks
from sentiment_cli.training.callbacks import LogCallbacks


def test_progress_true_gives_plain_lines_not_the_command_lines_display():
    hooks = _callbacks(True)
    assert type(hooks) is LogCallbacks


def test_log_callbacks_print_stages_notes_and_one_line_per_epoch():
    out = io.StringIO()
    hooks = LogCallbacks(out)
    hooks.on_stage("tokenizing")
    hooks.on_note("the n-gram score alone")
    hooks.on_epoch_end({"epoch": 2, "train_loss": 0.5, "validation_loss": 0.25, "validation_accuracy": 0.875,
                        "train_seconds": 3.0, "best": True})
    hooks.on_epoch_end({"epoch": 1, "loss": 1.5, "train_seconds": 1.0})   # a pretraining epoch's record
    assert out.getvalue().splitlines() == [
        "tokenizing…", "note: the n-gram score alone",
        "epoch  2  train loss 0.5000  val loss 0.2500 acc 87.50%  3.0s  best",
        "epoch  1  train loss 1.5000  1.0s"]

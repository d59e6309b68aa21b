"""What a training or pretraining run reports: progress hooks during the run, and its result.

The library prints nothing unless asked: :class:`LogCallbacks` writes plain lines to a stream (the Python
API's ``progress=True``); the CLI implements :class:`TrainCallbacks` with rich progress bars and renders
:class:`TrainResult`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from ..checkpoint import CheckpointRecord
    from ..evaluation.training_report import TrainingReport


class TrainCallbacks:
    """Hooks for progress reporting; the default does nothing."""

    def on_stage(self, text: str) -> None:
        """A preparation stage begins (loading data, building the tokenizer...)."""

    def on_note(self, text: str) -> None:
        """Something the user should know that does not stop the run."""

    def on_epoch_start(self, epoch: int, epochs: int, num_examples: int) -> None:
        """Epoch ``epoch`` (1-based) of ``epochs`` starts over ``num_examples`` reviews."""

    def on_step(self, examples: int, loss: float, accuracy: float, examples_per_second: float) -> None:
        """A step over ``examples`` reviews ended; running epoch loss/accuracy so far."""

    def on_validation_start(self, num_examples: int) -> None:
        """Validation of ``num_examples`` reviews starts."""

    def on_validation_step(self, examples: int) -> None:
        """A validation batch of ``examples`` reviews ended."""

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        """An epoch ended; ``record`` is its entry in ``metrics.json``'s history."""

    def for_pretraining(self) -> "TrainCallbacks":
        """The hooks for a pretraining stage run inside training (its epochs report other figures); default: these."""
        return self


class LogCallbacks(TrainCallbacks):
    """Plain progress lines on a text stream: each stage, each note, and one line per epoch (no bars).

    What ``sentiment_cli.train(..., progress=True)`` prints, as scikit-learn's ``verbose=1`` does: the library
    never imports the command line's rich display.

    Args:
        stream: where the lines go (default: ``sys.stderr`` at the time of each line).
    """

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream

    def _print(self, line: str) -> None:
        print(line, file=self.stream or sys.stderr, flush=True)

    def on_stage(self, text: str) -> None:
        self._print(f"{text}…")

    def on_note(self, text: str) -> None:
        self._print(f"note: {text}")

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        r = record
        val = ("" if r.get("validation_accuracy") is None
               else f"  val loss {r['validation_loss']:.4f} acc {r['validation_accuracy']:.2%}")
        loss = r.get("train_loss", r.get("loss"))
        head = f"epoch {r['epoch']:>2}" + (f"  train loss {loss:.4f}" if loss is not None else "")
        self._print(f"{head}{val}  {r.get('train_seconds', 0.0):.1f}s" + ("  best" if r.get("best") and val else ""))


@dataclass(frozen=True)
class TrainResult:
    """What a finished run produced (``train``, ``resume``, ``pretrain``; ``sentiment_cli.train`` returns it).

    Attributes:
        checkpoint: the checkpoint folder written; ``sentiment_cli.load`` reads it.
        metrics: its ``metrics.json``, as a dict: ``best_validation_accuracy``, ``best_validation_f1_macro``,
            ``best_epoch``, ``history`` (one record per epoch), ``calibration``, ``data`` (the labels and
            the splits' sizes), ``config`` (the whole run config) and more (docs/checkpoints.md).
        is_main: ``False`` on torchrun ranks other than 0 (they print nothing).
        report: ``curves.png`` and ``README.md`` as written (rank 0), or ``None``.
        record: the checkpoint record written (:class:`~sentiment_cli.checkpoint.CheckpointRecord`: the weights
            in memory; training's rank 0), or ``None``.
        validation_losses: ``(n_validation,)`` float64, each validation row's log-loss (nats) after the
            temperature (one label per text, training's rank 0), or ``None``; the default's search compares
            its candidates row by row with it.
    """

    checkpoint: Path
    metrics: dict[str, Any]
    is_main: bool = True
    report: TrainingReport | None = None
    record: CheckpointRecord | None = field(default=None, repr=False, compare=False)
    validation_losses: Any = field(default=None, repr=False, compare=False)

"""What a training or pretraining run reports: progress hooks during the run, and its result.

The library prints nothing; the CLI implements :class:`TrainCallbacks` with
rich progress bars and renders :class:`TrainResult`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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


@dataclass
class TrainResult:
    """What a finished run produced: the checkpoint folder and its ``metrics.json`` content."""

    output: Path
    metrics: dict[str, Any]
    is_main: bool = True   # False on torchrun ranks other than 0 (they print nothing)
    report: TrainingReport | None = None   # curves.png and README.md (card.py), rank 0 only

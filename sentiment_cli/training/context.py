"""What one training run is given and keeps from its first step to its last: :class:`RunContext`.

The orchestrator (``run.py``) makes it; the fit (``setup.py``, ``loop.py``), the restoring helpers
(``resume.py``) and the refit's pieces (``refit.py``) read it. It imports no module of ``training/``
above the leaves it names in its fields (ranks, progress hooks, the stop flag).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..config import Config
from .budget import StepLimit
from .callbacks import TrainCallbacks
from .distributed import DistInfo
from .interrupts import StopFlag
from .policy import DEFAULT, Policy


@dataclass(frozen=True)
class RunContext:
    """What a run is given and keeps from its first step to its last.

    Attributes:
        config: the whole run configuration.
        output: the checkpoint folder.
        cb: progress hooks (silent ones on torchrun ranks other than 0: rank 0 alone reports).
        stop: the stop flag, polled at every step.
        info: this process's rank and the world size (``distributed.py``).
        device: where this rank trains.
        data_rules: the default's choices for this data (``auto.py``), as ``metrics.json`` keeps them.
        steps: the optimizer steps the run may take, sized while it runs (a search trial's); ``None``: its epochs.
        policy: the tuning numbers its fit reads (:class:`~.policy.Policy`).
    """

    config: Config
    output: Path
    cb: TrainCallbacks
    stop: StopFlag
    info: DistInfo
    device: torch.device
    data_rules: list[dict[str, Any]] = field(default_factory=list)
    steps: StepLimit | None = None
    policy: Policy = DEFAULT

    @property
    def local_batch(self) -> int:
        """Reviews per step on this rank (``batch_size`` stays the global batch per step)."""
        return math.ceil(self.config.training.batch_size / self.info.world_size)

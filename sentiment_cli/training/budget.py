"""Wall-clock budgets: :class:`Budget`, one clock from the command's start, handed to each stage as an argument.

``sentiment train --time-budget 30m`` is one :class:`Budget` made when the command starts. The search
(``search.py``) hands each stage a part of it (:meth:`Budget.part`: the n-gram stage's share, pretraining's, a
trial's), keeps back what later work will cost (:meth:`Budget.less`: the finish, the n-gram score alone's refit),
and asks before each piece of work whether it ends in time (:meth:`Budget.fits`). No stage computes a deadline of
its own. A trial's optimizer steps are sized to its part by its callbacks, into a :class:`StepLimit` that the
epoch loop (``loop.py``) takes as an argument.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Budget:
    """Seconds of wall time from ``start`` on ``clock``.

    Attributes:
        start: when it began, in ``clock`` seconds.
        seconds: its length in seconds (``math.inf``: no limit).
        clock: the clock (``time.monotonic``; a test gives a fake one).
    """

    start: float
    seconds: float
    clock: Callable[[], float] = field(default=time.monotonic, compare=False, repr=False)

    @classmethod
    def starting_now(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> "Budget":
        """A budget of ``seconds`` from now."""
        return cls(clock(), seconds, clock)

    @classmethod
    def unlimited(cls, clock: Callable[[], float] = time.monotonic) -> "Budget":
        """A budget that never ends (a run without ``--time-budget``)."""
        return cls(clock(), math.inf, clock)

    @property
    def end(self) -> float:
        """When it ends, in ``clock`` seconds."""
        return self.start + self.seconds

    @property
    def limited(self) -> bool:
        """Whether it ends at all."""
        return math.isfinite(self.seconds)

    def elapsed(self) -> float:
        """Seconds since ``start``."""
        return self.clock() - self.start

    def remaining(self) -> float:
        """Seconds left (0 once over)."""
        return max(0.0, self.end - self.clock())

    def fits(self, seconds: float) -> bool:
        """Whether work of ``seconds`` started now ends within the budget."""
        return self.clock() + seconds <= self.end

    def over(self) -> bool:
        """Whether its end has passed."""
        return self.clock() >= self.end

    def part(self, seconds: float) -> "Budget":
        """A budget from now of ``seconds``, never past this one's end: what a stage may take."""
        return Budget(self.clock(), max(0.0, min(seconds, self.remaining())), self.clock)

    def less(self, seconds: float) -> "Budget":
        """This budget with its end ``seconds`` earlier: what is left once later work's time is kept back."""
        return Budget(self.start, max(0.0, self.seconds - seconds), self.clock)


@dataclass
class StepLimit:
    """The optimizer steps a run may take, sized while it runs (a search trial's, from its measured rate).

    The epoch loop ends the run at ``steps`` and fits its learning-rate schedule to end there (budgeted training:
    Li, Yumer & Ramanan, ICLR 2020); ``None`` is the run's own schedule.
    """

    steps: int | None = None

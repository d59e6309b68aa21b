"""One candidate of the default's search (``search.py``): a setting measured on the validation split, and its line.

The n-gram stage (``ngram_stage.py``) and the encoder trials (``search.py``) both make them; the choice compares
them (:meth:`Candidate.rank_key`, and their row-by-row ``losses``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Candidate:
    """One setting measured on the validation split.

    Attributes:
        name: how the table names it (``n-gram alone, NB-LR C 1``, ``encoder #0 (data rules)``).
        kind: ``"ngram"`` or ``"encoder"``.
        settings: the ``section.key`` values it sets over the data rules' config.
        accuracy, nll: validation accuracy, and log-loss (nats per row) after its own temperature; ``None``
            when it did not finish.
        seconds: wall time it took.
        status: ``complete``, ``pruned at epoch N``, ``stopped: the budget`` or ``failed: ...``.
        folder: an encoder trial's folder while the search runs.
        peer: an n-gram candidate whose representation is a linear peer's of the suite (``bench/suite.py``:
            ``"tfidf-char"``, ``"tfidf"``, ``"nbsvm"``), else ``""`` (``ngram_peers.py``).
    """

    name: str
    kind: str
    settings: dict[str, Any]
    accuracy: float | None = None
    nll: float | None = None
    seconds: float = 0.0
    status: str = "complete"
    folder: Path | None = field(default=None, repr=False)
    peer: str = ""
    ended: str = ""                 # why a trial with scores ended: its schedule, sized to the budget, cut short
    rate: float | None = None       # an encoder trial's training examples a second in its timing run
    needs: float | None = None      # seconds its whole planned schedule would have taken at that rate
    losses: np.ndarray | None = field(default=None, repr=False)   # (n_validation,) each row's log-loss, one
                                                                  # label per text; the paired comparison's
    fit: tuple[str, Any] | None = field(default=None, repr=False)  # an n-gram candidate's (fit_key, estimator),
                                                                   # while the stage runs
    result: Any = field(default=None, repr=False)   # an encoder trial's TrainResult (its record in memory), while
                                                    # it may win

    @property
    def complete(self) -> bool:
        """Whether it has scores to compare (a trial sized to or cut short by the budget too: ``ended``)."""
        return self.status == "complete" and self.accuracy is not None

    def rank_key(self) -> tuple[float, float]:
        """Higher is better: the lower log-loss, then the higher accuracy."""
        return (-(self.nll if self.nll is not None else math.inf), self.accuracy or 0.0)

    def to_dict(self) -> dict[str, Any]:
        """Its ``metrics.json`` record."""
        out = {"name": self.name, "kind": self.kind, "settings": self.settings, "validation_accuracy": self.accuracy,
               "validation_nll": self.nll, "seconds": round(self.seconds, 2), "status": self.status}
        if self.peer:
            out["peer"] = self.peer
        if self.kind == "encoder":
            out.update({"ended": self.ended or None, "examples_per_second": None if self.rate is None else
                        round(self.rate, 1), "needs_seconds": None if self.needs is None else round(self.needs, 1)})
        return out


def result_line(c: Candidate) -> str:
    """A candidate's result in one line (``on_note``)."""
    if not c.complete:
        return f"{c.name}: {c.status} after {c.seconds:.0f} s"
    ended = f" ({c.ended})" if c.ended and c.ended != "its schedule" else ""
    return f"{c.name}: validation accuracy {c.accuracy:.2%}, log-loss {c.nll:.4f}, {c.seconds:.1f} s{ended}"


def within_se(preferred: Candidate, best: Candidate, ses: float = 1.0) -> tuple[float, float] | None:
    """``(mean difference, its standard error)`` of ``preferred``'s validation log-losses less ``best``'s, row by row,
    when that mean is at most ``ses`` standard errors (the two tie within noise); ``None`` when it is more, or
    without row-by-row losses on the same rows (two at least) to pair. The one-standard-error rule (Breiman et al.
    1984; Hastie, Tibshirani & Friedman, "The Elements of Statistical Learning" 7.10), paired row by row."""
    a, b = preferred.losses, best.losses
    if a is None or b is None or len(a) != len(b) or len(a) < 2:
        return None
    d = a - b
    se = float(d.std(ddof=1) / math.sqrt(len(d)))
    return (float(d.mean()), se) if float(d.mean()) <= ses * se else None

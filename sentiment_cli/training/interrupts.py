"""Graceful stops: SIGINT / SIGTERM only set a flag, and the training loop polls it between steps.

A signal handler that raised in the middle of an optimizer step or of a
checkpoint write would leave half-updated state; setting a flag instead lets
the loop stop at the next step boundary, where the last completed epoch's
trainer state is already on disk (see ``trainer_state.py``). A second Ctrl-C
stops at once (``KeyboardInterrupt``), for a user who does not want to wait.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class StopFlag:
    """A stop request: set by a signal handler (or by code, e.g. in tests); polled by the training loop."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.requested = False

    def request(self, signum: int | None = None) -> None:
        """Ask the loop to stop at the next step boundary; ``signum`` is the signal that asked, if any."""
        if not self.requested:
            self.requested, self.signum = True, signum

    @property
    def by_budget(self) -> bool:
        """Whether a time budget, not a signal, stops the run (a search trial's :class:`~.trials.TrialStop`); never
        for a plain flag."""
        return False

    @property
    def exit_code(self) -> int:
        """``128 + signal number`` (130 SIGINT, 143 SIGTERM); 130 for a request without a signal."""
        return 128 + (self.signum or signal.SIGINT)

    @property
    def reason(self) -> str:
        """``"SIGINT"``, ``"SIGTERM"``, or ``"a stop request"``."""
        return signal.Signals(self.signum).name if self.signum else "a stop request"


@contextmanager
def stop_on_signals(signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[StopFlag]:
    """Within the block, ``signals`` set the yielded :class:`StopFlag` instead of killing the process.

    A second SIGINT raises ``KeyboardInterrupt`` at once. The previous
    handlers are restored on exit. Outside the main thread (where Python
    cannot install handlers) the flag is yielded but no handler is installed.
    """
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, frame):
        if signum == signal.SIGINT and flag.signum == signal.SIGINT:
            raise KeyboardInterrupt   # Ctrl-C twice: the user does not want to wait for the step
        flag.request(signum)

    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield flag
    finally:
        for s, old in previous.items():
            signal.signal(s, old if old is not None else signal.SIG_DFL)

"""Errors the tool reports as one line and an exit code (never a traceback).

Exit codes follow ``../shared/DESIGN.md``: 1 runtime error, 2 usage error
(bad flag, bad config, bad input), 130 / 143 training interrupted by SIGINT / SIGTERM.
"""

from __future__ import annotations


class SentimentError(Exception):
    """Base class: a problem the user can act on. ``exit_code`` is the process exit code."""

    exit_code = 1


class UsageError(SentimentError):
    """Bad input from the user: a flag, a config file, a review, a split name (exit 2)."""

    exit_code = 2


class ConfigError(UsageError):
    """A config file or override is invalid; the message names the file and the key."""


class DataError(SentimentError):
    """The dataset cannot be loaded or does not have the expected shape (exit 1)."""


class CheckpointError(SentimentError):
    """A checkpoint folder is missing, incomplete, corrupt or incompatible (exit 1)."""


class Interrupted(SentimentError):
    """Training stopped on SIGINT / SIGTERM (or a programmatic stop request).

    ``exit_code`` is ``128 + signal number`` (130 for SIGINT, 143 for SIGTERM),
    the shell convention; ``resumable`` tells whether an epoch was saved to resume from.
    """

    def __init__(self, message: str, exit_code: int = 130, resumable: bool = False):
        super().__init__(message)
        self.exit_code = exit_code
        self.resumable = resumable


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C raises ``KeyboardInterrupt`` (``cli/app.py``'s
    ``sigterm_as_interrupt``, around every command): like it a ``BaseException``, so no ``except Exception`` (a
    library's error wrapper, a backend's fallback) takes it for a failure of its own, and every ``with`` block
    unwinds (temporary files and folders removed). The CLI prints it as one ``error:`` line, exit
    :attr:`exit_code`."""

    exit_code = 143

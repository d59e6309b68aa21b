"""Errors the tool reports as one line and an exit code (never a traceback).

Exit codes follow ``../shared/DESIGN.md``: 1 runtime error, 2 usage error
(bad flag, bad config, bad input).
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

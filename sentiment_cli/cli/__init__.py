"""The ``sentiment`` command line: each command parses its options, calls the library, and renders with rich.

``app.py`` holds the Typer app and the error handling (one ``error:`` line, a
meaningful exit code); each command group has its module (``train.py`` for
train and pretrain, ``evaluate.py``, ``predict.py``, ``deploy.py`` for serve and export, ``info.py``,
``config.py``), and
``render.py`` / ``progress.py`` draw tables and progress. The console script
is ``sentiment_cli.cli:main``.
"""

from __future__ import annotations

# Importing the command modules registers their commands on `app`, in the order `--help` lists them.
from . import train, evaluate, predict, check, audit, suggest, deploy, info, config  # noqa: F401,E401  isort: skip
from .app import app


def main() -> None:
    """Console-script entry point."""
    app()


__all__ = ["app", "main"]

"""The ``sentiment`` command line: each command parses its options, calls the library, and renders with rich.

``app.py`` holds the Typer app and the error handling (one ``error:`` line, a
meaningful exit code); each command group has its module, which also draws that command's tables and panels
(spaCy's CLI style: ``train.py`` for train and pretrain, ``evaluate.py``, ``predict.py``, ``check.py``,
``audit.py``, ``suggest.py``, ``deploy.py`` for serve and export, ``info.py``, ``config.py``);
``render.py`` holds what their rendering shares and ``progress.py`` the progress bars. The console script
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

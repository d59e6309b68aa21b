"""``python -m sentiment_cli.cli`` runs the CLI, as ``python -m sentiment_cli`` does."""

from . import main

main()

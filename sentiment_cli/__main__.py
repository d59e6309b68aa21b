"""``python -m sentiment_cli`` runs the CLI (also under ``torchrun``)."""

from .cli import main

main()

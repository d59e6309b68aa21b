"""``sentiment info``: the model card."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .app import DEFAULT_CHECKPOINT, app, handle_errors
from .render import consoles, json_text, render_card


@app.command()
def info(
    checkpoint: Annotated[Path, typer.Option(help="Checkpoint folder.")] = DEFAULT_CHECKPOINT,
    as_json: Annotated[bool, typer.Option("--json", help="Print the model card as one JSON object.")] = False,
) -> None:
    """Show the model card: config, parameters, training data and fingerprint, metrics by split, versions."""
    with handle_errors():
        from ..card.facts import model_card

        card = model_card(checkpoint)
        if as_json:
            typer.echo(json_text(card))
            return
        out, _ = consoles()
        render_card(out, card)

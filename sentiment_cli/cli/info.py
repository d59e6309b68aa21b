"""``sentiment info``: the model card."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .app import DEFAULT_CHECKPOINT, app, handle_errors
from .render import consoles, json_text, safe


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


# ----------------------------------------------------------------------------- rendering: info's output

def render_card(console, card: dict) -> None:
    """The model card (``sentiment info``): results by split, then the facts by section."""
    import shlex
    from rich.table import Table

    from ..card.text import RESULT_COLUMNS, card_results, card_sections

    console.print(f"[bold]model card: {safe(card['name'])}[/]  ({safe(card['checkpoint'])})", highlight=False)
    rows = card_results(card)
    if rows:
        results = Table(title="results", title_justify="left")
        for col in RESULT_COLUMNS:
            results.add_column(col, justify="left" if col in ("split", "from") else "right")
        for row in rows:
            results.add_row(*map(safe, row))
        console.print(results)
    elif card.get("kind") != "pretrained":   # e.g. trained on all of train (no validation), not yet evaluated
        console.print(f"results: none yet; add test metrics with `sentiment eval --split test --checkpoint "
                      f"{safe(shlex.quote(card['checkpoint']))}`", highlight=False)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(style="dim")
    grid.add_column()
    for title, facts in card_sections(card):
        for i, (key, value) in enumerate(facts):
            grid.add_row(title.lower() if i == 0 else "", safe(key), safe(value))   # labels, paths, names
    console.print(grid)
    files = ", ".join(f for f in (card["files"]["curves"], card["files"].get("card")) if f)
    if files:
        console.print(f"[dim]in the folder: {safe(files)}[/]", highlight=False)

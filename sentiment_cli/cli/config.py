"""``sentiment config``: the effective config as TOML, or the reference of every key."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..config import PRESETS, build_config
from ..config_reference import reference_markdown
from .app import app, handle_errors


@app.command("config")
def config_(
    config: Annotated[Optional[str], typer.Option("--config", "-c", help="Preset (" + ", ".join(PRESETS)
                                                  + ") or TOML file.", show_default="default")] = None,
    sets: Annotated[Optional[list[str]], typer.Option("--set", metavar="SECTION.KEY=VALUE", show_default=False,
                                                      help="Set any config key, e.g. training.lr=1e-3 "
                                                           "(repeatable; checked like the file).")] = None,
    reference: Annotated[bool, typer.Option("--reference", help="Print the Markdown reference of every key "
                                                                "(docs/configuration.md) instead.")] = False,
) -> None:
    """Print the config a run would use (a preset or file, plus --set) as TOML that --config reads back.

    Save it, edit it, train with it: `sentiment config --config seed > my.toml`, then
    `sentiment train --config my.toml`.
    """
    with handle_errors():
        if reference:
            typer.echo(reference_markdown())
            return
        typer.echo(build_config(config, sets or ()).to_toml(), nl=False)

"""``sentiment config``: the effective config as TOML, the reference of every key, or the default's policy."""

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
    policy: Annotated[bool, typer.Option("--policy", help="Print the default's tuning numbers (its data rules, "
                                                          "search and fit), each with its meaning, unit and "
                                                          "evidence, as TOML that `train --policy` reads.")] = False,
    policy_file: Annotated[Optional[str], typer.Option("--policy-file", metavar="FILE", show_default=False,
                                                       help="With --policy: this file's changes applied.")] = None,
) -> None:
    """Print the config a run would use (a preset or file, plus --set) as TOML that --config reads back.

    Save it, edit it, train with it: `sentiment config --config seed > my.toml`, then
    `sentiment train --config my.toml`.
    """
    with handle_errors():
        if reference:
            typer.echo(reference_markdown())
            return
        if policy or policy_file:
            from ..training.policy import DEFAULT, policy_from_toml, policy_toml

            typer.echo(policy_toml(DEFAULT if policy_file is None else policy_from_toml(policy_file)), nl=False)
            return
        typer.echo(build_config(config, sets or ()).to_toml(), nl=False)

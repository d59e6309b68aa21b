"""``sentiment check``: parse the options, call :func:`~sentiment_cli.behaviour.run.check_checkpoint`, render
the failure rates by capability and by test (or one JSON object), and write every case with ``--output``."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .app import DEFAULT_CHECKPOINT, Device, app, handle_errors
from .progress import RichEvalCallbacks
from .render import consoles, json_text, render_check


class Half(str, Enum):
    all = "all"
    dev = "dev"
    test = "test"


@app.command("check")
def check(
    checkpoint: Annotated[Path, typer.Option(help="Checkpoint folder.")] = DEFAULT_CHECKPOINT,
    suite: Annotated[Optional[Path], typer.Option(
        metavar="FILE", help="A suite file (TOML, docs/check.md); default: the built-in suite for two-class "
                             "sentiment (labels negative and positive).")] = None,
    half: Annotated[Half, typer.Option(
        help="Which templates of a suite split in halves: dev (used while choosing settings), test (only "
             "reported), or all.")] = Half.all,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
    output: Annotated[Optional[Path], typer.Option(
        metavar="FILE", help="Also write every case's texts with their predictions (.csv or .jsonl).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace --output if it exists.")] = False,
    device: Annotated[Device, typer.Option(help="Where to run the model.")] = Device.auto,
    max_cases: Annotated[Optional[int], typer.Option(
        min=1, show_default="100,000", help="Refuse a suite that may give more cases than this (templates x "
                                            "samples), before building any.")] = None,
    max_characters: Annotated[Optional[int], typer.Option(
        min=1, show_default="50,000,000", help="Refuse a suite whose cases may hold more characters than this, "
                                               "before building any.")] = None,
) -> None:
    """Behavioural tests (CheckList's MFT, INV and DIR): failure rates by capability and by test.

    MFT: templates with an expected label. INV: typos, names, places and other changes that must not change the
    prediction. DIR: changes that must move a label's probability one way only (within a tolerance).
    Three failing examples per test are shown, the most confidently wrong first.
    """
    with handle_errors():
        from ..behaviour.run import check_checkpoint, suite_for
        from ..outputs import TABLE_TYPES, check_output, write_table
        from ..runtime import resolve_device

        if output is not None:
            inputs = [("the checkpoint", checkpoint)] + ([("--suite", suite)] if suite is not None else [])
            check_output(output, force=force, suffixes=TABLE_TYPES, inputs=inputs)
        chosen = suite_for(suite)
        limits = {k: v for k, v in (("max_cases", max_cases), ("max_characters", max_characters)) if v is not None}
        out, err = consoles()
        callbacks = RichEvalCallbacks(err, f"check {chosen.name}")
        try:
            report, rows = check_checkpoint(checkpoint, chosen, half.value, resolve_device(device.value),
                                            on_progress=_progress(callbacks), **limits)
        finally:
            callbacks.close()
        if output is not None:
            write_table(output, list(rows[0]) if rows else ["test"], rows)
        if as_json:
            typer.echo(json_text(report))
        else:
            render_check(out, report, output)


def _progress(callbacks: RichEvalCallbacks):
    """``(done, total)`` progress as the eval bar's ``on_start`` / ``on_batch``."""
    state = {"done": 0}

    def on_progress(done: int, total: int) -> None:
        if callbacks.progress is None:
            callbacks.on_start(total)
        callbacks.on_batch(done - state["done"])
        state["done"] = done

    return on_progress

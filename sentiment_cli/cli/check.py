"""``sentiment check``: parse the options, call :func:`~sentiment_cli.behaviour.run.check_checkpoint`, render
the failure rates by capability and by test (or one JSON object), and write every case with ``--output``."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .app import DEFAULT_CHECKPOINT, Device, app, handle_errors
from .progress import RichEvalCallbacks
from .render import consoles, json_text, printable, safe, shorten


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
        from ..arrow_output import write_table
        from ..outputs import TABLE_TYPES, check_output
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


# ----------------------------------------------------------------------------- rendering: check's output

def _rate(rate) -> str:
    return "–" if rate is None else f"{rate:.1%}"


def _rate_style(rate) -> str | None:
    """Red from 20% failures, yellow from 5%, green below (a reading aid, not a threshold of the tool)."""
    if rate is None:
        return "dim"
    return "red" if rate >= 0.2 else "yellow" if rate >= 0.05 else "green"


def render_check(console, report: dict, output=None) -> None:
    """``sentiment check``'s report: failure rates by capability, then by test with the failing examples."""
    from rich.table import Table
    from rich.text import Text

    o = report["overall"]
    half = "" if report["half"] == "all" else f" · {report['half']} half"
    left = (f" · {o['left_out']:,} left out (the perturbation does not apply, or empties the sentence)"
            if o.get("left_out") else "")
    console.print(f"[bold]{safe(report['suite'])}[/]{half}: {o['tests']} tests · {o['cases']:,} cases{left} · mean "
                  f"failure rate over tests [bold]{_rate(o['mean_failure_rate'])}[/]", highlight=False)
    caps = Table(title="by capability", title_justify="left")
    for col in ("capability", "tests", "cases", "failure rate"):
        caps.add_column(col, justify="left" if col == "capability" else "right")
    for c in report["capabilities"]:
        caps.add_row(safe(c["capability"]), str(c["tests"]), f"{c['cases']:,}",
                     Text(_rate(c["failure_rate"]), style=_rate_style(c["failure_rate"]) or ""))
    console.print(caps)
    tests = Table(title="by test", title_justify="left")
    for col in ("capability", "test", "type", "cases", "failure rate"):
        tests.add_column(col, justify="right" if col in ("cases", "failure rate") else "left")
    for t in report["tests"]:
        tests.add_row(safe(t["capability"]), safe(t["name"]), t["type"], f"{t['cases']:,}",
                      Text(_rate(t["failure_rate"]), style=_rate_style(t["failure_rate"]) or ""))
    console.print(tests)
    failing = [t for t in report["tests"] if t["examples"]]
    if failing:
        console.print("[bold]failing examples[/] (the most confidently wrong first)", highlight=False)
    for t in failing:
        console.print(f"  [bold]{safe(t['name'])}[/] ({t['type']}, {_rate(t['failure_rate'])})", highlight=False)
        for e in t["examples"]:
            console.print(Text("    " + _check_example(t["type"], e)), soft_wrap=True)
    if output is not None:
        console.print(f"[dim]every case: {safe(str(output))}[/]", highlight=False)


def _check_example(kind: str, e: dict) -> str:
    """One failing case in a line: the text and its label (and the perturbed copy's for INV and DIR)."""
    text = printable(shorten(e["text"], 90))
    if kind == "MFT":
        return f"{text} → {e['label']} {e['probability']:.2f} (expected {e['expected']})"
    changed = printable(shorten(e["perturbed"], 90))
    if kind == "INV":
        return f"{text} → {e['label']} {e['probability']:.2f}; {changed} → {e['perturbed_label']} " \
               f"{e['perturbed_probability']:.2f}"
    return f"p({e['label']}) {e['probability']:.2f} → {e['perturbed_probability']:.2f}: {changed}"

"""``sentiment audit``: parse the options, call :func:`~sentiment_cli.audit.run.audit`, render the findings
(a table and a summary, or one JSON object per finding)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..config import NGRAM_FIT_GB
from ..wording import plural
from .app import app, handle_errors
from .options import column_options
from .progress import RichAuditCallbacks
from .render import consoles, json_text, label_style, print_note, printable, safe, shorten


class SplitName(str, Enum):
    train = "train"
    validation = "validation"
    test = "test"


DataOption = Annotated[str, typer.Option(
    help="Labelled data to audit: a folder of train/dev/test files, one CSV, TSV, JSON, JSON Lines or Parquet file, "
         "or a Hub id (as for train).")]
SplitOption = Annotated[SplitName, typer.Option(help="Which split to audit, whole (a single file is its train).")]
FoldsOption = Annotated[Optional[int], typer.Option(
    min=2, max=20, show_default=False,
    help="Folds of the cross-fit: each row is scored by a model fitted on the other folds. Default: 10 stratified "
         "folds; 5 random folds on multi-label data (several labels per text), whose fits are one per label.")]
TopOption = Annotated[int, typer.Option(min=0, help="Show (and with --json print) the N most likely label errors.")]
OutputOption = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="Write every flagged row, ranked, to this .csv or .jsonl file: the input's columns plus "
                           "given, suggested, quality, rank, line and reasons (multi-label: given, suggested, "
                           "unlikely and missing label lists, quality, rank, line).")]
ForceOption = Annotated[bool, typer.Option("--force", help="Replace --output if it exists (never the --data it "
                                                            "reads).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object per finding (the top N), then one "
                                                          "object of the audit's warnings, instead of tables; the "
                                                          "summary goes to stderr.")]
FitGbOption = Annotated[float, typer.Option(
    "--fit-gb", min=0.001, help="The most memory the n-gram fits may take, in GB: their weights (buckets x classes) "
                                "and logistic regression's working copies, estimated before they are allocated; "
                                "a larger audit stops with an error.")]
TextColumnOption, LabelColumnOption = column_options("Column holding the texts; default: {names}.",
                                                     "Column holding the labels; default: {names}.")


@app.command("audit")
def audit_(
    data: DataOption,
    split: SplitOption = SplitName.train,
    folds: FoldsOption = None,
    top: TopOption = 20,
    output: OutputOption = None,
    force: ForceOption = False,
    as_json: JsonOption = False,
    text_column: TextColumnOption = None,
    label_column: LabelColumnOption = None,
    fit_gb: FitGbOption = NGRAM_FIT_GB,
) -> None:
    """Find the likely label errors in labelled data, ranked, each with the words behind the suggestion.

    Every row is scored by the n-gram score (NB-LR and logistic regression over word 1-3-grams, averaged)
    fitted on the other folds; cleanlab's confident learning ranks the rows whose given label
    those out-of-fold probabilities contradict (see docs/audit.md). On multi-label data each label is
    scored on its own (a sigmoid per label) and a finding names the given and suggested label sets.
    """
    with handle_errors():
        from ..audit.run import audit

        out, err = consoles()
        callbacks = RichAuditCallbacks(err)
        try:
            result = audit(data, split.value, folds=folds, text_column=text_column, label_column=label_column,
                           output=output, force=force, callbacks=callbacks, fit_gb=fit_gb)
        finally:
            callbacks.close()
        if as_json:
            for f in result.findings[:top]:
                typer.echo(json_text(f.to_dict()))
            typer.echo(json_text({"warnings": [w.to_dict() for w in result.warnings]}))
            render_audit_summary(err, result)
        else:
            render_audit(out, result, top)
            render_audit_summary(out, result)


# ----------------------------------------------------------------------------- rendering: audit's output

def _render_findings(console, result, top: int, what: str, caption: str, labels) -> None:
    """The audit's warnings, then its ``top`` flagged rows as a table (``#``, line or row, given, suggested, quality,
    text, why): one for single-label findings and label-set ones alike; ``labels(finding)`` gives the given and
    suggested cells."""
    from rich.text import Text

    for warning in result.warnings:
        print_note(console, warning.message)
    if not top or not result.findings:
        return
    shown = result.findings[:top]
    table = _findings_table(result, len(shown), what, caption)
    for f in shown:
        table.add_row(str(f.rank), str(f.line), *labels(f), f"{f.quality:.3f}", Text(shorten(printable(f.text), 240)),
                      Text(f.reasons_text()))
    console.print(table)


def _findings_table(result, shown: int, what: str, caption: str):
    """The audit's table of flagged rows, its columns made (``#``, line or row, given, suggested, quality, text,
    why)."""
    from rich.table import Table

    table = Table(title=plural(shown, what), title_justify="left", show_lines=True, caption=caption)
    table.add_column("#", justify="right")
    table.add_column("line" if result.findings[0].file else "row", justify="right")
    for name in ("given", "suggested"):
        table.add_column(name)
    table.add_column("quality", justify="right")
    table.add_column("text", ratio=2)
    table.add_column("why", ratio=1)
    return table


def render_audit(console, result, top: int) -> None:
    """An ``audit`` result: what scored the rows, then the ``top`` most likely label errors with their reasons."""
    from rich.text import Text

    if getattr(result, "multi_label", False):
        render_label_set_audit(console, result, top)
        return
    m = result.method
    _headline(console, result, f"{len(result.labels)} classes", "label errors",
              f"out-of-fold probabilities: {safe(m['model'])}, cross-fitted over {m['folds']} stratified folds "
              f"({m['seconds']:.0f} s), temperature {m['temperature']:.3f}; out-of-fold accuracy "
              f"{m['out_of_fold_accuracy']:.2%}; ranked by cleanlab")
    _render_findings(console, result, top, "most likely label error",
                     "quality: the out-of-fold probability of the given label · why: the words that pushed towards "
                     "the suggested label (logit units)",
                     lambda f: (Text(f.given, style=label_style(f.given, result.labels)),
                                Text(f.suggested, style=label_style(f.suggested, result.labels))))


def _headline(console, result, units: str, flagged: str, method: str) -> None:
    """An audit's first two lines: where, its rows and ``units``, how many rows were flagged as likely ``flagged``
    and the time; then ``method`` (markup, its values escaped), how the rows were scored, dimmed."""

    s = result.summary
    console.print(f"[bold]{safe(result.where)}[/]: {s['rows']:,} rows  ·  {units}  ·  [bold]{s['flagged']:,}[/] "
                  f"flagged as likely {flagged}  ·  {result.seconds:.0f} s", highlight=False)
    console.print(f"[dim]{method}[/]", highlight=False, soft_wrap=True)


def render_audit_summary(console, result) -> None:
    """An ``audit`` result's summary: the estimated label error rate per class and the most confused pairs."""
    from rich.table import Table

    s = result.summary
    if getattr(result, "multi_label", False):
        _render_label_set_summary(console, result)
        return
    per = Table(title=f"estimated label errors: {s['estimated_error_rate']:.1%} of the rows (cleanlab's "
                      "estimate_joint)", title_justify="left")
    for col in ("class", "rows", "flagged", "est. error rate"):
        per.add_column(col, justify="left" if col == "class" else "right")
    for c in s["classes"]:
        per.add_row(safe(c["label"]), f"{c['rows']:,}", f"{c['flagged']:,}", f"{c['estimated_error_rate']:.1%}")
    console.print(per)
    if s["pairs"]:
        pairs = Table(title="most confused: given label → likely true label", title_justify="left")
        for col in ("given", "likely", "est. rows", "flagged"):
            pairs.add_column(col, justify="right" if col in ("est. rows", "flagged") else "left")
        for p in s["pairs"]:
            pairs.add_row(safe(p["given"]), safe(p["likely"]), f"{p['estimated_rows']:,.0f}", f"{p['flagged']:,}")
        console.print(pairs)
    if result.output is not None:
        console.print(f"[dim]{s['flagged']:,} flagged rows written to {safe(str(result.output))}[/]", highlight=False)
    for note in result.method.get("notes", ()):
        print_note(console, note)


def render_label_set_audit(console, result, top: int) -> None:
    """A multi-label ``audit`` result (``audit/label_sets.py``): what scored the rows, then the ``top`` most
    likely label-set errors: given and suggested sets, the doubted labels with their probabilities."""
    from rich.text import Text

    m = result.method
    _headline(console, result, f"{len(result.labels)} labels (several per row)", "label-set errors",
              f"out-of-fold probabilities: {safe(m['model'])}, cross-fitted over {m['folds']} random folds "
              f"({m['seconds']:.0f} s), a temperature per label (mean {m['temperature']:.3f}); out-of-fold subset "
              f"accuracy {m['out_of_fold_accuracy']:.2%}, micro-F1 {m['out_of_fold_micro_f1']:.3f}; ranked by "
              "cleanlab (multi-label)")
    _render_findings(console, result, top, "most likely label-set error",
                     "quality: cleanlab's multi-label label quality · why: the labels that look wrong, with their "
                     "out-of-fold probabilities",
                     lambda f: (Text(", ".join(f.given)), Text(", ".join(f.suggested) or "(none)")))


def _render_label_set_summary(console, result) -> None:
    """A multi-label ``audit`` result's summary: per label, its rows, the flags and the estimated error rate."""
    from rich.table import Table

    s = result.summary
    per = Table(title=f"estimated label errors: {s['estimated_error_rate']:.1%} of the (row, label) memberships "
                      "(cleanlab's estimate_joint, one-vs-rest)", title_justify="left")
    for col in ("label", "rows", "unlikely", "missing", "est. error rate"):
        per.add_column(col, justify="left" if col == "label" else "right")
    for c in s["classes"]:
        per.add_row(safe(c["label"]), f"{c['rows']:,}", f"{c['flagged']:,}", f"{c['missing']:,}",
                    f"{c['estimated_error_rate']:.1%}")
    console.print(per)
    if result.output is not None:
        console.print(f"[dim]{s['flagged']:,} flagged rows written to {safe(str(result.output))}[/]", highlight=False)
    for note in result.method.get("notes", ()):
        print_note(console, note)

"""``sentiment audit``: parse the options, call :func:`~sentiment_cli.audit.run.audit`, render the findings
(a table and a summary, or one JSON object per finding)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..config import NGRAM_FIT_GB
from .app import app, handle_errors
from .options import column_options
from .progress import RichAuditCallbacks
from .render import consoles, json_text, render_audit, render_audit_summary


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

"""``sentiment eval``: parse the options, call :func:`~sentiment_cli.evaluation.evaluate.evaluate_checkpoint`,
write the plots asked for, and render the result (tables, or one JSON object)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..errors import UsageError
from .app import DEFAULT_CHECKPOINT, Device, app, handle_errors
from .options import LabelColumnsOption, column_options, label_columns as parse_label_columns
from .progress import RichEvalCallbacks
from .render import (consoles, json_text, render_calibration, render_errors, render_eval, render_label_set_errors,
                     render_multilabel_eval)


class SplitName(str, Enum):
    train = "train"
    validation = "validation"
    test = "test"


SplitOption = Annotated[SplitName, typer.Option(help="Which split to score.")]
CheckpointOption = Annotated[Path, typer.Option(help="Checkpoint folder.")]
DataOption = Annotated[Optional[str], typer.Option(
    help="Dataset to score: Hub id, folder or file (a file is scored whole); default: the one the checkpoint "
         "was trained on.")]
TextColumnOption, LabelColumnOption = column_options(
    "Column of --data holding the texts; default: the checkpoint's for its own data, else {names}.",
    "Column of --data holding the labels; default: the checkpoint's for its own data, else {names}.")
BatchSizeOption = Annotated[Optional[int], typer.Option(
    min=1, help="Reviews per batch; default: the checkpoint's \\[training] eval_batch_size.")]
DeviceOption = Annotated[Device, typer.Option(help="Where to run the model.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
ErrorsOption = Annotated[int, typer.Option("--errors", min=0, metavar="N",
                                           help="Also list the N reviews the model got most confidently wrong.")]
PlotOption = Annotated[Optional[Path], typer.Option(
    "--plot", metavar="PATH", help="Write the confusion matrix as a PNG (needs matplotlib), and the reliability "
                                   "diagram beside it as PATH's name + '-reliability.png'.")]
AuditOption = Annotated[Optional[Path], typer.Option(
    "--audit", metavar="FILE", help="With --errors: mark the mistakes whose rows 'sentiment audit --output FILE' "
                                    "flagged as likely mislabelled (the data's error, not the model's).")]


@app.command("eval")
def eval_(
    split: SplitOption = SplitName.test,
    checkpoint: CheckpointOption = DEFAULT_CHECKPOINT,
    data: DataOption = None,
    text_column: TextColumnOption = None,
    label_column: LabelColumnOption = None,
    label_columns: LabelColumnsOption = None,
    batch_size: BatchSizeOption = None,
    device: DeviceOption = Device.auto,
    as_json: JsonOption = False,
    errors: ErrorsOption = 0,
    plot: PlotOption = None,
    audit: AuditOption = None,
) -> None:
    """Score a split: accuracy, per-class and averaged precision/recall/F1, confusion matrix, calibration (ECE).

    ECE (15 bins) is shown with and without the checkpoint's temperature.

    The result is also kept in the checkpoint folder (eval_<split>.json) for `sentiment info`.
    """
    with handle_errors():
        from ..evaluation.evaluate import evaluate_checkpoint
        from ..runtime import resolve_device

        if plot is not None:  # before any work: say how to get matplotlib, or that the folder is missing
            _check_plot(plot)
        flags = _read_flags(audit, errors, text_column) if audit is not None else None
        columns = parse_label_columns(label_columns)   # a multi-label model's 0/1 columns in --data
        more = {"label_columns": columns} if columns else {}
        out, err = consoles()
        callbacks = RichEvalCallbacks(err, f"eval {split.value}")
        try:
            result = evaluate_checkpoint(checkpoint, split.value, data=data, text_column=text_column,
                                         label_column=label_column, batch_size=batch_size,
                                         device=resolve_device(device.value), errors=errors, flags=flags,
                                         callbacks=callbacks, **more)
        finally:
            callbacks.close()
        reliability_plot = _write_plots(plot, split.value, result) if plot is not None else None
        if as_json:
            typer.echo(json_text(result))
        else:
            _render(out, result, errors, plot, reliability_plot)


def _read_flags(audit: Path, errors: int, text_column: Optional[str]) -> dict[str, dict[str, Any]]:
    """The rows an audit flagged, by text, read before any work.

    Raises:
        UsageError: ``--audit`` without ``--errors N``; see :func:`~sentiment_cli.audit.rows.read_flags`.
    """
    from ..audit.rows import read_flags

    if not errors:
        raise UsageError("--audit marks the mistakes that --errors N lists; give --errors N too")
    return read_flags(audit, text_column)


def _check_plot(plot: Path) -> None:
    """Fail early when ``--plot`` cannot be written.

    Raises:
        PlotUnavailable: matplotlib is not installed (the message says how to get it).
        UsageError: ``plot``'s folder does not exist.
    """
    from ..evaluation import plots

    plots.require_matplotlib()
    if not plot.parent.is_dir():
        raise UsageError(f"--plot {plot}: folder {plot.parent} does not exist")


def _write_plots(plot: Path, split: str, result: dict[str, Any]) -> Path:
    """Write the confusion matrix to ``plot`` and the reliability diagram beside it; returns the diagram's path.

    Raises:
        UsageError: a multi-label model's result (it has no confusion matrix).
    """
    from ..evaluation import plots

    if result.get("multi_label"):
        raise UsageError("--plot draws a confusion matrix and a reliability diagram of one label per text; a "
                         "multi-label model has neither (its per-label figures are in the tables and --json)")

    plots.write_png(plot, plots.confusion_png(
        result["confusion_matrix"], result["labels"], title=f"{split}: accuracy {result['accuracy']:.2%}"))
    reliability_plot = plots.reliability_path(plot)
    plots.write_png(reliability_plot, plots.reliability_png(
        result["reliability"]["calibrated"], result["reliability"]["uncalibrated"], result["temperature"],
        title=f"{split}: reliability diagram ({result['num_examples']:,} reviews, 15 bins)"))
    return reliability_plot


def _render(out, result: dict[str, Any], errors: int, plot: Optional[Path], reliability_plot: Optional[Path]) -> None:
    """The result as tables: metrics, calibration, the ``errors`` most confident mistakes, where the plots went."""
    if result.get("multi_label"):
        render_multilabel_eval(out, result)
        if errors:
            render_label_set_errors(out, result["errors"], errors)
        return
    render_eval(out, result)
    render_calibration(out, result)
    if errors:
        render_errors(out, result["errors"], errors, result["labels"])
    if plot is not None:
        from rich.markup import escape
        out.print(f"[dim]confusion matrix written to {escape(str(plot))}, reliability diagram to "
                  f"{escape(str(reliability_plot))}[/]", highlight=False, soft_wrap=True)

"""``sentiment eval``."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UsageError
from .app import DEFAULT_CHECKPOINT, Device, app, handle_errors
from .progress import RichEvalCallbacks
from .render import consoles, render_calibration, render_errors, render_eval


class SplitName(str, Enum):
    train = "train"
    validation = "validation"
    test = "test"


@app.command("eval")
def eval_(
    split: Annotated[SplitName, typer.Option(help="Which split to score.")] = SplitName.test,
    checkpoint: Annotated[Path, typer.Option(help="Checkpoint folder.")] = DEFAULT_CHECKPOINT,
    data: Annotated[Optional[str], typer.Option(
        help="Dataset to score: Hub id, folder or file (a file is scored whole); default: the one the checkpoint "
             "was trained on.")] = None,
    text_column: Annotated[Optional[str], typer.Option(
        help="Column of --data holding the texts; default: the checkpoint's for its own data, else the one "
             "named text, review, sentence or content.")] = None,
    label_column: Annotated[Optional[str], typer.Option(
        help="Column of --data holding the labels; default: the checkpoint's for its own data, else the one "
             "named label, sentiment, rating, stars or class.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(
        min=1, help="Reviews per batch; default: the checkpoint's \\[training] eval_batch_size.")] = None,
    device: Annotated[Device, typer.Option(help="Where to run the model.")] = Device.auto,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
    errors: Annotated[int, typer.Option("--errors", min=0, metavar="N",
                                        help="Also list the N reviews the model got most confidently wrong.")] = 0,
    plot: Annotated[Optional[Path], typer.Option("--plot", metavar="PATH",
                                                 help="Write the confusion matrix as a PNG (needs matplotlib), and the reliability "
                                                      "diagram beside it as PATH's name + '-reliability.png'.")] = None,
) -> None:
    """Score a split: accuracy, per-class and averaged precision/recall/F1, confusion matrix, calibration (ECE).

    ECE (15 bins) is shown with and without the checkpoint's temperature.

    The result is also kept in the checkpoint folder (eval_<split>.json) for `sentiment info`.
    """
    with handle_errors():
        from ..evaluation import plots
        from ..evaluation.evaluate import evaluate_checkpoint
        from ..runtime import resolve_device

        if plot is not None:  # before any work: say how to get matplotlib, or that the folder is missing
            plots.require_matplotlib()
            if not plot.parent.is_dir():
                raise UsageError(f"--plot {plot}: folder {plot.parent} does not exist")
        out, err = consoles()
        callbacks = RichEvalCallbacks(err, f"eval {split.value}")
        try:
            result = evaluate_checkpoint(checkpoint, split.value, data=data, text_column=text_column,
                                         label_column=label_column, batch_size=batch_size,
                                         device=resolve_device(device.value), errors=errors, callbacks=callbacks)
        finally:
            callbacks.close()
        if plot is not None:
            plots.write_png(plot, plots.confusion_png(
                result["confusion_matrix"], result["labels"], title=f"{split.value}: accuracy {result['accuracy']:.2%}"))
            reliability_plot = plots.reliability_path(plot)
            plots.write_png(reliability_plot, plots.reliability_png(
                result["reliability"]["calibrated"], result["reliability"]["uncalibrated"], result["temperature"],
                title=f"{split.value}: reliability diagram ({result['num_examples']:,} reviews, 15 bins)"))
        if as_json:
            typer.echo(json.dumps(result, ensure_ascii=False))
        else:
            render_eval(out, result)
            render_calibration(out, result)
            if errors:
                render_errors(out, result["errors"], errors, result["labels"])
            if plot is not None:
                from rich.markup import escape
                out.print(f"[dim]confusion matrix written to {escape(str(plot))}, reliability diagram to "
                          f"{escape(str(reliability_plot))}[/]", highlight=False, soft_wrap=True)

"""``sentiment eval``: parse the options, call :func:`~sentiment_cli.evaluation.evaluate.evaluate_checkpoint`,
write the plots asked for, and render the result (tables, or one JSON object)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..errors import UsageError
from ..wording import plural
from .app import DEFAULT_CHECKPOINT, Device, app, handle_errors
from .options import LabelColumnsOption, column_options, label_columns as parse_label_columns
from .progress import RichEvalCallbacks
from .render import consoles, json_text, label_style, printable, safe, shorten


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
                                           help="Also list the N texts the model got most confidently wrong.")]
PlotOption = Annotated[Optional[Path], typer.Option(
    "--plot", metavar="PATH", help="Write the confusion matrix as a PNG (needs matplotlib), and the reliability "
                                   "diagram beside it as PATH's name + '-reliability.png'.")]
ForceOption = Annotated[bool, typer.Option("--force", help="Replace an existing --plot file (never the checkpoint's "
                                                            "files or the --data and --audit files it reads).")]
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
    force: ForceOption = False,
) -> None:
    """Score a split: accuracy, per-class and averaged precision/recall/F1, confusion matrix, calibration (ECE).

    ECE (15 bins) is shown with and without the checkpoint's temperature.

    The result is also kept in the checkpoint folder (eval_<split>.json) for `sentiment info`.
    """
    with handle_errors():
        from ..evaluation.evaluate import evaluate_checkpoint
        from ..runtime import resolve_device

        if plot is not None:  # before any work: matplotlib is there, and the pictures may be written
            from ..checkpoint import checkpoint_inputs

            _check_plot(plot, force, checkpoint_inputs(checkpoint, data) + ([("--audit", audit)] if audit else []))
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


def _check_plot(plot: Path, force: bool, inputs: list[tuple[str, Any]]) -> None:
    """Fail early when ``--plot`` cannot be written: the picture and the reliability diagram beside it follow
    every command's output rule (:func:`~sentiment_cli.outputs.check_output`: ``--force`` to replace a file,
    never one of ``inputs``, never a device or FIFO).

    Raises:
        PlotUnavailable: matplotlib is not installed (the message says how to get it).
        UsageError: ``plot``'s folder does not exist, or either file may not be written.
    """
    from ..evaluation import plots
    from ..outputs import check_output

    plots.require_matplotlib()
    check_output(plot, force=force, option="--plot", inputs=inputs)
    check_output(plots.reliability_path(plot), force=force, option="--plot's reliability diagram", inputs=inputs)


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
        title=f"{split}: reliability diagram ({result['num_examples']:,} texts, 15 bins)"))
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
        out.print(f"[dim]confusion matrix written to {safe(str(plot))}, reliability diagram to "
                  f"{safe(str(reliability_plot))}[/]", highlight=False, soft_wrap=True)


# ----------------------------------------------------------------------------- rendering: eval's output

def render_eval(console, r: dict) -> None:
    """An ``eval`` result: the headline, per-class precision / recall / F1 with the macro and weighted
    averages, and the N x N confusion matrix (rows true, columns predicted)."""
    from rich.table import Table

    from ..data.labels import LABELS   # not at the top: numpy stays out of the CLI's start

    labels = r.get("labels") or LABELS   # records written before label sets: IMDB's
    console.print(f"[bold]{r['split']}[/]: {r['num_examples']:,} texts  ·  {len(labels)} classes  ·  "
                  f"accuracy [bold]{r['accuracy']:.2%}[/]  ·  macro F1 {r['f1']['macro']:.4f}"
                  f"  ·  loss {r['loss']:.4f}  ·  {r['examples_per_second']:,.0f} texts/s", highlight=False)
    cm = r["confusion_matrix"]
    support = r.get("support") or {name: sum(row) for name, row in zip(labels, cm)}
    per = Table(title="per class", title_justify="left")
    for col in ("class", "precision", "recall", "F1", "support"):
        per.add_column(col, justify="right" if col != "class" else "left")
    for name in labels:
        per.add_row(safe(name), f"{r['precision'][name]:.4f}", f"{r['recall'][name]:.4f}", f"{r['f1'][name]:.4f}",
                    f"{support[name]:,}")
    per.add_section()
    for avg in ("macro", "weighted"):
        if avg in r["precision"]:   # records written before weighted averages have only macro
            per.add_row(f"{avg} avg", f"{r['precision'][avg]:.4f}", f"{r['recall'][avg]:.4f}", f"{r['f1'][avg]:.4f}",
                        f"{r['num_examples']:,}", style="bold" if avg == "macro" else None)
    console.print(per)
    conf = Table(title="confusion matrix", title_justify="left",
                 caption="rows: true label · columns: predicted · bold: correct")
    conf.add_column("")
    for name in labels:
        conf.add_column(safe(name), justify="right")
    for i, name in enumerate(labels):
        conf.add_row(safe(name), *(f"[bold]{n:,}[/]" if i == j else f"{n:,}" for j, n in enumerate(cm[i])))
    console.print(conf)


def render_calibration(console, r: dict) -> None:
    """An ``eval`` result's calibration: ECE before and after the temperature (one line)."""
    if "ece" not in r:
        return
    t = r["temperature"]
    if t == 1.0:
        line = f"calibration: ECE [bold]{r['ece']:.2%}[/] (15 bins; no temperature fitted, T = 1)"
    else:
        line = (f"calibration: ECE [bold]{r['ece']:.2%}[/] with temperature {t:.3f}, "
                f"{r['ece_uncalibrated']:.2%} without (15 bins)")
    console.print(line, highlight=False)


def render_multilabel_eval(console, metrics: dict) -> None:
    """A multi-label ``eval`` result (``evaluation.multilabel.multilabel_metrics``' dict): the headline, a
    summary (micro / macro / weighted precision, recall and F1; subset accuracy, Hamming loss, LRAP, mean
    ECE) and the per-label table, most supported label first, with each label's threshold when the dict
    has ``"thresholds"`` (``{name: threshold}``)."""
    from rich.table import Table

    m = metrics
    where = f"[bold]{safe(str(m['split']))}[/]: " if m.get("split") else ""
    console.print(f"{where}{m['examples']:,} texts  ·  {len(m['per_label'])} labels (multi-label)  ·  "
                  f"micro F1 [bold]{m['micro']['f1']:.4f}[/]  ·  subset accuracy {m['subset_accuracy']:.2%}",
                  highlight=False)
    averages = Table(title="summary", title_justify="left")
    for col in ("average", "precision", "recall", "F1"):
        averages.add_column(col, justify="left" if col == "average" else "right")
    for avg in ("micro", "macro", "weighted"):
        a = m[avg]
        averages.add_row(avg, f"{a['precision']:.4f}", f"{a['recall']:.4f}", f"{a['f1']:.4f}",
                         style="bold" if avg == "micro" else None)
    console.print(averages)
    sets = Table(caption="subset accuracy: texts with every label right · Hamming loss: wrong (text, label) "
                         "decisions · LRAP: label ranking average precision · ECE: mean over labels, 15 bins")
    for col in ("subset accuracy", "Hamming loss", "LRAP", "ECE"):
        sets.add_column(col, justify="right")
    sets.add_row(f"{m['subset_accuracy']:.2%}", f"{m['hamming_loss']:.4f}", f"{m['lrap']:.4f}", f"{m['ece']:.2%}")
    console.print(sets)
    console.print(_per_label_table(m))


def _per_label_table(m: dict):
    """The per-label rows of :func:`render_multilabel_eval`, by support (most first; ties in label order)."""
    from rich.table import Table

    thresholds, ece = m.get("thresholds") or {}, m.get("ece_per_label") or {}
    per = Table(title="per label", title_justify="left")
    columns = ["label", "precision", "recall", "F1", "support"]
    columns += ["threshold"] * bool(thresholds) + ["ECE"] * bool(ece)
    for col in columns:
        per.add_column(col, justify="left" if col == "label" else "right")
    for name, r in sorted(m["per_label"].items(), key=lambda kv: -kv[1]["support"]):
        cells = [safe(name), f"{r['precision']:.4f}", f"{r['recall']:.4f}", f"{r['f1']:.4f}", f"{r['support']:,}"]
        if thresholds:
            cells.append(f"{thresholds[name]:.2f}" if name in thresholds else "–")
        if ece:
            cells.append(f"{ece[name]:.2%}" if name in ece else "–")
        per.add_row(*cells)
    return per


def render_label_set_errors(console, errors: list[dict], asked: int) -> None:
    """A multi-label model's most confident mistakes (``eval --errors``): predicted and true label sets, the
    labels decided wrongly, and the probability of the most confident wrong decision."""
    from rich.table import Table
    from rich.text import Text

    title = plural(len(errors), "most confident mistake")
    if len(errors) < asked:
        title += f" (only {len(errors)} in the split)"
    table = Table(title=title, title_justify="left", show_lines=True)
    for name, justify in (("#", "right"), ("index", "right"), ("predicted", "left"), ("true", "left"),
                          ("wrong", "left")):
        table.add_column(name, justify=justify)
    table.add_column("text", ratio=1)
    for i, e in enumerate(errors, 1):
        table.add_row(str(i), str(e["index"]), safe(", ".join(e["labels"]) or "-"),
                      safe(", ".join(e["true_labels"]) or "-"),
                      Text(f"{printable(', '.join(e['wrong']))} {e['probability']:.3f}", style="red"),
                      Text(printable(shorten(e["text"], 240))))
    console.print(table)


def render_errors(console, errors: list[dict], asked: int, labels) -> None:
    """The most confident mistakes of an ``eval`` (``asked``: how many were asked for; ``labels``: the model's classes)."""
    from rich.table import Table
    from rich.text import Text

    title = plural(len(errors), "most confident mistake")
    if len(errors) < asked:
        title += f" (only {len(errors)} in the split)"
    table = Table(title=title, title_justify="left", show_lines=True)
    table.add_column("#", justify="right")
    table.add_column("index", justify="right")
    table.add_column("predicted")
    table.add_column("true")
    audited = any("audit" in e for e in errors)
    if audited:
        table.add_column("audit")
    table.add_column("review", ratio=1)
    for i, e in enumerate(errors, 1):
        color = label_style(e["label"], labels)
        cells = [str(i), str(e["index"]), Text(f"{printable(e['label'])} {e['probability']:.3f}", style=color),
                 safe(e["true_label"])]
        if audited:
            flag = e.get("audit")
            cells.append(Text(f"likely mislabelled (#{flag['rank']}, suggests {printable(flag['suggested'])})",
                              style="yellow")
                         if flag else Text("-", style="dim"))
        table.add_row(*cells, Text(printable(shorten(e["text"], 240))))
    console.print(table)
    if audited:
        n = sum(1 for e in errors if e.get("audit"))
        console.print(f"[dim]{n} of these {len(errors)} mistakes are rows the audit flagged as likely mislabelled: "
                      "the label may be wrong, not the model[/]", highlight=False)

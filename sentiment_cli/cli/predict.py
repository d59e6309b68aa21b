"""``sentiment predict``: reviews from arguments, a file or stdin, checked line by line."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UsageError
from .app import DEFAULT_CHECKPOINT, Device, app, handle_errors
from .render import consoles, json_text, label_style, printable, safe


class DecodeErrors(str, Enum):
    strict = "strict"
    replace = "replace"


MAX_LINE_BYTES = 16 * 2**20   # one review per line; a longer "line" is a wrong file, not a review


def _open_reviews(path: str):
    """``(binary stream, name for messages)`` for ``--file PATH``, or stdin for ``-``.

    Raises:
        UsageError: the file is missing, a folder, or unreadable.
    """
    if path == "-":
        return sys.stdin.buffer, "stdin"
    try:
        return open(path, "rb"), path
    except FileNotFoundError:
        raise UsageError(f"--file {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"--file {path}: is a folder, not a file of reviews") from None
    except OSError as exc:
        raise UsageError(f"--file {path}: cannot be read ({exc.strerror})") from None


def _read_lines(fh, name: str, errors: str):
    """Yield one review per line (lazily: memory stays bounded); problems name the line.

    Raises:
        UsageError: a line is not UTF-8 (with ``errors="strict"``), empty, holds a NUL byte
            (a binary file) or is longer than ``MAX_LINE_BYTES``.
    """
    try:
        n = 0
        while raw := fh.readline(MAX_LINE_BYTES + 1):
            n += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise UsageError(f"{name}, line {n}: longer than {MAX_LINE_BYTES // 2**20} MiB; "
                                 "expected one review per line")
            if b"\0" in raw:
                raise UsageError(f"{name}, line {n}: contains a NUL byte; this looks like a binary file, "
                                 "not text with one review per line")
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8", errors=errors)
            except UnicodeDecodeError as exc:
                raise UsageError(f"{name}, line {n}: not valid UTF-8 (byte {exc.start}); "
                                 "fix the file or pass --errors replace") from None
            line = line.rstrip("\r\n")
            if not line.strip():
                raise UsageError(f"{name}, line {n}: empty review")
            yield line
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()


def _argument_text(text: str, i: int, errors: str) -> str:
    """A review given as an argument, with undecodable bytes (surrogate-escaped by Python) handled per ``--errors``.

    Raises:
        UsageError: the argument is not valid UTF-8 and ``errors`` is ``strict``.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise UsageError(f"review {i}: holds an unpaired surrogate; not valid Unicode text") from None
    try:
        return raw.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise UsageError(f"review {i}: not valid UTF-8 (byte {exc.start}); pass --errors replace") from None


def _load_predictor(checkpoint: Path, device: Device, batch_size: int | None, onnx: bool):
    """The checkpoint's :class:`~sentiment_cli.inference.predictor.Predictor`; with ``onnx`` without torch."""
    from ..inference.predictor import Predictor

    if onnx:   # never imports torch: a cold start without its import time
        return Predictor(checkpoint, batch_size=batch_size, onnx=True)
    from ..runtime import resolve_device
    return Predictor(checkpoint, resolve_device(device.value), batch_size=batch_size)


def _predict_data(data: str, split: str | None, text_column: str, output: str | None, force: bool,
                  predictor_args: tuple, explain: bool) -> None:
    """``predict --data``: every row of a split, its columns kept and the prediction's added, streamed to
    ``output`` (by its suffix) or JSON Lines on stdout."""
    from ..arrow_output import STREAM_TYPES, ArrowStreamWriter
    from ..outputs import check_output
    from .progress import RichRowsProgress

    checkpoint = predictor_args[0]
    if output is not None:   # before any work: a refused name costs nothing
        check_output(output, force=force, suffixes=STREAM_TYPES,
                     inputs=[("--data", data), ("the checkpoint", checkpoint)])
    _, err = consoles()
    progress = RichRowsProgress(err)
    try:
        progress.on_stage(f"reading {data}")
        from ..data.batches import open_split
        from ..inference.dataset import predict_split

        stream = open_split(data, split, text_column)
        predictor = _load_predictor(*predictor_args)
        with ArrowStreamWriter(output) as writer:   # SIGTERM (handle_errors) or Ctrl-C removes the partial file
            progress.on_start(stream.num_rows)
            rows = predict_split(predictor, stream, writer, explain=explain, on_batch=progress.on_batch)
    finally:
        progress.close()
    if output is not None:
        err.print(f"wrote {rows:,} rows to {safe(output)}", highlight=False, soft_wrap=True)


def _predict_on_ray(cluster: tuple, data: str | None, text_column: str, output: str | None, force: bool,
                    predictor_args: tuple, explain: bool) -> None:
    """``predict --data DIR --output DIR --ray [--address A]``: :func:`~.inference.ray_predict.predict_with_ray`.

    Raises:
        UsageError: no ``--data`` or no ``--output``, or ``--device`` other than cpu.
    """
    checkpoint, device, batch_size, onnx = predictor_args
    address, workers, split = cluster
    if data is None or output is None:
        raise UsageError("--ray needs --data PATH and --output DIR (a folder of Parquet files)")
    if device != Device.cpu:
        raise UsageError("--ray runs each worker on one CPU core; leave --device out")
    from ..inference.ray_predict import predict_with_ray

    done = predict_with_ray(checkpoint, data, output, split=split, text_column=text_column, explain=explain,
                            address=address, workers=workers, batch_size=batch_size, onnx=onnx, force=force)
    _, err = consoles()
    err.print(f"wrote {done['rows']:,} rows to {safe(output)} ({done['workers']} workers, "
              f"{done['rows_per_second']:,.0f} rows/s)", highlight=False, soft_wrap=True)


def _check_sources(texts, file, data, split, text_column, output, force, ray, address, workers) -> None:
    """One source of texts, and the ``--data`` options only with ``--data``.

    Raises:
        UsageError: none or several sources, or a ``--data`` option without it.
    """
    if sum(x is not None and x != [] for x in (texts, file, data)) > 1:
        raise UsageError("give reviews as arguments, with --file, or with --data: one of them")
    if not texts and file is None and data is None:
        raise UsageError("no review given; pass text arguments, --file PATH (or - for stdin), or --data PATH")
    if data is None:
        for flag, value in (("--split", split), ("--text-column", text_column), ("--output", output)):
            if value:
                raise UsageError(f"{flag} goes with --data PATH (a dataset to score)")
        if force:
            raise UsageError("--force goes with --output FILE")
        if ray:
            raise UsageError("--ray goes with --data PATH and --output DIR")
    if (address is not None or workers is not None) and not ray:
        raise UsageError("--address and --workers go with --ray")


@app.command()
def predict(
    texts: Annotated[Optional[list[str]], typer.Argument(help="Reviews to classify.", show_default=False)] = None,
    file: Annotated[Optional[str], typer.Option("--file", "-f", help="Read one review per line from PATH, or - for stdin.")] = None,
    data: Annotated[Optional[str], typer.Option(
        "--data", help="Score a dataset (CSV, TSV, JSON Lines, Parquet, a folder of them, the Hub layout): every "
                       "column kept, label, probability and p_<label> added.", show_default=False)] = None,
    split: Annotated[Optional[str], typer.Option(help="With --data: the split of a folder (train, dev, test...).",
                                                 show_default=False)] = None,
    text_column: Annotated[str, typer.Option(help="With --data: the column of texts; default: the one named text, "
                                                  "review, sentence or content.", show_default=False)] = "",
    output: Annotated[Optional[str], typer.Option(
        "--output", "-o", help="With --data: write .parquet, .csv or .jsonl (by the suffix); default: JSON Lines "
                               "on stdout.", show_default=False)] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --output file.")] = False,
    ray: Annotated[bool, typer.Option(
        "--ray", help="With --data and --output DIR: score on Ray Data workers, Parquet files into DIR "
                      "(pip install 'sentiment-cli[ray]').")] = False,
    workers: Annotated[Optional[int], typer.Option(
        "--workers", min=1, help="With --ray: scoring workers, one core each; default: one per CPU of the cluster.",
        show_default=False)] = None,
    address: Annotated[Optional[str], typer.Option(
        "--address", help="With --ray: the cluster (auto, ray://HEAD:10001); default: RAY_ADDRESS, a cluster "
                          "started on this machine, else a new local one.", show_default=False)] = None,
    checkpoint: Annotated[Path, typer.Option(help="Checkpoint folder.")] = DEFAULT_CHECKPOINT,
    batch_size: Annotated[Optional[int], typer.Option(
        min=1, help="Reviews per batch; default: the checkpoint's \\[training] eval_batch_size.")] = None,
    device: Annotated[Device, typer.Option(help="Where to run the model.")] = Device.cpu,
    errors: Annotated[DecodeErrors, typer.Option("--errors", help="Invalid UTF-8 in --file: fail, or replace with U+FFFD.")] = DecodeErrors.strict,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line instead of a table.")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Show how much each word moved the prediction "
                                                             "(with --json: adds tokens and scores; with --data: "
                                                             "top_tokens).")] = False,
    onnx: Annotated[bool, typer.Option("--onnx", help="Run the model `sentiment export` wrote (--checkpoint: the "
                                                       "folder or the .onnx file) on ONNX Runtime, without torch.")] = False,
) -> None:
    """Classify reviews given as arguments, one per line with --file PATH (or - for stdin), or a dataset (--data).

    With --json, input is streamed in batches (memory stays bounded for any number of lines).

    --data streams too: it keeps every input column (ids included) and adds the prediction's (docs/scoring.md).
    """
    with handle_errors():
        _check_sources(texts, file, data, split, text_column, output, force, ray, address, workers)
        if ray:
            _predict_on_ray((address, workers, split), data, text_column, output, force,
                            (checkpoint, device, batch_size, onnx), explain)
            return
        if data is not None:
            _predict_data(data, split, text_column, output, force, (checkpoint, device, batch_size, onnx), explain)
            return
        from ..inference.prediction import check_texts

        if texts:   # checked before the checkpoint loads, so bad input fails at once
            texts = [_argument_text(t, i, errors.value) for i, t in enumerate(texts, 1)]
            check_texts(texts)
        source = None if texts else _open_reviews(file)
        predictor = _load_predictor(checkpoint, device, batch_size, onnx)
        reviews = texts if texts else _read_lines(*source, errors.value)
        stream = predictor.explain_stream(reviews) if explain else predictor.predict_stream(reviews)
        _render(predictor, stream, as_json, explain)


def _render(predictor, stream, as_json: bool, explain: bool) -> None:
    """Print the predictions: JSON Lines, explanations, or a table."""
    if as_json:
        for p in stream:
            sys.stdout.write(json_text(p.to_dict()) + "\n")
        sys.stdout.flush()
        return
    out, _ = consoles()
    if explain:
        show = render_label_set_explanation if predictor.multi_label else render_explanation
        for i, e in enumerate(stream, 1):
            show(out, i, e)
        return
    if predictor.multi_label:
        render_label_sets(out, stream)
        return
    render_predictions(out, stream, predictor.labels)


# ----------------------------------------------------------------------------- rendering: predict's output

def render_predictions(console, predictions, labels) -> None:
    """A table of :class:`~sentiment_cli.inference.predictor.Prediction` objects, numbered from 1 (``labels``: the model's classes)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(show_lines=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("label", no_wrap=True)
    table.add_column("probability", justify="right", no_wrap=True)
    # what the other columns and the borders leave, so that a long review cannot squeeze them away
    table.add_column("review", overflow="ellipsis", no_wrap=True, max_width=max(10, min(80, console.width - 40)))
    for i, p in enumerate(predictions, 1):
        table.add_row(str(i), Text(printable(p.label), style=label_style(p.label, labels)), f"{p.probability:.3f}",
                      Text(printable(p.text[:1000])))
    console.print(table)


_EXPLAIN_TOP = 5


def _score_style(score: float, scale: float, unknown: bool, gradient: bool):
    """Green (positive) or red (negative), stronger for larger |score|.

    ``gradient``: a background tint blended by magnitude (256-colour and
    truecolor terminals); else three steps that survive 16-colour terminals.
    """
    from rich.color import Color
    from rich.style import Style

    a = min(1.0, abs(score) / scale) if scale > 0 else 0.0
    if a < 0.05:
        return Style(underline=unknown)
    hue = "green" if score > 0 else "red"
    if not gradient:
        step = "bold white on " + hue if a > 0.6 else f"black on {hue}" if a > 0.25 else hue
        return Style.parse(step) + Style(underline=unknown)
    a = 0.15 + 0.85 * a
    top = (0, 150, 0) if score > 0 else (200, 0, 0)
    rgb = tuple(round(255 + (c - 255) * a) for c in top)
    return Style(bgcolor=Color.from_rgb(*rgb), color="white" if a > 0.55 else "black", underline=unknown)


def render_label_sets(console, results) -> None:
    """A table of a multi-label model's :class:`~sentiment_cli.inference.multilabel.LabelSet` objects, numbered
    from 1: each text's labels with their probabilities, most probable first."""
    from rich.table import Table
    from rich.text import Text

    table = Table(show_lines=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("labels", overflow="fold", max_width=40)
    table.add_column("review", overflow="ellipsis", no_wrap=True, max_width=max(10, min(80, console.width - 50)))
    for i, r in enumerate(results, 1):
        shown = ", ".join(f"{printable(n)} {r.probabilities[n]:.2f}" for n in r.labels) or "(none)"
        table.add_row(str(i), Text(shown, style="bold" if r.labels else "dim"), Text(printable(r.text[:1000])))
    console.print(table)


def render_label_set_explanation(console, number: int, e) -> None:
    """A :class:`~sentiment_cli.inference.explain.LabelSetExplanation`: one panel per predicted label, each
    splitting that label's own logit over the tokens."""
    if not e.explanations:
        console.print(f"{number} (no label reaches its threshold): {safe(e.text[:200])}", highlight=False)
    for x in e.explanations:
        render_explanation(console, number, x, own_logit=True)


def render_explanation(console, number: int, e, own_logit: bool = False) -> None:
    """One :class:`~sentiment_cli.inference.explain.Explanation`: the review coloured by token score, the top tokens
    (``own_logit``: a multi-label model's, whose scores split the target label's own logit)."""
    from rich.panel import Panel
    from rich.text import Text

    scale = max((abs(s) for s in e.scores), default=0.0)
    gradient = console.color_system in ("256", "truecolor")
    body = Text()
    segments = e.segments()
    for piece, kind, score in segments:
        if kind == "omitted":
            body.append(" […] " if piece.strip() else piece, style="dim")
        elif kind == "space":
            body.append(piece)
        else:
            body.append(piece, style=_score_style(score, scale, kind == "unknown", gradient))
    body.append("\n")
    labels = list(e.probabilities)
    if own_logit:   # one label's own decision: + towards it, - away from it
        towards, away = e.target, f"not {e.target}"
    elif len(labels) == 2:   # the scores split logit(second) - logit(first): + towards the second label
        towards, away = labels[1], labels[0]
    else:
        towards, away = e.target, "the others"
    for positive, arrow, color in ((True, f"▲ {towards}", "green"), (False, f"▼ {away}", "red")):
        top = e.top(_EXPLAIN_TOP, positive)
        body.append(f"\n{arrow}: ", style=f"bold {color}")
        if not top:
            body.append("–", style="dim")
        for j, (tok, score) in enumerate(top):
            body.append((" · " if j else "") + tok, style=color)
            body.append(f" {score:+.2f}", style="dim")
    what = (f"logit({e.target})" if own_logit else f"logit({labels[1]}) - logit({labels[0]})" if len(labels) == 2
            else f"logit({e.target}) - mean of the other {len(labels) - 1} logits")
    body.append(f"\n{what} {e.margin:+.2f} = tokens {sum(e.scores):+.2f} + bias {e.bias:+.2f}", style="dim")
    if any(kind == "unknown" for _, kind, _ in segments):
        body.append("  ·  underlined: not in the vocabulary", style="dim")
    color = label_style(e.label, labels) or ""
    title = Text.assemble((f"{number} ", "bold"), (printable(e.label), f"bold {color}".strip()), f" {e.probability:.3f}")
    console.print(Panel(body, title=title, title_align="left", expand=False))

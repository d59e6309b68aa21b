"""The ``sentiment`` command line: parse options, call the library, render with rich.

Exit codes: 0 success, 1 runtime error, 2 usage error, 130 Ctrl-C, 143 SIGTERM.
Errors are one line on stderr starting ``error:``; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from .errors import Interrupted, SentimentError, UsageError

# Typer (vendored click in new releases, click itself in older ones) raises this for bad flags.
_ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class _OneLineErrors(TyperGroup):
    """Print usage errors (unknown flag, bad value) as one ``error:`` line, exit 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        args = _bare_resume(list(sys.argv[1:] if args is None else args))
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                              standalone_mode=False, **extra)
        except _ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            if ctx is not None and not exc.format_message():  # bare `sentiment`: show the help
                typer.echo(ctx.get_help())
                sys.exit(exc.exit_code)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            typer.echo(f"error: {exc.format_message()}{hint}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    cls=_OneLineErrors,
    name="sentiment",
    help="Train, evaluate and serve a small Transformer sentiment classifier for IMDB movie reviews.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

DEFAULT_CHECKPOINT = Path("checkpoints/default")
DEFAULT_PRETRAINED = Path("checkpoints/pretrained")
_state = {"debug": False}


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class SplitName(str, Enum):
    train = "train"
    validation = "validation"
    test = "test"


class DecodeErrors(str, Enum):
    strict = "strict"
    replace = "replace"


@contextmanager
def _errors():
    """Turn library errors into one stderr line and a meaningful exit code."""
    try:
        yield
    except SentimentError as exc:
        if _state["debug"]:
            raise
        if not (isinstance(exc, Interrupted) and os.environ.get("RANK", "0") != "0"):   # torchrun: rank 0 speaks
            typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        if _state["debug"]:
            raise
        typer.echo("error: interrupted", err=True)
        raise typer.Exit(130) from None
    except OSError as exc:
        if _state["debug"]:
            raise
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        typer.echo(f"error: {where}{exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None


def _version(value: bool) -> None:
    if value:
        from . import __version__
        typer.echo(f"sentiment {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Train, evaluate and serve a small Transformer sentiment classifier for IMDB movie reviews."""
    _state["debug"] = debug


def _consoles():
    from rich.console import Console
    return Console(), Console(stderr=True)


# ----------------------------------------------------------------------------- train

@app.command()
def train(
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="TOML config file.",
                                                   show_default="configs/default.toml")] = None,
    data: Annotated[Optional[str], typer.Option(help="Hub dataset id or local folder (Hub layout or aclImdb).",
                                                show_default="stanfordnlp/imdb")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Checkpoint folder to write.",
                                                   show_default=str(DEFAULT_CHECKPOINT))] = None,
    epochs: Annotated[Optional[int], typer.Option(help="Override \\[training] epochs.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Override \\[training] batch_size.")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Override \\[training] lr (peak learning rate).")] = None,
    device: Annotated[Optional[Device], typer.Option(help="Override \\[training] device.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Override \\[training] seed.")] = None,
    init: Annotated[Optional[Path], typer.Option("--init", help="Start from this `sentiment pretrain` folder "
                                                 "(overrides \\[training] init_from).")] = None,
    resume: Annotated[Optional[str], typer.Option(
        "--resume", metavar="[DIR]", show_default=False,
        help="Continue the run saved in DIR (default: --output) from its last completed epoch, with its "
             "saved settings; only --epochs and --device may change.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print metrics.json instead of tables.")] = False,
) -> None:
    """Train a classifier and save the best epoch (by validation accuracy; the last without validation) as a checkpoint folder.

    Ctrl-C or SIGTERM stops at the next step; the last completed epoch is kept and `--resume` continues it.
    """
    with _errors():
        from .interrupts import stop_on_signals
        from .train import resume as run_resume
        from .train import train as run_train

        if resume is not None:
            folder = _resume_folder(resume, output)
            changed = [flag for flag, value in (("--config", config), ("--data", data), ("--batch-size", batch_size),
                                                ("--lr", lr), ("--seed", seed), ("--init", init))
                       if value is not None]
            if changed:
                raise UsageError(f"--resume continues the saved run with its saved settings; drop {', '.join(changed)} "
                                 "(only --epochs and --device can change)")
        else:
            from .config import load_config

            cfg = load_config(config)
            cfg = cfg.override("data", source=data)
            cfg = cfg.override("training", epochs=epochs, batch_size=batch_size, lr=lr,
                               device=device.value if device else None, seed=seed,
                               init_from=str(init) if init is not None else None)
        out, err = _consoles()
        callbacks = None if as_json else _RichTrainCallbacks(err)
        try:
            with stop_on_signals() as stop:
                if resume is not None:
                    result = run_resume(folder, callbacks, epochs=epochs, device=device.value if device else None,
                                        stop=stop)
                else:
                    result = run_train(cfg, output or DEFAULT_CHECKPOINT, callbacks, stop=stop)
        finally:
            if callbacks is not None:
                callbacks.close()
        if not result.is_main:   # torchrun ranks other than 0 stay quiet
            return
        if as_json:
            typer.echo(json.dumps(result.metrics))
        else:
            _render_train_summary(out, result)
        _render_report_note(out if not as_json else err, result.report)


@app.command()
def pretrain(
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="TOML config file (\\[model], \\[data], "
                                                   "\\[pretrain]).", show_default="configs/default.toml")] = None,
    data: Annotated[Optional[str], typer.Option(help="Hub dataset id or local folder (Hub layout or aclImdb).",
                                                show_default="stanfordnlp/imdb")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Folder for the pretrained encoder.",
                                                   show_default=str(DEFAULT_PRETRAINED))] = None,
    epochs: Annotated[Optional[int], typer.Option(help="Override \\[pretrain] epochs.")] = None,
    splits: Annotated[Optional[str], typer.Option(help="Override \\[pretrain] splits: unsupervised+train, "
                                                       "unsupervised or train.")] = None,
    device: Annotated[Optional[Device], typer.Option(help="Override \\[training] device.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Override \\[training] seed.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print metrics.json instead of tables.")] = False,
) -> None:
    """Pretrain on unlabelled reviews (never validation or test): word2vec embeddings or a masked language model.

    `sentiment train --init DIR` then fine-tunes it.

    Ctrl-C or SIGTERM stops at the next step (word2vec: the next epoch); completed epochs stay saved.
    """
    with _errors():
        from .config import load_config
        from .interrupts import stop_on_signals
        from .pretrain import pretrain as run_pretrain

        cfg = load_config(config).override("data", source=data)
        cfg = cfg.override("pretrain", epochs=epochs, splits=splits)
        cfg = cfg.override("training", device=device.value if device else None, seed=seed)
        out, err = _consoles()
        callbacks = None if as_json else _RichPretrainCallbacks(err)
        try:
            with stop_on_signals() as stop:
                result = run_pretrain(cfg, output or DEFAULT_PRETRAINED, callbacks, stop=stop)
        finally:
            if callbacks is not None:
                callbacks.close()
        if as_json:
            typer.echo(json.dumps(result.metrics))
            return
        import shlex

        from rich.markup import escape

        m = result.metrics
        out.print(f"pretrained {m['objective']} weights saved to {escape(str(result.output))}  ·  "
                  f"{m['data']['reviews']:,} reviews ({m['data']['splits']})  ·  "
                  f"{m['wall_time_seconds']:.0f} s on {m['device']}", highlight=False)
        out.print(f"fine-tune it: sentiment train --init {escape(shlex.quote(str(result.output)))}", highlight=False)


def _resume_folder(resume: str, output: Optional[Path]) -> Path:
    """``--resume DIR`` or bare ``--resume`` (then ``--output``, or the default folder)."""
    if not resume:
        return output or DEFAULT_CHECKPOINT
    folder = Path(resume)
    if output is not None and output.resolve() != folder.resolve():
        raise UsageError(f"--resume {resume} and --output {output} name different folders; "
                         "a resumed run writes where it started")
    return folder


def _bare_resume(args: list[str]) -> list[str]:
    """Rewrite a bare ``--resume`` (last, or followed by another option) as ``--resume=``.

    Typer (since 0.20) has no options with an optional value; this keeps
    ``sentiment train --resume [DIR]`` working.
    """
    if "train" not in args:
        return args
    out = list(args)
    for i in range(out.index("train") + 1, len(out)):
        if out[i] == "--resume" and (i + 1 == len(out) or out[i + 1].startswith("-")):
            out[i] = "--resume="
    return out


class _RichTrainCallbacks:
    """Renders training progress: one progress bar per epoch, then a line per epoch."""

    def __init__(self, console):
        from .train import TrainCallbacks  # noqa: F401  (documents the protocol implemented)
        self.console = console
        self.progress = None
        self.task = None

    def _new_progress(self):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)
        self.close()
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
            console=self.console, transient=True, disable=not self.console.is_terminal,
        )
        self.progress.start()

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def on_stage(self, text: str) -> None:
        from rich.markup import escape
        self.console.print(f"[dim]{escape(text)}…[/]", highlight=False)

    def on_note(self, text: str) -> None:
        _print_note(self.console, text)

    def on_epoch_start(self, epoch: int, epochs: int, num_examples: int) -> None:
        self._new_progress()
        self.task = self.progress.add_task(f"epoch {epoch}/{epochs}", total=num_examples, stats="")

    def on_step(self, examples: int, loss: float, accuracy: float, examples_per_second: float) -> None:
        self.progress.update(self.task, advance=examples,
                             stats=f"loss {loss:.4f} acc {accuracy:.2%} {examples_per_second:,.0f} ex/s")

    def on_validation_start(self, num_examples: int) -> None:
        self.progress.update(self.task, visible=False)
        self.task = self.progress.add_task("validation", total=num_examples, stats="")

    def on_validation_step(self, examples: int) -> None:
        self.progress.update(self.task, advance=examples)

    def on_epoch_end(self, r: dict) -> None:
        self.close()
        val = ("" if r["validation_accuracy"] is None   # trained on all of train: nothing to validate on
               else f"val loss {r['validation_loss']:.4f} acc {r['validation_accuracy']:.2%}  ")
        star = "  [green]best[/]" if r["best"] and val else ""
        self.console.print(
            f"epoch {r['epoch']:>2}  train loss {r['train_loss']:.4f} acc {r['train_accuracy']:.2%}  {val}"
            f"{r['train_examples_per_second']:,.0f} ex/s  {r['train_seconds']:.1f}s{star}",
            highlight=False, soft_wrap=True)


class _RichPretrainCallbacks(_RichTrainCallbacks):
    """Renders pretraining progress: masked-word loss and accuracy (among the sampled candidates) for mlm."""

    def on_step(self, examples: int, loss: float, accuracy: float, examples_per_second: float) -> None:
        self.progress.update(self.task, advance=examples,
                             stats=f"mlm loss {loss:.4f} acc {accuracy:.2%} {examples_per_second:,.0f} ex/s")

    def on_epoch_end(self, r: dict) -> None:
        self.close()
        mlm = f"mlm loss {r['mlm_loss']:.4f} acc {r['mlm_accuracy']:.2%}  " if "mlm_loss" in r else ""
        self.console.print(f"epoch {r['epoch']:>2}  {mlm}{r['train_examples_per_second']:,.0f} reviews/s  "
                           f"{r['train_seconds']:.1f}s", highlight=False, soft_wrap=True)


def _render_train_summary(console, result) -> None:
    from rich.markup import escape
    from rich.table import Table

    m = result.metrics
    validated = m["best_validation_accuracy"] is not None
    table = Table(title="training summary", title_justify="left")
    for col in ("epoch", "train loss", "train acc", *(("val loss", "val acc") if validated else ()), "ex/s", "seconds"):
        table.add_column(col, justify="right")
    for r in m["history"]:
        style = "bold green" if r["epoch"] == m["best_epoch"] else None
        val = (f"{r['validation_loss']:.4f}", f"{r['validation_accuracy']:.2%}") if validated else ()
        table.add_row(str(r["epoch"]), f"{r['train_loss']:.4f}", f"{r['train_accuracy']:.2%}", *val,
                      f"{r['train_examples_per_second']:,.0f}", f"{r['train_seconds']:.1f}", style=style)
    console.print(table)
    kept = (f"best epoch {m['best_epoch']} (validation accuracy {m['best_validation_accuracy']:.2%})" if validated
            else f"epoch {m['best_epoch']}, the last (no validation split: trained on all of train)")
    console.print(f"{kept} saved to {escape(str(result.output))}  ·  {m['wall_time_seconds']:.0f} s on {m['device']}"
                  + ("  ·  stopped early" if m["stopped_early"] else ""), highlight=False)


def _render_report_note(console, report) -> None:
    from rich.markup import escape

    if report is None:
        return
    if report.curves is not None:
        console.print(f"[dim]curves: {escape(str(report.curves))}  ·  model card: {escape(str(report.card))}[/]",
                      highlight=False, soft_wrap=True)
    else:
        console.print(f"[dim]model card: {escape(str(report.card))}[/]", highlight=False, soft_wrap=True)
        _print_note(console, report.note)


def _print_note(console, text: str) -> None:
    """A yellow ``note:`` line: something the user should know that did not stop the command."""
    from rich.markup import escape
    console.print(f"[yellow]note:[/] {escape(text)}", highlight=False, soft_wrap=True)


# ----------------------------------------------------------------------------- eval

@app.command("eval")
def eval_(
    split: Annotated[SplitName, typer.Option(help="Which split to score.")] = SplitName.test,
    checkpoint: Annotated[Path, typer.Option(help="Checkpoint folder.")] = DEFAULT_CHECKPOINT,
    data: Annotated[Optional[str], typer.Option(help="Dataset to score; default: the one the checkpoint was trained on.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(
        min=1, help="Reviews per batch; default: the checkpoint's \\[training] eval_batch_size.")] = None,
    device: Annotated[Device, typer.Option(help="Where to run the model.")] = Device.auto,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
    errors: Annotated[int, typer.Option("--errors", min=0, metavar="N",
                                        help="Also list the N reviews the model got most confidently wrong.")] = 0,
    plot: Annotated[Optional[Path], typer.Option("--plot", metavar="PATH",
                                                 help="Write the confusion matrix as a PNG (needs matplotlib).")] = None,
) -> None:
    """Score a split: accuracy, precision, recall, F1 per class and macro, confusion matrix.

    The result is also kept in the checkpoint folder (eval_<split>.json) for `sentiment info`.
    """
    with _errors():
        from . import report
        from .checkpoint import load_checkpoint
        from .data import load_split
        from .evaluate import confident_errors, evaluate_ids
        from .tokenizer import encode
        from .train import resolve_device

        if plot is not None:  # before any work: say how to get matplotlib, or that the folder is missing
            report.require_matplotlib()
            if not plot.parent.is_dir():
                raise UsageError(f"--plot {plot}: folder {plot.parent} does not exist")
        dev = resolve_device(device.value)
        ckpt = load_checkpoint(checkpoint, dev)
        cfg = ckpt.config
        out, err = _consoles()
        with err.status(f"loading the {split.value} split"):
            s = load_split(data or cfg.data.source, split.value, cfg.data.validation_fraction, cfg.training.seed,
                           cfg.data.validation_split)
            ids = encode(ckpt.tokenizer, s.texts, cfg.data)
        from rich.progress import Progress
        with Progress(console=err, transient=True, disable=not err.is_terminal) as progress:
            task = progress.add_task(f"eval {split.value}", total=len(ids))
            size = cfg.training.eval_batch_size if batch_size is None else batch_size
            m = evaluate_ids(ckpt.model, ids, s.labels, batch_size=size, device=dev, bf16=cfg.training.autocast_bf16,
                             on_batch=lambda n: progress.update(task, advance=n), return_logits=errors > 0)
        result = {"split": split.value, "num_examples": m["num_examples"], "accuracy": m["accuracy"],
                  "precision": m["precision"], "recall": m["recall"], "f1": m["f1"],
                  "confusion_matrix": m["confusion_matrix"], "loss": m["loss"],
                  "examples_per_second": m["examples_per_second"], "checkpoint": str(checkpoint)}
        try:  # keep the result in the checkpoint for `sentiment info`; a read-only folder only loses that
            report.record_eval(checkpoint, result, data or cfg.data.source)
        except OSError as exc:
            from rich.markup import escape
            err.print(f"[dim]note: result not recorded in {escape(str(checkpoint))} ({escape(str(exc.strerror or exc))})[/]",
                      highlight=False, soft_wrap=True)
        if errors:
            result["errors"] = [{**e, "text": s.texts[e["index"]]}
                                for e in confident_errors(m["logits"], s.labels, errors)]
        if plot is not None:
            report.write_png(plot, report.confusion_png(
                m["confusion_matrix"], title=f"{split.value}: accuracy {m['accuracy']:.2%}"))
        if as_json:
            typer.echo(json.dumps(result, ensure_ascii=False))
        else:
            _render_eval(out, result)
            if errors:
                _render_errors(out, result["errors"], errors)
            if plot is not None:
                from rich.markup import escape
                out.print(f"[dim]confusion matrix written to {escape(str(plot))}[/]", highlight=False, soft_wrap=True)


def _render_eval(console, r: dict) -> None:
    from rich.table import Table

    console.print(f"[bold]{r['split']}[/]: {r['num_examples']:,} reviews  ·  accuracy [bold]{r['accuracy']:.2%}[/]"
                  f"  ·  loss {r['loss']:.4f}  ·  {r['examples_per_second']:,.0f} reviews/s", highlight=False)
    cm = r["confusion_matrix"]
    per = Table(title="per class", title_justify="left")
    for col in ("class", "precision", "recall", "F1", "support"):
        per.add_column(col, justify="right" if col != "class" else "left")
    support = {"negative": sum(cm[0]), "positive": sum(cm[1])}
    for name in ("negative", "positive", "macro"):
        per.add_row(name, f"{r['precision'][name]:.4f}", f"{r['recall'][name]:.4f}", f"{r['f1'][name]:.4f}",
                    f"{support.get(name, r['num_examples']):,}", style="bold" if name == "macro" else None)
    console.print(per)
    conf = Table(title="confusion matrix", title_justify="left", caption="rows: true label · columns: predicted")
    conf.add_column("")
    conf.add_column("negative", justify="right")
    conf.add_column("positive", justify="right")
    conf.add_row("negative", f"{cm[0][0]:,}", f"{cm[0][1]:,}")
    conf.add_row("positive", f"{cm[1][0]:,}", f"{cm[1][1]:,}")
    console.print(conf)


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.replace("<br />", " ").split())
    return text if len(text) <= width else text[:width - 1].rstrip() + "…"


def _render_errors(console, errors: list[dict], asked: int) -> None:
    from rich.table import Table
    from rich.text import Text

    title = f"{len(errors)} most confident mistake{'s' if len(errors) != 1 else ''}"
    if len(errors) < asked:
        title += f" (only {len(errors)} in the split)"
    table = Table(title=title, title_justify="left", show_lines=True)
    table.add_column("#", justify="right")
    table.add_column("index", justify="right")
    table.add_column("predicted")
    table.add_column("true")
    table.add_column("review", ratio=1)
    for i, e in enumerate(errors, 1):
        color = "green" if e["label"] == "positive" else "red"
        table.add_row(str(i), str(e["index"]), Text(f"{e['label']} {e['probability']:.3f}", style=color),
                      e["true_label"], Text(_shorten(e["text"], 240)))
    console.print(table)


# ----------------------------------------------------------------------------- predict

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


_BIDI_CONTROLS = set(range(0x202A, 0x202F)) | set(range(0x2066, 0x206A))


def _printable(text: str) -> str:
    """``text`` safe for a terminal table: control characters and bidi overrides shown as escapes.

    A review holding ``ESC[2J`` would otherwise clear the user's screen, and a
    right-to-left override would reverse the rest of the table row.
    """
    import unicodedata

    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x100 and unicodedata.category(c) == "Cc"
                   else f"\\u{ord(c):04x}" if ord(c) in _BIDI_CONTROLS else c for c in text)


@app.command()
def predict(
    texts: Annotated[Optional[list[str]], typer.Argument(help="Reviews to classify.", show_default=False)] = None,
    file: Annotated[Optional[str], typer.Option("--file", "-f", help="Read one review per line from PATH, or - for stdin.")] = None,
    checkpoint: Annotated[Path, typer.Option(help="Checkpoint folder.")] = DEFAULT_CHECKPOINT,
    batch_size: Annotated[Optional[int], typer.Option(
        min=1, help="Reviews per batch; default: the checkpoint's \\[training] eval_batch_size.")] = None,
    device: Annotated[Device, typer.Option(help="Where to run the model.")] = Device.cpu,
    errors: Annotated[DecodeErrors, typer.Option("--errors", help="Invalid UTF-8 in --file: fail, or replace with U+FFFD.")] = DecodeErrors.strict,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line instead of a table.")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Show how much each word moved the prediction "
                                                             "(with --json: adds tokens and scores).")] = False,
    onnx: Annotated[bool, typer.Option("--onnx", help="Run the model `sentiment export` wrote (--checkpoint: the "
                                                       "folder or the .onnx file) on ONNX Runtime, without torch.")] = False,
) -> None:
    """Classify reviews given as arguments, or one per line with --file PATH (or - for stdin).

    With --json, input is streamed in batches (memory stays bounded for any number of lines).
    """
    with _errors():
        if texts and file:
            raise UsageError("give reviews as arguments or with --file, not both")
        if not texts and file is None:
            raise UsageError("no review given; pass text arguments or --file PATH (or - for stdin)")
        from .prediction import check_texts

        if texts:   # checked before the checkpoint loads, so bad input fails at once
            texts = [_argument_text(t, i, errors.value) for i, t in enumerate(texts, 1)]
            check_texts(texts)
        source = None if texts else _open_reviews(file)
        if onnx:   # never imports torch: a cold start without its import time
            from .onnx_predict import OnnxPredictor
            predictor = OnnxPredictor(checkpoint, batch_size=batch_size)
        else:
            from .predict import Predictor
            from .train import resolve_device
            predictor = Predictor(checkpoint, resolve_device(device.value), batch_size=batch_size)
        reviews = texts if texts else _read_lines(*source, errors.value)
        stream = predictor.explain_stream(reviews) if explain else predictor.predict_stream(reviews)
        if as_json:
            for p in stream:
                sys.stdout.write(json.dumps(p.to_dict(), ensure_ascii=False) + "\n")
            sys.stdout.flush()
            return
        from rich.table import Table
        from rich.text import Text
        out, _ = _consoles()
        if explain:
            for i, e in enumerate(stream, 1):
                _render_explanation(out, i, e)
            return
        table = Table(show_lines=False)
        table.add_column("#", justify="right", no_wrap=True)
        table.add_column("label", no_wrap=True)
        table.add_column("probability", justify="right", no_wrap=True)
        # what the other columns and the borders leave, so that a long review cannot squeeze them away
        table.add_column("review", overflow="ellipsis", no_wrap=True, max_width=max(10, min(80, out.width - 40)))
        for i, p in enumerate(stream, 1):
            color = "green" if p.label == "positive" else "red"
            table.add_row(str(i), Text(p.label, style=color), f"{p.probability:.3f}", Text(_printable(p.text[:1000])))
        out.print(table)


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


def _render_explanation(console, number: int, e) -> None:
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
    for positive, arrow, color in ((True, "▲ positive", "green"), (False, "▼ negative", "red")):
        top = e.top(_EXPLAIN_TOP, positive)
        body.append(f"\n{arrow}: ", style=f"bold {color}")
        if not top:
            body.append("–", style="dim")
        for j, (tok, score) in enumerate(top):
            body.append((" · " if j else "") + tok, style=color)
            body.append(f" {score:+.2f}", style="dim")
    body.append(f"\nlogit margin {e.margin:+.2f} = tokens {sum(e.scores):+.2f} + bias {e.bias:+.2f}", style="dim")
    if any(kind == "unknown" for _, kind, _ in segments):
        body.append("  ·  underlined: not in the vocabulary", style="dim")
    color = "green" if e.label == "positive" else "red"
    title = Text.assemble((f"{number} ", "bold"), (e.label, f"bold {color}"), f" {e.probability:.3f}")
    console.print(Panel(body, title=title, title_align="left", expand=False))


# ----------------------------------------------------------------------------- info

@app.command()
def info(
    checkpoint: Annotated[Path, typer.Option(help="Checkpoint folder.")] = DEFAULT_CHECKPOINT,
    as_json: Annotated[bool, typer.Option("--json", help="Print the model card as one JSON object.")] = False,
) -> None:
    """Show the model card: config, parameters, training data and fingerprint, metrics by split, versions."""
    with _errors():
        from .report import model_card

        card = model_card(checkpoint)
        if as_json:
            typer.echo(json.dumps(card, ensure_ascii=False))
            return
        out, _ = _consoles()
        _render_card(out, card)


def _render_card(console, card: dict) -> None:
    import shlex

    from rich.markup import escape
    from rich.table import Table

    from .report import RESULT_COLUMNS, card_results, card_sections

    console.print(f"[bold]model card: {escape(card['name'])}[/]  ({escape(card['checkpoint'])})", highlight=False)
    rows = card_results(card)
    if rows:
        results = Table(title="results", title_justify="left")
        for col in RESULT_COLUMNS:
            results.add_column(col, justify="left" if col in ("split", "from") else "right")
        for row in rows:
            results.add_row(*row)
        console.print(results)
    elif card.get("kind") != "pretrained":   # e.g. trained on all of train (no validation), not yet evaluated
        console.print(f"results: none yet; add test metrics with `sentiment eval --split test --checkpoint "
                      f"{escape(shlex.quote(card['checkpoint']))}`", highlight=False)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(style="dim")
    grid.add_column()
    for title, facts in card_sections(card):
        for i, (key, value) in enumerate(facts):
            grid.add_row(title.lower() if i == 0 else "", key, value)
    console.print(grid)
    files = ", ".join(f for f in (card["files"]["curves"], card["files"].get("card")) if f)
    if files:
        console.print(f"[dim]in the folder: {escape(files)}[/]", highlight=False)


from . import cli_deploy  # noqa: E402,F401  (registers `serve` and `export` on app)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()

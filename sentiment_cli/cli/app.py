"""The Typer app, its global options, and the error handling every command shares.

Exit codes: 0 success, 1 runtime error, 2 usage error, 130 Ctrl-C, 141 stdout's reader went away (a
closed pipe, `| head`), 143 SIGTERM.
Errors are one line on stderr starting ``error:``; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from ..errors import Interrupted, SentimentError, Terminated

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


app = typer.Typer(
    cls=_OneLineErrors,
    name="sentiment",
    help="Train, evaluate and serve a small Transformer text classifier (sentiment of reviews, any labels), from scratch.",
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


@contextmanager
def handle_errors():
    """Turn library errors into one stderr line and a meaningful exit code; every command runs in it.

    Within it SIGTERM stops the command as Ctrl-C does (:func:`sigterm_as_interrupt`): ``with`` blocks unwind, so
    every temporary file or folder a command writes through (``outputs.atomic_file``, ``checkpoint.atomic_write``,
    ``export``'s ``.export-…`` folder) is removed, and it ends with one ``error:`` line, exit 143 (Ctrl-C: 130).
    Commands with a graceful stop of their own (``train``, ``pretrain``: a flag polled between steps; ``serve``)
    install it over this one while they run.
    """
    try:
        with sigterm_as_interrupt():
            yield
    except SentimentError as exc:
        if _state["debug"]:
            raise
        if not (isinstance(exc, Interrupted) and os.environ.get("RANK", "0") != "0"):   # torchrun: rank 0 speaks
            typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
    except Terminated as exc:   # before KeyboardInterrupt, its base
        if _state["debug"]:
            raise
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        if _state["debug"]:
            raise
        typer.echo("error: interrupted", err=True)
        raise typer.Exit(130) from None
    except BrokenPipeError:   # the reader went away (`| head`): stop quietly, as a pipe's writer does
        _quiet_stdout()
        raise typer.Exit(141) from None
    except OSError as exc:
        if _state["debug"]:
            raise
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        typer.echo(f"error: {where}{exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None


@contextmanager
def sigterm_as_interrupt():
    """Within the block, SIGTERM raises :class:`~sentiment_cli.errors.Terminated` (a ``KeyboardInterrupt``,
    exit 143) in the main thread, as Ctrl-C raises ``KeyboardInterrupt``: ``with`` blocks unwind, so a temporary
    output file is removed (``outputs.atomic_file``) and the command ends with one ``error:`` line. Every command runs in it
    (:func:`handle_errors`). Outside the main thread (where no handler can be set) it does nothing."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(_signum, _frame):
        raise Terminated("stopped by SIGTERM (no output is left half written)")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush at exit meets no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):   # no real stdout (a test runner's buffer)
        pass


def _version(value: bool) -> None:
    if value:
        from .. import __version__
        typer.echo(f"sentiment {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Train, evaluate and serve a small Transformer text classifier (sentiment of reviews, any labels), from scratch."""
    _state["debug"] = debug

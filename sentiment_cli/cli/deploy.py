"""``sentiment serve`` and ``sentiment export``: put a trained checkpoint behind an HTTP API, or into ONNX.

Registered on the Typer ``app`` (:mod:`sentiment_cli.cli.app`) when :mod:`sentiment_cli.cli` imports this module.
Each command parses its options, calls one library function
(:func:`~sentiment_cli.serving.server.serve_checkpoint`, :func:`~sentiment_cli.inference.export.export_onnx`),
and renders (:func:`_announce`, :func:`~sentiment_cli.cli.render.render_export`). Neither imports torch for ``--onnx``.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from .app import DEFAULT_CHECKPOINT, Device, app, handle_errors
from .render import consoles, json_text, safe

if TYPE_CHECKING:
    from ..serving.server import Listening


@app.command()
def serve(
    checkpoint: Annotated[Path, typer.Option(help="Checkpoint folder (with --onnx: the folder or a .onnx file).")] = DEFAULT_CHECKPOINT,
    host: Annotated[str, typer.Option(help="Address to listen on; 0.0.0.0 makes the API reachable from other machines.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port (0: any free port, printed at start).")] = 8000,
    onnx: Annotated[bool, typer.Option("--onnx", help="Run the model exported by `sentiment export` on ONNX Runtime "
                                                      "(no torch in the process).")] = False,
    device: Annotated[Device, typer.Option(help="Where to run the PyTorch model.")] = Device.cpu,
    threads: Annotated[Optional[int], typer.Option(min=1, help="CPU threads for the model, each scoring its own "
                                                              "batch (default: one per core).")] = None,
    max_batch_size: Annotated[int, typer.Option(min=1, help="Most texts merged into one model batch.")] = 64,
    max_wait_ms: Annotated[float, typer.Option(min=0.0, help="Longest a request waits for others to share its batch (ms).")] = 2.0,
    max_texts: Annotated[int, typer.Option(min=1, help="Most texts in one request (more: 413).")] = 128,
    max_body_mb: Annotated[float, typer.Option(min=0.001, help="Largest request body in MiB (more: 413).")] = 4.0,
    max_header_kb: Annotated[float, typer.Option(min=1.0, help="Largest request line and headers in KiB (more: 431, "
                                                               "connection closed).")] = 64.0,
    read_timeout: Annotated[float, typer.Option(min=0.01, help="Seconds a client has to send its request headers, then "
                                                               "again its body (slower: 408).")] = 30.0,
    max_queue: Annotated[int, typer.Option(min=1, help="Most texts waiting for the model (more: 503, retry).")] = 2048,
    api_key_env: Annotated[Optional[str], typer.Option(
        metavar="VAR", help="Require `Authorization: Bearer <key>` on /v1/* and /metrics, the key read from "
                            "environment variable VAR (never from the command line, where `ps` shows it).")] = None,
    cors_origin: Annotated[Optional[list[str]], typer.Option(
        metavar="ORIGIN", help="Allow browser pages from ORIGIN (e.g. https://app.example.com) to call the API; "
                               "repeatable. Default: CORS off.")] = None,
    graceful_timeout: Annotated[float, typer.Option(min=0.0, help="On SIGTERM / Ctrl-C, seconds to finish requests in flight.")] = 30.0,
    access_log: Annotated[bool, typer.Option("--access-log/--no-access-log", help="Log one line per request.")] = True,
    info_paths: Annotated[bool, typer.Option("--info-paths", help="Show the model card's absolute paths (checkpoint, "
                                                                  "data) at /v1/info; default: only their last part.")] = False,
) -> None:
    """Serve the model over HTTP: a page to try it at /, the JSON API at /v1/predict, docs at /docs.

    Micro-batches concurrent requests. SIGTERM or Ctrl-C stops accepting, finishes the requests in flight and exits 0.
    Needs the serve extra: pip install "sentiment-cli\\[serve]" (without it: one error line, exit 1).
    """
    with handle_errors():
        from ..serving.server import serve_checkpoint
        from ..serving.settings import ServeSettings

        settings = ServeSettings(max_batch_size=max_batch_size, max_wait_ms=max_wait_ms, max_texts=max_texts,
                                 max_body_bytes=int(max_body_mb * 2**20), max_header_bytes=int(max_header_kb * 1024),
                                 read_timeout=read_timeout,
                                 max_queue=max_queue, cors_origins=list(cors_origin or []), info_paths=info_paths)
        runtime = "ONNX Runtime" if onnx else f"PyTorch ({device.value})"
        serve_checkpoint(checkpoint, settings, host=host, port=port, onnx=onnx, device=device.value, threads=threads,
                         api_key_env=api_key_env, graceful_timeout=graceful_timeout, access_log=access_log,
                         on_listening=_announce(checkpoint, runtime))


def _announce(checkpoint: Path, runtime: str) -> Callable[[Listening], None]:
    """What ``serve`` prints on stderr once it listens: a warning if other machines can reach it, then where."""
    def announce(at: Listening) -> None:
        if at.public:
            typer.echo(f"warning: listening on {at.host}: the API is reachable from other machines"
                       f"{'' if at.keyed else ' without a key (see --api-key-env)'}; put a TLS reverse proxy in front "
                       "(docs/serving.md)", err=True)
        typer.echo(f"serving {checkpoint} on {at.url} with {runtime}  ·  page /  ·  "
                   f"API docs /docs  ·  Ctrl-C stops", err=True)
    return announce


# ----------------------------------------------------------------------------- export

class ExportFormat(str, Enum):
    """``export --format``: the formats a checkpoint is exported to."""

    onnx = "onnx"


class Quantization(str, Enum):
    """``export --quantize``: the quantizations applied after export."""

    int8 = "int8"


@app.command()
def export(
    format: Annotated[ExportFormat, typer.Option("--format", help="Export format.")],
    checkpoint: Annotated[Path, typer.Option(help="Checkpoint folder.")] = DEFAULT_CHECKPOINT,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="File to write.",
                                                   show_default="CHECKPOINT/model.onnx, or model.int8.onnx")] = None,
    quantize: Annotated[Optional[Quantization], typer.Option(
        help="Also quantize: int8 (ONNX Runtime dynamic quantization); reports test accuracy before and after.")] = None,
    data: Annotated[Optional[str], typer.Option(help="Dataset for the held-out texts; default: the one the "
                                                     "checkpoint was trained on.")] = None,
    parity_reviews: Annotated[int, typer.Option(min=1, help="Held-out (test) texts scored by both PyTorch and "
                                                            "ONNX Runtime.")] = 2000,
    max_accuracy_drop: Annotated[float, typer.Option(min=0.0, max=1.0, help="With --quantize: refuse if test accuracy "
                                                     "falls by more than this (0.01 = 1 point).")] = 0.01,
    force: Annotated[bool, typer.Option("--force", help="Replace --output if it exists and is not an .onnx file "
                                                        "(an earlier export is replaced without it; never a "
                                                        "checkpoint's file).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the export record as one JSON object.")] = False,
) -> None:
    """Export a checkpoint to one self-contained ONNX file (graph, tokenizer, config, model card) for ONNX Runtime.

    The export is checked against PyTorch on held-out texts and refused (exit 1, nothing written) if labels agree
    on fewer than 99.9% or a logit differs by more than 1e-3. Use it with `predict --onnx` or `serve --onnx`.
    Needs the onnx extra: pip install "sentiment-cli\\[onnx]".
    """
    with handle_errors():
        from ..inference.export import export_onnx

        out, err = consoles()
        with err.status("exporting") as status:
            result = export_onnx(checkpoint, output, quantize=quantize.value if quantize else None, data=data,
                                 parity_reviews=parity_reviews, max_accuracy_drop=max_accuracy_drop, force=force,
                                 on_stage=lambda text: status.update(safe(text)))
        if as_json:
            typer.echo(json_text(result.record))
        else:
            render_export(out, result)
        if result.note:
            typer.echo(f"note: {result.note}", err=True)


# ----------------------------------------------------------------------------- rendering: export's output
def render_export(console, result) -> None:
    """``sentiment export``'s result: the file, its parity check against PyTorch, int8 accuracy, how to use it."""

    r = result.record
    p, b = r["parity"], r["bytes"]
    mib = 2**20
    size = b.get("onnx_int8", b["onnx"])
    before = f", {b['onnx'] / mib:.1f} MiB before int8" if "onnx_int8" in b else ""
    console.print(f"wrote [bold]{safe(str(result.path))}[/] ({size / mib:.1f} MiB; PyTorch weights "
                  f"{b['pytorch_weights'] / mib:.1f} MiB{before}; opset {r['opset']})", highlight=False, soft_wrap=True)
    console.print(f"parity with PyTorch on {p['reviews']:,} held-out texts: label agreement "
                  f"[bold]{p['label_agreement']:.2%}[/] (needs ≥ {p['min_agreement']:.1%}), max logit difference "
                  f"[bold]{p['max_logit_difference']:.1e}[/] (needs ≤ {p['max_allowed_difference']:.0e})  [green]passed[/]",
                  highlight=False, soft_wrap=True)
    if r.get("int8"):
        q = r["int8"]
        console.print(f"int8: test accuracy {q['accuracy_before']:.2%} → [bold]{q['accuracy_after']:.2%}[/] "
                      f"({q['test_reviews']:,} texts; {q['accuracy_after'] - q['accuracy_before']:+.2%}), "
                      f"size {b['onnx'] / mib:.1f} → {b['onnx_int8'] / mib:.1f} MiB; agreement with PyTorch "
                      f"{q['label_agreement_with_pytorch']:.2%}", highlight=False, soft_wrap=True)
    console.print(f"[dim]use it: sentiment predict --onnx --checkpoint {safe(str(result.path))} \"...\"  ·  "
                  f"sentiment serve --onnx --checkpoint {safe(str(result.path))}[/]", highlight=False, soft_wrap=True)

"""Running the HTTP API: check the serve extra, build the model loader, listen, log, serve until a signal.

:func:`serve_checkpoint` is what ``sentiment serve`` calls: it checks that the ``serve`` extra is installed,
reads the API key from the environment, checks the checkpoint (:func:`model_loader`, fast: the
model itself is loaded later, in the server's loading thread), sends the ``sentiment`` log lines
to stderr (:func:`log_to_stderr`), binds the socket (:func:`listen`), says where it listens
(``on_listening``), and serves :func:`~sentiment_cli.serving.app.create_app` with uvicorn
(:func:`run`) until SIGINT / SIGTERM.

Importing this module imports neither torch nor a web framework: they come when needed, and
with ``--onnx`` torch never does.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .settings import Loaded, ServeSettings
from ..errors import CheckpointError, SentimentError, UsageError

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger("sentiment.serve")

SERVE_INSTALL = 'pip install "sentiment-cli[serve]"'


class ServeUnavailable(SentimentError):
    """fastapi / uvicorn / prometheus-client are not installed (exit 1); the message names the install command."""


@dataclass(frozen=True)
class Listening:
    """Where a server listens, as :func:`serve_checkpoint` tells its ``on_listening`` before it starts serving.

    Attributes:
        host: the address as given (``--host``).
        port: the bound port (the one chosen, for port 0).
        public: the host is not a loopback address: other machines can reach the API.
        keyed: requests to ``/v1/*`` and ``/metrics`` need the API key.
    """

    host: str
    port: int
    public: bool
    keyed: bool

    @property
    def url(self) -> str:
        """``http://host:port``, an IPv6 host in brackets."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}"


def serve_checkpoint(checkpoint: Path, settings: ServeSettings, *, host: str = "127.0.0.1", port: int = 8000,
                     onnx: bool = False, device: str = "cpu", threads: int | None = None,
                     api_key_env: str | None = None, graceful_timeout: float = 30.0, access_log: bool = True,
                     on_listening: Callable[[Listening], None] | None = None) -> None:
    """Serve ``checkpoint`` over HTTP on ``host:port`` until SIGINT / SIGTERM (``sentiment serve``).

    Args:
        checkpoint: the checkpoint folder (with ``onnx``: the folder or its ``.onnx`` file).
        settings: the server's limits and switches; its ``api_key`` is replaced by ``api_key_env``'s value.
        host, port: where to listen (port 0: any free port).
        onnx: run the exported model on ONNX Runtime (no torch in the process) instead of PyTorch.
        device: where to run the PyTorch model (``cpu``, ``cuda``, ``auto``).
        threads: CPU threads for the model, each scoring its own batch; None: one per core.
        api_key_env: the environment variable holding the API key; None: no key.
        graceful_timeout: on a signal, seconds to finish the requests in flight.
        access_log: log one line per request.
        on_listening: called once the socket is bound, before serving (e.g. to print the URL).

    Raises:
        ServeUnavailable: the ``serve`` extra is not installed.
        UsageError: the key's variable is unset or empty, or the address cannot be bound.
        CheckpointError: there is no (exported) model at ``checkpoint``.
        the loader's error, if the model failed to load once the server started (the server stops then).
    """
    early = EarlySignals.install()   # from now on a signal stops the server with exit 0, even before uvicorn runs
    require_serve_extra()
    key = _api_key(api_key_env)
    load = model_loader(checkpoint, onnx=onnx, device=device, threads=threads)
    log_to_stderr()
    sock = listen(host, port)
    if on_listening is not None:
        on_listening(Listening(host, sock.getsockname()[1], public=not _loopback(host), keyed=key is not None))
    from .app import create_app

    run(create_app(load, replace(settings, api_key=key)), sock, graceful_timeout=graceful_timeout,
        access_log=access_log, early=early)


def require_serve_extra() -> None:
    """Check that the ``serve`` extra (fastapi, uvicorn, prometheus-client) is installed.

    Raises:
        ServeUnavailable: one of them is missing; the message names it and the install command.
    """
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ServeUnavailable(f"sentiment serve needs the serve extra ({exc.name} is missing): "
                               f"{SERVE_INSTALL}") from None


def model_loader(checkpoint: Path, *, onnx: bool, device: str, threads: int | None) -> Callable[[], Loaded]:
    """Check the checkpoint now (fast, no torch); return the function that loads it, in the server's loading thread.

    On a CPU the model gets ``threads`` worker threads, each scoring its own batch on one core
    (:attr:`Loaded.workers`, one intra-op thread each, and the tokenizer's own thread pool off unless
    ``TOKENIZERS_PARALLELISM`` says otherwise); on a GPU one worker, batches one after another.

    Args:
        checkpoint: the checkpoint folder (with ``onnx``: the folder or its ``.onnx`` file).
        onnx: load the exported model on ONNX Runtime (torch is never imported) instead of PyTorch.
        device: where to run the PyTorch model.
        threads: CPU threads for the model; None: one per core.

    Raises:
        CheckpointError: no trained model (PyTorch) or no exported model (ONNX) at ``checkpoint``.
    """
    # one batch per thread: a batch split over intra-op threads makes them wait for each other (and spin) at
    # every operation, and for the event loop whenever it takes one of their cores (docs/serving.md)
    threads = threads or os.cpu_count() or 1
    if onnx:
        from ..inference.onnx_backend import onnx_path

        checkpoint = onnx_path(checkpoint)   # raises CheckpointError now if there is no exported model
    elif not (checkpoint / "config.json").is_file():
        raise CheckpointError(f"no trained model at {checkpoint}; run `sentiment train` first")

    def load() -> Loaded:
        from ..inference.predictor import Predictor

        if onnx:
            predictor, workers = Predictor(checkpoint, onnx=True, threads=1), threads
        else:
            import torch

            from ..runtime import resolve_device

            resolved = resolve_device(device)
            workers = threads if resolved.type == "cpu" else 1
            torch.set_num_threads(1 if workers > 1 else threads)
            predictor = Predictor(checkpoint, resolved)
        if workers > 1:   # each worker tokenizes its own batch, without a hand-off to the tokenizer's thread pool
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        return Loaded(predictor, predictor.card, workers=workers)
    return load


def log_to_stderr() -> None:
    """Send the ``sentiment`` loggers' lines (INFO and up) to stderr, formatted as uvicorn's own."""
    from uvicorn.logging import DefaultFormatter

    handler = logging.StreamHandler()
    handler.setFormatter(DefaultFormatter("%(levelprefix)s %(message)s"))
    logger = logging.getLogger("sentiment")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port).

    Raises:
        UsageError: the address cannot be bound (in use, not this machine's, no permission).
    """
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: not an address of this machine ({exc.strerror})") from None
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted connections only then, and without it
    # Nagle's algorithm and delayed ACKs add ~40 ms to every response
    sock = socket.socket(info[0], socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(info[4])
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror}); choose another --port or --host") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class EarlySignals:
    """SIGINT / SIGTERM caught before uvicorn takes them over, and replayed to it once it has (see :func:`run`).

    Without it, a signal while the server starts (imports, binding, building the app) would kill the process
    by the signal (exit 143 / 130) instead of stopping it with the documented 0.
    """

    def __init__(self):
        self.signals: list[int] = []

    @classmethod
    def install(cls) -> EarlySignals:
        """Catch SIGINT and SIGTERM from now on (from the main thread; elsewhere: catch nothing)."""
        early = cls()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, early._caught)
        return early

    def _caught(self, signum: int, _frame) -> None:
        self.signals.append(signum)


def uvicorn_config(app: FastAPI, *, graceful_timeout: float | None = 30.0, access_log: bool = True,
                   log_level: str = "info"):
    """The ``uvicorn.Config`` the server runs ``app`` with (``app.state.asgi``: the app behind its shortcuts).

    Its HTTP protocol has a deadline on request headers (``app.state.settings.read_timeout``, the body's own
    deadline) and a size limit (``max_header_bytes``, 431), and answers uvicorn's own 400s as ``{"error": ...}``
    (:mod:`~sentiment_cli.serving.protocol`); idle connections close after 5 s.
    """
    import uvicorn

    from .protocol import http_protocol

    settings = app.state.settings
    return uvicorn.Config(getattr(app.state, "asgi", app), log_level=log_level, access_log=access_log, lifespan="on",
                          timeout_graceful_shutdown=graceful_timeout, server_header=False, timeout_keep_alive=5,
                          http=http_protocol(settings.read_timeout, max_header_bytes=settings.max_header_bytes),
                          h11_max_incomplete_event_size=settings.max_header_bytes)


def run(app: FastAPI, sock: socket.socket, *, graceful_timeout: float = 30.0, access_log: bool = True,
        log_level: str = "info", early: EarlySignals | None = None) -> None:
    """Serve ``app`` on ``sock`` until SIGINT / SIGTERM, then stop gracefully.

    On the first signal (or one ``early`` caught before) the server stops accepting connections and finishes
    the requests in flight for at most ``graceful_timeout`` seconds; those still running then are answered
    503 (:class:`~sentiment_cli.serving.guard.BodyGuard`). It returns normally, or, when work it cannot
    interrupt is still running (the model loading, a batch past the graceful timeout), ends the process
    at once with exit 0 (a thread inside torch at interpreter exit aborts the process). A second Ctrl-C
    stops at once.

    Raises:
        the loader's error, if the model could not be loaded (the server stops then).
    """
    import uvicorn

    class _Server(uvicorn.Server):
        # uvicorn re-raises the signal once shut down, so the process would die by it
        # (exit 130/143); a graceful stop of a server is a success and exits 0.
        def handle_exit(self, sig, frame) -> None:
            if self.should_exit and sig == 2:
                self.force_exit = True
            else:
                log.info("signal %d: finishing requests in flight, then stopping", sig)
                self.should_exit = True

        async def shutdown(self, sockets=None) -> None:
            await drain_backlog(sockets or [])   # before uvicorn closes the listener, which resets the queue
            await super().shutdown(sockets=sockets)

        @contextmanager
        def capture_signals(self):
            with super().capture_signals():
                for sig in early.signals if early is not None else ():
                    self.handle_exit(sig, None)
                yield

    server = _Server(uvicorn_config(app, graceful_timeout=graceful_timeout, access_log=access_log,
                                    log_level=log_level))

    def fatal(_exc: BaseException) -> None:
        server.should_exit = True

    app.state.on_fatal = fatal
    server.run(sockets=[sock])
    if app.state.load_error is not None:
        raise app.state.load_error
    loading = app.state.load_thread is not None and app.state.load_thread.is_alive()
    if loading or app.state.batcher.busy:
        log.info("stopped while %s; exiting without waiting for it",
                 "the model was loading" if loading else "a batch past the graceful timeout was running")
        _exit_now(0)


DRAIN_SECONDS = 1.0   # at most this long to take the connections the kernel queued before the listener closes


async def drain_backlog(sockets: list[socket.socket], limit: float = DRAIN_SECONDS) -> None:
    """Let the server take every connection the kernel has already accepted on ``sockets`` before they close.

    Closing a listening socket resets the connections in its accept queue (and those finishing their
    handshake): clients whose request was sent get no HTTP answer. So the queue is first shrunk to its least
    (``listen(0)``: while it holds a connection, new handshakes are not answered, and such clients are
    refused once the socket closes), the event loop keeps accepting until the kernel's count of queued
    connections (``TCP_INFO``'s ``tcpi_unacked`` on a listening socket, Linux) is 0, and then runs a moment
    longer so that their requests are read (a connection with a request in progress is answered; one
    without, closed). At most ``limit`` seconds; elsewhere than Linux only the last step.
    """
    import asyncio
    import struct
    import time

    def queued(sock: socket.socket) -> int:
        try:
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
            return struct.unpack_from("I", info, 24)[0]   # tcpi_unacked: the accept queue's length
        except (OSError, AttributeError, struct.error):
            return 0

    for sock in sockets:
        with suppress(OSError):
            sock.listen(0)
    end = time.monotonic() + limit
    while time.monotonic() < end and any(queued(s) for s in sockets):
        await asyncio.sleep(0.002)
    await asyncio.sleep(min(0.05, max(0.0, end - time.monotonic())))   # the requests just accepted are read


def _exit_now(code: int) -> None:
    """End the process with ``code`` now, stdout and stderr flushed, without waiting for threads."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):
            stream.flush()
    os._exit(code)


def _api_key(var: str | None) -> str | None:
    """The API key from environment variable ``var`` (None: no key).

    Raises:
        UsageError: ``var`` is unset or empty.
    """
    if var is None:
        return None
    value = os.environ.get(var)
    if not value:
        raise UsageError(f"--api-key-env {var}: the environment variable {var} is not set or empty")
    return value


def _loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

"""The HTTP API (FastAPI) over a predictor, with micro-batching, limits, auth and metrics.

Endpoints (``docs/serving.md``; the output contract is in DESIGN.md):

    GET  /             a page to try the model (``static/index.html``)
    GET  /health       liveness: 200 while the process answers
    GET  /ready        200 once the model is loaded, 503 before
    GET  /v1/info      the model card (``sentiment info --json``)
    POST /v1/predict   {"texts": [...], "explain": false} -> {"predictions": [<predict --json objects>]}
    GET  /metrics      Prometheus text format (prometheus-client)
    GET  /docs         OpenAPI docs

Every error is ``{"error": "..."}``: 4xx for anything a client sent (422 bad
JSON / types / empty review, 413 over a limit, 408 a body too slow to arrive,
401 a missing or wrong key), 503 while loading, when overloaded or shutting
down, and 500 only for a fault of the server, logged with its request id.

The predictor is anything with ``labels``, ``predict(texts)`` and
``explain(texts)`` (the PyTorch :class:`~sentiment_cli.inference.predictor.Predictor` or
the ONNX Runtime :class:`~sentiment_cli.inference.onnx_backend.OnnxPredictor`); it is
loaded in a background thread after the server starts, so ``/ready`` can say
when it is there. This module never names a file a client chose: it reads
only the checkpoint given at start-up and its own page.

Needs the ``serve`` extra (fastapi, uvicorn, prometheus-client).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError
from starlette.exceptions import HTTPException

from .batcher import Closed, MicroBatcher, Overloaded
from ..errors import UsageError
from ..inference.prediction import check_texts

log = logging.getLogger("sentiment.serve")

@dataclass
class ServeSettings:
    """Limits and switches of the server (``sentiment serve --help`` documents each).

    Attributes:
        max_batch_size: most reviews in one model batch.
        max_wait_ms: longest a request waits for others to join its batch (ms).
        max_texts: most reviews in one request (more: 413).
        max_body_bytes: largest request body (more: 413).
        read_timeout: seconds a client has to send its whole body (slower: 408).
        max_queue: most reviews waiting for the model (more: 503 with Retry-After).
        api_key: if set, ``/v1/*`` and ``/metrics`` need ``Authorization: Bearer <api_key>``.
        cors_origins: origins allowed to call the API from a browser; empty: CORS off.
    """

    max_batch_size: int = 64
    max_wait_ms: float = 2.0
    max_texts: int = 128
    max_body_bytes: int = 4 * 2**20
    read_timeout: float = 30.0
    max_queue: int = 2048
    api_key: str | None = field(default=None, repr=False)
    cors_origins: list[str] = field(default_factory=list)


@dataclass
class Loaded:
    """What the loader returns: the predictor and its model card (``/v1/info``)."""

    predictor: Any
    card: dict[str, Any]


# ----------------------------------------------------------------------------- request / response schemas

class PredictRequest(BaseModel):
    """``POST /v1/predict`` body."""

    model_config = ConfigDict(extra="forbid")
    texts: list[StrictStr] = Field(min_length=1, description="Reviews to classify (each non-empty).",
                                   examples=[["A moving, beautifully acted film."]])
    explain: StrictBool = Field(False, description="Add each token and its share of the target class's logit margin.")


class PredictionOut(BaseModel):
    """One review's result: exactly a ``sentiment predict --json`` object."""

    text: str
    label: str
    probability: float
    probabilities: dict[str, float]
    tokens: list[str] | None = Field(None, description="With explain: the tokens the model saw.")
    scores: list[float] | None = Field(None, description="With explain: each token's share of the margin "
                                                         "logit(target) - mean of the other logits.")
    bias: float | None = Field(None, description="With explain: the part of the margin no token carries.")
    target: str | None = Field(None, description="With explain: the class whose margin the scores split (the "
                                                 "second label with two classes, else the predicted one).")


class PredictResponse(BaseModel):
    predictions: list[PredictionOut]


class ErrorOut(BaseModel):
    error: str


_ERRORS = {code: {"model": ErrorOut} for code in (401, 408, 413, 422, 503)}
_PREDICT_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": PredictRequest.model_json_schema()}}}}


def parse_predict_request(raw: bytes) -> PredictRequest:
    """The request body as a :class:`PredictRequest`.

    Raises:
        UsageError: not UTF-8 JSON, or not ``{"texts": [non-empty strings...], "explain": bool}``;
            the message says where (answered as 422).
    """
    try:
        obj = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise UsageError(f"request body is not UTF-8 (byte {exc.start})") from None
    except RecursionError:
        raise UsageError("request body is nested too deeply to be a prediction request") from None
    except json.JSONDecodeError as exc:
        what = "empty request body" if not raw.strip() else f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        raise UsageError(f'{what}; expected {{"texts": [...], "explain": false}}') from None
    if not isinstance(obj, dict):
        raise UsageError(f'expected a JSON object {{"texts": [...], "explain": false}}, got {type(obj).__name__}')
    try:
        return PredictRequest.model_validate(obj)
    except ValidationError as exc:
        raise UsageError(_validation_message(exc.errors())) from None


# ----------------------------------------------------------------------------- metrics

class Metrics:
    """The server's Prometheus metrics, in a registry of their own (one per app)."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("sentiment_requests", "HTTP requests by route and status code.",
                                ["route", "status"], registry=self.registry)
        self.latency = Histogram("sentiment_request_seconds", "HTTP request latency by route, in seconds.",
                                 ["route"], registry=self.registry,
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.batch_size = Histogram("sentiment_batch_reviews", "Reviews per model batch (micro-batching).",
                                    registry=self.registry, buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
        self.batch_seconds = Histogram("sentiment_batch_seconds", "Model time per batch, in seconds.",
                                       registry=self.registry,
                                       buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))
        self.reviews = Counter("sentiment_reviews", "Reviews scored.", registry=self.registry)
        self.queued = Gauge("sentiment_queued_reviews", "Reviews waiting for a model batch.", registry=self.registry)
        self.disconnects = Counter("sentiment_client_disconnects",
                                   "Requests whose client left before the answer (work dropped).",
                                   registry=self.registry)

    def on_batch(self, reviews: int, seconds: float) -> None:
        self.batch_size.observe(reviews)
        self.batch_seconds.observe(seconds)
        self.reviews.inc(reviews)


# ----------------------------------------------------------------------------- the guard (pure ASGI)

class _Guard:
    """Outermost middleware: request id, body limits and deadline, dropped clients, request metrics.

    The whole body is read here, before the app sees it: at most ``max_body_bytes``
    (413 beyond, from Content-Length or as it arrives) within ``read_timeout``
    seconds (408 after), so a slow client costs one idle coroutine for a bounded
    time and never the model. While the app works, a watcher listens for the
    client going away and cancels the app's task, which drops its reviews from the
    batcher's queue.
    """

    def __init__(self, app, *, settings: ServeSettings, metrics: Metrics):
        self.app = app
        self.settings = settings
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        rid = uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = rid
        start = time.perf_counter()
        state = {"status": 0, "complete": False}

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                state["complete"] = True
            await send(message)

        try:
            body, problem = await self._read_body(scope, receive)
            if problem == "disconnect":
                self.metrics.disconnects.inc()
                return
            if problem is not None:
                status, text = problem
                await _send_json(send_with_id, status, {"error": text})
                return
            await self._call_app(scope, body, receive, send_with_id, state)
        finally:
            route = scope.get("route")
            name = getattr(route, "path", None) or "unmatched"   # never the raw path: unbounded label values
            self.metrics.requests.labels(name, str(state["status"] or 499)).inc()
            self.metrics.latency.labels(name).observe(time.perf_counter() - start)

    async def _read_body(self, scope, receive):
        """``(body, None)``, or ``(None, (status, message))``, or ``(None, "disconnect")``."""
        limit = self.settings.max_body_bytes
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                return None, (400, "Content-Length is not a number")
            if declared > limit:
                return None, (413, f"request body of {declared:,} bytes is over the limit of {limit:,}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.read_timeout
        chunks, size = [], 0
        while True:
            remaining = deadline - loop.time()
            try:
                if remaining <= 0:
                    raise TimeoutError
                message = await asyncio.wait_for(receive(), remaining)
            except TimeoutError:
                return None, (408, f"request body not received within {self.settings.read_timeout:g} s")
            if message["type"] == "http.disconnect":
                return None, "disconnect"
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None, (413, f"request body is over the limit of {limit:,} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None

    async def _call_app(self, scope, body: bytes, receive, send, state) -> None:
        gone = asyncio.Event()
        delivered = False

        async def replay():
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def watch():
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        app_task = asyncio.ensure_future(self.app(scope, replay, send))
        watcher = asyncio.ensure_future(watch())
        try:
            await asyncio.wait({app_task, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not app_task.done() and not state["complete"]:
                # the client left before its answer: stop working for it
                self.metrics.disconnects.inc()
                app_task.cancel()
            try:
                await app_task
            except asyncio.CancelledError:
                if not gone.is_set():
                    raise            # we are being cancelled ourselves
            except Exception:        # a fault of the server, never of the client's input
                rid = scope["state"]["request_id"]
                log.exception("request %s: %s %s failed", rid, scope.get("method"), scope.get("path"))
                if not state["status"]:
                    await _send_json(send, 500, {"error": f"internal error (request id {rid}); see the server log"})
        finally:
            watcher.cancel()
            if not app_task.done():
                app_task.cancel()


async def _send_json(send, status: int, obj: dict) -> None:
    body = json.dumps(obj).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


# ----------------------------------------------------------------------------- the app

def _page() -> str:
    return resources.files("sentiment_cli").joinpath("static/index.html").read_text(encoding="utf-8")


def _validation_message(errors: list[dict]) -> str:
    """One line from pydantic's errors: where and what, e.g. ``texts[0]: Input should be a valid string``."""
    if not errors:
        return "invalid request"
    first = errors[0]
    where = ""
    for part in first.get("loc", ()):
        if part != "body":
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    where = where or "body"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.get('msg', 'invalid')}{more}"


def create_app(load: Callable[[], Loaded], settings: ServeSettings | None = None, *,
               on_fatal: Callable[[BaseException], None] | None = None) -> FastAPI:
    """The FastAPI app; ``load`` runs in a background thread once the server starts.

    Args:
        load: returns the predictor and its model card; a :class:`~sentiment_cli.errors.SentimentError`
            it raises is kept in ``app.state.load_error`` and passed to ``on_fatal``.
        settings: limits and switches (defaults: :class:`ServeSettings`).
        on_fatal: called (from the loading thread) when loading fails, e.g. to stop the server.
    """
    settings = settings or ServeSettings()
    metrics = Metrics()
    state: dict[str, Any] = {"loaded": None}

    def score(texts: list[str], explain: bool) -> list[dict]:
        predictor = state["loaded"].predictor
        results = predictor.explain(texts) if explain else predictor.predict(texts)
        return [r.to_dict() for r in results]

    batcher = MicroBatcher(score, max_batch_size=settings.max_batch_size, max_wait_ms=settings.max_wait_ms,
                           max_queue=settings.max_queue, on_batch=metrics.on_batch)

    def load_in_background() -> None:
        try:
            state["loaded"] = load()
            log.info("model loaded; ready")
        except BaseException as exc:   # noqa: BLE001  (reported through on_fatal; the thread must not die silently)
            app.state.load_error = exc
            log.error("could not load the model: %s", exc)
            if app.state.on_fatal is not None:
                app.state.on_fatal(exc)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        batcher.start()
        threading.Thread(target=load_in_background, name="load-model", daemon=True).start()
        yield
        await batcher.close()   # uvicorn has finished the requests in flight; finish queued batches

    app = FastAPI(title="sentiment", summary="Classify the sentiment of reviews with a trained checkpoint.",
                  version=_version(), lifespan=lifespan, docs_url="/docs", redoc_url=None)
    app.state.load_error = None
    app.state.on_fatal = on_fatal
    app.state.metrics = metrics
    app.state.batcher = batcher
    app.state.settings = settings

    bearer = HTTPBearer(auto_error=False, description="The key named by `sentiment serve --api-key-env VAR`.")
    expected = settings.api_key.encode() if settings.api_key else None

    def authorized(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if expected is None:
            return
        given = credentials.credentials.encode() if credentials is not None else b""
        # constant time: how much of a guess matched must not show in the response time
        if not hmac.compare_digest(given, expected):
            raise HTTPException(401, "missing or wrong API key; send Authorization: Bearer <key>",
                                headers={"WWW-Authenticate": "Bearer"})

    def ready_or_503() -> Loaded:
        if state["loaded"] is None:
            raise HTTPException(503, "model failed to load" if app.state.load_error else "model is loading; retry shortly",
                                headers={"Retry-After": "1"})
        return state["loaded"]

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        return JSONResponse({"error": _validation_message(exc.errors())}, status_code=422)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException):
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(UsageError)
    async def _usage(request: Request, exc: UsageError):
        return JSONResponse({"error": str(exc)}, status_code=422)

    page = _page()

    @app.get("/", include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page, headers={"Content-Security-Policy":
                                           "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'"})

    @app.get("/health", summary="Liveness: answers while the process is up.")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/ready", summary="Readiness: 200 once the model is loaded, 503 before.", responses=_ERRORS)
    async def ready() -> dict:
        ready_or_503()
        return {"status": "ready"}

    @app.get("/v1/info", summary="The model card (as `sentiment info --json`).",
             dependencies=[Depends(authorized)], responses=_ERRORS)
    async def info() -> JSONResponse:
        return JSONResponse(ready_or_503().card)

    @app.post("/v1/predict", summary="Classify reviews; each prediction is a `sentiment predict --json` object.",
              dependencies=[Depends(authorized)], response_model=PredictResponse,
              response_model_exclude_none=True, responses=_ERRORS, openapi_extra=_PREDICT_BODY)
    async def predict(request: Request) -> JSONResponse:
        # The body is parsed here, not by FastAPI: any Content-Type (curl -d sends a form type) and
        # one-line errors that say where the JSON broke.
        body = parse_predict_request(await request.body())
        ready_or_503()
        if len(body.texts) > settings.max_texts:
            raise HTTPException(413, f"{len(body.texts)} texts in one request; the limit is {settings.max_texts}")
        check_texts(body.texts)   # UsageError -> 422, naming the review
        try:
            results = await batcher.submit(body.texts, body.explain)
        except Overloaded as exc:
            raise HTTPException(503, f"server busy: {exc}", headers={"Retry-After": "1"}) from None
        except Closed as exc:
            raise HTTPException(503, str(exc)) from None
        return JSONResponse({"predictions": results})

    @app.get("/metrics", summary="Prometheus metrics (text format).", dependencies=[Depends(authorized)],
             responses=_ERRORS)
    async def prometheus() -> Response:
        metrics.queued.set(batcher.queued)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(_Guard, settings=settings, metrics=metrics)
    return app


def _version() -> str:
    from .. import __version__
    return __version__


# ----------------------------------------------------------------------------- running it

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


def run(app: FastAPI, sock: socket.socket, *, graceful_timeout: float = 30.0, access_log: bool = True,
        log_level: str = "info") -> None:
    """Serve ``app`` on ``sock`` until SIGINT / SIGTERM, then stop gracefully.

    On the first signal the server stops accepting connections, finishes the requests
    in flight (for at most ``graceful_timeout`` seconds) and returns normally; a
    second Ctrl-C stops at once.

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

    config = uvicorn.Config(app, log_level=log_level, access_log=access_log, lifespan="on",
                            timeout_graceful_shutdown=graceful_timeout, server_header=False,
                            timeout_keep_alive=5)
    server = _Server(config)

    def fatal(_exc: BaseException) -> None:
        server.should_exit = True

    app.state.on_fatal = fatal
    server.run(sockets=[sock])
    if app.state.load_error is not None:
        raise app.state.load_error

"""The HTTP API (FastAPI): :func:`create_app` and its routes, over a predictor loaded in the background.

Endpoints (``docs/serving.md``; the output contract is in DESIGN.md):

    GET  /             a page to try the model (``static/index.html``)
    GET  /health       liveness: 200 while the process answers
    GET  /ready        200 once the model is loaded, 503 before
    GET  /v1/info      the model card (``sentiment info --json``); a multi-label model's adds
                       ``"multi_label": true`` and ``"decision"`` (:func:`multi_label_record`)
    POST /v1/predict   {"texts": [...], "explain": false} -> {"predictions": [<predict --json objects>]}
                       (a multi-label model's: {"text", "labels", "probabilities"}, with explain "explanations")
    GET  /metrics      Prometheus text format (:mod:`~sentiment_cli.serving.metrics`)
    GET  /docs         OpenAPI docs

Every error is ``{"error": "..."}``: 4xx for anything a client sent (422 bad
JSON / types / empty review, 413 over a limit, 408 a body too slow to arrive,
401 a missing or wrong key), 503 while loading, when overloaded or shutting
down, and 500 only for a fault of the server, logged with its request id.
Bodies, their limits (413, 408) and the 500s are the guard's
(:mod:`~sentiment_cli.serving.guard`); the rest is answered here.

``POST /v1/predict`` is answered by :func:`fast_predict`, a bare ASGI handler the guard calls directly
(FastAPI's per-request work was most of a short request's cost), with the same checks and answers as the
FastAPI route, which documents it and serves it when CORS is on.

Two routers: :data:`probes` (``/``, ``/health``, ``/ready``) need no key; :data:`api`
(``/v1/*``, ``/metrics``) needs the key when the server has one (:func:`authorized`).
What the routes share lives in ``app.state`` (settings, metrics, the
:class:`~sentiment_cli.serving.batcher.MicroBatcher`, the loaded model) and reaches them
through dependencies.

The predictor is anything with ``labels``, ``predict(texts)`` and
``explain(texts)`` (see :class:`~sentiment_cli.serving.settings.Loaded`); it is
loaded in a background thread after the server starts, so ``/ready`` can say
when it is there. This module never names a file a client chose: it reads
only its own page (the loader reads the checkpoint given at start-up).

Needs the ``serve`` extra (fastapi, uvicorn, prometheus-client).
"""

from __future__ import annotations

import gc
import hmac
import logging
import re
import threading
from collections.abc import Callable
from contextlib import asynccontextmanager
from functools import partial
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import State
from starlette.exceptions import HTTPException
from starlette.routing import Match

from .batcher import Closed, MicroBatcher, Overloaded
from .guard import BodyGuard, send_json
from .metrics import CONTENT_TYPE, Metrics
from .schemas import (ERROR_RESPONSES, PREDICT_BODY_OPENAPI, OverLimit, PredictResponse, parse_predict_request,
                      validation_message)
from .settings import Loaded, ServeSettings
from ..errors import UsageError
from ..inference.prediction import check_texts

log = logging.getLogger("sentiment.serve")

_bearer = HTTPBearer(auto_error=False, description="The key named by `sentiment serve --api-key-env VAR`.")


# ----------------------------------------------------------------------------- dependencies
# All async: FastAPI runs a plain `def` dependency in a worker thread, a hop per dependency per request.

async def authorized(request: Request,
                     _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    """Let the request through if the server has no API key, or the request sent it as a Bearer token.

    Raises:
        HTTPException: 401 with ``WWW-Authenticate: Bearer``, the key is missing or wrong.
    """
    check_key(request.app.state.settings.api_key, request.headers.get("authorization"))


def check_key(key: str | None, authorization: str | None) -> None:
    """Check an ``Authorization`` header (as ASGI gives it: its bytes decoded as latin-1) against ``key``.

    The header's bytes must be ``Bearer`` (any case), a space, then the key's UTF-8 bytes, so ``s3cret-ké``
    sent as UTF-8 passes and its latin-1 bytes do not; compared in constant time (how much of a guess
    matched must not show in the response time). No key: everything passes.

    Raises:
        HTTPException: 401 with ``WWW-Authenticate: Bearer``, the key is missing or wrong.
    """
    if not key:
        return
    scheme, _, given = (authorization or "").partition(" ")
    if not hmac.compare_digest(given.encode("latin-1") if scheme.lower() == "bearer" else b"", key.encode("utf-8")):
        raise HTTPException(401, "missing or wrong API key; send Authorization: Bearer <key>",
                            headers={"WWW-Authenticate": "Bearer"})


async def loaded_model(request: Request) -> Loaded:
    """The loaded predictor and model card.

    Raises:
        HTTPException: 503 with ``Retry-After: 1``, the model is still loading or failed to load.
    """
    return _loaded(request.app.state)


def _loaded(state: State) -> Loaded:
    if state.loaded is None:
        raise HTTPException(503, "model failed to load" if state.load_error else "model is loading; retry shortly",
                            headers={"Retry-After": "1"})
    return state.loaded


async def micro_batcher(request: Request) -> MicroBatcher:
    """The app's :class:`~sentiment_cli.serving.batcher.MicroBatcher`."""
    return request.app.state.batcher


async def server_metrics(request: Request) -> Metrics:
    """The app's :class:`~sentiment_cli.serving.metrics.Metrics`."""
    return request.app.state.metrics


# ----------------------------------------------------------------------------- routes

#: Routes anyone may call (the page and the probes of a load balancer or orchestrator).
probes = APIRouter()
#: Routes that need the API key when the server has one.
api = APIRouter(dependencies=[Depends(authorized)], responses=ERROR_RESPONSES)


@probes.get("/", include_in_schema=False)
async def index(request: Request) -> HTMLResponse:
    """The page to try the model: one self-contained file, no script or style from elsewhere."""
    return HTMLResponse(request.app.state.page, headers={
        "Content-Security-Policy": "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'"})


@probes.get("/health", summary="Liveness: answers while the process is up.")
async def health() -> dict:
    """Always ``{"status": "ok"}``: the event loop is answering."""
    return {"status": "ok"}


@probes.get("/ready", summary="Readiness: 200 once the model is loaded, 503 before.", responses=ERROR_RESPONSES,
            dependencies=[Depends(loaded_model)])
async def ready() -> dict:
    """``{"status": "ready"}`` once the model is loaded; 503 while it loads or if it failed to."""
    return {"status": "ready"}


@api.get("/v1/info", summary="The model card (as `sentiment info --json`), absolute paths cut to their last part.")
async def info(request: Request, model: Annotated[Loaded, Depends(loaded_model)]) -> JSONResponse:
    """The model card; 503 while the model loads. Absolute paths show only their last part, unless the
    server was started with ``--info-paths`` (:attr:`~sentiment_cli.serving.settings.ServeSettings.info_paths`)."""
    card = {**model.card, **multi_label_record(model.predictor)}
    if request.app.state.settings.info_paths:
        return JSONResponse(card)
    if request.app.state.public_card is None:
        request.app.state.public_card = without_paths(card)
    return JSONResponse(request.app.state.public_card)


def multi_label_record(predictor: Any) -> dict[str, Any]:
    """What ``/v1/info`` adds to the card of a multi-label model (one with a ``decision``,
    :class:`~sentiment_cli.inference.multilabel.Decision`): ``{"multi_label": true, "decision": {"min_labels": k,
    "thresholds": {label: t}, "temperatures": {label: T}}}``, each label's threshold on its calibrated probability
    and its temperature. ``{}`` for any other predictor: a single-label model's ``/v1/info`` is its card as it was.
    """
    decision = getattr(predictor, "decision", None) if getattr(predictor, "multi_label", False) else None
    if decision is None:
        return {}
    names = list(predictor.labels)
    return {"multi_label": True,
            "decision": {"min_labels": int(decision.min_labels),
                         "thresholds": dict(zip(names, map(float, decision.thresholds))),
                         "temperatures": dict(zip(names, map(float, decision.temperatures)))}}


@api.post("/v1/predict", summary="Classify reviews; each prediction is a `sentiment predict --json` object "
                                  "(a multi-label model's: its labels and every label's probability).",
          response_model=PredictResponse, response_model_exclude_none=True, openapi_extra=PREDICT_BODY_OPENAPI)
async def predict(request: Request) -> JSONResponse:
    """One prediction per review, in order, scored in batches shared with concurrent requests (:func:`predictions`).

    Served by :func:`fast_predict` ahead of FastAPI when CORS is off; this route documents it (OpenAPI) and
    serves it when CORS is on.
    """
    return JSONResponse(await predictions(request.app.state, await request.body()))


async def predictions(state: State, raw: bytes) -> dict:
    """The answer to a ``POST /v1/predict`` body: ``{"predictions": [...]}``.

    The raw bytes, not a body FastAPI validates: FastAPI would ignore the JSON of a form Content-Type (curl -d),
    answer 400 to a non-UTF-8 or deeply nested body and drop where the JSON broke;
    :func:`~sentiment_cli.serving.schemas.parse_predict_request` answers each 422.

    Raises:
        UsageError: 422, a body that is not a prediction request, or an empty or not valid Unicode review (named).
        HTTPException: 413 more texts (or JSON values) than the server takes in one request, found while
            reading the body, before its types are checked; 503 while the model loads, when the queue is full
            (both with ``Retry-After: 1``) and while the server shuts down.
    """
    try:
        body = parse_predict_request(raw, state.settings.max_texts)
    except OverLimit as exc:
        raise HTTPException(413, str(exc)) from None
    _loaded(state)
    check_texts(body.texts)
    try:
        return {"predictions": await state.batcher.submit(body.texts, body.explain)}
    except Overloaded as exc:
        raise HTTPException(503, f"server busy: {exc}", headers={"Retry-After": "1"}) from None
    except Closed as exc:
        raise HTTPException(503, str(exc)) from None


def fast_predict(state: State):
    """``POST /v1/predict`` as a bare ASGI app, the :class:`~sentiment_cli.serving.guard.BodyGuard`'s shortcut.

    The same answers as the FastAPI route (:func:`check_key`, then :func:`predictions`, errors as
    ``{"error": ...}``), without FastAPI's routing, dependency solving and middleware stack: profiled, those
    took two thirds of the event loop's time per short request, and the event loop was the bottleneck.
    """
    async def endpoint(scope, receive, send) -> None:
        raw = (await receive()).get("body", b"")   # the guard replays the whole body in one message
        headers = None
        try:
            if state.settings.api_key:
                auth = next((v for k, v in scope["headers"] if k == b"authorization"), None)
                check_key(state.settings.api_key, auth.decode("latin-1") if auth is not None else None)
            status, answer = 200, await predictions(state, raw)
        except HTTPException as exc:
            status, answer, headers = exc.status_code, {"error": str(exc.detail)}, exc.headers
        except UsageError as exc:
            status, answer = 422, {"error": str(exc)}
        await send_json(send, status, answer, headers)
    return endpoint


@api.get("/metrics", summary="Prometheus metrics (text format).")
async def prometheus(metrics: Annotated[Metrics, Depends(server_metrics)],
                     batcher: Annotated[MicroBatcher, Depends(micro_batcher)]) -> Response:
    """Every metric in Prometheus text format, the queue's length as of now."""
    return Response(metrics.exposition(batcher.queued), media_type=CONTENT_TYPE)


# ----------------------------------------------------------------------------- errors: always {"error": "..."}

async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    return JSONResponse({"error": validation_message(exc.errors())}, status_code=422)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)


async def _usage_error(request: Request, exc: UsageError) -> JSONResponse:
    return JSONResponse({"error": str(exc)}, status_code=422)


_ERROR_HANDLERS = {RequestValidationError: _invalid, HTTPException: _http_error, UsageError: _usage_error}


# ----------------------------------------------------------------------------- the app

def create_app(load: Callable[[], Loaded], settings: ServeSettings | None = None, *,
               on_fatal: Callable[[BaseException], None] | None = None) -> FastAPI:
    """The FastAPI app; ``load`` runs in a background thread once the server starts.

    Args:
        load: returns the predictor and its model card; a :class:`~sentiment_cli.errors.SentimentError`
            it raises is kept in ``app.state.load_error`` and passed to ``on_fatal``.
        settings: limits and switches (defaults: :class:`~sentiment_cli.serving.settings.ServeSettings`).
        on_fatal: called (from the loading thread) when loading fails, e.g. to stop the server.
    """
    settings = settings or ServeSettings()
    metrics = Metrics()
    app = FastAPI(title="sentiment", summary="Classify the sentiment of reviews with a trained checkpoint.",
                  version=_version(), lifespan=_lifespan, docs_url="/docs", redoc_url=None,
                  exception_handlers=_ERROR_HANDLERS)
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.batcher = MicroBatcher(partial(_score, app.state), max_batch_size=settings.max_batch_size,
                                     max_wait_ms=settings.max_wait_ms, max_queue=settings.max_queue,
                                     on_batch=metrics.on_batch)
    app.state.load = load
    app.state.loaded = None
    app.state.load_error = None
    app.state.public_card = None
    app.state.load_thread = None
    app.state.on_fatal = on_fatal
    app.state.page = _page()
    app.include_router(probes)
    app.include_router(api)
    cors = None
    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware
        cors = partial(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                       allow_headers=["Authorization", "Content-Type"])
        app.add_middleware(cors)
    # the shortcut skips the CORS middleware, so with CORS on the FastAPI route answers (and adds its headers);
    # the guard's own answers (413, 408, ...) go through CORS too
    shortcuts = {} if settings.cors_origins else {("POST", "/v1/predict"): fast_predict(app.state)}
    guard = partial(BodyGuard, max_body_bytes=settings.max_body_bytes, read_timeout=settings.read_timeout,
                    metrics=metrics, route_of=_route_of, shortcuts=shortcuts)
    app.add_middleware(guard, wrap_errors=cors)
    # what the server runs (uvicorn_config): the shortcut served ahead of FastAPI's own middleware (its error
    # handler, telemetry and body limit: a tenth of the event loop's time per request), the rest by the app
    app.state.asgi = guard(app, front=True) if shortcuts else app
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI):
    """Start the batcher and the loading thread; at shutdown, finish the queued batches."""
    app.state.batcher.start()
    app.state.load_thread = threading.Thread(target=_load_model, args=(app.state,), name="load-model", daemon=True)
    app.state.load_thread.start()
    yield
    await app.state.batcher.close()   # uvicorn has finished the requests in flight; finish queued batches


def _load_model(state: State) -> None:
    """Run the app's loader (in the loading thread); keep its result, or its error for ``/ready`` and ``on_fatal``."""
    try:
        loaded = state.load()
        # the heap is now mostly torch's, the web stack's and the model's objects, alive for good: frozen, a full
        # collection no longer walks them (it did, in a pause that stalled every request in flight: the p99)
        gc.collect()
        gc.freeze()
        state.batcher.workers = loaded.workers   # before any batch: requests are refused until `loaded` is set
        state.loaded = loaded
        log.info("model loaded; ready")
    except BaseException as exc:   # noqa: BLE001  (reported through on_fatal; the thread must not die silently)
        state.load_error = exc
        log.error("could not load the model: %s", exc)
        if state.on_fatal is not None:
            state.on_fatal(exc)


def _score(state: State, texts: list[str], explain: bool) -> list[dict]:
    """Score one batch with the loaded predictor (the batcher's ``score``, run in its worker thread): each text's
    ``predict --json`` object; a multi-label model's ``{"text", "labels", "probabilities"}`` (with ``explain``,
    ``"explanations"`` too: :meth:`~sentiment_cli.inference.explain.LabelSetExplanation.to_dict`)."""
    predictor = state.loaded.predictor
    results = predictor.explain(texts) if explain else predictor.predict(texts)
    return [r.to_dict() for r in results]


#: An absolute path: a ``/`` not preceded by a word character, ``.``, ``:``, ``~`` or ``/`` (so not a URL's
#: ``//`` nor a relative path's inner ``/``), then its parts: group 1 is the last one.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~])/(?:[^\s/\"']+/)*([^\s/\"']+)")


def without_paths(card: Any) -> Any:
    """``card`` with every absolute path in its strings cut to its last part (``/srv/models/imdb`` -> ``imdb``).

    What ``/v1/info`` shows by default: the card names the checkpoint folder and the training data's place
    on the server, which a client has no use for and an attacker would.
    """
    if isinstance(card, dict):
        return {k: without_paths(v) for k, v in card.items()}
    if isinstance(card, list):
        return [without_paths(v) for v in card]
    if isinstance(card, str):
        return _ABSOLUTE_PATH.sub(r"\1", card)
    return card


def _route_of(scope: dict) -> str | None:
    """The path template of the route of :data:`probes` or :data:`api` that ``scope`` (path and method)
    matches, even in part (a 405), or None."""
    for route in (*probes.routes, *api.routes):
        if route.matches(scope)[0] is not Match.NONE:
            return route.path
    return None


def _page() -> str:
    return resources.files("sentiment_cli").joinpath("static/index.html").read_text(encoding="utf-8")


def _version() -> str:
    from .. import __version__
    return __version__

"""The outermost middleware (pure ASGI): request ids, bounded request bodies, dropped clients, request metrics.

Every HTTP request gets an ``X-Request-Id`` header. The whole body is read here, before the app
sees it: a body over the limit is answered 413 (``{"error": ...}``, from Content-Length or as it
arrives), a body that does not arrive in time 408, a Content-Length that is not a number 400, each closing the
connection (the rest of that body would be read as the next request). Before a 413, the rest of the body is read
and dropped (up to :data:`DRAIN_BYTES`, within the read timeout): a connection closed with unread bytes is
reset, and the reset can reach the client before it has read the answer. While
the app works, a client that goes away cancels the app's task (its reviews leave the batcher's
queue); an exception the app lets through is a 500 that quotes the request id, logged with it; a request
the server cancels (uvicorn, past the graceful timeout of a shutdown) is a 503 saying so.
Each request is counted by route and status, and timed, in :class:`~sentiment_cli.serving.metrics.Metrics`:
the route the app matched, or for an answer given before routing (413, 408) the one ``route_of`` names.
The guard's own answers go through ``wrap_errors`` (e.g. the app's CORS middleware), so a browser can read them.

Requests named in ``shortcuts`` (method and path) go to their own bare ASGI handler instead of the app. A guard
made with ``front=True`` guards only those, and hands every other request to the app untouched: put in front of
an app that has its own guard among its middleware, it serves the shortcuts without the app's middleware stack.

No web framework: it wraps any ASGI app.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable

from .metrics import Metrics

log = logging.getLogger("sentiment.serve")
DRAIN_BYTES = 64 << 20   # the most of a refused body read and dropped so that its 413 is read, not reset


def new_request_id() -> str:
    """A new request id: 16 hex digits, random."""
    return uuid.uuid4().hex[:16]


class BodyGuard:
    """Outermost middleware: request id, body limits and deadline, dropped clients, request metrics.

    The whole body is read here, before the app sees it: at most ``max_body_bytes``
    (413 beyond, from Content-Length or as it arrives) within ``read_timeout``
    seconds (408 after), so a slow client costs one idle coroutine for a bounded
    time and never the model. While the app works, a watcher listens for the
    client going away and cancels the app's task, which drops its reviews from the
    batcher's queue.

    Args:
        app: the ASGI app it wraps.
        max_body_bytes: largest request body.
        read_timeout: seconds a client has to send its whole body.
        metrics: where requests, their latency and dropped clients are counted.
        route_of: ``route_of(scope)``, the route template a request's path and method match, or None;
            names the route of an answer given before the app routed it (413, 408). None: ``"unmatched"``.
        shortcuts: ``{(method, path): asgi_app}``: requests served by ``asgi_app`` (given the whole body in
            one message) instead of ``app``, e.g. a hot route kept clear of a framework's per-request cost.
        wrap_errors: ``wrap_errors(asgi_app)``, the ASGI app the guard's own answers (413, 408, 400, 500, 503) are
            sent through, e.g. ``functools.partial(CORSMiddleware, allow_origins=...)``; None: sent as they are.
        front: guard only the ``shortcuts``; any other request goes to ``app`` as it came (which must guard it).
    """

    def __init__(self, app, *, max_body_bytes: int, read_timeout: float, metrics: Metrics,
                 route_of: Callable[[dict], str | None] | None = None, shortcuts: dict | None = None,
                 wrap_errors: Callable | None = None, front: bool = False):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.read_timeout = read_timeout
        self.metrics = metrics
        self.route_of = route_of
        self.shortcuts = shortcuts or {}
        self.wrap_errors = wrap_errors
        self.front = front

    async def __call__(self, scope, receive, send):
        """Serve one ASGI connection; anything but HTTP (and in front, anything but a shortcut) goes straight to
        the app."""
        if scope["type"] != "http" or self.front and (scope["method"], scope["path"]) not in self.shortcuts:
            return await self.app(scope, receive, send)
        rid = new_request_id()
        scope.setdefault("state", {})["request_id"] = rid
        start = time.perf_counter()
        state = {"status": 0, "complete": False, "route": None}

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
            if problem is not None:   # the rest of the body is unread: close rather than read it as a request
                status, text = problem
                await self._answer(scope, send_with_id, status, text, {"Connection": "close"})
                return
            shortcut = self.shortcuts.get((scope["method"], scope["path"]))
            if shortcut is not None:
                state["route"] = scope["path"]
            await self._call_app(shortcut or self.app, scope, body, receive, send_with_id, state)
        except asyncio.CancelledError:
            # only the server cancels a request's own task: uvicorn, once a shutdown's graceful timeout is over
            if state["status"]:
                raise
            await self._answer(scope, send_with_id, 503, "the server is shutting down and the request did not "
                                                         "finish within its graceful timeout; retry")
        finally:
            self._count(scope, state["route"], state["status"], time.perf_counter() - start)

    async def _answer(self, scope, send, status: int, text: str, headers: dict[str, str] | None = None) -> None:
        """Answer ``{"error": text}`` with ``status`` and ``headers``, through ``wrap_errors`` if given."""
        async def answer(scope, receive, send) -> None:
            await send_json(send, status, {"error": text}, headers)

        async def nothing() -> dict:   # the body is read (or refused) already
            return {"type": "http.disconnect"}

        app = answer if self.wrap_errors is None else self.wrap_errors(answer)
        await app(scope, nothing, send)

    def _count(self, scope, route: str | None, status: int, seconds: float) -> None:
        """Count one request under its route template (never the raw path: unbounded label values)."""
        route = route or getattr(scope.get("route"), "path", None)
        if route is None and self.route_of is not None:
            route = self.route_of(scope)
        name = route or "unmatched"
        self.metrics.requests.labels(name, str(status or 499)).inc()
        self.metrics.latency.labels(name).observe(seconds)

    async def _read_body(self, scope, receive):
        """``(body, None)``, or ``(None, (status, message))``, or ``(None, "disconnect")``."""
        limit = self.max_body_bytes
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                return None, (400, "Content-Length is not a number")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.read_timeout
        if length is not None and declared > limit:
            if b"expect" not in headers:   # "Expect: 100-continue": nothing sent yet, nothing to drop
                await _drain(receive, deadline, declared)
            return None, (413, f"request body of {declared:,} bytes is over the limit of {limit:,}")
        chunks, size = [], 0
        while True:
            try:
                if deadline <= loop.time():
                    raise TimeoutError
                async with asyncio.timeout_at(deadline):   # no task per message, as wait_for would make
                    message = await receive()
            except TimeoutError:
                return None, (408, f"request body not received within {self.read_timeout:g} s")
            if message["type"] == "http.disconnect":
                return None, "disconnect"
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                if message.get("more_body", False):
                    await _drain(receive, deadline, None, size)
                return None, (413, f"request body is over the limit of {limit:,} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None

    async def _call_app(self, app, scope, body: bytes, receive, send, state) -> None:
        """Run ``app`` on ``body``; cancel it if the client leaves, answer 500 if it fails."""
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

        app_task = asyncio.ensure_future(app(scope, replay, send))
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
                    await self._answer(scope, send, 500, f"internal error (request id {rid}); see the server log")
        finally:
            watcher.cancel()
            if not app_task.done():
                app_task.cancel()


async def _drain(receive, deadline: float, declared: int | None, read: int = 0) -> None:
    """Read and drop the rest of a refused body (``read`` bytes of it read already): until its last message, a
    disconnect, ``deadline`` (the loop's time), or :data:`DRAIN_BYTES` read; nothing at all when its declared
    length is over that (the client then may see a reset)."""
    if declared is not None and declared > DRAIN_BYTES:
        return
    loop = asyncio.get_running_loop()
    while read <= DRAIN_BYTES and loop.time() < deadline:
        try:
            async with asyncio.timeout_at(deadline):
                message = await receive()
        except TimeoutError:
            return
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            return
        read += len(message.get("body", b""))


async def send_json(send, status: int, obj: dict, headers: dict[str, str] | None = None) -> None:
    """Answer ``obj`` as JSON (UTF-8, compact, as Starlette's ``JSONResponse``) with ``status`` and ``headers``
    through the ASGI ``send``."""
    body = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})

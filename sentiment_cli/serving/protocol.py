"""uvicorn's HTTP protocol with a deadline on request headers, and its own 400s answered as ``{"error": ...}``.

uvicorn times a connection only while it is idle between requests (``timeout_keep_alive``), and cancels that
timer at the first byte of the next request: a client sending header bytes slowly holds its connection, and
a coroutine, for ever (h11 bounds the headers' size, never their time). :func:`http_protocol` returns
uvicorn's protocol class (``httptools`` when installed, else ``h11``, as uvicorn's ``auto``) with a deadline:
a request's headers must be complete within ``header_timeout`` seconds of the connection opening or of the
previous response. Past it, a connection that has sent part of a request gets a 408 and is closed; one that
sent nothing is closed silently (an answer nobody asked for on an idle keep-alive connection could be read as
the answer to the client's next request). The body then has its own deadline in the
:class:`~sentiment_cli.serving.guard.BodyGuard`.

uvicorn answers a request it cannot parse (bad request line, header or framing) with a plain-text 400 before
any app sees it; here that answer is ``{"error": "..."}`` with an ``X-Request-Id``, like every other.

Needs uvicorn (the ``serve`` extra).
"""

from __future__ import annotations

import asyncio
import json

from .guard import new_request_id


def http_protocol(header_timeout: float, kind: str = "auto") -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class ``kind`` (``auto``, ``h11``, ``httptools``) with a header deadline.

    Args:
        header_timeout: seconds a client has to send a request's headers, from the connection's opening or
            the end of the previous response.
        kind: which of uvicorn's HTTP implementations to extend; ``auto`` is httptools if installed, else h11.

    Returns:
        a class to give as ``uvicorn.Config(http=...)``.
    """
    if kind == "auto":
        from uvicorn.protocols.http.auto import AutoHTTPProtocol as base
    elif kind == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
    return type(f"HeaderDeadline{base.__name__}", (_HeaderDeadline, base), {"header_timeout": header_timeout})


def error_response(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP/1.1 response ``{"error": message}`` that closes the connection, with a new request id."""
    body = json.dumps({"error": message}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\nx-request-id: {new_request_id()}\r\n\r\n").encode() + body


class _HeaderDeadline:
    """Mixed into uvicorn's protocol (before it in the MRO): the header deadline and JSON 400s.

    ``cycle`` is uvicorn's current request: a new one is created when a request's headers are complete, so
    a deadline armed for cycle X is kept once ``cycle`` is no longer X.
    """

    header_timeout: float

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._deadline = None
        self._arm()

    def data_received(self, data: bytes) -> None:
        self._partial = True
        super().data_received(data)
        if self._deadline is not None and self.cycle is not self._armed_for:   # the headers came in time
            self._deadline.cancel()
            self._deadline = None

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():
            self._arm()   # before uvicorn runs a pipelined request's events, which would start a new cycle
        super().on_response_complete()

    def connection_lost(self, exc) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        self.transport.write(error_response(400, "Bad Request", f"malformed HTTP request: {msg.rstrip('.')}"))
        self.transport.close()

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._armed_for = self.cycle
        self._partial = False
        self._deadline = self.loop.call_later(self.header_timeout, self._expired)

    def _expired(self) -> None:
        self._deadline = None
        if self.cycle is not self._armed_for or self.transport.is_closing():
            return
        if self._partial:
            self.transport.write(error_response(
                408, "Request Timeout", f"request headers not received within {self.header_timeout:g} s"))
        self.transport.close()

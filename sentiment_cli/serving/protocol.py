"""uvicorn's HTTP protocol with a deadline and a size limit on request headers, and its own 400s answered as
``{"error": ...}``.

uvicorn times a connection only while it is idle between requests (``timeout_keep_alive``), and cancels that
timer at the first byte of the next request: a client sending header bytes slowly holds its connection, and
a coroutine, for ever (h11 bounds the headers' size, never their time). :func:`http_protocol` returns
uvicorn's protocol class (``httptools`` when installed, else ``h11``, as uvicorn's ``auto``) with a deadline:
a request's headers must be complete within ``header_timeout`` seconds of the connection opening or of the
previous response. Past it, a connection that has sent part of a request gets a 408 and is closed; one that
sent nothing is closed silently (an answer nobody asked for on an idle keep-alive connection could be read as
the answer to the client's next request). The body then has its own deadline in the
:class:`~sentiment_cli.serving.guard.BodyGuard`.

Nor does uvicorn bound the headers' size with httptools (which grows a header by ``bytes +=``: one 100 MB
header took 10 s of the event loop), and with h11 only by a 16 KiB buffer answered as a bare 400. Here the
request line and headers may take ``max_header_bytes``: counted as the bytes arrive, before the parser sees
them, past it the client gets a 431 and the connection is closed, with either parser.

A client that stops reading its answer holds the answer's bytes in the server's memory for as long as it keeps
the connection: once the transport's write buffer is full (asyncio's ``pause_writing``), the client has
``header_timeout`` seconds to read enough of it to resume writing, or the connection is aborted (the buffer
dropped: a plain ``close`` would wait for it to drain).

A connection that has not sent a byte yet is closed after uvicorn's keep-alive timeout, as one idle after an
answer is (uvicorn arms that timer only after an answer).

uvicorn answers a request it cannot parse (bad request line, header or framing) with a plain-text 400 before
any app sees it; here that answer is ``{"error": "..."}`` with an ``X-Request-Id``, like every other.

Needs uvicorn (the ``serve`` extra).
"""

from __future__ import annotations

import asyncio
import json

from .guard import new_request_id


def http_protocol(header_timeout: float, kind: str = "auto",
                  max_header_bytes: int = 64 * 1024) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class ``kind`` (``auto``, ``h11``, ``httptools``) with a header deadline and size limit.

    Args:
        header_timeout: seconds a client has to send a request's headers, from the connection's opening or
            the end of the previous response.
        kind: which of uvicorn's HTTP implementations to extend; ``auto`` is httptools if installed, else h11.
        max_header_bytes: most bytes of a request line and its headers (more: 431, connection closed); give h11
            the same as ``uvicorn.Config(h11_max_incomplete_event_size=...)``.

    Returns:
        a class to give as ``uvicorn.Config(http=...)``.
    """
    if kind == "auto":
        from uvicorn.protocols.http.auto import AutoHTTPProtocol as base
    elif kind == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
    return type(f"HeaderDeadline{base.__name__}", (_HeaderDeadline, base),
                {"header_timeout": header_timeout, "max_header_bytes": max_header_bytes})


def error_response(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP/1.1 response ``{"error": message}`` that closes the connection, with a new request id."""
    body = json.dumps({"error": message}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\nx-request-id: {new_request_id()}\r\n\r\n").encode() + body


class _HeaderDeadline:
    """Mixed into uvicorn's protocol (before it in the MRO): the header deadline and size limit, JSON 400s.

    ``cycle`` is uvicorn's current request: a new one is created when a request's headers are complete, so
    a deadline armed for cycle X is kept once ``cycle`` is no longer X, and while ``cycle`` is still X the
    bytes arriving are the next request's line and headers.
    """

    header_timeout: float
    max_header_bytes: int

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._deadline = None
        self._write_deadline = None
        self._arm()
        # idle from the start: uvicorn arms its keep-alive timer only after an answer; the first byte cancels it
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def data_received(self, data: bytes) -> None:
        self._partial = True
        pending = self.cycle is self._armed_for
        if pending and self._over_header_limit(data):
            self._refuse_headers()
            return
        super().data_received(data)
        if self.cycle is not self._armed_for:   # the headers came in time
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
        elif self._header_bytes > self.max_header_bytes and not self.transport.is_closing():
            self._refuse_headers()   # what looked like their end was not

    def _over_header_limit(self, data: bytes) -> bool:
        """Whether ``data``, arriving while a request's line and headers are incomplete, takes them past the
        limit: no blank line ending them within the bytes they have left."""
        room = self.max_header_bytes - self._header_bytes
        window = self._header_tail + data[:max(room, 0)]
        self._header_bytes += len(data)
        self._header_tail = (self._header_tail + data)[-2:]
        return len(data) > room and b"\n\r\n" not in window and b"\n\n" not in window

    def _refuse_headers(self) -> None:
        """Answer 431 and close: the request line and headers are over ``max_header_bytes``."""
        self.transport.write(error_response(
            431, "Request Header Fields Too Large", f"request line and headers over the limit of "
            f"{self.max_header_bytes / 1024:g} KiB; --max-header-kb raises it"))
        self.transport.close()

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():
            self._arm()   # before uvicorn runs a pipelined request's events, which would start a new cycle
        super().on_response_complete()

    def connection_lost(self, exc) -> None:
        for timer in (self._deadline, self._write_deadline):
            if timer is not None:
                timer.cancel()
        self._deadline = self._write_deadline = None
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_deadline is None:   # the client must read within header_timeout, or be dropped
            self._write_deadline = self.loop.call_later(self.header_timeout, self.transport.abort)

    def resume_writing(self) -> None:
        if self._write_deadline is not None:
            self._write_deadline.cancel()
            self._write_deadline = None
        super().resume_writing()

    def send_400_response(self, msg: str) -> None:
        if self.cycle is self._armed_for and self._header_bytes > self.max_header_bytes:
            return self._refuse_headers()   # h11's own limit (h11_max_incomplete_event_size)
        self.transport.write(error_response(400, "Bad Request", f"malformed HTTP request: {msg.rstrip('.')}"))
        self.transport.close()

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._armed_for = self.cycle
        self._partial = False
        self._header_bytes = 0
        self._header_tail = b""
        self._deadline = self.loop.call_later(self.header_timeout, self._expired)

    def _expired(self) -> None:
        self._deadline = None
        if self.cycle is not self._armed_for or self.transport.is_closing():
            return
        if self._partial:
            self.transport.write(error_response(
                408, "Request Timeout", f"request headers not received within {self.header_timeout:g} s"))
        self.transport.close()

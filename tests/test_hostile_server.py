"""`sentiment serve` against hostile clients: huge integer literals, slow headers, signals while loading or
past the graceful timeout, non-ASCII keys, bad HTTP, and what the metrics and `/v1/info` show (issue 26).

The probes and what each gets back are listed in docs/robustness.md ("Hostile input: the server").
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytest.importorskip("fastapi", reason="the serve extra is part of the test extra; install .[test]")

from sentiment_cli.serving.app import create_app  # noqa: E402
from sentiment_cli.serving.settings import Loaded, ServeSettings  # noqa: E402

from .conftest import PYTHON, ROOT, SUBPROCESS_ENV  # noqa: E402
from .serving import FakePredictor, ServerThread, metric, read_all, ready_by  # noqa: E402

pytestmark = pytest.mark.slow   # starts servers


def fake_server(settings: ServeSettings | None = None, card: dict | None = None) -> ServerThread:
    """A :class:`ServerThread` over a :class:`FakePredictor` (a context manager; wait_ready is called)."""
    return ServerThread(create_app(lambda: Loaded(FakePredictor(), card or {"labels": FakePredictor.labels}),
                                   settings))


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


# A server run by `serving.server.run`, as `sentiment serve` runs it, over a predictor that takes SLOW seconds
# per batch: the process prints its port, then serves until a signal.
SCRIPT = textwrap.dedent("""
    import sys, time
    from sentiment_cli.serving.app import create_app
    from sentiment_cli.serving.server import listen, log_to_stderr, run
    from sentiment_cli.serving.settings import Loaded, ServeSettings
    from tests.serving import FakePredictor

    slow, read_timeout, graceful = map(float, sys.argv[1:4])

    class Slow(FakePredictor):
        def predict(self, texts):
            time.sleep(slow)
            return super().predict(texts)

    app = create_app(lambda: Loaded(Slow(), {}), ServeSettings(read_timeout=read_timeout, max_wait_ms=50))
    sock = listen("127.0.0.1", 0)
    log_to_stderr()
    print(sock.getsockname()[1], flush=True)
    run(app, sock, graceful_timeout=graceful, access_log=False)
""")


def start_script_server(slow: float = 0.0, read_timeout: float = 30.0, graceful: float = 30.0):
    """The :data:`SCRIPT` server in a subprocess; returns the process and its URL once ``/ready`` says 200."""
    proc = subprocess.Popen([PYTHON, "-c", SCRIPT, str(slow), str(read_timeout), str(graceful)], cwd=ROOT,
                            env=SUBPROCESS_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.log = []
    threading.Thread(target=lambda: proc.log.extend(proc.stderr), daemon=True).start()
    url = f"http://127.0.0.1:{int(proc.stdout.readline())}"
    if ready_by(url, time.monotonic() + 60, 0.05):
        return proc, url
    proc.kill()
    raise RuntimeError("script server did not become ready:\n" + "".join(proc.log))


# ----------------------------------------------------------------------------- row 3: a 4,301-digit integer

@pytest.mark.parametrize("body", [
    b'{"texts": ["good"], "explain": ' + b"1" * 4301 + b"}",
    b'{"texts": [' + b"9" * 100_000 + b"]}",
    b"-" + b"7" * 5000,
])
def test_a_huge_integer_literal_is_a_422_not_a_500(body):
    with fake_server() as s:
        s.wait_ready()
        r = httpx.post(s.url + "/v1/predict", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
        assert "digits" in r.json()["error"] and r.headers["x-request-id"]
        assert 'status="500"' not in httpx.get(s.url + "/metrics").text


# ----------------------------------------------------------------------------- row 5: SIGTERM while loading

@pytest.mark.parametrize("when", ["at the banner", "while loading"])
def test_sigterm_at_any_moment_of_start_up_exits_0(trained_checkpoint, when):
    proc = subprocess.Popen([PYTHON, "-m", "sentiment_cli", "serve", "--port", "0", "--checkpoint",
                             str(trained_checkpoint)], cwd=ROOT, env=SUBPROCESS_ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        banner = proc.stderr.readline()
        assert " on http://" in banner, banner
        if when == "while loading":
            url = banner.split(" on ", 1)[1].split()[0]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:     # the port answers; the model is not there yet
                try:
                    if httpx.get(url + "/health").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.02)
            assert httpx.get(url + "/ready").status_code == 503   # still loading
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
        err = proc.stderr.read()
        assert rc == 0, err
        assert "terminate called" not in err and "Traceback" not in err
    finally:
        proc.kill()


# ----------------------------------------------------------------------------- row 6: slow headers

def test_slow_headers_are_cut_off_at_the_read_timeout():
    proc, url = start_script_server(read_timeout=1.0)
    socks = []
    try:
        for _ in range(20):
            sock = socket.create_connection(("127.0.0.1", port_of(url)))
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            socks.append(sock)
        start = time.monotonic()
        closed = set()
        while time.monotonic() - start < 6 and len(closed) < len(socks):   # a header byte every 0.2 s
            for i, sock in enumerate(socks):
                if i in closed:
                    continue
                try:
                    sock.sendall(b"X")
                except OSError:
                    closed.add(i)
                    continue
                sock.settimeout(0.001)
                try:
                    if sock.recv(65536, socket.MSG_PEEK) == b"":
                        closed.add(i)
                except (BlockingIOError, TimeoutError, socket.timeout):
                    pass
                except OSError:
                    closed.add(i)
            time.sleep(0.2)
        assert len(closed) == len(socks), f"{len(socks) - len(closed)} slow-header connections still open"
        assert time.monotonic() - start < 4
        answer = read_all(socks[0], 1)
        if answer:   # a 408 with the error object, or nothing at all
            assert answer.startswith(b"HTTP/1.1 408") and b'"error"' in answer, answer
        assert httpx.get(url + "/health").status_code == 200
        # a keep-alive connection that sent nothing is closed silently, never given a stray 408
        with socket.create_connection(("127.0.0.1", port_of(url))) as idle:
            assert read_all(idle, 3) == b""
    finally:
        for sock in socks:
            sock.close()
        proc.kill()


def test_a_request_slower_than_the_read_timeout_to_answer_is_not_cut_off():
    proc, url = start_script_server(slow=1.5, read_timeout=0.5)
    try:
        with httpx.Client(timeout=30) as http:
            for _ in range(2):   # the second on the same keep-alive connection
                r = http.post(url + "/v1/predict", json={"texts": ["takes 1.5 s"]})
                assert r.status_code == 200, r.text
    finally:
        proc.kill()


@pytest.mark.parametrize("kind", ["h11", "httptools"])
def test_both_http_parsers_keep_the_header_deadline_and_answer_json_400s(kind):
    pytest.importorskip(kind)
    from sentiment_cli.serving.protocol import http_protocol

    app = create_app(lambda: Loaded(FakePredictor(), {}), ServeSettings(read_timeout=0.5))
    with ServerThread(app, http=http_protocol(0.5, kind)) as s:
        assert s.server.config.http_protocol_class.__mro__[2].__name__.lower().startswith(kind[:4])
        with socket.create_connection(("127.0.0.1", port_of(s.url))) as slow:
            slow.sendall(b"GET /health HTTP/1.1\r\nHo")
            start = time.monotonic()
            answer = read_all(slow, 5)
        assert answer.startswith(b"HTTP/1.1 408") and b"within 0.5 s" in answer, answer
        assert time.monotonic() - start < 2
        with socket.create_connection(("127.0.0.1", port_of(s.url))) as bad:
            bad.sendall(b"GARBAGE\r\n\r\n")
            answer = read_all(bad, 5)
        assert answer.startswith(b"HTTP/1.1 400") and b"x-request-id: " in answer and b'{"error": ' in answer
        with httpx.Client() as http:   # keep-alive: the deadline is re-armed after each answer, not applied to it
            for _ in range(3):
                assert http.get(s.url + "/health").status_code == 200
                time.sleep(0.2)


# ----------------------------------------------------------------------------- row 7: the graceful timeout

def test_past_the_graceful_timeout_requests_get_a_json_503_and_the_process_exits():
    proc, url = start_script_server(slow=20, graceful=2)
    try:
        with ThreadPoolExecutor(2) as pool:
            pending = [pool.submit(httpx.post, url + "/v1/predict", json={"texts": [f"slow {i}"], "explain": i == 1},
                                   timeout=60) for i in range(2)]
            time.sleep(0.5)          # both in flight: one in the model, one queued or beside it
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            answers = [f.result() for f in pending]
        for r in answers:
            assert r.status_code == 503, r.text
            assert "graceful" in r.json()["error"] and r.headers["x-request-id"]
        assert proc.wait(15) == 0, "".join(proc.log)
        assert time.monotonic() - signalled < 2 + 2.5
    finally:
        proc.kill()


# ----------------------------------------------------------------------------- row 10: non-ASCII keys

def test_a_non_ascii_api_key_is_compared_as_utf8_bytes():
    with fake_server(ServeSettings(api_key="s3cret-ké")) as s:
        s.wait_ready()

        def status(raw: bytes) -> int:
            return httpx.get(s.url + "/v1/info", headers={b"Authorization": b"Bearer " + raw}).status_code

        assert status("s3cret-ké".encode()) == 200
        assert status("s3cret-ké".encode("latin-1")) == 401
        assert status(b"s3cret-k") == 401 and status(b"s3cret-k\xc3") == 401


# ----------------------------------------------------------------------------- row 12: observability

def test_413_and_408_are_counted_under_their_route():
    with fake_server(ServeSettings(max_body_bytes=1000, read_timeout=0.5)) as s:
        s.wait_ready()
        assert httpx.post(s.url + "/v1/predict", content=b"x" * 2000).status_code == 413
        with socket.create_connection(("127.0.0.1", port_of(s.url))) as sock:
            sock.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            sock.settimeout(5)
            assert sock.recv(65536).startswith(b"HTTP/1.1 408")
        assert httpx.get(s.url + "/nope").status_code == 404
        text = httpx.get(s.url + "/metrics").text
        assert metric(text, "sentiment_requests_total", route="/v1/predict", status="413") == 1
        assert metric(text, "sentiment_requests_total", route="/v1/predict", status="408") == 1
        assert metric(text, "sentiment_requests_total", route="unmatched", status="404") == 1
        assert metric(text, "sentiment_requests_total", route="unmatched", status="413") == 0


@pytest.mark.parametrize("raw", [b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
                                 b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"])
def test_bad_http_is_a_json_400_with_a_request_id(raw):
    proc, url = start_script_server()
    try:
        with socket.create_connection(("127.0.0.1", port_of(url))) as sock:
            sock.sendall(raw)
            answer = read_all(sock, 5)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400"), answer
        headers = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
        headers = {k.lower(): v for k, v in headers.items()}
        assert headers[b"content-type"] == b"application/json" and headers[b"x-request-id"]
        assert json.loads(body)["error"]
    finally:
        proc.kill()


CARD = {"checkpoint": "/srv/models/imdb", "data": {"source": "/home/ann/data/imdb_small", "hub": "stanfordnlp/imdb"},
        "exports": [{"path": "/srv/models/imdb/model.onnx", "note": "written to /srv/models/imdb/model.onnx today"}],
        "labels": ["negative", "positive"], "link": "https://example.com/a/b"}


def test_info_shows_no_absolute_paths_unless_asked():
    with fake_server(card=CARD) as s:
        s.wait_ready()
        shown = httpx.get(s.url + "/v1/info").json()
    assert "/srv" not in json.dumps(shown) and "/home" not in json.dumps(shown)
    assert shown["checkpoint"] == "imdb" and shown["data"] == {"source": "imdb_small", "hub": "stanfordnlp/imdb"}
    assert shown["exports"][0] == {"path": "model.onnx", "note": "written to model.onnx today"}
    assert shown["link"] == "https://example.com/a/b" and shown["labels"] == CARD["labels"]
    with fake_server(ServeSettings(info_paths=True), card=CARD) as s:
        s.wait_ready()
        assert httpx.get(s.url + "/v1/info").json() == CARD
    r = subprocess.run([PYTHON, "-m", "sentiment_cli", "serve", "--help"], cwd=ROOT, env={**SUBPROCESS_ENV,
                       "COLUMNS": "200"}, capture_output=True, text=True, timeout=120)
    assert "--info-paths" in r.stdout

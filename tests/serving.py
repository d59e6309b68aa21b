"""Test helpers for the HTTP server: a real uvicorn server in a thread, fake predictors, subprocess servers."""

from __future__ import annotations

import re
import socket
import subprocess
import threading
import time

import httpx

from sentiment_cli.inference.prediction import Explanation, Prediction

from .conftest import PYTHON, ROOT, SUBPROCESS_ENV


class ServerThread:
    """``create_app(...)`` served by uvicorn on a free loopback port, in a background thread; ``config``
    overrides attributes of the ``uvicorn.Config`` ``sentiment serve`` would use."""

    def __init__(self, app, **config):
        import uvicorn

        from sentiment_cli.serving.server import listen, uvicorn_config

        self.app = app
        self.sock = listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        # as `sentiment serve` runs it (its HTTP protocol: header deadline, JSON 400s), signals left to the test
        cfg = uvicorn_config(app, graceful_timeout=None, access_log=False, log_level="warning")
        for name, value in config.items():   # e.g. http=: another HTTP protocol
            setattr(cfg, name, value)
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self):
        self.thread.start()
        for _ in range(600):   # bounded: 60 s
            if self.server.started:
                return self
            time.sleep(0.1)
        raise RuntimeError("server did not start")

    def wait_ready(self) -> None:
        for _ in range(600):
            if httpx.get(self.url + "/ready").status_code == 200:
                return
            time.sleep(0.1)
        raise RuntimeError("model did not load")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


class FakePredictor:
    """Labels each text by its length; ``gate`` (if given) blocks every batch until set; records batches."""

    labels = ["negative", "positive"]

    def __init__(self, gate: threading.Event | None = None, fail_on: str | None = None):
        self.gate = gate
        self.fail_on = fail_on
        self.batches: list[list[str]] = []
        self.running = threading.Event()

    def predict(self, texts):
        self.batches.append(list(texts))
        self.running.set()
        if self.gate is not None and not self.gate.wait(30):
            raise RuntimeError("test gate never opened")
        if self.fail_on in texts:
            raise RuntimeError("simulated model fault")
        return [Prediction(t, "positive", 0.75, {"negative": 0.25, "positive": 0.75}) for t in texts]

    def explain(self, texts):
        return [Explanation(p.text, p.label, p.probability, p.probabilities, [p.text], [1.0], 0.0,
                            [2], [(0, len(p.text))], [0], 1) for p in self.predict(texts)]


def metric(text: str, name: str, **labels) -> float:
    """The value of one sample in Prometheus text, 0.0 if absent."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][\w:]*)(\{[^}]*\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = ",".join(sorted((m.group(2) or "{}")[1:-1].split(","))) if m.group(2) else ""
        if got == want:
            return float(m.group(3))
    return 0.0


def start_cli_server(*args: str) -> tuple[subprocess.Popen, str]:
    """``python -m sentiment_cli serve --port 0 ARGS`` started; returns the process and its URL once ready."""
    proc = subprocess.Popen([PYTHON, "-m", "sentiment_cli", "serve", "--port", "0", *args], cwd=ROOT,
                            env=SUBPROCESS_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"on (http://\S+?:\d+) ", line)
        if m:
            url = m.group(1)
            proc.banner = "".join(lines)
            # drain the rest of stderr in the background so the server never blocks on a full pipe
            proc.log = []
            threading.Thread(target=lambda: proc.log.extend(proc.stderr), daemon=True).start()
            if ready_by(url, deadline, 0.1):
                return proc, url
            break
    proc.kill()
    raise RuntimeError("server did not become ready:\n" + "".join(lines))


def ready_by(url: str, deadline: float, poll: float) -> bool:
    """Whether ``url/ready`` answers 200 before ``deadline`` (``time.monotonic()``), asking every ``poll`` s."""
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/ready").status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(poll)
    return False


def read_all(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection, resets it, or ``timeout`` passes."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, socket.timeout, ConnectionResetError):
        pass
    return data

"""A graceful stop under load: how many clients of `sentiment serve` get no HTTP answer when SIGTERM comes.

    python -m bench.serve_stop --checkpoint DIR [--requests 4000] [--concurrency 64] [--after 1.5] [--rounds 3]

Each round starts `sentiment serve` on a free port, waits for `/ready`, then sends ``--requests`` requests
(``POST /v1/predict``, 4 texts each) from ``--concurrency`` threads, a new connection per request (no
keep-alive), and sends SIGTERM ``--after`` seconds after the first. Each request ends as an HTTP status
(200, 503), ``refused`` (the listener was closed: the client never got in; not a failure) or ``reset`` (the
kernel had taken the connection, and it was reset with no answer: what issue 56's defect 13 counted).
Printed per round: the counts and the server's exit code; then the load average. Needs the serve extra.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

BODY = json.dumps({"texts": ["a fine film, really quite good"] * 4})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(port: int, seconds: float = 120.0) -> None:
    end = time.time() + seconds
    while time.time() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/ready")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("the server did not become ready")


def _one(port: int) -> str:
    """One request on a new connection: its status, ``refused``, ``reset`` or ``other:<error>``."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/v1/predict", BODY, {"Content-Type": "application/json", "Connection": "close"})
        r = c.getresponse()
        r.read()
        return str(r.status)
    except ConnectionRefusedError:
        return "refused"
    except (ConnectionResetError, http.client.RemoteDisconnected, BrokenPipeError):
        return "reset"
    except Exception as exc:  # noqa: BLE001  counted, not raised: the figure is what clients saw
        return f"other:{type(exc).__name__}"


def one_round(checkpoint: str, requests: int, concurrency: int, after: float) -> tuple[dict[str, int], int]:
    """``(counts by outcome, the server's exit code)`` of one round (module docstring)."""
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "sentiment_cli", "serve", "--checkpoint", checkpoint,
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        _wait_ready(port)
        counts: dict[str, int] = {}
        left = [requests]
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    if left[0] == 0:
                        return
                    left[0] -= 1
                outcome = _one(port)
                with lock:
                    counts[outcome] = counts.get(outcome, 0) + 1

        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        for t in threads:
            t.start()
        time.sleep(after)
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join()
        return counts, proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--after", type=float, default=1.5, help="seconds from the first request to SIGTERM")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    for n in range(1, args.rounds + 1):
        counts, code = one_round(args.checkpoint, args.requests, args.concurrency, args.after)
        print(f"round {n}: {json.dumps(dict(sorted(counts.items())))}  server exit {code}", flush=True)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

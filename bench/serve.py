"""Benchmark `sentiment serve` on loopback against `sentiment predict --file`, in one run.

    python -m bench.serve [--checkpoint checkpoints/default] [--requests 64] [--soak 100000]

For each backend (PyTorch; ONNX Runtime when the checkpoint has ``model.onnx``) it
starts ``sentiment serve`` on 127.0.0.1 (a free port), then runs 1, 8 and 32
concurrent clients, each sending ``--requests`` requests of 1 and of 16 reviews
(held-out test reviews of the checkpoint's dataset), and reports requests/s,
reviews/s, p50/p95/p99 latency, errors and the server's peak RSS. The same
reviews go through ``sentiment predict --file --json`` (PyTorch and ONNX
Runtime; the median of ``--cli-repeats`` runs, start-up included) for the
batched-file baseline. ``--soak N`` then sends N one-review requests from 32
clients and samples the server's RSS ten times: flat RSS means no leak.

Every loop is bounded in count, and every request and server start in time;
only loopback is used. The load generator shares the machine's cores with the
server: figures are for comparing rows of one run, not absolute capacity.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _rss_kib(pid: int) -> dict[str, int]:
    """``{"rss": .., "peak": ..}`` in KiB from /proc (VmRSS, VmHWM)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out["rss" if line.startswith("VmRSS") else "peak"] = int(line.split()[1])
    return out


def start_server(checkpoint: Path, onnx: bool, max_wait_ms: float, threads: int | None = None, timeout: float = 180) -> tuple[subprocess.Popen, str]:
    """``sentiment serve --port 0`` on loopback; returns the process and its URL once ``/ready`` says 200."""
    import httpx

    cmd = [sys.executable, "-m", "sentiment_cli", "serve", "--checkpoint", str(checkpoint), "--host", "127.0.0.1",
           "--port", "0", "--no-access-log", "--max-wait-ms", str(max_wait_ms), *(["--onnx"] if onnx else []),
           *(["--threads", str(threads)] if threads else [])]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    url = None
    while time.monotonic() < deadline and url is None:
        line = proc.stderr.readline()
        if not line:
            raise RuntimeError(f"server exited: {proc.wait()}")
        m = re.search(r"on (http://\S+?:\d+) ", line)
        url = m.group(1) if m else None
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()   # keep the pipe drained
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/ready", timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not become ready")


async def _load(url: str, reviews: list[str], clients: int, requests: int, size: int,
                timeout: float) -> dict:
    """``clients`` concurrent clients, each sending ``requests`` requests of ``size`` reviews (bounded)."""
    import httpx

    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as http:
        async def client(c: int) -> None:
            nonlocal errors
            for r in range(requests):
                lo = ((c * requests + r) * size) % (len(reviews) - size)
                start = time.perf_counter()
                try:
                    resp = await http.post("/v1/predict", json={"texts": reviews[lo:lo + size]})
                    ok = resp.status_code == 200 and len(resp.json()["predictions"]) == size
                except httpx.HTTPError:
                    ok = False
                latencies.append(time.perf_counter() - start)
                errors += not ok
        start = time.perf_counter()
        await asyncio.gather(*(client(c) for c in range(clients)))
        wall = time.perf_counter() - start
    n = clients * requests
    q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else latencies * 99
    return {"clients": clients, "reviews_per_request": size, "requests": n, "seconds": wall,
            "requests_per_second": n / wall, "reviews_per_second": n * size / wall,
            "p50_ms": 1000 * q[49], "p95_ms": 1000 * q[94], "p99_ms": 1000 * q[98], "errors": errors}


def cli_throughput(checkpoint: Path, file: Path, n: int, onnx: bool, repeats: int) -> dict:
    """``sentiment predict --file --json`` on the reviews: median wall time of ``repeats`` runs, start-up included."""
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "sentiment_cli", "predict", "--file", str(file), "--json",
                            "--checkpoint", str(checkpoint), *(["--onnx"] if onnx else [])],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=1800)
        walls.append(time.perf_counter() - start)
        if r.returncode != 0 or len(r.stdout.splitlines()) != n:
            raise RuntimeError(f"predict --file failed: {r.stderr.strip()[-300:]}")
    wall = statistics.median(walls)
    return {"backend": "onnx" if onnx else "torch", "reviews": n, "seconds": wall, "reviews_per_second": n / wall}


def cold_start(checkpoint: Path, repeats: int) -> dict:
    """Median wall time of ``predict --onnx`` on one review, of ``predict`` (PyTorch), and of ``import torch``."""
    def timed(cmd):
        walls = []
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=300)
            walls.append(time.perf_counter() - start)
        return statistics.median(walls)
    review = "A moving, beautifully acted film."
    base = [sys.executable, "-m", "sentiment_cli", "predict", "--checkpoint", str(checkpoint), review]
    return {"repeats": repeats, "predict_onnx_seconds": timed(base + ["--onnx"]), "predict_torch_seconds": timed(base),
            "import_torch_seconds": timed([sys.executable, "-c", "import torch"]),
            "python_seconds": timed([sys.executable, "-c", "pass"])}


def soak(url: str, pid: int, reviews: list[str], total: int, clients: int, timeout: float) -> dict:
    """``total`` one-review requests from ``clients`` clients, RSS sampled after each tenth."""
    samples = [_rss_kib(pid)["rss"]]
    errors = 0
    step = max(1, total // 10 // clients)
    done = 0
    while done < total:
        r = asyncio.run(_load(url, reviews, clients, min(step, max(1, (total - done) // clients)), 1, timeout))
        done += r["requests"]
        errors += r["errors"]
        samples.append(_rss_kib(pid)["rss"])
    return {"requests": done, "errors": errors, "rss_mib": [round(s / 1024, 1) for s in samples],
            "growth_after_first_tenth_mib": round((samples[-1] - samples[1]) / 1024, 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=ROOT / "checkpoints" / "default")
    ap.add_argument("--data", help="dataset for the reviews (default: the checkpoint's)")
    ap.add_argument("--reviews", type=int, default=2000, help="held-out reviews to draw requests from")
    ap.add_argument("--requests", type=int, default=64, help="requests per client per row")
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--sizes", default="1,16", help="reviews per request")
    ap.add_argument("--max-wait-ms", type=float, default=2.0)
    ap.add_argument("--threads", type=int, help="model threads in the server (sentiment serve --threads)")
    ap.add_argument("--cli-repeats", type=int, default=3)
    ap.add_argument("--soak", type=int, default=0, help="one-review requests for the RSS soak (e.g. 100000)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from sentiment_cli.checkpoint import read_config
    from sentiment_cli.data.splits import DataSpec, load_split

    cfg, _ = read_config(args.checkpoint)
    # the checkpoint's own data is read with its columns; other data with the usual column names
    test = load_split(DataSpec.from_config(cfg) if args.data is None else args.data, "test")
    import random
    rng = random.Random(0)
    reviews = [" ".join(t.split()) for t in rng.sample(list(test.texts), min(args.reviews, len(test.texts)))]
    backends = ["torch"] + (["onnx"] if (args.checkpoint / "model.onnx").is_file() else [])
    results: dict = {"checkpoint": str(args.checkpoint), "cpus": os.cpu_count(), "cli": [], "serve": [], "soak": {}}

    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "reviews.txt"
        file.write_text("\n".join(reviews) + "\n", encoding="utf-8")
        for backend in backends:
            results["cli"].append(cli_throughput(args.checkpoint, file, len(reviews), backend == "onnx", args.cli_repeats))
            print(f"cli {backend}: {results['cli'][-1]['reviews_per_second']:,.0f} reviews/s", file=sys.stderr)
    if "onnx" in backends:
        results["cold_start"] = cold_start(args.checkpoint, max(3, args.cli_repeats))

    for backend in backends:
        proc, url = start_server(args.checkpoint, backend == "onnx", args.max_wait_ms, args.threads)
        try:
            for size in map(int, args.sizes.split(",")):
                for clients in map(int, args.clients.split(",")):
                    row = asyncio.run(_load(url, reviews, clients, args.requests, size, args.timeout))
                    row.update(backend=backend, peak_rss_mib=round(_rss_kib(proc.pid)["peak"] / 1024, 1))
                    results["serve"].append(row)
                    print(f"serve {backend} {clients:>2} clients x {size:>2} reviews: "
                          f"{row['reviews_per_second']:,.0f} reviews/s, p50 {row['p50_ms']:.1f} ms", file=sys.stderr)
            if args.soak:
                results["soak"][backend] = soak(url, proc.pid, reviews, args.soak, 32, args.timeout)
        finally:
            proc.terminate()
            proc.wait(60)

    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


def table(results: dict) -> str:
    """The results as Markdown tables (README-ready)."""
    cli = {r["backend"]: r for r in results["cli"]}
    lines = ["| backend | clients | reviews/request | requests/s | reviews/s | p50 ms | p95 ms | p99 ms | errors | "
             "peak RSS MiB | vs CLI --file |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results["serve"]:
        ratio = r["reviews_per_second"] / cli[r["backend"]]["reviews_per_second"]
        lines.append(f"| {r['backend']} | {r['clients']} | {r['reviews_per_request']} | {r['requests_per_second']:,.0f} | "
                     f"{r['reviews_per_second']:,.0f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['p99_ms']:.1f} | "
                     f"{r['errors']} | {r['peak_rss_mib']:.0f} | {ratio:.2f}× |")
    lines += ["", "| `sentiment predict --file --json` | reviews | seconds (median, start-up included) | reviews/s |",
              "|---|---:|---:|---:|"]
    lines += [f"| {r['backend']} | {r['reviews']:,} | {r['seconds']:.2f} | {r['reviews_per_second']:,.0f} |"
              for r in results["cli"]]
    if results.get("cold_start"):
        c = results["cold_start"]
        lines += ["", f"cold start (median of {c['repeats']}): `predict --onnx` {c['predict_onnx_seconds']:.2f} s, "
                      f"`predict` (PyTorch) {c['predict_torch_seconds']:.2f} s, `python -c 'import torch'` "
                      f"{c['import_torch_seconds']:.2f} s, bare `python` {c['python_seconds']:.2f} s"]
    for backend, s in results["soak"].items():
        lines += ["", f"soak {backend}: {s['requests']:,} one-review requests, {s['errors']} errors, RSS MiB by tenth: "
                      f"{', '.join(f'{x:g}' for x in s['rss_mib'])} (growth after the first tenth: "
                      f"{s['growth_after_first_tenth_mib']:+g} MiB)"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

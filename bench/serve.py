"""Benchmark `sentiment serve` on loopback with `hey`, against the same reviews scored in-process, in one run.

    python -m bench.serve --checkpoint DIR [--onnx] [--clients 32] [--requests 4000] [--repeats 3] [--json out.json]

Two reviews are served one per request: a short one (11 words) and a median-length review of the
checkpoint's test split (or ``--data``). For each, ``hey`` (Debian's ``hey``: a compiled load generator,
so the client takes less of the cores than a Python one would) sends ``--requests`` POSTs to
``/v1/predict`` from ``--clients`` connections to ``sentiment serve`` on 127.0.0.1 (a free port), after a
warm-up; requests/s, p50, p99 and errors are the median of ``--repeats`` runs. The baseline is the
in-process batched throughput of the same review: ``Predictor.predict`` on ``--copies`` copies, timed
inside one process after a warm-up (start-up excluded; best of three), with the server's model threads
and with one per core, whichever is faster. The ratio is the server's requests/s over that reviews/s. The server's peak RSS is read from /proc, and
``--rss-batch 16`` adds a phase of 16-review requests of median reviews (the ONNX arena's peak).

The load generator shares the machine with the server (and, on a shared machine, with everything
else): the load average is printed with the table, and ratios within one run are what to compare.
Every loop is bounded in count and every wait in time; only loopback is used.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from sentiment_cli.wording import plural

ROOT = Path(__file__).resolve().parent.parent
SHORT = "A moving, beautifully acted film that I would gladly watch again."   # 11 words

# The in-process baseline, run in a fresh process: argv = checkpoint, onnx (0/1), model threads,
# copies, review file; prints reviews/s.
BASELINE = """
import sys, time
from pathlib import Path
ckpt, onnx, threads, copies, review = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
if not onnx and threads:
    import torch
    torch.set_num_threads(threads)
from sentiment_cli.inference.predictor import Predictor
p = Predictor(ckpt, onnx=True, threads=threads or None) if onnx else Predictor(ckpt)
texts = [Path(review).read_text(encoding="utf-8")] * copies
p.predict(texts[:256])
best = 0.0
for _ in range(3):
    start = time.perf_counter()
    p.predict(texts)
    best = max(best, copies / (time.perf_counter() - start))
print(best)
"""


def _rss_kib(pid: int) -> dict[str, int]:
    """``{"rss": .., "peak": ..}`` in KiB from /proc (VmRSS, VmHWM)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out["rss" if line.startswith("VmRSS") else "peak"] = int(line.split()[1])
    return out


def start_server(checkpoint: Path, onnx: bool, threads: int | None, timeout: float = 180) -> tuple[subprocess.Popen, str]:
    """``sentiment serve --port 0`` on loopback; returns the process and its URL once ``/ready`` says 200."""
    import httpx

    cmd = [sys.executable, "-m", "sentiment_cli", "serve", "--checkpoint", str(checkpoint), "--host", "127.0.0.1",
           "--port", "0", "--no-access-log", *(["--onnx"] if onnx else []),
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


def hey(url: str, body: Path, requests: int, clients: int, timeout: int = 60) -> dict:
    """``hey`` POSTing ``body`` to ``url/v1/predict``: requests/s, p50/p99 (ms), errors (non-200 or failed)."""
    requests -= requests % clients   # hey sends requests // clients from each client
    cmd = ["hey", "-n", str(requests), "-c", str(clients), "-t", str(timeout), "-m", "POST",
           "-T", "application/json", "-D", str(body), url + "/v1/predict"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    pct = {int(p): 1000 * float(s) for p, s in re.findall(r"(\d+)%+ in ([\d.]+) secs", out)}
    ok = sum(int(n) for code, n in re.findall(r"\[(\d+)\]\s+(\d+) responses", out) if code == "200")
    return {"requests_per_second": rps, "p50_ms": pct.get(50, float("nan")), "p99_ms": pct.get(99, float("nan")),
            "errors": requests - ok, "requests": requests}


def baseline(checkpoint: Path, onnx: bool, threads: int, review: str, copies: int) -> float:
    """In-process batched reviews/s of ``copies`` copies of ``review`` (start-up excluded; best of 3)."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as f:
        f.write(review)
        f.flush()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        r = subprocess.run([sys.executable, "-c", BASELINE, str(checkpoint), "1" if onnx else "0", str(threads),
                            str(copies), f.name], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"in-process baseline failed: {r.stderr.strip()[-400:]}")
    return float(r.stdout.split()[-1])


def median_review(checkpoint: Path, data: str | None) -> str:
    """The test review of median word count (the checkpoint's test split, or ``data``'s)."""
    sys.path.insert(0, str(ROOT))
    from sentiment_cli.checkpoint import read_config
    from sentiment_cli.data.splits import DataSpec, load_split

    cfg, _ = read_config(checkpoint)
    texts = sorted(load_split(DataSpec.from_config(cfg) if data is None else data, "test").texts,
                   key=lambda t: len(t.split()))
    return " ".join(texts[len(texts) // 2].split())


def measure(args, reviews: dict[str, str], tmp: Path) -> dict:
    """Start the server, then per review: warm up, ``--repeats`` hey runs; the medians, and the RSS peak."""
    rows = []
    proc, url = start_server(args.checkpoint, args.onnx, args.threads)
    try:
        for name, review in reviews.items():
            body = tmp / f"{name}.json"
            body.write_text(json.dumps({"texts": [review]}), encoding="utf-8")
            hey(url, body, min(500, args.requests), args.clients)                     # warm-up
            runs = [hey(url, body, args.requests, args.clients) for _ in range(args.repeats)]
            row = {k: statistics.median(r[k] for r in runs) for k in ("requests_per_second", "p50_ms", "p99_ms")}
            row.update(review=name, words=len(review.split()), clients=args.clients, runs=runs,
                       errors=sum(r["errors"] for r in runs), requests=sum(r["requests"] for r in runs))
            rows.append(row)
            print(f"serve {name}: {row['requests_per_second']:,.0f} requests/s, p50 {row['p50_ms']:.1f} ms, "
                  f"p99 {row['p99_ms']:.1f} ms, {row['errors']} errors", file=sys.stderr)
        peak = {"one review per request": _rss_kib(proc.pid)["peak"] / 1024}
        if args.rss_batch:
            body = tmp / "batch.json"
            body.write_text(json.dumps({"texts": [reviews["median"]] * args.rss_batch}), encoding="utf-8")
            hey(url, body, 20 * args.clients, args.clients)
            peak[f"{args.rss_batch} reviews per request"] = _rss_kib(proc.pid)["peak"] / 1024
            peak["after"] = _rss_kib(proc.pid)["rss"] / 1024
    finally:
        proc.terminate()
        proc.wait(60)
    return {"rows": rows, "rss_mib": peak}


def main(argv: list[str] | None = None) -> None:
    """Parse the options, measure, print the table (and write ``--json``)."""
    ap = argparse.ArgumentParser(prog="python -m bench.serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=ROOT / "checkpoints" / "default")
    ap.add_argument("--onnx", action="store_true", help="serve and baseline on ONNX Runtime (CHECKPOINT/model.onnx)")
    ap.add_argument("--data", help="dataset for the median review (default: the checkpoint's)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=4000, help="requests per hey run")
    ap.add_argument("--repeats", type=int, default=3, help="hey runs per review (medians reported)")
    ap.add_argument("--copies", type=int, default=2000, help="copies of the review in the in-process baseline")
    ap.add_argument("--threads", type=int, help="model threads, in the server and the baseline")
    ap.add_argument("--rss-batch", type=int, default=0, help="also send requests of N median reviews (peak RSS)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    if shutil.which("hey") is None:
        sys.exit("bench.serve needs `hey` (Debian/Ubuntu: apt-get install hey)")

    reviews = {"short": SHORT, "median": median_review(args.checkpoint, args.data)}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        results = measure(args, reviews, Path(tmp))
    server_threads = args.threads or max(1, (os.cpu_count() or 1) - 1)   # sentiment serve's default
    for row in results["rows"]:
        row["in_process"] = {n: baseline(args.checkpoint, args.onnx, n, reviews[row["review"]], args.copies)
                             for n in sorted({server_threads, os.cpu_count() or 1})}
        row["in_process_reviews_per_second"] = max(row["in_process"].values())
        row["ratio"] = row["requests_per_second"] / row["in_process_reviews_per_second"]
    results.update(checkpoint=str(args.checkpoint), backend="onnx" if args.onnx else "torch", cpus=os.cpu_count(),
                   load_average=[round(x, 2) for x in (*load_before, *os.getloadavg())])
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


def table(results: dict) -> str:
    """The results as a Markdown table (README-ready), with the RSS peaks and the machine's load."""
    lines = ["| review | clients | requests/s | p50 | p99 | errors | in-process batched reviews/s | ratio |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results["rows"]:
        lines.append(f"| {r['review']} ({r['words']} words) | {r['clients']} | {r['requests_per_second']:,.0f} | "
                     f"{r['p50_ms']:.0f} ms | {r['p99_ms']:.0f} ms | {r['errors']} / {r['requests']:,} | "
                     f"{r['in_process_reviews_per_second']:,.0f} | {r['ratio']:.2f}x |")
    for r in results["rows"]:
        lines.append(f"{'' if r is not results['rows'][0] else chr(10)}in-process {r['review']}: " + ", ".join(
            f"{v:,.0f} reviews/s with {plural(n, 'thread')}" for n, v in r["in_process"].items()))
    rss = ", ".join(f"{k} {v:,.0f} MiB" for k, v in results["rss_mib"].items())
    la = results["load_average"]
    lines += ["", f"{results['backend']} backend, {results['checkpoint']}; server peak RSS: {rss}; "
                  f"{results['cpus']} CPUs, load average {la[0]:.1f} before and {la[3]:.1f} after (1 min)"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

"""Benchmark `sentiment serve` on loopback with `hey` against `sentiment predict --file`'s batched path, interleaved.

    python -m bench.serve --checkpoint DIR [--onnx] [--clients 32] [--requests 4000] [--repeats 5]
        [--only median] [--wait-quiet SECONDS] [--json out.json]

Two reviews are served one per request: a short one (11 words) and a median-length review of the
checkpoint's test split (or ``--data``). ``hey`` (Debian's ``hey``: a compiled load generator, so the
client takes less of the cores than a Python one would; its CPU time is measured and shown) sends
``--requests`` POSTs to ``/v1/predict`` from ``--clients`` connections to ``sentiment serve`` (default
options, ``--threads`` aside) on 127.0.0.1, after a warm-up.

The yardstick is what ``sentiment predict --file F --json`` does with the same review, minus its start-up:
the CLI's own code path, run in a second process that loads the checkpoint once: ``Predictor(checkpoint)``
(batches of the checkpoint's ``eval_batch_size``), ``predict_stream`` over ``--copies`` copies of the
review (1,024 at a time, as the CLI reads a file) and each result written as the CLI writes it
(``json_text(p.to_dict())``, to /dev/null). Timed in process rather than as ``predict --file`` minus a
separately timed start-up: the start-up (about 3 s: Python, torch, the checkpoint) is longer than the scoring
of 2,048 reviews, and on a shared machine the difference of two such timings is mostly their noise. It runs
with torch's default threads (the CLI's: one per core) and with one thread, and the faster of the two is the
yardstick (so a busy machine that stalls the CLI's intra-op threads cannot flatter the server).

Measurements are interleaved: each of ``--repeats`` rounds times the baseline and then the server back to back
(the order alternates), and the ratio is taken within each round (the server's requests/s over that round's
baseline reviews/s); the table quotes the median of the rounds' figures. CPU time per request (the server
process, from /proc; hey, from its rusage) and per review (the baseline) are shown too: unlike rates, they
hardly move with the machine's load. The server's peak RSS is read from /proc, and ``--rss-batch 16`` adds a
phase of 16-review requests of median reviews (the ONNX arena's peak).

The load generator shares the machine with the server (and, on a shared machine, with everything
else): each round also records how many cores other processes used meanwhile (the machine's CPU time, from
/proc/stat, less that of the server, hey and the baseline), and ``--wait-quiet SECONDS`` waits before each round
(at most that long) for a second in which they used under a quarter of a core. On a busy machine the CLI's
intra-op threads stall (and the faster one-thread baseline is then the yardstick), while each side only gets
its share of the cores: ratios within one run are what to compare, and those of rounds with the cores to
themselves (other processes under 0.3 cores; their median is printed too) are what a quiet machine gives. Every loop is bounded in count and every wait in time; only
loopback is used.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
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
QUIET_CORES = 0.3   # a round in which other processes used fewer cores had the machine (nearly) to itself


def _rss_kib(pid: int) -> dict[str, int]:
    """``{"rss": .., "peak": ..}`` in KiB from /proc (VmRSS, VmHWM)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out["rss" if line.startswith("VmRSS") else "peak"] = int(line.split()[1])
    return out


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, seconds) a live process has used so far, from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(checkpoint: Path, onnx: bool, threads: int | None,
                 timeout: float = 180) -> tuple[subprocess.Popen, str]:
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


def hey(url: str, body: Path, requests: int, clients: int, timeout: int = 60, server_pid: int | None = None) -> dict:
    """``hey`` POSTing ``body`` to ``url/v1/predict``: requests/s, p50/p99 (ms), errors (non-200 or failed), and
    the CPU milliseconds per request hey used (and the server, given its pid)."""
    requests -= requests % clients   # hey sends requests // clients from each client
    cmd = ["hey", "-n", str(requests), "-c", str(clients), "-t", str(timeout), "-m", "POST",
           "-T", "application/json", "-D", str(body), url + "/v1/predict"]
    server_before = cpu_seconds(server_pid) if server_pid else 0.0
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_cpu = cpu_seconds(server_pid) - server_before if server_pid else float("nan")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    pct = {int(p): 1000 * float(s) for p, s in re.findall(r"(\d+)%+ in ([\d.]+) secs", out)}
    ok = sum(int(n) for code, n in re.findall(r"\[(\d+)\]\s+(\d+) responses", out) if code == "200")
    client_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"requests_per_second": rps, "p50_ms": pct.get(50, float("nan")), "p99_ms": pct.get(99, float("nan")),
            "errors": requests - ok, "requests": requests, "client_cpu_ms": 1000 * client_cpu / requests,
            "server_cpu_ms": 1000 * server_cpu / requests}


def cli_pass(predictor, texts: list[str], out) -> None:
    """What ``sentiment predict --file F --json`` does with the lines it read: ``predict_stream`` (1,024 texts
    at a time, batches of the predictor's ``batch_size``), one JSON line per result written to ``out``."""
    from sentiment_cli.cli.render import json_text

    for p in predictor.predict_stream(texts):
        out.write(json_text(p.to_dict()) + "\n")


def baseline_worker(checkpoint: str, onnx: bool, copies: int) -> None:
    """The baseline's process (see the module's docstring): loads the checkpoint as ``predict`` does, then
    answers each stdin line ``THREADS REVIEW_FILE`` (THREADS 0: the CLI's default) with one line
    ``reviews/s cpu_ms_per_review threads`` for one :func:`cli_pass` over ``copies`` copies of the review,
    after a warm-up. Prints ``ready`` once loaded; ends at EOF."""
    from sentiment_cli.inference.predictor import Predictor

    default = {0: Predictor(checkpoint, onnx=True) if onnx else Predictor(checkpoint)}
    threads = {}
    if not onnx:
        import torch

        threads[0] = torch.get_num_threads()
    print("ready", flush=True)
    with open(os.devnull, "w", encoding="utf-8") as sink:
        for line in sys.stdin:
            n, review = line.split(maxsplit=1)
            n = int(n)
            if n not in default:   # ONNX Runtime's threads are the session's: one predictor per count
                default[n] = Predictor(checkpoint, onnx=True, threads=n) if onnx else default[0]
            if not onnx:
                torch.set_num_threads(n or threads[0])
            texts = [Path(review.strip()).read_text(encoding="utf-8")] * copies
            cli_pass(default[n], texts[:256], sink)   # warm-up
            wall, cpu = time.perf_counter(), time.process_time()
            cli_pass(default[n], texts, sink)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(f"{copies / wall} {1000 * cpu / copies} {n or threads.get(0, 0)}", flush=True)


class Baseline:
    """The baseline's process, started once; :meth:`run` times one pass."""

    def __init__(self, checkpoint: Path, onnx: bool, copies: int):
        code = f"from bench.serve import baseline_worker; baseline_worker({str(checkpoint)!r}, {onnx}, {copies})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the baseline process failed: exit {self.proc.wait(60)}")

    def run(self, threads: int, review: Path) -> dict:
        """``{"reviews_per_second", "cpu_ms", "threads"}`` of one pass with ``threads`` (0: the CLI's default)."""
        self.proc.stdin.write(f"{threads} {review}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().split()
        if len(line) != 3:
            raise RuntimeError(f"the baseline process failed: exit {self.proc.wait(60)}")
        return {"reviews_per_second": float(line[0]), "cpu_ms": float(line[1]), "threads": int(line[2])}

    def close(self) -> None:
        """End the process (EOF on its stdin)."""
        self.proc.stdin.close()
        self.proc.wait(60)


def median_review(checkpoint: Path, data: str | None) -> str:
    """The test review of median word count (the checkpoint's test split, or ``data``'s)."""
    sys.path.insert(0, str(ROOT))
    from sentiment_cli.checkpoint import read_config
    from sentiment_cli.data.splits import DataSpec, load_split

    cfg, _ = read_config(checkpoint)
    texts = sorted(load_split(DataSpec.from_config(cfg) if data is None else data, "test").texts,
                   key=lambda t: len(t.split()))
    return " ".join(texts[len(texts) // 2].split())


def machine_busy() -> float:
    """CPU seconds all processes have used so far (every core's user, system, ... time: /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def wait_quiet(pids: list[int], seconds: float, cores: float = 0.25) -> None:
    """Wait (at most ``seconds``) for a second in which the processes other than ``pids`` (and their waited-for
    children) use fewer than ``cores`` cores, checking once a second."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        busy, ours = machine_busy(), sum(map(cpu_seconds, pids))
        time.sleep(1)
        if (machine_busy() - busy) - (sum(map(cpu_seconds, pids)) - ours) < cores:
            return


def one_round(args, url: str, pid: int, body: Path, review: Path, base: Baseline, server_first: bool) -> dict:
    """One round: the baseline (the CLI's threads, then one thread) and the server, back to back; with the cores
    that other processes used meanwhile (``others_cores``: the machine's CPU time less ours, over the wall time)."""
    def baseline() -> list[dict]:
        return [base.run(n, review) for n in (0, 1)]

    if args.wait_quiet:
        wait_quiet([pid, base.proc.pid], args.wait_quiet)
    busy, ours, wall = machine_busy(), cpu_seconds(pid) + cpu_seconds(base.proc.pid), time.perf_counter()
    if server_first:
        served = hey(url, body, args.requests, args.clients, server_pid=pid)
        runs = baseline()
    else:
        runs = baseline()
        served = hey(url, body, args.requests, args.clients, server_pid=pid)
    ours = cpu_seconds(pid) + cpu_seconds(base.proc.pid) - ours + served["client_cpu_ms"] * served["requests"] / 1000
    others = (machine_busy() - busy - ours) / (time.perf_counter() - wall)
    best = max(r["reviews_per_second"] for r in runs)
    return {**served, "in_process": runs, "in_process_reviews_per_second": best,
            "ratio": served["requests_per_second"] / best, "others_cores": max(0.0, others)}


def summarise(name: str, words: int, clients: int, rounds: list[dict]) -> dict:
    """One table row: the median over the rounds of each figure (the ratio too: the median of the rounds'
    ratios), the errors and requests summed, every round kept under ``rounds``; ``quiet_ratio``, the median ratio
    of the rounds in which other processes used under :data:`QUIET_CORES` cores (None if none did)."""
    keys = ("requests_per_second", "p50_ms", "p99_ms", "in_process_reviews_per_second", "ratio",
            "client_cpu_ms", "server_cpu_ms", "others_cores")
    row = {k: statistics.median(r[k] for r in rounds) for k in keys}
    per_threads = {}
    for r in rounds:
        for b in r["in_process"]:
            per_threads.setdefault(b["threads"], []).append(b)
    row["in_process"] = {n: {"reviews_per_second": statistics.median(b["reviews_per_second"] for b in runs),
                             "cpu_ms": statistics.median(b["cpu_ms"] for b in runs)}
                         for n, runs in sorted(per_threads.items())}
    quiet = [r["ratio"] for r in rounds if r.get("others_cores", 0.0) < QUIET_CORES]
    row.update(review=name, words=words, clients=clients, rounds=rounds, quiet_ratio=statistics.median(quiet)
               if quiet else None, errors=sum(r["errors"] for r in rounds), requests=sum(r["requests"] for r in rounds))
    return row


def measure(args, reviews: dict[str, str], tmp: Path) -> dict:
    """Start the server and the baseline's process, then per review: a warm-up and ``--repeats`` rounds."""
    rows = []
    proc, url = start_server(args.checkpoint, args.onnx, args.threads)
    base = Baseline(args.checkpoint, args.onnx, args.copies)
    try:
        for name, review in reviews.items():
            body, text = tmp / f"{name}.json", tmp / f"{name}.txt"
            body.write_text(json.dumps({"texts": [review]}), encoding="utf-8")
            text.write_text(review, encoding="utf-8")
            hey(url, body, min(500, args.requests), args.clients)                     # warm-up
            rounds = [one_round(args, url, proc.pid, body, text, base, server_first=i % 2 == 1)
                      for i in range(args.repeats)]
            row = summarise(name, len(review.split()), args.clients, rounds)
            rows.append(row)
            print(f"{name}: " + "; ".join(f"{r['requests_per_second']:,.0f} requests/s vs "
                                          f"{r['in_process_reviews_per_second']:,.0f} reviews/s = {r['ratio']:.2f}x "
                                          f"(others {r['others_cores']:.2f} cores)" for r in rounds), file=sys.stderr)
        peak = {"one review per request": _rss_kib(proc.pid)["peak"] / 1024}
        if args.rss_batch:
            body = tmp / "batch.json"
            body.write_text(json.dumps({"texts": [reviews["median"]] * args.rss_batch}), encoding="utf-8")
            hey(url, body, 20 * args.clients, args.clients)
            peak[f"{args.rss_batch} reviews per request"] = _rss_kib(proc.pid)["peak"] / 1024
            peak["after"] = _rss_kib(proc.pid)["rss"] / 1024
    finally:
        base.close()
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
    ap.add_argument("--repeats", type=int, default=5, help="rounds (baseline and server) per review; medians quoted")
    ap.add_argument("--copies", type=int, default=2048, help="copies of the review in each baseline pass")
    ap.add_argument("--threads", type=int, help="the server's --threads (default: its own)")
    ap.add_argument("--only", choices=["short", "median"], help="measure one review only")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="before each round, wait up to SECONDS for other processes to leave the cores idle")
    ap.add_argument("--rss-batch", type=int, default=0, help="also send requests of N median reviews (peak RSS)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    if shutil.which("hey") is None:
        sys.exit("bench.serve needs `hey` (Debian/Ubuntu: apt-get install hey)")

    reviews = {"short": SHORT, "median": median_review(args.checkpoint, args.data)}
    if args.only:
        reviews = {args.only: reviews[args.only]}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        results = measure(args, reviews, Path(tmp))
    results.update(checkpoint=str(args.checkpoint), backend="onnx" if args.onnx else "torch", cpus=os.cpu_count(),
                   repeats=args.repeats, server_threads=args.threads,
                   load_average=[round(x, 2) for x in (*load_before, *os.getloadavg())])
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


def table(results: dict) -> str:
    """The results as a Markdown table (README-ready), with the CPU costs, the RSS peaks and the machine's load."""
    lines = ["| review | clients | requests/s | p50 | p99 | errors | `predict --file` batched reviews/s | ratio |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results["rows"]:
        lines.append(f"| {r['review']} ({r['words']} words) | {r['clients']} | {r['requests_per_second']:,.0f} | "
                     f"{r['p50_ms']:.0f} ms | {r['p99_ms']:.0f} ms | {r['errors']} / {r['requests']:,} | "
                     f"{r['in_process_reviews_per_second']:,.0f} | {r['ratio']:.2f}x |")
    lines.append("")
    for r in results["rows"]:
        cli = ", ".join(f"{v['reviews_per_second']:,.0f} reviews/s with {plural(n, 'thread')} "
                        f"({v['cpu_ms']:.2f} ms CPU a review)" for n, v in r["in_process"].items())
        ratios = ", ".join(f"{x['ratio']:.2f}" for x in r["rounds"])
        others = ", ".join(f"{x.get('others_cores', float('nan')):.2f}" for x in r["rounds"])
        quiet = "none" if r.get("quiet_ratio") is None else f"{r['quiet_ratio']:.2f}x"
        lines.append(f"{r['review']}: ratios {ratios} (other processes meanwhile: {others} cores; median of the "
                     f"rounds under {QUIET_CORES} cores: {quiet}); CPU a request: "
                     f"server {r['server_cpu_ms']:.2f} ms, hey {r['client_cpu_ms']:.2f} ms; `predict --file` {cli}")
    rss = ", ".join(f"{k} {v:,.0f} MiB" for k, v in results["rss_mib"].items())
    la = results["load_average"]
    lines += ["", f"{results['backend']} backend, {results['checkpoint']}; medians of {results['repeats']} "
                  f"interleaved rounds; server peak RSS: {rss}; {results['cpus']} CPUs, load average "
                  f"{la[0]:.1f} before and {la[3]:.1f} after (1 min)"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

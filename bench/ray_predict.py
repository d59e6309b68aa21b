"""Benchmark ``predict --data --ray`` (:func:`~sentiment_cli.inference.ray_predict.predict_with_ray`): rows/s with
one Ray worker and with two, on a local Ray cluster of 2 CPUs, against one core scoring in-process.

    python -m bench.ray_predict [--rows 100000] [--kind long|short] [--checkpoint DIR] [--repeats 3] [--files 8]
                                [--work DIR] [--json out.json]

The input, built once in ``--work``: ``--rows`` texts with an ``id`` column, split over ``--files`` Parquet files
(Ray Data reads files in parallel; one file would be one block, which one worker scores alone):

- ``long`` (the default): IMDB reviews (../shared/data/imdb: train, test and unsupervised: 100,000, the
  default ``--rows``, as ``bench.predict``'s long input), repeated beyond;
- ``short``: the sentences of SST-5's three splits (../shared/data/sst5) repeated.

Each repeat runs, one after another on the same input:

- ``in-process``: a fresh process with one thread (``OMP_NUM_THREADS=1``) reads the texts, loads the model, and
  ``Predictor.predict_proba`` scores them 1,024 at a time; only the scoring is timed (the best a core can do);
- ``Ray, 1 worker`` and ``Ray, 2 workers``: ``predict_with_ray(..., workers=k)`` on a cluster started once by
  this script (``ray.init(num_cpus=2)``), timed from the read to the last file written: the workers' start-up
  (import, checkpoint load) is included, Ray's own start-up is not. ``start-up s`` is the same call on a
  100-row input, about the fixed cost of a run.

Ray's workers run at niceness 0 here (``RAY_worker_niceness``; Ray's default is 15), as the baseline does.
Each run pays the workers' start-up (about 5 s on this machine), so a small ``--rows`` understates what more
workers gain. rows/s is the median of ``--repeats``. ``CPU s`` is the CPU time the run used: the baseline's scoring, or the
driver's and every Ray process's (workers, reads, writes, Ray's own services) from ``/proc``; what a busy
machine cannot distort as it does the wall time (2 workers on a quiet 2-core machine take at least half their
CPU seconds). The goal of issue 43: Ray with 2 workers >= 1.6x one worker's rows/s on
this 2-core machine. A shared machine distorts every figure: compare the ratios within one run, and read the
load average printed with the table.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
DEFAULT_CHECKPOINT = Path("/work/runs/imdb-41")

# The in-process baseline, in a fresh one-thread process: argv = checkpoint, the input folder; prints wall and
# CPU seconds.
BASELINE = """
import sys, time
import pyarrow.parquet as pq
import torch
torch.set_num_threads(1)
from sentiment_cli.inference.predictor import Predictor
texts = pq.read_table(sys.argv[2], columns=["text"]).column("text").to_pylist()
p = Predictor(sys.argv[1])
p.predict_proba(texts[:64])
start, cpu = time.perf_counter(), time.process_time()
for i in range(0, len(texts), 1024):
    p.predict_proba(texts[i:i + 1024])
print(time.perf_counter() - start, time.process_time() - cpu)
"""


def build_input(work: Path, kind: str, rows: int, files: int) -> Path:
    """The input folder (module docstring), written once into ``work``."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    folder = work / f"{kind}-{rows}-{files}"
    if folder.is_dir():
        return folder
    if kind == "short":
        pool = []
        for split in ("train", "dev", "test"):
            pool += pcsv.read_csv(SHARED / "sst5" / f"{split}.csv").column("sentence").to_pylist()
    else:
        pool = []
        for part in sorted((SHARED / "imdb" / "plain_text").glob("*.parquet")):
            pool += pq.read_table(part, columns=["text"]).column("text").to_pylist()
    texts = [pool[i % len(pool)] for i in range(rows)]
    partial = work / f".{folder.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    bounds = [rows * k // files for k in range(files + 1)]
    for k in range(files):
        lo, hi = bounds[k], bounds[k + 1]
        pq.write_table(pa.table({"id": list(range(lo, hi)), "text": texts[lo:hi]}), partial / f"part-{k:03d}.parquet")
    partial.rename(folder)
    return folder


def _tree_ticks() -> dict[int, int]:
    """CPU ticks (user + system) of each process below this one (Ray's GCS, raylet and workers), and of this
    process itself, from ``/proc`` (Linux)."""
    kids: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:   # exited meanwhile
            continue
        kids.setdefault(int(fields[1]), []).append(int(name))
        ticks[int(name)] = int(fields[11]) + int(fields[12])
    found, todo = {}, [os.getpid()]
    while todo:
        pid = todo.pop()
        found[pid] = ticks.get(pid, 0)
        todo += kids.get(pid, [])
    return found


class CpuMeter:
    """CPU seconds of this process and the processes below it while the ``with`` block runs. Sampled every
    0.2 s, since a Ray worker that exits is reaped without its time reaching its parent: the CPU a process used
    after its last sample is missed (at most 0.2 s each)."""

    def __enter__(self) -> "CpuMeter":
        import threading

        self.first = _tree_ticks()
        self.last = dict(self.first)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while not self.done.wait(0.2):
            self.last.update(_tree_ticks())

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()
        self.last.update(_tree_ticks())
        tick = os.sysconf("SC_CLK_TCK")
        self.seconds = sum(t - self.first.get(pid, 0) for pid, t in self.last.items()) / tick


def baseline_seconds(checkpoint: str, data: Path) -> tuple[float, float]:
    """``(wall, CPU)`` seconds of one core's in-process scoring of ``data`` (model load excluded).

    Raises:
        RuntimeError: the process failed.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", BASELINE, checkpoint, str(data)], capture_output=True, text=True,
                          env=env, timeout=3600)
    if proc.returncode:
        raise RuntimeError(f"the in-process baseline failed: {proc.stderr[-2000:]}")
    wall, cpu = proc.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def ray_seconds(checkpoint: str, data: Path, out: Path, workers: int) -> tuple[float, float]:
    """``(wall, CPU)`` seconds of one ``predict_with_ray`` run with ``workers`` workers (read to last file
    written; CPU: the driver's and every Ray process's, :class:`CpuMeter`)."""
    from sentiment_cli.inference.ray_predict import predict_with_ray

    with CpuMeter() as cpu:
        stats = predict_with_ray(checkpoint, data, out, workers=workers, force=True, progress=False)
    return stats["seconds"], cpu.seconds


def measure(checkpoint: str, data: Path, tiny: Path, work: Path, rows: int, repeats: int) -> list[dict]:
    """One row per way of scoring: its rows/s (median of ``repeats``), start-up seconds and ratio to 1 worker."""
    times: dict[str, list[tuple[float, float]]] = {"in-process, 1 thread": [], "Ray, 1 worker": [],
                                                   "Ray, 2 workers": []}
    startup = {k: ray_seconds(checkpoint, tiny, work / "out-tiny", k)[0] for k in (1, 2)}
    for r in range(repeats):
        times["in-process, 1 thread"].append(baseline_seconds(checkpoint, data))
        for k in (1, 2):
            times[f"Ray, {k} worker{'s' if k > 1 else ''}"].append(ray_seconds(checkpoint, data, work / "out", k))
        print(json.dumps({"repeat": r + 1, **{name: [round(x, 2) for x in t[-1]] for name, t in times.items()}}),
              file=sys.stderr, flush=True)
    table = []
    for name, runs in times.items():
        workers = int(name.split()[1]) if name.startswith("Ray") else None
        wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
        table.append({"how": name, "rows": rows, "seconds": wall, "cpu_seconds": cpu, "all_runs": runs,
                      "rows_per_s": rows / wall, "rows_per_cpu_s": rows / cpu,
                      "startup_s": startup.get(workers) if workers else None, "workers": workers or 1})
    one = next(row["rows_per_s"] for row in table if row["how"] == "Ray, 1 worker")
    for row in table:
        row["vs_1_worker"] = row["rows_per_s"] / one
        row["rows_per_s_per_core"] = row["rows_per_s"] / row["workers"]
    return table


def render(table: list[dict], args, data: Path) -> str:
    """The table, the ratio the goal reads, and the load average."""
    lines = [f"{args.rows:,} {'IMDB reviews' if args.kind == 'long' else 'SST-5 sentences'} in {args.files} "
             f"Parquet files ({data}); checkpoint {args.checkpoint}; median of {args.repeats}; "
             f"{os.cpu_count()} cores, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}",
             "",
             "| how | rows/s | rows/s per core | seconds (median) | CPU s | rows per CPU s | start-up s "
             "| vs 1 worker |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in table:
        start = f"{row['startup_s']:.1f}" if row["startup_s"] is not None else "-"
        lines.append(f"| {row['how']} | {row['rows_per_s']:,.0f} | {row['rows_per_s_per_core']:,.0f} | "
                     f"{row['seconds']:.1f} | {row['cpu_seconds']:.1f} | {row['rows_per_cpu_s']:,.0f} | {start} | "
                     f"{row['vs_1_worker']:.2f}x |")
    two = next(row for row in table if row["how"] == "Ray, 2 workers")
    lines += ["", f"Ray, 2 workers / 1 worker: {two['vs_1_worker']:.2f}x (goal >= 1.6x)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--kind", choices=("long", "short"), default="long")
    parser.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--work", type=Path, default=None, help="where the input is built (default: a temp folder)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    import ray

    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = build_input(work, args.kind, args.rows, args.files)
        tiny = build_input(work, args.kind, 100, 2)
        # Ray starts its workers at niceness 15: on a shared machine they would yield to everything else, the
        # in-process baseline included. At 0 they compete as the baseline does (on a quiet machine: no change).
        os.environ.setdefault("RAY_worker_niceness", "0")
        ray.init(address="local", num_cpus=2, log_to_driver=False, include_dashboard=False,
                 logging_level=logging.ERROR)
        try:
            table = measure(args.checkpoint, data, tiny, work, args.rows, args.repeats)
        finally:
            ray.shutdown()
            for name in ("out", "out-tiny"):
                shutil.rmtree(work / name, ignore_errors=True)
    print(render(table, args, data))
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "table": table,
                                         "loadavg": os.getloadavg()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

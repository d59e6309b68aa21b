"""Benchmark ``sentiment predict --data`` against the in-process ``Predictor`` on the same rows, in one run.

    python -m bench.predict --checkpoint DIR [--short-rows 1000000] [--long-rows 100000] [--small-rows 100000]
                            [--repeats 1] [--work DIR] [--json out.json]

Three inputs, each a Parquet file with an ``id`` and a ``text`` column in row groups of 100,000 rows
(:data:`ROW_GROUP_ROWS`), built once in ``--work``:

- ``short``: ``--short-rows`` short texts, the sentences of SST-5's three splits (../shared/data/sst5) repeated
  (a fraction of a sentence of IMDB's length, as people type them);
- ``small``: the first ``--small-rows`` of the same (the memory goal compares its peak with ``short``'s);
- ``long``: ``--long-rows`` IMDB reviews (train, test and unsupervised: 100,000 in all, median length).

For each input two jobs run, one at a time, each in a fresh process:

- ``sentiment predict --data IN --output OUT.parquet`` (start-up, reading and writing included), timed from
  launch to exit, with a fresh ``datasets`` cache (so its conversion of the file is counted);
- the baseline: the texts read into a list first (not timed), then ``Predictor.predict_proba`` over them in
  chunks of 1,024 (``predict --file``'s chunk), timed inside the process after the model loaded.

rows/s is the rows over the seconds (the median of ``--repeats``); peak RSS is each process's own maximum
resident set (``os.wait4``'s rusage, the figure ``/usr/bin/time -f %M`` prints). The goals of issue 43:
``predict --data`` >= 0.9x the baseline's rows/s on ``short`` and ``long``; the peak on ``short`` within 10% of
the peak on ``small``. A shared machine distorts both: run it alone, and compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Rows per Parquet row group in the inputs, as writers of large files cut them (Spark and pandas: by size). A row
# group is the unit Parquet is read in, so a reader's peak memory follows it, whatever the number of rows; the
# inputs share one size, so the memory goal compares rows alone.
ROW_GROUP_ROWS = 100_000
SHARED = ROOT.parent / "shared" / "data"

# The in-process baseline, run in a fresh process: argv = checkpoint, the Parquet file; prints seconds.
BASELINE = """
import sys, time
import pyarrow.parquet as pq
from sentiment_cli.inference.predictor import Predictor
p = Predictor(sys.argv[1])
texts = pq.read_table(sys.argv[2], columns=["text"]).column("text").to_pylist()
p.predict_proba(texts[:64])
start = time.perf_counter()
for i in range(0, len(texts), 1024):
    p.predict_proba(texts[i:i + 1024])
print(time.perf_counter() - start)
"""


def build_inputs(work: Path, short_rows: int, long_rows: int, small_rows: int) -> dict[str, Path]:
    """The three Parquet inputs (module docstring), written once into ``work``."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    files = {"short": work / f"short-{short_rows}-rg.parquet", "small": work / f"short-{small_rows}-rg.parquet",
             "long": work / f"imdb-{long_rows}-rg.parquet"}
    if all(f.exists() for f in files.values()):
        return files
    sentences = []
    for split in ("train", "dev", "test"):
        sentences += pcsv.read_csv(SHARED / "sst5" / f"{split}.csv").column("sentence").to_pylist()
    reviews = []
    for part in sorted((SHARED / "imdb" / "plain_text").glob("*.parquet")):
        reviews += pq.read_table(part, columns=["text"]).column("text").to_pylist()
    for name, pool, rows in (("short", sentences, short_rows), ("small", sentences, small_rows),
                             ("long", reviews, long_rows)):
        texts = [pool[i % len(pool)] for i in range(rows)]
        pq.write_table(pa.table({"id": [f"{name}-{i}" for i in range(rows)], "text": texts}), files[name],
                       row_group_size=ROW_GROUP_ROWS)
    return files


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """``(wall seconds, peak RSS in MB, stdout)`` of one child process.

    Raises:
        RuntimeError: the command failed.
    """
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        text = out.read().decode()
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err.read().decode()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024, text


def run_cli(checkpoint: str, data: Path, out_dir: Path) -> tuple[float, float]:
    """``(seconds, peak MB)`` of ``sentiment predict --data data --output out.parquet``, a fresh data cache."""
    with tempfile.TemporaryDirectory(dir=out_dir) as cache:
        env = {**os.environ, "HF_DATASETS_CACHE": cache}
        out = Path(cache) / "scored.parquet"
        cmd = [sys.executable, "-m", "sentiment_cli.cli", "predict", "--data", str(data), "--checkpoint", checkpoint,
               "--output", str(out)]
        seconds, peak, _ = _timed(cmd, env)
    return seconds, peak


def run_baseline(checkpoint: str, data: Path) -> tuple[float, float]:
    """``(seconds of scoring alone, peak MB)`` of the in-process baseline."""
    seconds, peak, text = _timed([sys.executable, "-c", BASELINE, checkpoint, str(data)], dict(os.environ))
    return float(text.strip().splitlines()[-1]), peak


def measure(checkpoint: str, files: dict[str, Path], repeats: int, work: Path) -> list[dict]:
    """One row per input: rows, rows/s of each job (medians of ``repeats``), the ratio and the peaks."""
    import pyarrow.parquet as pq

    rows = []
    for name, path in files.items():
        n = pq.read_metadata(path).num_rows
        cli, base = [], []
        for _ in range(repeats):
            cli.append(run_cli(checkpoint, path, work))
            if name != "small":   # the small input is there for its peak memory alone
                base.append(run_baseline(checkpoint, path))
        row = {"input": name, "rows": n, "cli_rows_per_s": n / statistics.median(s for s, _ in cli),
               "cli_peak_mb": max(m for _, m in cli)}
        if base:
            row.update(baseline_rows_per_s=n / statistics.median(s for s, _ in base),
                       baseline_peak_mb=max(m for _, m in base))
            row["ratio"] = row["cli_rows_per_s"] / row["baseline_rows_per_s"]
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def render(rows: list[dict]) -> str:
    """The table, and the memory goal's ratio."""
    lines = ["| input | rows | predict --data rows/s | Predictor rows/s | ratio | peak RSS --data | peak RSS Predictor |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        base = f"{r['baseline_rows_per_s']:,.0f}" if "ratio" in r else "-"
        ratio = f"{r['ratio']:.2f}x" if "ratio" in r else "-"
        peak = f"{r['baseline_peak_mb']:,.0f} MB" if "ratio" in r else "-"
        lines.append(f"| {r['input']} | {r['rows']:,} | {r['cli_rows_per_s']:,.0f} | {base} | {ratio} | "
                     f"{r['cli_peak_mb']:,.0f} MB | {peak} |")
    by = {r["input"]: r for r in rows}
    if "short" in by and "small" in by:
        lines.append(f"\npeak RSS, {by['short']['rows']:,} rows over {by['small']['rows']:,}: "
                     f"{by['short']['cli_peak_mb'] / by['small']['cli_peak_mb']:.3f} (goal: <= 1.10)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.predict", description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--short-rows", type=int, default=1_000_000)
    parser.add_argument("--small-rows", type=int, default=100_000)
    parser.add_argument("--long-rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-predict")
    parser.add_argument("--inputs", default="short,small,long", help="which inputs to run (comma-separated)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    files = build_inputs(args.work, args.short_rows, args.long_rows, args.small_rows)
    files = {name: path for name, path in files.items() if name in args.inputs.split(",")}
    rows = measure(args.checkpoint, files, args.repeats, args.work)
    print(f"load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores; checkpoint {args.checkpoint}")
    print(render(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

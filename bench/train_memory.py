"""Training's peak memory against the number of training rows (issue 43, item 6).

    python -m bench.train_memory [--rows 25000,400000] [--max-steps N] [--distinct] [--data-dir DIR]
                                 [--logs DIR] [--imdb ../shared/data/imdb] [--config seed]

For each row count it writes (once; kept in ``--data-dir``, default a temporary folder) a folder holding
``train.parquet``: IMDB's 25,000 training reviews (``--imdb``'s ``plain_text/train-*.parquet``, columns
``text``, ``label``) repeated as often as the count needs, cut to it and shuffled (seed 0), so that the validation
hold-out draws from every copy. ``--distinct`` appends `` r<row>`` to each text, so that no two rows are the same
string (a fix that kept one copy of equal texts would not help such data).

It then runs ``sentiment train --config seed --epochs 1 --data FOLDER --json`` in a child process, under
``/usr/bin/time -f %M`` (the peak resident set, in KB), polls the child's ``VmHWM`` every 2 seconds into a
log (``--logs``, default beside the data: ``hwm-<name>.log``, seconds and MB; ``.err``: its stderr; ``.json``:
its metrics) and prints rows, the peak RSS in MB and its ratio to the first count's peak (the issue's goal: at
most 1.5 at 400,000 rows against 25,000). A data folder's first run also converts it into ``datasets``' cache
(0.57 GB peak at 400,000 rows in a process that has imported torch, below training's).

``sentiment train`` has no step cap. ``--max-steps N`` (bench-only) runs the same command through
``python -m bench.train_memory --child N -- <train arguments>``, which wraps the training loop's step so that
after ``N`` steps the process sends itself SIGTERM: the CLI stops at the next step as on Ctrl-C (exit code
143, nothing saved), and the peak is the peak until then (the reading, the tokenizer, the token ids, the
model and ``N`` steps; not validation, calibration or the behavioural suite). Stop only once the steps have
reached a steady state (watch the log): the peak is normally reached by then.

The machine may be shared: memory figures do not depend on the other processes, times do.

Measured (2 shared cores; ``--distinct``; 400,000 rows: the full epoch): 749 MB at 25,000 rows, 846 MB at
100,000 and 880 MB at 400,000 (ratio 1.18); before this change 1,293 MB, 3,209 MB and 10,683 MB (400,000: stopped
after 10 steps, its peak reached while tokenizing).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

IMDB_ROWS = 25_000


def build_data(rows: int, folder: Path, imdb: Path, *, distinct: bool = False, seed: int = 0) -> Path:
    """``folder/train.parquet``: IMDB's training reviews tiled to ``rows`` rows, shuffled with ``seed``; made once.

    Returns:
        ``folder``.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    target = folder / "train.parquet"
    if target.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    files = sorted((imdb / "plain_text").glob("train-*.parquet"))
    if not files:
        raise SystemExit(f"no plain_text/train-*.parquet under {imdb}")
    base = pa.concat_tables([pq.read_table(f, columns=["text", "label"]) for f in files])
    order = np.random.default_rng(seed).permutation(rows) % len(base)   # each copy once per len(base) rows
    table = base.take(pa.array(order))
    if distinct:
        suffix = pc.binary_join_element_wise(pa.array([" r"] * rows), pa.array([str(i) for i in range(rows)]), "")
        table = table.set_column(0, "text", pc.binary_join_element_wise(table["text"], suffix, ""))
    tmp = folder / ".train.parquet.tmp"
    pq.write_table(table, tmp, row_group_size=10_000)
    os.replace(tmp, target)
    return folder


def _poll_hwm(pid: int, log: Path, done: threading.Event) -> None:
    """Write ``seconds MB`` (the process's VmHWM) to ``log`` every 2 seconds until ``done``."""
    start = time.perf_counter()
    with open(log, "w") as fh:
        while not done.wait(2.0):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                break
            hwm = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")), 0)
            fh.write(f"{time.perf_counter() - start:.0f} {hwm / 1024:.0f}\n")
            fh.flush()


def measure(folder: Path, output: Path, config: str, max_steps: int | None, log: Path) -> tuple[float, float, int]:
    """``(peak MB, seconds, exit code)`` of one ``sentiment train --epochs 1`` on ``folder``."""
    train = ["train", "--config", config, "--epochs", "1", "--data", str(folder), "--output", str(output), "--json"]
    if max_steps:
        command = [sys.executable, "-m", "bench.train_memory", "--child", str(max_steps), "--", *train]
    else:
        command = [str(Path(sys.executable).with_name("sentiment")), *train]
    peak_file = log.with_suffix(".time")
    start = time.perf_counter()
    with open(log.with_suffix(".json"), "w") as out, open(log.with_suffix(".err"), "w") as err:
        proc = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", str(peak_file), *command], stdout=out, stderr=err)
    time.sleep(0.5)
    child = _child_pid(proc.pid)
    done = threading.Event()
    poller = threading.Thread(target=_poll_hwm, args=(child or proc.pid, log, done), daemon=True)
    poller.start()
    code = proc.wait()
    done.set()
    poller.join()
    kb = int(peak_file.read_text().split()[-1])
    return kb / 1024, time.perf_counter() - start, code


def _child_pid(pid: int) -> int | None:
    """The first child of ``pid`` (``/usr/bin/time``'s command), or ``None``."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def child(max_steps: int, argv: list[str]) -> None:
    """Run ``sentiment <argv>`` in this process, sending itself SIGTERM after ``max_steps`` training steps."""
    from sentiment_cli.cli import main as sentiment
    from sentiment_cli.training import loop

    step, count = loop._step, [0]

    def counted(*args, **kwargs):
        out = step(*args, **kwargs)
        count[0] += 1
        if count[0] == max_steps:
            print(f"bench: {max_steps} steps done; stopping", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
        return out

    loop._step = counted
    sys.argv = ["sentiment", *argv]
    sentiment()


def main(argv: list[str] | None = None) -> None:
    """Parse the options, build the data, measure each row count and print the table."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(int(argv[1]), argv[3:] if argv[2:3] == ["--"] else argv[2:])
    p = argparse.ArgumentParser(prog="python -m bench.train_memory", description=__doc__.split("\n")[0])
    p.add_argument("--rows", default="25000,400000", help="comma-separated row counts (the first is the baseline)")
    p.add_argument("--max-steps", type=int, default=None, help="stop each run after N training steps (SIGTERM)")
    p.add_argument("--distinct", action="store_true", help="append ' r<row>' to each text: no two texts equal")
    p.add_argument("--data-dir", type=Path, default=None, help="where the data folders are made (kept); "
                   "default: a temporary folder")
    p.add_argument("--imdb", type=Path, default=Path("../shared/data/imdb"))
    p.add_argument("--config", default="seed")
    p.add_argument("--logs", type=Path, default=None, help="where each run's VmHWM log (hwm-*.log), stderr (.err) "
                   "and metrics.json (.json, a finished run's) go; default: the data folder")
    args = p.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]
    with tempfile.TemporaryDirectory(prefix="train-memory-") as tmp:
        base = args.data_dir or Path(tmp)
        first = None
        print(f"{'rows':>9} {'peak MB':>9} {'ratio':>6} {'seconds':>8} exit")
        for n in rows:
            name = f"imdb_x{n // IMDB_ROWS}" if n % IMDB_ROWS == 0 else f"imdb_{n}"
            name += "_distinct" if args.distinct else ""
            folder = build_data(n, base / name, args.imdb, distinct=args.distinct)
            logs = args.logs or base
            logs.mkdir(parents=True, exist_ok=True)
            log = logs / f"hwm-{name}{f'-{args.max_steps}steps' if args.max_steps else ''}.log"
            with tempfile.TemporaryDirectory(prefix="run-") as out:
                peak, seconds, code = measure(folder, Path(out) / "ckpt", args.config, args.max_steps, log)
            first = first or peak
            print(f"{n:>9,} {peak:>9.0f} {peak / first:>6.2f} {seconds:>8.0f} {code}", flush=True)


if __name__ == "__main__":
    main()

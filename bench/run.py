"""One benchmark run: the project's configs, the notebook's loop and the peers (TF-IDF + LR,
NB-SVM, fastText), side by side.

    python -m bench [--quick] [--data PATH] [--configs configs/seed.toml configs/default.toml]
    python -m bench --suites sst5 [--sst5-data PATH]   # only SST-5: the sst5 preset and TF-IDF + LR

SST-5 (five classes) runs first: ``configs/sst5.toml`` trained with dev as
validation and scored once on test, against TF-IDF + logistic regression
with ``C`` chosen on dev, in a table of its own.

Every system runs in its own subprocess (``python -m bench.jobs NAME``: ``bench/jobs.py``),
one after another, on the same split, so that peak memory (max RSS of that
process) is its own and timings are not disturbed by each other. Speeds
are reported as ratios taken in this run (``bench/report.py``). ``--quick`` uses the committed
slice and one epoch, for smoke tests.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.jobs import FULL, PEER_JOBS, ROOT, SMALL, SST5, SST5_SMALL
from bench.report import markdown, render, render_sst5, sst5_markdown


def run_sst5(data: str, out: Path, epochs: list[str], pretrain_data: str) -> dict:
    """Both SST-5 jobs, one after the other."""
    return {"data": data,
            "ours": run_job("sst5", "--data", data, "--output", str(out / "sst5"), "--pretrain-data", pretrain_data,
                            *epochs),
            "tfidf": run_job("sst5_tfidf", "--data", data)}


def run_job(name: str, *extra: str) -> dict:
    """Run one job in a fresh process; its result plus ``peak_rss_mib`` (that process's max RSS)."""
    cmd = [sys.executable, "-m", "bench.jobs", name, *extra]
    print(f"· {name} {' '.join(extra)}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark job {name} failed (exit {proc.returncode})")
    result = json.loads(out.decode().strip().splitlines()[-1])
    result["peak_rss_mib"] = usage.ru_maxrss / 1024   # Linux: KiB
    return result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the committed slice, 1 epoch: a smoke test")
    ap.add_argument("--data", default=None, help=f"IMDB folder (default {FULL}; --quick: the test slice)")
    ap.add_argument("--configs", nargs="+", default=["configs/seed.toml", "configs/default.toml"])
    ap.add_argument("--notebook-epochs", type=int, default=2, help="epochs of the notebook loop to time")
    ap.add_argument("--output", default=None, help="folder for checkpoints and results.json (default: temp)")
    ap.add_argument("--suites", nargs="+", choices=("imdb", "sst5"), default=["imdb", "sst5"],
                    help="which benchmarks to run (default: both)")
    ap.add_argument("--sst5-data", default=None, help=f"SST-5 folder (default {SST5}; --quick: {SST5_SMALL.name})")
    args = ap.parse_args(argv)
    data = args.data or str(SMALL if args.quick else FULL)
    out = Path(args.output or tempfile.mkdtemp(prefix="sentiment-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    epochs = ["--epochs", "1"] if args.quick else []
    import torch
    results = {"date": dt.date.today().isoformat(),
               "hardware": f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
                           f"{'CUDA' if torch.cuda.is_available() else 'no GPU'}",
               "data": data, "quick": args.quick}
    if "sst5" in args.suites:
        results["sst5"] = run_sst5(args.sst5_data or str(SST5_SMALL if args.quick else SST5), out, epochs,
                                   data if args.quick else str(FULL))
    if "imdb" not in args.suites:
        (out / "results.json").write_text(json.dumps(results, indent=2))
        (out / "results.md").write_text(sst5_markdown(results).lstrip("\n"))
        render_sst5(results)
        print(f"results: {out / 'results.json'}", file=sys.stderr)
        return
    results["peak"] = run_job("peak")
    results["notebook"] = run_job("notebook", "--data", data, "--epochs", "1" if args.quick else str(args.notebook_epochs))
    results["ours"] = {}
    for cfg in args.configs:
        name = Path(cfg).stem
        results["ours"][name] = run_job("ours", "--data", data, "--config", str(ROOT / cfg),
                                        "--output", str(out / name), *epochs)
    results["peers"] = {name: run_job(name, "--data", data) for name in PEER_JOBS}
    first = next(iter(results["ours"].values()))
    results["coldstart"] = run_job("coldstart", "--output", first["checkpoint"], "--repeats", "3" if args.quick else "7")
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "results.md").write_text(markdown(results) + (sst5_markdown(results) if "sst5" in results else ""))
    render(results)
    if "sst5" in results:
        render_sst5(results)
    print(f"results: {out / 'results.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()

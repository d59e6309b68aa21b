"""The busy-machine benchmark: the default as a new user runs it, beside CPU-bound competitors and without them.

    python -m bench --busy [--sets trec6 wisesight ...] [--data DIR ...] [--budget 300s] [--competitors 2]
                           [--modes quiet busy] [--output DIR]

For each set (``../shared/data``, as ``bench/suite.py`` names them, or any folder given with ``--data``) and each
mode, in one run: ``sentiment train --data DIR`` (with ``--time-budget`` when given, else the data rules' budget),
then ``sentiment eval --split test --json``. In the ``busy`` mode, ``--competitors`` processes each running a plain
Python loop (``while True: pass``, CPU-bound, normal priority) start before the training and are ended (by their
process ids) after it. Each row records what the search chose, why each encoder trial ended, test accuracy, the
training's wall time and the load average when it started (others may be using the machine too). It prints a
Markdown table and writes ``busy.json`` and ``busy.md`` in ``--output``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.suite import SETS, SHARED

ALL_SETS = {**SETS, "wisesight": "wisesight"}
LOOP = "while True: pass"


def competitors(n: int) -> list[subprocess.Popen]:
    """``n`` CPU-bound Python processes (a plain loop each), started now."""
    return [subprocess.Popen([sys.executable, "-c", LOOP]) for _ in range(n)]


def end(processes: list[subprocess.Popen]) -> None:
    """End the processes :func:`competitors` started, each by its own id."""
    for p in processes:
        p.terminate()
    for p in processes:
        p.wait(timeout=30)


def train_once(folder: str, out: Path, budget: str | None, n: int) -> dict:
    """One ``sentiment train --data folder`` (``n`` competitors beside it) and its test evaluation: the row. The
    training's output (its stage, each fit's and trial's line) goes to ``<out>.log`` beside the checkpoint."""
    cmd = [sys.executable, "-m", "sentiment_cli", "train", "--data", folder, "--output", str(out)]
    cmd += ["--time-budget", budget] if budget else []
    load = os.getloadavg()[0]
    others = competitors(n)
    print(f"· {' '.join(cmd[2:])} ({n} competitors, load {load:.1f})", file=sys.stderr, flush=True)
    start = time.perf_counter()
    log = out.parent / f"{out.name}.log"
    try:
        with log.open("w") as stream:
            proc = subprocess.run(cmd, cwd=out.parent, stdout=stream, stderr=subprocess.STDOUT, text=True)
    finally:
        end(others)
    seconds = time.perf_counter() - start
    row = {"competitors": n, "load_before": round(load, 2), "train_seconds": round(seconds, 1)}
    if proc.returncode != 0:   # the last line in the table, the traceback's last 40 lines in busy.json
        lines = log.read_text().strip().splitlines() or ["(no output)"]
        return {**row, "error": lines[-1], "stderr_tail": lines[-40:]}
    ev = subprocess.run([sys.executable, "-m", "sentiment_cli", "eval", "--split", "test", "--checkpoint", str(out),
                         "--json"], cwd=out.parent, capture_output=True, text=True, check=True)
    metrics = json.loads((out / "metrics.json").read_text())
    search = metrics.get("search") or {}
    trials = [{"name": c["name"], "status": c["status"], "ended": c.get("ended"), "seconds": c["seconds"],
               "validation_accuracy": c.get("validation_accuracy"), "examples_per_second": c.get("examples_per_second")}
              for c in search.get("candidates", []) if c["kind"] == "encoder"]
    return {**row, "test_accuracy": json.loads(ev.stdout)["accuracy"], "chosen": search.get("chosen"),
            "search_seconds": search.get("seconds"), "budget_seconds": search.get("budget_seconds"),
            "encoder_budget_hint": search.get("encoder_budget_hint"), "trials": trials,
            "shared_work": search.get("shared_work")}


def _trial_phrase(t: dict) -> str:
    if t["status"] != "complete":
        return f"{t['name']}: {t['status']} ({t['seconds']:.0f} s)"
    ended = t.get("ended") or "its schedule"
    return f"{t['name']}: {t['validation_accuracy']:.2%} val, {ended} ({t['seconds']:.0f} s)"


def markdown(results: dict) -> str:
    """The table: set, mode, chosen, each trial's end, test accuracy, time."""
    lines = ["| set | mode (load before) | chosen | encoder trials | test | train s |", "|---|---|---|---|---|---|"]
    for name, modes in results.items():
        for mode, r in modes.items():
            if "error" in r:
                lines.append(f"| {name} | {mode} ({r['load_before']}) | error: {r['error']} | | | "
                             f"{r['train_seconds']} |")
                continue
            trials = "; ".join(_trial_phrase(t) for t in r["trials"]) or "none"
            lines.append(f"| {name} | {mode} ({r['load_before']}) | {r['chosen']} | {trials} | "
                         f"{r['test_accuracy']:.2%} | {r['train_seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench --busy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", choices=sorted(ALL_SETS), default=None, help="shared sets (default: trec6 "
                    "wisesight)")
    ap.add_argument("--data", nargs="+", default=[], metavar="DIR", help="other labelled folders")
    ap.add_argument("--budget", default=None, help="--time-budget for every run (default: the data rules')")
    ap.add_argument("--competitors", type=int, default=2, help="CPU-bound processes beside a busy run (default 2)")
    ap.add_argument("--modes", nargs="+", choices=("quiet", "busy"), default=["quiet", "busy"])
    ap.add_argument("--output", default=None, help="folder for checkpoints and results (default: temp)")
    args = ap.parse_args(argv)
    folders = {s: str(SHARED / ALL_SETS[s]) for s in (args.sets or ([] if args.data else ["trec6", "wisesight"]))}
    folders.update({Path(d).name: d for d in args.data})
    out = Path(args.output or tempfile.mkdtemp(prefix="busy-"))
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    for name, folder in folders.items():
        for mode in args.modes:
            n = args.competitors if mode == "busy" else 0
            results.setdefault(name, {})[mode] = train_once(folder, out / f"{name}-{mode}", args.budget, n)
            (out / "busy.json").write_text(json.dumps(results, indent=1))
    table = markdown(results)
    (out / "busy.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()

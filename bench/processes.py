"""The benchmarks' fresh processes: a benchmark module's job (:func:`job`), and our row's ``sentiment train``
then ``eval`` (:func:`train_and_eval`). ``bench/suite.py``, ``bench/multilabel.py`` and ``bench/budget.py`` run
their systems through these, so neither of the first two imports the other's driver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def job(*args: str, module: str = "bench.suite") -> dict:
    """Run ``python -m MODULE --job ARGS`` (``bench.suite``'s jobs, or another benchmark's) in a fresh process and
    return its JSON line; ``{"error": last line}`` when it fails."""
    cmd = [sys.executable, "-m", module, "--job", *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["(no output)"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def train_and_eval(folder: str, out: Path, extra: list[str]) -> tuple[dict, float]:
    """``sentiment train --data DIR`` (plus ``extra``) then ``eval --split test --json``: ``(eval's JSON, training
    seconds)``; on failure, ``{"error": the exit code and the last line it printed, "stderr_tail": its last 40 lines}``
    instead of the JSON."""
    cmd = [sys.executable, "-m", "sentiment_cli", "train", "--data", folder, "--output", str(out), *extra]
    print(f"· {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=out.parent, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:   # the last line in the table, the traceback's last 40 lines in the record
        lines = proc.stderr.strip().splitlines() or ["(no output)"]
        return {"error": f"exit {proc.returncode}: {lines[-1]}", "stderr_tail": lines[-40:]}, seconds
    result = _eval_test(out)
    if (out / "full").is_dir():   # --keep-full: the same run's model before compression, scored alike
        result["full"] = _eval_test(out / "full")
    return result, seconds


def _eval_test(folder: Path) -> dict:
    """``sentiment eval --split test --json`` of ``folder``, with the folder's bytes (its own files)."""
    ev = subprocess.run([sys.executable, "-m", "sentiment_cli", "eval", "--split", "test", "--checkpoint", str(folder),
                         "--json"], cwd=folder.parent, capture_output=True, text=True, check=True)
    return {**json.loads(ev.stdout), "folder_bytes": sum(f.stat().st_size for f in folder.iterdir() if f.is_file()),
            "weights_bytes": (folder / "model.safetensors").stat().st_size}

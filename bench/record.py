"""What every suite-style benchmark (``bench.suite``, ``bench.audit``) records around its figures: when, at
which commit and on what machine, and its results written as JSON and Markdown."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def header() -> dict[str, Any]:
    """``{"date", "commit", "hardware"}`` of this run (commit ``"unknown"`` outside a git checkout)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    return {"date": dt.date.today().isoformat(), "commit": commit.strip() or "unknown",
            "hardware": f"{platform.machine()}, {os.cpu_count()} CPU cores, no GPU"}


def save(results: dict[str, Any], out: Path) -> None:
    """Write ``results`` to ``out/results.json`` (after each set or case, so a stopped run keeps what it did)."""
    (out / "results.json").write_text(json.dumps(results, indent=2))


def finish(results: dict[str, Any], out: Path, markdown: Callable[[dict[str, Any]], str]) -> None:
    """Write and print the Markdown table, and say where the results are."""
    save(results, out)
    (out / "results.md").write_text(markdown(results))
    print(markdown(results))
    print(f"results: {out / 'results.json'}", file=sys.stderr)

"""Cold start: `sentiment predict` of one review, against `python -c "import torch"`, in one run.

    python -m bench.coldstart [--checkpoint DIR] [--repeats 7] [--text "A moving film."] [--json out.json]

Each repeat runs both commands as fresh processes, one after the other (the order alternating between
repeats, so that neither always runs on a warmer page cache): ``python -c "import torch"`` and the
``sentiment`` entry point (``sentiment predict --checkpoint DIR TEXT``, the console script that
``pip install`` writes, run with this interpreter). The wall time of each is measured around the
process, and the CPU time (user + system) it used, which depends less on what else the machine runs, and its peak
resident memory (``ru_maxrss`` of that process alone, from ``wait4``).
Printed: both medians, the difference (what the CLI adds to importing torch), the ratio and the peak RSS.
The goal of issue 43 is a difference of at most 1.0 s; this script reports it and exits 0 either way
(non-zero only when a command fails). On a shared machine the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT = "A moving film."


def sentiment_command(checkpoint: Path, text: str) -> list[str]:
    """The ``sentiment predict`` command line: the installed console script when it sits beside this
    interpreter (what a user runs), else ``python -c`` calling the same entry point (``sentiment_cli.cli:main``)."""
    script = Path(sys.executable).with_name("sentiment")
    if not script.exists():
        found = shutil.which("sentiment")
        script = Path(found) if found else None
    head = [sys.executable, str(script)] if script else [
        sys.executable, "-c", "import sys; from sentiment_cli.cli import main; sys.argv[0] = 'sentiment'; main()"]
    return [*head, "predict", "--checkpoint", str(checkpoint), text]


def timed(cmd: list[str]) -> tuple[float, float, float]:
    """``(wall, cpu, rss)``: seconds of wall time to run ``cmd`` to completion (stdout discarded), the CPU
    seconds (user + system) it used, all its threads together, and its peak resident memory in MiB (its own
    ``rusage``, as ``wait4`` reports it: ``ru_maxrss`` is KiB on Linux).

    Raises:
        SystemExit: the command failed; its stderr's last line is shown.
    """
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            last = (err.read().strip().splitlines() or ["(no output)"])[-1]
            sys.exit(f"bench.coldstart: {' '.join(cmd[1:3])}... exited {proc.returncode}: {last}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure(checkpoint: Path, text: str, repeats: int) -> tuple[dict, dict, dict]:
    """``(wall, cpu, rss)``, each ``{"torch": [...], "predict": [...]}`` (seconds, seconds, MiB): ``repeats``
    paired runs, the order alternating, after one unrecorded warm-up run of each (the page cache)."""
    commands = {"torch": [sys.executable, "-c", "import torch"], "predict": sentiment_command(checkpoint, text)}
    for cmd in commands.values():
        timed(cmd)
    wall: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    rss: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(repeats):
        for name in (("torch", "predict") if i % 2 == 0 else ("predict", "torch")):
            w, c, r = timed(commands[name])
            wall[name].append(w)
            cpu[name].append(c)
            rss[name].append(r)
    return wall, cpu, rss


def main(argv: list[str] | None = None) -> None:
    """Parse the options, measure, print the medians, the difference and the ratio (and write ``--json``)."""
    ap = argparse.ArgumentParser(prog="python -m bench.coldstart", description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=ROOT / "checkpoints" / "default")
    ap.add_argument("--repeats", type=int, default=7, help="paired runs (medians reported)")
    ap.add_argument("--text", default=TEXT, help="the review predicted")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        sys.exit("bench.coldstart: --repeats must be at least 1")
    load_before = os.getloadavg()
    times, cpu, rss = measure(args.checkpoint, args.text, args.repeats)
    torch_s, predict_s = statistics.median(times["torch"]), statistics.median(times["predict"])
    results = {"checkpoint": str(args.checkpoint), "repeats": args.repeats, "times_s": times, "cpu_s": cpu,
               "import_torch_s": torch_s, "predict_s": predict_s, "difference_s": predict_s - torch_s,
               "ratio": predict_s / torch_s,
               "cpu_difference_s": statistics.median(cpu["predict"]) - statistics.median(cpu["torch"]),
               "peak_rss_mib": rss, "predict_peak_rss_mib": statistics.median(rss["predict"]),
               "cpus": os.cpu_count(),
               "load_average": [round(x, 2) for x in (*load_before, *os.getloadavg())]}
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


def report(results: dict) -> str:
    """The figures as a few lines: each command's median (and range), the difference, the ratio, the load."""
    def row(label: str, name: str) -> str:
        wall, cpu = results["times_s"][name], results["cpu_s"][name]
        return (f"{label:<28} median {statistics.median(wall):.2f} s "
                f"(min {min(wall):.2f}, max {max(wall):.2f}); CPU {statistics.median(cpu):.2f} s")
    la = results["load_average"]
    return "\n".join([
        row('python -c "import torch"', "torch"),
        row("sentiment predict", "predict"),
        f"difference {results['difference_s']:+.2f} s, ratio {results['ratio']:.2f}x "
        f"(median of {results['repeats']} paired runs; goal: at most +1.0 s); "
        f"CPU time difference {results['cpu_difference_s']:+.2f} s",
        f"peak RSS: sentiment predict {results['predict_peak_rss_mib']:.0f} MiB, import torch "
        f"{statistics.median(results['peak_rss_mib']['torch']):.0f} MiB (medians)",
        f"{results['checkpoint']}; {results['cpus']} CPUs, "
        f"load average {la[0]:.1f} before and {la[3]:.1f} after (1 min)",
    ])


if __name__ == "__main__":
    main()

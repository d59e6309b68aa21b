"""Cumulative ablation: from ``configs/seed.toml``, add one lever at a time; report validation accuracy.

    python -m bench.ablation [--data PATH] [--epochs 6] [--jobs 2] [--output DIR]

Each step applies its overrides on top of all previous steps and trains on
the full training split (validation held out as usual); only validation
accuracy is reported: the test split is never used to choose anything.
``--jobs 2`` runs two steps at a time with one thread each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FULL = ROOT.parent / "shared" / "data" / "imdb"

# (label, {section: {key: value}}): each step adds to everything above it.
STEPS = [
    ("seed config", {}),
    ("+ punctuation-aware tokens, min_frequency 2", {"data": {"pre_tokenizer": "punctuation", "min_frequency": 2}}),
    ("+ max_length 400, head+tail truncation", {"data": {"max_length": 400, "truncation": "head_tail"}}),
    ("+ dropout 0.1 (attention too), head dropout 0.2, label smoothing 0.1, weight decay 0.05",
     {"model": {"dropout": 0.1, "attention_dropout": 0.1, "activation_dropout": 0.1, "head_dropout": 0.2},
      "training": {"label_smoothing": 0.1, "weight_decay": 0.05}}),
    ("+ batch 64, lr 2e-3, 5% warmup, cosine decay, grad clip 1.0",
     {"training": {"batch_size": 64, "lr": 2e-3, "warmup_fraction": 0.05, "schedule": "cosine", "grad_clip": 1.0}}),
    ("+ d_model 64, 4 heads, d_ff 256", {"model": {"d_model": 64, "n_heads": 4, "d_ff": 256}}),
    ("+ no attention dropout (keeps CPU's fused attention kernel)", {"model": {"attention_dropout": 0.0}}),
    ("+ bf16 autocast", {"training": {"autocast_bf16": True}}),
]


def cumulative(epochs: int) -> list[tuple[str, dict]]:
    """Each step's full override set (all steps up to and including it)."""
    out, acc = [], {"training": {"epochs": epochs}}
    for label, step in STEPS:
        acc = {s: {**acc.get(s, {}), **step.get(s, {})} for s in {*acc, *step}}
        out.append((label, json.loads(json.dumps(acc))))
    return out


def run_step(overrides: dict, data: str, output: Path, threads: int) -> dict:
    """Train one step in a subprocess; returns its ``metrics.json``."""
    code = (
        "import json, sys, torch\n"
        f"torch.set_num_threads({threads})\n"
        "from sentiment_cli.config import load_config\n"
        "from sentiment_cli.train import train\n"
        f"cfg = load_config({str(ROOT / 'configs' / 'seed.toml')!r}).override('data', source={data!r})\n"
        f"for section, values in {overrides!r}.items():\n"
        "    cfg = cfg.override(section, **values)\n"
        f"train(cfg, {str(output)!r})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                   env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    return json.loads((output / "metrics.json").read_text())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.ablation", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(FULL))
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=1, help="steps run at once (threads split between them)")
    ap.add_argument("--steps", type=int, nargs="*", help="only these step numbers (0-based)")
    ap.add_argument("--output", default=None)
    args = ap.parse_args(argv)
    out = Path(args.output or tempfile.mkdtemp(prefix="sentiment-ablation-"))
    steps = list(enumerate(cumulative(args.epochs)))
    if args.steps is not None:
        steps = [s for s in steps if s[0] in args.steps]
    threads = max(1, (os.cpu_count() or 2) // args.jobs)

    def one(item):
        i, (label, overrides) = item
        m = run_step(overrides, args.data, out / f"step{i}", threads)
        row = {"step": i, "lever": label, "validation_accuracy": m["best_validation_accuracy"],
               "best_epoch": m["best_epoch"], "epochs": len(m["history"]),
               "median_epoch_seconds": sorted(r["train_seconds"] for r in m["history"])[len(m["history"]) // 2],
               "threads": threads}
        print(json.dumps(row), flush=True)
        return row

    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(one, steps))
    (out / "ablation.json").write_text(json.dumps(rows, indent=2))
    print(f"\n| step | lever | validation accuracy | Δ | median epoch (s, {threads} thread(s)) |")
    print("|---|---|---|---|---|")
    prev = None
    for r in rows:
        delta = f"{(r['validation_accuracy'] - prev) * 100:+.2f} pt" if prev is not None else "–"
        print(f"| {r['step']} | {r['lever']} | {r['validation_accuracy']:.2%} | {delta} | {r['median_epoch_seconds']:.0f} |")
        prev = r["validation_accuracy"]
    print(f"\nresults: {out / 'ablation.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()

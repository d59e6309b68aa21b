"""Ablations on the validation split: cumulative from ``configs/seed.toml``, or leave-one-out from the default.

    python -m bench.ablation [--data PATH] [--epochs 6] [--jobs 2] [--output DIR]
    python -m bench.ablation --leave-one-out [--init DIR] [--jobs 2]

Cumulative (the default mode): each step applies its overrides on top of
all previous steps and trains on the full training split (validation held
out as usual). ``--leave-one-out`` starts from ``configs/default.toml``
with the 10% block hold-out its settings were chosen on (it trains the
final model on all of train instead) and removes one lever per row; the
word2vec folder it starts from is pretrained once, first (or ``--init``
names one made with the same hold-out and seed). Only validation accuracy
is reported: the test split is never used to choose anything. ``--jobs 2``
runs two steps at a time with one thread each.
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


# (label, {section: {key: value}}): each row removes one lever from the default (row 0).
LEAVE_ONE_OUT = [
    ("configs/default.toml, with the 10% block hold-out", {}),
    ("− adversarial training (epsilon 0)", {"training": {"adversarial_epsilon": 0.0}}),
    ("− word2vec initialisation (random embeddings)", {"training": {"init_from": ""}}),
    ("− word dropout", {"training": {"token_dropout": 0.0}}),
    ("− long input (the first 200 tokens, as the seed config)", {"data": {"max_length": 200, "truncation": "head"}}),
    ("− regularisation (no dropout, label smoothing 0, weight decay 0.01)",
     {"model": {"dropout": 0.0, "activation_dropout": 0.0, "head_dropout": 0.0},
      "training": {"label_smoothing": 0.0, "weight_decay": 0.01}}),
    ("− schedule (constant lr 1e-3, no warmup, no gradient clipping)",
     {"training": {"schedule": "constant", "lr": 1e-3, "warmup_fraction": 0.0, "grad_clip": 0.0}}),
    ("− word bigrams (bigram_buckets 0: the token embedding alone)", {"model": {"bigram_buckets": 0}}),
]
HOLD_OUT = {"data": {"validation_fraction": 0.1, "validation_split": "blocks"}, "training": {"patience": 3}}


def _merge(*parts: dict) -> dict:
    out: dict = {}
    for part in parts:
        for section, values in part.items():
            out[section] = {**out.get(section, {}), **values}
    return out


def leave_one_out(init: str) -> list[tuple[str, dict]]:
    """Each row's full override set on top of ``configs/default.toml``: the hold-out, ``init``, its lever."""
    return [(label, _merge(HOLD_OUT, {"training": {"init_from": init}}, step)) for label, step in LEAVE_ONE_OUT]


def cumulative(epochs: int) -> list[tuple[str, dict]]:
    """Each step's full override set (all steps up to and including it)."""
    out, acc = [], {"training": {"epochs": epochs}}
    for label, step in STEPS:
        acc = _merge(acc, step)
        out.append((label, json.loads(json.dumps(acc))))
    return out


def run_step(overrides: dict, data: str, output: Path, threads: int, base: str = "seed",
             job: str = "train") -> dict:
    """Run ``job`` (``train``, or ``pretrain`` for a word2vec folder) for ``configs/<base>.toml`` with
    ``overrides`` in a subprocess; returns its ``metrics.json``."""
    code = (
        "import json, sys, torch\n"
        f"torch.set_num_threads({threads})\n"
        "from sentiment_cli.config import load_config\n"
        f"from sentiment_cli.{job} import {job}\n"
        f"cfg = load_config({str(ROOT / 'configs' / f'{base}.toml')!r}).override('data', source={data!r})\n"
        f"for section, values in {overrides!r}.items():\n"
        "    cfg = cfg.override(section, **values)\n"
        f"{job}(cfg, {str(output)!r})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                   env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    return json.loads((output / "metrics.json").read_text())


def table(rows: list[dict], against_row_0: bool = False) -> list[str]:
    """The result rows as Markdown table lines. Δ is to the step before (cumulative), or to step 0, the
    whole default (leave-one-out; "–" when step 0 was not run)."""
    threads = rows[0]["threads"] if rows else 1
    lines = [f"| step | lever | validation accuracy | Δ | median epoch (s, {threads} thread(s)) |", "|---|---|---|---|---|"]
    ref = None
    row_0 = next((x["validation_accuracy"] for x in rows if x["step"] == 0), None)
    for r in rows:
        if against_row_0:
            ref = row_0 if r["step"] else None
        delta = f"{(r['validation_accuracy'] - ref) * 100:+.2f} pt" if ref is not None else "–"
        lines.append(f"| {r['step']} | {r['lever']} | {r['validation_accuracy']:.2%} | {delta} "
                     f"| {r['median_epoch_seconds']:.0f} |")
        if not against_row_0:
            ref = r["validation_accuracy"]
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.ablation", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(FULL))
    ap.add_argument("--epochs", type=int, default=None,
                    help="epochs per step (default: 6 cumulative; the default config's own with --leave-one-out)")
    ap.add_argument("--leave-one-out", action="store_true",
                    help="remove one lever at a time from configs/default.toml instead")
    ap.add_argument("--init", default=None,
                    help="--leave-one-out: a `sentiment pretrain` folder made with the 10%% block hold-out "
                         "(default: pretrain one first)")
    ap.add_argument("--jobs", type=int, default=1, help="steps run at once (threads split between them)")
    ap.add_argument("--steps", type=int, nargs="*", help="only these step numbers (0-based)")
    ap.add_argument("--output", default=None)
    args = ap.parse_args(argv)
    out = Path(args.output or tempfile.mkdtemp(prefix="sentiment-ablation-"))
    threads = max(1, (os.cpu_count() or 2) // args.jobs)
    base = "default" if args.leave_one_out else "seed"
    if args.leave_one_out:
        init = args.init
        if init is None:   # validation must stay unseen: pretrain with the same hold-out
            init = str(out / "pretrained")
            print(f"pretraining word2vec with the hold-out -> {init}", file=sys.stderr, flush=True)
            run_step(HOLD_OUT, args.data, Path(init), os.cpu_count() or 2, base="default", job="pretrain")
        steps = list(enumerate(leave_one_out(str(Path(init).resolve()))))
        if args.epochs:
            steps = [(i, (label, _merge(o, {"training": {"epochs": args.epochs}}))) for i, (label, o) in steps]
    else:
        steps = list(enumerate(cumulative(args.epochs or 6)))
    if args.steps is not None:
        steps = [s for s in steps if s[0] in args.steps]

    def one(item):
        i, (label, overrides) = item
        m = run_step(overrides, args.data, out / f"step{i}", threads, base=base)
        row = {"step": i, "lever": label, "validation_accuracy": m["best_validation_accuracy"],
               "best_epoch": m["best_epoch"], "epochs": len(m["history"]),
               "median_epoch_seconds": sorted(r["train_seconds"] for r in m["history"])[len(m["history"]) // 2],
               "threads": threads}
        print(json.dumps(row), flush=True)
        return row

    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(one, steps))
    (out / "ablation.json").write_text(json.dumps(rows, indent=2))
    print("\n" + "\n".join(table(rows, args.leave_one_out)))
    print(f"\nresults: {out / 'ablation.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""SST-5 settings, chosen on dev: each row trains ``configs/sst5.toml`` with its overrides, once per seed.

    python -m bench.sst5 [--rows 0 3] [--seeds 1234 4321] [--init DIR] [--output DIR]
    python -m bench.sst5 --rows 7 --seeds 1234 --init DIR --test   # a final config: test, scored once

Only dev accuracy (SST-5's ``dev.csv``, the run's validation split) is
reported: the test split is never used to choose anything. Rows marked with
``{init}`` start from a ``sentiment pretrain`` folder (word2vec on IMDB's
unlabelled reviews, tokenizer from IMDB text), given with ``--init``; make it
with ``sentiment pretrain --config configs/sst5.toml --data ../shared/data/imdb
--splits unsupervised``. Each run is its own subprocess, one after another;
results are appended to ``OUTPUT/dev.jsonl`` as they come, so an interrupted
sweep keeps what it finished, and the table is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.ablation import _merge   # {section: {key: value}} overrides, later parts win

ROOT = Path(__file__).resolve().parent.parent
SST5 = ROOT.parent / "shared" / "data" / "sst5"
CONFIG = ROOT / "configs" / "sst5.toml"

# The sweep's starting point: every lever a row changes, at its first value, so that each row means the
# same settings whatever configs/sst5.toml (the final choice) says.
START = {"model": {"d_model": 64, "n_heads": 4, "d_ff": 256, "bigram_buckets": 0},
         "training": {"lr": 1e-3, "epochs": 10, "adversarial_epsilon": 0.0, "init_from": ""}}


# The tokenizer settings the IMDB word2vec folder was made with (its tokenizer replaces SST-5's own).
W2V_TOKENS = {"vocab_size": 50000, "min_frequency": 2, "pre_tokenizer": "punctuation"}

# (label, {section: {key: value}}) on top of configs/sst5.toml + START; "{init}" is replaced by --init.
ROWS = [(label, _merge(START, delta)) for label, delta in [
    ("start: d_model 64, lr 1e-3, 10 epochs", {}),
    ("lr 2e-3", {"training": {"lr": 2e-3}}),
    ("lr 2e-3, word bigrams (131,072 buckets)", {"model": {"bigram_buckets": 131072}, "training": {"lr": 2e-3}}),
    ("lr 2e-3, adversarial training (epsilon 2)", {"training": {"lr": 2e-3, "adversarial_epsilon": 2.0}}),
    ("lr 1e-3, IMDB word2vec", {"data": W2V_TOKENS, "training": {"init_from": "{init}"}}),
    ("lr 2e-3, IMDB word2vec", {"data": W2V_TOKENS, "training": {"lr": 2e-3, "init_from": "{init}"}}),
    ("lr 2e-3, word2vec on SST-5's own training sentences (no other data; --init from `sentiment pretrain "
     "--config sst5 --data SST5 --splits train --epochs 20`)", {"training": {"lr": 2e-3, "init_from": "{init}"}}),
    ("lr 2e-3, d_model 128, d_ff 512", {"model": {"d_model": 128, "d_ff": 512}, "training": {"lr": 2e-3}}),
    ("lr 2e-3, 2 layers", {"model": {"n_layers": 2}, "training": {"lr": 2e-3}}),
    ("lr 2e-3, head dropout 0.5, word dropout 0.3 (Kim 2014's dropout)",
     {"model": {"head_dropout": 0.5}, "training": {"lr": 2e-3, "token_dropout": 0.3}}),
    ("lr 2e-3, no label smoothing", {"training": {"lr": 2e-3, "label_smoothing": 0.0}}),
    ("lr 2e-3, batch 16, 20 epochs", {"training": {"lr": 2e-3, "batch_size": 16, "epochs": 20}}),
]]


def _config(overrides: dict, init: str, seed: int, data: str):
    from sentiment_cli.config import load_config

    cfg = load_config(CONFIG).override("data", source=data).override("training", seed=seed)
    for section, values in overrides.items():
        cfg = cfg.override(section, **{k: init if v == "{init}" else v for k, v in values.items()})
    return cfg


def job(args) -> dict:
    """Train one row with one seed; its dev figures."""
    from sentiment_cli.training.run import train

    label, overrides = ROWS[args.row]
    result = train(_config(overrides, args.init, args.seed, args.data), args.output)
    m = result.metrics
    cal = m.get("calibration") or {}
    test = {}
    if args.test:   # a final config only: scored once, never used to choose
        from sentiment_cli.evaluation.evaluate import evaluate_checkpoint

        r = evaluate_checkpoint(args.output, "test", data=args.data, device="cpu", record=False)
        test = {"test_accuracy": r["accuracy"], "test_f1_macro": r["f1"]["macro"], "test_ece": r["ece"],
                "test_ece_uncalibrated": r["ece_uncalibrated"]}
    return {**test, "row": args.row, "label": label, "seed": args.seed, "dev_accuracy": m["best_validation_accuracy"],
            "best_epoch": m["best_epoch"], "epochs_run": len(m["history"]),
            "dev_accuracy_by_epoch": [r["validation_accuracy"] for r in m["history"]],
            "temperature": cal.get("temperature"), "dev_ece": cal.get("ece"),
            "dev_ece_uncalibrated": cal.get("ece_uncalibrated"), "seconds": m["wall_time_seconds"]}


def table(results: list[dict]) -> list[str]:
    """Markdown rows: dev accuracy per seed and their mean, per row."""
    seeds = sorted({r["seed"] for r in results})
    lines = ["| # | setting | " + " | ".join(f"dev, seed {s}" for s in seeds) + " | mean | best epochs |",
             "|---|---|" + "---:|" * len(seeds) + "---:|---|"]
    for row in sorted({r["row"] for r in results}):
        rs = {r["seed"]: r for r in results if r["row"] == row}
        accs = [rs[s]["dev_accuracy"] for s in seeds if s in rs]
        cells = [f"{rs[s]['dev_accuracy']:.2%}" if s in rs else "–" for s in seeds]
        epochs = ", ".join(f"{rs[s]['best_epoch']}/{rs[s]['epochs_run']}" for s in seeds if s in rs)
        label = next(iter(rs.values()))["label"]
        lines.append(f"| {row} | {label} | " + " | ".join(cells) + f" | {statistics.mean(accs):.2%} | {epochs} |")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.sst5", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", nargs="+", type=int, default=None, help="row numbers (default: all)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1234, 4321])
    ap.add_argument("--init", default="", help="`sentiment pretrain` folder for the rows that start from one")
    ap.add_argument("--data", default=str(SST5), help=f"SST-5 folder (default {SST5})")
    ap.add_argument("--output", default=None, help="folder for the runs and dev.jsonl (default: temp)")
    ap.add_argument("--test", action="store_true",
                    help="also score test, once per run: only for a final config, never to choose one")
    ap.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--row", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.job:
        print(json.dumps(job(args)))
        return
    out = Path(args.output or tempfile.mkdtemp(prefix="sentiment-sst5-"))
    out.mkdir(parents=True, exist_ok=True)
    log = out / "dev.jsonl"
    rows = args.rows if args.rows is not None else list(range(len(ROWS)))
    if any("{init}" in json.dumps(ROWS[r][1]) for r in rows) and not args.init:
        raise SystemExit("error: some rows start from a pretrained folder; give it with --init DIR")
    # sentiment_cli from PYTHONPATH when set (e.g. another checkout), else this one
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}
    results = []
    for row in rows:
        for seed in args.seeds:
            print(f"· row {row} ({ROWS[row][0]}), seed {seed}", file=sys.stderr, flush=True)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--job", "--row", str(row), "--seed", str(seed),
                   "--init", args.init, "--data", args.data, "--output", str(out / f"row{row}-seed{seed}"),
                   *(["--test"] if args.test else [])]
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, env=env, cwd=out)
            if proc.returncode != 0:
                raise SystemExit(f"row {row}, seed {seed} failed (exit {proc.returncode})")
            r = json.loads(proc.stdout.decode().strip().splitlines()[-1])
            results.append(r)
            with open(log, "a") as fh:
                fh.write(json.dumps(r) + "\n")
            test = (f", test {r['test_accuracy']:.2%} (macro F1 {r['test_f1_macro']:.2%}, ECE {r['test_ece']:.2%} "
                    f"with T, {r['test_ece_uncalibrated']:.2%} without)") if args.test else ""
            print(f"  dev {r['dev_accuracy']:.2%} (epoch {r['best_epoch']} of {r['epochs_run']}), "
                  f"T {r['temperature']}, {r['seconds']:.0f} s{test}", file=sys.stderr, flush=True)
    print("\n".join(table(results)))
    print(f"results: {log}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""One benchmark run: the project's configs, the notebook's loop and the peers (TF-IDF + LR,
NB-SVM, fastText), side by side.

    python -m bench [--quick] [--data PATH] [--configs configs/seed.toml configs/default.toml]
    python -m bench --suites sst5 [--sst5-data PATH]   # only SST-5: the sst5 preset and TF-IDF + LR

SST-5 (five classes) runs first: ``configs/sst5.toml`` trained with dev as
validation and scored once on test, against TF-IDF + logistic regression
with ``C`` chosen on dev, in a table of its own.

Every system runs in its own subprocess (``python -m bench.run --job ...``),
one after another, on the same split, so that peak memory (max RSS of that
process) is its own and timings are not disturbed by each other. Speeds
are reported as ratios taken in this run. ``--quick`` uses the committed
slice and one epoch, for smoke tests.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "tests" / "data" / "imdb_small"
FULL = ROOT.parent / "shared" / "data" / "imdb"


# ----------------------------------------------------------------------------- FLOP accounting

def encoder_flops(lengths, d_model: int, d_ff: int, n_layers: int, train: bool) -> float:
    """Matmul FLOPs of the encoder over reviews of the given token counts.

    Per layer and review of ``n`` tokens (forward): projections Q, K, V and out
    ``8 n d^2``, attention scores and weighted sum ``4 n^2 d``, feed-forward
    ``4 n d d_ff``. Training counts 3x the forward pass (backward = 2x forward,
    Kaplan et al. 2020). Embedding look-ups, norms and softmax are not counted.
    """
    d = d_model
    fwd = sum(n_layers * (8 * n * d * d + 4 * n * n * d + 4 * n * d * d_ff) for n in lengths)
    return fwd * (3 if train else 1)


def matmul_peak(dtype_name: str, size: int = 2048, repeats: int = 5) -> float:
    """Median GFLOP/s of ``torch.matmul`` on ``size`` x ``size`` matrices of ``dtype_name``."""
    import torch

    dtype = getattr(torch, dtype_name)
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    torch.matmul(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        times.append(time.perf_counter() - start)
    return 2 * size ** 3 / statistics.median(times) / 1e9


# ----------------------------------------------------------------------------- jobs (one per subprocess)

def job_peak(args) -> dict:
    return {"fp32_gflops": matmul_peak("float32"), "bf16_gflops": matmul_peak("bfloat16")}


EVAL_REPEATS = 3   # every system's test-set pass is timed this many times; tables show the median


def _splits(data: str, cfg):
    from sentiment_cli.data.splits import load_split, load_train_validation

    train, val = load_train_validation(data, cfg.data.validation_fraction, cfg.training.seed,
                                       cfg.data.validation_split)
    test = load_split(data, "test", cfg.data.validation_fraction, cfg.training.seed)
    return train, val, test


def job_notebook(args) -> dict:
    import torch

    from bench.notebook import NotebookClassifier, evaluate, pad_fixed, train_epochs
    from sentiment_cli.config import load_config
    from sentiment_cli.data.tokenizer import build_tokenizer

    cfg = load_config(ROOT / "configs" / "seed.toml")
    train, _, test = _splits(args.data, cfg)
    torch.manual_seed(cfg.training.seed)
    tok = build_tokenizer(train.texts, cfg.data)
    L = cfg.data.max_length
    x_train = pad_fixed([e.ids for e in tok.encode_batch(train.texts)], L)
    x_test = pad_fixed([e.ids for e in tok.encode_batch(test.texts)], L)
    y_train, y_test = torch.tensor(train.labels), torch.tensor(test.labels)
    m = cfg.model
    model = NotebookClassifier(tok.get_vocab_size(), m.d_model, m.n_heads, m.d_ff, m.n_layers)
    speeds = train_epochs(model, x_train, y_train, epochs=args.epochs, batch_size=cfg.training.batch_size,
                          lr=cfg.training.lr, seed=cfg.training.seed)
    runs = [evaluate(model, x_test, y_test, batch_size=cfg.training.batch_size) for _ in range(EVAL_REPEATS)]
    acc, eval_speed = runs[0][0], statistics.median(speed for _, speed in runs)
    ex_per_s = statistics.median(speeds)
    flops_per_example = encoder_flops([L], m.d_model, m.d_ff, m.n_layers, train=True)
    return {"epochs": args.epochs, "train_examples_per_second": ex_per_s,
            "train_seconds": len(x_train) / ex_per_s * cfg.training.epochs,   # projected to the config's epochs
            "test_accuracy_after_timed_epochs": acc, "eval_reviews_per_second": eval_speed,
            "train_gflops": flops_per_example * ex_per_s / 1e9, "bf16": False}


def job_ours(args) -> dict:
    from sentiment_cli.checkpoint import TOKENIZER_FILE
    from sentiment_cli.config import load_config
    from sentiment_cli.evaluation.evaluate import evaluate_checkpoint
    from sentiment_cli.data.tokenizer import encode_texts, load_tokenizer
    from sentiment_cli.training.run import train

    cfg = load_config(args.config).override("data", source=args.data)
    if args.epochs:   # --quick: one epoch; the committed slice has no unsupervised split (nor distillation)
        cfg = cfg.override("training", epochs=args.epochs, distill_reviews=0).override("pretrain", epochs=1,
                                                                                        splits="train")
    pretrain_seconds = 0.0
    if cfg.training.init_from:   # the config starts from a pretrained encoder: pretrain it here, on the clock
        from sentiment_cli.training.pretrain import pretrain

        encoder = f"{args.output}-pretrained"
        pretrain_seconds = pretrain(cfg, encoder).metrics["wall_time_seconds"]
        cfg = cfg.override("training", init_from=encoder)
    result = train(cfg, args.output)
    # `sentiment eval --split test`, without keeping the result in the folder; the same logits each
    # time, and the speed is the median pass
    runs = [evaluate_checkpoint(args.output, "test", data=args.data, device="cpu", record=False)
            for _ in range(EVAL_REPEATS)]
    metrics = {**runs[0], "examples_per_second": statistics.median(r["examples_per_second"] for r in runs)}
    hist = result.metrics["history"]
    ex_per_s = statistics.median(r["train_examples_per_second"] for r in hist)
    # FLOPs of one epoch over the real (unpadded) training lengths
    from sentiment_cli.data.splits import load_train_validation
    tr, _ = load_train_validation(args.data, cfg.data.validation_fraction, cfg.training.seed,
                                  cfg.data.validation_split)
    tokenizer = load_tokenizer(Path(args.output) / TOKENIZER_FILE)
    lengths = [len(x) for x in encode_texts(tokenizer, tr.texts, cfg.data)]
    m = cfg.model
    flops_per_example = encoder_flops(lengths, m.d_model, m.d_ff, m.n_layers, train=True) / len(lengths)
    if cfg.training.adversarial_epsilon > 0:   # a second forward and backward pass per step
        flops_per_example *= 2
    return {"config": str(args.config), "epochs_run": len(hist), "best_epoch": result.metrics["best_epoch"],
            "validation_accuracy": result.metrics["best_validation_accuracy"],
            "test_accuracy": metrics["accuracy"], **_parts_accuracy(args.output, args.data, cfg),
            "train_seconds": pretrain_seconds + result.metrics["wall_time_seconds"],
            "pretrain_seconds": pretrain_seconds, "finetune_seconds": result.metrics["wall_time_seconds"],
            "train_examples_per_second": ex_per_s, "eval_reviews_per_second": metrics["examples_per_second"],
            "train_gflops": flops_per_example * ex_per_s / 1e9, "bf16": cfg.training.autocast_bf16,
            "mean_train_tokens": sum(lengths) / len(lengths), "checkpoint": str(args.output)}


def _parts_accuracy(folder, data: str, cfg) -> dict:
    """With an n-gram score: the test accuracy of each part of the model alone, the encoder's logits
    without the score and the score without the encoder (what each adds; the model is their sum)."""
    if not cfg.model.ngram_buckets:
        return {}
    from bench.parts import parts

    p = parts(str(folder), data, "test")
    return {"test_accuracy_encoder_alone": float((p["encoder"].argmax(1) == p["labels"]).mean()),
            "test_accuracy_ngram_score_alone": float((p["score"].argmax(1) == p["labels"]).mean())}


def job_peer(args) -> dict:
    """One peer of bench/peers.py (``--job tfidf|nbsvm|fasttext``), fitted on the same training
    reviews as configs/default.toml and scored on the whole test split."""
    import numpy as np

    from bench.peers import PEERS
    from sentiment_cli.config import load_config

    cfg = load_config(ROOT / "configs" / "default.toml")
    train, val, test = _splits(args.data, cfg)
    result = PEERS[args.job](train.texts, np.array(train.labels), test.texts, np.array(test.labels),
                             *((val.texts, np.array(val.labels)) if len(val) else ()), repeats=EVAL_REPEATS)
    return {**result, "train_examples": len(train)}


def job_coldstart(args) -> dict:
    """Median wall time of ``python -c "import torch"`` and of ``sentiment predict`` from a cold process."""
    base = [sys.executable, "-c", "import torch"]
    pred = [sys.executable, "-m", "sentiment_cli", "predict", "A moving, beautifully acted film.",
            "--checkpoint", args.output]
    t_base, t_pred = [], []
    for _ in range(args.repeats):
        for cmd, acc in ((base, t_base), (pred, t_pred)):
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
            acc.append(time.perf_counter() - start)
    return {"import_torch_seconds": statistics.median(t_base), "predict_seconds": statistics.median(t_pred),
            "repeats": args.repeats}


PEER_JOBS = ("tfidf", "nbsvm", "fasttext")   # bench/peers.py's PEERS, in the order they run and print
JOBS = {"peak": job_peak, "notebook": job_notebook, "ours": job_ours, **dict.fromkeys(PEER_JOBS, job_peer),
        "coldstart": job_coldstart}


# ----------------------------------------------------------------------------- SST-5 (five classes)

SST5 = ROOT.parent / "shared" / "data" / "sst5"
SST5_SMALL = ROOT / "tests" / "data" / "sst5_small"
SST5_CONFIG = ROOT / "configs" / "sst5.toml"


def _sst5_splits(data: str):
    """SST-5's train, dev (its validation split) and test, labelled as the data names them."""
    from sentiment_cli.data.splits import load_split, load_train_validation

    train, dev = load_train_validation(data)
    test = load_split(data, "test", label_names=train.label_names)
    return train, dev, test


def job_sst5(args) -> dict:
    """The sst5 preset on SST-5: trained with dev as validation, scored once on test."""
    from sentiment_cli.config import load_config
    from sentiment_cli.evaluation.evaluate import evaluate_checkpoint
    from sentiment_cli.training.run import train

    cfg = load_config(SST5_CONFIG).override("data", source=args.data)
    if args.epochs:   # --quick
        cfg = cfg.override("training", epochs=args.epochs).override("pretrain", epochs=1, splits="train")
    pretrain_seconds = 0.0
    if cfg.training.init_from:   # a preset that starts from pretrained vectors pretrains them here, on the clock
        from sentiment_cli.training.pretrain import pretrain

        encoder = f"{args.output}-pretrained"
        pretrain_seconds = pretrain(cfg.override("data", source=args.pretrain_data),
                                    encoder).metrics["wall_time_seconds"]
        cfg = cfg.override("training", init_from=encoder)
    result = train(cfg, args.output)
    runs = [evaluate_checkpoint(args.output, "test", data=args.data, device="cpu", record=False)
            for _ in range(EVAL_REPEATS)]
    m, hist = runs[0], result.metrics["history"]
    return {"epochs_run": len(hist), "best_epoch": result.metrics["best_epoch"],
            "validation_accuracy": result.metrics["best_validation_accuracy"],
            "test_accuracy": m["accuracy"], "test_f1_macro": m["f1"]["macro"],
            "ece": m["ece"], "ece_uncalibrated": m["ece_uncalibrated"], "temperature": m["temperature"],
            "train_seconds": pretrain_seconds + result.metrics["wall_time_seconds"],
            "pretrain_seconds": pretrain_seconds,
            "eval_reviews_per_second": statistics.median(r["examples_per_second"] for r in runs),
            "train_examples": result.metrics["data"]["train_examples"], "checkpoint": str(args.output)}


def job_sst5_tfidf(args) -> dict:
    import numpy as np

    from bench.peers import tfidf_logreg_dev

    train, dev, test = _sst5_splits(args.data)
    return {**tfidf_logreg_dev(train.texts, np.array(train.labels), dev.texts, np.array(dev.labels),
                               test.texts, np.array(test.labels)), "train_examples": len(train)}


JOBS.update(sst5=job_sst5, sst5_tfidf=job_sst5_tfidf)


def sst5_rows(sst5: dict) -> list[tuple[str, ...]]:
    """The SST-5 table's rows: system, dev accuracy, test accuracy, test macro F1, ECE after / before the
    temperature, training time, and accuracy against the peer."""
    ours, peer = sst5["ours"], sst5["tfidf"]
    return [
        ("ours: configs/sst5.toml" + (f" ({ours['epochs_run']} ep.)"), f"{ours['validation_accuracy']:.2%}",
         f"{ours['test_accuracy']:.2%}", f"{ours['test_f1_macro']:.2%}",
         f"{ours['ece']:.2%} / {ours['ece_uncalibrated']:.2%} (T {ours['temperature']:.2f})",
         _fmt_s(ours["train_seconds"]), f"{(ours['test_accuracy'] - peer['test_accuracy']) * 100:+.2f} pt"),
        (f"TF-IDF 1-2-grams + LR (C {peer['C']:g}, chosen on dev)", f"{peer['validation_accuracy']:.2%}",
         f"{peer['test_accuracy']:.2%}", f"{peer['test_f1_macro']:.2%}", "–", _fmt_s(peer["train_seconds"]), "–"),
    ]


SST5_COLUMNS = ("system", "dev acc", "test acc", "test macro F1", "ECE after / before T", "train time", "acc − peer")


def render_sst5(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=170)
    table = Table(title=f"SST-5 (five classes) · {results['sst5']['data']}", title_justify="left")
    for col in SST5_COLUMNS:
        table.add_column(col, justify="left" if col == "system" else "right")
    for row in sst5_rows(results["sst5"]):
        table.add_row(*row)
    console.print(table)
    console.print("dev: SST-5's dev.csv (settings chosen on it); test scored once; ECE: 15 bins, on test",
                  highlight=False)


def sst5_markdown(results: dict) -> str:
    lines = ["", f"SST-5 (five classes, `{results['sst5']['data']}`), same run:", "",
             "| " + " | ".join(SST5_COLUMNS) + " |", "|---|" + "---:|" * (len(SST5_COLUMNS) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in sst5_rows(results["sst5"])]
    lines.append("")
    lines.append("Dev: SST-5's `dev.csv` (every setting chosen on it); test scored once; ECE with 15 bins, on test.")
    return "\n".join(lines) + "\n"


def run_sst5(data: str, out: Path, epochs: list[str], pretrain_data: str) -> dict:
    """Both SST-5 jobs, one after the other."""
    return {"data": data,
            "ours": run_job("sst5", "--data", data, "--output", str(out / "sst5"), "--pretrain-data", pretrain_data,
                            *epochs),
            "tfidf": run_job("sst5_tfidf", "--data", data)}


def run_job(name: str, *extra: str) -> dict:
    """Run one job in a fresh process; its result plus ``peak_rss_mib`` (that process's max RSS)."""
    cmd = [sys.executable, "-m", "bench.run", "--job", name, *extra]
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


# ----------------------------------------------------------------------------- report

PEER_LABELS = {"tfidf": "TF-IDF + LR", "nbsvm": "NB-SVM", "fasttext": "fastText"}
PEER_NOTES = {
    "tfidf": "TF-IDF over word 1-2-grams + logistic regression (scikit-learn)",
    "nbsvm": "NB-SVM-style log-count ratios over binarised word 1-3-grams + logistic regression "
             "(Wang & Manning 2012, the NB-LR form; scikit-learn)",
    "fasttext": "fastText, supervised, with word bigrams, 1 thread (Joulin et al. 2017; the fasttext package)",
}


def _fmt_s(s):
    return f"{s:,.0f} s" if s >= 10 else f"{s:.1f} s"


def _peers(results: dict) -> dict:
    """``{job name: result}`` of the peers; results.json files from before NB-SVM and fastText had only TF-IDF."""
    return results.get("peers") or {"tfidf": results["tfidf"]}


def _strongest(peers: dict) -> str:
    """The peer with the highest test accuracy: the one the main table compares against."""
    return max(peers, key=lambda k: peers[k]["test_accuracy"])


def _validation_test(results: dict) -> str:
    """Each system's validation and test accuracy, as one line's text (shared by the table and results.md)."""
    systems = [*results["ours"].items(), *((PEER_LABELS[k], r) for k, r in _peers(results).items())]
    pairs = [f"{key} {r['validation_accuracy']:.2%} / {r['test_accuracy']:.2%}"
             for key, r in systems if r.get("validation_accuracy") is not None]   # None: trained on all of train
    if not pairs:
        return "(none: every system trained on all of train)"
    return "(validation: the held-out part of train; a large gap means validation flatters): " + ", ".join(pairs)


def _peer_reviews(peer: dict) -> str:
    n = peer.get("train_examples")   # results.json files from before it was recorded: 90% of train
    return f"{n:,} training reviews" if n is not None else "90% of train"


def _vs(r: dict, acc, other: dict) -> list[str]:
    """Three cells comparing system ``r`` (test accuracy ``acc``) with ``other``: accuracy difference in
    points, training-time ratio (``r`` ÷ other: above 1x is slower) and eval-speed ratio (above 1x is faster)."""
    return [f"{(acc - other['test_accuracy']) * 100:+.2f} pt" if acc is not None else "–",
            f"{r['train_seconds'] / other['train_seconds']:,.1f}x",
            f"{r['eval_reviews_per_second'] / other['eval_reviews_per_second']:.2f}x"]


def _systems(results: dict) -> list[tuple[str, str, dict, float | None, bool]]:
    """Every row of the benchmark: ``(kind, name, result, test accuracy, is a training run of the encoder)``."""
    nb = results["notebook"]
    rows = [("notebook", "notebook loop ¹", nb, None, True)]
    rows += [("ours", f"{key} ({r['epochs_run']} ep.)", r, r["test_accuracy"], True)
             for key, r in results["ours"].items()]
    rows += [("peer", f"{PEER_LABELS[k]} ²", r, r["test_accuracy"], False) for k, r in _peers(results).items()]
    return rows


def main_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """The benchmark's main table as ``(header, rows)`` of text cells: every system's own figures,
    then its comparison with the strongest peer of this run (highest test accuracy)."""
    peak, peers = results["peak"], _peers(results)
    best = _strongest(peers)
    label = PEER_LABELS[best]
    header = ["system", "test acc", "train time", "train reviews/s", "GFLOP/s", "of fp32 peak", "of bf16 peak",
              "eval reviews/s", "peak mem", f"acc − {label}", f"train time ÷ {label}", f"eval speed ÷ {label}"]
    rows = []
    for kind, name, r, acc, encoder in _systems(results):
        g = r.get("train_gflops") if encoder else None
        flops = ([f"{g:,.1f}", f"{g / peak['fp32_gflops']:.0%}", f"{g / peak['bf16_gflops']:.0%}"]
                 if g is not None else ["–"] * 3)
        vs = ["–"] * 3 if r is peers[best] else _vs(r, acc, peers[best])
        rows.append([name, f"{acc:.2%}" if acc is not None else "–", _fmt_s(r["train_seconds"]),
                     f"{r['train_examples_per_second']:,.0f}" if "train_examples_per_second" in r else "–",
                     *flops, f"{r['eval_reviews_per_second']:,.0f}", f"{r['peak_rss_mib']:,.0f} MiB", *vs])
    return header, rows


def ratio_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """Each of the project's configs against the notebook loop and against each peer, same run:
    ``(header, rows)`` of text cells, one row per (config, other system). Ratios are config ÷ other:
    train time above 1x is slower, reviews/s above 1x is faster."""
    nb, peers = results["notebook"], _peers(results)
    header = ["config", "against", "acc − other", "train time ÷", "train reviews/s ÷", "eval reviews/s ÷"]
    others = [("notebook loop ¹", nb), *((PEER_LABELS[k], p) for k, p in peers.items())]
    rows = []
    for key, r in results["ours"].items():
        for name, other in others:
            acc, train_time, eval_speed = _vs(r, r["test_accuracy"] if other is not nb else None, other)
            rows.append([key, name, acc, train_time,
                         f"{r['train_examples_per_second'] / other['train_examples_per_second']:.2f}x", eval_speed])
    return header, rows


def _notes(results: dict) -> list[str]:
    """The lines under the tables (footnotes, peaks, the seed target, validation, pretraining, cold start)."""
    peak, nb, peers = results["peak"], results["notebook"], _peers(results)
    any_peer = next(iter(peers.values()))
    lines = [f"¹ the notebook's model and loop at the seed config (fixed padding to 200, no mask); "
             f"{nb['epochs']} epoch(s) timed, train time projected to 10 epochs.",
             f"² fitted on the same {_peer_reviews(any_peer)} as configs/default.toml, hyperparameters chosen on a "
             "validation hold-out of train (docs/experiments-peers.md); train reviews/s = reviews ÷ fit time. "
             + "; ".join(f"{PEER_LABELS[k]}: {PEER_NOTES[k]}" for k in peers) + ".",
             f"GFLOP/s: encoder matmul FLOPs of training ÷ time; peaks: torch.matmul 2048², median of 5, "
             f"fp32 {peak['fp32_gflops']:,.0f} GFLOP/s, bf16 {peak['bf16_gflops']:,.0f} GFLOP/s. "
             f"Eval reviews/s: median of {EVAL_REPEATS} passes over the test set. Peak mem: max RSS of the "
             "system's own process."]
    seed = results["ours"].get("seed")
    if seed:
        lines.append(f"seed config vs the notebook loop, same run: training reviews/s "
                     f"{seed['train_examples_per_second'] / nb['train_examples_per_second']:.2f}x (target 1.5x), "
                     f"eval reviews/s {seed['eval_reviews_per_second'] / nb['eval_reviews_per_second']:.2f}x "
                     f"(target 1.5x)")
    lines.append(f"validation / test accuracy {_validation_test(results)}")
    for key, r in results["ours"].items():
        if r.get("pretrain_seconds"):
            lines.append(f"{key}: training time = pretraining {_fmt_s(r['pretrain_seconds'])} + fine-tuning "
                         f"{_fmt_s(r['finetune_seconds'])}")
        if "test_accuracy_encoder_alone" in r:
            lines.append(f"{key}: its parts alone on test: the encoder {r['test_accuracy_encoder_alone']:.2%}, "
                         f"the n-gram score {r['test_accuracy_ngram_score_alone']:.2%} (the model adds their logits)")
    cs = results.get("coldstart")
    if cs:
        lines.append(f"cold start (median of {cs['repeats']}): python -c 'import torch' "
                     f"{cs['import_torch_seconds']:.2f} s, sentiment predict \"…\" {cs['predict_seconds']:.2f} s "
                     f"(+{cs['predict_seconds'] - cs['import_torch_seconds']:.2f} s; target ≤ +1.0 s)")
    return lines


def render(results: dict) -> None:
    """Print the main table, the ratio table and the notes with rich."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=180)   # a file or CI log: keep each row on one line
    for title, (header, rows) in (
            (f"IMDB benchmark · {results['date']} · {results['hardware']}", main_table(results)),
            ("each config against the notebook loop and each peer, same run (config ÷ other)", ratio_table(results))):
        table = Table(title=title, title_justify="left")
        for col in header:
            text = col in ("system", "config", "against")
            table.add_column(col, justify="left" if text else "right", no_wrap=text)
        for row in rows:
            table.add_row(*row)
        console.print(table)
    for line in _notes(results):
        console.print(line, highlight=False)


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows)]


def markdown(results: dict) -> str:
    """The results as Markdown: the main table, the ratio table and the notes (what the README shows)."""
    lines = [f"Benchmark of {results['date']}, {results['hardware']}; `python -m bench`"
             + (" --quick" if results["quick"] else "") + ".", ""]
    lines += _md_table(*main_table(results))
    lines += ["", "Each config against the notebook loop and each peer, same run (config ÷ other):", ""]
    lines += _md_table(*ratio_table(results))
    lines += ["", *(f"{line}.  " if not line.endswith(".") else f"{line}  " for line in _notes(results))]
    return "\n".join(lines).rstrip() + "\n"


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
    ap.add_argument("--pretrain-data", default=str(FULL), help=argparse.SUPPRESS)
    ap.add_argument("--job", choices=sorted(JOBS), help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--epochs", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--repeats", type=int, default=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.job:   # inside a job subprocess: print one JSON line
        args.data = args.data or str(FULL)
        print(json.dumps(JOBS[args.job](args)))
        return

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

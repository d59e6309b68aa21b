"""The jobs of ``python -m bench``: each system trained and scored in a process of its own, which prints one JSON
line (its figures), so that its peak memory and its timings are its own.

    python -m bench.jobs NAME [--data PATH] [--config FILE] [--output DIR] [--epochs N] [--repeats N]

``bench/run.py`` starts them one after another (:func:`bench.run.run_job`); the IMDB jobs (``peak``, ``notebook``,
``ours``, the peers ``tfidf``, ``nbsvm``, ``fasttext``, ``coldstart``) and SST-5's (``sst5``, ``sst5_tfidf``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.flops import encoder_flops, matmul_peak

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "tests" / "data" / "imdb_small"
FULL = ROOT.parent / "shared" / "data" / "imdb"
SST5 = ROOT.parent / "shared" / "data" / "sst5"
SST5_SMALL = ROOT / "tests" / "data" / "sst5_small"
SST5_CONFIG = ROOT / "configs" / "sst5.toml"
EVAL_REPEATS = 3   # every system's test-set pass is timed this many times; tables show the median


def job_peak(args) -> dict:
    return {"fp32_gflops": matmul_peak("float32"), "bf16_gflops": matmul_peak("bfloat16")}


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


PEER_JOBS = ("tfidf", "nbsvm", "fasttext")   # bench/peers.py's PEERS, in the order they run and print
JOBS = {"peak": job_peak, "notebook": job_notebook, "ours": job_ours, **dict.fromkeys(PEER_JOBS, job_peer),
        "coldstart": job_coldstart, "sst5": job_sst5, "sst5_tfidf": job_sst5_tfidf}


def main(argv=None) -> None:
    """Run one job (``NAME``) and print its result as one JSON line."""
    ap = argparse.ArgumentParser(prog="python -m bench.jobs", description=__doc__.split("\n\n")[0])
    ap.add_argument("job", choices=sorted(JOBS))
    ap.add_argument("--data", default=str(FULL))
    ap.add_argument("--pretrain-data", default=str(FULL))
    ap.add_argument("--config")
    ap.add_argument("--output")
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    print(json.dumps(JOBS[args.job](args)))


if __name__ == "__main__":
    main()

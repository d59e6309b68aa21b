"""The n-gram score's form on dev: what ``[model] ngram_fit = "auto"`` picks, against NB-LR at C 0.1.

    python -m bench.ngram_forms [--sets trec6 subj sst5 sst5-phrases imdb] [--data ../shared/data]

The score alone (no encoder): each set's ``train`` split is tokenized as the
default preset does (its vocabulary settings; 128 tokens for the sentence
sets, IMDB's own 512, head and tail), hashed into the default's 4,194,304
buckets, and fitted twice: in the form and C that cross-validation on the
training texts picks (:func:`~sentiment_cli.ngram.selection.select_fit`, what
``ngram_fit = "auto"`` does), and as NB-LR with C 0.1 (``ngram_fit = "nb-lr"``,
the form before forms were chosen). Both are scored on the ``dev`` split
(the source's validation split). No test split is read. IMDB has no dev
split: its row gives the pick, its cross-validated accuracies and the time only.
Times are wall seconds on this machine (2 cores, shared with other work).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from sentiment_cli.config import load_config
from sentiment_cli.data.splits import DataSpec, load_split
from sentiment_cli.data.tokenizer import build_tokenizer, encode_texts
from sentiment_cli.ngram.features import ngram_features
from sentiment_cli.ngram.forms import FIT_C, fit_columns, label_ids, predicted
from sentiment_cli.ngram.selection import select_fit

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
SETS = ("trec6", "subj", "sst5", "sst5-phrases", "imdb")   # IMDB: Hub layout, train (and test: unread)
SENTENCE_LENGTH = 128


def run_set(name: str, data: Path = DATA) -> dict[str, Any]:
    """One set's row: ``{"set", "classes", "train", "pick", "cv_accuracy", "select_s", "fit_s", "dev_auto",
    "dev_nb_lr"}`` (the dev accuracies ``None`` for a set without a dev split)."""
    config = load_config("default")
    imdb = name == "imdb"
    if not imdb:
        config = config.override("data", max_length=SENTENCE_LENGTH)
    spec = DataSpec(str(data / name), validation_fraction=0.0 if imdb else 0.1)
    train = load_split(spec, "train")
    dev = None if imdb else load_split(spec, "validation", label_names=train.label_names)
    tokenizer = build_tokenizer(train.texts, config.data, length=len(train))
    buckets, classes = config.model.ngram_buckets, len(train.label_names)
    x = ngram_features(encode_texts(tokenizer, train.texts, config.data), buckets)
    y = label_ids(train.labels, classes)
    start = time.perf_counter()
    pick = select_fit(x, y, classes)
    picked = time.perf_counter()
    w, b = fit_columns(x, y, classes, pick.form, pick.C)
    row = {"set": name, "classes": classes, "train": len(train), "pick": f"{pick.form} C={pick.C:g}",
           "cv_accuracy": pick.cv_accuracy, "select_s": picked - start, "fit_s": time.perf_counter() - picked,
           "dev_auto": None, "dev_nb_lr": None}
    if dev is not None:
        x_dev, y_dev = ngram_features(encode_texts(tokenizer, dev.texts, config.data), buckets), np.asarray(dev.labels)
        row["dev_auto"] = float((predicted(x_dev @ w + b) == y_dev).mean())
        w, b = fit_columns(x, y, classes, "nb-lr", FIT_C)
        row["dev_nb_lr"] = float((predicted(x_dev @ w + b) == y_dev).mean())
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table, then each set's cross-validated accuracies."""
    pct = lambda v: "-" if v is None else f"{100 * v:.2f}%"   # noqa: E731
    lines = ["| set | classes | train texts | auto's pick | dev, auto | dev, NB-LR C=0.1 | selection s | refit s |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['set']} | {r['classes']} | {r['train']:,} | {r['pick']} | {pct(r['dev_auto'])} | "
              f"{pct(r['dev_nb_lr'])} | {r['select_s']:.1f} | {r['fit_s']:.1f} |" for r in rows]
    lines += ["", "Cross-validated accuracy (3 folds, at most 10,000 training texts):"]
    lines += [f"- {r['set']}: " + ", ".join(f"{k} {100 * v:.2f}%" for k, v in r["cv_accuracy"].items()) for r in rows]
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.ngram_forms", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS[:4]),
                    help="sets to run (default: the four with a dev split)")
    ap.add_argument("--data", default=str(DATA), help=f"folder holding the sets (default {DATA})")
    args = ap.parse_args(argv)
    rows = []
    for name in args.sets:
        rows.append(run_set(name, Path(args.data)))
        print(f"{name}: {rows[-1]['pick']}", flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()

"""The label-error benchmark: ``sentiment audit`` against cleanlab on TF-IDF + logistic regression, on known flips.

    python -m bench.audit [--cases subj trec6 trec6-cc imdb] [--rate 0.05] [--seeds 0] [--trainer ngram|default]
                          [--output DIR]

For each case, a known ``rate`` of the whole training split's labels are flipped with a fixed seed:
uniformly (each flipped row gets one of the other classes at random), or for ``trec6-cc``
class-conditionally (each class flips to one fixed confusable class, :data:`TREC_CONFUSABLE`). Then,
in one run:

- **ours**: ``sentiment audit --data noisy.csv --output flagged.jsonl`` in its own process, timed;
- **peer**: what a practitioner does today: TF-IDF over word 1-2-grams + logistic regression with
  ``C`` chosen on dev (the set's own dev split with its clean labels; IMDB has none, so 10% of the noisy
  training rows held out in blocks), out-of-fold probabilities by 5-fold stratified ``cross_val_predict``,
  and cleanlab's ``find_label_issues`` with the rule ``audit`` flags by (``filter_by="both"``; the
  same call), timed. Only the out-of-fold probabilities differ.

Each is scored by precision, recall and F1 of its flagged rows against the flipped ones. Then one fast,
fixed training setting, the n-gram score as ``train`` fits it (``[model] ngram_fit = "auto"``: form and C
by cross-validation on the training rows, then fitted on all of them; the audit's tokenizer), is trained
on the clean rows, the noisy rows, and the noisy rows less each system's flagged ones, and scored on the
set's test split: ``recovered`` is the share of the accuracy the noise cost that removing the flagged
rows won back. ``--trainer default`` trains the product's default instead (``sentiment train --data FOLDER``
with no flags, in its own process; the set's clean dev split beside the training rows), four times a case.
``--seeds`` makes one noisy copy of each case per flip seed and adds a table of the means over them (one
seed's accuracies move more than the cleaning does). Prints Markdown tables; writes ``results.json`` and
``results.md`` to ``--output``.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import record

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
CASES = {"subj": ("subj", "uniform"), "trec6": ("trec6", "uniform"), "trec6-cc": ("trec6", "class-conditional"),
         "imdb": ("imdb", "uniform")}
# TREC-6's class-conditional flips: each class to the one its questions are most often mistaken for.
TREC_CONFUSABLE = {"ABBR": "DESC", "DESC": "ENTY", "ENTY": "DESC", "HUM": "ENTY", "LOC": "ENTY", "NUM": "ENTY"}
TFIDF_C_GRID = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
TFIDF_C_GRID_LARGE = (1.0, 4.0, 16.0)   # over LARGE rows: each fit takes a minute
LARGE = 20_000
FOLDS = 5
_CLEAN_ACCURACY: dict[tuple[str, str], float] = {}   # (set, trainer): the clean arm trains once a run, not per seed
TRAINERS = {"ngram": "the n-gram score, ngram_fit auto (form and C by 3-fold cross-validation on the training rows)",
            "default": "sentiment train --data FOLDER with no flags (the set's clean dev split when it has one), "
                       "then sentiment eval --split test"}


def flip(labels: np.ndarray, names: list[str], rate: float, seed: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """``(noisy labels, flipped rows)``: ``round(rate * n)`` rows drawn with ``seed``, each given another class
    (uniformly at random, or :data:`TREC_CONFUSABLE`'s for ``kind`` ``"class-conditional"``)."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(labels), int(round(rate * len(labels))), replace=False))
    noisy = labels.copy()
    k = len(names)
    for i in rows:
        if kind == "class-conditional":
            noisy[i] = names.index(TREC_CONFUSABLE[names[labels[i]]])
        else:
            noisy[i] = rng.choice([c for c in range(k) if c != labels[i]])
    return noisy, rows


def scores(flagged: np.ndarray, flipped: np.ndarray) -> dict:
    """Precision, recall and F1 of the flagged rows against the flipped ones."""
    tp = len(np.intersect1d(flagged, flipped))
    p = tp / len(flagged) if len(flagged) else 0.0
    r = tp / len(flipped) if len(flipped) else 0.0
    return {"flagged": int(len(flagged)), "precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}


def write_rows(path: Path, columns: list[str], rows) -> None:
    """Write ``rows`` (tuples in ``columns``' order) as a UTF-8 CSV file with a header."""
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        w.writerows(rows)


def run_ours(texts: list[str], noisy: np.ndarray, names: list[str], out: Path) -> tuple[np.ndarray, dict]:
    """``sentiment audit`` on the noisy rows written as a CSV (with an ``id`` column), in its own process."""
    data, flagged = out / "noisy.csv", out / "flagged.jsonl"
    write_rows(data, ["id", "text", "label"], ((i, t, names[y]) for i, (t, y) in enumerate(zip(texts, noisy))))
    start, cpu = time.perf_counter(), _children_cpu()
    proc = subprocess.run([sys.executable, "-m", "sentiment_cli", "audit", "--data", str(data), "--top", "0",
                           "--output", str(flagged)], cwd=ROOT, capture_output=True, text=True)
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if proc.returncode:
        raise RuntimeError(f"sentiment audit failed: {proc.stderr.strip()[-500:]}")
    text = flagged.read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.split("\n") if line]   # not splitlines(): a review may hold U+2028
    head = next((line for line in proc.stdout.splitlines() if "out-of-fold probabilities" in line), "")
    return np.array(sorted(int(r["id"]) for r in rows), dtype=np.int64), {"seconds": seconds, "cpu_seconds": cpu,
                                                                        "method": head.strip()}


def _children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far: on a shared machine, the work
    itself, where wall time also counts the other jobs."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def tfidf(C: float):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    return make_pipeline(TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True, strip_accents="unicode"),
                         LogisticRegression(C=C, max_iter=3000))


def run_peer(texts: list[str], noisy: np.ndarray, dev: tuple | None, seed: int) -> tuple[np.ndarray, dict]:
    """TF-IDF + LR, C on dev, out-of-fold probabilities, cleanlab's ``find_label_issues`` (module docstring)."""
    from cleanlab.filter import find_label_issues
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    from sentiment_cli.audit.label_issues import FILTER_BY
    from sentiment_cli.data.splits import block_validation_indices

    start, cpu = time.perf_counter(), time.process_time()
    x = np.array(texts, dtype=object)
    if dev is None:   # IMDB: 10% of the noisy rows, in blocks
        held = block_validation_indices(noisy, 0.1, seed)
        keep = np.setdiff1d(np.arange(len(x)), held)
        fit_x, fit_y, dev_x, dev_y = x[keep], noisy[keep], x[held], noisy[held]
    else:
        fit_x, fit_y, dev_x, dev_y = x, noisy, np.array(dev[0], dtype=object), dev[1]
    grid = TFIDF_C_GRID_LARGE if len(x) > LARGE else TFIDF_C_GRID
    dev_acc = {C: float((tfidf(C).fit(fit_x, fit_y).predict(dev_x) == dev_y).mean()) for C in grid}
    C = max(grid, key=lambda c: (dev_acc[c], -c))
    probs = cross_val_predict(tfidf(C), x, noisy, method="predict_proba",
                              cv=StratifiedKFold(FOLDS, shuffle=True, random_state=seed))
    flagged = find_label_issues(noisy, probs, filter_by=FILTER_BY, return_indices_ranked_by="self_confidence",
                                n_jobs=1)
    return np.sort(np.asarray(flagged, dtype=np.int64)), {"seconds": time.perf_counter() - start,
                                                          "cpu_seconds": time.process_time() - cpu, "C": C,
                                                          "dev_accuracy_by_C": {str(c): a for c, a in dev_acc.items()}}


def ngram_accuracy(x_train, y_train: np.ndarray, x_test, y_test: np.ndarray, k: int) -> float:
    """Test accuracy of the n-gram score fitted as ``train`` fits it (``ngram_fit = "auto"``)."""
    from sentiment_cli.audit.probabilities import class_weighting
    from sentiment_cli.ngram.forms import fit_columns, predicted
    from sentiment_cli.ngram.selection import select_fit

    weighting = class_weighting(y_train)   # balanced over 5 to 1, as the default's rule balances train's fit
    fit = select_fit(x_train, y_train, k, class_weight=weighting)
    w, b = fit_columns(x_train, y_train, k, fit.form, fit.C, weighting)
    w[0] = 0.0
    return float((predicted(x_test @ w + b) == y_test).mean())


def default_accuracy(texts: list[str], labels: np.ndarray, names: list[str], rows: np.ndarray, data: dict,
                     folder: Path) -> float:
    """Test accuracy of ``sentiment train --data FOLDER`` with no flags (the product default), in its own
    process, on ``texts[rows]`` with ``labels[rows]``. ``FOLDER`` holds them as ``train.csv``, the set's clean
    ``dev.csv`` when it has one (else ``train`` holds out its own validation rows from the noisy ones) and its
    ``test.csv``; then ``sentiment eval --split test --json``."""
    folder.mkdir(parents=True, exist_ok=True)

    def write(name: str, xs, ys) -> None:
        write_rows(folder / name, ["text", "label"], ((t, names[int(y)]) for t, y in zip(xs, ys)))

    write("train.csv", [texts[i] for i in rows], labels[rows])
    if data["dev_from"] == "its dev split":
        write("dev.csv", *data["dev"])
    write("test.csv", *data["test"])
    model = folder / "model"
    for cmd in (["train", "--data", str(folder), "--output", str(model)],
                ["eval", "--split", "test", "--checkpoint", str(model), "--json"]):
        proc = subprocess.run([sys.executable, "-m", "sentiment_cli", *cmd], cwd=ROOT, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"sentiment {cmd[0]} failed: {proc.stderr.strip()[-500:]}")
    return float(json.loads(proc.stdout)["accuracy"])


def run_case(name: str, rate: float, seed: int, out: Path, trainer: str = "ngram") -> dict:
    from bench.suite import splits
    from sentiment_cli.audit.probabilities import AUDIT_DATA, bucket_count
    from sentiment_cli.data.tokenizer import build_tokenizer, encode_texts
    from sentiment_cli.ngram.features import ngram_features

    folder, kind = CASES[name]
    data = splits(str(SHARED / folder))
    names = data["labels"]
    texts, clean = data["full"]
    noisy, flipped = flip(clean, names, rate, seed, kind)
    dev = None if folder == "imdb" else data["dev"]
    case_out = out / name
    case_out.mkdir(parents=True, exist_ok=True)
    print(f"{name}: {len(texts):,} rows, {len(flipped):,} flipped ({kind})", file=sys.stderr, flush=True)
    ours, ours_info = run_ours(texts, noisy, names, case_out)
    print(f"  audit: {scores(ours, flipped)}, {ours_info['seconds']:.0f} s", file=sys.stderr, flush=True)
    peer, peer_info = run_peer(texts, noisy, dev, seed)
    print(f"  peer: {scores(peer, flipped)}, {peer_info['seconds']:.0f} s", file=sys.stderr, flush=True)
    tok = build_tokenizer(texts, AUDIT_DATA, length=len(texts))   # labels unused
    ids = encode_texts(tok, texts, AUDIT_DATA)
    buckets = bucket_count(ids)
    x = ngram_features(ids, buckets)
    x_test = ngram_features(encode_texts(tok, data["test"][0], AUDIT_DATA), buckets)
    y_test = data["test"][1]

    def acc(rows, labels, tag):
        if trainer == "default":
            return default_accuracy(texts, labels, names, rows, data, case_out / f"train-{tag}")
        return ngram_accuracy(x[rows], labels[rows], x_test, y_test, len(names))

    every = np.arange(len(texts))
    if (folder, trainer) not in _CLEAN_ACCURACY:   # the same rows and labels whatever the flips
        _CLEAN_ACCURACY[folder, trainer] = acc(every, clean, "clean")
    accuracy = {"clean": _CLEAN_ACCURACY[folder, trainer], "noisy": acc(every, noisy, "noisy"),
                "audit_removed": acc(np.setdiff1d(every, ours), noisy, "audit-removed"),
                "peer_removed": acc(np.setdiff1d(every, peer), noisy, "peer-removed")}
    cost = accuracy["clean"] - accuracy["noisy"]
    recovered = {s: (accuracy[f"{s}_removed"] - accuracy["noisy"]) / cost if cost > 0 else None
                 for s in ("audit", "peer")}
    print(f"  test accuracy: {accuracy}", file=sys.stderr, flush=True)
    return {"set": folder, "flips": kind, "rows": len(texts), "flipped": int(len(flipped)),
            "audit": {**scores(ours, flipped), **ours_info}, "peer": {**scores(peer, flipped), **peer_info},
            "test_accuracy": accuracy, "recovered": recovered}


def markdown(results: dict) -> str:
    """The results as Markdown tables: label errors found, then test accuracy after removing them."""
    lines = ["| case | flipped | system | flagged | precision | recall | F1 | wall (CPU) s |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in results["cases"].items():
        peer = f"TF-IDF + LR (C {r['peer']['C']:g}) + cleanlab"
        for system, label in (("audit", "`sentiment audit`"), ("peer", peer)):
            s = r[system]
            lines.append(f"| {name} | {r['flipped']:,} of {r['rows']:,} ({r['flips']}) | {label} | {s['flagged']:,} | "
                         f"{s['precision']:.3f} | {s['recall']:.3f} | **{s['f1']:.3f}** | {s['seconds']:.0f} "
                         f"({s.get('cpu_seconds', float('nan')):.0f}) |")
    lines += ["", "| case | clean | noisy | less audit's flagged | recovered | less peer's flagged | recovered |",
              "|---|---|---|---|---|---|---|"]

    def rec(v):
        return "n/a (no cost)" if v is None else f"{v:.0%}"
    for name, r in results["cases"].items():
        a, rc = r["test_accuracy"], r["recovered"]
        lines.append(f"| {name} | {a['clean']:.2%} | {a['noisy']:.2%} | {a['audit_removed']:.2%} | "
                     f"{rec(rc['audit'])} | {a['peer_removed']:.2%} | {rec(rc['peer'])} |")
    if len(results.get("seeds", [0])) > 1:
        lines += ["", f"Means over the flip seeds {results['seeds']}:", "",
                  "| case | F1 audit | F1 peer | clean | noisy | less audit's flagged | recovered | "
                  "less peer's flagged | recovered |", "|---|---|---|---|---|---|---|---|---|"]
        for name, m in results["means"].items():
            a, rc = m["test_accuracy"], m["recovered"]
            lines.append(f"| {name} | **{m['f1']['audit']:.3f}** | {m['f1']['peer']:.3f} | {a['clean']:.2%} | "
                         f"{a['noisy']:.2%} | {a['audit_removed']:.2%} | {rec(rc['audit'])} | "
                         f"{a['peer_removed']:.2%} | {rec(rc['peer'])} |")
    return "\n".join(lines) + "\n"


def means(results: dict) -> dict:
    """Per case over its flip seeds: mean F1 per system, mean test accuracy per arm, and ``recovered`` as the mean
    gain of removing the flags over the mean cost of the noise (``None`` when the noise cost nothing on average)."""
    by: dict[str, list[dict]] = {}
    for r in results["cases"].values():
        by.setdefault(r["case"], []).append(r)
    out = {}
    for case, rs in by.items():
        acc = {k: float(np.mean([r["test_accuracy"][k] for r in rs])) for k in rs[0]["test_accuracy"]}
        cost = acc["clean"] - acc["noisy"]
        out[case] = {"seeds": [r["seed"] for r in rs], "test_accuracy": acc,
                     "f1": {s: float(np.mean([r[s]["f1"] for r in rs])) for s in ("audit", "peer")},
                     "recovered": {s: (acc[f"{s}_removed"] - acc["noisy"]) / cost if cost > 0 else None
                                   for s in ("audit", "peer")}}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.audit", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    ap.add_argument("--rate", type=float, default=0.05, help="share of the training labels flipped")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0],
                    help="seeds of the flips and of the peer's folds: one noisy copy of each case per seed, and "
                         "a table of the means over them")
    ap.add_argument("--output", default=None, help="folder for the noisy files and results (default: temp)")
    ap.add_argument("--trainer", choices=TRAINERS, default="ngram",
                    help="what is trained on the clean, noisy and cleaned rows: the n-gram score alone (fast), or "
                         "the full default of `sentiment train` (minutes a set; IMDB about 40)")
    args = ap.parse_args(argv)
    out = Path(args.output or tempfile.mkdtemp(prefix="sentiment-bench-audit-"))
    out.mkdir(parents=True, exist_ok=True)
    results = {**record.header(), "rate": args.rate, "seeds": args.seeds, "trainer": TRAINERS[args.trainer],
               "cases": {}}
    for name in args.cases:
        for seed in args.seeds:
            key = name if len(args.seeds) == 1 else f"{name} seed {seed}"
            results["cases"][key] = {"case": name, "seed": seed,
                                     **run_case(name, args.rate, seed, out / key.replace(" ", "-"), args.trainer)}
            results["means"] = means(results)
            record.save(results, out)
    record.finish(results, out, markdown)


if __name__ == "__main__":
    main()

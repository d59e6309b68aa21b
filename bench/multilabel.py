"""The suite's multi-label sets (GoEmotions: 28 emotions, one or more per text): dev-tuned peers and our row.

    python -m bench --suite --sets goemotions [--skip-ours]   # only GoEmotions; --skip-ours: the peers alone

A multi-label folder holds ``train``, ``dev`` and ``test`` CSVs with ``text`` and ``labels`` (the label names
joined by ``,``; every row has at least one). The peers, everything chosen on dev, never on test:

- **TF-IDF + LR, one threshold**: TF-IDF 1-2-grams (min_df 2, sublinear tf) and one logistic regression per
  label (``OneVsRestClassifier``, liblinear); ``C`` from :data:`C_GRID` and one threshold on the probabilities from
  :data:`THRESHOLDS`, the pair with the best dev macro-F1;
- **TF-IDF + LR, a threshold per label**: the same fit (its ``C``); each label's threshold the one of
  :data:`THRESHOLDS` that maximises that label's F1 on dev;
- **TF-IDF character 2-4-grams + LR**, one threshold and a threshold per label: the same two over scikit-learn's
  ``analyzer="char"`` 2-4-grams (within and across words, sublinear tf), as the single-label suite's character
  peer reads text (issue 55: the peer that needs no word boundaries);
- **fastText ova**: fastText with word bigrams, 100 dimensions and ``-loss ova`` (a binary loss per label), ``lr`` and
  ``epoch`` from :data:`FASTTEXT_GRID` and one threshold, the best dev macro-F1; one fresh process a fit
  (``bench.peers.fasttext_model``), the chosen setting refitted in another for test.

Every prediction keeps at least each text's top label (the data has no text without one). Each system is fitted
on ``train`` (the set has its own dev) and scored once on test: macro-F1, micro-F1 and subset accuracy (exact
match), with scikit-learn. **Ours**: ``sentiment train --data DIR`` with no other flag, then ``sentiment eval
--split test --json``, whose multi-label keys (``macro``, ``micro``, ``subset_accuracy``, ...) it reads.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

C_GRID = (1.0, 4.0, 16.0, 64.0, 256.0)   # 64 and 256 since 2026-11-29: Reuters chose 16, then 64, each the edge
THRESHOLDS = tuple(round(0.05 + 0.025 * i, 3) for i in range(22))   # 0.05, 0.075, ..., 0.575
FASTTEXT_GRID = [{"lr": lr, "epoch": ep} for lr in (0.1, 0.25, 0.5) for ep in (5, 10, 25)]
# over bench.peers.FASTTEXT_SETTINGS' others. dim 100 (fastText's own default), not the suite's 10: on dev, lr 0.5,
# 10 epochs, macro-F1 0.422 against 0.395 (28 labels' sigmoids from 10 dimensions)
FASTTEXT_SETTINGS = {"loss": "ova", "wordNgrams": 2, "dim": 100}
PEER_NAMES = {"tfidf": "TF-IDF + LR, one threshold", "tfidf_per_label": "TF-IDF + LR, a threshold per label",
              "tfidf-char": "TF-IDF char 2-4 + LR, one threshold",
              "tfidf-char_per_label": "TF-IDF char 2-4 + LR, a threshold per label",
              "fasttext": "fastText ova"}


# ----------------------------------------------------------------------------- data

def read_split(folder: str, split: str) -> tuple[list[str], list[list[str]]]:
    """``(texts, label names per text)`` of ``folder/split.csv``: a ``labels`` column of names joined by ``,``, or
    (without one) one 0/1 column per label beside ``text``."""
    import pandas as pd

    df = pd.read_csv(Path(folder) / f"{split}.csv", keep_default_na=False, dtype=str)
    if "labels" not in df.columns:
        names = [c for c in df.columns if c != "text"]
        return df["text"].tolist(), [[n for n in names if row[n] == "1"] for _, row in df.iterrows()]
    labels = [[name.strip() for name in value.split(",") if name.strip()] for value in df["labels"]]
    return df["text"].tolist(), labels


def splits(folder: str) -> dict:
    """``{"train", "dev", "test"}`` as ``(texts, (rows, labels) 0/1 matrix)`` and ``"labels"``: the label names,
    in the matrix's column order (``MultiLabelBinarizer`` fitted on train)."""
    from sklearn.preprocessing import MultiLabelBinarizer

    raw = {split: read_split(folder, split) for split in ("train", "dev", "test")}
    mlb = MultiLabelBinarizer()
    mlb.fit(raw["train"][1])
    known = set(mlb.classes_)
    out = {split: (texts, mlb.transform([[n for n in names if n in known] for names in labels]))
           for split, (texts, labels) in raw.items()}
    return out | {"labels": [str(c) for c in mlb.classes_]}


# ----------------------------------------------------------------------------- thresholds and metrics

def decide(probs: np.ndarray, threshold) -> np.ndarray:
    """0/1 predictions: each label whose probability reaches ``threshold`` (a number, or one per label), and
    always each row's top label."""
    pred = (probs >= np.asarray(threshold)).astype(np.uint8)
    pred[np.arange(len(probs)), probs.argmax(1)] = 1
    return pred


def scores(y: np.ndarray, pred: np.ndarray) -> dict:
    """Macro-F1, micro-F1 and subset accuracy (the share of texts whose whole label set is right)."""
    from sklearn.metrics import accuracy_score, f1_score

    return {"f1_macro": float(f1_score(y, pred, average="macro", zero_division=0)),
            "f1_micro": float(f1_score(y, pred, average="micro", zero_division=0)),
            "exact_match": float(accuracy_score(y, pred))}


def best_threshold(y: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
    """``(threshold, dev macro-F1)``: the one threshold of :data:`THRESHOLDS` with the best macro-F1 (ties: the
    first)."""
    macro = [scores(y, decide(probs, t))["f1_macro"] for t in THRESHOLDS]
    i = int(np.argmax(macro))
    return THRESHOLDS[i], macro[i]


def per_label_thresholds(y: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Each label's threshold: the one of :data:`THRESHOLDS` that maximises that label's F1 on ``(y, probs)``
    (ties: the first)."""
    from sklearn.metrics import f1_score

    out = np.empty(y.shape[1])
    for j in range(y.shape[1]):
        f1 = [f1_score(y[:, j], probs[:, j] >= t, zero_division=0) for t in THRESHOLDS]
        out[j] = THRESHOLDS[int(np.argmax(f1))]
    return out


# ----------------------------------------------------------------------------- peers (inside job processes)

READINGS = {"words": "tfidf", "chars": "tfidf-char"}   # what a TF-IDF peer reads (word 1-2-grams, or character
# 2-4-grams) and the name of its peers


def tfidf_ovr(C: float, reading: str = "words"):
    """TF-IDF + one-vs-rest logistic regression at ``C``, unfitted: over word 1-2-grams (min_df 2, sublinear tf), or
    with ``reading="chars"`` character 2-4-grams (sublinear tf; ``bench.suite.tfidf_char_fit``'s features). liblinear,
    as the issue's measurement (42) fitted it: it penalises the intercept too, which keeps the rare labels'
    probabilities lower than lbfgs does (lbfgs, C 4: test macro-F1 0.425 one threshold, 0.443 per label)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline

    features = TfidfVectorizer(analyzer="char", ngram_range=(2, 4), sublinear_tf=True) if reading == "chars" else \
        TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    return make_pipeline(features, OneVsRestClassifier(LogisticRegression(C=C, solver="liblinear", random_state=0)))


def job_tfidf(folder: str, reading: str = "words") -> dict:
    """Both TF-IDF + LR peers of one ``reading`` (:data:`READINGS`): for each ``C`` a fit on train, its best shared
    threshold on dev; the best pair's fit then takes per-label thresholds on dev too, and both are scored on test.
    Named ``tfidf`` and ``tfidf_per_label`` (words) or ``tfidf-char`` and ``tfidf-char_per_label`` (chars)."""
    if reading not in READINGS:
        raise ValueError(f"reading {reading!r}: one of {', '.join(READINGS)}")
    name = READINGS[reading]
    data = splits(folder)
    (x_dev, y_dev), (x_test, y_test) = data["dev"], data["test"]
    dev, fits = {}, {}
    for c in C_GRID:
        start = time.perf_counter()
        pipe = tfidf_ovr(c, reading).fit(*data["train"])
        fits[c] = (pipe, time.perf_counter() - start)
        threshold, macro = best_threshold(y_dev, pipe.predict_proba(x_dev))
        dev[str(c)] = {"threshold": threshold, "f1_macro": macro}
        print(f"{name} C {c:g}: dev macro-F1 {macro:.4f} at {threshold:g}", file=sys.stderr, flush=True)
    best = max(C_GRID, key=lambda c: dev[str(c)]["f1_macro"])
    pipe, seconds = fits[best]   # liblinear with a fixed seed: the grid's own fit of the chosen C
    p_dev, p_test = pipe.predict_proba(x_dev), pipe.predict_proba(x_test)
    shared = dev[str(best)]["threshold"]
    per_label = per_label_thresholds(y_dev, p_dev)
    return {
        name: {"setting": {"C": best, "threshold": shared}, "dev": dev,
               "dev_scores": scores(y_dev, decide(p_dev, shared)),
               **_test(scores(y_test, decide(p_test, shared))), "train_seconds": seconds},
        f"{name}_per_label": {"setting": {"C": best}, "thresholds": dict(zip(data["labels"], per_label.tolist())),
                              "dev_scores": scores(y_dev, decide(p_dev, per_label)),
                              **_test(scores(y_test, decide(p_test, per_label))), "train_seconds": seconds},
    }


def _test(s: dict) -> dict:
    return {f"test_{k}": v for k, v in s.items()}


def fasttext_ova(texts, y: np.ndarray, labels: list[str], **settings):
    """fastText with word bigrams and ``-loss ova`` fitted on ``(texts, y)`` as ``bench.peers.fasttext_model`` fits
    (its settings, one thread, seed 0; once per process), every label of a text on its line; returns
    ``probs(texts) -> (len(texts), len(labels))`` array, columns in ``labels``' order."""
    import tempfile

    import fasttext

    from bench.peers import FASTTEXT_SETTINGS as BASE, fasttext_text

    opts = {**BASE, **FASTTEXT_SETTINGS, **settings, "thread": 1, "seed": 0, "verbose": 0}
    with tempfile.TemporaryDirectory(prefix="bench-fasttext-") as tmp:
        path = Path(tmp) / "train.txt"   # several labels a line: "__label__3 __label__17 text"
        path.write_text("".join(" ".join(f"__label__{j}" for j in np.flatnonzero(row)) + f" {fasttext_text(t)}\n"
                                for t, row in zip(texts, y)), encoding="utf-8")
        model = fasttext.train_supervised(str(path), **opts)

    def probs(batch):
        got, p = model.predict([fasttext_text(t) for t in batch], k=-1, threshold=0.0)
        out = np.zeros((len(batch), len(labels)))
        for i, (names, values) in enumerate(zip(got, p)):
            for name, v in zip(names, values):
                out[i, int(name[len("__label__"):])] = v
        return out
    return probs


def job_fasttext(folder: str, setting: str, split: str, threshold: str = "") -> dict:
    """One fastText ova fit on train (a fresh process): ``dev``: its best threshold and dev macro-F1; ``test``: the
    test scores at ``threshold`` (chosen on dev), the fit timed."""
    data = splits(folder)
    start = time.perf_counter()
    probs = fasttext_ova(*data["train"], data["labels"], **json.loads(setting))
    seconds = time.perf_counter() - start
    if split == "dev":
        t, macro = best_threshold(data["dev"][1], probs(data["dev"][0]))
        return {"threshold": t, "f1_macro": macro}
    return {**_test(scores(data["test"][1], decide(probs(data["test"][0]), float(threshold)))),
            "train_seconds": seconds}


# ----------------------------------------------------------------------------- driver

def _job(*args: str) -> dict:
    from bench.processes import job

    return job(*args, module="bench.multilabel")


def run_fasttext(folder: str) -> dict:
    """fastText's grid on dev, one process a fit, then the chosen setting and threshold refitted for test."""
    dev = {}
    for g in FASTTEXT_GRID:
        dev[json.dumps(g)] = _job("fasttext", folder, json.dumps(g), "dev")
        print(f"· fasttext {g}: {dev[json.dumps(g)]}", file=sys.stderr, flush=True)
    ok = [g for g in FASTTEXT_GRID if "f1_macro" in dev[json.dumps(g)]]
    if not ok:
        return {"error": next(iter(dev.values())).get("error", "every fit failed"), "dev": dev}
    best = max(ok, key=lambda g: dev[json.dumps(g)]["f1_macro"])
    threshold = dev[json.dumps(best)]["threshold"]
    return {"setting": {**best, "threshold": threshold}, "dev": dev,
            "dev_scores": {"f1_macro": dev[json.dumps(best)]["f1_macro"]},
            **_job("fasttext", folder, json.dumps(best), "test", str(threshold))}


def run_peers(folder: str) -> dict:
    """Every peer on one set: the TF-IDF + LR peers of each reading (one job process each), then fastText's grid."""
    peers = {}
    for reading in READINGS:
        print(f"· tfidf over {reading} (one-vs-rest LR)", file=sys.stderr, flush=True)
        linear = _job("tfidf", folder, reading)
        peers.update(linear if "error" not in linear else {READINGS[reading]: linear})
    print("· fasttext ova", file=sys.stderr, flush=True)
    return {**peers, "fasttext": run_fasttext(folder)}


def read_eval(m: dict) -> dict:
    """Our row's figures from a multi-label ``sentiment eval --json``."""
    return {"test_f1_macro": m["macro"]["f1"], "test_f1_micro": m["micro"]["f1"],
            "test_exact_match": m["subset_accuracy"], "hamming_loss": m.get("hamming_loss"),
            "lrap": m.get("lrap"), "ece": m.get("ece")}


def run_ours(folder: str, out: Path, extra: list[str]) -> dict:
    """``sentiment train --data DIR`` then ``eval --split test --json`` (``bench.processes.train_and_eval``) read as
    multi-label figures; on failure, the error line."""
    from bench import processes

    m, seconds = processes.train_and_eval(folder, out, ["--keep-full", *extra])
    if "error" in m:
        return {**m, "train_seconds": seconds}
    if not m.get("multi_label"):
        return {"error": "eval --json is not multi-label (no \"multi_label\": true)", "train_seconds": seconds}
    try:
        full = m.get("full") or {}
        return {**read_eval(m), "train_seconds": seconds, "folder_bytes": m.get("folder_bytes"),
                "full_test_f1_macro": (full.get("macro") or {}).get("f1"), "full_folder_bytes": full.get("folder_bytes")}
    except (KeyError, TypeError) as e:
        return {"error": f"eval --json lacks {e}", "train_seconds": seconds}


def run_set(name: str, folder: str, out: Path, skip_ours: bool, peers: dict | None = None) -> dict:
    """One multi-label set: the peers (or ``peers``, from an earlier run), then ours."""
    print(f"== {name} (multi-label)", file=sys.stderr, flush=True)
    result = {"data": folder, "multi_label": True}
    if peers is not None:
        result["peers"], result["peers_from_earlier_run"] = peers, True
    else:
        result["peers"] = run_peers(folder)
    if not skip_ours:
        result["ours"] = run_ours(folder, out / name, [])
    return result


# ----------------------------------------------------------------------------- report

HEADER = ["set", "system", "macro-F1", "micro-F1", "exact match", "train time", "against the best peer"]


def _setting(s: dict) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in s.items())


def rows(results: dict) -> list[list[str]]:
    """The multi-label table: set, system, test macro-F1, micro-F1, exact match, training time, ours' macro-F1
    against the best peer's (by test macro-F1)."""
    table = []
    for name, r in results["sets"].items():
        if not r.get("multi_label"):
            continue
        peers = {p: v for p, v in r["peers"].items() if "test_f1_macro" in v}
        best = max(peers, key=lambda p: peers[p]["test_f1_macro"]) if peers else None
        ours = r.get("ours")
        if ours:
            system = "sentiment train (no flags)"
            if "test_f1_macro" in ours and best:
                gap = f"{ours['test_f1_macro'] - peers[best]['test_f1_macro']:+.4f} macro-F1 vs {PEER_NAMES[best]}"
                table.append([name, system, f"{ours['test_f1_macro']:.4f}", f"{ours['test_f1_micro']:.4f}",
                              f"{ours['test_exact_match']:.2%}", f"{ours['train_seconds']:,.0f} s", gap])
            else:
                table.append([name, system, "–", "–", "–", "–", ours.get("error", "")[:90]])
        for p, v in r["peers"].items():
            if "test_f1_macro" not in v:
                table.append([name, PEER_NAMES[p], "–", "–", "–", "–", v.get("error", "")[:90]])
                continue
            table.append([name, f"{PEER_NAMES[p]} ({_setting(v['setting'])})", f"{v['test_f1_macro']:.4f}",
                          f"{v['test_f1_micro']:.4f}", f"{v['test_exact_match']:.2%}",
                          f"{v['train_seconds']:,.1f} s", "best peer" if p == best else ""])
    return table


def markdown(results: dict) -> str:
    """The multi-label table in Markdown ("" when the run has no multi-label set)."""
    body = rows(results)
    if not body:
        return ""
    lines = ["Multi-label sets (test; C, lr, epoch and thresholds chosen on dev; each text keeps its top label):",
             "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body]) + "\n"


def main(argv=None) -> None:
    """Inside a job process (``--job tfidf FOLDER [READING]`` or ``--job fasttext FOLDER SETTING SPLIT
    [THRESHOLD]``): print one JSON line."""
    ap = argparse.ArgumentParser(prog="python -m bench.multilabel", description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", nargs="+", required=True)
    kind, *rest = ap.parse_args(argv).job
    print(json.dumps(job_tfidf(*rest) if kind == "tfidf" else job_fasttext(*rest)))


if __name__ == "__main__":
    main()

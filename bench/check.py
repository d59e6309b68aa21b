"""The built-in behavioural suite (``sentiment check``) on our checkpoints and on the IMDB-trained peers, side by
side: failure rate per test, per capability and the mean over tests.

    python -m bench.check --checkpoint ours=checkpoints/default [--checkpoint before=DIR ...]
                          [--half test] [--data ../shared/data/imdb] [--out DIR]

The peers (``bench/peers.py``: TF-IDF + LR, NB-SVM, fastText with bigrams) are fitted on IMDB's 25,000 training
reviews with the settings chosen on the hold-out (docs/experiments-peers.md), as the main benchmark fits them;
each gives probabilities (fastText's softmax over its two labels). Every system runs the same cases. Writes
``results.json`` and ``results.md`` (``--out``, default a fresh temporary folder).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from bench.record import finish, header, save

ROOT = Path(__file__).resolve().parent.parent
FULL = ROOT.parent / "shared" / "data" / "imdb"
LABELS = ("negative", "positive")


def peer_scorers(data: str) -> dict:
    """``{name: texts -> (n, 2) probabilities}`` of the three peers, fitted on ``data``'s train split."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from bench.nbsvm import fit_nbsvm
    from bench.peers import FASTTEXT_SETTINGS, NBSVM_C, fasttext_text
    from sentiment_cli.data.splits import load_split
    from sentiment_cli.inference.probabilities import softmax

    train = load_split(data, "train", 0.0, 0)
    texts, labels = list(train.texts), np.array(train.labels)
    tfidf = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), min_df=2, max_df=0.95, sublinear_tf=True, strip_accents="unicode"),
        LogisticRegression(C=8.0, max_iter=2000)).fit(texts, labels)
    nbsvm = fit_nbsvm(texts, labels, C=NBSVM_C)
    fasttext = _fasttext(texts, labels, FASTTEXT_SETTINGS, fasttext_text)
    return {"TF-IDF + LR": tfidf.predict_proba, "NB-SVM": lambda t: softmax(nbsvm.logits(t)), "fastText": fasttext}


def _fasttext(texts, labels, settings, clean):
    """fastText's supervised classifier on ``texts``; returns texts -> ``(n, 2)`` probabilities."""
    import fasttext

    with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
        path = Path(tmp) / "train.txt"
        path.write_text("".join(f"__label__{int(y)} {clean(t)}\n" for t, y in zip(texts, labels)), encoding="utf-8")
        model = fasttext.train_supervised(str(path), **settings, thread=1, seed=0, verbose=0)

    def scorer(batch):
        names, probs = model.predict([clean(t) for t in batch], k=2)
        out = np.zeros((len(batch), 2))
        for i, (ns, ps) in enumerate(zip(names, probs)):
            for n, p in zip(ns, ps):
                out[i, int(n[len("__label__"):])] = p
        return out
    return scorer


def markdown(results: dict) -> str:
    """Rows: each test, then each capability, then the mean over tests; columns: the systems."""
    systems = list(results["systems"])
    first = results["systems"][systems[0]]
    head = ["| capability | test | type | cases | " + " | ".join(systems) + " |",
            "|---|---|---|---:|" + "---:|" * len(systems)]

    def rate(r):
        return "–" if r is None else f"{r:.1%}"

    rows = []
    for i, t in enumerate(first["tests"]):
        rows.append(f"| {t['capability']} | {t['name']} | {t['type']} | {t['cases']:,} | "
                    + " | ".join(rate(results["systems"][s]["tests"][i]["failure_rate"]) for s in systems) + " |")
    for j, c in enumerate(first["capabilities"]):
        rows.append(f"| **{c['capability']}** | (mean of {c['tests']} tests) | | {c['cases']:,} | "
                    + " | ".join(rate(results["systems"][s]["capabilities"][j]["failure_rate"]) for s in systems) + " |")
    rows.append("| **all** | mean over tests | | | "
                + " | ".join(f"**{rate(results['systems'][s]['overall']['mean_failure_rate'])}**" for s in systems) + " |")
    meta = (f"Failure rates on the built-in suite's {results['half']} half ({results['date']}, {results['hardware']}, "
            f"commit {results['commit']}); lower is better.")
    return "\n".join([meta, "", *head, *rows]) + "\n"


def main(argv=None) -> None:
    from sentiment_cli.behaviour.run import check_scorer, predictor_scorer
    from sentiment_cli.behaviour.suite import builtin_suite
    from sentiment_cli.inference.predictor import Predictor

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", action="append", default=[], metavar="NAME=DIR", help="one of ours (repeatable)")
    ap.add_argument("--half", choices=("dev", "test", "all"), default="test")
    ap.add_argument("--data", default=str(FULL), help="the IMDB folder the peers train on")
    ap.add_argument("--no-peers", action="store_true", help="only our checkpoints")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-check-"))
    out.mkdir(parents=True, exist_ok=True)
    suite = builtin_suite()
    scorers = {}
    for spec in args.checkpoint:
        name, _, folder = spec.partition("=")
        predictor = Predictor(folder or name)
        scorers[name if folder else Path(name).name] = (predictor_scorer(predictor), predictor.labels)
    if not args.no_peers:
        scorers.update({k: (v, LABELS) for k, v in peer_scorers(args.data).items()})
    results = {**header(), "suite": suite.name, "half": args.half, "systems": {}}
    for name, (scorer, labels) in scorers.items():
        report, _ = check_scorer(suite, scorer, labels, args.half)
        results["systems"][name] = report
        save(results, out)
    finish(results, out, markdown)


if __name__ == "__main__":
    main()

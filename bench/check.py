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
    from bench.nbsvm import fit_nbsvm
    from bench.peers import NBSVM_C, fasttext_model, fasttext_text, tfidf_pipeline
    from sentiment_cli.data.splits import load_split
    from sentiment_cli.inference.probabilities import softmax

    train = load_split(data, "train", 0.0, 0)
    texts, labels = list(train.texts), np.array(train.labels)
    tfidf = tfidf_pipeline().fit(texts, labels)
    nbsvm = fit_nbsvm(texts, labels, C=NBSVM_C)
    fasttext = fasttext_model(texts, labels)

    def fasttext_proba(batch):
        names, probs = fasttext.predict([fasttext_text(t) for t in batch], k=2)
        out = np.zeros((len(batch), 2))
        for i, (ns, ps) in enumerate(zip(names, probs)):
            for n, p in zip(ns, ps):
                out[i, int(n[len("__label__"):])] = p
        return out
    return {"TF-IDF + LR": tfidf.predict_proba, "NB-SVM": lambda t: softmax(nbsvm.logits(t)),
            "fastText": fasttext_proba}


def markdown(results: dict) -> str:
    """Rows: each test, then each capability, then the mean over tests; columns: the systems."""
    systems = list(results["systems"])
    first = results["systems"][systems[0]]
    head = ["| capability | test | type | cases | " + " | ".join(systems) + " |",
            "|---|---|---|---:|" + "---:|" * len(systems)]

    def rate(r):
        return "–" if r is None else f"{r:.1%}"

    def cells(rate_of, bold=False):
        """One cell per system: ``rate_of(report)``."""
        mark = "**" if bold else ""
        return " | ".join(f"{mark}{rate(rate_of(results['systems'][s]))}{mark}" for s in systems) + " |"

    rows = [f"| {t['capability']} | {t['name']} | {t['type']} | {t['cases']:,} | "
            + cells(lambda r, i=i: r["tests"][i]["failure_rate"]) for i, t in enumerate(first["tests"])]
    rows += [f"| **{c['capability']}** | (mean of {c['tests']} tests) | | {c['cases']:,} | "
             + cells(lambda r, j=j: r["capabilities"][j]["failure_rate"]) for j, c in enumerate(first["capabilities"])]
    rows.append("| **all** | mean over tests | | | " + cells(lambda r: r["overall"]["mean_failure_rate"], bold=True))
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

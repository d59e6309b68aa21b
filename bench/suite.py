"""The suite benchmark: `sentiment train --data DIR` with no flags against dev-tuned peers, set by set.

    python -m bench --suite [--sets imdb sst5 sst5-phrases trec6 subj goemotions] [--data DIR ...] [--output DIR]
                            [--skip-ours] [--no-extra] [--peers-from results.json]

For each labelled set in ``../shared/data`` (IMDB, SST-5 sentences, SST-5 with its
treebank phrases, TREC-6, Subj; then GoEmotions, multi-label, ``bench/multilabel.py``), in one run:

- **ours**: ``sentiment train --data DIR`` with no other flag (the default preset as a new
  user runs it: it reads the data, ``sentiment_cli/training/auto.py``), then ``sentiment eval
  --split test --json``; a run that fails is reported with its one error line, not hidden. SST-5
  with phrases also runs with ``--unlabelled`` IMDB's folder (its 50,000 unlabelled reviews);
- **peers**, each with its settings chosen on dev (the set's ``dev``/``validation`` split; IMDB
  has none, so a 10% hold-out of train in blocks), refitted on the whole training split for test:
  TF-IDF 1-2-grams + logistic regression (``C``), NB-SVM (NB-LR over word 1-3-grams; one-vs-rest
  with more than two classes; ``C``) and fastText with word bigrams (``lr``, ``epoch``).

It prints test accuracy, macro-F1 and training time per system, and ours against the best peer,
and writes ``results.json`` and ``results.md`` (the README's table). ``--data DIR`` runs the same comparison on
any folder with ``train`` and ``test`` files (and ``dev``, else a 10% hold-out chooses the peers' settings),
named by its folder: your own labelled set against the peers, tuned alike. The multi-label sets
(:data:`MULTI_LABEL_SETS`) have peers of their own and a table of their own (macro-F1, micro-F1, exact match):
``bench/multilabel.py``. Every system runs in its own
process, one after another; fastText in a fresh process per fit (fastText 0.9.3 can diverge when a
process trains a second model; see ``bench.peers.fasttext_bigrams``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench import record
from bench.processes import job, train_and_eval

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
SETS = {"imdb": "imdb", "sst5": "sst5", "sst5-phrases": "sst5-phrases", "trec6": "trec6", "subj": "subj",
        "wisesight": "wisesight"}
MULTI_LABEL_SETS = {"goemotions": "goemotions"}   # bench/multilabel.py's peers and table; the suite's alone
# up to 300: the default's n-gram stage goes past its grid's edge to C 300 (training/ngram_stage.py, past_the_edge),
# and the peers get as wide a search (Chinese hotel reviews: the character peer's best was 30, this grid's edge then)
C_GRID = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0)
C_GRID_LARGE = (0.1, 1.0, 10.0)   # sets of over LARGE_SET training rows: each fit takes minutes
LARGE_SET = 50_000
# Extra runs of ours: set -> (row name, flags).
EXTRA_OURS = {"sst5-phrases": ("sentiment train --unlabelled imdb", ["--unlabelled", str(SHARED / "imdb")])}
FASTTEXT_GRID = [{"lr": lr, "epoch": ep} for lr in (0.1, 0.25, 0.5) for ep in (5, 10, 25)]
PEER_NAMES = {"tfidf": "TF-IDF + LR", "tfidf-char": "TF-IDF char 2-4 + LR", "nbsvm": "NB-SVM",
              "fasttext": "fastText"}
LINEAR_PEERS = ("tfidf", "tfidf-char", "nbsvm")


# ----------------------------------------------------------------------------- data

def splits(folder: str) -> dict:
    """``{"train", "dev", "test"}`` as ``(texts, label ids)``, labelled as the set names them; ``full``:
    the whole training split (for the refit), which is ``train`` when the set has its own dev split."""
    import numpy as np

    from sentiment_cli.data.splits import DataSpec, load_split, load_train_validation

    own_dev = load_train_validation(DataSpec(folder, validation_fraction=0.1, validation_split="blocks"))
    train, dev = own_dev
    full = load_split(DataSpec(folder, validation_fraction=0.0), "train", 0.0, label_names=train.label_names)
    test = load_split(folder, "test", label_names=train.label_names)
    has_dev = dev.where != train.where
    out = {"train": train, "dev": dev, "full": train if has_dev else full, "test": test}
    return {k: (list(v.texts), np.asarray(v.labels)) for k, v in out.items()} | {
        "labels": list(train.label_names), "dev_from": "its dev split" if has_dev else "10% of train, in blocks"}


# ----------------------------------------------------------------------------- peers (run in job processes)

def _choose(fit_score, grid) -> tuple:
    """``(best setting, {setting: dev accuracy})``: the best dev accuracy wins, ties go to the first."""
    dev = {json.dumps(g): fit_score(g) for g in grid}
    best = max(grid, key=lambda g: dev[json.dumps(g)])
    return best, dev


def _test_record(predict_fit, full, test, seconds_key="train_seconds") -> dict:
    from sklearn.metrics import f1_score

    start = time.perf_counter()
    predict = predict_fit(*full)
    seconds = time.perf_counter() - start
    pred = predict(test[0])
    return {"test_accuracy": float((pred == test[1]).mean()),
            "test_f1_macro": float(f1_score(test[1], pred, average="macro")), seconds_key: seconds}


def tfidf_fit(C: float):
    """A function ``(texts, labels) -> predict`` for TF-IDF 1-2-grams + logistic regression at ``C``."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    def fit(texts, labels):
        pipe = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True, strip_accents="unicode"),
                             LogisticRegression(C=C, max_iter=3000))
        return pipe.fit(texts, labels).predict
    return fit


def tfidf_char_fit(C: float):
    """A function ``(texts, labels) -> predict`` for TF-IDF over character 2-4-grams (within and across words,
    scikit-learn's ``analyzer="char"``, sublinear tf) + logistic regression at ``C``: the peer that needs no
    word boundaries (issue 55: Thai, Chinese)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    def fit(texts, labels):
        pipe = make_pipeline(TfidfVectorizer(analyzer="char", ngram_range=(2, 4), min_df=1, sublinear_tf=True),
                             LogisticRegression(C=C, max_iter=3000))
        return pipe.fit(texts, labels).predict
    return fit


def nbsvm_fit(C: float, num_labels: int):
    """A function ``(texts, labels) -> predict`` for NB-LR over word 1-3-grams (one-vs-rest for N classes)."""
    from bench.nbsvm import fit_nbsvm

    def fit(texts, labels):
        return fit_nbsvm(texts, labels, C=C, num_labels=num_labels).predict
    return fit


def job_linear(name: str, folder: str) -> dict:
    """TF-IDF + LR (words or characters) or NB-SVM on one set: ``C`` chosen on dev, then refitted on the whole
    training split."""
    data = splits(folder)
    make = {"tfidf": tfidf_fit, "tfidf-char": tfidf_char_fit}.get(name) or (lambda c: nbsvm_fit(c, len(data["labels"])))

    def dev_accuracy(c):
        return float((make(c)(*data["train"])(data["dev"][0]) == data["dev"][1]).mean())

    best, dev = _choose(dev_accuracy, list(C_GRID_LARGE if len(data["train"][1]) > LARGE_SET else C_GRID))
    return {"setting": {"C": best}, "dev": dev, "dev_accuracy": dev[json.dumps(best)],
            **_test_record(make(best), data["full"], data["test"])}


def job_fasttext(folder: str, setting: str, split: str) -> dict:
    """One fastText fit (a fresh process): on ``train`` scored on dev, or on the whole split scored on test."""
    import numpy as np

    from bench.peers import fasttext_predictor

    data = splits(folder)
    params = json.loads(setting)
    if split == "dev":
        predict = fasttext_predictor(*data["train"], **params)
        return {"dev_accuracy": float((np.asarray(predict(data["dev"][0])) == data["dev"][1]).mean())}
    return _test_record(lambda t, y: fasttext_predictor(t, y, **params), data["full"], data["test"])


# ----------------------------------------------------------------------------- ours

def run_ours(folder: str, out: Path, extra: list[str]) -> dict:
    """``sentiment train --data DIR`` (plus ``extra``) then ``eval --split test --json`` (:func:`train_and_eval`),
    timed; on failure, the exit code and the last line it printed."""
    m, seconds = train_and_eval(folder, out, ["--keep-full", *extra])
    if "error" in m:
        return {**m, "train_seconds": seconds}
    full = m.get("full") or {}
    return {"test_accuracy": m["accuracy"], "test_f1_macro": m["f1"]["macro"], "train_seconds": seconds,
            "ece": m.get("ece"), "temperature": m.get("temperature"), "folder_bytes": m.get("folder_bytes"),
            "weights_bytes": m.get("weights_bytes"), "full_test_accuracy": full.get("accuracy"),
            "full_folder_bytes": full.get("folder_bytes")}


# ----------------------------------------------------------------------------- driver

def run_fasttext(folder: str) -> dict:
    """fastText's grid on dev, one process a fit, then the chosen setting refitted for test."""
    dev = {}
    for g in FASTTEXT_GRID:
        dev[json.dumps(g)] = job("fasttext", folder, json.dumps(g), "dev").get("dev_accuracy", -1.0)
    best = max(FASTTEXT_GRID, key=lambda g: dev[json.dumps(g)])
    return {"setting": best, "dev": dev, "dev_accuracy": dev[json.dumps(best)],
            **job("fasttext", folder, json.dumps(best), "test")}


def run_set(name: str, folder: str, out: Path, skip_ours: bool, peers: dict | None = None, extra: bool = True) -> dict:
    """One set (``folder``, reported as ``name``): the peers (or ``peers``, measured by an earlier run), then ours,
    and with ``extra`` its :data:`EXTRA_OURS` row."""
    print(f"== {name}", file=sys.stderr, flush=True)
    result = {"data": folder, "peers": {}}
    if peers is not None:
        result["peers"], result["peers_from_earlier_run"] = peers, True
    else:
        for peer in LINEAR_PEERS:
            print(f"· {peer}", file=sys.stderr, flush=True)
            result["peers"][peer] = job("linear", peer, folder)
        print("· fasttext", file=sys.stderr, flush=True)
        result["peers"]["fasttext"] = run_fasttext(folder)
    if not skip_ours:
        result["ours"] = run_ours(folder, out / name, [])
        if extra and name in EXTRA_OURS:
            result["ours_extra"] = {"name": EXTRA_OURS[name][0],
                                    **run_ours(folder, out / f"{name}-unlabelled", EXTRA_OURS[name][1])}
    return result


def rows(results: dict) -> list[list[str]]:
    """The table: set, system, test accuracy, macro-F1, training time, ours against the best peer."""
    table = []
    for name, r in results["sets"].items():
        if r.get("multi_label"):   # their own table: bench.multilabel.rows
            continue
        peers = {p: v for p, v in r["peers"].items() if "test_accuracy" in v}
        best = max(peers, key=lambda p: peers[p]["test_accuracy"]) if peers else None
        for ours in (r.get("ours"), r.get("ours_extra")):
            if not ours:
                continue
            system = ours.get("name", "sentiment train (no flags)")
            if "test_accuracy" in ours and best:
                gap = f"{(ours['test_accuracy'] - peers[best]['test_accuracy']) * 100:+.2f} pt vs {PEER_NAMES[best]}"
                ece = f"; ECE {ours['ece']:.2%}" if ours.get("ece") is not None else ""
                table.append([name, system, f"{ours['test_accuracy']:.2%}", f"{ours['test_f1_macro']:.4f}",
                              f"{ours['train_seconds']:,.0f} s", gap + ece])
            else:
                table.append([name, system, "–", "–", "–", ours.get("error", "")[:90]])
        for p, v in r["peers"].items():
            if "test_accuracy" not in v:
                table.append([name, PEER_NAMES[p], "–", "–", "–", v.get("error", "")[:90]])
                continue
            setting = ", ".join(f"{k} {val:g}" for k, val in v["setting"].items())
            table.append([name, f"{PEER_NAMES[p]} ({setting})", f"{v['test_accuracy']:.2%}",
                          f"{v['test_f1_macro']:.4f}", f"{v['train_seconds']:,.1f} s", "best peer" if p == best else ""])
    return table


HEADER = ["set", "system", "test accuracy", "macro-F1", "train time", "against the best peer"]


def markdown(results: dict) -> str:
    """The Markdown table with its date, hardware and commit; the multi-label sets' table under it, when the run
    has one (``bench.multilabel.markdown``)."""
    from bench import multilabel

    lines = [f"{results['date']}, {results['hardware']}, commit {results['commit']}; settings chosen on dev.", ""]
    single, ml = rows(results), multilabel.markdown(results)
    if single or not ml:
        lines += ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(r) + " |" for r in single]
        lines += [""] if ml else []
    return "\n".join(lines) + "\n" + ml


def set_folders(sets: list[str] | None, data: list[str]) -> dict[str, str]:
    """``{name: folder}``: the shared ``sets`` (all of them when neither ``sets`` nor ``data`` is given), then
    each folder of ``data`` named by its folder's name.

    Raises:
        SystemExit: a ``data`` folder that is not a folder, that ``sentiment`` cannot read a ``test`` split
            from, or whose name repeats a set's (one line).
    """
    from sentiment_cli.data.splits import load_split
    from sentiment_cli.errors import SentimentError

    shared = SETS | MULTI_LABEL_SETS
    names = list(shared) if sets is None and not data else list(sets or [])
    folders = {name: str(SHARED / shared[name]) for name in names}
    for d in data:
        path = Path(d).resolve()
        if not path.is_dir():
            raise SystemExit(f"error: --data {d}: not a folder (train, dev and test files, or the Hub's layout)")
        try:
            load_split(str(path), "test")   # the peers and ours are scored on it; reads train's labels too
        except SentimentError as e:
            raise SystemExit(f"error: --data {d}: {e}") from None
        if path.name in folders:
            raise SystemExit(f"error: --data {d}: a set named {path.name!r} is already in the run")
        folders[path.name] = str(path)
    return folders


def set_arguments(ap: argparse.ArgumentParser, sets_help: str, data_help: str, multi_label: bool = False) -> None:
    """The options of a benchmark over labelled sets (this one, ``bench.budget``): ``--sets`` (with
    ``multi_label``, the multi-label sets among its choices), ``--data``, ``--output``, and the hidden ``--job`` its
    job processes run with."""
    ap.add_argument("--sets", nargs="+", choices=sorted(SETS | MULTI_LABEL_SETS if multi_label else SETS),
                    default=None, help=sets_help)
    ap.add_argument("--data", nargs="+", default=[], metavar="DIR", help=data_help)
    ap.add_argument("--output", default=None, help="folder for checkpoints and results (default: temp)")
    ap.add_argument("--job", nargs="+", help=argparse.SUPPRESS)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.suite", description=__doc__.split("\n\n")[0])
    set_arguments(ap, "shared sets to run (default: all, unless --data is given)",
                  "also run these folders (train and test files, dev optional), named by their folder",
                  multi_label=True)
    ap.add_argument("--skip-ours", action="store_true", help="the peers only")
    ap.add_argument("--no-extra", action="store_true",
                    help="without the extra rows (SST-5 phrases with IMDB's unlabelled text)")
    ap.add_argument("--peers-from", default=None, help="take the peers' figures from this results.json of an "
                                                       "earlier run (on the same machine) instead of refitting them")
    args = ap.parse_args(argv)
    if args.job:   # inside a job process: print one JSON line
        kind, *rest = args.job
        print(json.dumps(job_linear(*rest) if kind == "linear" else job_fasttext(*rest)))
        return
    from bench import multilabel

    folders = set_folders(args.sets, args.data)
    out = Path(args.output or tempfile.mkdtemp(prefix="sentiment-suite-"))
    out.mkdir(parents=True, exist_ok=True)
    results = {**record.header(), "sets": {}}
    earlier = json.loads(Path(args.peers_from).read_text())["sets"] if args.peers_from else {}
    for name, folder in folders.items():
        peers = (earlier.get(name) or {}).get("peers")
        if name in MULTI_LABEL_SETS or _multi_label(folder):
            results["sets"][name] = multilabel.run_set(name, folder, out, args.skip_ours, peers)
        else:
            results["sets"][name] = run_set(name, folder, out, args.skip_ours, peers, extra=not args.no_extra)
        record.save(results, out)
    record.finish(results, out, markdown)


def _multi_label(folder: str) -> bool:
    """Whether a ``--data`` folder has several labels per text, as ``sentiment train`` reads it (Reuters' topics):
    its peers and table are ``bench/multilabel.py``'s."""
    from sentiment_cli.data.splits import load_split

    return bool(load_split(folder, "train").multi_label)


if __name__ == "__main__":
    main()

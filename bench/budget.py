"""The budget benchmark: the default's search at several time budgets against peers tuned within the same time.

    python -m bench --budget [--sets imdb trec6 subj] [--budgets 30 120 600 1800] [--data DIR ...]
                             [--output DIR] [--picture docs/budget.png]

For each set, in one run, one job at a time:

- **ours**: ``sentiment train --data DIR --time-budget B`` for each budget ``B`` (seconds), then ``sentiment eval
  --split test --json``; its wall time (the data's reading included) and what the search chose;
- **peers** (TF-IDF + LR, NB-SVM, fastText with word bigrams, as in ``bench/suite.py``): every setting of the
  peer's grid fitted on train and scored on dev, each fit timed. At budget ``B`` a peer has the settings of its
  grid, in the grid's order, whose fits and the refit of the best on the whole training split fit in ``B``; the
  best of those on dev is refitted and scored on test. A peer none of whose settings fits is left out there.

It prints accuracy against budget per set, writes ``results.json`` and ``results.md``, and draws the picture
(test accuracy against the budget, log scale; ``docs/budget.png``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench import record
from bench.processes import job
from bench.suite import (C_GRID, C_GRID_LARGE, FASTTEXT_GRID, LARGE_SET, PEER_NAMES, _test_record, nbsvm_fit, run_ours, set_arguments, set_folders, splits, tfidf_fit)

BUDGETS = (30, 120, 600, 1800)
DEFAULT_SETS = ("imdb", "trec6", "subj")


# ----------------------------------------------------------------------------- peers (inside job processes)

def _maker(name: str, data: dict):
    if name == "tfidf":
        return lambda s: tfidf_fit(s["C"])
    if name == "nbsvm":
        return lambda s: nbsvm_fit(s["C"], len(data["labels"]))
    from bench.peers import fasttext_predictor
    return lambda s: (lambda texts, labels: fasttext_predictor(texts, labels, **s))


def job_dev(name: str, folder: str, setting: str) -> dict:
    """One setting of a peer fitted on train (timed) and scored on dev."""
    import numpy as np

    data = splits(folder)
    start = time.perf_counter()
    predict = _maker(name, data)(json.loads(setting))(*data["train"])
    seconds = time.perf_counter() - start
    return {"dev_accuracy": float((np.asarray(predict(data["dev"][0])) == data["dev"][1]).mean()), "seconds": seconds}


def job_test(name: str, folder: str, setting: str) -> dict:
    """One setting of a peer refitted on the whole training split (timed) and scored on test."""
    data = splits(folder)
    return _test_record(_maker(name, data)(json.loads(setting)), data["full"], data["test"])


def _job(*args: str) -> dict:
    return job(*args, module="bench.budget")


def grid(name: str, train_rows: int) -> list[dict]:
    """A peer's settings, in the order it tries them (the suite's grids)."""
    if name == "fasttext":
        return list(FASTTEXT_GRID)
    return [{"C": c} for c in (C_GRID_LARGE if train_rows > LARGE_SET else C_GRID)]


def peer_at_budgets(name: str, folder: str, budgets: list[float], train_rows: int) -> dict:
    """The peer's grid on dev (each fit timed), and at each budget the best setting it could try, scored on test."""
    tried = []
    for setting in grid(name, train_rows):
        print(f"  · {PEER_NAMES[name]} {setting}", file=sys.stderr, flush=True)
        tried.append({"setting": setting, **_job("dev", name, folder, json.dumps(setting))})
    tested: dict[str, dict] = {}
    at: dict[str, dict | None] = {}
    for budget in budgets:
        spent, best = 0.0, None
        for t in tried:
            if "error" in t:
                continue
            spent += t["seconds"]
            if spent + t["seconds"] > budget:   # its fits so far, and a refit of about one fit's time
                break
            if best is None or t["dev_accuracy"] > best["dev_accuracy"]:
                best = t
        if best is None:
            at[str(budget)] = None
            continue
        key = json.dumps(best["setting"])
        if key not in tested:
            tested[key] = _job("test", name, folder, key)
        at[str(budget)] = {"setting": best["setting"], "dev_accuracy": best["dev_accuracy"], **tested[key]}
    return {"grid": tried, "at": at}


# ----------------------------------------------------------------------------- ours

def ours_at(folder: str, out: Path, budget: float) -> dict:
    """``sentiment train --data DIR --time-budget B`` then ``eval --split test --json`` (``bench.suite.run_ours``):
    accuracy, seconds, and what the search chose (the checkpoint's ``metrics.json``)."""
    r = run_ours(folder, out, ["--time-budget", f"{budget:g}"])
    r["seconds"] = r.pop("train_seconds")
    if "error" in r:
        return r
    search = json.loads((out / "metrics.json").read_text()).get("search") or {}
    return {**r, "chosen": search.get("chosen"), "search_seconds": search.get("seconds"),
            "candidates": len(search.get("candidates") or [])}


# ----------------------------------------------------------------------------- report

def markdown(results: dict) -> str:
    """One table per set: a row per budget, ours and each peer's test accuracy (``–``: nothing fits)."""
    lines = [f"Budget benchmark, {results['date']}, {results['hardware']}, commit {results['commit']}", ""]
    for name, r in results["sets"].items():
        lines += [f"**{name}**", "", "| budget | ours | what the search chose | ours' wall time | "
                  + " | ".join(PEER_NAMES[p] for p in r["peers"]) + " |",
                  "|---|---|---|---|" + "---|" * len(r["peers"])]
        for budget in results["budgets"]:
            if str(budget) not in r["ours"]:   # a budget this set was not run at
                continue
            o = r["ours"][str(budget)]
            ours = f"{o['test_accuracy']:.2%}" if "test_accuracy" in o else o.get("error", "–")
            peers = []
            for p in r["peers"].values():
                a = p["at"].get(str(budget))
                peers.append(f"{a['test_accuracy']:.2%} ({json.dumps(a['setting'])})" if a and "test_accuracy" in a
                             else "–")
            lines.append(f"| {budget:g} s | {ours} | {o.get('chosen') or '–'} | {o.get('seconds', 0):,.0f} s | "
                         + " | ".join(peers) + " |")
        lines.append("")
    return "\n".join(lines)


def picture(results: dict, path: Path) -> None:
    """Test accuracy against the budget (log scale), a panel per set: ours and each peer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(results["sets"].items())
    fig, axes = plt.subplots(1, len(sets), figsize=(5 * len(sets), 4), squeeze=False)
    for ax, (name, r) in zip(axes[0], sets):
        budgets = results["budgets"]
        xs = [b for b in budgets if "test_accuracy" in (r["ours"].get(str(b)) or {})]
        ax.plot(xs, [100 * r["ours"][str(b)]["test_accuracy"] for b in xs], "o-", lw=2, label="sentiment train")
        for peer, p in r["peers"].items():
            px = [b for b in budgets if (p["at"].get(str(b)) or {}).get("test_accuracy") is not None]
            ax.plot(px, [100 * p["at"][str(b)]["test_accuracy"] for b in px], "s--", label=PEER_NAMES[peer])
        ax.set_xscale("log")
        ax.set_xticks(budgets, [f"{b / 60:g} min" if b >= 60 else f"{b:g} s" for b in budgets])
        ax.set_title(name)
        ax.set_xlabel("time budget")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"accuracy within a time budget ({results['hardware']}, {results['date']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ----------------------------------------------------------------------------- driver

def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench --budget", description=__doc__.split("\n\n")[0])
    set_arguments(ap, f"shared sets (default: {' '.join(DEFAULT_SETS)}, unless --data is given)",
                  "also these folders, named by their folder")
    ap.add_argument("--budgets", nargs="+", type=float, default=list(BUDGETS), help="seconds (default: %(default)s)")
    ap.add_argument("--picture", default=None, help="also write the picture here (e.g. docs/budget.png)")
    ap.add_argument("--skip-peers", action="store_true", help="ours only")
    ap.add_argument("--ours-from", default=None, help="a results.json of an earlier run (same machine): its runs of "
                                                      "ours are kept, not run again (e.g. IMDB's 30 minutes)")
    args = ap.parse_args(argv)
    if args.job:
        kind, *rest = args.job
        print(json.dumps(job_dev(*rest) if kind == "dev" else job_test(*rest)))
        return
    folders = set_folders(args.sets if args.sets or args.data else list(DEFAULT_SETS), args.data)
    out = Path(args.output or tempfile.mkdtemp(prefix="sentiment-budget-"))
    out.mkdir(parents=True, exist_ok=True)
    results = {**record.header(), "budgets": args.budgets, "sets": {}}
    earlier = json.loads(Path(args.ours_from).read_text())["sets"] if args.ours_from else {}
    for name, folder in folders.items():
        print(f"== {name}", file=sys.stderr, flush=True)
        r = results["sets"][name] = {"data": folder, "ours": {}, "peers": {}}
        for budget in args.budgets:
            known = (earlier.get(name) or {}).get("ours", {}).get(str(budget))
            r["ours"][str(budget)] = known or ours_at(folder, out / f"{name}-{budget:g}", budget)
            record.save(results, out)
        if not args.skip_peers:
            rows = len(splits(folder)["full"][1])
            for peer in ("tfidf", "nbsvm", "fasttext"):
                r["peers"][peer] = peer_at_budgets(peer, folder, args.budgets, rows)
                record.save(results, out)
    record.finish(results, out, markdown)
    if args.picture:
        picture(results, Path(args.picture))
        print(f"picture: {args.picture}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""The multi-label audit on known label-set flips: precision and recall of ``sentiment audit``'s flags.

    python -m bench.audit_multilabel [--rows 10000] [--rate 0.05] [--seed 0] [--output DIR]

A seeded sample of ``--rows`` rows of GoEmotions' training split (``../shared/data/goemotions/train.csv``; all
rows with ``--rows 0``) is written with ``--rate`` of its rows given a wrong label set (:func:`flip_label_sets`:
one of the row's labels dropped and a label it does not carry added, at random), then audited in-process
(``sentiment_cli.audit.run.audit``, no flags), and its flags scored against the flipped rows: precision and
recall at the number flagged, and the share of flipped rows among the top ``k`` for ``k`` = 20, 100 and the number
flipped. Prints one JSON object; writes ``results.json`` to ``--output`` when given.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
GOEMOTIONS = ROOT.parent / "shared" / "data" / "goemotions" / "train.csv"
SEPARATOR = ","


def flip_label_sets(labels: list[list[str]], names: list[str], rate: float, seed: int
                    ) -> tuple[list[list[str]], np.ndarray]:
    """``(noisy labels, flipped row indices)``: ``round(rate * n)`` rows drawn with ``seed`` each lose one of
    their labels (drawn) and gain one they do not carry (drawn uniformly from ``names``); every other row keeps
    its labels. A row keeps at least one label, so the set always changes in two labels.

    Args:
        labels: each row's label names (at least one per row).
        names: every label name.
        rate: the share of rows flipped, in [0, 1].
        seed: the draw's seed.
    """
    rng = np.random.default_rng(seed)
    flipped = np.sort(rng.choice(len(labels), int(round(rate * len(labels))), replace=False))
    out = [list(row) for row in labels]
    for i in flipped.tolist():
        row = out[i]
        drop = row[int(rng.integers(len(row)))]
        others = [n for n in names if n not in row]
        row.remove(drop)
        row.append(others[int(rng.integers(len(others)))])
    return out, flipped


def score(ranked: list[int], flipped: np.ndarray, ks: tuple[int, ...] = (20, 100)) -> dict[str, float]:
    """Precision and recall of the flagged rows (``ranked``, best first) against the ``flipped`` ones, and the
    precision of the top ``k`` for each ``k`` of ``ks`` and for ``k`` = the number flipped."""
    truth = set(flipped.tolist())
    hit = [r in truth for r in ranked]
    tp = sum(hit)
    out = {"flagged": len(ranked), "flipped": len(truth), "true_positives": tp,
           "precision": tp / max(len(ranked), 1), "recall": tp / max(len(truth), 1)}
    out["f1"] = 2 * out["precision"] * out["recall"] / max(out["precision"] + out["recall"], 1e-12)
    for k in (*ks, len(truth)):
        out[f"precision_at_{k}"] = sum(hit[:k]) / max(min(k, len(hit)), 1)
    return out


def noisy_copy(rows: int, rate: float, seed: int, folder: Path) -> tuple[Path, np.ndarray]:
    """Write the sample with flipped label sets to ``folder/train.csv``; ``(path, flipped row indices)``."""
    import pandas as pd

    data = pd.read_csv(GOEMOTIONS)
    if rows and rows < len(data):
        data = data.sample(rows, random_state=seed).reset_index(drop=True)
    labels = [str(v).split(SEPARATOR) for v in data["labels"]]
    names = sorted({n for row in labels for n in row})
    noisy, flipped = flip_label_sets(labels, names, rate, seed)
    data["labels"] = [SEPARATOR.join(row) for row in noisy]
    path = folder / "train.csv"
    data.to_csv(path, index=False)
    return path, flipped


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    from sentiment_cli.audit.run import audit

    with tempfile.TemporaryDirectory() as tmp:
        path, flipped = noisy_copy(args.rows, args.rate, args.seed, Path(tmp))
        start = time.perf_counter()
        result = audit(str(path))
        seconds = time.perf_counter() - start
    record = {"rows": result.summary["rows"], "rate": args.rate, "seed": args.seed, "seconds": round(seconds, 1),
              "folds": result.method["folds"], "C": result.method["C"],
              "out_of_fold_micro_f1": result.method["out_of_fold_micro_f1"],
              **score([f.row for f in result.findings], flipped)}
    print(json.dumps(record, indent=2))
    if args.output:
        args.output.mkdir(parents=True, exist_ok=True)
        (args.output / "results.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":
    main()

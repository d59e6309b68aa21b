"""Dev evidence for the n-gram score's fitted weight (``sentiment_cli/training/score_weight.py``).

    python -m bench.score_weight probe TRAIN DEV OUT [sentiment train options...]
    python -m bench.score_weight analyse OUT.parts.npz ... [--scales 1,1.5,2,3,5]

``probe`` trains the default (``sentiment train --data TRAIN --output OUT``, options passed on) and after
every epoch saves the encoder's and the score's logits on the run's validation rows and on the rows of
``DEV`` (a labelled file no choice sees) to ``OUT.parts.npz``. ``analyse`` takes the epoch the run kept
(validation accuracy, ties to the lower validation loss), chooses the weight as training does, and prints
DEV's accuracy at weight 1 and at the chosen weight. When the validation rows are DEV's own rows (a set
with a dev split), it fits on one half of them and scores the other, both ways. Use dev files only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from bench.parts import logit_parts


def probe(train_file: str, dev_file: str, out: str, train_args: list[str]) -> None:
    """Train with the loop's end of epoch wrapped to save both parts' logits (see the module's docstring)."""
    import pandas as pd

    import sentiment_cli.training.loop as loop
    from sentiment_cli.cli.app import app
    from sentiment_cli.data.tokenizer import encode_texts

    df = pd.read_csv(dev_file)
    text_col = next(c for c in ("text", "sentence", "review") if c in df.columns)
    label_col = next(c for c in ("label", "sentiment") if c in df.columns)
    store: dict[str, np.ndarray] = {}
    end_of_epoch = loop._end_of_epoch

    def probed(run, epoch, totals, validation):
        end_of_epoch(run, epoch, totals, validation)
        names = [str(x) for x in run.data.labels]
        keep = df[df[label_col].astype(str).isin(names)]
        if keep.empty:
            raise SystemExit(f"{dev_file}: no row has one of the run's labels {names}")
        store.setdefault("dev_y", np.array([names.index(str(x)) for x in keep[label_col]]))
        store.setdefault("val_y", np.array(run.data.validation.labels))
        store[f"val_loss_{epoch}"] = np.array(validation[0])
        ids = encode_texts(run.data.tokenizer, keep[text_col].astype(str).tolist(), run.ctx.config.data)
        store[f"dev_enc_{epoch}"], store[f"dev_score_{epoch}"] = logit_parts(run.model, ids)
        store[f"val_enc_{epoch}"], store[f"val_score_{epoch}"] = logit_parts(run.model, run.data.val_ids)
        np.savez(out + ".parts.npz", **store)

    loop._end_of_epoch = probed
    sys.argv = ["sentiment", "train", "--data", train_file, "--output", out, *train_args]
    app()


def _accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    return 100 * float((logits.argmax(1) == y).mean())


def _kept_epoch(z) -> int:
    """The epoch training keeps: the best validation accuracy of the sum, a tie to the lower NLL."""
    from sentiment_cli.evaluation.calibration import nll

    epochs = sorted(int(k.rsplit("_", 1)[1]) for k in z.files if k.startswith("val_enc_"))
    y = z["val_y"]
    ranked = [(_accuracy(z[f"val_enc_{e}"] + z[f"val_score_{e}"], y),
               -nll(z[f"val_enc_{e}"] + z[f"val_score_{e}"], y), -e, e) for e in epochs]
    return max(ranked)[3]


def analyse(path: str, scales: tuple[float, ...]) -> str:
    """One line: the kept epoch, DEV's accuracy at weight 1 and at the chosen one(s), and at every candidate."""
    from sentiment_cli.training.score_weight import choose_scale

    z = np.load(path)
    e = _kept_epoch(z)
    ve, vs, vy = z[f"val_enc_{e}"], z[f"val_score_{e}"], z["val_y"]
    de, ds, dy = z[f"dev_enc_{e}"], z[f"dev_score_{e}"], z["dev_y"]
    grid = "  | every weight on DEV: " + " ".join(f"{s:g}: {_accuracy(de + s * ds, dy):.2f}" for s in scales)
    if not (len(vy) == len(dy) and np.array_equal(vy, dy)):
        s, _ = choose_scale(ve, vs, vy, scales)
        return (f"{path}: epoch {e}, DEV at weight 1 {_accuracy(de + ds, dy):.2f}%, chosen {s:g}: "
                f"{_accuracy(de + s * ds, dy):.2f}%" + grid)
    halves = np.array_split(np.random.default_rng(0).permutation(len(vy)), 2)
    cells = []
    for fit, score in ((0, 1), (1, 0)):
        a, b = halves[fit], halves[score]
        s, _ = choose_scale(ve[a], vs[a], vy[a], scales)
        cells.append(f"weight {s:g}: {_accuracy(de[b] + ds[b], dy[b]):.2f} -> {_accuracy(de[b] + s * ds[b], dy[b]):.2f}")
    return f"{path}: epoch {e}, split halves of dev: " + "; ".join(cells) + grid


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["probe"] and len(argv) >= 4:
        probe(argv[1], argv[2], argv[3], argv[4:])
        return
    ap = argparse.ArgumentParser(prog="python -m bench.score_weight analyse", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["analyse"])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--scales", default=None, help="comma-separated candidates (default: training's)")
    args = ap.parse_args(argv)
    from sentiment_cli.training.score_weight import candidates

    scales = tuple(float(x) for x in args.scales.split(",")) if args.scales else candidates()
    for f in args.files:
        print(analyse(str(f), scales))


if __name__ == "__main__":
    main()

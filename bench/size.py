"""Size against accuracy: a checkpoint compressed at each rung of the ladder, beside fastText full and quantized.

    python -m bench.size CHECKPOINT [--data DIR] [--no-fasttext | --skip-ours] [--output DIR] [--json out.json]

For the checkpoint as trained and for each :func:`~sentiment_cli.model.compress.ladder` rung, the folder is written
as training writes it (``CheckpointRecord.compressed``, ``write_checkpoint``, the card and the curves copied), loaded
back and scored on its validation and test splits: ``model.safetensors``' bytes, the folder's (its own files, no
``trainer_state/``), accuracy and log-loss (after the checkpoint's temperature). Every rung scores the same
weights before pruning, so the differences are the compression's alone.

fastText (Joulin et al. 2017) with word bigrams, as ``bench/suite.py``'s peer: ``lr`` and ``epoch`` chosen on dev
(the same grid), then ``quantize`` (Joulin et al. 2016, "FastText.zip": ``-cutoff N -retrain -qnorm``, product
quantization of the rows) at each cutoff of :data:`CUTOFFS`, scored on dev (fitted on train) and on test (refitted
on the whole training split), with the ``.bin`` and ``.ftz`` sizes. Each fit and each quantization runs in a fresh
process (fastText 0.9.3 can diverge when one process trains twice: ``bench.peers.fasttext_model``).

The last lines apply one rule to both: the smallest model whose dev accuracy is within :data:`TOLERANCE` of its
full model's (the training side's own rule may differ: it reads log-loss).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

CUTOFFS = (0, 200_000, 100_000, 50_000, 20_000, 10_000, 5_000)   # fastText quantize -cutoff (0: no pruning)
TOLERANCE = 0.002   # the issue's: within 0.2 points of the full model


def _score(folder: Path, splits: dict) -> dict:
    """Accuracy and log-loss (after the folder's temperature) of the checkpoint loaded from ``folder`` on each
    split of ``splits`` (``{name: (ids, labels)}``)."""
    import torch

    from sentiment_cli.checkpoint import load_checkpoint
    from sentiment_cli.inference.torch_backend import batched_logits

    ckpt = load_checkpoint(folder)
    out = {}
    for name, (ids, labels) in splits.items():
        logits = batched_logits(ckpt.model, ids, batch_size=128, device=torch.device("cpu"))
        y = torch.as_tensor(labels)
        out[f"{name}_accuracy"] = float((logits.argmax(1) == y).float().mean())
        out[f"{name}_nll"] = float(torch.nn.functional.cross_entropy(logits / ckpt.temperature, y))
    return out


def _splits(checkpoint: Path, data: str | None) -> dict:
    """``{"validation", "test"}``: each split's token ids and labels, as the checkpoint reads them."""
    from sentiment_cli.checkpoint import load_checkpoint
    from sentiment_cli.data.splits import load_split, scoring_spec
    from sentiment_cli.data.tokenizer import encode_texts

    ckpt = load_checkpoint(checkpoint)
    out = {}
    for split in ("validation", "test"):
        spec = scoring_spec(ckpt.config, split, data, single_file_hint="give --data DIR")
        rows = load_split(spec, split, label_names=ckpt.labels)
        out[split] = (encode_texts(ckpt.tokenizer, list(rows.texts), ckpt.config.data), list(rows.labels))
    return out


def _folder_bytes(folder: Path) -> int:
    """Bytes of the files directly in ``folder`` (no ``trainer_state/``)."""
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


def ours(checkpoint: Path, out: Path, data: str | None) -> list[dict]:
    """The checkpoint as trained, then each ladder rung: written to ``out``, loaded back, sized and scored."""
    from sentiment_cli.card.readme import write_card
    from sentiment_cli.checkpoint import read_record, write_checkpoint
    from sentiment_cli.model.compress import ladder
    from sentiment_cli.training.policy import DEFAULT

    splits, record, rows = _splits(checkpoint, data), read_record(checkpoint), []
    for i, c in enumerate((None, *ladder(DEFAULT.ship.rungs, DEFAULT.ship.bits or None))):
        folder = out / ("full" if c is None else f"rung{i}")
        shutil.rmtree(folder, ignore_errors=True)
        write_checkpoint(folder, record if c is None else record.compressed(c))
        for extra in ("curves.png",):
            if (checkpoint / extra).exists():
                shutil.copy(checkpoint / extra, folder / extra)
        write_card(folder)
        rows.append({"model": "ours", "setting": "full" if c is None else c.describe(),
                     "compression": None if c is None else c.record()["keep"] | {"bits": c.bits},
                     "weights_bytes": (folder / "model.safetensors").stat().st_size,
                     "folder_bytes": _folder_bytes(folder), **_score(folder, splits)})
        print(_line(rows[-1]), file=sys.stderr, flush=True)
    _mark_shipped(rows, record, splits)
    return rows


def _mark_shipped(rows: list[dict], record, splits: dict) -> None:
    """Mark the rung training's own rule ships (``training/shipping.py``: the smallest within the policy's margin or
    one paired standard error of the full model's validation log-loss) with ``"shipped": True``: what
    ``sentiment train`` with no flag writes from these weights."""
    import torch

    from sentiment_cli.training import shipping
    from sentiment_cli.training.policy import DEFAULT

    val_ids, val_labels = splits["validation"]
    shipped = shipping.ship(record, val_ids, val_labels, DEFAULT.ship, torch.device("cpu"), 64)
    chosen = (shipped.metrics.get("compression") or {}).get("chosen_name", "full")
    for r in rows:
        r["shipped"] = r["setting"] == chosen


def job_fit(folder: str, setting: str, split: str, path: str) -> dict:
    """One fastText fit (a fresh process) with ``setting``: on train scored on dev, or on the whole training split
    scored on test; the model saved at ``path`` (``.bin``)."""
    import numpy as np

    from bench.peers import fasttext_model, fasttext_text
    from bench.suite import splits

    data = splits(folder)
    train, evaluated = (data["train"], data["dev"]) if split == "dev" else (data["full"], data["test"])
    model = fasttext_model(*train, **json.loads(setting))
    model.save_model(path)
    labels, _ = model.predict([fasttext_text(t) for t in evaluated[0]])
    predicted = np.array([int(lab[0][len("__label__"):]) for lab in labels])
    return {f"{split}_accuracy": float((predicted == evaluated[1]).mean()), "bytes": Path(path).stat().st_size}


def job_quantize(folder: str, setting: str, split: str, path: str, cutoff: str) -> dict:
    """fastText's ``quantize -cutoff N -retrain -qnorm`` (a fresh process) of the model at ``path``, retrained on
    the split it was fitted on, scored on dev or test; its ``.ftz`` size."""
    import fasttext
    import numpy as np

    from bench.peers import fasttext_text
    from bench.suite import splits

    data = splits(folder)
    train, evaluated = (data["train"], data["dev"]) if split == "dev" else (data["full"], data["test"])
    params = json.loads(setting)
    with tempfile.TemporaryDirectory(prefix="bench-size-") as tmp:
        text = Path(tmp) / "train.txt"
        text.write_text("".join(f"__label__{int(y)} {fasttext_text(t)}\n" for t, y in zip(*train)), encoding="utf-8")
        model = fasttext.load_model(path)
        model.quantize(input=str(text), cutoff=int(cutoff), retrain=True, qnorm=True, thread=1,
                       epoch=params["epoch"], lr=params["lr"], verbose=0)
        ftz = Path(tmp) / "model.ftz"
        model.save_model(str(ftz))
        labels, _ = model.predict([fasttext_text(t) for t in evaluated[0]])
        predicted = np.array([int(lab[0][len("__label__"):]) for lab in labels])
        return {f"{split}_accuracy": float((predicted == evaluated[1]).mean()), "bytes": ftz.stat().st_size}


def fasttext_rows(folder: str, out: Path) -> list[dict]:
    """fastText tuned on dev (``bench.suite``'s grid), full, then quantized at each of :data:`CUTOFFS`."""
    from bench.processes import job
    from bench.suite import FASTTEXT_GRID

    dev = {json.dumps(g): job("fit", folder, json.dumps(g), "dev", str(out / "ft-dev.bin"), module="bench.size")
           for g in FASTTEXT_GRID}
    best = max(FASTTEXT_GRID, key=lambda g: dev[json.dumps(g)].get("dev_accuracy", -1.0))
    setting = json.dumps(best)
    fits = {split: job("fit", folder, setting, split, str(out / f"ft-{split}.bin"), module="bench.size")
            for split in ("dev", "test")}
    rows = [{"model": "fastText", "setting": f"full, {setting}", "weights_bytes": fits["test"].get("bytes"),
             "validation_accuracy": fits["dev"].get("dev_accuracy"),
             "test_accuracy": fits["test"].get("test_accuracy")}]
    for cutoff in CUTOFFS:
        q = {split: job("quantize", folder, setting, split, str(out / f"ft-{split}.bin"), str(cutoff),
                        module="bench.size") for split in ("dev", "test")}
        rows.append({"model": "fastText", "setting": f"quantize -cutoff {cutoff} -retrain -qnorm",
                     "weights_bytes": q["test"].get("bytes"), "validation_accuracy": q["dev"].get("dev_accuracy"),
                     "test_accuracy": q["test"].get("test_accuracy")})
        print(_line(rows[-1]), file=sys.stderr, flush=True)
    return rows


def smallest_within(rows: list[dict], tolerance: float = TOLERANCE) -> dict | None:
    """Of one system's ``rows`` (its full model first), the smallest whose validation accuracy is within
    ``tolerance`` of the full model's; ``None`` when the full model has no validation figure."""
    full = rows[0].get("validation_accuracy") if rows else None
    if full is None:
        return None
    fits = [r for r in rows if (r.get("validation_accuracy") or -1) >= full - tolerance - 1e-12
            and r.get("weights_bytes")]
    return min(fits, key=lambda r: r["weights_bytes"]) if fits else None


def _mb(n) -> str:
    return "-" if n is None else f"{n / 1e6:.2f}"


def _pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.2f}"


def _line(r: dict) -> str:
    """One row in the printed table."""
    return (f"{r['model']:<9} {_mb(r.get('weights_bytes')):>8} {_mb(r.get('folder_bytes')):>8} "
            f"{_pct(r.get('validation_accuracy')):>7} {_pct(r.get('test_accuracy')):>7}  {r['setting']}")


def report(rows: list[dict]) -> str:
    """The table (MB, accuracy in %) and each system's smallest model within :data:`TOLERANCE` on dev."""
    head = f"{'model':<9} {'weights':>8} {'folder':>8} {'val %':>7} {'test %':>7}  setting (sizes in MB)"
    lines = [head] + [_line(r) for r in rows]
    shipped = [r for r in rows if r.get("shipped")]
    if shipped:
        from sentiment_cli.training.policy import DEFAULT

        lines.append(f"ours: shipped by training's rule ({DEFAULT.ship.margin:g} nats or one standard error of "
                     "validation log-loss): "
                     f"{shipped[0]['setting']} ({_mb(shipped[0]['weights_bytes'])} MB, folder "
                     f"{_mb(shipped[0]['folder_bytes'])} MB, test {_pct(shipped[0].get('test_accuracy'))}%)")
    for system in ("ours", "fastText"):
        pick = smallest_within([r for r in rows if r["model"] == system])
        if pick:
            lines.append(f"{system}: smallest within {TOLERANCE:.1%} of the full model's dev accuracy: "
                         f"{pick['setting']} ({_mb(pick['weights_bytes'])} MB, "
                         f"test {_pct(pick.get('test_accuracy'))}%)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse the options; size and score every rung (and fastText's), print the table, write ``--json``."""
    ap = argparse.ArgumentParser(prog="python -m bench.size", description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path, nargs="?")
    ap.add_argument("--data", default=None, help="the labelled set (default: the checkpoint's own source)")
    ap.add_argument("--no-fasttext", action="store_true", help="our rungs only")
    ap.add_argument("--skip-ours", action="store_true", help="fastText's rows only")
    ap.add_argument("--output", type=Path, default=None, help="keep the folders here (default: a temp folder)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--job", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.job:   # inside a job process: one JSON line
        kind, *rest = args.job
        print(json.dumps(job_fit(*rest) if kind == "fit" else job_quantize(*rest)))
        return
    if args.checkpoint is None:
        ap.error("give the checkpoint folder")
    out = args.output or Path(tempfile.mkdtemp(prefix="bench-size-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = [] if args.skip_ours else ours(args.checkpoint, out, args.data)
    if not args.no_fasttext:
        from sentiment_cli.checkpoint import read_config

        rows += fasttext_rows(args.data or read_config(args.checkpoint)[0].data.source, out)
    print(report(rows))
    if args.json:
        args.json.write_text(json.dumps({"checkpoint": str(args.checkpoint), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""The outputs a refactor must not change: train each preset on a committed slice, then record what users get.

    python -m bench.outputs [--output FILE] [--compare FILE] [--presets seed,default,sst5,gpu,multilabel,search]

For each preset, a multi-label run and a search run (the data rules, no ``--config``), a short run on a
committed slice (``tests/data``) with one thread, then:

- the sha256 of ``model.safetensors`` (the weights, bit for bit) and of the tokenizer;
- ``eval --json`` on the test split (timings left out);
- ``predict --explain --json`` on a few sentences;
- ``export --format onnx`` (the parity gate against PyTorch) and ``predict --onnx --json`` on the same sentences.

``--output`` writes the record as JSON; ``--compare`` reads an earlier record and prints a table of what matches
(exit 1 if anything differs). Used before and after a redesign: the closing note's before/after table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
TEXTS = ["This is not a good movie.", "A wonderful, moving film with a great cast.",
         "The plot was dull and the acting was terrible.", "It was fine, I guess."]

# preset -> (data, extra command-line arguments): small enough for minutes on 2 cores, every stage still runs.
RUNS = {
    "seed": (DATA / "imdb_small", ["--epochs", "2"]),
    "default": (DATA / "imdb_small", ["--epochs", "2", "--set", "pretrain.epochs=1", "--set", "data.vocab_size=5000",
                                      "--set", "model.ngram_buckets=65536", "--set", "training.distill_reviews=200",
                                      "--unlabelled", str(DATA / "reviews_small" / "reviews.jsonl")]),
    "sst5": (DATA / "sst5_small", ["--epochs", "2"]),
    "gpu": (DATA / "imdb_small", ["--epochs", "1", "--set", "pretrain.epochs=1", "--set", "data.vocab_size=5000",
                                  "--set", "model.ngram_buckets=65536", "--set", "training.distill_reviews=0",
                                  "--set", "data.max_length=128", "--set", "model.n_layers=2", "--set", "pretrain.splits=train"]),
    # no --config: the data rules (auto.py) on a multi-label slice and on a two-class one; the second searches on
    # validation with a budget no trial reaches (every trial runs its whole schedule: the record does not
    # depend on the machine's speed), MAX_TRIALS trials at most
    "multilabel": (DATA / "goemotions_small", ["--time-budget", "0", "--epochs", "2"]),
    "search": (DATA / "imdb_small", ["--time-budget", "100000", "--set", "model.ngram_buckets=65536",
                                     "--set", "data.max_length=64", "--set", "data.vocab_size=2000",
                                     "--set", "training.epochs=1", "--set", "training.init_from=",
                                     "--set", "training.adversarial_epsilon=0"]),
}
THREADS = ["--set", "training.threads=1"]   # float sums in one order: the weights do not depend on the load
NO_CONFIG = {"multilabel", "search"}
TIMING_KEYS = {"examples_per_second", "checkpoint"}   # eval's speed and the run's temp folder: differ run to run


def _cli(*args: str, cwd: Path) -> str:
    """Run ``sentiment ARGS`` in ``cwd``; its stdout. Raises ``RuntimeError`` with stderr on a non-zero exit."""
    env = {**os.environ, "COLUMNS": "200"}
    r = subprocess.run([sys.executable, "-m", "sentiment_cli", *args], cwd=cwd, env=env, capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError(f"sentiment {' '.join(args)}: exit {r.returncode}\n{r.stderr[-3000:]}")
    return r.stdout


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _strip_timings(value):
    """A JSON value without the keys of :data:`TIMING_KEYS` (they differ between any two runs)."""
    if isinstance(value, dict):
        return {k: _strip_timings(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [_strip_timings(v) for v in value]
    return value


def record_preset(preset: str, work: Path) -> dict:
    """Train ``preset`` into ``work`` and record its outputs (see the module docstring)."""
    data, extra = RUNS[preset]
    out = work / preset
    start = time.perf_counter()
    init = ["--set", f"training.init_from={work / ('pretrained-' + preset)}"] if preset in ("default", "gpu") else []
    config = [] if preset in NO_CONFIG else ["--config", preset]
    _cli("train", *config, "--data", str(data), "--output", str(out), *init, *THREADS, *extra, cwd=work)
    seconds = time.perf_counter() - start
    ck = str(out)
    evaluation = _strip_timings(json.loads(_cli("eval", "--checkpoint", ck, "--json", cwd=work)))
    explained = [json.loads(line) for line in
                 _cli("predict", "--checkpoint", ck, "--explain", "--json", *TEXTS, cwd=work).splitlines()]
    _cli("export", "--format", "onnx", "--checkpoint", ck, "--parity-reviews", "200", cwd=work)
    onnx = [json.loads(line) for line in
            _cli("predict", "--checkpoint", ck, "--onnx", "--json", *TEXTS, cwd=work).splitlines()]
    return {"weights_sha256": _sha256(out / "model.safetensors"), "tokenizer_sha256": _sha256(out / "tokenizer.json"),
            "eval": evaluation, "predict_explain": explained, "onnx_predict": onnx, "train_seconds": round(seconds, 1)}


def compare(before: dict, after: dict) -> list[tuple[str, str, str]]:
    """Rows (preset, output, "identical" or what differs) for every output of the presets both records hold."""
    rows = []
    for preset, new in after.items():
        old = before.get(preset)
        for key in ("weights_sha256", "tokenizer_sha256", "eval", "predict_explain", "onnx_predict"):
            if old is None:
                rows.append((preset, key, "missing"))
            elif _strip_timings(old[key]) == _strip_timings(new[key]):
                shown = old[key][:12] + "…" if key.endswith("sha256") else "identical"
                rows.append((preset, key, f"identical ({shown})" if key.endswith("sha256") else shown))
            else:
                rows.append((preset, key, "DIFFERS"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.outputs", description=__doc__.split("\n")[0])
    parser.add_argument("--output", type=Path, help="write the record here (JSON)")
    parser.add_argument("--compare", type=Path, help="an earlier record: print what matches; exit 1 if not all")
    parser.add_argument("--presets", default=",".join(RUNS))
    args = parser.parse_args(argv)
    record = {}
    with tempfile.TemporaryDirectory(prefix="bench-outputs-") as tmp:
        for preset in args.presets.split(","):
            record[preset] = record_preset(preset, Path(tmp))
            print(f"{preset}: trained in {record[preset]['train_seconds']} s, "
                  f"weights {record[preset]['weights_sha256'][:12]}…", flush=True)
            if args.output:   # after each preset: a failure later keeps what was recorded
                args.output.write_text(json.dumps(record, indent=1) + "\n")
    if args.compare:
        rows = compare(json.loads(args.compare.read_text()), record)
        print("| preset | output | after vs before |\n|---|---|---|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return 0 if all("DIFFERS" not in r[2] and r[2] != "missing" for r in rows) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

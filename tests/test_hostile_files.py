"""Files a command writes or reads (issue 44): no command writes over its own input or a checkpoint's files,
an existing file is replaced only with --force, a bad name is one `error:` line before any work, and
`audit` reads every CSV that `train` reads.
"""

from __future__ import annotations

import csv
import json
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sentiment_cli.cli import app

from .conftest import ROOT, SMALL_DATA
from .test_hostile import assert_one_error_line

REVIEWS = ROOT / "tests" / "data" / "reviews_small" / "reviews.csv"   # 600 IMDB reviews: review, sentiment
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _rows(n: int) -> list[dict[str, str]]:
    """The first ``n`` rows of the committed 600 reviews (``review``, ``sentiment``)."""
    with open(REVIEWS, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))[:n]


def _write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.fixture
def checkpoint_copy(trained_checkpoint, tmp_path) -> Path:
    """A copy of the session's checkpoint, for commands that may write into it."""
    return Path(shutil.copytree(trained_checkpoint, tmp_path / "ck"))


# ---------------------------------------------------------------------------- export

@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "tokenizer.json", "README.md"])
def test_export_never_writes_over_the_checkpoints_files(checkpoint_copy, name):
    before = _snapshot(checkpoint_copy)
    r = invoke("export", "--format", "onnx", "--checkpoint", checkpoint_copy, "--output", checkpoint_copy / name,
               "--parity-reviews", 20, "--force")
    assert_one_error_line(r, 2, f"--output {checkpoint_copy / name}: would write into the checkpoint folder")
    assert _snapshot(checkpoint_copy) == before
    r = invoke("predict", "--checkpoint", checkpoint_copy, "a fine film", "--json")
    assert r.exit_code == 0, r.output


def test_export_onto_a_folder_is_refused_up_front_naming_it(trained_checkpoint, tmp_path):
    start = time.perf_counter()
    r = invoke("export", "--format", "onnx", "--checkpoint", trained_checkpoint, "--output", tmp_path)
    assert_one_error_line(r, 2, f"--output {tmp_path}: is a folder; give a file name")
    assert ".export-" not in r.stderr and time.perf_counter() - start < 5


def test_export_replaces_a_file_that_is_not_an_export_only_with_force(trained_checkpoint, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    r = invoke("export", "--format", "onnx", "--checkpoint", trained_checkpoint, "--output", notes)
    assert_one_error_line(r, 2, "the file exists; pass --force")
    assert notes.read_text() == "keep me"


# ---------------------------------------------------------------------------- audit

@pytest.fixture
def small_csv(tmp_path) -> Path:
    return _write_csv(tmp_path / "data.csv", _rows(60))


def test_audit_never_writes_over_its_data_even_with_force(small_csv):
    before = small_csv.read_bytes()
    for force in ([], ["--force"]):
        r = invoke("audit", "--data", small_csv, "--folds", 2, "--output", small_csv, *force)
        assert_one_error_line(r, 2, f"--output {small_csv}: would write over --data {small_csv}")
        assert small_csv.read_bytes() == before
    link = small_csv.parent / "link.csv"       # nor under another name
    link.symlink_to(small_csv)
    r = invoke("audit", "--data", small_csv, "--folds", 2, "--output", link, "--force")
    assert_one_error_line(r, 2, "would write over --data")
    assert small_csv.read_bytes() == before


def test_audit_replaces_an_existing_output_only_with_force(small_csv, tmp_path):
    out = tmp_path / "flagged.csv"
    out.write_text("mine\n")
    r = invoke("audit", "--data", small_csv, "--folds", 2, "--output", out)
    assert_one_error_line(r, 2, f"--output {out}: the file exists; pass --force to replace it")
    assert out.read_text() == "mine\n"
    r = invoke("audit", "--data", small_csv, "--folds", 2, "--top", 0, "--output", out, "--force")
    assert r.exit_code == 0, r.output
    with open(out, encoding="utf-8", newline="") as fh:
        assert list(csv.DictReader(fh))[0].keys() >= {"review", "sentiment", "rank", "suggested"}


def test_audit_reads_a_csv_field_over_128_kib_as_train_does(tmp_path):
    rows = _rows(60)
    rows[3]["review"] = "a long and tedious film, " * 8_000          # 200,000 characters in one field
    assert len(rows[3]["review"]) > 128 * 1024
    data = _write_csv(tmp_path / "long.csv", rows)
    r = invoke("audit", "--data", data, "--folds", 2, "--top", 60, "--json")
    assert r.exit_code == 0, r.output
    *findings, warnings = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert set(warnings) == {"warnings"}                                   # the last line: the audit's warnings
    assert findings and all(f["file"] == str(data) for f in findings)     # rows located by their lines


# ---------------------------------------------------------------------------- seeds

@pytest.mark.parametrize("args, message", [
    (["--seed", 2**32], "command line: [training] seed must be <= 4294967295, got 4294967296"),
    (["--seed", -1], "command line: [training] seed must be >= 0, got -1"),
    (["--set", f"training.seed={2**32}"], "[training] seed must be <= 4294967295, got 4294967296"),
    (["--set", "training.seed=-1"], "[training] seed must be >= 0, got -1"),
])
def test_train_refuses_a_seed_outside_0_to_2_32_before_making_its_folder(tmp_path, args, message):
    out = tmp_path / "out"
    r = invoke("train", "--config", "seed", "--data", SMALL_DATA, "--epochs", 1, "-o", out, *args)
    assert_one_error_line(r, 2, message)
    assert not out.exists()


def test_the_largest_seed_is_accepted():
    from sentiment_cli.config import build_config

    assert build_config("seed", [f"training.seed={2**32 - 1}"]).training.seed == 2**32 - 1


def test_train_leaves_no_empty_folder_when_it_fails_before_writing(tmp_path):
    out = tmp_path / "out"
    r = invoke("train", "--config", "seed", "--data", tmp_path / "missing.csv", "-o", out)
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert not out.exists()


def test_suggest_refuses_a_negative_seed_before_scoring(trained_checkpoint, tmp_path):
    pool = _write_csv(tmp_path / "pool.csv", _rows(30))
    r = invoke("suggest", "--checkpoint", trained_checkpoint, "--unlabelled", pool, "--strategy", "diverse",
               "--seed", -1, "-n", 3, "-o", tmp_path / "s.csv")
    assert_one_error_line(r, 2, "Invalid value for '--seed'")
    assert not (tmp_path / "s.csv").exists()


def test_the_suggest_library_refuses_a_seed_outside_the_range(trained_checkpoint):
    from sentiment_cli.suggest.run import suggest
    from sentiment_cli.errors import UsageError
    from sentiment_cli.inference.predictor import Predictor

    with pytest.raises(UsageError, match="--seed must be from 0 to 4294967295, got -1"):
        suggest(Predictor(trained_checkpoint), ["a fine film"] * 5, 2, "diverse", seed=-1)


# ---------------------------------------------------------------------------- suggest's columns and output

@pytest.fixture
def pool(tmp_path) -> Path:
    rows = [{"id": str(i), "review": r["review"], "note": f"n{i}"} for i, r in enumerate(_rows(200))]
    return _write_csv(tmp_path / "pool.csv", rows)


def test_suggest_text_column_must_be_a_column(trained_checkpoint, pool, tmp_path):
    r = invoke("suggest", "--checkpoint", trained_checkpoint, "--unlabelled", pool, "--text-column", "nope",
               "-o", tmp_path / "s.csv")
    assert_one_error_line(r, 2, "no column 'nope'")
    labelled = _write_csv(tmp_path / "labelled.csv", [{"text": "a fine film"}])
    r = invoke("suggest", "--checkpoint", trained_checkpoint, "--unlabelled", pool, "--text-column", "review",
               "--labelled", labelled, "-o", tmp_path / "s.csv")
    assert_one_error_line(r, 2, f"--labelled {labelled}: no column 'review'")


def test_suggest_writes_json_lines_that_train_reads(trained_checkpoint, pool, tmp_path):
    out = tmp_path / "picks.jsonl"
    r = invoke("suggest", "--checkpoint", trained_checkpoint, "--unlabelled", pool, "-n", 60, "-o", out)
    assert r.exit_code == 0, r.output
    picks = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(picks) == 60 and list(picks[0])[:3] == ["text", "label", "rank"]
    assert all(p["label"] == "" and isinstance(p["margin"], float) for p in picks)
    truth = {r["review"]: {"pos": "positive", "neg": "negative"}[r["sentiment"]] for r in _rows(200)}
    filled = tmp_path / "filled.jsonl"
    filled.write_text("".join(json.dumps({**p, "label": truth[p["text"]]}) + "\n" for p in picks), encoding="utf-8")
    r = invoke("train", "--config", "seed", "--epochs", 1, "--data", filled, "-o", tmp_path / "model", "--json")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("name, message", [
    ("picks.txt", "write .csv or .jsonl (the suffix chooses the format)"),
    ("picks", "write .csv or .jsonl"),
])
def test_suggest_refuses_an_output_suffix_it_cannot_write(trained_checkpoint, pool, tmp_path, name, message):
    r = invoke("suggest", "--checkpoint", trained_checkpoint, "--unlabelled", pool, "-o", tmp_path / name)
    assert_one_error_line(r, 2, message)
    assert not (tmp_path / name).exists()


def test_suggest_never_writes_over_what_it_reads(trained_checkpoint, pool, tmp_path):
    before = pool.read_bytes()
    r = invoke("suggest", "--checkpoint", trained_checkpoint, "--unlabelled", pool, "-o", pool, "--force")
    assert_one_error_line(r, 2, f"--output {pool}: would write over --unlabelled {pool}")
    assert pool.read_bytes() == before


# ---------------------------------------------------------------------------- eval's records

def test_eval_on_other_data_keeps_the_full_test_result_as_the_headline(checkpoint_copy, tmp_path):
    from sentiment_cli.card.facts import model_card

    other = _write_csv(tmp_path / "other.csv", [{"text": r["review"],
                                                 "label": {"pos": "positive", "neg": "negative"}[r["sentiment"]]}
                                                for r in _rows(40)])
    assert invoke("eval", "--checkpoint", checkpoint_copy).exit_code == 0
    r = invoke("eval", "--checkpoint", checkpoint_copy, "--data", other)
    assert r.exit_code == 0, r.output
    metrics = model_card(checkpoint_copy)["metrics"]
    assert metrics["test"]["num_examples"] == 500 and "data" in metrics["test"]
    assert metrics["test, other.csv"]["num_examples"] == 40 and metrics["test, other.csv"]["data"] == str(other)
    r = invoke("info", "--checkpoint", checkpoint_copy)
    assert r.exit_code == 0 and "test, other.csv" in r.stdout

"""``sentiment predict --data``: a whole split scored, every input column kept, streamed and written atomically."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sentiment_cli.cli import app
from sentiment_cli.data.batches import open_split
from sentiment_cli.inference.predictor import Predictor

from .conftest import GOEMOTIONS_SMALL, SMALL_DATA

runner = CliRunner()
TEST_PARQUET = next((SMALL_DATA / "plain_text").glob("test-*.parquet"))


def invoke(*args):
    return runner.invoke(app, ["predict", *map(str, args)])


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    """1,500 unlabelled reviews with an id column (Parquet): more than one batch of 1,024 rows."""
    texts = pq.read_table(TEST_PARQUET).column("text").to_pylist()
    texts = (texts * 3)[:1500]
    path = tmp_path_factory.mktemp("data") / "reviews.parquet"
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(len(texts))], "text": texts}), path)
    return path


def test_parquet_keeps_ids_and_matches_the_predictor(reviews, trained_checkpoint, tmp_path):
    out = tmp_path / "scored.parquet"
    r = invoke("--data", reviews, "--checkpoint", trained_checkpoint, "--output", out)
    assert r.exit_code == 0, r.output
    got = pq.read_table(out)
    given = pq.read_table(reviews)
    assert got.column_names == ["id", "text", "label", "probability", "p_negative", "p_positive"]
    assert got.column("id").to_pylist() == given.column("id").to_pylist()
    p = Predictor(trained_checkpoint)
    texts = given.column("text").to_pylist()
    want = p.predict_proba(texts)
    probs = np.stack([got.column("p_negative").to_numpy(), got.column("p_positive").to_numpy()], axis=1)
    np.testing.assert_allclose(probs, want, atol=1e-6)
    assert got.column("label").to_pylist() == [x.label for x in p.predict(texts)]
    np.testing.assert_allclose(got.column("probability").to_numpy(), want.max(axis=1), atol=1e-6)


def test_jsonl_on_stdout_and_csv_file_agree(trained_checkpoint, tmp_path):
    r = invoke("--data", TEST_PARQUET, "--checkpoint", trained_checkpoint)
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.split("\n") if line]   # not splitlines: U+2028 is in texts
    assert len(rows) == pq.read_metadata(TEST_PARQUET).num_rows
    # the labelled file's own label column is kept; the prediction's is predicted_label
    assert {"text", "label", "predicted_label", "probability", "p_negative", "p_positive"} <= rows[0].keys()
    out = tmp_path / "scored.csv"
    assert invoke("--data", TEST_PARQUET, "--checkpoint", trained_checkpoint, "-o", out).exit_code == 0
    import csv
    with open(out, newline="", encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    assert [t["predicted_label"] for t in table] == [x["predicted_label"] for x in rows]
    assert [t["text"] for t in table] == [x["text"] for x in rows]   # texts with newlines and quotes survive


def test_multi_label_writes_label_sets(multilabel_checkpoint, tmp_path):
    out = tmp_path / "scored.jsonl"
    r = invoke("--data", GOEMOTIONS_SMALL, "--split", "test", "--checkpoint", multilabel_checkpoint, "-o", out,
               "--explain")
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").split("\n") if line]
    p = Predictor(multilabel_checkpoint)
    want = p.predict([row["text"] for row in rows[:50]])
    assert [row["predicted_labels"] for row in rows[:50]] == [w.labels for w in want]
    assert all(f"p_{label}" in rows[0] for label in p.labels)
    assert [e["label"] for e in rows[0]["top_tokens"]] == rows[0]["predicted_labels"]


def test_explain_adds_the_top_tokens(trained_checkpoint, tmp_path):
    out = tmp_path / "scored.parquet"
    assert invoke("--data", TEST_PARQUET, "--checkpoint", trained_checkpoint, "-o", out, "--explain").exit_code == 0
    tokens = pq.read_table(out).column("top_tokens").to_pylist()
    assert len(tokens) == pq.read_metadata(TEST_PARQUET).num_rows
    assert all(len(t) <= 5 for t in tokens) and sum(map(len, tokens)) > 0


def test_existing_output_needs_force(reviews, trained_checkpoint, tmp_path):
    out = tmp_path / "scored.csv"
    out.write_text("precious\n")
    r = invoke("--data", reviews, "--checkpoint", trained_checkpoint, "-o", out)
    assert r.exit_code != 0 and "--force" in r.output
    assert out.read_text() == "precious\n"
    assert invoke("--data", reviews, "--checkpoint", trained_checkpoint, "-o", out, "--force").exit_code == 0
    assert out.read_text().startswith('"id","text","label"')


def test_a_failed_run_leaves_no_half_file(reviews, trained_checkpoint, tmp_path):
    """A blank text after the first batch was written: the error names its row, no output file appears,
    and an existing one (with --force) stays as it was."""
    table = pq.read_table(reviews)
    texts = table.column("text").to_pylist()
    texts[1200] = "   "
    bad = tmp_path / "bad.parquet"
    pq.write_table(table.set_column(1, "text", pa.array(texts)), bad)
    out = tmp_path / "scored.parquet"
    r = invoke("--data", bad, "--checkpoint", trained_checkpoint, "-o", out)
    assert r.exit_code != 0 and "row 1201" in r.output, r.output
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]
    out.write_bytes(b"old")
    r = invoke("--data", bad, "--checkpoint", trained_checkpoint, "-o", out, "--force")
    assert r.exit_code != 0 and out.read_bytes() == b"old"


def test_null_text_names_its_row(trained_checkpoint, tmp_path):
    path = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["good", None, "bad"]}), path)
    r = invoke("--data", path, "--checkpoint", trained_checkpoint)
    assert r.exit_code != 0 and "row 2" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("args, message", [
    (["--data", SMALL_DATA], "choose one with --split"),
    (["--data", SMALL_DATA, "--split", "nope"], "no split 'nope'"),
    (["--data", TEST_PARQUET, "--text-column", "nope"], "no column 'nope'"),
    (["--data", TEST_PARQUET, "-o", "out.txt"], ".parquet"),
    (["some text", "--split", "test"], "--split goes with --data"),
    (["some text", "--data", TEST_PARQUET], "one of them"),
])
def test_bad_usage_is_one_line(args, message, trained_checkpoint):
    r = invoke(*args, "--checkpoint", trained_checkpoint)
    assert r.exit_code != 0 and message in r.output, r.output
    assert "Traceback" not in r.output


def test_batches_stream_every_row_in_order():
    stream = open_split(str(SMALL_DATA), "test")
    sizes, ids = [], []
    for table in stream.batches(128):
        sizes.append(table.num_rows)
        ids += table.column("text").to_pylist()
    assert max(sizes) == 128 and sum(sizes) == stream.num_rows
    assert ids == pq.read_table(TEST_PARQUET).column("text").to_pylist()


@pytest.mark.slow   # starts a local Ray cluster
def test_ray_from_the_command_line_matches_one_process(reviews, trained_checkpoint, tmp_path):
    pytest.importorskip("ray")
    folder = tmp_path / "in"
    folder.mkdir()
    table = pq.read_table(reviews).slice(0, 600)
    pq.write_table(table.slice(0, 300), folder / "part-0.parquet")
    pq.write_table(table.slice(300), folder / "part-1.parquet")
    out = tmp_path / "scored"
    r = invoke("--data", folder, "--output", out, "--ray", "--workers", "1", "--checkpoint", trained_checkpoint)
    assert r.exit_code == 0, r.output
    import pyarrow.dataset as pds
    got = pds.dataset(out).to_table().sort_by("id")
    one = tmp_path / "one.parquet"
    assert invoke("--data", folder / "part-0.parquet", "-o", one, "--checkpoint", trained_checkpoint).exit_code == 0
    want = pq.read_table(one).sort_by("id")
    first = got.filter(pa.compute.is_in(got.column("id"), value_set=want.column("id")))
    assert got.num_rows == 600 and first.column("label").to_pylist() == want.column("label").to_pylist()
    np.testing.assert_allclose(first.column("p_positive").to_numpy(), want.column("p_positive").to_numpy(), atol=1e-6)


def test_ray_options_need_ray(trained_checkpoint):
    r = invoke("--data", TEST_PARQUET, "--workers", "2", "--checkpoint", trained_checkpoint)
    assert r.exit_code != 0 and "go with --ray" in r.output

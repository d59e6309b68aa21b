"""``predict --data --ray``: Ray Data's read -> map_batches -> write_parquet gives, row for row, what
:func:`~sentiment_cli.inference.table.score_table` gives in one process; and the checks made before Ray runs.

The Ray tests start a local cluster of 2 CPUs once (a module fixture) and are marked slow (each run starts
two workers that load the checkpoint); they are skipped where Ray is not installed (the ``ray`` extra, part
of the ``test`` extra).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from sentiment_cli.errors import DataError, UsageError
from sentiment_cli.inference import ray_predict
from sentiment_cli.inference.ray_predict import OutputFolder, find_input, predict_with_ray, worker_plan
from sentiment_cli.inference.table import score_table

DATA = Path(__file__).resolve().parent / "data"
ROWS = 300


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of 2 CPUs for this module's tests, shut down after them."""
    ray = pytest.importorskip("ray", reason="the ray extra is part of the test extra: pip install -e '.[test]'")
    pytest.importorskip("ray.data")
    import logging

    ray.init(address="local", num_cpus=2, log_to_driver=False, include_dashboard=False,
             logging_level=logging.ERROR)
    yield ray
    ray.shutdown()


def imdb_rows() -> pa.Table:
    """:data:`ROWS` test reviews of the committed IMDB slice with an ``id`` column (not in row order) and the
    label kept: the input has columns the model does not read."""
    table = pq.read_table(next((DATA / "imdb_small" / "plain_text").glob("test-*.parquet"))).slice(0, ROWS)
    ids = pa.array(np.random.default_rng(0).permutation(10 * ROWS)[:ROWS].astype(np.int64))
    return pa.table({"id": ids, "review": table.column("text"), "label": table.column("label")})


def write_parts(table: pa.Table, folder: Path, suffix: str = ".parquet") -> Path:
    """``table`` split over two files in ``folder`` (Parquet or CSV), in order."""
    folder.mkdir()
    half = table.num_rows // 2
    for k, part in enumerate((table.slice(0, half), table.slice(half))):
        if suffix == ".parquet":
            pq.write_table(part, folder / f"part-{k}{suffix}")
        else:
            pacsv.write_csv(part, folder / f"part-{k}{suffix}")
    return folder


def same_scores(got: pa.Table, want: pa.Table, key: str = "id") -> None:
    """``got`` (Ray's, any row order) has ``want``'s columns, in order, and the same rows by ``key``: equal
    inputs and labels, probabilities within float32 rounding."""
    assert got.column_names == want.column_names
    assert got.num_rows == want.num_rows
    got, want = got.sort_by(key), want.sort_by(key)
    for name in want.column_names:
        g, w = got.column(name), want.column(name)
        if pa.types.is_floating(w.type):
            assert np.allclose(g.to_numpy(), w.to_numpy(), rtol=0, atol=1e-6), name
        else:
            assert g.to_pylist() == w.to_pylist(), name


@pytest.mark.slow
def test_ray_gives_the_single_process_scores(ray_cluster, trained_checkpoint, tmp_path):
    from sentiment_cli.inference.predictor import Predictor

    table = imdb_rows()
    data = write_parts(table, tmp_path / "in")
    stats = predict_with_ray(trained_checkpoint, data, tmp_path / "out", workers=2, batch_rows=64, progress=False)

    want = score_table(Predictor(trained_checkpoint), table, "review")
    got = pq.read_table(tmp_path / "out")
    assert {"predicted_label", "probability", "p_negative", "p_positive"} <= set(got.column_names)
    same_scores(got, want)
    assert sorted(got.column("id").to_pylist()) == sorted(table.column("id").to_pylist())
    assert stats["rows"] == ROWS and stats["workers"] == 2 and stats["seconds"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]   # no temporary folder left
    with pytest.raises(UsageError, match="--force"):
        predict_with_ray(trained_checkpoint, data, tmp_path / "out", progress=False)


@pytest.mark.slow
def test_ray_multi_label_from_csv_replaces_with_force(ray_cluster, multilabel_checkpoint, tmp_path):
    """CSV input (every column read as text, as ``predict --data`` reads it), a multi-label checkpoint with
    explanations, and ``force`` over an old output folder."""
    from sentiment_cli.data.batches import open_split
    from sentiment_cli.inference.predictor import Predictor

    rows = pacsv.read_csv(DATA / "goemotions_small" / "test.csv",
                          convert_options=pacsv.ConvertOptions(column_types={"text": pa.string(),
                                                                             "labels": pa.string()}))
    rows = rows.add_column(0, "id", pa.array([f"g{i:03d}" for i in range(rows.num_rows)]))
    data = write_parts(rows, tmp_path / "in", ".csv")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old.parquet").write_bytes(b"stale")
    predict_with_ray(multilabel_checkpoint, data, tmp_path / "out", workers=2, batch_rows=50, force=True,
                     explain=True, progress=False)

    # the single-process path reads each file as train / predict --data read it
    table = pa.concat_tables(next(open_split(str(f)).batches(10_000)) for f in sorted(data.iterdir()))
    want = score_table(Predictor(multilabel_checkpoint), table, "text", explain=True)
    got = pq.read_table(tmp_path / "out")
    assert "old.parquet" not in {p.name for p in (tmp_path / "out").iterdir()}
    assert "predicted_labels" in got.column_names   # the input's "labels" column kept as it was
    assert got.column_names[-1] == "top_tokens"      # each predicted label's tokens, compared below
    same_scores(got, want)


@pytest.mark.slow
def test_ray_blank_text_is_a_one_line_data_error(ray_cluster, trained_checkpoint, tmp_path):
    table = imdb_rows().slice(0, 40)
    texts = table.column("review").to_pylist()
    texts[5] = "   "   # in the first file: row 6 of whichever batch holds it
    data = write_parts(table.set_column(1, "review", pa.array(texts)), tmp_path / "in")
    with pytest.raises(DataError, match=r"row 6: empty text \(column 'review'"):
        predict_with_ray(trained_checkpoint, data, tmp_path / "out", workers=1, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]   # nothing written, no temporary folder


def test_missing_ray_is_a_one_line_usage_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)   # import ray raises ImportError
    with pytest.raises(UsageError, match=r"pip install 'sentiment-cli\[ray\]'"):
        predict_with_ray("ck", tmp_path, tmp_path / "out")


def test_input_files_and_output_folder_checks(tmp_path):
    table = imdb_rows().slice(0, 10)
    data = write_parts(table, tmp_path / "in")
    (data / "_SUCCESS").write_text("")                  # hidden and marker files are skipped
    (data / ".part-0.parquet.crc").write_text("")
    found = find_input(data)
    assert [Path(p).name for p in found.paths] == ["part-0.parquet", "part-1.parquet"]
    assert find_input(data / "part-1.parquet").paths == [str((data / "part-1.parquet").resolve())]

    source = find_input(data)
    with pytest.raises(UsageError, match="overlaps --data"):
        OutputFolder.check(data / "scored", force=True, data=source)
    with pytest.raises(UsageError, match="is a file"):
        OutputFolder.check(data / "part-0.parquet", force=True, data=find_input(data / "part-1.parquet"))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x.parquet").write_bytes(b"")
    with pytest.raises(UsageError, match="not empty; --force"):
        OutputFolder.check(tmp_path / "full", force=False, data=source)
    assert OutputFolder.check(tmp_path / "full", force=True, data=source).replace
    assert not OutputFolder.check(tmp_path / "new", force=False, data=source).replace

    pacsv.write_csv(table, data / "more.csv")
    with pytest.raises(UsageError, match="several formats"):
        find_input(data)
    with pytest.raises(DataError, match="no such file"):
        find_input(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no data files"):
        find_input(tmp_path / "empty")


def test_a_split_is_chosen_by_file_name_as_predict_data_does(tmp_path):
    hub = DATA / "imdb_small"   # plain_text/train-00000-of-00001.parquet, plain_text/test-...
    with pytest.raises(UsageError, match="has the splits test, train; choose one with --split NAME"):
        find_input(hub)
    assert [Path(p).name for p in find_input(hub, "test").paths] == ["test-00000-of-00001.parquet"]
    with pytest.raises(DataError, match="no split 'dev'; it has test, train"):
        find_input(hub, "dev")
    folder = write_parts(imdb_rows().slice(0, 10), tmp_path / "in")
    (folder / "part-0.parquet").rename(folder / "dev.parquet")
    assert [Path(p).name for p in find_input(folder).paths] == ["dev.parquet", "part-1.parquet"]
    assert [Path(p).name for p in find_input(folder, "validation").paths] == ["dev.parquet"]


def test_blocks_spread_the_rows_over_the_workers(tmp_path):
    data = find_input(write_parts(imdb_rows(), tmp_path / "in"))                  # 300 rows
    assert ray_predict.block_rows(data, 2, 16) == 32                             # 300 / 16 blocks -> 2 batches
    assert ray_predict.block_rows(data, 1, 1024) == 1024                         # at least one batch
    assert ray_predict.block_rows(data, 1, 4) == 40                              # 300 / 8 blocks -> 10 batches
    assert ray_predict.block_rows(data, 1, 1) == 16                              # at most 16 batches


def test_worker_plan_leaves_a_cpu_for_reads_and_writes():
    class Cluster:
        def __init__(self, cpus):
            self.cpus = cpus

        def cluster_resources(self):
            return {"CPU": self.cpus}

    assert worker_plan(Cluster(2.0), None) == (2, 0.5)    # 2 workers on 2 CPUs: 1 CPU left for the reads
    assert worker_plan(Cluster(2.0), 1) == (1, 1.0)
    assert worker_plan(Cluster(64.0), None) == (64, 63 / 64)
    assert worker_plan(Cluster(1.0), None) == (1, 0.0)


def test_without_ray_the_error_says_how_to_install_it(monkeypatch):
    import builtins

    from sentiment_cli.errors import UsageError

    real = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(UsageError, match=r"^--ray needs Ray: pip install 'sentiment-cli\[ray\]'$"):
        ray_predict.import_ray()


def test_a_workers_error_is_found_in_what_ray_raises():
    from sentiment_cli.errors import CheckpointError

    class Wrapper(Exception):   # as Ray's RayTaskError: the worker's error as .cause
        def __init__(self, cause):
            super().__init__("ray::MapWorker failed")
            self.cause = cause

    inner = DataError("--data in, row 6: empty text")
    assert ray_predict._user_error(Wrapper(inner)) is inner
    text = RuntimeError("ray::MapWorker.submit()\n  File ...\nsentiment_cli.errors.CheckpointError: ck: unusable\n")
    found = ray_predict._user_error(text)
    assert isinstance(found, CheckpointError) and str(found) == "ck: unusable"
    other = RuntimeError("something else")
    assert ray_predict._user_error(other) is other

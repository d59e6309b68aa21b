"""A text column read without keeping its memory-mapped pages (data/text_column.py), and the training splits' lazy
texts (data/splits.py, training/run_data.py)."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sentiment_cli.data import splits
from sentiment_cli.data.sources import load_source
from sentiment_cli.data.text_column import TextColumn, Texts
from sentiment_cli.data.tokenizer import build_tokenizer, encode_texts
from sentiment_cli.errors import DataError
from sentiment_cli.training.run_data import RunData

from .conftest import SMALL_DATA, small_config


def _parquet(path: Path, texts: list, labels: list | None = None) -> Path:
    labels = labels if labels is not None else [i % 2 for i in range(len(texts))]
    pq.write_table(pa.table({"text": texts, "label": labels}), path, row_group_size=700)
    return path


def _mapped_kb(path: str) -> int:
    """Resident kB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ")[0] and len(line.split()) >= 5:   # a mapping's header line
            inside = line.rstrip().endswith(path)
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def test_texts_in_any_order_as_the_dataset_holds_them(tmp_path):
    rng = np.random.default_rng(0)
    texts = [f"review {i} " + "wörd " * int(rng.integers(1, 60)) for i in range(3000)]
    ds = load_source(str(_parquet(tmp_path / "train.parquet", texts))).splits["train"]
    column = TextColumn(ds, "text")
    assert column._located is not None and len(column) == 3000   # read from the cache file, not through the map
    order = rng.permutation(3000)
    assert column.take(order) == [texts[i] for i in order]
    assert [t for chunk in column.arrow_chunks() for t in chunk.to_pylist()] == texts
    lazy = Texts(column, order)
    assert list(lazy) == [texts[i] for i in order] and lazy[5] == texts[order[5]] and len(lazy[10:20]) == 10
    assert lazy + ["x"] == [texts[i] for i in order] + ["x"] and lazy == [texts[i] for i in order]


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps (Linux)")
def test_reading_every_text_keeps_no_page_of_the_cache_file_resident(tmp_path):
    texts = [f"{i} " + "a long enough review text " * 80 for i in range(4000)]   # about 8 MB
    ds = load_source(str(_parquet(tmp_path / "train.parquet", texts))).splits["train"]
    cache = ds.cache_files[0]["filename"]
    before = _mapped_kb(cache)
    column = TextColumn(ds, "text")
    assert sum(len(t) for t in Texts(column, np.random.default_rng(0).permutation(4000))) == sum(map(len, texts))
    assert sum(len(c) for c in column.arrow_chunks()) == 4000
    assert _mapped_kb(cache) - before < 1024                    # under 1 MB of the 8 MB file
    assert sum(len(t) for t in ds["text"]) and _mapped_kb(cache) - before > 4096   # reading through the map would


def test_a_column_held_in_memory_and_null_texts():
    import datasets

    ds = datasets.Dataset.from_dict({"text": ["a", None, "ccc", "dd"]})
    column = TextColumn(ds, "text")
    assert column._located is None
    assert column.take([3, 1, 0, 3]) == ["dd", None, "a", "dd"] and list(Texts(column)) == ["a", None, "ccc", "dd"]
    with pytest.raises(IndexError):
        column.take([4])


def test_null_texts_in_a_file(tmp_path):
    texts = ["one", None, "three", "", "five"] * 300
    ds = load_source(str(_parquet(tmp_path / "nulls.parquet", texts))).splits["train"]
    column = TextColumn(ds, "text")
    assert column._located is not None and column.take(np.arange(1500)[::-1]) == texts[::-1]
    assert [t for chunk in column.arrow_chunks() for t in chunk.to_pylist()] == texts
    with pytest.raises(DataError, match="row 2: no text"):
        splits.load_train_validation(str(tmp_path / "nulls.parquet"))


def test_blank_texts_are_refused_naming_the_row(tmp_path):
    texts = [f"review {i}" for i in range(2000)]
    texts[1500] = "  \n "
    with pytest.raises(DataError, match="row 1501: empty text"):
        splits.load_train_validation(str(_parquet(tmp_path / "blank.parquet", texts)))


def test_lazy_training_splits_are_the_lists_load_gives():
    spec = splits.DataSpec(str(SMALL_DATA))
    for validation_split in ("random", "blocks"):
        spec = splits.DataSpec(str(SMALL_DATA), validation_split=validation_split)
        src = load_source(spec.source)
        lazy = splits.train_validation_of(src, spec, lazy=True)
        eager = splits.train_validation_of(src, spec)
        for a, b in zip(lazy, eager):
            assert isinstance(a.texts, Texts) and isinstance(b.texts, list)
            assert list(a.texts) == b.texts and a.labels == b.labels and a.fingerprint() == b.fingerprint()


def test_run_data_tokenizes_a_column_once_and_gives_each_split_its_rows():
    cfg = small_config()
    data = RunData(cfg.data.source)
    train, val = data.splits(splits.DataSpec.from_config(cfg))
    tok = build_tokenizer(train.texts, cfg.data)
    train_ids, val_ids = data.ids(tok, train.texts, cfg.data), data.ids(tok, val.texts, cfg.data)
    assert train_ids.tolist() == encode_texts(tok, list(train.texts), cfg.data)
    assert val_ids.tolist() == encode_texts(tok, list(val.texts), cfg.data)
    assert train_ids._store is val_ids._store                    # one file: the column's rows, tokenized once
    again, _ = data.splits(splits.DataSpec.from_config(cfg))      # the refit's and trials' splits: the same ids
    assert data.ids(tok, again.texts, cfg.data)._store is train_ids._store
    texts = ["a list of texts", "kept by identity"]
    assert data.ids(tok, texts, cfg.data) is data.ids(tok, texts, cfg.data)
    assert data.ids(tok, texts, cfg.data).tolist() == encode_texts(tok, texts, cfg.data)

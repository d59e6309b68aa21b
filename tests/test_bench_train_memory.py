"""bench/train_memory.py: the repeated data it builds, and one measured run stopped after a few steps."""

from collections import Counter

import pyarrow.parquet as pq

from bench.train_memory import build_data, measure

from .conftest import SMALL_DATA


def test_repeated_data_is_tiled_shuffled_and_made_distinct_on_request(tmp_path):
    base = pq.read_table(next((SMALL_DATA / "plain_text").glob("train-*.parquet"))).to_pydict()
    folder = build_data(2500, tmp_path / "x", SMALL_DATA)
    table = pq.read_table(folder / "train.parquet").to_pydict()
    assert len(table["text"]) == 2500 and set(Counter(table["text"]).values()) == {2, 3}   # 1,000 texts tiled
    assert table["text"][:1000] != base["text"]                                          # shuffled
    assert {(t, y) for t, y in zip(table["text"], table["label"])} == set(zip(base["text"], base["label"]))
    distinct = pq.read_table(build_data(2500, tmp_path / "d", SMALL_DATA, distinct=True) / "train.parquet")
    texts = distinct.column("text").to_pylist()
    assert len(set(texts)) == 2500 and texts[7].endswith(" r7") and texts[7][:-3] == table["text"][7]
    assert build_data(2500, tmp_path / "x", SMALL_DATA) == folder                         # made once


def test_a_run_stopped_after_some_steps_reports_its_peak(tmp_path):
    folder = build_data(1000, tmp_path / "data", SMALL_DATA)
    log = tmp_path / "hwm.log"
    peak, seconds, code = measure(folder, tmp_path / "out", "seed", 2, log)
    assert code != 0 and "2 steps done" in log.with_suffix(".err").read_text()   # stopped as by Ctrl-C
    assert 100 < peak < 8000 and seconds > 0

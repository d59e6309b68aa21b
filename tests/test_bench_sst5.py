"""The SST-5 benchmark's peer and table, on the committed SST-5 slice."""

import csv

import numpy as np
import pytest

from .conftest import ROOT

pytest.importorskip("sklearn")   # the [bench] extra

SLICE = ROOT / "tests" / "data" / "sst5_small"


def _read(split):
    with open(SLICE / f"{split}.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return [r["sentence"] for r in rows], np.array([r["sentiment"] for r in rows])


def test_tfidf_peer_chooses_c_on_dev_and_never_on_test():
    from bench.peers import tfidf_logreg_dev

    texts, labels = _read("train")
    train, dev, test = (texts[:1000], labels[:1000]), _read("dev"), _read("test")   # 1,000: a few seconds
    grid = (1.0, 4.0)
    r = tfidf_logreg_dev(*train, *dev, *test, c_grid=grid)
    assert r["C"] in grid and r["validation_accuracy"] == max(r["dev_accuracy_by_C"].values())
    assert r["validation_accuracy"] == r["dev_accuracy_by_C"][str(r["C"])]
    assert 0.2 < r["test_accuracy"] < 0.6 and 0 < r["test_f1_macro"] <= r["test_accuracy"] + 0.1
    shuffled = np.random.default_rng(0).permutation(test[1])   # other test labels: same choice, other score
    again = tfidf_logreg_dev(*train, *dev, test[0], shuffled, c_grid=grid)
    assert again["C"] == r["C"] and again["dev_accuracy_by_C"] == r["dev_accuracy_by_C"]


def test_sst5_table_rows_compare_with_the_peer():
    from bench.report import SST5_COLUMNS, sst5_rows

    ours = {"epochs_run": 10, "validation_accuracy": 0.43, "test_accuracy": 0.455, "test_f1_macro": 0.42,
            "ece": 0.02, "ece_uncalibrated": 0.08, "temperature": 1.31, "train_seconds": 95.0}
    peer = {"C": 2.0, "validation_accuracy": 0.404, "test_accuracy": 0.411, "test_f1_macro": 0.348, "train_seconds": 18.9}
    rows = sst5_rows({"ours": ours, "tfidf": peer})
    assert all(len(row) == len(SST5_COLUMNS) for row in rows)
    assert rows[0][2] == "45.50%" and rows[0][4] == "2.00% / 8.00% (T 1.31)" and rows[0][-1] == "+4.40 pt"
    assert "C 2" in rows[1][0] and rows[1][2] == "41.10%"

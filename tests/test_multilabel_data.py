"""Reading multi-label data (issue 42): lists, joined labels and 0/1 columns as one multi-hot matrix; the
label set, the hold-out, the one-line reading, and one-line errors for bad input."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from sentiment_cli.config import load_config
from sentiment_cli.data.splits import DataSpec, load_rows, load_split, load_train_validation, scoring_spec
from sentiment_cli.errors import ConfigError, DataError, UsageError

from .conftest import ROOT

GOEMOTIONS = ROOT.parent / "shared" / "data" / "goemotions"   # train.csv: text, labels joined by ','
needs_goemotions = pytest.mark.skipif(not (GOEMOTIONS / "train.csv").is_file(), reason="no ../shared goemotions")


def _write_csv(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _spec(path, **keys):
    return DataSpec(str(path), validation_fraction=0.0, **keys)


def _train(path, **keys):
    return load_split(_spec(path, **keys), "train")


@pytest.fixture(scope="module")
def goemotions_slice():
    """The first 400 rows of GoEmotions' train.csv: ``(texts, each row's label names)``."""
    if not (GOEMOTIONS / "train.csv").is_file():
        pytest.skip("no ../shared goemotions")
    with open(GOEMOTIONS / "train.csv", newline="", encoding="utf-8") as fh:
        rows = [r for _, r in zip(range(400), csv.DictReader(fh))]
    return [r["text"] for r in rows], [r["labels"].split(",") for r in rows]


@pytest.mark.slow   # reads the full GoEmotions training set (43,410 rows)
@needs_goemotions
def test_goemotions_reads_as_28_labels_joined_by_commas():
    train, dev = load_train_validation(DataSpec(str(GOEMOTIONS)))
    assert len(train) == 43_410 and train.multi_label and dev.multi_label
    assert train.labels.shape == (43_410, 28) and train.labels.dtype == np.uint8
    assert len(train.label_names) == 28 and list(train.label_names) == sorted(train.label_names)
    assert train.labels.sum(axis=1).min() >= 1 and train.unlabelled_rows() == 0
    several = int((train.labels.sum(axis=1) > 1).sum())
    assert train.reading == (f"multi-label: column 'labels', labels joined by ',' (28 labels; {several:,} of "
                             "43,410 rows carry several; 0 carry none)")
    assert dev.reading == "" and dev.label_names == train.label_names and len(dev) == 5_426
    assert sum(train.class_counts().values()) == int(train.labels.sum())


def test_four_formats_give_one_matrix(goemotions_slice, tmp_path):
    texts, labels = goemotions_slice
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = sorted({n for row in labels for n in row})
    joined = _write_csv(tmp_path / "joined.csv", ["text", "labels"], [(t, ",".join(l)) for t, l in zip(texts, labels)])
    lists = _write_jsonl(tmp_path / "lists.jsonl", [{"text": t, "labels": l} for t, l in zip(texts, labels)])
    pq.write_table(pa.table({"text": texts, "labels": labels}), tmp_path / "lists.parquet")
    columns = _write_csv(tmp_path / "columns.csv", ["id", "text", *names],
                         [(i, t, *(int(n in l) for n in names)) for i, (t, l) in enumerate(zip(texts, labels))])
    splits = [_train(p) for p in (joined, lists, tmp_path / "lists.parquet", columns)]
    want = np.array([[int(n in l) for n in names] for l in labels], dtype=np.uint8)
    order = np.random.default_rng(1234).permutation(len(texts))   # validation_fraction 0: train shuffled
    for split in splits:
        assert split.multi_label and split.label_names == tuple(names)
        np.testing.assert_array_equal(split.labels, want[order])
        assert split.texts == [texts[i] for i in order]
    several = int((want.sum(axis=1) > 1).sum())
    counts = f"{several:,} of 400 rows carry several; 0 carry none"
    assert splits[0].reading == f"multi-label: column 'labels', labels joined by ',' ({len(names)} labels; {counts})"
    assert splits[1].reading == splits[2].reading == \
        f"multi-label: column 'labels', lists of labels ({len(names)} labels; {counts})"
    assert splits[3].reading.startswith(f"multi-label: {len(names)} 0/1 columns ({', '.join(names[:20])} and ")
    assert splits[3].reading.endswith(f"; {counts})")


def test_zero_one_columns_of_every_type(tmp_path):
    rows = [("a film", 1, 0), ("a play", 0, 1), ("a book", 1, 1), ("a song", 0, 0)]
    as_text = _train(_write_csv(tmp_path / "t.csv", ["text", "joy", "fear"], rows))   # "0" / "1"
    as_bool = _train(_write_jsonl(tmp_path / "b.jsonl", [{"review_id": i, "text": t, "joy": bool(j), "fear": bool(f)}
                                                          for i, (t, j, f) in enumerate(rows)]))
    named = _train(_write_jsonl(tmp_path / "n.jsonl", [{"text": t, "joy": j, "fear": f, "score": 7}
                                                        for t, j, f in rows]), label_columns=("fear", "joy"))
    for split, names in ((as_text, ("joy", "fear")), (as_bool, ("joy", "fear")), (named, ("fear", "joy"))):
        assert split.label_names == names and split.unlabelled_rows() == 1
        got = {t: tuple(r) for t, r in zip(split.texts, split.labels.tolist())}
        assert got["a book"] == (1, 1) and got["a song"] == (0, 0)
        assert got["a film"] == ((1, 0) if names[0] == "joy" else (0, 1))
    assert as_text.reading == "multi-label: 2 0/1 columns (joy, fear; 1 of 4 rows carry several; 1 carry none)"


def test_rows_without_a_label_are_zeros(tmp_path):
    jsonl = _write_jsonl(tmp_path / "d.jsonl", [{"text": "a", "labels": ["x", "y"]}, {"text": "b", "labels": []},
                                                {"text": "c", "labels": None}, {"text": "d", "labels": ["x"]}])
    csv_file = _write_csv(tmp_path / "d.csv", ["text", "labels"], [("a", "x|y"), ("b", ""), ("c", "y")])
    for path, none in ((jsonl, 2), (csv_file, 1)):
        split = load_rows(DataSpec(str(path))).split   # the file's own order
        assert split.multi_label and split.label_names == ("x", "y") and split.unlabelled_rows() == none
        assert split.labels[0].tolist() == [1, 1]


def test_forced_multi_label_reads_single_labels_as_one_label_rows(tmp_path):
    path = _write_csv(tmp_path / "s.csv", ["text", "label"], [("good", "pos"), ("bad", "neg"), ("fine", "pos")])
    split = load_rows(DataSpec(str(path), multi_label="true")).split
    assert split.labels.tolist() == [[0, 1], [1, 0], [0, 1]] and split.label_names == ("neg", "pos")
    assert split.reading == ("multi-label: column 'label', one label per row (2 labels; 0 of 3 rows carry several; "
                             "0 carry none)")
    ints = _write_jsonl(tmp_path / "i.jsonl", [{"text": "a", "label": 1}, {"text": "b", "label": 2}])
    assert load_rows(DataSpec(str(ints), multi_label="true")).split.label_names == ("1", "2")


def test_single_label_data_stays_single_label(tmp_path):
    # A comma inside free-text class names is no separator: no piece recurs as a label of its own.
    path = _write_csv(tmp_path / "s.csv", ["text", "label"], [("a", "Hello, world"), ("b", "Goodbye"), ("c", "Goodbye")])
    split = _train(path)
    assert not split.multi_label and split.label_names == ("Goodbye", "Hello, world") and split.reading == ""
    assert isinstance(split.labels, list)
    forced = _train(path, multi_label="false")
    assert not forced.multi_label and forced.labels == split.labels


def test_a_named_separator_and_lists_of_integers(tmp_path):
    path = _write_csv(tmp_path / "s.csv", ["text", "labels"], [("a", "x/y"), ("b", "z/x")])
    split = _train(path, label_separator="/")
    assert split.label_names == ("x", "y", "z") and split.reading.startswith("multi-label: column 'labels', "
                                                                             "labels joined by '/' (3 labels;")
    ints = _write_jsonl(tmp_path / "i.jsonl", [{"text": "a", "labels": [2, 10]}, {"text": "b", "labels": [1]}])
    assert _train(ints).label_names == ("1", "2", "10")


def test_dev_and_test_are_read_like_train(tmp_path):
    _write_jsonl(tmp_path / "train.jsonl", [{"text": f"t{i}", "labels": ["a", "b"][: i % 2 + 1]} for i in range(6)])
    _write_jsonl(tmp_path / "dev.jsonl", [{"text": "d", "labels": ["b"]}, {"text": "e", "labels": []}])
    _write_jsonl(tmp_path / "test.jsonl", [{"text": "f", "labels": ["a", "b"]}])
    train, dev = load_train_validation(DataSpec(str(tmp_path)))
    assert dev.labels.tolist() == [[0, 1], [0, 0]] and train.reading and not dev.reading
    test = load_split(DataSpec(str(tmp_path)), "test")
    assert test.multi_label and test.labels.tolist() == [[1, 1]]
    model = load_split(DataSpec(str(tmp_path)), "test", label_names=("b", "a", "c"))   # a model's label order
    assert model.labels.tolist() == [[1, 1, 0]] and model.label_names == ("b", "a", "c")


def test_the_hold_out_is_random_not_stratified(tmp_path):
    rows = [{"text": f"text {i}", "labels": ["a"] if i % 3 else ["a", "b"]} for i in range(95)]
    rows.append({"text": "rare", "labels": ["c"]})   # one row: a stratified draw would refuse it
    path = _write_jsonl(tmp_path / "d.jsonl", rows)
    train, val = load_train_validation(DataSpec(str(path), validation_fraction=0.1, seed=7))
    assert len(val) == 10 and len(train) == 86 and not set(train.texts) & set(val.texts)
    again, val2 = load_train_validation(DataSpec(str(path), validation_fraction=0.1, seed=7))
    assert val2.texts == val.texts and again.texts == train.texts
    assert train.label_names == val.label_names == ("a", "b", "c")
    _, blocks = load_train_validation(DataSpec(str(path), validation_fraction=0.1, validation_split="blocks"))
    assert 0 < len(blocks) < 96
    with pytest.raises(DataError, match="too few rows"):
        load_train_validation(DataSpec(str(_write_jsonl(tmp_path / "two.jsonl", rows[:2])), validation_fraction=0.9))


def test_the_spec_carries_the_multi_label_keys():
    cfg = load_config("seed").override("data", source="/data/own", multi_label="true", label_separator=";",
                                       label_columns=["a", "b"])
    spec = DataSpec.from_config(cfg)
    assert (spec.multi_label, spec.label_separator, spec.label_columns) == ("true", ";", ("a", "b"))
    own = scoring_spec(cfg, "validation", single_file_hint="")
    assert (own.multi_label, own.label_separator, own.label_columns) == ("true", ";", ("a", "b"))
    other = scoring_spec(cfg, "test", "/data/other", single_file_hint="")
    assert (other.multi_label, other.label_separator, other.label_columns) == ("true", ";", ())
    told = scoring_spec(cfg, "test", "/data/other", single_file_hint="", label_columns=("x", "y"))
    assert told.label_columns == ("x", "y")
    auto = cfg.override("data", multi_label="auto")
    assert scoring_spec(auto, "test", "/data/other", single_file_hint="", multi_label=True).multi_label == "true"


# Bad input: one line each.

def _error(path, kind=DataError, **keys) -> str:
    with pytest.raises(kind) as info:
        load_rows(DataSpec(str(path), **keys))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_column_that_mixes_lists_and_strings(tmp_path):
    path = _write_jsonl(tmp_path / "m.jsonl", [{"text": "a", "labels": ["x", "y"]}, {"text": "b", "labels": "x"}])
    assert _error(path).endswith("column 'labels' mixes formats: row 1 holds a list (['x', 'y']), row 2 str ('x'); "
                                 "write every row's labels as a list")
    _write_jsonl(tmp_path / "train.jsonl", [{"text": "a", "labels": ["x", "y"]}, {"text": "b", "labels": ["x"]}])
    _write_jsonl(tmp_path / "dev.jsonl", [{"text": "c", "labels": "x"}])
    with pytest.raises(DataError, match=r"dev.jsonl: column 'labels' mixes formats: it holds single or joined "
                                        r"labels here but lists in train"):
        load_train_validation(DataSpec(str(tmp_path)))


def test_separators_under_single_label_suggest_multi_label(tmp_path):
    path = _write_csv(tmp_path / "s.csv", ["text", "labels"], [("a", "joy"), ("b", "joy,fear"), ("c", "fear")])
    message = _error(path, multi_label="false")
    assert message.endswith("s.csv, row 2: label 'joy,fear' in column 'labels' holds several labels joined by ',', "
                            "but [data] multi_label is false; train multi-label with --multi-label "
                            "([data] multi_label = true)")
    lists = _write_jsonl(tmp_path / "l.jsonl", [{"text": "a", "labels": ["x"]}])
    assert "--multi-label" in _error(lists, multi_label="false")
    both = _write_csv(tmp_path / "b.csv", ["text", "labels"], [("a", "x,y"), ("b", "x;z"), ("c", "z"), ("d", "y")])
    assert "joined by both ',' and ';'; name the separator with --set data.label_separator" in _error(both)


def test_a_label_never_positive_in_train(tmp_path):
    path = _write_csv(tmp_path / "s.csv", ["text", "labels"], [("a", "x,y"), ("b", "x")])
    assert _error(path, labels=("x", "y", "z")).endswith(
        "1 label never positive in the training data (z); a label needs a text to learn from: add texts that "
        "carry it, or drop it from [data] labels / label_columns")
    zeros = _write_csv(tmp_path / "z.csv", ["text", "joy", "fear", "calm"], [("a", 1, 0, 0), ("b", 1, 1, 0)])
    assert "(calm)" in _error(zeros)
    many = tuple(f"label{i:02d}" for i in range(25))
    message = _error(path, labels=("x", "y", *many))
    assert "25 labels never positive" in message and "label19 and 5 more)" in message and "label20" not in message
    assert "does not list 1 label" in _error(path, ConfigError, labels=("x", "q"))


def test_a_label_only_in_dev_or_test(tmp_path):
    _write_csv(tmp_path / "train.csv", ["text", "labels"], [("a", "x,y"), ("b", "x")])
    _write_csv(tmp_path / "dev.csv", ["text", "labels"], [("c", "x"), ("d", "y,w")])
    _write_csv(tmp_path / "test.csv", ["text", "labels"], [("e", "v")])
    with pytest.raises(DataError) as info:
        load_train_validation(DataSpec(str(tmp_path)))
    assert str(info.value).endswith("dev.csv (validation split), row 2: label 'w' is not one of the 2 labels seen "
                                    "in training (x, y)")
    with pytest.raises(DataError, match=r"test.csv \(test split\), row 1: label 'v' is not one of the 2 labels"):
        load_split(DataSpec(str(tmp_path)), "test")
    many = tuple(f"n{i:02d}" for i in range(30))
    with pytest.raises(DataError, match=r"the 30 labels seen in training \(n00, .*, n19 and 10 more\)$"):
        load_split(DataSpec(str(tmp_path)), "test", label_names=many)


def test_a_value_that_is_not_0_or_1(tmp_path):
    path = _write_csv(tmp_path / "z.csv", ["text", "joy", "fear"], [("a", 1, 0), ("b", 2, 1)])
    assert _error(path, label_columns=("joy", "fear")).endswith(
        "z.csv, row 2: column 'joy' holds '2'; a label column holds 0 or 1 (1: the text carries the label)")
    blank = _write_jsonl(tmp_path / "n.jsonl", [{"text": "a", "joy": 1, "fear": None}, {"text": "b", "joy": 0, "fear": 1}])
    assert "row 1: column 'fear' holds no value" in _error(blank, label_columns=("joy", "fear"))
    assert "no column 'hope' (--label-columns" in _error(path, UsageError, label_columns=("joy", "hope"))
    # Not found without a name (a column holds 2): the usual "no label column" error.
    assert "no label column" in _error(path)
    assert "multi_label is false" in _error(path, ConfigError, label_columns=("joy", "fear"), multi_label="false")


def test_bad_items_in_lists(tmp_path):
    blank = _write_jsonl(tmp_path / "b.jsonl", [{"text": "a", "labels": ["x", " "]}])
    assert _error(blank).endswith("row 1: an empty label in a list in column 'labels'")
    floats = _write_jsonl(tmp_path / "f.jsonl", [{"text": "a", "labels": [1.5]}])
    assert "holds lists of double; labels in a list are strings or integers" in _error(floats)
    sep = _write_csv(tmp_path / "s.csv", ["text", "labels"], [("a", "x,,y")])
    assert _error(sep, label_separator=",").endswith("row 1: an empty label between separators (',') in column 'labels'")


def test_cli_flags_set_the_data_keys(tmp_path, monkeypatch):
    from sentiment_cli.cli import app
    from sentiment_cli.training import run as train_module

    seen = {}

    def fake_train(cfg, *args, **kwargs):
        seen["data"] = cfg.data
        raise DataError("stop here")

    monkeypatch.setattr(train_module, "train", fake_train)
    runner = CliRunner()
    r = runner.invoke(app, ["train", "--config", "seed", "--multi-label", "--label-columns", "joy, fear",
                            "-o", str(tmp_path / "out")])
    assert r.exit_code == 1 and "stop here" in r.output
    assert seen["data"].multi_label == "true" and seen["data"].label_columns == ("joy", "fear")
    runner.invoke(app, ["train", "--config", "seed", "--single-label", "-o", str(tmp_path / "out")])
    assert seen["data"].multi_label == "false"
    r = runner.invoke(app, ["train", "--resume", str(tmp_path / "out"), "--multi-label"])
    assert r.exit_code == 2 and "--multi-label / --single-label" in r.output
    r = runner.invoke(app, ["train", "--config", "seed", "--label-columns", "a,,b"])
    assert r.exit_code == 2 and "a blank column name" in r.output
    r = runner.invoke(app, ["train", "--config", "seed", "--multi-label", "--single-label"])
    assert r.exit_code == 2 and "contradict each other" in r.output

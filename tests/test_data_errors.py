"""Hostile labelled data: each case is one `error:` line naming the file (and row or line where there is one),
exit 1 for unusable data and exit 2 for a bad flag or config (docs/robustness.md, "Hostile input")."""

import json

import datasets
import pytest
from typer.testing import CliRunner

from sentiment_cli.cli import app
from sentiment_cli.config import load_config

from .conftest import ROOT
from .test_hostile import assert_one_error_line

runner = CliRunner()
SST5 = ROOT / "tests" / "data" / "sst5_small"


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def tiny_toml(tmp_path, **data_keys):
    cfg = load_config(ROOT / "configs" / "seed.toml").override("model", d_model=16, d_ff=32)
    cfg = cfg.override("data", vocab_size=500, max_length=32, **data_keys)
    cfg = cfg.override("training", epochs=1, device="cpu")
    path = tmp_path / "tiny.toml"
    path.write_text(cfg.to_toml())
    return path


def train(tmp_path, data, *extra):
    return invoke("train", "--config", tiny_toml(tmp_path), "--data", data, "--output", tmp_path / "out", *extra)


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


REVIEWS = "".join(f"review number {i},{'pos' if i % 2 else 'neg'}\n" for i in range(20))


@pytest.mark.parametrize("name, content, message", [
    ("cols.csv", "body,score\n" + REVIEWS, "cols.csv: no text column (looked for text, review, sentence, content); "
                                          "name it with --text-column NAME ([data] text_column); columns: body, score"),
    ("ambiguous.csv", "text,review,label\n" + "".join(f"a {i},b {i},{i % 2}\n" for i in range(20)),
     "ambiguous.csv: 2 columns could hold the texts (text, review); choose one with --text-column NAME"),
    ("emptytext.csv", "text,label\n" + REVIEWS[:40] + "   ,pos\n" + REVIEWS, "emptytext.csv, row 3: empty text"),
    ("nulltext.csv", "text,label\n" + REVIEWS[:40] + ",pos\n" + REVIEWS, "nulltext.csv, row 3: no text"),
    ("nulllabel.csv", "text,label\n" + REVIEWS + "a review,\n", "nulllabel.csv, row 21: no label"),
    ("nulllabel.jsonl", '{"text": "a", "label": "pos"}\n{"text": "b", "label": null}\n',
     "nulllabel.jsonl, row 2: no label"),
    ("oneclass.csv", "text,label\n" + "".join(f"review {i},pos\n" for i in range(20)),
     "only one class ('pos') in the training data"),
    ("mixed.jsonl", "".join(json.dumps({"text": f"r {i}", "label": "pos" if i else 1}) + "\n" for i in range(10)),
     "mixed label types in column 'label': row 1 holds an integer (1), row 2 a string ('pos')"),
    ("mixed.csv", "text,label\n" + REVIEWS + "another review,3\n",
     "mixed label types in column 'label': row 1 holds a string ('neg'), row 21 an integer ('3')"),
    ("fields.csv", "text,label\n" + REVIEWS[:40] + "a,b,c\n" + REVIEWS, "fields.csv, line 4: 3 fields, but the header has 2"),
    ("quote.csv", "text,label\n" + REVIEWS[:40] + '"an unclosed quote,pos\n' + REVIEWS[40:80],
     "quote.csv, line 4: malformed"),
    ("broken.jsonl", '{"text": "a", "label": "pos"}\n{"text": "b", "label": \n', "broken.jsonl, line 2: not valid JSON"),
    ("list.jsonl", '{"text": "a", "label": "pos"}\n[1, 2]\n', "list.jsonl, line 2: not a JSON object"),
    ("garbage.parquet", "not a parquet file", "cannot read"),
])
def test_unusable_training_data_is_one_line_exit_1(tmp_path, name, content, message):
    r = train(tmp_path, write(tmp_path / name, content))
    assert_one_error_line(r, 1, message)


def test_a_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes(("text,label\n" + REVIEWS[:40]).encode() + "caf\xe9 cr\xe8me,pos\n".encode("latin-1"))
    assert_one_error_line(train(tmp_path, path), 1, "latin1.csv, line 4: not valid UTF-8")


def test_a_class_the_model_never_saw_in_eval_data(tmp_path):
    r = train(tmp_path, write(tmp_path / "train.csv", "text,label\n" + REVIEWS))
    assert r.exit_code == 0, r.stderr
    other = write(tmp_path / "other.csv", "text,label\ngood,pos\nmeh,neutral\n")
    r = invoke("eval", "--checkpoint", tmp_path / "out", "--data", other)
    assert_one_error_line(r, 1, "other.csv, row 2: label 'neutral' is not one of the 2 classes seen in training "
                                "(neg, pos)")


def test_a_class_in_dev_that_train_never_had(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write(folder / "train.csv", "text,label\n" + REVIEWS)
    write(folder / "dev.csv", "text,label\na,pos\nb,meh\n")
    assert_one_error_line(train(tmp_path, folder), 1, "dev.csv, row 2: label 'meh' is not one of the 2 classes")


@pytest.mark.parametrize("labels, message", [
    (["neg", "pos", "neutral"], "[data] labels = ['neg', 'pos', 'neutral'] disagrees with"),
    (["neg"], "[data] labels must name at least two classes"),
    (["neg", "neg"], "[data] labels lists 'neg' twice"),
])
def test_a_labels_list_that_disagrees_with_the_data_is_a_usage_error(tmp_path, labels, message):
    data = write(tmp_path / "r.csv", "text,label\n" + REVIEWS)
    path = tmp_path / "labels.toml"
    path.write_text(f"[data]\nlabels = {json.dumps(labels)}\n")
    r = invoke("train", "--config", path, "--data", data, "--output", tmp_path / "out")
    assert_one_error_line(r, 2, message)


def test_a_named_column_that_is_not_there_is_a_usage_error(tmp_path):
    data = write(tmp_path / "r.csv", "text,label\n" + REVIEWS)
    r = train(tmp_path, data, "--text-column", "body")
    assert_one_error_line(r, 2, "r.csv: no column 'body' (--text-column body ([data] text_column)); columns: text, label")


def test_an_unsupported_file_type_is_a_usage_error(tmp_path):
    r = train(tmp_path, write(tmp_path / "reviews.txt", "one review per line\n"))
    assert_one_error_line(r, 2, "reviews.txt: unsupported file type .txt; give CSV, TSV, JSON, JSON Lines or Parquet")


def test_two_files_for_one_split(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write(folder / "train.csv", "text,label\n" + REVIEWS)
    datasets.load_dataset("csv", data_files=str(folder / "train.csv"), split="train").to_json(str(folder / "train.jsonl"))
    assert_one_error_line(train(tmp_path, folder), 1, "2 files for split 'train' (train.csv, train.jsonl)")


def test_sst5_columns_by_flag_and_a_label_named_like_an_average(tmp_path):
    r = train(tmp_path, SST5, "--text-column", "sentence", "--label-column", "sentiment")
    assert r.exit_code == 0, r.stderr
    data = write(tmp_path / "avg.csv", "text,label\n" + "".join(f"r {i},{'macro' if i % 2 else 'x'}\n" for i in range(20)))
    assert_one_error_line(train(tmp_path, data), 1, "a label named 'macro' would clash with the macro average")

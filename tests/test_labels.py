"""Any labelled data, any label set: sources, columns, label sets, N-class training and everything downstream,
on the committed real slices (tests/data/README.md), and checkpoints written before label sets."""

import json
import math
import shutil
from collections import Counter
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from sentiment_cli.data import columns
from sentiment_cli.data import splits as data
from sentiment_cli.checkpoint import load_checkpoint
from sentiment_cli.cli import app
from sentiment_cli.config import load_config
from sentiment_cli.errors import ConfigError
from sentiment_cli.evaluation.evaluate import evaluate_checkpoint
from sentiment_cli.inference.explain import contrast, target_classes
from sentiment_cli.inference.torch_backend import batched_token_logits
from sentiment_cli.data.batching import collate
from sentiment_cli.inference.predictor import Predictor
from sentiment_cli.training.run import resume, train

from .conftest import ROOT, SMALL_DATA

DATA = ROOT / "tests" / "data"
SST5 = DATA / "sst5_small"
CSV = DATA / "reviews_small" / "reviews.csv"
JSONL = DATA / "reviews_small" / "reviews.jsonl"
OLD = DATA / "imdb_checkpoint_v1"
SST5_LABELS = ("negative", "neutral", "positive", "very negative", "very positive")   # sorted distinct values
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def tiny_config(source, **data_keys):
    """The seed config shrunk to seconds: d_model 16, 2,000 words, 1 epoch."""
    cfg = load_config(ROOT / "configs" / "seed.toml")
    cfg = cfg.override("model", d_model=16, d_ff=32)
    cfg = cfg.override("data", source=str(source), vocab_size=2000, max_length=64, **data_keys)
    return cfg.override("training", epochs=1, batch_size=32, device="cpu")


# ---------------------------------------------------------------------------- checkpoints from before label sets

def test_a_checkpoint_written_before_label_sets_gives_the_same_logits_predictions_and_explanations():
    expected = json.loads((DATA / "imdb_checkpoint_v1.expected.json").read_text())
    p = Predictor(OLD)
    assert p.labels == ("negative", "positive")
    # to float32 rounding: the file was written on another CPU, whose matmul kernels round differently
    np.testing.assert_allclose(p.logits(expected["texts"]), np.asarray(expected["logits"], np.float32), atol=1e-6, rtol=0)
    # the probabilities come from the one torch-free post-processing (numpy's softmax, shared with ONNX Runtime):
    # the same as the torch softmax that wrote the file, to float32 rounding
    for got, want in zip([x.to_dict() for x in p.predict(expected["texts"])], expected["predictions"]):
        assert got["text"] == want["text"] and got["label"] == want["label"]
        assert got["probability"] == pytest.approx(want["probability"], abs=1e-6, rel=0)
        assert got["probabilities"] == pytest.approx(want["probabilities"], abs=1e-6, rel=0)
    explained = [e.to_dict() for e in p.explain(expected["texts"][-3:])]
    for got, want in zip(explained, expected["explanations"]):
        assert got.pop("target") == "positive"   # the margin is still logit(positive) - logit(negative)
        assert got["tokens"] == want["tokens"] and got["label"] == want["label"]
        assert got["scores"] == pytest.approx(want["scores"], abs=1e-6, rel=0)
        assert got["bias"] == pytest.approx(want["bias"], abs=1e-6, rel=0)
        assert got["probabilities"] == pytest.approx(want["probabilities"], abs=1e-6, rel=0)


def test_a_checkpoint_written_before_label_sets_evaluates_as_before(tmp_path):
    want = json.loads((DATA / "imdb_checkpoint_v1.expected.json").read_text())["eval_test"]
    got = evaluate_checkpoint(OLD, "test", data=str(SMALL_DATA), record=False)
    assert got["labels"] == ["negative", "positive"]
    for key in ("num_examples", "accuracy", "confusion_matrix"):
        assert got[key] == want[key], key
    assert got["loss"] == pytest.approx(want["loss"], abs=1e-6)   # float32 rounding differs between CPUs
    for key in ("precision", "recall", "f1"):
        assert {k: got[key][k] for k in want[key]} == want[key]


def test_a_config_json_without_labels_means_imdbs_two(tmp_path):
    folder = shutil.copytree(OLD, tmp_path / "old")
    raw = json.loads((folder / "config.json").read_text())
    del raw["labels"]
    (folder / "config.json").write_text(json.dumps(raw))
    assert load_checkpoint(folder).labels == ("negative", "positive")


# ---------------------------------------------------------------------------- sources and columns

def test_sst5_folder_uses_dev_as_validation_and_its_string_labels():
    train_split, val = data.load_train_validation(str(SST5))
    test = data.load_split(str(SST5), "test")
    assert (len(train_split), len(val), len(test)) == (2000, 400, 600)
    assert train_split.label_names == SST5_LABELS and val.where.endswith("dev.csv")
    import csv
    with open(SST5 / "dev.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert val.texts == [r["sentence"] for r in rows]   # the whole dev file, in order
    assert [SST5_LABELS[i] for i in val.labels] == [r["sentiment"] for r in rows]
    assert sum(train_split.class_counts().values()) == 2000 and len(set(train_split.texts)) > 1900


def test_one_file_is_the_training_data_with_a_stratified_hold_out():
    train_split, val = data.load_train_validation(str(CSV), 0.1, 1234)
    assert train_split.label_names == ("neg", "pos")              # the file's own names, sorted
    assert (len(train_split), len(val)) == (540, 60) and not set(train_split.texts) & set(val.texts)
    full = Counter(train_split.labels) + Counter(val.labels)
    assert abs(Counter(val.labels)[0] / 60 - full[0] / 600) < 0.02   # stratified
    test = data.load_split(str(CSV), "test")                      # scoring a file: all of it, in order
    assert len(test) == 600


@pytest.mark.parametrize("fmt", ["tsv", "parquet", "json", "jsonl"])
def test_every_format_gives_the_same_split(tmp_path, fmt):
    ds = datasets.load_dataset("csv", data_files=str(CSV), split="train")
    path = tmp_path / f"reviews.{fmt}"
    if fmt == "tsv":
        ds.to_csv(str(path), sep="\t", index=False)
    elif fmt == "parquet":
        ds.to_parquet(str(path))
    elif fmt == "json":
        path.write_text(json.dumps(ds.to_list()))
    else:
        ds.to_json(str(path), lines=True, force_ascii=False)
    want = data.load_train_validation(str(CSV), 0.1, 7)
    got = data.load_train_validation(str(path), 0.1, 7)
    for a, b in zip(got, want):
        assert (a.texts, a.labels, a.label_names) == (b.texts, b.labels, b.label_names)


def test_a_folder_of_files_named_by_split_in_mixed_formats(tmp_path):
    shutil.copy(SST5 / "train.csv", tmp_path / "train.csv")
    datasets.load_dataset("csv", data_files=str(SST5 / "dev.csv"), split="train").to_json(
        str(tmp_path / "validation.jsonl"))
    datasets.load_dataset("csv", data_files=str(SST5 / "test.csv"), split="train").to_parquet(
        str(tmp_path / "test.parquet"))
    assert len(data.load_split(str(tmp_path), "validation")) == 400
    assert data.load_split(str(tmp_path), "test").texts == data.load_split(str(SST5), "test").texts


def test_columns_are_found_by_their_usual_names_or_named():
    assert columns.resolve_column(["id", "Review", "stars"], "", columns.TEXT_COLUMNS, "text", "f") == "Review"
    assert columns.resolve_column(["id", "Review", "stars"], "", columns.LABEL_COLUMNS, "label", "f") == "stars"
    assert columns.resolve_column(["body", "stars"], "body", columns.TEXT_COLUMNS, "text", "f") == "body"


def test_integer_labels_sort_by_value_and_labels_fix_the_order(tmp_path):
    rows = [{"text": f"review {i}", "stars": s} for i, s in enumerate([1, 2, 10, 5] * 10)]
    path = tmp_path / "stars.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train_split, _ = data.load_train_validation(str(path), 0.25, 0)
    assert train_split.label_names == ("1", "2", "5", "10")
    spec = data.DataSpec(str(path), 0.25, 0, labels=("10", "5", "2", "1"))
    train_split, _ = data.load_train_validation(spec)
    assert train_split.label_names == ("10", "5", "2", "1")
    by_text = {r["text"]: str(r["stars"]) for r in rows}
    assert all(train_split.label_names[y] == by_text[t] for t, y in zip(train_split.texts, train_split.labels))
    with pytest.raises(ConfigError, match=r"\[data\] labels = \['1', '2', '5'\] disagrees with .*stars.jsonl: "
                                          r"it does not list '10'"):
        data.load_train_validation(data.DataSpec(str(path), 0.25, 0, labels=("1", "2", "5")))


def test_imdb_keeps_negative_positive_and_its_label_ids():
    train_split, val = data.load_train_validation(str(SMALL_DATA), 0.1, 1234)
    assert train_split.label_names == ("negative", "positive") and Counter(val.labels) == {0: 50, 1: 50}


# ---------------------------------------------------------------------------- N classes end to end

@pytest.fixture(scope="module")
def sst5_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("sst5") / "model"
    train(tiny_config(SST5), out)
    return out


def test_the_head_has_one_output_per_class_and_config_json_names_them(sst5_model):
    ckpt = load_checkpoint(sst5_model)
    assert ckpt.model.head.out_features == 5 and ckpt.labels == SST5_LABELS
    assert json.loads((sst5_model / "config.json").read_text())["labels"] == list(SST5_LABELS)


def test_a_model_trained_on_n_labels_only_ever_predicts_those(sst5_model):
    texts = data.load_split(str(SST5), "test").texts[:200] + ["x", "A moving film.", "zzz qqq"]
    predictions = Predictor(sst5_model).predict(texts)
    assert {p.label for p in predictions} <= set(SST5_LABELS)
    for p in predictions:
        assert tuple(p.probabilities) == SST5_LABELS and math.isclose(sum(p.probabilities.values()), 1, rel_tol=1e-5)
        assert p.probability == max(p.probabilities.values()) == p.probabilities[p.label]


def test_n_class_explanations_add_up_to_the_predicted_class_margin(sst5_model):
    ckpt = load_checkpoint(sst5_model)
    texts = data.load_split(str(SST5), "test").texts[:20]
    from sentiment_cli.data.tokenizer import encode_texts
    ids = encode_texts(ckpt.tokenizer, texts, ckpt.config.data)
    logits, shares, bias = batched_token_logits(ckpt.model, ids, batch_size=64, device=torch.device("cpu"))
    targets = target_classes(logits)
    assert (targets == logits.argmax(1)).all()                            # the predicted class
    for i in range(len(texts)):
        k = int(targets[i])
        others = np.concatenate([logits[i, :k], logits[i, k + 1:]])
        margin = float(contrast(shares[i], k).sum() + contrast(bias, k))
        assert margin == pytest.approx(float(logits[i, k] - others.mean()), abs=1e-4)
    input_ids, mask = collate(ids)
    with torch.no_grad():
        assert bool((ckpt.model(input_ids, mask, token_logits=True).token_logits[mask] == 0).all())   # padding never scored
    e = Predictor(sst5_model).explain(texts[:3])
    for x in e:
        assert x.target == x.label and len(x.tokens) == len(x.scores)


def test_eval_json_has_labels_per_class_macro_weighted_and_an_n_by_n_matrix(sst5_model, tmp_path):
    r = invoke("eval", "--checkpoint", sst5_model, "--split", "test", "--json", "--errors", 3,
               "--plot", tmp_path / "cm.png")
    assert r.exit_code == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["labels"] == list(SST5_LABELS) and result["num_examples"] == 600
    cm = result["confusion_matrix"]
    assert len(cm) == 5 and all(len(row) == 5 for row in cm) and sum(map(sum, cm)) == 600
    assert [sum(row) for row in cm] == [result["support"][n] for n in SST5_LABELS]   # rows are true labels
    assert result["support"] == {"negative": 184, "neutral": 94, "positive": 122, "very negative": 79,
                                 "very positive": 121}
    for metric in ("precision", "recall", "f1"):
        assert set(result[metric]) == set(SST5_LABELS) | {"macro", "weighted"}
    assert result["accuracy"] == pytest.approx(sum(cm[i][i] for i in range(5)) / 600)
    assert all(e["label"] in SST5_LABELS and e["true_label"] in SST5_LABELS and e["label"] != e["true_label"]
               for e in result["errors"])
    assert (tmp_path / "cm.png").read_bytes()[:4] == b"\x89PNG"


def test_eval_table_predict_and_info_name_the_classes(sst5_model):
    r = invoke("eval", "--checkpoint", sst5_model, "--split", "validation")
    assert r.exit_code == 0, r.stderr
    for name in ("very negative", "neutral", "weighted avg", "macro avg", "5 classes"):
        assert name in r.stdout
    r = invoke("predict", "--checkpoint", sst5_model, "--explain", "a gorgeous , witty , seductive movie .")
    assert r.exit_code == 0 and "mean of the other 4 logits" in r.stdout
    r = invoke("info", "--checkpoint", sst5_model, "--json")
    card = json.loads(r.stdout)
    assert card["labels"] == list(SST5_LABELS)
    assert card["class_balance"]["train"]["very negative"] == 261 and sum(card["class_balance"]["validation"].values()) == 400
    assert "class balance, train" in (sst5_model / "README.md").read_text()


@pytest.mark.parametrize("source, names", [(CSV, ["neg", "pos"]), (JSONL, ["negative", "positive"])])
def test_train_eval_predict_explain_and_resume_on_a_users_file(tmp_path, source, names):
    out = tmp_path / "model"
    cfg = tiny_config(source).override("training", epochs=2)
    uninterrupted = train(cfg, tmp_path / "whole").metrics
    train(cfg.override("training", epochs=1), out, keep_state=True)
    resumed = resume(out, epochs=2).metrics
    assert [h["validation_loss"] for h in resumed["history"]] == [h["validation_loss"] for h in uninterrupted["history"]]
    r = invoke("predict", "--checkpoint", out, "--json", "A moving, beautifully acted film.", "Dull and far too long.")
    assert r.exit_code == 0, r.stderr
    for line in r.stdout.splitlines():
        p = json.loads(line)
        assert p["label"] in names and list(p["probabilities"]) == names
    r = invoke("predict", "--checkpoint", out, "--json", "--explain", "The plot was thin, but the acting was superb.")
    e = json.loads(r.stdout)
    assert e["target"] == names[1] and len(e["tokens"]) == len(e["scores"])
    # the scores add up to the logit margin; the probabilities' log-odds are that margin / temperature
    temperature = json.loads((out / "config.json").read_text())["temperature"]
    assert sum(e["scores"]) + e["bias"] == pytest.approx(
        temperature * math.log(e["probabilities"][names[1]] / e["probabilities"][names[0]]), abs=1e-3)
    r = invoke("eval", "--checkpoint", out, "--split", "validation", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["labels"] == names
    r = invoke("eval", "--checkpoint", out, "--split", "test")   # a single file has no test split of its own
    assert r.exit_code == 2 and "has no test split" in r.stderr


def test_eval_scores_another_file_whole_with_its_own_column_names(tmp_path):
    out = tmp_path / "model"
    train(tiny_config(JSONL), out)                                   # text / label, negative / positive
    other = tmp_path / "other.csv"
    rows = [json.loads(line) for line in JSONL.read_text().splitlines()[:40]]
    import csv
    with open(other, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "review", "sentiment"])
        w.writerows([i, r["text"], r["label"]] for i, r in enumerate(rows))
    r = invoke("eval", "--checkpoint", out, "--data", other, "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["num_examples"] == 40
    [record] = out.glob("eval_test-*.json")   # other data: a record of its own (issue 44), not eval_test.json
    assert "other.csv" in json.dumps(json.loads(record.read_text())) and not (out / "eval_test.json").exists()


# ---------------------------------------------------------------------------- the full SST-5 set, when it is there

FULL_SST5 = ROOT.parent / "shared" / "data" / "sst5"


@pytest.mark.skipif(not FULL_SST5.exists(), reason=f"SST-5 is not at {FULL_SST5}")
def test_full_sst5_folder():
    spec = data.DataSpec(str(FULL_SST5), text_column="sentence", label_column="sentiment")
    train_split, val = data.load_train_validation(spec)
    test = data.load_split(spec, "test")
    assert (len(train_split), len(val), len(test)) == (8544, 1101, 2210)
    assert train_split.label_names == SST5_LABELS

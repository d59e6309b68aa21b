"""Limits on what untrusted input may make the tool do (issue 44, rows 7, 8 and 10).

- An ONNX file's tensors: data kept in another file (``secret.bin``, read from the current folder) and NaN or
  infinite weights are refused at load, before ONNX Runtime sees the file; ``--json`` never prints ``NaN``.
- The n-gram score's fit: its weight matrix (buckets x classes) and what scikit-learn allocates for it are
  bounded before anything is allocated, in ``train`` and in ``audit``.
- The hold-out note says how many rows are held out, and why when one per class is forced.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from sentiment_cli.cli import app
from sentiment_cli.errors import CheckpointError

from .test_hostile import assert_one_error_line

runner = CliRunner()
onnx = pytest.importorskip("onnx", reason="the onnx extra is part of the test extra; install .[test]")


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


# ----------------------------------------------------------------------------- ONNX tensors

def _model(weight: np.ndarray, *, external: str | None = None, scalar: float | None = None) -> bytes:
    """A tiny ONNX model, ``y = x + weight`` (and ``+ scalar`` as a one-element initializer when given); with
    ``external``, the weight's data is said to lie in that file."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(weight.astype(np.float32), "model.head.weight")
    if external:
        w.ClearField("raw_data")
        w.data_location = TensorProto.EXTERNAL
        for key, value in (("location", external), ("offset", "0"), ("length", str(weight.nbytes))):
            entry = w.external_data.add()
            entry.key, entry.value = key, value
    inits, nodes = [w], [helper.make_node("Add", ["x", "model.head.weight"], ["z"])]
    if scalar is not None:
        inits.append(numpy_helper.from_array(np.array(scalar, np.float32), "fill"))
        nodes.append(helper.make_node("Add", ["z", "fill"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", ["z"], ["y"]))
    shape = list(weight.shape)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph).SerializeToString()


def test_an_initializer_with_external_data_is_refused_before_the_runtime_reads_it(tmp_path, monkeypatch):
    from sentiment_cli.inference import onnx_backend
    from sentiment_cli.inference.predictor import Predictor

    monkeypatch.chdir(tmp_path)   # where ONNX Runtime looked for it
    (tmp_path / "secret.bin").write_bytes(np.ones(2, np.float32).tobytes())
    (tmp_path / "m.onnx").write_bytes(_model(np.zeros(2), external="secret.bin"))
    monkeypatch.setattr(onnx_backend, "_session", lambda *a, **k: pytest.fail("the runtime saw the file"))
    with pytest.raises(CheckpointError) as err:
        Predictor(tmp_path / "m.onnx", onnx=True)
    assert "tensor 'model.head.weight' keeps its data in 'secret.bin', outside the file" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("weight, scalar, match", [
    (np.array([1.0, math.nan]), None, "holds NaN or infinite values"),
    (np.array([1.0, math.inf]), None, "holds NaN or infinite values"),
    (np.array([1.0, 2.0]), math.nan, "tensor 'fill' holds NaN"),
])
def test_nan_or_infinite_weights_are_refused(tmp_path, weight, scalar, match):
    from sentiment_cli.inference.onnx_backend import check_tensors

    with pytest.raises(CheckpointError, match=match):
        check_tensors(_model(weight, scalar=scalar), tmp_path / "m.onnx")


def test_a_one_element_infinity_as_an_export_masks_with_passes(tmp_path):
    from sentiment_cli.inference.onnx_backend import check_tensors

    check_tensors(_model(np.array([1.0, 2.0]), scalar=-math.inf), tmp_path / "m.onnx")


def test_garbage_is_not_an_onnx_protobuf(tmp_path):
    from sentiment_cli.inference.onnx_backend import check_tensors

    with pytest.raises(CheckpointError, match="not a usable ONNX model"):
        check_tensors(b"\xff" * 64, tmp_path / "m.onnx")


def test_predict_json_refuses_nan_weights_in_one_line(tmp_path):
    (tmp_path / "nan.onnx").write_bytes(_model(np.array([1.0, math.nan])))
    r = invoke("predict", "--onnx", "--checkpoint", tmp_path / "nan.onnx", "--json", "a fine film")
    assert_one_error_line(r, 1, "nan.onnx: tensor 'model.head.weight' holds NaN or infinite values")


@pytest.mark.slow   # one torch.onnx export (seconds)
def test_an_export_loads_and_a_mask_fill_turned_to_plus_infinity_is_an_error_not_nan(trained_checkpoint, tmp_path):
    import shutil

    from onnx import numpy_helper

    from sentiment_cli.inference.export import export_onnx

    folder = tmp_path / "ckpt"
    shutil.copytree(trained_checkpoint, folder)
    exported = export_onnx(folder, parity_reviews=20).path   # its masks' -inf passes the check
    proto = onnx.load(str(exported))
    fills = [t for t in proto.graph.initializer if numpy_helper.to_array(t).size == 1
             and np.isneginf(numpy_helper.to_array(t)).all()]
    assert fills, "the export masks with a one-element -inf"
    fills[0].CopyFrom(numpy_helper.from_array(np.array(np.inf, np.float32), fills[0].name))
    onnx.save(proto, str(tmp_path / "inf.onnx"))
    r = invoke("predict", "--onnx", "--checkpoint", tmp_path / "inf.onnx", "--json", "a fine film", "a b")
    assert_one_error_line(r, 1, "NaN or infinite logits for review")
    assert "NaN" not in r.stdout


def test_logits_that_overflow_are_an_error_not_nan():
    from sentiment_cli.inference.predictor import finite_logits

    ok = np.array([[0.0, 1.0]], np.float32)
    assert finite_logits(ok) is ok
    with pytest.raises(CheckpointError, match="NaN or infinite logits for review 12"):
        finite_logits(np.array([[0.0, 1.0], [math.inf, 0.0]], np.float32), first=11)


def test_json_output_never_holds_nan():
    from sentiment_cli.cli.render import json_text

    text = json_text({"a": math.nan, "b": [1.5, -math.inf, {"c": "é"}], "d": (math.inf,)})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON")) == \
        {"a": None, "b": [1.5, None, {"c": "é"}], "d": [None]}
    assert json_text({"c": "é"}) == '{"c": "é"}' and json_text({"c": "é"}, ensure_ascii=True) == '{"c": "\\u00e9"}'


# ----------------------------------------------------------------------------- the hold-out note

def _many_small_classes(path, classes: int = 300, rows_each: int = 2):
    import csv

    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        for i in range(classes * rows_each):
            writer.writerow([f"review number {i} of class {i % classes}", f"c{i % classes}"])
    return path


def _hold_out_note(profile, config) -> str:
    """The data rules' line for ``data.validation_fraction``."""
    from sentiment_cli.training.auto import data_rules

    return next(c for c in data_rules(profile, config) if c.key == "data.validation_fraction").line()


def test_the_hold_out_note_counts_the_rows_one_per_class_forces(tmp_path):
    from sentiment_cli.config import load_config
    from sentiment_cli.data.splits import DataSpec, load_train_validation
    from sentiment_cli.training.auto import Profile

    source = _many_small_classes(tmp_path / "small.csv")
    config = load_config("default")   # holds out in blocks
    _, validation = load_train_validation(DataSpec(str(source), 0.1, config.training.seed,
                                                   config.data.validation_split))
    assert len(validation) == 300
    profile = Profile(train_rows=600, class_counts=(2,) * 300, has_validation=False, unlabelled=0, length_quantile=8)
    note = _hold_out_note(profile, config)
    assert "300 of 600 rows (50% of train: one row of each of the 300 classes too small for 10%" in note, note
    assert "60 rows" not in note


def test_the_hold_out_note_of_ordinary_classes_is_unchanged_in_substance():
    from sentiment_cli.config import load_config
    from sentiment_cli.training.auto import Profile

    profile = Profile(train_rows=600, class_counts=(300, 300), has_validation=False, unlabelled=0, length_quantile=8)
    note = _hold_out_note(profile, load_config("default"))
    assert "10% of train (60 of 600 rows, stratified, in blocks) is held out" in note, note
    last = load_config("default").override("data", validation_split="last")
    note = _hold_out_note(profile, last)
    assert "10% of train (60 of 600 rows, its last rows in file order) is held out" in note, note


def test_the_hold_out_note_of_several_labels_per_text_counts_rows_not_labels():
    """Reuters: 7,787 stories carry 9,556 topics; the hold-out takes 779 stories, unstratified (the note said 956)."""
    from sentiment_cli.config import load_config
    from sentiment_cli.training.auto import Profile

    profile = Profile(train_rows=600, class_counts=(300, 300, 200), has_validation=False, unlabelled=0,
                      length_quantile=8, reading="column 'labels', labels joined by ','")
    for split, how in (("random", "drawn at random"), ("last", "its last rows in file order")):
        note = _hold_out_note(profile, load_config("default").override("data", validation_split=split))
        assert f"10% of train (60 of 600 rows, {how}) is held out" in note, note


# ----------------------------------------------------------------------------- the n-gram fit's memory

def test_the_fit_of_5000_classes_in_524288_buckets_is_refused_naming_the_limit_and_settings():
    from sentiment_cli.config import load_config
    from sentiment_cli.ngram.fit import check_fit_size

    config = load_config("seed").override("model", ngram_buckets=524_288)
    with pytest.raises(Exception) as err:
        check_fit_size(config, 5_000)
    message = str(err.value)
    assert type(err.value).__name__ == "DataError" and "\n" not in message
    assert "524,288 buckets x 5,000 classes needs about 31.5 GB" in message, message
    assert "above the limit of 8 GB; raise it with --set training.ngram_fit_gb=N" in message
    assert "--set model.ngram_buckets=131072 at most" in message
    check_fit_size(config.override("training", ngram_fit_gb=40.0), 5_000)   # raised: it passes
    check_fit_size(config, 2)                                               # IMDB's shape: 6 MB


def _classes_csv(path, classes: int, rows_each: int, words: int = 12):
    import csv
    import random

    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(400)]
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "label"])
        for i in range(classes * rows_each):
            writer.writerow([" ".join([f"t{i % classes}"] + rng.sample(vocab, words)), f"k{i % classes}"])
    return path


def test_train_refuses_before_the_model_holds_the_weights(tmp_path, monkeypatch):
    from sentiment_cli.training import setup

    data = _classes_csv(tmp_path / "many.csv", classes=100, rows_each=3)
    monkeypatch.setattr(setup, "_build_model", lambda *a, **k: pytest.fail("the model was built"))
    r = invoke("train", "--config", "seed", "--data", data, "--output", tmp_path / "run", "--epochs", 1,
               "--set", "model.ngram_buckets=4194304", "--set", "data.validation_fraction=0",
               "--set", "training.ngram_fit_gb=1")
    assert_one_error_line(r, 1, "the n-gram score of 4,194,304 buckets x 100 classes needs about 5.0 GB to fit")
    assert "raise it with --set training.ngram_fit_gb=N" in r.stderr


def test_logistic_regressions_copies_are_counted_before_scikit_learn_runs(monkeypatch):
    from sentiment_cli.ngram import estimator
    from sentiment_cli.ngram.features import ngram_features
    from sentiment_cli.ngram.memory import FitLimit

    rng = np.random.default_rng(0)
    ids = [rng.integers(2, 3000, size=20).tolist() for _ in range(300)]
    labels = [i % 50 for i in range(300)]
    x = ngram_features(ids, 1 << 16)
    monkeypatch.setattr(estimator, "fit_columns", lambda *a, **k: pytest.fail("scikit-learn ran"))
    monkeypatch.setattr(estimator, "select_fit", lambda *a, **k: pytest.fail("scikit-learn ran"))
    limit = FitLimit(0.05, instead="fewer buckets", without_lr="--set model.ngram_fit=nb-lr")
    with pytest.raises(Exception, match="logistic regression's working copies for .* n-gram columns") as err:
        estimator.NgramEstimator(50, limit=limit).fit(x, labels)
    assert "or fewer buckets, or --set model.ngram_fit=nb-lr" in str(err.value)
    monkeypatch.setattr(estimator, "fit_columns", lambda x, y, k, *a: (np.zeros((x.shape[1], k), np.float32),
                                                                      np.zeros(k)))
    estimator.NgramEstimator(50, "nb-lr", limit=limit).fit(x, labels)   # no LR: it fits


def test_audit_refuses_a_fit_above_fit_gb_before_scikit_learn_runs(tmp_path, monkeypatch):
    from sentiment_cli.audit import probabilities

    data = _classes_csv(tmp_path / "d.csv", classes=4, rows_each=30)
    monkeypatch.setattr(probabilities, "select_forms", lambda *a, **k: pytest.fail("scikit-learn ran"))
    r = invoke("audit", "--data", data, "--folds", 2, "--fit-gb", 0.001)
    assert_one_error_line(r, 1, "above the limit of 0.001 GB; raise it with --fit-gb N, or audit fewer classes")


def test_audit_buckets_shrink_to_fit_the_limit():
    from sentiment_cli.audit.probabilities import MIN_BUCKETS, audit_buckets

    ids = [list(range(2, 2000))] * 100                     # 600k n-gram occurrences: 4,194,304 buckets
    assert audit_buckets(ids, 2, 8.0) == 1 << 22
    assert audit_buckets(ids, 1_000, 8.0) == 1 << 19       # 524,289 x 1,000 x 12 bytes: 6.3 GB
    assert audit_buckets(ids, 100_000, 8.0) == MIN_BUCKETS


def test_audit_says_scikit_learns_warnings_in_a_line_not_with_its_paths(tmp_path, monkeypatch):
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from sentiment_cli.audit import probabilities

    real = probabilities.select_forms

    def warning(*args, **kwargs):
        for _ in range(3):
            warnings.warn("lbfgs failed to converge (status=1)", ConvergenceWarning)
        warnings.warn("something else", UserWarning)
        return real(*args, **kwargs)

    monkeypatch.setattr(probabilities, "select_forms", warning)
    data = _classes_csv(tmp_path / "d.csv", classes=2, rows_each=20)
    r = invoke("audit", "--data", data, "--folds", 2, "--top", 0)
    assert r.exit_code == 0, r.output
    text = " ".join((r.stdout + r.stderr).split())
    assert "Warning:" not in text and ".py:" not in text and "lbfgs failed" not in text, text
    assert "note: 3 fits of logistic regression stopped at the iteration limit before converging" in text
    assert "note: 1 warning from the libraries during the audit (UserWarning), not shown" in text


def test_several_labels_per_text_count_one_binary_fits_copies_at_a_time():
    """One binary logistic regression per label, one after another: L-BFGS holds one label's vectors (Reuters' 59
    topics over 567,143 n-gram columns with 2^20 buckets: 0.9 GB, not the 8.2 GB that refused the default)."""
    from sentiment_cli.ngram import estimator
    from sentiment_cli.ngram.features import ngram_features
    from sentiment_cli.ngram.memory import FitLimit, fit_bytes

    assert fit_bytes(1 << 20, 59, 567_143, multi_label=True) < 1e9 < 8e9 < fit_bytes(1 << 20, 59, 567_143)
    rng = np.random.default_rng(0)
    ids = [rng.integers(2, 3000, size=20).tolist() for _ in range(300)]
    x = ngram_features(ids, 1 << 12)
    y = (rng.random((300, 20)) < 0.2).astype(np.int64)   # 20 labels, several per text
    seen = len(np.unique(x.indices))
    single, multi = fit_bytes(1 << 12, 20, seen), fit_bytes(1 << 12, 20, seen, multi_label=True)
    limit = FitLimit((single + multi) / 2 / 1e9)   # above one label's copies at a time, below all labels' at once
    fitted = estimator.NgramEstimator(20, "lr", 1.0, limit=limit).fit(x, y)
    assert fitted.multi_label_ and fitted.coef_.shape == (x.shape[1], 20)
    with pytest.raises(Exception, match="logistic regression's working copies"):
        estimator.NgramEstimator(20, "lr", 1.0, limit=limit).fit(x, y.argmax(1))   # one of 20 classes: multinomial

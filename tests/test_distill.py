"""Distillation from the n-gram teacher (``[training] distill_reviews``) on the committed IMDB slice."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from sentiment_cli.checkpoint import read_weights
from sentiment_cli.data.batching import collate
from sentiment_cli.cli import app
from sentiment_cli.data.splits import load_split
from sentiment_cli.errors import DataError, Interrupted
from sentiment_cli.training.interrupts import StopFlag
from sentiment_cli.training.run import resume, train

from bench.nbsvm import fit_nbsvm

from .conftest import SMALL_DATA, small_config
from .test_resume import TIMING, StopAfter

SST5_SMALL = SMALL_DATA.parent / "sst5_small"


@pytest.fixture(scope="module")
def with_unlabelled(tmp_path_factory):
    """The committed slice in the Hub layout plus an ``unsupervised`` split: the slice's 500 test
    reviews with their labels replaced by -1, as the Hub marks unlabelled reviews (a plumbing
    fixture: nothing here is scored on them)."""
    root = tmp_path_factory.mktemp("unlabelled") / "imdb"
    shutil.copytree(SMALL_DATA, root)
    test = pd.read_parquet(root / "plain_text" / "test-00000-of-00001.parquet")
    test.assign(label=-1).to_parquet(root / "plain_text" / "unsupervised-00000-of-00001.parquet")
    (root / "README.md").write_text("---\nconfigs:\n- config_name: plain_text\n  data_files:\n"
                                    "  - split: train\n    path: plain_text/train-*\n"
                                    "  - split: test\n    path: plain_text/test-*\n"
                                    "  - split: unsupervised\n    path: plain_text/unsupervised-*\n---\n")
    return root


@pytest.fixture(scope="module")
def distilled(with_unlabelled, tmp_path_factory):
    """One 2-epoch distillation run on the slice with its unlabelled reviews: ``(result, folder)``, read only."""
    out = tmp_path_factory.mktemp("distilled") / "a"
    return train(distill_config(with_unlabelled), out), out


def distill_config(source, **training):
    cfg = small_config(distill_reviews=200, **training)
    return cfg.override("data", source=str(source)).override("model", ngram_buckets=65_537)


def _history(metrics):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in metrics["history"]]


def test_teacher_learns_the_slice():
    """NB-LR on 900 training reviews of the slice: well above chance on the 500 test reviews,
    and its logits are the two-class form whose softmax is its probability."""
    train_split, test = load_split(str(SMALL_DATA), "train"), load_split(str(SMALL_DATA), "test")
    teacher = fit_nbsvm(train_split.texts, train_split.labels)
    logits = teacher.logits(test.texts)
    assert logits.shape == (500, 2) and logits.dtype == np.float32 and (logits[:, 0] == 0).all()
    assert np.array_equal(teacher.predict(test.texts), logits.argmax(1))
    assert (teacher.predict(test.texts) == np.asarray(test.labels)).mean() > 0.75
    again = fit_nbsvm(train_split.texts, train_split.labels).logits(test.texts)
    assert np.array_equal(logits, again)   # deterministic: a resumed run refits the same teacher


def test_teacher_needs_two_classes():
    sst5 = load_split(str(SST5_SMALL), "train")
    with pytest.raises(DataError, match="needs labelled texts of at least two of its 2 classes"):
        fit_nbsvm(sst5.texts, sst5.labels)


@pytest.mark.slow   # over 5 s on 2 cores: the full suite runs it, the fast lane does not (docs/development.md)
def test_distillation_adds_drawn_unlabelled_reviews_and_reproduces(with_unlabelled, distilled, tmp_path):
    cfg = distill_config(with_unlabelled)
    a, a_folder = distilled
    score, distill_report = a.metrics["ngram_score"], a.metrics["distillation"]
    assert distill_report["unlabelled_reviews"] == 500 and distill_report["reviews_per_epoch"] == 200
    assert 0.6 < score["validation_accuracy"] <= 1.0 and "teacher" not in a.metrics
    card = (a_folder / "README.md").read_text()   # the card names the teacher the fit chose
    assert f"from a teacher, {score['model']}, on 200 unlabelled texts per epoch" in card
    # each epoch: the 900 labelled reviews and 200 unlabelled ones; accuracy counts labelled reviews only
    assert [r["train_examples"] for r in a.metrics["history"]] == [1100, 1100]
    for r in a.metrics["history"]:   # a share of the 900 labelled reviews, not of 1,100
        assert r["train_accuracy"] * 900 == pytest.approx(round(r["train_accuracy"] * 900), abs=1e-6)
    b = train(cfg, tmp_path / "b")
    assert _history(a.metrics) == _history(b.metrics)
    wa, wb = read_weights(a_folder / "model.safetensors"), read_weights(tmp_path / "b" / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    plain = train(cfg.override("training", distill_reviews=0), tmp_path / "plain")
    assert plain.metrics["ngram_score"]["in_logits"] and "distillation" not in plain.metrics
    assert plain.metrics["history"][0]["train_loss"] != a.metrics["history"][0]["train_loss"]


def test_distillation_resumes_where_it_stopped(with_unlabelled, distilled, tmp_path):
    """The unlabelled draw is seeded by epoch and the teacher is refitted the same: a resumed run
    ends exactly as an uninterrupted one (the shared 2-epoch run, stopped after its first epoch)."""
    cfg = distill_config(with_unlabelled, patience=0)
    assert cfg == distill_config(with_unlabelled)   # the shared run's config: patience is 0 there too
    full, full_folder = distilled
    stop = StopFlag()
    with pytest.raises(Interrupted):
        train(cfg, tmp_path / "split", StopAfter(1, stop), stop=stop)
    resumed = resume(tmp_path / "split")
    assert _history(resumed.metrics) == _history(full.metrics)
    wf, wr = read_weights(full_folder / "model.safetensors"), read_weights(tmp_path / "split" / "model.safetensors")
    assert all(torch.equal(wf[k], wr[k]) for k in wf)


def test_soft_targets_are_smoothed_labels_then_teacher_probabilities(with_unlabelled):
    from sentiment_cli.training.callbacks import TrainCallbacks
    from sentiment_cli.data.splits import DataSpec, load_train_validation
    from sentiment_cli.model.classifier import SentimentClassifier
    from sentiment_cli.data.tokenizer import build_tokenizer, encode_texts
    from sentiment_cli.ngram.fit import fit_ngram_score
    from sentiment_cli.training import distill
    from sentiment_cli.training.run_data import RunData

    cfg = distill_config(with_unlabelled, label_smoothing=0.1, distill_weight=0.5)
    train_split, val_split = load_train_validation(DataSpec.from_config(cfg))
    tok = build_tokenizer(train_split.texts, cfg.data)
    train_ids, val_ids = encode_texts(tok, train_split.texts, cfg.data), encode_texts(tok, val_split.texts, cfg.data)
    model = SentimentClassifier.from_config(cfg, tok.get_vocab_size())
    teacher = fit_ngram_score(cfg, model.ngram_score, model.num_labels, train_ids, train_split.labels, val_ids,
                              val_split.labels)
    assert 0.6 < teacher.report["validation_accuracy"] <= 1.0
    assert teacher.score is model.ngram_score and model.ngram_score.weight.abs().sum() > 0   # the model's score
    d = distill.distillation(cfg, RunData(cfg.data.source), tok, teacher, train_split.labels, TrainCallbacks())
    n = len(train_split)
    assert d.targets.shape == (n + 500, 2) and len(d.ids) == 500
    labels = torch.tensor(train_split.labels)
    assert torch.allclose(d.targets[torch.arange(n), labels], torch.full((n,), 0.95))
    assert torch.allclose(d.targets.sum(1), torch.ones(n + 500))
    teacher_side = d.targets[n:, 1]
    assert (teacher_side > 0).all() and (teacher_side < 1).all() and teacher_side.std() > 0.1
    # the probabilities are the model's own n-gram score on those reviews
    input_ids, _ = collate(d.ids[:64])
    token_logits, bias = model.ngram_score(input_ids)
    score = (token_logits.sum(1) + bias)[:, 1]
    assert torch.allclose(torch.sigmoid(score), teacher_side[:64], atol=1e-5)
    assert d.weights[:n].eq(1).all() and d.weights[n:].eq(0.5).all()


def test_distillation_without_unlabelled_reviews_is_one_line(tmp_path):
    r = CliRunner().invoke(app, ["train", "--config", "seed", "--data", str(SMALL_DATA), "--epochs", "1",
                                 "--output", str(tmp_path / "out"), "--set", "training.distill_reviews=10"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.output.strip().splitlines()[-1] == (
        f"error: {SMALL_DATA} has no 'unsupervised' split (it has: train, test) and [data] unlabelled is empty; "
        "distillation needs unlabelled text: give it with --unlabelled PATH, or set training.distill_reviews=0")


def test_more_distill_reviews_than_unlabelled_ones_is_one_line(with_unlabelled, tmp_path):
    r = CliRunner().invoke(app, ["train", "--config", "seed", "--data", str(with_unlabelled), "--epochs", "1",
                                 "--output", str(tmp_path / "out"), "--set", "training.distill_reviews=501"])
    assert r.exit_code == 1
    assert r.output.strip().splitlines()[-1] == (
        f"error: [training] distill_reviews is 501 but {with_unlabelled} has 500 unlabelled texts; lower it")


@pytest.mark.slow   # the default preset's whole path: word2vec, then training
def test_distillation_asked_for_on_a_file_without_unlabelled_text_names_both_ways_out(tmp_path):
    """The default's rules turn distillation off without unlabelled text; asked for on the command line,
    it stops with one line naming --unlabelled and the setting."""
    data = str(SMALL_DATA.parent / "reviews_small" / "reviews.csv")
    base = ["train", "--data", data, "--epochs", "1", "--output", str(tmp_path / "out"), "--time-budget", "0",
            "--set", f"training.init_from={tmp_path / 'pre'}", "--set", "pretrain.epochs=1"]
    r = CliRunner().invoke(app, [*base, "--set", "training.distill_reviews=200"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.output.strip().splitlines()[-1] == (
        f"error: {data} has no 'unsupervised' split (it has: train) and [data] unlabelled is empty; distillation "
        "needs unlabelled text: give it with --unlabelled PATH, or set training.distill_reviews=0")
    r = CliRunner().invoke(app, base)
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "out" / "config.json").read_text())["training"]["distill_reviews"] == 0


@pytest.mark.slow   # the default preset's whole path: word2vec, then training
def test_the_default_preset_pretrains_then_distils_in_one_train(with_unlabelled, tmp_path, monkeypatch):
    """The default's whole path, as `sentiment train` runs it: the word2vec stage on unsupervised+train, the
    teacher, then fine-tuning on the labelled reviews and a draw of the unlabelled ones (shrunk to seconds)."""
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["train", "--data", str(with_unlabelled), "--epochs", "1", "--device", "cpu",
                                 "--set", "pretrain.epochs=1", "--set", "training.distill_reviews=200",
                                 "--set", "training.negation_augment=0",   # counts below: the reviews alone
                                 "--set", "training.lexicon_prior=0",
                                 "--time-budget", "0"])
    assert r.exit_code == 0, r.output
    metrics = json.loads((tmp_path / "checkpoints" / "default" / "metrics.json").read_text())
    folder = next(rule["value"] for rule in metrics["data_rules"] if rule["key"] == "training.init_from")
    assert folder.startswith("checkpoints/pretrained-imdb-")                     # this data's own folder
    pretrained = json.loads((tmp_path / folder / "metrics.json").read_text())
    # unsupervised + the training part of train (the rules hold out 10% of the 1,000 for the temperature)
    assert pretrained["kind"] == "pretrained" and pretrained["data"]["reviews"] == 500 + 900
    assert metrics["pretrained"]["made_by_this_run"] is True
    assert metrics["distillation"]["reviews_per_epoch"] == 200
    assert metrics["held_out_run"]["history"][0]["train_examples"] == 900 + 200
    # then the refit (under 20,000 rows): the 100 held-out reviews too, from the same pretrained folder
    assert metrics["history"][0]["train_examples"] == 1000 + 200 and metrics["pretrained"]["from"].endswith(folder)


def test_the_residual_encoder_trains_beside_cross_fitted_scores(tmp_path):
    """ngram_residual: the training logits carry each review's n-gram score from a fit that never saw it, which
    is far less sure of the training reviews than the score fitted on all of them."""
    from sentiment_cli.data.tokenizer import build_tokenizer, encode_texts
    from sentiment_cli.ngram.crossfit import RESIDUAL_FOLDS, residual_logits
    from sentiment_cli.ngram.estimator import NgramEstimator
    from sentiment_cli.ngram.features import ngram_features

    train_split = load_split(str(SMALL_DATA), "train")
    cfg = small_config()
    ids = encode_texts(build_tokenizer(train_split.texts, cfg.data), train_split.texts, cfg.data)
    y = np.asarray(train_split.labels)
    x = ngram_features(ids, 65_537)
    cross = dict(num_labels=2, seed=1, form="nb-lr", C=0.1)
    crossed = residual_logits(x, train_split.labels, **cross)[:, 1]
    full = NgramEstimator(2, "nb-lr").fit(x, train_split.labels).decision_function(x)[:, 0]
    assert ((full > 0) == y).mean() > 0.99                       # the full fit has learnt its training reviews
    assert 0.6 < ((crossed > 0) == y).mean() < 0.95              # the cross-fitted score is as on new reviews
    assert np.array_equal(crossed, residual_logits(x, train_split.labels, **cross)[:, 1])
    result = train(small_config(epochs=1).override("model", ngram_buckets=65_537)
                   .override("training", ngram_residual=True), tmp_path / "out")
    report = result.metrics["ngram_score"]
    assert report["cross_fitted_folds"] == RESIDUAL_FOLDS and report["chosen_by"] == "cross-validation"
    assert report["cv_accuracy"][f"{report['form']} C={report['C']:g}"] == max(report["cv_accuracy"].values())


def test_residual_training_needs_the_ngram_score():
    from sentiment_cli.errors import ConfigError

    with pytest.raises(ConfigError, match=r"ngram_residual learns beside the n-gram score, but \[model\] "
                                          r"ngram_buckets is 0"):
        small_config().override("training", ngram_residual=True)

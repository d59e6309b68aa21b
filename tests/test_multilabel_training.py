"""Multi-label training: the loss, the n-gram score per label, distillation, the decision rule, the data rules."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sentiment_cli.config import load_config

from .conftest import GOEMOTIONS_SMALL, ROOT


def test_the_n_gram_fit_is_one_binary_fit_per_label():
    import scipy.sparse as sp

    from sentiment_cli.ngram.forms import fit_columns

    rng = np.random.default_rng(0)
    x = sp.csr_matrix((rng.random((200, 50)) < 0.1).astype(np.float32))
    y = (rng.random((200, 3)) < 0.3).astype(np.int64)
    y[:, 1] = (x[:, 7].toarray().ravel() > 0)   # label 1 follows feature 7
    for form in ("lr", "nb-lr"):
        w, b = fit_columns(x, y, 3, form, 1.0)
        assert w.shape == (50, 3) and b.shape == (3,)
        alone, bias = fit_columns(x, y[:, 1], 2, form, 1.0)        # the same label fitted as a two-class problem
        np.testing.assert_allclose(w[:, 1], alone[:, 0], atol=1e-4)
        assert b[1] == pytest.approx(bias[0], abs=1e-4)
        assert w[7, 1] > 0 and w[7, 1] == w[:, 1].max()


def test_the_loss_is_binary_cross_entropy_with_positive_weights():
    from sentiment_cli.training import distill, imbalance

    y = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 0], [0, 0, 1]], dtype=torch.float32)
    pw = imbalance.positive_weights(y)
    assert pw.tolist() == pytest.approx([(1 / 3) ** 0.5, 3 ** 0.5, 3 ** 0.5])
    cfg = load_config(ROOT / "configs" / "seed.toml")
    loss = distill.loss_function(cfg, None, y, torch.arange(4), torch.device("cpu"), pw)
    logits = torch.randn(4, 3)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits, y, pos_weight=pw)
    assert float(loss(logits)) == pytest.approx(float(expected))


def test_a_multi_label_run_distils_and_keeps_a_decision_per_label(tmp_path):
    from sentiment_cli.checkpoint import load_checkpoint
    from sentiment_cli.training.run import train

    cfg = load_config(ROOT / "configs" / "seed.toml").override(
        "data", source=str(GOEMOTIONS_SMALL), vocab_size=3000, max_length=48,
        unlabelled=str(GOEMOTIONS_SMALL / "test.csv"))
    cfg = cfg.override("model", ngram_buckets=1 << 15).override(
        "training", epochs=1, batch_size=32, device="cpu", distill_reviews=100, class_weight="balanced")
    result = train(cfg, tmp_path / "run")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["data"]["multi_label"] is True and metrics["data"]["unlabelled_rows"] == 0
    losses = result.validation_losses   # each validation text's loss, for the search's one-standard-error rule
    assert losses.shape == (metrics["data"]["validation_examples"],)
    assert losses.mean() == pytest.approx(metrics["calibration"]["nll"], rel=1e-9)
    assert metrics["distillation"]["reviews_per_epoch"] == 100
    assert len(metrics["class_weights"]) == 28
    ckpt = load_checkpoint(tmp_path / "run")
    rule = ckpt.decision
    assert len(rule["thresholds"]) == len(rule["temperatures"]) == len(ckpt.labels) == 28
    assert all(0 < t <= 1 for t in rule["thresholds"])
    assert rule["min_labels"] == 1   # every training text has a label: [predict] min_labels auto


def test_the_rules_for_several_labels_per_text():
    from sentiment_cli.training.auto import Profile, data_rules
    from sentiment_cli.training.policy import DEFAULT

    MULTI_LABEL_STEPS = DEFAULT.rules.multi_label_steps

    cfg = load_config("default")
    profile = Profile(train_rows=43_410, class_counts=(4000, 77) + (500,) * 26, has_validation=True, unlabelled=0,
                      length_quantile=33, tokens=695_263, length_ratio=1.0, labels=tuple(f"l{i}" for i in range(28)),
                      reading="multi-label: column 'labels'")
    chosen = {c.key: c.value for c in data_rules(profile, cfg)}
    assert chosen["model.ngram_fit"] == "lr" and chosen["model.ngram_c"] == 1.0
    steps = -(-43_410 // cfg.training.batch_size)
    assert chosen["training.epochs"] * steps >= MULTI_LABEL_STEPS
    assert chosen["training.time_budget"] == 600.0
    assert chosen["model.ngram_buckets"] * 28 <= 1 << 26
    single = {c.key: c.value for c in data_rules(Profile(**{**profile.__dict__, "reading": ""}), cfg)}
    assert "model.ngram_c" not in single and "training.time_budget" not in single   # 43,410 rows: not small
    small = {c.key: c.value for c in data_rules(Profile(**{**profile.__dict__, "reading": "", "train_rows": 9_000}),
                                                      cfg)}
    # a small set's budget, not several labels' 600 s: 9,000 rows cut at 40 tokens, 8 epochs, read 2.9M tokens a run:
    # 300 s x 2.88M / 2.5M, in whole minutes
    assert small["training.time_budget"] == 360.0


def test_each_predicted_labels_explanation_adds_up_to_its_own_logit(multilabel_checkpoint):
    from sentiment_cli.inference.predictor import Predictor

    p = Predictor(multilabel_checkpoint)
    texts = ["Thanks, this made my day!", "I am so angry and sad about this.", "what? why would you do that"]
    logits = p.logits(texts)                                           # an independent forward pass
    for i, e in enumerate(p.explain(texts)):
        assert [x.target for x in e.explanations] == e.labels and e.labels   # min_labels 1: never empty
        for x in e.explanations:
            j = p.labels.index(x.target)
            assert x.bias + sum(x.scores) == pytest.approx(float(logits[i, j]), abs=1e-4)
            assert x.probability == pytest.approx(e.probabilities[x.target])

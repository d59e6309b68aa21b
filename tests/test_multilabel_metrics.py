"""Multi-label metrics (evaluation/multilabel.py), and thresholds, decisions and temperatures
(inference/multilabel.py), against hand-computed values and scikit-learn; their rendering (cli/evaluate.py)."""

import numpy as np
import pytest
from sklearn.metrics import (accuracy_score, f1_score, hamming_loss, label_ranking_average_precision_score,
                             precision_recall_fscore_support)

from sentiment_cli.evaluation.multilabel import binary_ece, multilabel_metrics
from sentiment_cli.inference.multilabel import THRESHOLD_GRID, decide, fit_label_temperatures, fit_thresholds, sigmoid

NAMES = ["a", "b", "c"]
Y = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 0]])
PRED = np.array([[1, 0, 0], [0, 1, 1], [1, 0, 0], [0, 0, 0]], dtype=bool)
P = np.array([[0.9, 0.5, 0.4], [0.1, 0.8, 0.6], [0.7, 0.3, 0.2], [0.1, 0.1, 0.1]])


def test_metrics_by_hand():
    m = multilabel_metrics(Y, PRED, P, NAMES)
    # a: tp 2 fp 0 fn 0; b: tp 1 fp 0 fn 1; c: tp 0 fp 1 fn 1
    assert m["per_label"]["a"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2}
    assert m["per_label"]["b"] == pytest.approx({"precision": 1.0, "recall": 0.5, "f1": 2 / 3, "support": 2})
    assert m["per_label"]["c"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert m["micro"] == pytest.approx({"precision": 3 / 4, "recall": 3 / 5, "f1": 2 / 3})   # tp 3, fp 1, fn 2
    assert m["macro"] == pytest.approx({"precision": 2 / 3, "recall": 1.5 / 3, "f1": 5 / 9})
    assert m["weighted"]["f1"] == pytest.approx((2 * 1 + 2 * 2 / 3 + 0) / 5)
    assert m["subset_accuracy"] == 0.25 and m["hamming_loss"] == 0.25 and m["examples"] == 4
    # row 0: a ranked 1st (1/1), c 3rd (2/3); rows 1, 2 perfect; row 3 has no true label: 1, as scikit-learn
    assert m["lrap"] == pytest.approx((5 / 6 + 1 + 1 + 1) / 4)
    # 15 bins; a: 0.1 twice in one bin (gap -0.2), 0.9 (+0.1), 0.7 (+0.3); b and c: each text in its own bin
    assert m["ece_per_label"] == pytest.approx({"a": 0.6 / 4, "b": 1.5 / 4, "c": 1.5 / 4})
    assert m["ece"] == pytest.approx(0.3)
    assert m["multi_label"] is True
    assert set(m) == {"multi_label", "examples", "micro", "macro", "weighted", "per_label", "subset_accuracy",
                      "hamming_loss", "lrap", "ece", "ece_per_label"}


def test_metrics_match_sklearn_on_random_data():
    rng = np.random.default_rng(0)
    n, L = 500, 7
    p = rng.uniform(size=(n, L))
    y = (rng.uniform(size=(n, L)) < p * np.linspace(0.05, 0.9, L)).astype(int)
    y[:, 6] = 0                                       # a label with no positives: zero_division=0
    pred = p > 0.6
    names = [f"label{j}" for j in range(L)]
    m = multilabel_metrics(y, pred, p, names)
    for avg in ("micro", "macro", "weighted"):
        prec, rec, f1, _ = precision_recall_fscore_support(y, pred, average=avg, zero_division=0)
        assert m[avg] == pytest.approx({"precision": prec, "recall": rec, "f1": f1})
    f1 = f1_score(y, pred, average=None, zero_division=0)
    assert [m["per_label"][name]["f1"] for name in names] == pytest.approx(f1)
    assert [m["per_label"][name]["support"] for name in names] == y.sum(axis=0).tolist()
    assert m["hamming_loss"] == pytest.approx(hamming_loss(y, pred))
    assert m["subset_accuracy"] == pytest.approx(accuracy_score(y, pred))
    assert m["lrap"] == pytest.approx(label_ranking_average_precision_score(y, p))


def test_metrics_refuse_bad_input():
    with pytest.raises(ValueError, match="shape"):
        multilabel_metrics(Y, PRED[:, :2], P, NAMES)
    with pytest.raises(ValueError, match="shape"):
        multilabel_metrics(Y, PRED, P, ["a", "b"])
    with pytest.raises(ValueError, match="0 and 1"):
        multilabel_metrics(Y * 2, PRED, P, NAMES)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        multilabel_metrics(Y, PRED, P + 0.5, NAMES)
    with pytest.raises(ValueError, match="at least one"):
        multilabel_metrics(Y[:0], PRED[:0], P[:0], NAMES)


def test_binary_ece_of_calibrated_and_overconfident_probabilities():
    rng = np.random.default_rng(1)
    p = rng.uniform(size=200_000)
    y = rng.uniform(size=p.shape) < p                 # the label is there exactly as often as p says
    assert binary_ece(p, y) < 0.005
    sharp = sigmoid(np.log(p / (1 - p)) * 3.0)        # the same ranking, too sure of itself
    assert binary_ece(sharp, y) > 0.1


def test_thresholds_beat_one_half_on_a_constructed_case():
    rng = np.random.default_rng(2)
    n = 400
    y = np.zeros((n, 3), dtype=int)
    y[:200, 0] = 1                                    # label 0: positives near 0.3, negatives near 0.1
    y[::2, 1] = 1                                     # label 1: positives near 0.9, negatives near 0.7
                                                      # label 2: no positives, rare
    p = np.empty((n, 3))
    p[:, 0] = np.where(y[:, 0], 0.3, 0.1) + rng.uniform(-0.05, 0.05, n)
    p[:, 1] = np.where(y[:, 1], 0.9, 0.7) + rng.uniform(-0.05, 0.05, n)
    p[:, 2] = rng.uniform(0, 0.6, n)
    thresholds, shared, rare = fit_thresholds(p, y)
    assert rare == [2] and thresholds[2] == shared
    assert 0.14 < thresholds[0] <= 0.25 and 0.74 < thresholds[1] <= 0.85   # on the plateaus of F1 1
    fitted, half = decide(p, thresholds), p >= 0.5
    assert f1_score(y[:, :2], fitted[:, :2], average=None).tolist() == [1.0, 1.0]
    assert f1_score(y, fitted, average="micro") > f1_score(y, half, average="micro") + 0.2
    # the shared threshold maximises micro-F1 over all labels on the grid
    best = max(f1_score(y, p >= t, average="micro") for t in THRESHOLD_GRID)
    assert f1_score(y, p >= shared, average="micro") == pytest.approx(best)


def test_a_plateau_of_f1_takes_its_lowest_threshold_and_one_positive_earns_a_threshold_of_its_own():
    p = np.array([[0.6, 0.1], [0.6, 0.4], [0.6, 0.1], [0.2, 0.1], [0.2, 0.1], [0.2, 0.1]])
    y = np.array([[1, 0], [1, 1], [1, 0], [0, 0], [0, 0], [0, 0]])
    thresholds, _, rare = fit_thresholds(p, y)
    assert rare == [] and thresholds.tolist() == [0.21, 0.11]   # F1 is 1 from just above the negatives up


def test_each_threshold_maximises_its_labels_f1_over_the_grid():
    rng = np.random.default_rng(3)
    p = rng.uniform(size=(300, 4))
    y = (rng.uniform(size=p.shape) < p ** 2).astype(int)
    thresholds, _, rare = fit_thresholds(p, y, min_support=0)
    assert rare == []
    for j in range(4):
        best = max(f1_score(y[:, j], p[:, j] >= t, zero_division=0) for t in THRESHOLD_GRID)
        assert f1_score(y[:, j], p[:, j] >= thresholds[j], zero_division=0) == pytest.approx(best)
        assert thresholds[j] in THRESHOLD_GRID


def test_fit_thresholds_refuses_bad_input():
    p, y = np.full((4, 2), 0.5), np.ones((4, 2))
    with pytest.raises(ValueError, match="same"):
        fit_thresholds(p, y[:, :1])
    with pytest.raises(ValueError, match="grid"):
        fit_thresholds(p, y, grid=[])
    with pytest.raises(ValueError, match="grid"):
        fit_thresholds(p, y, grid=[1.5])
    with pytest.raises(ValueError, match="min_support"):
        fit_thresholds(p, y, min_support=-1)


def test_decide_with_min_labels_one_never_leaves_a_row_empty():
    rng = np.random.default_rng(4)
    p = rng.uniform(size=(1000, 6)) ** 3
    thresholds = np.full(6, 0.8)
    none_allowed = decide(p, thresholds, min_labels=0)
    assert (none_allowed.sum(axis=1) == 0).any()
    at_least_one = decide(p, thresholds, min_labels=1)
    assert (at_least_one.sum(axis=1) >= 1).all()
    empty = none_allowed.sum(axis=1) == 0
    assert (at_least_one[~empty] == none_allowed[~empty]).all()              # rows with a label: unchanged
    assert (at_least_one[empty].argmax(axis=1) == p[empty].argmax(axis=1)).all()
    assert (at_least_one[empty].sum(axis=1) == 1).all()
    assert decide(np.array([[0.2, 0.2, 0.1]]), 0.5, min_labels=1).tolist() == [[True, False, False]]   # ties: lower id
    assert decide(np.array([[0.5, 0.49]]), np.array([0.5, 0.5])).tolist() == [[True, False]]          # p >= t


def test_decide_refuses_bad_input():
    with pytest.raises(ValueError, match="thresholds"):
        decide(np.zeros((2, 3)), np.zeros(2))
    with pytest.raises(ValueError, match="min_labels"):
        decide(np.zeros((2, 3)), 0.5, min_labels=-1)


def test_sigmoid_is_stable_and_divides_by_each_labels_temperature():
    z = np.array([[-1000.0, 0.0, 2.0], [1000.0, -3.0, 40.0]])
    t = np.array([1.0, 2.0, 4.0])
    s = sigmoid(z, t)
    assert np.isfinite(s).all() and s[0, 0] == 0.0 and s[1, 0] == 1.0
    assert s[:, 1:] == pytest.approx(1 / (1 + np.exp(-z[:, 1:] / t[1:])))
    assert sigmoid(z).shape == z.shape


def test_label_temperatures_recover_a_known_scale():
    rng = np.random.default_rng(5)
    n = 20_000
    true_t = np.array([2.5, 0.5, 1.0])
    z = rng.normal(0.0, 4.0, size=(n, 3))
    y = (rng.uniform(size=z.shape) < sigmoid(z, true_t)).astype(int)
    t = fit_label_temperatures(z, y)
    assert t.shape == (3,)
    assert t == pytest.approx(true_t, rel=0.08)
    with pytest.raises(ValueError, match="finite"):
        fit_label_temperatures(np.array([[np.nan]]), np.array([[1]]))
    with pytest.raises(ValueError, match="same"):
        fit_label_temperatures(z, y[:, :2])


def test_render_shows_the_summary_and_every_label_by_support():
    from rich.console import Console

    from sentiment_cli.cli.evaluate import render_multilabel_eval

    m = multilabel_metrics(Y, PRED, P, ["admiration", "grief", "nervousness"])
    m["thresholds"] = {"admiration": 0.31, "grief": 0.42, "nervousness": 0.27}
    console = Console(record=True, width=140)
    render_multilabel_eval(console, m)
    text = console.export_text()
    for word in ("micro", "macro", "weighted", "subset accuracy", "Hamming loss", "LRAP", "ECE",
                 "admiration", "grief", "nervousness", "0.31", "0.42", "0.27"):
        assert word in text
    assert text.index("nervousness") > text.index("grief") > text.index("admiration")   # support 1 last
    plain = Console(record=True, width=140)
    render_multilabel_eval(plain, multilabel_metrics(Y, PRED, P, NAMES))   # no thresholds: no column
    assert "threshold" not in plain.export_text()

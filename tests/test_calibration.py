"""ECE and temperature scaling (Guo et al. 2017) against hand-computed values and scikit-learn's log loss."""

import math

import numpy as np
import pytest

from sentiment_cli.evaluation.calibration import expected_calibration_error, fit_temperature, nll, reliability
from sentiment_cli.inference.probabilities import softmax


def test_ece_by_hand():
    # 4 predictions: confidences 0.95, 0.95 (bin 15), 0.55 (bin 9), 0.65 (bin 10) with 15 bins
    p = np.array([[0.05, 0.95], [0.95, 0.05], [0.45, 0.55], [0.65, 0.35]])
    y = [1, 1, 1, 1]   # right, wrong, right, wrong
    r = reliability(p, y, bins=15)
    assert sum(r.counts) == 4 and r.counts[14] == 2 and r.counts[8] == 1 and r.counts[9] == 1
    # bin 15: acc 0.5, conf 0.95; bin 9: acc 1, conf 0.55; bin 10: acc 0, conf 0.65
    expected = 2 / 4 * 0.45 + 1 / 4 * 0.45 + 1 / 4 * 0.65
    assert r.ece == pytest.approx(expected)
    assert expected_calibration_error(p, y) == pytest.approx(expected)


def test_a_perfectly_calibrated_model_has_ece_near_zero_and_an_overconfident_one_does_not():
    rng = np.random.default_rng(0)
    conf = rng.uniform(0.5, 1.0, 200_000)
    right = rng.uniform(size=conf.shape) < conf            # right exactly as often as it says
    p = np.stack([1 - conf, conf], axis=1)
    y = np.where(right, 1, 0)
    assert expected_calibration_error(p, y) < 0.005
    sharp = softmax(np.log(p) * 3.0)                        # the same ranking, too sure of itself
    assert expected_calibration_error(sharp, y) > 0.1


def test_bin_edges_follow_guo_et_al():
    # confidence exactly 1/15 * k lands in bin k-1; confidence 1.0 in the last bin
    p = np.array([[1 / 3, 2 / 3], [0.0, 1.0]])
    r = reliability(p, [1, 1], bins=15)
    assert r.counts[9] == 1 and r.counts[14] == 1


def test_nll_matches_scikit_learn():
    from sklearn.metrics import log_loss

    rng = np.random.default_rng(1)
    z = rng.normal(size=(500, 5)) * 3
    y = rng.integers(0, 5, 500)
    assert nll(z, y, 2.0) == pytest.approx(log_loss(y, softmax(z, 2.0), labels=range(5)), rel=1e-9)


def test_fit_temperature_recovers_a_known_temperature():
    # Labels drawn from softmax(z / 2.5): the NLL-optimal temperature on the sharp logits z is ~2.5.
    rng = np.random.default_rng(2)
    z = rng.normal(size=(50_000, 3)) * 4
    p = softmax(z, 2.5)
    y = (p.cumsum(axis=1) > rng.uniform(size=(len(z), 1))).argmax(axis=1)
    t = fit_temperature(z, y)
    assert t == pytest.approx(2.5, rel=0.05)
    assert nll(z, y, t) < nll(z, y, 1.0)
    assert nll(z, y, t) <= min(nll(z, y, t * 1.02), nll(z, y, t / 1.02))   # a minimum
    # the labels (argmax) never change
    assert (softmax(z, t).argmax(1) == z.argmax(1)).all()


def test_fit_temperature_refuses_empty_or_non_finite_logits():
    with pytest.raises(ValueError, match="at least one"):
        fit_temperature(np.zeros((0, 2)), [])
    with pytest.raises(ValueError, match="not all finite"):
        fit_temperature(np.array([[math.nan, 0.0]]), [0])

"""bench.audit's bookkeeping: the flips it makes and the means over flip seeds (its figures come from a run)."""

import numpy as np
import pytest

from bench.audit import flip, means, scores


def test_flip_changes_exactly_the_drawn_rows_to_another_class():
    labels = np.repeat(np.arange(3), 100)
    noisy, rows = flip(labels, ["a", "b", "c"], 0.05, seed=0, kind="uniform")
    assert len(rows) == 15
    assert np.array_equal(np.flatnonzero(noisy != labels), rows)
    again, rows2 = flip(labels, ["a", "b", "c"], 0.05, seed=0, kind="uniform")
    assert np.array_equal(again, noisy) and np.array_equal(rows2, rows)
    assert not np.array_equal(flip(labels, ["a", "b", "c"], 0.05, seed=1, kind="uniform")[1], rows)


def test_scores_of_flagged_rows():
    s = scores(np.array([1, 2, 3, 4]), np.array([2, 4, 6]))
    assert s["precision"] == pytest.approx(0.5) and s["recall"] == pytest.approx(2 / 3)
    assert s["f1"] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))


def _case(name, seed, clean, noisy, audit, peer, f1):
    return {"case": name, "seed": seed, "audit": {"f1": f1}, "peer": {"f1": f1 - 0.1},
            "test_accuracy": {"clean": clean, "noisy": noisy, "audit_removed": audit, "peer_removed": peer}}


def test_means_recover_the_mean_gain_over_the_mean_cost():
    cases = {"s seed 0": _case("s", 0, 0.90, 0.88, 0.89, 0.88, 0.6),
             "s seed 1": _case("s", 1, 0.90, 0.86, 0.89, 0.87, 0.7),
             "t seed 0": _case("t", 0, 0.80, 0.81, 0.80, 0.82, 0.5)}
    m = means({"cases": cases})
    assert m["s"]["seeds"] == [0, 1]
    assert m["s"]["test_accuracy"]["noisy"] == pytest.approx(0.87)
    assert m["s"]["recovered"]["audit"] == pytest.approx((0.89 - 0.87) / (0.90 - 0.87))   # 2/3, not the mean of 1/2 and 3/4
    assert m["s"]["recovered"]["peer"] == pytest.approx((0.875 - 0.87) / 0.03)
    assert m["s"]["f1"]["audit"] == pytest.approx(0.65)
    assert m["t"]["recovered"] == {"audit": None, "peer": None}                            # the noise cost nothing

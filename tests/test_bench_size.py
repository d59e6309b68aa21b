"""bench/size.py: each ladder rung written, loaded and scored; the rule that picks the smallest within tolerance."""

import json

import pytest

from bench.size import ours, report, smallest_within


def test_the_rule_picks_the_smallest_model_within_the_tolerance_of_the_full_one():
    rows = [{"model": "ours", "setting": "full", "weights_bytes": 100, "validation_accuracy": 0.900},
            {"model": "ours", "setting": "a", "weights_bytes": 40, "validation_accuracy": 0.899},
            {"model": "ours", "setting": "b", "weights_bytes": 20, "validation_accuracy": 0.898},
            {"model": "ours", "setting": "c", "weights_bytes": 10, "validation_accuracy": 0.897}]
    assert smallest_within(rows)["setting"] == "b"        # 0.2 points below the full model at most
    assert smallest_within(rows, 0.0)["setting"] == "full"
    assert smallest_within([]) is None
    assert "ours: smallest within 0.2% of the full model's dev accuracy: b" in report(rows)


@pytest.mark.slow   # six folders written, loaded and scored (seconds)
def test_every_rung_is_written_loaded_and_scored(compressible_checkpoint, tmp_path):
    rows = ours(compressible_checkpoint, tmp_path, None)
    assert [r["setting"] for r in rows][0] == "full" and len(rows) == 6
    sizes = [r["weights_bytes"] for r in rows]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < sizes[0] / 4
    assert all((tmp_path / name / "README.md").exists() for name in ("full", "rung1", "rung5"))
    config = json.loads((tmp_path / "rung1" / "config.json").read_text())
    assert rows[1]["compression"] == {**config["compression"]["keep"], "bits": config["compression"]["bits"]}
    assert all(0.5 <= r["test_accuracy"] <= 1 and r["validation_nll"] > 0 for r in rows)

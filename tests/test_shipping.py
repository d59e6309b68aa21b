"""The model a run ships (training/shipping.py): the smallest compression within the policy's margin or one standard
error of the full model's validation log-loss, chosen by the run itself; a refit applies its held-out run's choice."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from sentiment_cli.checkpoint import read_record, weights_bytes
from sentiment_cli.evaluation import calibration
from sentiment_cli.inference.torch_backend import batched_logits
from sentiment_cli.training import shipping
from sentiment_cli.training.policy import DEFAULT
from sentiment_cli.training.run import train

from .conftest import small_config


def _tables(**training):
    """The seed preset with all three compressible tables (words, hashed bigrams, an n-gram score)."""
    return small_config(**{"compress": "auto", **training}).override("model", bigram_buckets=997,
                                                                     ngram_buckets=65_537)


def test_a_run_ships_the_smallest_compression_its_validation_allows_and_says_so(tmp_path):
    out = tmp_path / "run"
    result = train(_tables(epochs=2), out)
    report = result.metrics["compression"]
    names = [c["name"] for c in report["candidates"]]
    assert names[0] == "full" and len(names) == 1 + len(DEFAULT.ship.rungs)
    within = [c for c in report["candidates"][1:] if c["within"]]
    smallest = min(within, key=lambda c: c["bytes"])
    assert report["chosen"] == smallest["compression"] and report["bytes"] == smallest["bytes"] < report["full_bytes"]
    stored = json.loads((out / "config.json").read_text())
    assert stored["compression"] == report["chosen"] and stored["temperature"] == result.record.temperature
    # the folder is what was scored: its weights' bytes, and the record read back compresses no further
    record = read_record(out)
    assert record.compression is not None and weights_bytes(record.weights, record.compression) == report["bytes"]
    assert not (out / "full").exists()


def test_keep_full_writes_the_model_before_compression_beside(tmp_path):
    out = tmp_path / "run"
    result = train(_tables(epochs=1), out, keep_full=True)
    full = read_record(out / "full")
    assert full.compression is None and "compression" not in full.metrics
    assert weights_bytes(full.weights) == result.metrics["compression"]["full_bytes"]
    assert all(torch.equal(full.weights[k], v) for k, v in result.record.full.weights.items())


@pytest.mark.slow   # over 5 s on 2 cores: the full suite runs it, the fast lane does not (docs/development.md)
def test_a_stricter_policy_ships_a_larger_model_and_none_ships_the_full_one(tmp_path):
    """The rule is the policy's: with a tolerance below zero no compression can be as good, so the full model is
    shipped; with a margin of a whole nat every one is, so the smallest is; [training] compress = "none" ships the
    full model without scoring any."""
    strict = dataclasses.replace(DEFAULT, ship=dataclasses.replace(DEFAULT.ship, se=-1e9, margin=-1e9))
    result = train(_tables(epochs=1), tmp_path / "strict", policy=strict)
    assert result.metrics["compression"]["chosen"] is None and result.record.compression is None
    lenient = dataclasses.replace(DEFAULT, ship=dataclasses.replace(DEFAULT.ship, se=-1e9, margin=1.0))
    report = train(_tables(epochs=1), tmp_path / "lenient", policy=lenient).metrics["compression"]
    assert report["bytes"] == min(c["bytes"] for c in report["candidates"])
    result = train(_tables(epochs=1, compress="none"), tmp_path / "full")
    assert "compression" not in result.metrics and result.record.compression is None


def test_ship_keeps_a_compression_only_within_one_paired_standard_error(compressible_checkpoint):
    """The rule on real validation rows: each candidate's log-loss after its own temperature against the full
    model's, row by row."""
    from sentiment_cli.data.splits import DataSpec, load_train_validation
    from sentiment_cli.data.tokenizer import encode_texts

    full = read_record(compressible_checkpoint)
    _, val = load_train_validation(DataSpec.from_config(full.config))
    ids = encode_texts(full.loaded(compressible_checkpoint).tokenizer, list(val.texts), full.config.data)
    shipped = shipping.ship(full, ids, val.labels, DEFAULT.ship, torch.device("cpu"), 64)
    report = shipped.metrics["compression"]
    base = None
    for row in report["candidates"]:
        record = full if row["compression"] is None else full.compressed(
            shipping.Compression.from_record(row["compression"]))
        logits = batched_logits(record.model(), ids, batch_size=64, device=torch.device("cpu")).numpy().astype(
            np.float64)
        losses = calibration.row_nll(logits, val.labels, calibration.fit_temperature(logits, val.labels))
        assert row["validation_nll"] == pytest.approx(losses.mean())
        if base is None:
            base = losses
            continue
        d = losses - base
        assert row["within"] == bool(d.mean() <= max(DEFAULT.ship.margin, d.std(ddof=1) / np.sqrt(len(d))))


@pytest.mark.slow   # over 5 s on 2 cores: the full suite runs it, the fast lane does not (docs/development.md)
def test_a_refit_ships_what_its_held_out_run_chose(tmp_path):
    result = train(_tables(epochs=2, refit=True).override("data", validation_fraction=0.1), tmp_path / "refit")
    assert result.metrics["held_out_run"]["best_epoch"] >= 1
    report = result.metrics["compression"]
    assert result.record.compression is not None and result.record.compression.record() == report["chosen"]
    assert result.record.temperature == report["temperature"]

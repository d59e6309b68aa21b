"""Shared fixtures: the committed IMDB slice and a small checkpoint trained on it once per session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from sentiment_cli.config import load_config

ROOT = Path(__file__).resolve().parent.parent
SMALL_DATA = Path(__file__).resolve().parent / "data" / "imdb_small"   # 1,000 train + 500 test reviews
GOEMOTIONS_SMALL = Path(__file__).resolve().parent / "data" / "goemotions_small"   # 1,200 multi-label rows
FULL_DATA = ROOT.parent / "shared" / "data" / "imdb"                 # the full set, beside the clone

# The tiny test models gain nothing from several threads, and on a shared machine torch's busy-waiting
# threads slow them down many times over. One thread in this process and in the subprocesses tests start; training
# keeps a pinned OMP_NUM_THREADS rather than follow the load, so a run's float sums repeat from run to run.
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)
# the checkout first, then any PYTHONPATH of the caller's (packages carried beside an image's own, as on a GPU machine)
SUBPROCESS_ENV = {**os.environ,
                  "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
PYTHON = sys.executable


def small_config(**training):
    """configs/seed.toml on the committed slice, shrunk so a run takes seconds; the full model written
    (``compress = "none"``: a test reads back the weights it trained; the shipping rule's own tests set ``auto``)."""
    cfg = load_config(ROOT / "configs" / "seed.toml")
    cfg = cfg.override("data", source=str(SMALL_DATA), vocab_size=5000)
    return cfg.override("training", **{"epochs": 2, "batch_size": 64, "device": "cpu", "compress": "none",
                                       **training})


@pytest.fixture(scope="session")
def trained_checkpoint(tmp_path_factory) -> Path:
    """A checkpoint folder trained for a few epochs on the committed slice."""
    from sentiment_cli.training.run import train

    out = tmp_path_factory.mktemp("ckpt") / "small"
    train(small_config(epochs=3), out)
    return out


@pytest.fixture(scope="session")
def multilabel_checkpoint(tmp_path_factory) -> Path:
    """A multi-label checkpoint (GoEmotions' 28 emotions, several per text) trained for a few seconds on the
    committed slice, with an n-gram score (one column per label), its trainer state kept (``--keep-state``); never
    written to by tests that copy it."""
    from sentiment_cli.training.run import train

    cfg = load_config(ROOT / "configs" / "seed.toml").override("data", source=str(GOEMOTIONS_SMALL), vocab_size=3000,
                                                              max_length=64)
    cfg = cfg.override("model", ngram_buckets=1 << 16).override("training", epochs=3, batch_size=32, device="cpu",
                                                                compress="none")
    out = tmp_path_factory.mktemp("ckpt") / "goemotions-small"
    train(cfg, out, keep_state=True)
    return out


@pytest.fixture(scope="session")
def compressible_checkpoint(tmp_path_factory) -> Path:
    """A tiny model with all three compressible tables (token embedding, hashed word bigrams, a two-class n-gram
    score), trained for 2 epochs on the committed slice (seconds)."""
    from sentiment_cli.training.run import train

    out = tmp_path_factory.mktemp("ckpt") / "tables"
    train(small_config(epochs=2).override("model", bigram_buckets=997, ngram_buckets=65_537), out)
    return out


@pytest.fixture(scope="session")
def compressed_checkpoint(compressible_checkpoint, tmp_path_factory) -> Path:
    """``compressible_checkpoint`` compressed (half its words, a quarter of its bigrams, half its n-grams, int8)
    and written as a folder; never written to by tests that copy it."""
    from sentiment_cli.checkpoint import read_record, write_checkpoint
    from sentiment_cli.model.compress import Compression

    out = tmp_path_factory.mktemp("ckpt") / "compressed"
    write_checkpoint(out, read_record(compressible_checkpoint).compressed(Compression(0.5, 0.25, 0.5, 8)))
    return out


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` are skipped, with the reason, where torch sees no CUDA device, unless
    ``SENTIMENT_TEST_CUDA_DEVICE`` names another device to run them on (``cpu``: a check of the tests)."""
    if torch.cuda.is_available() or os.environ.get("SENTIMENT_TEST_CUDA_DEVICE"):
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False here); "
                                   "SENTIMENT_TEST_CUDA_DEVICE=cpu runs it on the CPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)

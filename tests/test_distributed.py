"""Data-parallel training under torchrun: sharding, environment, and a real 2-process gloo run on the slice."""

import json
import subprocess

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from sentiment_cli.checkpoint import read_weights
from sentiment_cli.checkpoint import load_checkpoint
from sentiment_cli.config import ModelConfig
from sentiment_cli.data.batching import collate
from sentiment_cli.training.distributed import DistInfo, from_env, shard
from sentiment_cli.errors import UsageError
from sentiment_cli.model.classifier import SentimentClassifier
from sentiment_cli.inference.predictor import Predictor

from .conftest import PYTHON, ROOT, SMALL_DATA, SUBPROCESS_ENV


@pytest.mark.parametrize("n, world", [(10, 2), (11, 2), (11, 3), (900, 2), (5, 8)])
def test_shards_are_equal_sized_and_cover_every_example(n, world):
    shards = [shard(n, DistInfo(rank=r, world_size=world), seed=7, epoch=3) for r in range(world)]
    size = -(-n // world)
    assert all(len(s) == size for s in shards)                  # same number of steps on every rank
    together = np.concatenate(shards)
    assert set(together.tolist()) == set(range(n))              # every example, in some shard
    assert len(together) - len(set(together.tolist())) == size * world - n   # repeats: only the padding
    again = shard(n, DistInfo(rank=0, world_size=world), seed=7, epoch=4)
    assert n < 10 or not np.array_equal(again, shards[0])       # reshuffled every epoch


def test_single_process_shard_is_everything_in_order():
    assert shard(5, DistInfo(), seed=1, epoch=1).tolist() == [0, 1, 2, 3, 4]


def test_torchrun_environment():
    assert from_env({}) == DistInfo()
    assert from_env({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}) == DistInfo(3, 1, 4)
    assert not from_env({"WORLD_SIZE": "1", "RANK": "0"}).enabled
    with pytest.raises(UsageError, match="inconsistent torchrun environment"):
        from_env({"WORLD_SIZE": "2", "RANK": "2"})
    with pytest.raises(UsageError, match="must be integers"):
        from_env({"WORLD_SIZE": "two"})


@pytest.mark.parametrize("kw", [{}, {"norm_first": True, "embedding_norm": False, "n_layers": 2}])
def test_every_parameter_gets_a_gradient_so_ddp_needs_no_unused_parameter_search(kw):
    torch.manual_seed(0)
    model = SentimentClassifier(ModelConfig(d_model=16, n_heads=2, d_ff=32, **kw), vocab_size=50, max_length=32)
    logits = model(*collate([[5, 6, 7], [8, 9]])).logits
    torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1])).backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []


def _torchrun(*args, timeout=300):
    cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "sentiment_cli", "train", *[str(a) for a in args], "--json"]
    r = subprocess.run(cmd, cwd=ROOT, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    return json.loads(r.stdout.strip())   # one line: rank 1 prints nothing


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory):
    """2-process gloo runs on the slice: 2 epochs straight, and 1 epoch then resumed to 2."""
    root = tmp_path_factory.mktemp("ddp")
    cfg = root / "small.toml"
    cfg.write_text((ROOT / "configs" / "seed.toml").read_text()
                   .replace("vocab_size = 50000", "vocab_size = 3000").replace("dropout = 0.0", "dropout = 0.1")
                   # two forward/backward passes per step under DistributedDataParallel
                   .replace("[training]\n", "[training]\nadversarial_epsilon = 1.0\n"))
    common = ["--config", cfg, "--data", SMALL_DATA, "--batch-size", 64, "--device", "cpu", "--keep-state"]
    straight = _torchrun(*common, "--output", root / "straight", "--epochs", 2)
    _torchrun(*common, "--output", root / "split", "--epochs", 1)
    resumed = _torchrun("--resume", root / "split", "--epochs", 2)
    return root, straight, resumed


@pytest.mark.slow   # torchrun: two processes train
def test_two_process_gloo_training_finishes_and_its_checkpoint_predicts(ddp_runs):
    root, straight, _ = ddp_runs
    assert straight["world_size"] == 2 and len(straight["history"]) == 2
    assert straight["config"]["training"]["adversarial_epsilon"] == 1.0
    # the epoch's loss and accuracy are reduced over both ranks: 2 shards of 450 reviews each
    assert [h["train_examples"] for h in straight["history"]] == [900, 900]
    assert straight["data"]["validation_examples"] == 100
    ckpt = load_checkpoint(root / "straight")
    assert ckpt.model.vocab_size == 3000
    [p] = Predictor(root / "straight").predict(["A moving, beautifully acted film."])
    assert p.label in ("negative", "positive") and 0.0 <= p.probability <= 1.0
    rng = load_file(next((root / "straight" / "trainer_state").glob("epoch-*.safetensors")))
    assert {"rng.rank0.cpu", "rng.rank1.cpu"} <= set(rng)   # each rank's dropout stream is saved


@pytest.mark.slow   # torchrun: two processes train
def test_two_process_run_resumes_exactly(ddp_runs):
    root, straight, resumed = ddp_runs
    timing = {"train_seconds", "train_examples_per_second"}
    strip = [{k: v for k, v in h.items() if k not in timing} for h in straight["history"]]
    assert [{k: v for k, v in h.items() if k not in timing} for h in resumed["history"]] == strip
    a, b = read_weights(root / "straight" / "model.safetensors"), read_weights(root / "split" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow   # torchrun: two processes train twice
def test_two_process_run_refits_on_every_row_and_keeps_rank_0s_temperature(ddp_runs):
    root = ddp_runs[0]
    out = root / "refit"
    metrics = _torchrun("--config", root / "small.toml", "--data", SMALL_DATA, "--batch-size", 64, "--device", "cpu",
                        "--epochs", 1, "--set", "training.refit=true", "--output", out)
    assert metrics["held_out_run"]["validation_examples"] == 100 and metrics["data"]["train_examples"] == 1000
    assert [h["train_examples"] for h in metrics["history"]] == [1000]      # both ranks' shards, hold-out included
    config = json.loads((out / "config.json").read_text())
    assert config["temperature"] == metrics["calibration"]["temperature"] != 1.0
    assert load_checkpoint(out).model.vocab_size == 3000 and not (root / ".refit.refit").exists()

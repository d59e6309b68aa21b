"""Masked-language-model pretraining and fine-tuning from it (``sentiment pretrain``, ``train --init``)."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest
import torch

from sentiment_cli.checkpoint import load_checkpoint
from sentiment_cli.errors import CheckpointError, ConfigError
from sentiment_cli.training.mlm import FIRST_WORD_ID, MASK_ID, mask_tokens, sampled_candidates
from sentiment_cli.training.pretrain import pretrain
from sentiment_cli.training.callbacks import TrainCallbacks
from sentiment_cli.training.run import train
from sentiment_cli.training.budget import Budget

from .conftest import PYTHON, SUBPROCESS_ENV, small_config


def pretrain_config(**pretrain_settings):
    # The committed slice has no unsupervised split: pretrain on its training part.
    return small_config().override("pretrain", **{"objective": "mlm", "splits": "train", "epochs": 2, "negatives": 256,
                                                  "lr": 3e-3, **pretrain_settings})


def finetune_config(**training):
    # The fine-tuning run's [pretrain] settings say which reviews its encoder must have been pretrained on.
    return small_config(**training).override("pretrain", splits="train")


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    out = tmp_path_factory.mktemp("pre") / "encoder"
    result = pretrain(pretrain_config(), out)
    return out, result.metrics


def test_mask_tokens_follows_bert_recipe():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(FIRST_WORD_ID, 1000, (64, 200))
    padding = torch.zeros(64, 200, dtype=torch.bool)
    padding[:, 150:] = True
    corrupted, chosen, targets = mask_tokens(ids, padding, 0.15, 1000, g)
    assert not chosen[padding].any()                                  # padding is never a target
    assert torch.equal(targets, ids[chosen])                          # targets are the original words
    assert 0.13 < chosen.sum().item() / (~padding).sum().item() < 0.17
    masked = (corrupted[chosen] == MASK_ID).float().mean().item()
    kept = (corrupted[chosen] == ids[chosen]).float().mean().item()
    assert 0.76 < masked < 0.84 and 0.07 < kept < 0.14                # 80% masked, ~10% kept (+ random hits)
    assert torch.equal(corrupted[~chosen], ids[~chosen])              # everything else untouched
    assert corrupted.min() >= MASK_ID and not (corrupted[chosen] == 0).any()


def test_sampled_candidates_contain_every_target():
    g = torch.Generator().manual_seed(0)
    targets = torch.tensor([5, 9, 5, 700, 3])
    candidates, index = sampled_candidates(targets, 50, 1000, g)
    assert torch.equal(candidates[index], targets)
    assert torch.equal(candidates, torch.unique(candidates)) and candidates.min() >= FIRST_WORD_ID
    assert len(candidates) > len(set(targets.tolist()))               # negatives were added


def test_pretrain_writes_an_encoder_that_learns(pretrained):
    out, metrics = pretrained
    assert {"config.json", "model.safetensors", "tokenizer.json", "metrics.json"} <= {p.name for p in out.iterdir()}
    assert metrics["kind"] == "pretrained" and metrics["data"]["splits"] == "train"
    first, last = metrics["history"]
    assert last["mlm_loss"] < first["mlm_loss"]                     # the masked-word loss goes down
    assert json.loads((out / "metrics.json").read_text())["history"] == metrics["history"]
    with pytest.raises(CheckpointError, match="fine-tune it first: sentiment train --init"):
        load_checkpoint(out)                                          # its head is untrained: not for predict


def test_train_starts_from_the_pretrained_encoder(pretrained, tmp_path):
    out, _ = pretrained
    encoder = load_checkpoint(out, pretrained_ok=True)
    cfg = finetune_config(epochs=1, init_from=str(out))
    result = train(cfg, tmp_path / "ft")
    tuned = load_checkpoint(tmp_path / "ft")
    assert (tmp_path / "ft" / "tokenizer.json").read_text() == (out / "tokenizer.json").read_text()
    assert result.metrics["pretrained"]["from"] == str(out.resolve())
    # One epoch of fine-tuning moves the embedding a little; it stays far closer to the
    # pretrained one than to a fresh random initialisation (which is what a silent no-op load would give).
    w0, w1 = encoder.model.token_embedding.weight, tuned.model.token_embedding.weight
    assert (w1 - w0).norm() < 0.5 * w0.norm()


def test_init_from_refuses_a_mismatched_config(pretrained, tmp_path):
    out, _ = pretrained
    cfg = finetune_config(init_from=str(out)).override("model", d_model=16, n_heads=2)
    stages = []
    callbacks = TrainCallbacks()
    callbacks.on_stage = stages.append
    with pytest.raises(ConfigError, match=r"\[model\] d_model is 32 there but 16 in this config"):
        train(cfg, tmp_path / "ft", callbacks)
    assert not any(s.startswith("loading") for s in stages)   # refused before reading the data
    # a masked language model trained the whole encoder: its embeddings' shape must match too
    with pytest.raises(ConfigError, match=r"\[model\] bigram_buckets is 0 there but 64 in this config"):
        train(finetune_config(init_from=str(out)).override("model", bigram_buckets=64), tmp_path / "ft2")


def test_init_from_refuses_an_unknown_objective(pretrained, tmp_path):
    out, _ = pretrained
    shutil.copytree(out, tmp_path / "enc")
    metrics = json.loads((tmp_path / "enc" / "metrics.json").read_text())
    (tmp_path / "enc" / "metrics.json").write_text(json.dumps({**metrics, "objective": "bert"}))
    with pytest.raises(CheckpointError, match="unknown objective 'bert'.*knows electra, mlm, word2vec"):
        train(finetune_config(init_from=str(tmp_path / "enc")), tmp_path / "ft")


def test_init_from_refuses_a_folder_of_something_else(tmp_path):
    """(A finished classifier's folder is a start since 2026-12-07: the test below.)"""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not an encoder")
    with pytest.raises(CheckpointError, match="holds no pretrained encoder .* and is not empty"):
        train(small_config(init_from=str(tmp_path / "mine")), tmp_path / "b")
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]   # nothing written there


@pytest.mark.slow   # pretraining in `sentiment` processes
def test_cli_pretrain_then_predict_refuses_it(tmp_path):
    cfg = tmp_path / "pre.toml"
    cfg.write_text('[model]\nd_model = 16\nn_heads = 2\n[data]\nvocab_size = 2000\n'
                   '[pretrain]\nobjective = "mlm"\nepochs = 1\nsplits = "unsupervised"\nnegatives = 64\n')
    from .conftest import SMALL_DATA
    run = subprocess.run([PYTHON, "-m", "sentiment_cli", "pretrain", "-c", str(cfg), "--data", str(SMALL_DATA),
                          "-o", str(tmp_path / "enc")], capture_output=True, text=True, env=SUBPROCESS_ENV)
    # The slice has no unsupervised split: one line that says what to do, exit 1.
    assert run.returncode == 1 and run.stderr.strip().splitlines()[-1] == (
        f"error: {SMALL_DATA} has no 'unsupervised' split (it has: train, test) and [data] unlabelled is empty; "
        "give unlabelled text with --unlabelled PATH, or pretrain on the training reviews alone with "
        "--set pretrain.splits=train")
    run = subprocess.run([PYTHON, "-m", "sentiment_cli", "pretrain", "-c", str(cfg), "--data", str(SMALL_DATA),
                          "-o", str(tmp_path / "enc"), "--json", "--splits", "train"],
                         capture_output=True, text=True, env=SUBPROCESS_ENV)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["kind"] == "pretrained"
    assert json.loads(run.stdout)["data"]["splits"] == "train"
    run = subprocess.run([PYTHON, "-m", "sentiment_cli", "pretrain", "-c", str(cfg), "--data", str(SMALL_DATA),
                          "-o", str(tmp_path / "enc [b]"), "--splits", "train"],
                         capture_output=True, text=True, env=SUBPROCESS_ENV)
    assert run.returncode == 0, run.stderr
    out = " ".join(run.stdout.split())
    assert f"saved to {tmp_path / 'enc [b]'}" in out   # Rich markup left the folder name alone
    assert f"sentiment train --init '{tmp_path / 'enc [b]'}'" in out   # a command that can be pasted
    run = subprocess.run([PYTHON, "-m", "sentiment_cli", "predict", "Great film.", "--checkpoint",
                          str(tmp_path / "enc")], capture_output=True, text=True, env=SUBPROCESS_ENV)
    assert run.returncode == 1 and "fine-tune it first" in run.stderr and "Traceback" not in run.stderr


def test_frozen_embedding_keeps_the_pretrained_one(pretrained, tmp_path):
    out, _ = pretrained
    cfg = finetune_config(epochs=1, init_from=str(out), embedding_lr_scale=0.0)
    train(cfg, tmp_path / "ft")
    before = load_checkpoint(out, pretrained_ok=True).model
    after = load_checkpoint(tmp_path / "ft").model
    assert torch.equal(before.token_embedding.weight, after.token_embedding.weight)
    assert not torch.equal(before.encoder.layers[0].linear1.weight, after.encoder.layers[0].linear1.weight)


def test_word2vec_pretraining_fills_the_embedding(tmp_path):
    cfg = pretrain_config(objective="word2vec", epochs=3)
    result = pretrain(cfg, tmp_path / "w2v")
    ckpt = load_checkpoint(tmp_path / "w2v", pretrained_ok=True)
    w = ckpt.model.token_embedding.weight
    assert result.metrics["objective"] == "word2vec" and len(result.metrics["history"]) == 3
    assert abs(w[2:].mean().item()) < 1e-3 and abs(w[2:].std().item() - 1) < 0.05   # standardised per dimension
    assert w[0].abs().sum() == 0                                                       # <pad> stays zero

    def cos(a, b):
        return torch.cosine_similarity(w[ckpt.tokenizer.token_to_id(a)], w[ckpt.tokenizer.token_to_id(b)], 0).item()
    # Words used alike end up alike; 900 reviews are enough for that, not for sentiment.
    assert cos("movie", "film") > cos("movie", "the") + 0.3


def test_word2vec_downsamples_frequent_words_as_configured(tmp_path, monkeypatch):
    import gensim.models

    passed = {}
    real = gensim.models.Word2Vec

    def spy(*args, **kwargs):
        passed.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(gensim.models, "Word2Vec", spy)
    pretrain(pretrain_config(objective="word2vec", epochs=1, subsample=1e-5), tmp_path / "w2v")
    assert passed["sample"] == 1e-5
    assert load_checkpoint(tmp_path / "w2v", pretrained_ok=True).config.pretrain.subsample == 1e-5


@pytest.mark.slow   # pretraining in `sentiment` processes
def test_word2vec_pretraining_is_reproducible_across_processes(tmp_path):
    # gensim seeds each word's first vector with a hash of the word: Python's hash() differs between
    # processes, so two processes are the real check.
    cfg = tmp_path / "w.toml"
    cfg.write_text('[model]\nd_model = 16\nn_heads = 2\n[data]\nvocab_size = 2000\n'
                   '[pretrain]\nobjective = "word2vec"\nsplits = "train"\nepochs = 1\n')
    from .conftest import SMALL_DATA
    for name in ("a", "b"):
        run = subprocess.run([PYTHON, "-m", "sentiment_cli", "pretrain", "-c", str(cfg), "--data", str(SMALL_DATA),
                              "-o", str(tmp_path / name), "--json"], capture_output=True, text=True,
                             env={**SUBPROCESS_ENV, "PYTHONHASHSEED": "random"})
        assert run.returncode == 0, run.stderr
    a = load_checkpoint(tmp_path / "a", pretrained_ok=True).model.state_dict()
    b = load_checkpoint(tmp_path / "b", pretrained_ok=True).model.state_dict()
    # Bit for bit. Seeded with Python's salted hash, every word would start from other random vectors
    # in each process; standardised in float32 in the tokenizer's vocabulary order (which changes from
    # process to process), they came out up to 1.4e-6 apart.
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "a" / "tokenizer.json").read_text() == (tmp_path / "b" / "tokenizer.json").read_text()


def test_word2vec_standardisation_does_not_depend_on_the_word_order():
    from gensim.models import KeyedVectors

    from sentiment_cli.config import ModelConfig
    from sentiment_cli.model.classifier import SentimentClassifier
    from sentiment_cli.training.pretrain import _embed

    words = [f"w{i}" for i in range(3000)]
    kv = KeyedVectors(vector_size=16)
    kv.add_vectors(words, np.random.default_rng(0).normal(0.1, 0.3, (3000, 16)).astype(np.float32))
    vocab = {w: i + FIRST_WORD_ID for i, w in enumerate(words)}
    embeddings = []
    for order in (words, words[::-1]):
        model = SentimentClassifier(ModelConfig(d_model=16, n_heads=2), len(vocab) + FIRST_WORD_ID, 8)
        _embed(model, kv, vocab, order)
        embeddings.append(model.token_embedding.weight[FIRST_WORD_ID:].detach().clone())
    assert torch.equal(*embeddings)   # float32 sums in the two orders: ~20% of entries an ulp apart
    assert embeddings[0].mean(0).abs().max() < 1e-6


def test_model_card_names_the_pretraining_objective(tmp_path):
    from sentiment_cli.card.facts import model_card
    from sentiment_cli.card.text import card_sections

    pretrain(pretrain_config(objective="word2vec", epochs=1), tmp_path / "w2v")
    training = dict(dict(card_sections(model_card(tmp_path / "w2v")))["Training"])
    assert training["epochs"].startswith("1 of 1 of word2vec (skip-gram) pretraining of the token embedding")
    assert training["optimizer"] == "gensim Word2Vec, window 5, 5 negative samples, frequent words downsampled at 0.001"


def test_word2vec_folder_fixes_only_d_model_and_gives_only_the_embedding(tmp_path):
    # word2vec trains the token embedding alone: a deeper encoder of the same width may start from it,
    # and the folder's (untrained) encoder weights are not copied.
    out = tmp_path / "w2v"
    pretrain(pretrain_config(objective="word2vec", epochs=1), out)
    folder = load_checkpoint(out, pretrained_ok=True).model
    cfg = finetune_config(epochs=1, init_from=str(out), embedding_lr_scale=0.0).override("model", n_layers=2,
                                                                                        bigram_buckets=31)
    train(cfg, tmp_path / "ft")
    tuned = load_checkpoint(tmp_path / "ft").model
    assert len(tuned.encoder.layers) == 2
    assert torch.equal(tuned.token_embedding.weight, folder.token_embedding.weight)
    # the bigram embedding (not in the folder, started at zero) trains even with the token embedding frozen
    assert tuned.bigram_embedding.weight[0].abs().sum() == 0 and tuned.bigram_embedding.weight[1:].abs().sum() > 0
    with pytest.raises(ConfigError, match=r"\[model\] d_model is 32 there but 16 in this config"):
        train(finetune_config(init_from=str(out)).override("model", d_model=16, n_heads=2), tmp_path / "x")


@pytest.mark.parametrize("objective", ["word2vec", "mlm"])
def test_a_time_share_ends_pretraining_after_the_epoch_that_fills_it(objective, tmp_path):
    # a share smaller than one epoch: the first epoch runs (there is no encoder without it), no other starts
    result = pretrain(pretrain_config(objective=objective, epochs=3), tmp_path / "p", budget=Budget.starting_now(1e-3))
    assert [r["epoch"] for r in result.metrics["history"]] == [1]
    assert result.metrics["stopped_by_time"] == {"epoch": 1, "of": 3, "seconds": 1e-3}   # the share's length
    saved = json.loads((tmp_path / "p" / "metrics.json").read_text())
    assert saved["stopped_by_time"]["epoch"] == 1 and len(saved["history"]) == 1


def test_without_a_time_share_every_epoch_runs(tmp_path):
    result = pretrain(pretrain_config(objective="word2vec", epochs=2), tmp_path / "p", budget=Budget.starting_now(1e6))
    assert len(result.metrics["history"]) == 2 and "stopped_by_time" not in result.metrics


def test_a_folder_its_time_share_ended_starts_a_run(tmp_path):
    from sentiment_cli.training.pretrained import ensure_pretrained, load_pretrained

    cfg = pretrain_config(objective="word2vec", epochs=3).override("training", init_from=str(tmp_path / "pre"))
    ckpt, made = ensure_pretrained(cfg, budget=Budget.starting_now(1e-3))
    assert made and len(ckpt.metrics["history"]) == 1
    assert load_pretrained(tmp_path / "pre", cfg).metrics["stopped_by_time"]["epoch"] == 1


def test_init_from_a_trained_folder_continues_from_its_weights_alone(trained_checkpoint, tmp_path):
    """``train --init DIR`` of a finished run (no trainer state): the new run starts from every weight the folder
    holds but the n-gram score's (fitted again), the head included when it has as many classes; a folder of
    another shape is refused with the key named."""
    from sentiment_cli.checkpoint import read_weights
    from sentiment_cli.model.classifier import SentimentClassifier
    from sentiment_cli.training.pretrained import load_pretrained, pretrained_weights

    cfg = small_config(epochs=1).override("training", init_from=str(trained_checkpoint))
    start = load_pretrained(trained_checkpoint, cfg)
    own = SentimentClassifier.from_config(cfg, start.model.vocab_size, 2).state_dict()
    taken = pretrained_weights(start, like=own)
    saved = read_weights(trained_checkpoint / "model.safetensors")
    assert "head.weight" in taken and "token_embedding.weight" in taken
    assert not any(k.startswith("ngram_") for k in taken)
    assert all(torch.equal(taken[k], saved[k]) for k in taken)
    result = train(cfg, tmp_path / "more")
    assert result.metrics["pretrained"]["from"] == str(trained_checkpoint.resolve())
    with pytest.raises(ConfigError, match=r"\[model\] d_model is"):
        load_pretrained(trained_checkpoint, cfg.override("model", d_model=16, n_heads=2))

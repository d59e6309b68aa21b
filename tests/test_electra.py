"""ELECTRA pretraining (replaced-token detection) at a small size on the CPU, and fine-tuning from it."""

from __future__ import annotations

import math

import pytest
import torch

from sentiment_cli.checkpoint import load_checkpoint
from sentiment_cli.training.electra import fill_in
from sentiment_cli.training.run import train
from sentiment_cli.training.mlm import FIRST_WORD_ID, sampled_candidates
from sentiment_cli.training.pretrain import pretrain

from .conftest import small_config


def electra_config(**pretrain_settings):
    # The committed slice has no unsupervised split: pretrain on its training part.
    return small_config().override("pretrain", **{"objective": "electra", "splits": "train", "epochs": 5,
                                                  "negatives": 256, "lr": 3e-3, **pretrain_settings})


@pytest.fixture(scope="module")
def electra(tmp_path_factory):
    out = tmp_path_factory.mktemp("electra") / "encoder"
    return out, pretrain(electra_config(), out).metrics


def test_fill_in_replaces_only_the_chosen_positions_with_candidate_words():
    ids = torch.arange(2, 42).view(4, 10)
    chosen = torch.zeros(4, 10, dtype=torch.bool)
    chosen[:, ::3] = True
    candidates = torch.tensor([100, 200, 300])
    logits = torch.tensor([[0.0, 50.0, 0.0]]).expand(int(chosen.sum()), 3)   # all but certain: word 200
    filled = fill_in(ids, chosen, logits, candidates, torch.Generator().manual_seed(0))
    assert torch.equal(filled[~chosen], ids[~chosen])
    assert (filled[chosen] == 200).all()


def test_negatives_of_at_least_the_vocabulary_give_the_exact_softmax():
    targets = torch.tensor([7, 3, 7])
    candidates, index = sampled_candidates(targets, 1000, 50, torch.Generator().manual_seed(0))
    assert torch.equal(candidates, torch.arange(50)) and torch.equal(candidates[index], targets)
    few, _ = sampled_candidates(targets, 10, 50, torch.Generator().manual_seed(0))
    assert len(few) < 50 and few.min() >= FIRST_WORD_ID


def test_the_discriminator_learns_to_find_the_replaced_words(electra):
    out, metrics = electra
    first, *_, last = metrics["history"]
    assert metrics["objective"] == "electra"
    assert last["rtd_loss"] < first["rtd_loss"] and last["mlm_loss"] < first["mlm_loss"]
    # better than the base rate: a discriminator that knew only how often words are replaced would
    # score the entropy of that rate (0.42 nats at 15%)
    q = last["replaced_fraction"]
    assert 0.0 < q < 0.15
    assert last["rtd_loss"] < -(q * math.log(q) + (1 - q) * math.log(1 - q)) - 0.02


def test_the_checkpoint_holds_the_discriminator_alone_and_fine_tunes(electra, tmp_path):
    out, _ = electra
    encoder = load_checkpoint(out, pretrained_ok=True)
    names = set(encoder.model.state_dict())
    assert not any("generator" in n or "rtd" in n for n in names)
    result = train(small_config(epochs=1, init_from=str(out)).override("pretrain", splits="train"), tmp_path / "ft")
    tuned = load_checkpoint(tmp_path / "ft")
    assert result.metrics["pretrained"]["from"] == str(out.resolve())
    w0 = encoder.model.encoder.layers[0].linear1.weight
    w1 = tuned.model.encoder.layers[0].linear1.weight
    assert (w1 - w0).norm() < 0.5 * w0.norm()   # the encoder came from the discriminator, not a fresh start


def test_model_card_names_electra_and_its_generator(electra):
    from sentiment_cli.card.facts import model_card
    from sentiment_cli.card.text import card_sections

    out, _ = electra
    training = dict(dict(card_sections(model_card(out)))["Training"])
    assert training["epochs"].startswith("5 of 5 of replaced-token-detection (ELECTRA) pretraining, generator of "
                                         "1 layer(s), loss weight 50")

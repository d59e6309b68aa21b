"""The n-gram score's character n-grams within words ([model] ngram_word_chars; ngram/features.py word_pieces):
the table, the buckets the score reads, parity of the model's path with the fits', export, and a tampered table."""

import zlib

import numpy as np
import pytest
import torch

from sentiment_cli.config import ModelConfig
from sentiment_cli.data.batching import collate
from sentiment_cli.data.negation import SCOPE_OFFSET
from sentiment_cli.model.classifier import SentimentClassifier
from sentiment_cli.ngram.features import PIECES_PER_WORD, ngram_buckets, ngram_features, word_pieces

VOCAB = ["<pad>", "<unk>", "good", "goods", "not", "a", "unbelievably", "ไม่ดี"]
VOCAB += [f"w{i}" for i in range(52)]


def _buckets(pieces, buckets):
    return [zlib.crc32(p.encode()) % buckets + 1 for p in pieces]


def test_a_words_pieces_are_its_character_2_to_n_grams_within_spaces_each_once():
    table = word_pieces(VOCAB, 1009, 3)
    assert table.shape == (len(VOCAB), PIECES_PER_WORD) and table.dtype == np.int32
    assert not table[:2].any()                                          # <pad>, <unk>: none
    # " good ": " g", "go", "oo", "od", "d ", then " go", "goo", "ood", "od "
    want = _buckets([" g", "go", "oo", "od", "d ", " go", "goo", "ood", "od "], 1009)
    assert table[2, :9].tolist() == want and not table[2, 9:].any()
    assert table[5, :3].tolist() == _buckets([" a", "a ", " a "], 1009) and not table[5, 3:].any()
    assert len(set(table[3][table[3] > 0].tolist()) & set(want)) >= 5   # "goods" shares most of them with "good"
    assert table.min() >= 0 and table.max() <= 1009


def test_a_long_word_keeps_its_shortest_pieces_first_and_the_table_is_deterministic():
    table = word_pieces(VOCAB, 1 << 20, 5)
    long = table[VOCAB.index("unbelievably")]
    assert (long > 0).all()                                             # 4 * 12 - 2 = 46 pieces, 40 kept
    assert long[:13].tolist() == _buckets([" unbelievably "[j:j + 2] for j in range(13)], 1 << 20)
    assert np.array_equal(table, word_pieces(VOCAB, 1 << 20, 5))
    assert (table[VOCAB.index("ไม่ดี")] > 0).sum() > 0                    # any script
    with pytest.raises(ValueError, match="at least 2"):
        word_pieces(VOCAB, 1009, 1)


def test_the_score_reads_each_tokens_pieces_after_its_ngrams_and_a_negated_word_has_its_words():
    pieces = torch.from_numpy(word_pieces(VOCAB, 1009, 4))
    ids = torch.tensor([[2, 4, 2 + SCOPE_OFFSET, 1, 0]])                # good not good(in scope) <unk> <pad>
    b = ngram_buckets(ids, 1009, 3, pieces)
    assert b.shape == (1, 5, 3 + PIECES_PER_WORD)
    assert torch.equal(b[..., :3], ngram_buckets(ids, 1009, 3))          # the n-grams as before
    assert torch.equal(b[0, 0, 3:], pieces[2].long()) and torch.equal(b[0, 2, 3:], pieces[2].long())
    assert not b[0, 3, 3:].any() and not b[0, 4, 3:].any()               # <unk> and <pad>: none
    plain = ngram_buckets(torch.tensor([[2, 4, 2]]), 1009, 3, pieces)
    x = ngram_features([[2, 4, 2]], 1009, max_n=3, pieces=pieces)
    assert x.nnz == len(set(plain.flatten().tolist()) - {0})             # each distinct bucket once


def _model(num_labels=2):
    cfg = ModelConfig(d_model=16, n_heads=2, d_ff=32, ngram_buckets=1009, ngram_scale=0.5, ngram_word_chars=4)
    torch.manual_seed(0)
    model = SentimentClassifier(cfg, vocab_size=len(VOCAB), max_length=64, num_labels=num_labels).eval()
    model.ngram_score.set_vocabulary(VOCAB)
    with torch.no_grad():
        model.ngram_score.weight[1:].normal_()
        model.ngram_score.bias.fill_(0.25)
    return model


@pytest.mark.parametrize("num_labels", [2, 4])
def test_the_models_path_equals_the_fits_sparse_form_with_pieces(num_labels):
    model = _model(num_labels)
    reviews = [[2, 3, 2, 3], [4, 2], list(range(2, 40)), [6, 1, 7]]
    ids, mask = collate(reviews)
    with torch.no_grad():
        encoder, full = model(ids, mask, encoder_only=True).logits, model(ids, mask).logits
    ngram = model.ngram_score.logits(reviews)                              # the fits' scipy path
    torch.testing.assert_close(full - encoder, 0.5 * torch.from_numpy(ngram), atol=1e-5, rtol=0)
    no_pieces = ngram_features(reviews, 1009)
    assert ngram_features(reviews, 1009, pieces=model.ngram_score.pieces).nnz > 3 * no_pieces.nnz
    assert "character 2-4-grams within each token" in model.ngram_score.description("lr")


def test_the_table_is_saved_and_a_checkpoint_whose_table_leaves_the_buckets_is_refused(tmp_path):
    from sentiment_cli.checkpoint import load_weights
    from sentiment_cli.errors import CheckpointError

    model = _model()
    state = model.state_dict()
    assert state["ngram_pieces"].dtype == torch.int32 and state["ngram_pieces"].shape == (len(VOCAB), 40)
    fresh = SentimentClassifier(model.config, vocab_size=len(VOCAB), max_length=64)
    load_weights(fresh, state, tmp_path / "model.safetensors")
    assert torch.equal(fresh.ngram_score.pieces, model.ngram_score.pieces)
    for bad in (1010, -1):
        tampered = dict(state, ngram_pieces=state["ngram_pieces"].clone())
        tampered["ngram_pieces"][5, 0] = bad
        with pytest.raises(CheckpointError, match="ngram_pieces holds buckets outside 0..1,009"):
            load_weights(fresh, tampered, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="vocabulary of 3 tokens"):
        fresh.ngram_score.set_vocabulary(VOCAB[:3])


@pytest.mark.slow   # a torch.onnx export (seconds)
def test_a_score_with_pieces_exports_to_onnx_exactly(tmp_path):
    from .test_ngram import assert_exports_exactly

    assert_exports_exactly(_model(), [[2, 3, 2], [6, 1, 7, 4, 5]], tmp_path)


def test_ngram_word_chars_of_1_is_refused_in_one_line():
    from sentiment_cli.config import config_from_dict
    from sentiment_cli.errors import ConfigError

    with pytest.raises(ConfigError, match="ngram_word_chars reads character 2-n-grams"):
        config_from_dict({"model": {"ngram_word_chars": 1}})

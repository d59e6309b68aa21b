import dataclasses
import math

import pytest
import torch

from sentiment_cli.config import ModelConfig
from sentiment_cli.data.batching import collate
from sentiment_cli.model.classifier import SentimentClassifier, bigram_buckets, masked_max_pool, sinusoidal_encoding
from sentiment_cli.model.dropout import ByteDropout


def test_positional_encoding_equals_the_formula():
    pe = sinusoidal_encoding(50, 16)
    assert pe.shape == (50, 16)
    for pos in (0, 1, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert math.isclose(pe[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(pe[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)


def test_positional_encoding_is_a_buffer_not_a_parameter():
    model = SentimentClassifier(ModelConfig(), vocab_size=100, max_length=20)
    assert "positional_encoding" not in dict(model.named_parameters())
    assert "positional_encoding" not in model.state_dict()   # fixed: not saved, rebuilt on load
    assert "positional_encoding" in dict(model.named_buffers())


def _model(**kw):
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=16, n_heads=2, n_layers=2, d_ff=32, **kw)
    model = SentimentClassifier(cfg, vocab_size=50, max_length=64).eval()
    if model.bigram_embedding is not None:   # it starts at zero: give it weights that matter
        with torch.no_grad():
            model.bigram_embedding.weight[1:].normal_()
    return model


def test_review_alone_and_in_padded_batch_give_the_same_logits():
    reviews = [[5, 6, 7], list(range(2, 40)), [9], list(range(10, 30))]
    for kw in ({}, {"norm_first": True, "scale_embedding": True, "activation": "gelu"}, {"bigram_buckets": 7}):
        model = _model(**kw)
        with torch.no_grad():
            batch_logits = model(*collate(reviews)).logits
            for i, r in enumerate(reviews):
                alone = model(*collate([r])).logits
                torch.testing.assert_close(alone[0], batch_logits[i], atol=1e-5, rtol=0)
            # and at another position of a differently composed batch
            other = model(*collate([reviews[1], [3] * 60, reviews[0]])).logits
            torch.testing.assert_close(other[2], batch_logits[0], atol=1e-5, rtol=0)


def test_max_pool_ignores_padding_even_when_padding_is_largest():
    hidden = torch.tensor([[[1.0, -2.0], [0.5, -1.0], [99.0, 99.0]]])   # (1, 3, 2), last is padding
    mask = torch.tensor([[False, False, True]])
    pooled, argmax = masked_max_pool(hidden, mask)
    assert pooled.tolist() == [[1.0, -1.0]]
    assert argmax.tolist() == [[0, 1]]


def test_shapes_and_parameter_counts():
    model = _model()
    ids, mask = collate([[2, 3, 4], [5]])
    assert ids.shape == mask.shape == (2, 3)
    assert model.hidden_states(ids, mask).shape == (2, 3, 16)
    assert model(ids, mask).logits.shape == (2, 2)
    counts = model.num_parameters()
    assert counts["embedding"] == 50 * 16
    assert counts["total"] == counts["embedding"] + counts["non_embedding"] == sum(p.numel() for p in model.parameters())


def test_each_dropout_rate_reaches_its_own_site():
    model = _model(dropout=0.1, attention_dropout=0.2, activation_dropout=0.3)
    for layer in model.encoder.layers:
        assert (layer.dropout1.p, layer.dropout2.p) == (0.1, 0.1)   # residual branches
        assert layer.self_attn.dropout == 0.2                         # attention probabilities
        assert layer.dropout.p == 0.3                                 # feed-forward hidden layer
    assert model.embedding_dropout.p == 0.1
    sites = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert len(sites) == 3 * len(model.encoder.layers) + 2   # residual x 2, feed-forward; embeddings, head
    assert all(isinstance(m, ByteDropout) for m in sites)    # every mask drawn as bytes


def test_byte_dropout_drops_at_its_rate_and_keeps_the_expected_value():
    drop = ByteDropout(0.1).train()
    x = torch.ones(1000, 1000, requires_grad=True)
    torch.manual_seed(0)
    y = drop(x)
    dropped = float((y == 0).float().mean())
    assert abs(dropped - 26 / 256) < 0.002                          # p rounded to 26/256
    assert torch.allclose(y[y != 0], torch.tensor(256 / 230))      # the kept scaled by the inverse kept share
    assert abs(float(y.detach().mean()) - 1.0) < 0.005              # expected value kept
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())                          # the gradient takes the same mask and scale
    torch.manual_seed(0)
    assert torch.equal(drop(torch.ones(1000, 1000)), y.detach())     # torch's seed fixes the mask
    assert not torch.equal(drop(torch.ones(1000, 1000)), y.detach())
    assert torch.equal(drop.eval()(x), x)                           # identity outside training
    assert torch.equal(ByteDropout(0.0).train()(x), x)
    assert drop.train()(torch.ones(0, 4)).shape == (0, 4)


def test_bigram_buckets_follow_the_hash_and_skip_first_position_pad_and_unk():
    ids = torch.tensor([[5, 7, 1, 9, 8, 0], [49, 2, 3, 0, 0, 0]])   # 1 = <unk>, 0 = <pad>
    b = bigram_buckets(ids, 11)
    h = lambda prev, cur: (prev * 1_000_003 + cur) % 11 + 1
    assert b.tolist() == [[0, h(5, 7), 0, 0, h(9, 8), 0], [0, h(49, 2), h(2, 3), 0, 0, 0]]
    big = bigram_buckets(torch.randint(2, 50_000, (64, 300)), 131_072)
    assert big.dtype == torch.int64 and 1 <= big[:, 1:].min() and big.max() <= 131_072 and (big[:, 0] == 0).all()


def test_bigram_embedding_starts_at_zero_so_the_model_starts_as_the_word_only_model():
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=16, n_heads=2, d_ff=32)
    words = SentimentClassifier(cfg, vocab_size=50, max_length=64).eval()
    both = SentimentClassifier(dataclasses.replace(cfg, bigram_buckets=13), vocab_size=50, max_length=64).eval()
    missing = both.load_state_dict(words.state_dict(), strict=False).missing_keys
    assert missing == ["bigram_embedding.weight"]
    assert both.num_parameters()["embedding"] == words.num_parameters()["embedding"] + 14 * 16
    ids, mask = collate([[5, 6, 7, 8], [9, 10]])
    with torch.no_grad():
        torch.testing.assert_close(both(ids, mask).logits, words(ids, mask).logits, atol=0, rtol=0)
        both.bigram_embedding.weight[1:].normal_()
        assert not torch.allclose(both(ids, mask).logits, words(ids, mask).logits)   # once trained, bigrams count

"""The n-gram score (model/ngram.py): hashing, first occurrences, its share of the logits, its fit, its file names."""

import numpy as np
import pytest
import torch

from sentiment_cli.config import ModelConfig
from sentiment_cli.data.batching import collate
from sentiment_cli.errors import DataError
from sentiment_cli.model.classifier import SentimentClassifier
from sentiment_cli.model.ngram import HASH_MULTIPLIER as M
from sentiment_cli.model.ngram import NgramScore, first_occurrences, ngram_buckets, ngram_features, two_classes


def test_ngram_buckets_hash_each_order_and_skip_pad_unk_and_the_start():
    ids = torch.tensor([[5, 6, 7, 1, 8, 0]])             # ... <unk> ... <pad>
    b = ngram_buckets(ids, 1009)                         # (1, 6, 3)
    assert b.shape == (1, 6, 3)
    assert b[0, :, 0].tolist() == [5 % 1009 + 1, 6 + 1, 7 + 1, 0, 8 + 1, 0]
    assert b[0, :, 1].tolist() == [0, (5 * M + 6) % 1009 + 1, (6 * M + 7) % 1009 + 1, 0, 0, 0]
    assert b[0, :, 2].tolist() == [0, 0, (5 * M * M + 6 * M + 7) % 1009 + 1, 0, 0, 0]


def test_a_repeated_ngram_counts_once_at_its_first_occurrence():
    buckets = torch.tensor([[4, 2, 4, 0, 2, 9, 0], [3, 3, 3, 3, 3, 3, 3]])
    assert first_occurrences(buckets).tolist() == [[True, True, False, False, False, True, False],
                                                    [True] + [False] * 6]


def test_the_ngram_score_joins_the_logits_and_equals_the_sparse_form():
    """logits = the encoder's + ngram_scale * (weight . x + bias) on the positive class, x the review's
    distinct n-grams; the same as NgramScore.margins computes with a sparse matrix."""
    cfg = ModelConfig(d_model=16, n_heads=2, d_ff=32, ngram_buckets=1009, ngram_scale=0.5)
    torch.manual_seed(0)
    model = SentimentClassifier(cfg, vocab_size=60, max_length=64).eval()
    with torch.no_grad():
        model.logit_term.weight[1:].normal_()
        model.logit_term.bias.fill_(0.25)
    reviews = [[5, 6, 7, 5, 6, 7], [9, 9, 9], list(range(2, 40)), [8, 1, 8]]
    ids, mask = collate(reviews)
    with torch.no_grad():
        encoder, full = model(ids, mask, encoder_only=True).logits, model(ids, mask).logits
    assert torch.equal(full[:, 0], encoder[:, 0])
    sparse = model.logit_term.margins(reviews)
    torch.testing.assert_close(full[:, 1] - encoder[:, 1], 0.5 * torch.from_numpy(sparse), atol=1e-5, rtol=0)
    # binarised: each distinct n-gram once, however often it repeats ([9, 9, 9]: "9", "9 9", "9 9 9")
    for row, review in enumerate(reviews):
        present = {b for b in ngram_buckets(torch.tensor([review]), 1009).flatten().tolist() if b}
        expected = 0.5 * (float(model.logit_term.weight[sorted(present)].sum()) + 0.25)
        assert (full[row, 1] - encoder[row, 1]).item() == pytest.approx(expected, abs=1e-5)
    assert len({b for b in ngram_buckets(torch.tensor([[9, 9, 9]]), 1009).flatten().tolist() if b}) == 3


def test_the_ngram_score_needs_two_classes():
    with pytest.raises(ValueError, match="two classes"):
        SentimentClassifier(ModelConfig(ngram_buckets=7), vocab_size=50, max_length=8, num_labels=3)
    with pytest.raises(DataError, match="needs two classes, but the data has 5; set model.ngram_buckets=0"):
        two_classes([0, 1, 2, 3, 4])
    with pytest.raises(DataError, match="needs two classes, but the data has 3"):
        two_classes([0, 1], num_labels=3)
    assert two_classes([1, 0, 1]).tolist() == [1, 0, 1]


def test_a_checkpoint_keeps_the_flat_tensor_names_and_loads_them_back():
    """The score's tensors are saved as ngram_weight / ngram_bias beside the classifier's own (the file format
    of checkpoints written before the score was a module), and load back into the module, also under a
    wrapper's prefix."""
    cfg = ModelConfig(d_model=16, n_heads=2, d_ff=32, ngram_buckets=31)
    model = SentimentClassifier(cfg, vocab_size=60, max_length=16)
    with torch.no_grad():
        model.logit_term.weight.normal_()
        model.logit_term.bias.fill_(0.5)
    state = model.state_dict()
    assert "ngram_weight" in state and "ngram_bias" in state and not any(k.startswith("logit_term") for k in state)
    assert list(state)[-2:] == ["ngram_weight", "ngram_bias"]
    fresh = SentimentClassifier(cfg, vocab_size=60, max_length=16)
    fresh.load_state_dict(state, strict=True)
    assert torch.equal(fresh.logit_term.weight, model.logit_term.weight) and float(fresh.logit_term.bias) == 0.5
    wrapped = torch.nn.Sequential(model)                      # prefix "0."
    assert "0.ngram_weight" in wrapped.state_dict()
    again = torch.nn.Sequential(SentimentClassifier(cfg, vocab_size=60, max_length=16))
    again.load_state_dict(wrapped.state_dict(), strict=True)
    assert torch.equal(again[0].logit_term.weight, model.logit_term.weight)


def test_the_fit_is_nb_lr_on_the_binarised_ngrams_and_deterministic():
    """On separable toy reviews the fit's score gets every training review right, its intercept is kept in
    float64 while at hand, and a second fit gives the same weights (a resumed run refits)."""
    reviews = [[5, 6, 7], [5, 6, 8], [5, 9, 7], [10, 11, 12], [10, 11, 13], [14, 11, 12]]
    labels = [1, 1, 1, 0, 0, 0]
    a, b = NgramScore(1009), NgramScore(1009)
    a.fit(reviews, labels)
    b.fit(reviews, labels)
    assert torch.equal(a.weight, b.weight) and float(a.weight[0]) == 0.0
    assert ((a.margins(reviews) > 0) == np.asarray(labels, bool)).all()
    assert isinstance(a.intercept, float) and float(a.bias) == pytest.approx(a.intercept, abs=1e-6)
    features = ngram_features(reviews, 1009)
    assert features.shape == (6, 1010) and set(features.data.tolist()) == {1.0}
    assert features[0].nnz == 6                               # 3 unigrams, 2 bigrams, 1 trigram

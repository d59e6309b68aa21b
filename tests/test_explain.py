"""Token-level explanations: exact (scores + bias = logit margin), padding never scored, aligned with the text."""

import math

import pytest
import torch

from sentiment_cli.checkpoint import load_checkpoint
from sentiment_cli.config import DataConfig, ModelConfig
from sentiment_cli.data.batching import collate
from sentiment_cli.data.labels import LABELS
from sentiment_cli.data.tokenizer import UNK_ID, encode_texts
from sentiment_cli.inference.explain import contrast, explanations, target_classes
from sentiment_cli.inference.prediction import token_rows
from sentiment_cli.inference.predictor import Predictor
from sentiment_cli.inference.torch_backend import batched_token_logits
from sentiment_cli.model.classifier import SentimentClassifier

REVIEWS = [[5, 6, 7], list(range(2, 40)), [9], list(range(10, 30)), [4, 4, 4, 4]]


def _model(vocab_size=50, max_length=64, **kw):
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=16, n_heads=2, n_layers=2, d_ff=32, **kw)
    model = SentimentClassifier(cfg, vocab_size=vocab_size, max_length=max_length)
    if model.bigram_embedding is not None:   # it starts at zero: give it weights that matter
        with torch.no_grad():
            model.bigram_embedding.weight[1:].normal_()
    if cfg.ngram_buckets:   # fitted by train; here any weights, so that the n-gram shares matter
        with torch.no_grad():
            model.ngram_score.weight[1:].normal_()
            model.ngram_score.bias.fill_(0.3)
    return model


def token_scores(model, reviews):
    """``(scores per review, bias per review, logits, targets)`` as the predictor forms them: the torch
    backend's forward with token logits, then the margin's contrast (inference/explain.py)."""
    logits, shares, bias = batched_token_logits(model, reviews, batch_size=64, device=torch.device("cpu"))
    targets = target_classes(logits)
    return ([contrast(t, k) for t, k in zip(shares, targets)], [float(contrast(bias, k)) for k in targets],
            torch.from_numpy(logits), targets)


def _brute_force_scores(model, review):
    """score[j] = sum over features f won by token j of pooled[f] * (W[1, f] - W[0, f]), by loops."""
    with torch.no_grad():
        hidden = model.hidden_states(*collate([review]))[0]           # (len, d_model): one review, no padding
        w = model.head.weight[1] - model.head.weight[0]
        scores = [0.0] * len(review)
        for f in range(hidden.shape[1]):
            column = hidden[:, f].tolist()
            j = column.index(max(column))
            scores[j] += column[j] * w[f].item()
    if model.config.ngram_buckets:   # each distinct n-gram's weight on the token that ends its first occurrence
        for j, bucket in _first_ngrams(review, model.config.ngram_buckets):
            scores[j] += model.config.ngram_scale * model.ngram_score.weight[bucket].item()
    return scores


def _first_ngrams(review, buckets):
    """``(j, bucket)`` for each distinct hashed 1-3-gram of ``review`` (no <pad>/<unk> in it), at the token ``j``
    that ends its first occurrence: the hashing of ngram/features.py, by loops."""
    seen = set()
    for j in range(len(review)):
        for n in (1, 2, 3):
            gram = review[j - n + 1:j + 1] if j >= n - 1 else []
            if len(gram) < n or min(gram) <= UNK_ID:
                continue
            h = 0
            for token in gram:
                h = h * 1_000_003 + token
            bucket = h % buckets + 1
            if bucket not in seen:
                seen.add(bucket)
                yield j, bucket


@pytest.mark.parametrize("kw", [{}, {"norm_first": True, "activation": "gelu", "scale_embedding": True},
                                {"head_dropout": 0.5, "dropout": 0.3}, {"bigram_buckets": 7},
                                {"ngram_buckets": 31, "ngram_scale": 0.5}])
def test_scores_plus_bias_equal_the_logit_margin_in_a_padded_batch(kw):
    model = _model(**kw)
    model.train()   # the backend must switch dropout off itself
    scores, bias, logits, targets = token_scores(model, REVIEWS)   # one padded batch
    assert not model.training and targets.tolist() == [1] * len(REVIEWS)
    ids, mask = collate(REVIEWS)                                  # (5, 38): padded
    with torch.no_grad():
        out = model(ids, mask, token_logits=True)                 # a separate forward pass
    margin = out.logits[:, 1] - out.logits[:, 0]
    head_bias = (model.head.bias[1] - model.head.bias[0]).item() + (0.3 * 0.5 if kw.get("ngram_buckets") else 0)
    assert bias == pytest.approx([head_bias] * len(REVIEWS))
    torch.testing.assert_close(logits, out.logits, atol=1e-6, rtol=0)
    torch.testing.assert_close(out.token_logits.sum(1) + out.bias, out.logits, atol=1e-5, rtol=0)
    for i, review in enumerate(REVIEWS):
        assert float(scores[i].sum()) + bias[i] == pytest.approx(margin[i].item(), abs=1e-4)
        # padding never receives a share; real tokens carry the whole margin
        assert torch.all(out.token_logits[i, len(review):] == 0)
        assert len(scores[i]) == len(review) and abs(scores[i]).sum() > 0
        # each token's score is what the formula gives, computed by loops on the review alone
        assert scores[i].tolist() == pytest.approx(_brute_force_scores(model, review), abs=1e-4)


def test_scores_do_not_depend_on_the_batch():
    model = _model()
    together = token_scores(model, REVIEWS)[0]
    for i, review in enumerate(REVIEWS):
        alone = token_scores(model, [review])[0][0]
        assert alone.tolist() == pytest.approx(together[i].tolist(), abs=1e-5)


@pytest.mark.parametrize("truncation", ["head", "head_tail"])
def test_tokens_are_the_surface_words_the_model_saw(trained_checkpoint, truncation):
    tok = load_checkpoint(trained_checkpoint).tokenizer
    cfg = DataConfig(max_length=12, truncation=truncation, head_fraction=0.25)
    model = _model(vocab_size=tok.get_vocab_size(), max_length=12)
    texts = ["The ﬁlm was GREAT.<br /><br />Zyxwvq! loved it",                     # ligature, <br />, unknown word
             " ".join(f"w{i}" for i in range(30)) + " the end.",                  # longer than max_length
             "<br />"]                                                             # nothing left: one <unk>
    rows = token_rows(tok, cfg, texts)
    logits, shares, bias = batched_token_logits(model, [r[0] for r in rows], batch_size=2, device=torch.device("cpu"))
    explained = explanations(texts, rows, logits, shares, bias, LABELS)
    expected_ids = encode_texts(tok, texts, cfg)
    for e, text, ids in zip(explained, texts, expected_ids):
        assert e.ids == ids                                         # exactly what predict feeds the model
        assert len(e.tokens) == len(e.scores) == len(ids) <= 12
        assert e.margin == pytest.approx(math.log(e.probabilities["positive"] / e.probabilities["negative"]), abs=1e-4)
        assert "".join(piece for piece, _, _ in e.segments() if piece != "<unk>") == text
    first, long, empty = explained
    assert first.tokens == ["The", "ﬁlm", "was", "GREAT.", "Zyxwvq!", "loved", "it"]   # original spelling
    assert first.ids[4] == UNK_ID and ("Zyxwvq!", "unknown") in [(p, k) for p, k, _ in first.segments()]
    words = [f"w{i}" for i in range(30)] + ["the", "end."]
    if truncation == "head":
        assert long.tokens == words[:12]
        assert long.segments()[-1][1] == "omitted"                  # the tail the model never saw
    else:
        assert long.tokens == words[:3] + words[-9:]                # 25% of 12 from the start, the rest from the end
        assert [k for _, k, _ in long.segments()].count("omitted") == 1
    assert empty.tokens == ["<unk>"] and empty.ids == [UNK_ID]


def test_predictor_explain_agrees_with_predict(trained_checkpoint):
    predictor = Predictor(trained_checkpoint)
    texts = ["A moving, beautifully acted film.", "Dull and far too long. " * 60, "ok"]
    for e, p in zip(predictor.explain(texts), predictor.predict(texts)):
        assert e.label == p.label
        assert e.probabilities["positive"] == pytest.approx(p.probabilities["positive"], abs=1e-5)
        # the scores add up to the logit margin; the probabilities' log-odds are that margin / temperature
        assert sum(e.scores) + e.bias == pytest.approx(
            predictor.temperature * math.log(p.probabilities["positive"] / p.probabilities["negative"]), abs=1e-3)
    top = predictor.explain(texts[:1])[0].top(3, positive=True)
    assert all(s > 0 for _, s in top) and [s for _, s in top] == sorted((s for _, s in top), reverse=True)


def test_with_five_classes_and_an_ngram_score_the_scores_are_the_predicted_class_margin_by_loops():
    """N classes: the target is the predicted class; each token's score is its pooled features' and its
    n-grams' share of logit(k) - mean of the others, computed here by loops on the review alone."""
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=16, n_heads=2, n_layers=2, d_ff=32, ngram_buckets=31, ngram_scale=0.5)
    model = SentimentClassifier(cfg, vocab_size=50, max_length=64, num_labels=5)
    with torch.no_grad():
        model.ngram_score.weight[1:].normal_()
        model.ngram_score.bias.normal_()
    scores, bias, logits, targets = token_scores(model, REVIEWS)
    assert (targets == logits.numpy().argmax(1)).all() and len(set(targets.tolist())) >= 2
    w_head, w_ngram = model.head.weight.detach(), model.ngram_score.weight
    for i, review in enumerate(REVIEWS):
        k = int(targets[i])
        others = [c for c in range(5) if c != k]

        def contrast_of(row):   # row: (5,) per-class values
            return float(row[k] - sum(float(row[c]) for c in others) / 4)

        with torch.no_grad():
            hidden = model.hidden_states(*collate([review]))[0]
        want = [0.0] * len(review)
        for f in range(hidden.shape[1]):
            column = hidden[:, f].tolist()
            j = column.index(max(column))
            want[j] += column[j] * contrast_of(w_head[:, f])
        for j, bucket in _first_ngrams(review, 31):
            want[j] += 0.5 * contrast_of(w_ngram[bucket])
        assert scores[i].tolist() == pytest.approx(want, abs=1e-4)
        margin = float(logits[i, k] - logits[i, others].mean())
        assert float(scores[i].sum()) + bias[i] == pytest.approx(margin, abs=1e-4)

"""The n-gram score (sentiment_cli/ngram/): hashing, first occurrences, its share of the logits, its fit, its names."""

import numpy as np
import pytest
import torch

from sentiment_cli.config import ModelConfig
from sentiment_cli.data.batching import collate
from sentiment_cli.errors import DataError
from sentiment_cli.model.classifier import SentimentClassifier
from sentiment_cli.ngram.estimator import NgramEstimator
from sentiment_cli.ngram.features import HASH_MULTIPLIER as M
from sentiment_cli.ngram.features import first_occurrences, ngram_buckets, ngram_features
from sentiment_cli.ngram.forms import label_ids
from sentiment_cli.ngram.score import NgramScore


def _fit(score, texts, labels, form="auto", C=None):
    """Fit ``score`` on ``texts`` as a training run does: the estimator on their features, loaded into the score."""
    fitted = NgramEstimator(score.num_labels, form, C).fit(ngram_features(texts, score.buckets), labels)
    score.load_fit(fitted.coef_, fitted.intercept_, fitted.form_)
    return fitted


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
        model.ngram_score.weight[1:].normal_()
        model.ngram_score.bias.fill_(0.25)
    reviews = [[5, 6, 7, 5, 6, 7], [9, 9, 9], list(range(2, 40)), [8, 1, 8]]
    ids, mask = collate(reviews)
    with torch.no_grad():
        encoder, full = model(ids, mask, encoder_only=True).logits, model(ids, mask).logits
    assert torch.equal(full[:, 0], encoder[:, 0])
    sparse = model.ngram_score.margins(reviews)
    torch.testing.assert_close(full[:, 1] - encoder[:, 1], 0.5 * torch.from_numpy(sparse), atol=1e-5, rtol=0)
    # binarised: each distinct n-gram once, however often it repeats ([9, 9, 9]: "9", "9 9", "9 9 9")
    for row, review in enumerate(reviews):
        present = {b for b in ngram_buckets(torch.tensor([review]), 1009).flatten().tolist() if b}
        expected = 0.5 * (float(model.ngram_score.weight[sorted(present)].sum()) + 0.25)
        assert (full[row, 1] - encoder[row, 1]).item() == pytest.approx(expected, abs=1e-5)
    assert len({b for b in ngram_buckets(torch.tensor([[9, 9, 9]]), 1009).flatten().tolist() if b}) == 3


def test_the_fit_needs_two_classes_present_and_ids_in_range():
    with pytest.raises(ValueError, match="at least two classes"):
        NgramScore(7, num_labels=1)
    with pytest.raises(DataError, match="at least two of its 2 classes"):
        NgramEstimator(2).fit(ngram_features([[5, 6], [7, 8]], 1009), [1, 1])
    with pytest.raises(DataError, match="at least two of its 3 classes; got label ids \\[2\\]"):
        label_ids([2, 2, 2], 3)
    with pytest.raises(DataError, match="got label ids \\[0, 1, 2, 3, 4\\]"):
        label_ids([0, 1, 2, 3, 4], 2)
    assert label_ids([1, 0, 1], 2).tolist() == [1, 0, 1]


def test_a_checkpoint_keeps_the_flat_tensor_names_and_loads_them_back():
    """The score's tensors are saved as ngram_weight / ngram_bias beside the classifier's own (the file format
    of checkpoints written before the score was a module), and load back into the module, also under a
    wrapper's prefix."""
    cfg = ModelConfig(d_model=16, n_heads=2, d_ff=32, ngram_buckets=31)
    model = SentimentClassifier(cfg, vocab_size=60, max_length=16)
    with torch.no_grad():
        model.ngram_score.weight.normal_()
        model.ngram_score.bias.fill_(0.5)
    state = model.state_dict()
    assert "ngram_weight" in state and "ngram_bias" in state and not any(k.startswith("ngram_score.") for k in state)
    assert list(state)[-2:] == ["ngram_weight", "ngram_bias"]
    fresh = SentimentClassifier(cfg, vocab_size=60, max_length=16)
    fresh.load_state_dict(state, strict=True)
    assert torch.equal(fresh.ngram_score.weight, model.ngram_score.weight) and float(fresh.ngram_score.bias) == 0.5
    wrapped = torch.nn.Sequential(model)                      # prefix "0."
    assert "0.ngram_weight" in wrapped.state_dict()
    again = torch.nn.Sequential(SentimentClassifier(cfg, vocab_size=60, max_length=16))
    again.load_state_dict(wrapped.state_dict(), strict=True)
    assert torch.equal(again[0].ngram_score.weight, model.ngram_score.weight)


def test_the_fit_is_nb_lr_on_the_binarised_ngrams_and_deterministic():
    """On separable toy reviews the fit's score gets every training review right, its intercept is kept in
    float64 while at hand, and a second fit gives the same weights (a resumed run refits)."""
    reviews = [[5, 6, 7], [5, 6, 8], [5, 9, 7], [10, 11, 12], [10, 11, 13], [14, 11, 12]]
    labels = [1, 1, 1, 0, 0, 0]
    a, b = NgramScore(1009), NgramScore(1009)
    _fit(a, reviews, labels, "nb-lr")
    _fit(b, reviews, labels, "nb-lr")
    assert torch.equal(a.weight, b.weight) and float(a.weight[0]) == 0.0
    assert ((a.margins(reviews) > 0) == np.asarray(labels, bool)).all()
    assert a.intercept.dtype == np.float64 and float(a.bias) == pytest.approx(float(a.intercept[0]), abs=1e-6)
    features = ngram_features(reviews, 1009)
    assert features.shape == (6, 1010) and set(features.data.tolist()) == {1.0}
    assert features[0].nnz == 6                               # 3 unigrams, 2 bigrams, 1 trigram


def _five_class_model(scale=0.5):
    cfg = ModelConfig(d_model=16, n_heads=2, d_ff=32, ngram_buckets=1009, ngram_scale=scale)
    torch.manual_seed(0)
    model = SentimentClassifier(cfg, vocab_size=60, max_length=64, num_labels=5).eval()
    with torch.no_grad():
        model.ngram_score.weight[1:].normal_()
        model.ngram_score.bias.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0, 0.5]))
    return model


def test_with_five_classes_each_class_gets_its_own_score_and_it_equals_the_sparse_form():
    model = _five_class_model()
    assert model.ngram_score.weight.shape == (1010, 5) and model.ngram_score.bias.shape == (5,)
    reviews = [[5, 6, 7, 5, 6, 7], [9, 9, 9], list(range(2, 40)), [8, 1, 8]]
    ids, mask = collate(reviews)
    with torch.no_grad():
        encoder, out = model(ids, mask, encoder_only=True), model(ids, mask, token_logits=True)
    sparse = model.ngram_score.margins(reviews)                               # (4, 5), unscaled
    assert sparse.shape == (4, 5)
    torch.testing.assert_close(out.logits - encoder.logits, 0.5 * torch.from_numpy(sparse), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.token_logits.sum(1) + out.bias, out.logits, atol=1e-5, rtol=0)
    for row, review in enumerate(reviews):   # binarised: each distinct n-gram once, per class
        present = sorted({b for b in ngram_buckets(torch.tensor([review]), 1009).flatten().tolist() if b})
        expected = 0.5 * (model.ngram_score.weight[present].sum(0) + model.ngram_score.bias)
        torch.testing.assert_close(out.logits[row] - encoder.logits[row], expected, atol=1e-5, rtol=0)
    p = model.ngram_score.probabilities(reviews)
    assert p.shape == (4, 5) and torch.allclose(p.sum(1), torch.ones(4))
    assert (p.argmax(1).numpy() == model.ngram_score.logits(reviews).argmax(1)).all()


def test_with_five_classes_the_fit_is_one_vs_rest_nb_lr():
    """Each class's texts share a word no other class uses: one-vs-rest NB-LR gets every training text right,
    and a class absent from a fit (a fold of a cross-fit) is never predicted."""
    reviews = [[10 + c, 30 + i, 40 + i] for c in range(5) for i in range(4)]
    labels = [c for c in range(5) for _ in range(4)]
    score = NgramScore(1009, num_labels=5)
    _fit(score, reviews, labels, "nb-lr")
    assert (score.logits(reviews).argmax(1) == np.asarray(labels)).all()
    assert score.intercept.shape == (5,) and float(score.weight[0].abs().sum()) == 0.0
    partial = NgramScore(1009, num_labels=5)
    _fit(partial, reviews[:12], labels[:12], "nb-lr")                                   # classes 3 and 4 absent
    assert set(partial.logits(reviews).argmax(1).tolist()) <= {0, 1, 2}
    assert float(partial.bias[3]) == float(partial.bias[4]) == -10.0


def test_a_five_class_score_keeps_its_flat_names_and_loads_back():
    model = _five_class_model()
    state = model.state_dict()
    assert state["ngram_weight"].shape == (1010, 5) and state["ngram_bias"].shape == (5,)
    fresh = SentimentClassifier(model.config, vocab_size=60, max_length=64, num_labels=5)
    fresh.load_state_dict(state, strict=True)
    assert torch.equal(fresh.ngram_score.weight, model.ngram_score.weight)


@pytest.mark.slow   # a torch.onnx export (seconds)
def test_a_five_class_score_exports_to_onnx_exactly(tmp_path):
    assert_exports_exactly(_five_class_model(), [[5, 6, 7, 5, 6, 7], [9, 9, 9], list(range(2, 40)), [8, 1, 8]],
                           tmp_path)


def assert_exports_exactly(model, reviews, tmp_path):
    """The model's ONNX export (as ``sentiment export`` traces it) gives its logits and token logits on ``reviews``
    to 1e-5."""
    import onnxruntime as ort

    from sentiment_cli.inference.export import _trace

    _trace(model, tmp_path / "m.onnx")
    ids, mask = collate(reviews)
    with torch.no_grad():
        out = model(ids, mask, token_logits=True)
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    logits, token_logits = session.run(None, {"input_ids": ids.numpy(), "padding_mask": mask.numpy()})
    np.testing.assert_allclose(logits, out.logits.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(token_logits, out.token_logits.numpy(), atol=1e-5, rtol=0)


def _topic_texts(num_labels, per_class, seed=0, noise=0.5):
    """Texts of ``num_labels`` topics: each draws words mostly from its own band of ids, with a share
    ``noise`` from all of them (so no fit is perfect and the optimum is finite)."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for c in range(num_labels):
        for _ in range(per_class):
            own = rng.integers(2 + 10 * c, 12 + 10 * c, size=6)
            common = rng.integers(2, 2 + 10 * num_labels, size=int(6 * noise))
            texts.append(rng.permutation(np.concatenate([own, common])).tolist())
            labels.append(c)
    return texts, labels


@pytest.mark.parametrize("num_labels", [2, 5])
def test_a_fit_made_elsewhere_loads_into_a_score_exactly_and_a_misshapen_one_is_refused(num_labels):
    """``load_fit`` is how a fit (or a cross-fit's fold) becomes a score: loading the fit's own weights and
    intercepts into a fresh score gives the same logits, row 0 (no n-gram) is zeroed, and other shapes raise."""
    from sentiment_cli.ngram.forms import DEFAULT_C, fit_columns

    reviews = [[10 + c, 30 + i, 40 + i] for c in range(num_labels) for i in range(4)]
    labels = [c for c in range(num_labels) for _ in range(4)]
    fitted = NgramScore(1009, num_labels=num_labels)
    _fit(fitted, reviews, labels, "nb-lr")
    w, b = fit_columns(ngram_features(reviews, 1009), np.asarray(labels), num_labels, "nb-lr", DEFAULT_C["nb-lr"])
    w[0] = 7.0
    loaded = NgramScore(1009, num_labels=num_labels)
    loaded.load_fit(w, b)
    assert float(loaded.weight[0].abs().sum()) == 0.0 and w[0].sum() != 0   # the caller's array is untouched
    np.testing.assert_array_equal(loaded.logits(reviews), fitted.logits(reviews))
    with pytest.raises(ValueError, match="do not fit"):
        NgramScore(1013, num_labels=num_labels).load_fit(w, b)


def test_a_training_fit_keeps_float16_precision_unless_a_weight_is_beyond_its_range():
    """A training run's score keeps the fit's weights rounded to float16 (``keep_half_precision``: what the
    checkpoint stores in two bytes, bit for bit); a weight beyond float16's range keeps the table in float32.
    ``load_fit`` alone (an audit's fold) keeps them as fitted."""
    from sentiment_cli.ngram.score import half_precision

    w = np.random.default_rng(0).normal(scale=3.0, size=(1010, 3)).astype(np.float32)
    score = NgramScore(1009, num_labels=3)
    score.load_fit(w, np.zeros(3))
    assert np.array_equal(score.weight.numpy()[1:], w[1:])
    score.keep_half_precision()
    kept = score.weight.numpy()
    assert np.array_equal(kept, kept.astype(np.float16).astype(np.float32)) and not np.array_equal(kept[1:], w[1:])
    assert np.abs(kept[1:] - w[1:]).max() <= np.abs(w).max() * 2.0 ** -11
    w[5, 1] = 1e5
    assert torch.equal(half_precision(torch.from_numpy(w)), torch.from_numpy(w))


@pytest.mark.parametrize("weighting", ["binary", "tfidf"])
def test_the_exports_compact_table_gives_the_same_logits_from_fewer_bytes(weighting):
    """``compact_table`` (what the ONNX export traces): several labels' table shrinks to the rows some n-gram uses,
    found through an int32 ``row_index``, with the same token logits; a bucket with a zero weight but an idf keeps
    its row (it counts in a text's norm); afterwards the score is as it was. A two-class table is never smaller so."""
    from sentiment_cli.ngram.score import compact_rows

    rng = np.random.default_rng(0)
    score = NgramScore(1009, num_labels=4, weighting=weighting)
    w = np.zeros((1010, 4), np.float32)
    w[rng.choice(np.arange(10, 1010), 60, replace=False)] = rng.normal(size=(60, 4)).astype(np.float16)
    idf = None
    if weighting == "tfidf":   # powers of two: the weights (w * idf) stay exact in float16
        idf = np.where(w.any(1), 2.0, 0.0).astype(np.float32)
        idf[7] = 4.0           # an n-gram of the training texts whose weights are all zero
    score.load_fit(w, np.zeros(4), idf=idf)
    ids = torch.randint(2, 400, (3, 30))
    before = score.token_logits(ids)
    assert float(before.abs().sum()) > 0          # some of the texts' n-grams are in the table
    with score.compact_table():
        assert score.row_index.dtype == torch.int32 and tuple(score.row_index.shape) == (1010,)
        used = 60 + (weighting == "tfidf")
        assert tuple(score.weight.shape) == (used + 1, 4) and score.weight.dtype == torch.float16
        torch.testing.assert_close(score.token_logits(ids), before, rtol=0, atol=0)
    assert score.row_index is None and score.weight.shape == (1010, 4) and score.weight.dtype == torch.float32
    torch.testing.assert_close(score.token_logits(ids), before, rtol=0, atol=0)
    two = torch.zeros(1010, dtype=torch.float16)
    two[5] = 1.0
    assert compact_rows(two, None)[0] is None      # 4 bytes of index a bucket: more than the 2 bytes of its row


@pytest.mark.parametrize("num_labels", [2, 4])
def test_the_lr_fit_is_sklearns_logistic_regression_on_the_binarised_ngrams(num_labels):
    """ngram_fit = "lr": the stored weights and bias give scikit-learn's decision_function of a plain L2
    LogisticRegression fitted on all buckets (binary with two classes, multinomial with more), though the
    fit reads only the buckets that occur; a bucket no training text has weighs exactly 0."""
    from sklearn.linear_model import LogisticRegression

    from sentiment_cli.ngram.forms import LR_C

    texts, labels = _topic_texts(num_labels, 30)
    held_out, _ = _topic_texts(num_labels, 5, seed=1)
    score = NgramScore(1009, num_labels=num_labels)
    fit = _fit(score, texts, labels, "lr")
    assert (fit.form_, fit.C_, fit.chosen_by_, fit.selection_) == ("lr", LR_C, "config", None)
    assert score.weight.shape == ((1010,) if num_labels == 2 else (1010, num_labels))
    reference = LogisticRegression(C=LR_C, max_iter=1000).fit(ngram_features(texts, 1009), labels)   # as the fit
    for batch in (texts, held_out):
        expected = reference.decision_function(ngram_features(batch, 1009))
        np.testing.assert_allclose(score.margins(batch), expected, atol=1e-4, rtol=0)
    unseen = np.setdiff1d(np.arange(1010), ngram_features(texts, 1009).indices)
    assert len(unseen) > 100 and float(score.weight[unseen].abs().sum()) == 0.0
    assert score.description().startswith("1 x an n-gram score (" + ("logistic regression" if num_labels == 2 else
                                                                     "multinomial logistic regression") + " over")


def test_the_estimator_keeps_scikit_learns_contract():
    """Parameters stored as given (checked in fit, not in __init__), fit returns self, what it learned ends in
    an underscore, and scikit-learn's clone copies it unfitted."""
    from sklearn.base import clone

    texts, labels = _topic_texts(2, 20)
    x = ngram_features(texts, 1009)
    odd = NgramEstimator(num_labels=1, form="svm")                          # no error until fit
    assert odd.get_params() == {"num_labels": 1, "form": "svm", "C": None, "class_weight": None, "limit": None,
                                "fit_intercept": True}
    with pytest.raises(ValueError, match="at least two classes"):
        odd.fit(x, labels)
    with pytest.raises(ValueError, match="unknown n-gram fit 'svm'"):
        odd.set_params(num_labels=2).fit(x, labels)
    estimator = NgramEstimator(2, "nb-lr")
    assert estimator.fit(x, labels) is estimator
    assert estimator.coef_.shape == (1010, 1) and estimator.intercept_.shape == (1,)
    assert not any(hasattr(clone(estimator), name) for name in ("coef_", "intercept_", "form_", "C_"))
    np.testing.assert_array_equal(estimator.predict(x), (estimator.decision_function(x)[:, 0] > 0).astype(int))
    with pytest.raises(ValueError, match="unknown parameter 'alpha'"):
        estimator.set_params(alpha=1.0)


@pytest.mark.parametrize("form", ["nb-lr", "lr"])
def test_without_an_intercept_a_text_with_no_ngram_scores_zero(form):
    """``fit_intercept=False`` (``[model] ngram_intercept``): the intercept is 0, so a text with no n-gram gets
    even odds, while the fit still separates the training texts; with it, the fitted intercept is not 0 on
    imbalanced labels."""
    texts, labels = _topic_texts(2, 20)
    texts, labels = texts + texts[:10], list(labels) + list(labels[:10])   # imbalanced: the intercept has work
    x = ngram_features(texts, 1009)
    empty = ngram_features([[]], 1009)
    plain = NgramEstimator(2, form).fit(x, labels)
    blind = NgramEstimator(2, form, fit_intercept=False).fit(x, labels)
    assert float(plain.intercept_[0]) != 0.0
    assert blind.intercept_.shape == (1,) and float(blind.intercept_[0]) == 0.0
    assert float(blind.decision_function(empty)[0, 0]) == 0.0
    assert (blind.predict(x) == np.asarray(labels)).mean() >= 0.9


def test_auto_chooses_by_cross_validation_deterministically():
    """ngram_fit = "auto": every candidate of the grid is cross-validated; two fits choose and fit the same;
    the report names the choice and each candidate's accuracy, and the choice is the best."""
    from sentiment_cli.ngram.selection import FIT_GRID

    texts, labels = _topic_texts(3, 40, noise=2.0)
    a, b = NgramScore(1009, num_labels=3), NgramScore(1009, num_labels=3)
    assert "as cross-validation chose" in a.description()             # unknown until fitted
    fit_a, fit_b = _fit(a, texts, labels), _fit(b, texts, labels)
    assert fit_a.selection_ == fit_b.selection_ and torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)
    chosen = fit_a.selection_
    assert fit_a.chosen_by_ == "cross-validation" and chosen.cv_texts == 120
    assert (fit_a.form_, fit_a.C_) == (chosen.form, chosen.C)
    assert list(chosen.cv_accuracy) == [f"{form} C={C:g}" for form, Cs in FIT_GRID.items() for C in Cs]
    assert chosen.cv_accuracy[f"{chosen.form} C={chosen.C:g}"] == max(chosen.cv_accuracy.values())
    assert all(0.4 < v <= 1.0 for v in chosen.cv_accuracy.values())
    report = fit_a.report()
    assert report["form"] == fit_a.form_ and report["cv_folds"] == 3 and report["cv_texts"] == 120
    assert a.form == fit_a.form_ and (fit_a.form_ == "lr") == ("logistic regression" in a.description())


def test_cross_validation_scores_each_candidate_on_held_out_folds():
    """A candidate that can only predict the majority class (LR with a vanishing C; the intercept is not
    penalised) scores exactly the majority's share, and loses to NB-LR, which learns the topics; the
    sample is capped at max_texts."""
    from sentiment_cli.ngram.selection import select_fit

    texts, labels = _topic_texts(2, 60)
    texts, labels = texts[:100], labels[:100]                     # 60 of class 0, 40 of class 1
    x, y = ngram_features(texts, 1009), np.asarray(labels)
    fit = select_fit(x, y, 2, grid={"lr": (1e-6,), "nb-lr": (1.0,)})
    assert fit.cv_accuracy["lr C=1e-06"] == pytest.approx(0.6) and fit.cv_accuracy["nb-lr C=1"] > 0.8
    assert (fit.form, fit.C, fit.cv_texts) == ("nb-lr", 1.0, 100)
    capped = select_fit(x, y, 2, grid={"nb-lr": (1.0,)}, max_texts=50)
    assert capped.cv_texts == 50 and capped == select_fit(x, y, 2, grid={"nb-lr": (1.0,)}, max_texts=50)


def test_select_forms_keeps_each_forms_best_C_and_a_cross_fit_fits_each_as_the_score_does():
    """The audit's entry point: each form at the C cross-validation scored best for it; a cross-fit's fold
    fits each form as a training run fits one (row 0, "no n-gram", zero) and scores the held-out rows."""
    from sentiment_cli.ngram.crossfit import cross_fit
    from sentiment_cli.ngram.forms import fit_columns
    from sentiment_cli.ngram.selection import FIT_GRID, select_fit, select_forms

    texts, labels = _topic_texts(3, 40)
    x, y = ngram_features(texts, 1009), np.asarray(labels)
    selection, forms = select_forms(x, y, 3)
    assert selection == select_fit(x, y, 3) and list(forms) == list(FIT_GRID)
    for form, C in forms.items():
        assert selection.cv_accuracy[f"{form} C={C:g}"] == max(
            v for k, v in selection.cv_accuracy.items() if k.startswith(f"{form} C="))
    order = np.random.default_rng(0).permutation(120)
    splits = [(np.sort(order[30:]), np.sort(order[:30])), (np.sort(order[:90]), np.sort(order[90:]))]
    fits = cross_fit(x, y, splits, forms, 3)
    inside, outside = splits[0]
    assert (fits.fold[outside] == 0).all() and (fits.fold[splits[1][1]] == 1).all()
    for form, fitted in fits.fits[0].items():
        expected_w, expected_b = fit_columns(x[inside], y[inside], 3, form, forms[form])
        expected_w[0] = 0.0
        w, b = fitted.coef_, fitted.intercept_
        assert w.shape == (1010, 3) and np.array_equal(w, expected_w) and np.array_equal(b, expected_b)
        assert np.array_equal(fits.scores[form][outside], (x[outside] @ w + b).astype(np.float32))


@pytest.mark.parametrize("num_labels", [2, 3])
def test_residual_logits_are_each_folds_score_of_the_texts_it_held_out(num_labels):
    """Training's residual: on each of the seeded folds, a score fitted on the others in the full fit's form and
    C gives the held-out texts' logits, bit for bit as the model's score computes them."""
    from sentiment_cli.ngram.crossfit import RESIDUAL_FOLDS, random_splits, residual_logits

    texts, labels = _topic_texts(num_labels, 20)
    out = residual_logits(ngram_features(texts, 1009), labels, num_labels, 7, form="nb-lr", C=0.3)
    assert out.shape == (len(texts), num_labels) and out.dtype == np.float32
    for inside, outside in random_splits(len(texts), RESIDUAL_FOLDS, 7):
        score = NgramScore(1009, num_labels=num_labels)
        _fit(score, [texts[i] for i in inside], [labels[i] for i in inside], "nb-lr", 0.3)
        assert np.array_equal(out[outside], score.logits([texts[i] for i in outside]))


def test_a_pinned_nb_lr_fit_is_the_nb_lr_of_before_and_its_card_text_is_unchanged():
    from sentiment_cli.ngram.forms import FIT_C, nb_lr_columns

    texts, labels = _topic_texts(2, 30)
    score = NgramScore.from_config(ModelConfig(ngram_buckets=1009, ngram_fit="nb-lr"), 2)
    assert score.description() == ("1 x an n-gram score (NB-LR over token 1-3-grams hashed into 1,009 buckets, "
                                   "Wang & Manning 2012)")
    fit = _fit(score, texts, labels, "nb-lr")
    assert (fit.form_, fit.C_, fit.chosen_by_, fit.selection_) == ("nb-lr", FIT_C, "config", None)
    weights, intercepts = nb_lr_columns(ngram_features(texts, 1009), np.asarray(labels), 2, FIT_C)
    weights[0] = 0.0
    assert np.array_equal(score.weight.numpy(), weights[:, 0]) and float(score.intercept[0]) == intercepts[0]
    # a caller's C (a cross-fit's folds) is the caller's
    assert _fit(score, texts, labels, "lr", 3.0).report() == {"form": "lr", "C": 3.0, "chosen_by": "caller"}


def test_ngram_fit_is_a_config_key_and_older_run_configs_fitted_nb_lr():
    from sentiment_cli.config import config_from_dict, stored_config_from_dict
    from sentiment_cli.errors import ConfigError

    assert config_from_dict({}).model.ngram_fit == "auto"
    assert config_from_dict({"model": {"ngram_fit": "lr"}}).model.ngram_fit == "lr"
    with pytest.raises(ConfigError, match="ngram_fit"):
        config_from_dict({"model": {"ngram_fit": "svm"}})
    assert stored_config_from_dict({"model": {"d_model": 16, "n_heads": 2}}).model.ngram_fit == "nb-lr"
    assert stored_config_from_dict({"model": {"ngram_fit": "auto"}}).model.ngram_fit == "auto"


def test_the_report_is_read_under_its_name_or_an_older_checkpoints_and_a_malformed_one_is_ignored():
    """metrics.json files the score's record under "ngram_score"; checkpoints from before the rename have it under
    "teacher". The card takes the form from it, and a record naming no known form leaves it unknown."""
    from sentiment_cli.ngram.report import fitted_form, model_phrase, read_report

    record = {"form": "lr", "C": 10.0, "chosen_by": "cross-validation", "model": "logistic regression over ..."}
    for metrics in ({"ngram_score": record}, {"teacher": record}, {"ngram_score": record, "teacher": {"form": "x"}}):
        assert read_report(metrics) == record and fitted_form(metrics) == "lr"
        assert model_phrase(metrics) == "logistic regression over ..."
    for bad in ({}, {"ngram_score": []}, {"teacher": {"form": "svm"}}, {"ngram_score": {"C": 1.0}}):
        assert fitted_form(bad) is None and model_phrase(bad) is None
    score = NgramScore(1009, num_labels=3)
    assert "(one-vs-rest NB-LR over" in score.description(fitted_form({"teacher": {"form": "nb-lr"}}))


def test_log_count_ratios_are_normalised_over_the_ngrams_that_occur():
    """Wang & Manning's ratios with the norms over the seen features: hashed buckets that no text fills
    change nothing, so a one-vs-rest class whose counts are a fifth of the rest's keeps its offset."""
    import scipy.sparse as sp

    from sentiment_cli.ngram.forms import log_count_ratio

    dense = np.array([[1, 1, 0], [1, 0, 0], [0, 1, 1], [0, 0, 1], [0, 1, 1], [1, 1, 1]], np.float32)
    y = np.array([1, 0, 0, 0, 0, 0])
    p, q = 1 + dense[y == 1].sum(0), 1 + dense[y == 0].sum(0)
    expected = np.log((p / p.sum()) / (q / q.sum()))
    padded = sp.csr_matrix(np.concatenate([dense, np.zeros((6, 1000), np.float32)], 1))
    r = log_count_ratio(padded, y)
    assert r.shape == (1003,) and np.allclose(r[:3], expected)
    assert np.allclose(log_count_ratio(sp.csr_matrix(dense), y), expected)


@pytest.mark.parametrize("weighting", ["binary", "tfidf"])
def test_a_fit_copied_to_another_score_scores_the_same(weighting):
    # the search's trials copy one fit of the run (training/setup.py): a TF-IDF fit brings its idf with it
    rng = np.random.default_rng(0)
    a = NgramScore(64, num_labels=3, weighting=weighting)
    weights, intercepts = rng.normal(size=(65, 3)), rng.normal(size=3)
    idf = rng.uniform(1, 3, size=65) if weighting == "tfidf" else None
    a.load_fit(weights, intercepts, "lr", idf=idf)
    b = NgramScore(64, num_labels=3, weighting=weighting)
    b.copy_fit(a)
    ids = [[2, 5, 9, 11], [3, 3, 7]]
    assert np.array_equal(a.margins(ids), b.margins(ids)) and b.form == "lr"
    with pytest.raises(ValueError, match="does not fit"):
        NgramScore(64, num_labels=3, weighting="binary" if weighting == "tfidf" else "tfidf").copy_fit(a)

"""Short sentences read as people write them (issue 74): VADER's words as training rows where the labels are
polarity, identity terms read as <unk>, and the n-gram score without an intercept."""

from __future__ import annotations

import numpy as np
import pytest

from sentiment_cli.config import DataConfig
from sentiment_cli.data.identity import IDENTITY_TERMS, identity_ids
from sentiment_cli.data.splits import Split, load_split
from sentiment_cli.data.tokenizer import UNK_ID, build_tokenizer, encode_texts
from sentiment_cli.training.lexicon import lexicon_rows, polarity_auc, vader_lexicon
from sentiment_cli.training.policy import DEFAULT

from .conftest import SMALL_DATA


@pytest.fixture(scope="module")
def imdb_small() -> Split:
    return load_split(str(SMALL_DATA), "train", validation_fraction=0.0)


def test_polarity_auc_is_the_mann_whitney_statistic():
    """Against scikit-learn's ROC AUC on the texts' mean valences, ties included."""
    from sklearn.metrics import roc_auc_score

    lexicon = {"good": 2.0, "bad": -2.0, "fine": 1.0}
    texts = ["good", "bad", "fine film", "a film", "bad bad good", "good fine", "nothing", "bad"]
    positive = [True, False, True, False, False, True, True, False]
    scores = [np.mean([lexicon.get(w, 0.0) for w in t.split()]) for t in texts]
    assert polarity_auc(texts, positive, lexicon) == pytest.approx(roc_auc_score(positive, scores))
    assert np.isnan(polarity_auc(["good"], [True], lexicon))


def test_vaders_words_join_reviews_labelled_by_polarity(imdb_small):
    """IMDB's reviews are polarity (AUC over 0.65): the strongest words join, each labelled by its valence's
    sign, ``lexicon_repeats`` rows each, at most ``rows`` rows, after the user's rows, which are kept as they were."""
    out, added, reason = lexicon_rows(imdb_small, 400)
    assert added == 400 and "ROC AUC 0.8" in reason and "the labels are polarity" in reason
    assert out.texts[:len(imdb_small)] == list(imdb_small.texts) and out.labels[:len(imdb_small)] == imdb_small.labels
    rows = out.texts[len(imdb_small):]
    assert len(set(rows)) == 400 // DEFAULT.fit.lexicon_repeats and all(rows.count(w) == DEFAULT.fit.lexicon_repeats
                                                                         for w in set(rows))
    words = dict(zip(rows, out.labels[len(imdb_small):]))
    lexicon = vader_lexicon()
    neg, pos = imdb_small.label_names.index("negative"), imdb_small.label_names.index("positive")
    assert all(y == (pos if lexicon[w] > 0 else neg) for w, y in words.items())
    assert min(abs(lexicon[w]) for w in words) >= max(abs(v) for w, v in lexicon.items()
                                                       if w not in words and abs(v) >= 1) - 1e-9   # the strongest
    everything, n, _ = lexicon_rows(imdb_small, 10_000)
    assert n == 10_000 and "hate" in everything.texts[len(imdb_small):]


def test_the_users_labels_win_over_the_lexicon(imdb_small):
    """A word the training texts give the other sign (here "hate" in 60 positive reviews and no negative one)
    is left out; with the texts saying nothing, it joins."""
    pos = imdb_small.label_names.index("positive")
    texts = list(imdb_small.texts) + ["I hate to say it, but what a wonderful film."] * 60
    skewed = Split("train", texts, list(imdb_small.labels) + [pos] * 60, imdb_small.label_names)
    out, _, _ = lexicon_rows(skewed, 10_000)
    assert "hate" not in out.texts[len(skewed):] and "love" in out.texts[len(skewed):]


def test_labels_that_are_not_polarity_get_no_word(imdb_small):
    """Labels named otherwise, or negative / positive labels that VADER cannot tell apart (shuffled here, as text
    in another language would be), get no row and say why."""
    topics = Split("train", imdb_small.texts, imdb_small.labels, ("sports", "world"))
    assert lexicon_rows(topics, 100)[1] == 0
    shuffled = Split("train", imdb_small.texts, list(np.random.default_rng(0).permutation(imdb_small.labels)),
                     imdb_small.label_names)
    out, added, reason = lexicon_rows(shuffled, 100)
    assert added == 0 and out is shuffled and f"under {DEFAULT.fit.lexicon_auc:.2f}" in reason


def test_identity_terms_read_as_unk_and_swaps_give_the_same_ids(imdb_small):
    """With ``blind_identity``, "Italian" and "Mexican" (and "Muslim", "gay") are <unk>, so a swap gives the same
    ids; words of another meaning ("black comedy", "straight to video") are kept; off, nothing changes."""
    config = DataConfig(pre_tokenizer="punctuation", min_frequency=1)
    tok = build_tokenizer(list(imdb_small.texts) + ["Italian Mexican Muslim Jewish gay Roman Catholic an a"], config)
    blind = DataConfig(pre_tokenizer="punctuation", min_frequency=1, blind_identity=True)
    a, b = encode_texts(tok, ["The Italian chef was friendly.", "The Mexican chef was friendly."], blind)
    assert a == b and UNK_ID in a
    plain = encode_texts(tok, ["The Italian chef was friendly.", "The Mexican chef was friendly."], config)
    assert plain[0] != plain[1] and UNK_ID not in plain[0]
    kept = "A black comedy, straight to video."
    assert encode_texts(tok, [kept], blind) == encode_texts(tok, [kept], config)
    mask = identity_ids(tok).mask
    assert mask[tok.token_to_id("muslim")] and mask[tok.token_to_id("gay")] and not mask[tok.token_to_id("the")]
    an, a = encode_texts(tok, ["He is an Italian poet.", "He is a Chinese poet."], blind)   # "an" read as "a"
    assert an == a and an[2] == tok.token_to_id("a") and an[3] == UNK_ID
    pair, alone = encode_texts(tok, ["a Roman Catholic poet", "Roman history"], blind)           # a two-word term
    assert pair[1:3] == [UNK_ID, UNK_ID] and alone[0] == tok.token_to_id("roman")
    assert not {"black", "white", "straight"} & IDENTITY_TERMS

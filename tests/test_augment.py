"""Augmentation by rule (``training/augment.py``): which sentences are negated, how, and what joins the split."""

from __future__ import annotations

from sentiment_cli.data.splits import Split
from sentiment_cli.training.augment import augment, negated, polar_labels
from sentiment_cli.training.policy import DEFAULT

MIN_REVIEWS = DEFAULT.fit.augment_min_reviews

BASE = {"loved": "love", "enjoyed": "enjoy", "hated": "hate"}


def test_one_rule_applies_exactly_once():
    assert negated("The acting was superb.", BASE) == ("The acting was not superb.", " superb.")
    assert negated("I loved every minute of it.", BASE)[0] == "I did not love every minute of it."
    assert negated("You can recommend it to anyone.", BASE)[0] == "You can not recommend it to anyone."
    assert negated("The plot was thin and the cast was weak.", BASE) is None      # two copulas
    assert negated("The film was not good at all.", BASE) is None                 # a negator already
    assert negated("It was good, but too long.", BASE) is None                    # contrast
    assert negated("Was it any good at all?", BASE) is None                       # a question
    assert negated("Great.", BASE) is None                                        # too short
    assert negated("We watched it twice and it was fun.", {}) is not None         # 'watched' has no base form


def test_labels_must_be_two_class_sentiment():
    assert polar_labels(("negative", "positive")) == (0, 1)
    assert polar_labels(("POS", "NEG")) == (1, 0)
    assert polar_labels(("ham", "spam")) is None
    assert polar_labels(("negative", "neutral", "positive")) is None


def _split(labels=("negative", "positive")) -> Split:
    good = ["The film was wonderful and moving.", "A wonderful cast. The story was wonderful throughout."]
    bad = ["The film was dreadful from start to end.", "Dull. The script was dreadful in every way."]
    texts = [good[i % 2] + f" Review {i}." for i in range(MIN_REVIEWS)] + \
            [bad[i % 2] + f" Review {i}." for i in range(MIN_REVIEWS)]
    return Split("train", texts, [1] * MIN_REVIEWS + [0] * MIN_REVIEWS, labels)


def test_pairs_join_the_split_with_the_label_flipped():
    split = _split()
    out, added = augment(split, 3)
    assert added == 3 and len(out) == len(split) + 6
    assert out.texts[:len(split)] == split.texts and out.labels[:len(split)] == split.labels
    for k in range(len(split), len(out), 2):
        sentence, flipped = out.texts[k], out.texts[k + 1]
        assert " not " in flipped and flipped.replace(" not", "") == sentence
        assert out.labels[k + 1] == 1 - out.labels[k]
        assert ("wonderful" in sentence) == (out.labels[k] == 1)   # the review's label, where the words agree
    assert augment(split, 3)[0].texts == out.texts                   # deterministic


def test_other_label_sets_are_left_alone():
    split = _split(("ham", "spam"))
    assert augment(split, 10) == (split, 0)
    assert augment(_split(), 0)[1] == 0

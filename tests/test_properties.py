"""Property tests (hypothesis): any text gets a valid prediction; a review's logits ignore its batch."""

import copy

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sentiment_cli.errors import UsageError
from sentiment_cli.data.labels import LABELS
from sentiment_cli.inference.predictor import Predictor

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# All of Unicode except lone surrogates (which no UTF-8 input can produce), biased towards
# the awkward parts: whitespace, controls, combining marks, RTL scripts, emoji.
texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=300) | st.text(
    st.sampled_from(list(" \t\n\r\x00\x1b\u200b\u200d\u202e\u0301\u3000") + list("שלוםمرحبا🎬👍🏽ﬁ") + list("ok")),
    max_size=50)
reviews = texts.filter(lambda s: s.strip() != "")


@pytest.fixture(scope="module")
def predictor(trained_checkpoint):
    return Predictor(trained_checkpoint, batch_size=4)


@SETTINGS
@given(text=texts)
def test_any_text_gets_a_label_and_probabilities_or_a_usage_error(predictor, text):
    if not text.strip():
        with pytest.raises(UsageError, match="review 1 is empty"):
            predictor.predict([text])
        return
    [p] = predictor.predict([text])
    assert p.label in LABELS
    values = list(p.probabilities.values())
    assert all(0.0 <= v <= 1.0 for v in values)
    assert sum(values) == pytest.approx(1.0, abs=1e-6)
    assert p.probability == max(values) and p.probabilities[p.label] == p.probability


@SETTINGS
@given(batch=st.lists(reviews, min_size=1, max_size=12), data=st.data())
def test_a_reviews_logits_do_not_depend_on_its_batch_or_position(predictor, batch, data):
    alone = np.concatenate([predictor.logits([t]) for t in batch])            # (n, 2), one review per forward pass
    order = data.draw(st.permutations(range(len(batch))))
    shuffled = predictor.logits([batch[i] for i in order])                 # other batch-mates, other positions
    np.testing.assert_allclose(shuffled, alone[list(order)], atol=1e-5, rtol=0)
    wide = copy.copy(predictor)                                            # same model, one big batch
    wide.backend = copy.copy(predictor.backend)
    wide.backend.batch_size = 512
    np.testing.assert_allclose(wide.logits(batch), alone, atol=1e-5, rtol=0)


@SETTINGS
@given(text=reviews, filler=st.lists(reviews, max_size=6), where=st.integers(0, 6))
def test_inserting_a_review_anywhere_keeps_its_prediction(predictor, text, filler, where):
    assume(where <= len(filler))
    [alone] = predictor.predict([text])
    mixed = predictor.predict(filler[:where] + [text] + filler[where:])
    assert mixed[where].label == alone.label
    assert mixed[where].probability == pytest.approx(alone.probability, abs=1e-5)

"""The NB-SVM peer: NB-LR over raw text's word 1-3-grams (Wang & Manning 2012), with scikit-learn.

Binarised n-gram counts ``x`` from scikit-learn's ``CountVectorizer``, scaled by
their naive-Bayes log-count ratios ``r``, then logistic regression on ``x * r``
(the NB-LR form of Wang & Manning's NBSVM, "Baselines and Bigrams: Simple, Good
Sentiment and Topic Classification", ACL 2012). The model's own n-gram score
(``sentiment_cli/ngram/``) fits the same way on its hashed token
n-grams and shares :func:`~sentiment_cli.ngram.forms.nb_lr`; this form reads
raw text, as a practitioner's NB-SVM does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sentiment_cli.ngram.forms import FIT_C, label_ids, nb_lr_columns

# Words, and each run of "!" / "?" as its own token: both carry sentiment ("!!!", "?!") that the
# scikit-learn default pattern (\b\w\w+\b) throws away, as it does one-letter words like "a" and "i".
# Apostrophes stay inside words ("don't", "isn't").
NGRAM_TOKEN_PATTERN = r"[\w']+|[!?]+"
MAX_N = 3
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)


def clean_text(text: str) -> str:
    """Lowercase, HTML line breaks to spaces (IMDB reviews are full of ``<br />``)."""
    return _BR.sub(" ", text).lower()


@dataclass
class NbSvm:
    """A fitted NB-LR model (:func:`fit_nbsvm`).

    Attributes:
        vectorizer: scikit-learn ``CountVectorizer`` (binary word 1-``max_n``-grams).
        weights: ``(n_features, k)`` float32, the log-count ratios folded in (``k`` = 1 with two
            classes, one column per class with more: one-vs-rest).
        intercepts: ``(k,)`` float64.
    """

    vectorizer: Any
    weights: np.ndarray
    intercepts: np.ndarray

    def logits(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), num_labels)`` float32 logits: ``[0, w·(x*r) + b]`` with two classes (their softmax
        is ``[P(label 0), P(label 1)]``), each class's one-vs-rest score with more."""
        score = self.vectorizer.transform(texts) @ self.weights + self.intercepts
        if score.shape[1] == 1:
            score = np.concatenate([np.zeros_like(score), score], 1)
        return score.astype(np.float32)

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts),)`` int64 label ids."""
        return self.logits(texts).argmax(1)


def fit_nbsvm(texts: Sequence[str], labels: Sequence[int], *, C: float = FIT_C, max_n: int = MAX_N,
              min_df: int = 1, num_labels: int = 2) -> NbSvm:
    """Fit NB-LR on labelled texts: binarised 1-``max_n``-gram counts, log-count ratios (alpha 1),
    L2 logistic regression (inverse strength ``C``) on the scaled counts; one-vs-rest with more than
    two classes (:func:`~sentiment_cli.ngram.forms.nb_lr_columns`). Deterministic.

    Raises:
        DataError: fewer than two classes among the labels, or an id of ``num_labels`` or more.
    """
    from sklearn.feature_extraction.text import CountVectorizer

    y = label_ids(labels, num_labels)
    vectorizer = CountVectorizer(ngram_range=(1, max_n), min_df=min_df, binary=True, preprocessor=clean_text,
                                 token_pattern=NGRAM_TOKEN_PATTERN, dtype=np.float32)
    weights, intercepts = nb_lr_columns(vectorizer.fit_transform(texts), y, num_labels, C)
    return NbSvm(vectorizer, weights, intercepts)

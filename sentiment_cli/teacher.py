"""An n-gram teacher for distillation: NB-LR over word 1-3-grams (Wang & Manning 2012).

The teacher is a linear model that learns in about a minute on a CPU and
whose errors differ from the encoder's: binarised word n-gram counts ``x``,
scaled by their naive-Bayes log-count ratios ``r``, then logistic
regression on ``x * r`` (the NB-LR form of Wang & Manning's NBSVM, "Baselines
and Bigrams: Simple, Good Sentiment and Topic Classification", ACL 2012).
Training (``[training] distill_reviews``) fits it on the training split and
lets the encoder learn its probabilities on unlabelled reviews as soft
targets (Hinton et al. 2015, "Distilling the Knowledge in a Neural Network").
``bench.peers`` scores the same model as the NB-SVM peer.

scikit-learn is imported inside :func:`fit_teacher`, so nothing else pays for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import DataError

# Words, and each run of "!" / "?" as its own token: both carry sentiment ("!!!", "?!") that the
# scikit-learn default pattern (\b\w\w+\b) throws away, as it does one-letter words like "a" and "i".
# Apostrophes stay inside words ("don't", "isn't").
NGRAM_TOKEN_PATTERN = r"[\w']+|[!?]+"
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)

# Chosen on IMDB's 10% block hold-out: 89.75% validation; C 0.03-1 within 0.1 point (docs/experiments-peers.md).
TEACHER_C = 0.1
TEACHER_MAX_N = 3


def clean_text(text: str) -> str:
    """Lowercase, HTML line breaks to spaces (IMDB reviews are full of ``<br />``)."""
    return _BR.sub(" ", text).lower()


def log_count_ratio(x, y: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """NB log-count ratio per feature, ``r = log((p / |p|_1) / (q / |q|_1))`` (Wang & Manning 2012, eq. 2).

    Args:
        x: binarised feature counts, a (n_reviews, n_features) scipy sparse matrix of 0/1.
        y: (n_reviews,) labels, 1 positive, 0 negative.
        alpha: additive smoothing: ``p = alpha + sum of x over positive reviews``, ``q`` likewise.

    Returns:
        (n_features,) float64 array: positive where a feature is more common in positive reviews.
    """
    y = np.asarray(y)
    p = alpha + np.asarray(x[y == 1].sum(axis=0)).ravel()
    q = alpha + np.asarray(x[y == 0].sum(axis=0)).ravel()
    return np.log((p / p.sum()) / (q / q.sum()))


@dataclass
class NgramTeacher:
    """A fitted NB-LR model (:func:`fit_teacher`).

    Attributes:
        vectorizer: scikit-learn ``CountVectorizer`` (binary word 1-``max_n``-grams).
        scale: ``(n_features, n_features)`` sparse diagonal of the log-count ratios.
        classifier: scikit-learn ``LogisticRegression`` on the scaled features.
    """

    vectorizer: Any
    scale: Any
    classifier: Any

    def logits(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), 2)`` float32 logits ``[0, w·(x*r) + b]``: their softmax is the teacher's
        ``[P(label 0), P(label 1)]``."""
        score = self.classifier.decision_function(self.vectorizer.transform(texts) @ self.scale)
        return np.stack([np.zeros_like(score), score], 1).astype(np.float32)

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts),)`` int64 label ids (0 or 1)."""
        return self.logits(texts).argmax(1)


def fit_teacher(texts: Sequence[str], labels: Sequence[int], *, C: float = TEACHER_C, max_n: int = TEACHER_MAX_N,
                min_df: int = 1) -> NgramTeacher:
    """Fit NB-LR on labelled texts: binarised 1-``max_n``-gram counts ``x``, log-count ratios ``r``
    (:func:`log_count_ratio`, alpha 1), L2 logistic regression (inverse strength ``C``) on ``x * r``.

    This is the NB-LR form of Wang & Manning's (2012) NBSVM-uni/bi: the ratios scale the
    features, the linear model is logistic rather than a hinge-loss SVM, and there is no
    interpolation with the mean weight. Deterministic (liblinear with a fixed ``random_state``).

    Args:
        texts: the training texts.
        labels: their label ids, 0 or 1.
        C: inverse L2 strength of the logistic regression.
        max_n: longest word n-gram.
        min_df: n-grams in fewer training texts than this are dropped.

    Raises:
        DataError: the labels are not exactly the two ids 0 and 1 (the log-count ratio compares two classes).
    """
    import scipy.sparse as sp
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    y = np.asarray(labels)
    if set(np.unique(y).tolist()) != {0, 1}:
        raise DataError(f"the n-gram teacher needs two classes (label ids 0 and 1); got ids {sorted(set(y.tolist()))}")
    vectorizer = CountVectorizer(ngram_range=(1, max_n), min_df=min_df, binary=True, preprocessor=clean_text,
                                 token_pattern=NGRAM_TOKEN_PATTERN, dtype=np.float32)
    x = vectorizer.fit_transform(texts)
    scale = sp.diags(log_count_ratio(x, y).astype(np.float32))
    # liblinear's dual solver: the fast one when features (millions of n-grams) far outnumber reviews
    classifier = LogisticRegression(C=C, solver="liblinear", dual=True, max_iter=1000, random_state=0)
    classifier.fit(x @ scale, y)
    return NgramTeacher(vectorizer, scale, classifier)

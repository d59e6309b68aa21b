"""The n-gram teacher: NB-LR over word 1-3-grams (Wang & Manning 2012).

A linear model that learns in seconds on a CPU and whose errors differ from
the encoder's: binarised n-gram counts ``x``, scaled by their naive-Bayes
log-count ratios ``r``, then logistic regression on ``x * r`` (the NB-LR form
of Wang & Manning's NBSVM, "Baselines and Bigrams: Simple, Good Sentiment and
Topic Classification", ACL 2012). Two forms share that fit:

- :func:`fit_ngram_score` reads the model's own token ids, its n-grams hashed
  as :func:`~sentiment_cli.model.classifier.ngram_buckets` hashes them. Training fits it
  on the training split; it becomes the model's n-gram score
  (``[model] ngram_buckets``, added to the logits) and the teacher of
  distillation (``[training] distill_reviews``: the encoder learns its
  probabilities on unlabelled reviews; Hinton et al. 2015, "Distilling the
  Knowledge in a Neural Network").
- :func:`fit_teacher` reads raw text with scikit-learn's ``CountVectorizer``:
  the benchmark's NB-SVM peer (``bench.peers``).

scikit-learn is imported inside the fitting functions, so nothing else pays for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DataError

# Words, and each run of "!" / "?" as its own token: both carry sentiment ("!!!", "?!") that the
# scikit-learn default pattern (\b\w\w+\b) throws away, as it does one-letter words like "a" and "i".
# Apostrophes stay inside words ("don't", "isn't").
NGRAM_TOKEN_PATTERN = r"[\w']+|[!?]+"
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)

# Chosen on IMDB's 10% block hold-out: 89.75% validation; C 0.03-1 within 0.1 point (docs/experiments-peers.md).
TEACHER_C = 0.1
TEACHER_MAX_N = 3
# Hashed n-gram buckets of a teacher used for distillation alone ([model] ngram_buckets 0): as many as
# ngram_buckets allows, so that few of a training split's millions of distinct n-grams share a bucket.
TEACHER_BUCKETS = 1 << 22


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


def _nb_lr(x, y: np.ndarray, C: float):
    """``(r, classifier)``: log-count ratios of ``x`` and the L2 logistic regression on ``x * r``."""
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    r = log_count_ratio(x, y).astype(np.float32)
    # liblinear's dual solver: the fast one when features (millions of n-grams) far outnumber reviews
    classifier = LogisticRegression(C=C, solver="liblinear", dual=True, max_iter=1000, random_state=0)
    classifier.fit(x @ sp.diags(r), y)
    return r, classifier


def _two_classes(labels: Sequence[int]) -> np.ndarray:
    y = np.asarray(labels)
    if set(np.unique(y).tolist()) != {0, 1}:
        raise DataError(f"the n-gram teacher needs two classes (label ids 0 and 1); got ids {sorted(set(y.tolist()))}")
    return y


def ngram_features(ids: Sequence[Sequence[int]], buckets: int, batch_size: int = 256):
    """Binarised hashed token 1-3-grams, exactly as :meth:`SentimentClassifier.ngram_token_logits` reads them.

    Args:
        ids: token ids per review (as the model gets them: encoded and truncated).
        buckets: ``[model] ngram_buckets``.
        batch_size: reviews hashed at a time (memory only; the result does not depend on it).

    Returns:
        ``(len(ids), buckets + 1)`` float32 scipy CSR matrix of 0/1; column 0 ("no n-gram") is empty.
    """
    import scipy.sparse as sp
    import torch

    from ..data.batching import collate
    from .classifier import ngram_buckets

    blocks = []
    for lo in range(0, len(ids), batch_size):
        input_ids, _ = collate(ids[lo:lo + batch_size])
        flat = ngram_buckets(input_ids, buckets).flatten(1)                     # (batch, seq_len * max_n)
        rows = torch.arange(flat.shape[0]).unsqueeze(1).expand_as(flat)
        keep = flat > 0
        x = sp.csr_matrix((np.ones(int(keep.sum()), np.float32), (rows[keep].numpy(), flat[keep].numpy())),
                          shape=(flat.shape[0], buckets + 1))
        x.sum_duplicates()
        x.data[:] = 1.0
        blocks.append(x)
    return sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, buckets + 1), dtype=np.float32)


def ngram_scores(ids: Sequence[Sequence[int]], weight: np.ndarray, bias: float, buckets: int,
                 batch_size: int = 256) -> np.ndarray:
    """``(len(ids),)`` float32 scores ``weight . x + bias`` of :func:`fit_ngram_score`'s model, computed a
    batch at a time (the n-gram matrix of 50,000 reviews is never held whole)."""
    out = [ngram_features(ids[lo:lo + batch_size], buckets) @ weight + bias for lo in range(0, len(ids), batch_size)]
    return np.concatenate(out).astype(np.float32) if out else np.zeros(0, np.float32)


def fit_ngram_score(ids: Sequence[Sequence[int]], labels: Sequence[int], buckets: int,
                    C: float = TEACHER_C) -> tuple[np.ndarray, float]:
    """Fit NB-LR (as :func:`fit_teacher`) on the model's own hashed token 1-3-grams (:func:`ngram_features`).

    The result is the model's n-gram score (``ngram_weight``, ``ngram_bias``): a review's score is
    ``weight . x + bias`` with ``x`` its binarised n-grams, the NB ratios folded into the weights.
    Deterministic.

    Args:
        ids: the training reviews' token ids.
        labels: their label ids, 0 or 1.
        buckets: ``[model] ngram_buckets``.
        C: inverse L2 strength of the logistic regression.

    Returns:
        ``(weight, bias)``: ``(buckets + 1,)`` float32 (row 0 is 0) and a float.

    Raises:
        DataError: the labels are not exactly the two ids 0 and 1.
    """
    y = _two_classes(labels)
    r, classifier = _nb_lr(ngram_features(ids, buckets), y, C)
    weight = (r * classifier.coef_[0]).astype(np.float32)
    weight[0] = 0.0   # "no n-gram" is never a feature
    return weight, float(classifier.intercept_[0])


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

    y = _two_classes(labels)
    vectorizer = CountVectorizer(ngram_range=(1, max_n), min_df=min_df, binary=True, preprocessor=clean_text,
                                 token_pattern=NGRAM_TOKEN_PATTERN, dtype=np.float32)
    r, classifier = _nb_lr(vectorizer.fit_transform(texts), y, C)
    return NgramTeacher(vectorizer, sp.diags(r), classifier)

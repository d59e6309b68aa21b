"""The benchmark's peers: strong, cheap text classifiers that the project's configs must beat.

* :func:`tfidf_logreg` - TF-IDF over word 1-2-grams + logistic regression (scikit-learn).
* :func:`nbsvm` - NB-SVM-style log-count ratios over word 1-3-grams + logistic regression
  (Wang & Manning 2012, "Baselines and Bigrams"; the NB-LR form: features scaled by the ratios, no interpolation).
* :func:`fasttext_bigrams` - fastText, supervised, with word bigrams (Joulin et al. 2017, "Bag of Tricks"),
  through the ``fasttext`` package.

Each peer takes ``(train_texts, train_labels, test_texts, test_labels)`` (labels as 0/1 integer
arrays), optionally a validation split, and returns the same dict: ``test_accuracy``,
``train_seconds`` (fit, vectorising included), ``train_examples_per_second``,
``eval_reviews_per_second`` (the median of ``repeats`` timed passes over the test texts,
vectorising included) and, when validation is given, ``validation_accuracy``.
Their hyperparameters were chosen on a 10% block hold-out of train, never on test
(docs/experiments-peers.md).
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from sentiment_cli.ngram.forms import FIT_C, log_count_ratio

from bench.nbsvm import MAX_N, NGRAM_TOKEN_PATTERN, fit_nbsvm
from bench.nbsvm import clean_text as _clean

__all__ = ["NGRAM_TOKEN_PATTERN", "log_count_ratio", "nbsvm", "tfidf_logreg", "fasttext_bigrams", "PEERS"]


def _score(fit: Callable[[], Callable[[Sequence[str]], np.ndarray]], n_train: int, test_texts, test_labels,
           val_texts, val_labels, repeats: int) -> dict:
    """Time ``fit()`` (which returns a ``predict(texts) -> labels`` function) and the test passes."""
    start = time.perf_counter()
    predict = fit()
    fit_seconds = time.perf_counter() - start
    seconds = []
    for _ in range(repeats):   # the same predictions each time; the speed is the median pass
        start = time.perf_counter()
        pred = predict(test_texts)
        seconds.append(time.perf_counter() - start)
    out = {"test_accuracy": float((np.asarray(pred) == np.asarray(test_labels)).mean()),
           "train_seconds": fit_seconds, "train_examples_per_second": n_train / fit_seconds,
           "eval_reviews_per_second": len(test_texts) / statistics.median(seconds)}
    if val_texts is not None:
        out["validation_accuracy"] = float((np.asarray(predict(val_texts)) == np.asarray(val_labels)).mean())
    return out


# ----------------------------------------------------------------------------- TF-IDF + LR

def tfidf_logreg(train_texts, train_labels, test_texts, test_labels, val_texts=None, val_labels=None,
                 repeats: int = 1) -> dict:
    """TF-IDF (sublinear tf) over word 1-2-grams + L2 logistic regression, C = 8 (:func:`tfidf_pipeline`).
    Returns the peer dict."""
    pipe = tfidf_pipeline()

    def fit():
        pipe.fit(train_texts, train_labels)
        return pipe.predict

    return _score(fit, len(train_texts), test_texts, test_labels, val_texts, val_labels, repeats)


def tfidf_pipeline():
    """The TF-IDF + LR peer, unfitted: TF-IDF (sublinear tf) over word 1-2-grams + L2 logistic regression, C = 8."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    return make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), min_df=2, max_df=0.95, sublinear_tf=True, strip_accents="unicode"),
        LogisticRegression(C=8.0, max_iter=2000),
    )


# ----------------------------------------------------------------------------- NB-SVM (NB-LR)

NBSVM_C = FIT_C  # chosen on the hold-out (docs/experiments-peers.md); the model's n-gram score's too
NBSVM_MIN_DF = 1


def nbsvm(train_texts, train_labels, test_texts, test_labels, val_texts=None, val_labels=None,
          repeats: int = 1, C: float = NBSVM_C, min_df: int = NBSVM_MIN_DF, max_n: int = MAX_N) -> dict:
    """NB-SVM-style classifier: :func:`bench.nbsvm.fit_nbsvm` (binarised word 1-``max_n``-gram
    counts scaled by their log-count ratios, L2 logistic regression with inverse strength ``C``) on
    the raw text: the same fit as the model's n-gram score, which reads the model's token ids
    instead. Returns the peer dict (module docstring).
    """
    def fit():
        return fit_nbsvm(train_texts, train_labels, C=C, max_n=max_n, min_df=min_df).predict

    return _score(fit, len(train_texts), test_texts, test_labels, val_texts, val_labels, repeats)


# ----------------------------------------------------------------------------- fastText

# chosen on the hold-out: 88.04% validation (dim 10 or 50, 5-20 epochs, lr 0.1 or 0.25 all gave 83.5-88.0%;
# docs/experiments-peers.md); 10 hidden units as in Joulin et al. (2017)'s sentiment runs
FASTTEXT_SETTINGS = {"wordNgrams": 2, "dim": 10, "epoch": 10, "lr": 0.25, "minCount": 1, "bucket": 2_000_000}


def fasttext_text(text: str) -> str:
    """One review as fastText reads it: one line, lowercased, punctuation split from words."""
    return " ".join(re.findall(r"[\w']+|[^\w\s]+", _clean(text)))


def fasttext_predictor(train_texts, train_labels, seed: int = 0, **settings):
    """Fit fastText's supervised classifier with word bigrams (Joulin et al. 2017), one thread
    (:func:`fasttext_model`); returns ``predict(texts) -> (len(texts),)`` int label ids (any number of classes)."""
    model = fasttext_model(train_texts, train_labels, seed, **settings)

    def predict(texts):
        # a list: fasttext 0.9.3's single-string path calls np.array(copy=False), an error on numpy 2
        labels, _ = model.predict([fasttext_text(t) for t in texts])
        return np.array([int(lab[0][len("__label__"):]) for lab in labels])
    return predict


def fasttext_model(train_texts, train_labels, seed: int = 0, **settings):
    """fastText's supervised classifier with word bigrams (Joulin et al. 2017), fitted with one thread on
    :func:`fasttext_text` of each text; its labels are ``__label__<id>``.

    ``settings`` override :data:`FASTTEXT_SETTINGS` (``fasttext.train_supervised`` keywords).
    One thread makes the run reproducible: with several, fastText's lock-free (Hogwild) updates
    race and the same seed gives different models.

    Call it once per process. fastText 0.9.3 (and the fasttext-numpy2 fork) can diverge to NaN when
    a process trains a model after an earlier one was freed - the same data and seed train fine in
    a fresh process, so it reads memory it did not initialise. ``python -m bench`` fits every peer
    in its own process.

    Raises:
        ImportError: the ``fasttext`` package is not installed (``pip install -e ".[bench]"``).
        RuntimeError: fastText's training diverged ("Encountered NaN").
    """
    import fasttext

    opts = {**FASTTEXT_SETTINGS, **settings, "thread": 1, "seed": seed, "verbose": 0}
    with tempfile.TemporaryDirectory(prefix="bench-fasttext-") as tmp:
        path = Path(tmp) / "train.txt"
        path.write_text("".join(f"__label__{int(y)} {fasttext_text(t)}\n"
                                for t, y in zip(train_texts, train_labels)), encoding="utf-8")
        try:
            model = fasttext.train_supervised(str(path), **opts)
        except RuntimeError as exc:
            raise RuntimeError(f"fastText diverged ({exc}); run it in a fresh process, or lower lr") from None
    return model


def fasttext_bigrams(train_texts, train_labels, test_texts, test_labels, val_texts=None, val_labels=None,
                     repeats: int = 1, seed: int = 0, **settings) -> dict:
    """fastText with word bigrams (:func:`fasttext_predictor`), timed and scored: the peer dict (module
    docstring). Call it once per process."""
    def fit():
        return fasttext_predictor(train_texts, train_labels, seed=seed, **settings)

    return _score(fit, len(train_texts), test_texts, test_labels, val_texts, val_labels, repeats)


PEERS = {"tfidf": tfidf_logreg, "nbsvm": nbsvm, "fasttext": fasttext_bigrams}


TFIDF_C_GRID = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


def tfidf_logreg_dev(train_texts, train_labels, dev_texts, dev_labels, test_texts, test_labels,
                     c_grid=TFIDF_C_GRID) -> dict:
    """TF-IDF 1-2-grams + logistic regression with the inverse regularisation strength ``C`` chosen on dev.

    For multi-class data (SST-5): one fit per ``C``, the best dev accuracy wins (ties: the smaller ``C``),
    and only that fit scores test. Returns the test accuracy and macro F1 (scikit-learn), the dev
    accuracy of every ``C``, the chosen ``C``, the fit seconds of the chosen model and its predict
    sentences/s on test.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.pipeline import make_pipeline

    def fit(c):
        pipe = make_pipeline(
            TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True, strip_accents="unicode"),
            LogisticRegression(C=c, max_iter=3000),
        )
        start = time.perf_counter()
        pipe.fit(train_texts, train_labels)
        return pipe, time.perf_counter() - start

    dev, fitted = {}, {}
    for c in c_grid:
        fitted[c] = fit(c)
        dev[c] = float((fitted[c][0].predict(dev_texts) == dev_labels).mean())
    best = max(c_grid, key=lambda c: (dev[c], -c))
    pipe, fit_seconds = fitted[best]   # the grid's own fit of the chosen C (lbfgs is deterministic)
    start = time.perf_counter()
    pred = pipe.predict(test_texts)
    seconds = time.perf_counter() - start
    return {"test_accuracy": float((pred == test_labels).mean()),
            "test_f1_macro": float(f1_score(test_labels, pred, average="macro")),
            "validation_accuracy": dev[best], "C": best, "dev_accuracy_by_C": {str(c): a for c, a in dev.items()},
            "train_seconds": fit_seconds, "eval_reviews_per_second": len(test_texts) / seconds if seconds else 0.0}

"""The n-gram peer: TF-IDF over word 1-2-grams + logistic regression (scikit-learn)."""

from __future__ import annotations

import statistics
import time


def tfidf_logreg(train_texts, train_labels, test_texts, test_labels, val_texts=None, val_labels=None,
                 repeats: int = 1) -> dict:
    """Fit on train, score test (and validation when given); returns accuracies, fit seconds and
    predict reviews/s (on test, the median of ``repeats`` passes)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    pipe = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), min_df=2, max_df=0.95, sublinear_tf=True, strip_accents="unicode"),
        LogisticRegression(C=8.0, max_iter=2000),
    )
    start = time.perf_counter()
    pipe.fit(train_texts, train_labels)
    fit_seconds = time.perf_counter() - start
    seconds = []
    for _ in range(repeats):   # the median of `repeats` timed passes
        start = time.perf_counter()
        pred = pipe.predict(test_texts)
        seconds.append(time.perf_counter() - start)
    predict_seconds = statistics.median(seconds)
    out = {"test_accuracy": float((pred == test_labels).mean()),
           "train_seconds": fit_seconds, "eval_reviews_per_second": len(test_texts) / predict_seconds}
    if val_texts is not None:
        out["validation_accuracy"] = float((pipe.predict(val_texts) == val_labels).mean())
    return out


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

    dev = {}
    for c in c_grid:
        pipe, _ = fit(c)
        dev[c] = float((pipe.predict(dev_texts) == dev_labels).mean())
    best = max(c_grid, key=lambda c: (dev[c], -c))
    pipe, fit_seconds = fit(best)
    start = time.perf_counter()
    pred = pipe.predict(test_texts)
    seconds = time.perf_counter() - start
    return {"test_accuracy": float((pred == test_labels).mean()),
            "test_f1_macro": float(f1_score(test_labels, pred, average="macro")),
            "validation_accuracy": dev[best], "C": best, "dev_accuracy_by_C": {str(c): a for c, a in dev.items()},
            "train_seconds": fit_seconds, "eval_reviews_per_second": len(test_texts) / seconds if seconds else 0.0}

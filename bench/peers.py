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

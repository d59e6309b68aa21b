"""Classification metrics over a split, and the whole ``sentiment eval`` use case (:func:`evaluate_checkpoint`).

Metrics follow the usual definitions for a binary task, per class (one class
taken as positive at a time) and macro-averaged: precision = TP / (TP + FP),
recall = TP / (TP + FN), F1 = 2PR / (P + R) (0 where undefined, as
scikit-learn's ``zero_division=0``). The confusion matrix is
``[[tn, fp], [fn, tp]]`` with rows = true label, columns = predicted label.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .data import LABELS
from .model import SentimentClassifier
from .predict import batched_logits


def classification_metrics(labels: Sequence[int], predictions: Sequence[int]) -> dict[str, Any]:
    """Accuracy, per-class and macro precision / recall / F1, and the confusion matrix.

    Args:
        labels: true labels, 0 (negative) or 1 (positive).
        predictions: predicted labels, same length.

    Returns:
        ``{"num_examples", "accuracy", "precision", "recall", "f1", "confusion_matrix"}``,
        where precision/recall/f1 are ``{"negative": .., "positive": .., "macro": ..}``.
    """
    y = np.asarray(labels, dtype=np.int64)
    p = np.asarray(predictions, dtype=np.int64)
    cm = np.zeros((2, 2), dtype=np.int64)
    np.add.at(cm, (y, p), 1)
    out: dict[str, Any] = {"num_examples": int(len(y)),
                           "accuracy": float((y == p).mean()) if len(y) else 0.0}
    per: dict[str, dict[str, float]] = {"precision": {}, "recall": {}, "f1": {}}
    for c, name in enumerate(LABELS):
        tp = cm[c, c]
        fp = cm[:, c].sum() - tp
        fn = cm[c, :].sum() - tp
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        per["precision"][name], per["recall"][name], per["f1"][name] = float(prec), float(rec), float(f1)
    for k, v in per.items():
        v["macro"] = float(np.mean([v[n] for n in LABELS]))
        out[k] = v
    out["confusion_matrix"] = cm.tolist()
    return out


def evaluate_ids(model: SentimentClassifier, ids: Sequence[Sequence[int]], labels: Sequence[int], *,
                 batch_size: int, device: torch.device, bf16: bool = False,
                 on_batch: Callable[[int], None] | None = None, return_logits: bool = False) -> dict[str, Any]:
    """Metrics (see :func:`classification_metrics`) plus ``loss`` and ``examples_per_second``.

    With ``return_logits``, also ``"logits"``: the ``(len(ids), 2)`` float32
    CPU tensor the metrics were computed from (for :func:`confident_errors`).
    """
    start = time.perf_counter()
    logits = batched_logits(model, ids, batch_size=batch_size, device=device, bf16=bf16, on_batch=on_batch)
    seconds = time.perf_counter() - start
    target = torch.as_tensor(list(labels), dtype=torch.long)
    metrics = classification_metrics(target.tolist(), logits.argmax(1).tolist())
    metrics["loss"] = float(torch.nn.functional.cross_entropy(logits, target)) if len(target) else 0.0
    metrics["examples_per_second"] = len(ids) / seconds if seconds > 0 else 0.0
    metrics["seconds"] = seconds
    if return_logits:
        metrics["logits"] = logits
    return metrics


def confident_errors(logits: torch.Tensor, labels: Sequence[int], n: int) -> list[dict[str, Any]]:
    """The ``n`` misclassified examples with the highest probability on the wrong label.

    Args:
        logits: ``(num_examples, 2)`` logits.
        labels: true labels (0 negative, 1 positive), same length.
        n: how many to return (fewer if there are fewer mistakes).

    Returns:
        Most confident first: ``{"index", "label", "probability", "true_label"}``
        per example, where ``index`` is its position in the split, ``label``
        the predicted label and ``probability`` the softmax probability given to it.
    """
    if n <= 0 or len(labels) == 0:
        return []
    probs = torch.softmax(logits.float(), dim=-1)                      # (num_examples, 2)
    confidence, predicted = probs.max(dim=1)                           # (num_examples,) each
    target = torch.as_tensor(list(labels), dtype=torch.long)
    wrong = torch.nonzero(predicted != target).flatten()
    order = wrong[torch.argsort(confidence[wrong], descending=True, stable=True)][:n]
    return [{"index": int(i), "label": LABELS[int(predicted[i])], "probability": float(confidence[i]),
             "true_label": LABELS[int(target[i])]} for i in order]

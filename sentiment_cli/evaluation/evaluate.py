"""Classification metrics over a split, and the whole ``sentiment eval`` use case (:func:`evaluate_checkpoint`).

For N classes (one at a time taken as positive): precision = TP / (TP + FP),
recall = TP / (TP + FN), F1 = 2PR / (P + R), each 0 where undefined (as
scikit-learn's ``zero_division=0``); ``macro`` is their mean over the classes,
``weighted`` their mean weighted by each class's true examples (scikit-learn's
``average="weighted"``). The confusion matrix is N x N, rows = true label,
columns = predicted label, in label-id order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import multilabel
from .calibration import calibration_report
from ..inference.multilabel import binary_nll, decide, fit_thresholds, sigmoid
from ..inference.predictor import Predictor
from ..card.readme import write_card
from ..checkpoint import record_eval
from ..data.splits import Split, is_own_data, load_split, scoring_spec
from ..data.labels import LABELS
from ..model.classifier import SentimentClassifier
from ..inference.torch_backend import batched_logits


def classification_metrics(labels: Sequence[int], predictions: Sequence[int],
                           label_names: Sequence[str] = LABELS) -> dict[str, Any]:
    """Accuracy; per-class, macro and weighted precision / recall / F1; support; the confusion matrix.

    Args:
        labels: true label ids, each in ``[0, len(label_names))``.
        predictions: predicted label ids, same length.
        label_names: the class names, by id.

    Returns:
        ``{"num_examples", "accuracy", "precision", "recall", "f1", "support", "confusion_matrix"}``,
        where precision/recall/f1 are ``{<name>: .., ..., "macro": .., "weighted": ..}``, support is
        ``{<name>: true examples}`` and the confusion matrix is ``len(label_names)`` square lists.
    """
    n = len(label_names)
    y = np.asarray(labels, dtype=np.int64)
    p = np.asarray(predictions, dtype=np.int64)
    cm = np.zeros((n, n), dtype=np.int64)
    np.add.at(cm, (y, p), 1)
    support = cm.sum(axis=1)
    out: dict[str, Any] = {"num_examples": int(len(y)),
                           "accuracy": float((y == p).mean()) if len(y) else 0.0}
    per: dict[str, dict[str, float]] = {"precision": {}, "recall": {}, "f1": {}}
    for c, name in enumerate(label_names):
        tp = cm[c, c]
        fp = cm[:, c].sum() - tp
        fn = cm[c, :].sum() - tp
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        per["precision"][name], per["recall"][name], per["f1"][name] = float(prec), float(rec), float(f1)
    total = int(support.sum())
    for k, v in per.items():
        values = [v[name] for name in label_names]
        v["macro"] = float(np.mean(values))
        v["weighted"] = float(np.dot(values, support) / total) if total else 0.0
        out[k] = v
    out["support"] = {name: int(s) for name, s in zip(label_names, support)}
    out["confusion_matrix"] = cm.tolist()
    return out


def evaluate_ids(model: SentimentClassifier, ids: Sequence[Sequence[int]], labels: Sequence[int],
                 label_names: Sequence[str] = LABELS, *, batch_size: int, device: torch.device, bf16: bool = False,
                 on_batch: Callable[[int], None] | None = None, return_logits: bool = False) -> dict[str, Any]:
    """Metrics (see :func:`logits_metrics`) plus ``examples_per_second`` and ``seconds``: the model under
    training scored on validation (:func:`~sentiment_cli.inference.torch_backend.batched_logits`).

    ``label_names`` names the model's ``num_labels`` outputs. With ``return_logits``, also
    ``"logits"``: the ``(len(ids), num_labels)`` float32 CPU tensor the metrics were computed from.
    """
    start = time.perf_counter()
    logits = batched_logits(model, ids, batch_size=batch_size, device=device, bf16=bf16, on_batch=on_batch)
    return _timed(logits_metrics(logits, labels, label_names), logits, time.perf_counter() - start, return_logits)


def _timed(metrics: dict[str, Any], logits: torch.Tensor, seconds: float, return_logits: bool) -> dict[str, Any]:
    """``metrics`` with the speed of scoring ``len(logits)`` examples in ``seconds`` (and the logits if asked)."""
    metrics["examples_per_second"] = len(logits) / seconds if seconds > 0 else 0.0
    metrics["seconds"] = seconds
    if return_logits:
        metrics["logits"] = logits
    return metrics


def logits_metrics(logits: torch.Tensor, labels: Sequence[int], label_names: Sequence[str]) -> dict[str, Any]:
    """The metrics of ``(n, num_labels)`` float32 logits against ``labels``: :func:`classification_metrics` of
    their argmax with ``loss`` (mean cross-entropy); with ``(n, num_labels)`` 0/1 labels (several per text)
    :func:`validation_metrics`."""
    if np.ndim(labels) == 2:
        return validation_metrics(logits.numpy(), np.asarray(labels), label_names)
    target = torch.as_tensor(list(labels), dtype=torch.long)
    metrics = classification_metrics(target.tolist(), logits.argmax(1).tolist(), label_names)
    metrics["loss"] = float(torch.nn.functional.cross_entropy(logits, target)) if len(target) else 0.0
    return metrics


def validation_metrics(logits: np.ndarray, y: np.ndarray, label_names: Sequence[str]) -> dict[str, Any]:
    """A multi-label model's figures on validation during training (``y``: ``(n, num_labels)`` 0/1): ``loss``
    (mean binary cross-entropy), ``accuracy`` (subset accuracy) and ``f1`` ``{"macro", "micro"}`` at the
    thresholds that suit each label best on these same rows (what the post-fit thresholds will reach; the
    epoch with the best macro-F1 is kept), with :func:`~.multilabel.multilabel_metrics`' other figures."""
    probabilities = sigmoid(logits)
    thresholds, _, _ = fit_thresholds(probabilities, y)
    m = multilabel.multilabel_metrics(y, decide(probabilities, thresholds, 0), probabilities, label_names)
    return {**m, "num_examples": len(y), "accuracy": m["subset_accuracy"],
            "f1": {"macro": m["macro"]["f1"], "micro": m["micro"]["f1"]},
            "loss": binary_nll(logits, y)}


def confident_errors(probabilities: np.ndarray, labels: Sequence[int], n: int,
                     label_names: Sequence[str] = LABELS) -> list[dict[str, Any]]:
    """The ``n`` misclassified examples with the highest probability on the wrong label.

    Args:
        probabilities: ``(num_examples, num_labels)``, as ``predict`` gives them (the predictor's postprocess:
            :meth:`~sentiment_cli.inference.predictor.Predictor.postprocess`, the softmax after the temperature).
        labels: true label ids, same length.
        n: how many to return (fewer if there are fewer mistakes).
        label_names: the class names, by id.

    Returns:
        Most confident first (ties in split order): ``{"index", "label", "probability", "true_label"}``
        per example, where ``index`` is its position in the split, ``label``
        the predicted label and ``probability`` the probability given to it.
    """
    if n <= 0 or len(labels) == 0:
        return []
    probs = np.asarray(probabilities)
    predicted = probs.argmax(axis=1)                                   # (num_examples,)
    confidence = probs[np.arange(len(probs)), predicted]               # (num_examples,)
    target = np.asarray(list(labels), dtype=np.int64)
    wrong = np.flatnonzero(predicted != target)
    order = wrong[np.argsort(-confidence[wrong], kind="stable")][:n]
    return [{"index": int(i), "label": label_names[int(predicted[i])], "probability": float(confidence[i]),
             "true_label": label_names[int(target[i])]} for i in order]


# ----------------------------------------------------------------------------- the eval use case

class EvalCallbacks:
    """Hooks for progress reporting during :func:`evaluate_checkpoint`; the default does nothing."""

    def on_stage(self, text: str) -> None:
        """A preparation stage begins (loading and tokenizing the split)."""

    def on_start(self, num_examples: int) -> None:
        """Scoring ``num_examples`` reviews starts."""

    def on_batch(self, examples: int) -> None:
        """A batch of ``examples`` reviews was scored."""

    def on_note(self, text: str) -> None:
        """Something the user should know that does not stop the evaluation (the result could not be kept)."""


# What `sentiment eval --split test` of the single file a checkpoint was trained on says to do instead.
_SINGLE_FILE_HINT = "score other data with --data FILE (all of it), or use --split validation"


def evaluate_checkpoint(directory: str | Path, split: str = "test", *, data: str | None = None,
                        text_column: str | None = None, label_column: str | None = None,
                        label_columns: tuple[str, ...] | None = None, batch_size: int | None = None,
                        device: str | torch.device = "cpu", errors: int = 0,
                        flags: Mapping[str, dict[str, Any]] | None = None, record: bool = True,
                        callbacks: EvalCallbacks | None = None) -> dict[str, Any]:
    """Score a checkpoint on a split: the ``sentiment eval`` use case.

    Loads the checkpoint and the split (drawn as in training, from the checkpoint's ``[data]`` settings and
    seed), computes the metrics, and with ``record`` keeps the result in the folder (``eval_<split>.json``; other
    ``data`` in a record of its own that leaves that headline result alone, see
    :func:`~sentiment_cli.checkpoint.record_eval`) and rewrites the model card to list it. A folder that cannot
    be written loses only that record (``callbacks.on_note`` says so); the result is still returned.

    Args:
        directory: the checkpoint folder.
        split: ``train``, ``validation`` or ``test``.
        data: dataset to score (Hub id, folder or file; a file's ``test`` is all of it); default: the one the
            checkpoint was trained on.
        text_column, label_column: its columns; default: the checkpoint's ``[data]`` settings for its own data,
            else found by name (see :func:`~sentiment_cli.data.columns.resolve_column`).
        label_columns: a multi-label model's data as one 0/1 column per label (``--label-columns``).
        batch_size: reviews per forward pass; default: the checkpoint's ``[training] eval_batch_size``.
        device: where to run the model.
        errors: also list the ``errors`` most confidently wrong reviews (:func:`confident_errors`), each with
            its ``text``.
        flags: the rows a ``sentiment audit`` flagged as likely mislabelled, by text
            (:func:`~sentiment_cli.audit.rows.read_flags`): each listed mistake gets ``"audit"``, the flag of its
            text (``{"rank", "given", "suggested", "quality"}``) or ``None``.
        record: keep the result in the checkpoint folder and refresh its model card.
        callbacks: progress hooks.

    Returns:
        The ``eval --json`` object (see DESIGN.md's output contract): ``split``, ``num_examples``, ``accuracy``,
        ``labels`` (the class names by id), ``precision`` / ``recall`` / ``f1`` (per label, ``macro`` and
        ``weighted``), ``support`` (true examples per label), ``confusion_matrix`` (N x N, rows true, in
        ``labels`` order), ``loss``, ``examples_per_second``, ``checkpoint``; the expected calibration error
        (15 bins) after and before the checkpoint's temperature, ``ece`` and ``ece_uncalibrated``, the
        ``temperature`` and both diagrams' bins, ``reliability``
        (:func:`~sentiment_cli.evaluation.calibration.calibration_report`); and ``errors`` when asked for.

    Raises:
        CheckpointError: the checkpoint is missing or unusable.
        UsageError: unknown split, ``validation`` of a run trained without a hold-out, or ``test``
            of a run trained on a single file (it has none), or a named column is missing.
        DataError: the dataset cannot be loaded or is unusable, or holds a label the model never saw.
    """
    cb = callbacks or EvalCallbacks()
    predictor, s, source = _load(directory, split, data, text_column, label_column, device, batch_size, cb,
                                 label_columns)
    result, logits = _score(predictor, s, str(directory), cb)
    if record:
        _keep(directory, result, source, is_own_data(predictor.config, data), cb)
    if errors:
        result["errors"] = _listed_errors(predictor, s, logits, errors, flags)
    return result


def _load(directory: str | Path, split: str, data: str | None, text_column: str | None,
          label_column: str | None, device: str | torch.device, batch_size: int | None, cb: EvalCallbacks,
          label_columns: tuple[str, ...] | None = None) -> tuple[Predictor, Split, str]:
    """The model and the split to score: ``(predictor, split, the data's source)``; a multi-label model's
    data is read as several labels per text, whatever the file looks like; raises as :func:`evaluate_checkpoint`."""
    predictor = Predictor(directory, device, batch_size=batch_size)
    multi = predictor.multi_label
    spec = scoring_spec(predictor.config, split, data, text_column, label_column, single_file_hint=_SINGLE_FILE_HINT,
                        label_columns=label_columns, multi_label=multi or None)
    cb.on_stage(f"loading the {split} split")
    return predictor, load_split(spec, split, label_names=predictor.labels), spec.source


def _score(predictor: Predictor, s: Split, checkpoint: str, cb: EvalCallbacks) -> tuple[dict[str, Any], np.ndarray]:
    """Score a loaded split through the predictor (preprocess -> forward; the split's texts were checked when
    read): ``(the eval --json object without errors, the (n, num_labels) float32 logits)``."""
    ids = predictor.preprocess(s.texts, check=False)
    cb.on_start(len(ids))
    start = time.perf_counter()
    logits = predictor.forward(ids, on_batch=cb.on_batch)[0]
    seconds = time.perf_counter() - start
    if predictor.multi_label:
        return _score_label_sets(predictor, s, logits, seconds, checkpoint), logits
    labels = predictor.labels
    m = _timed(logits_metrics(torch.from_numpy(logits), s.labels, labels), logits, seconds, False)
    result = {"split": s.name, "num_examples": m["num_examples"], "accuracy": m["accuracy"],
              "labels": list(labels), "precision": m["precision"], "recall": m["recall"], "f1": m["f1"],
              "support": m["support"], "confusion_matrix": m["confusion_matrix"], "loss": m["loss"],
              "examples_per_second": m["examples_per_second"], "checkpoint": checkpoint}
    if len(ids):
        calibrated = predictor.postprocess(logits, np.float64)
        result.update(calibration_report(logits, s.labels, calibrated, predictor.temperature))
    return result, logits


def _score_label_sets(predictor: Predictor, s: Split, logits: np.ndarray, seconds: float,
                      checkpoint: str) -> dict[str, Any]:
    """:func:`_score`'s object for a multi-label model: its decision rule (the temperatures and thresholds fitted
    on validation, the predictor's postprocess and decision) applied to the split's ``(n, num_labels)`` logits,
    and :func:`~.multilabel.multilabel_metrics`' figures, with ``labels``, ``thresholds`` (by label), ``loss``
    (mean binary cross-entropy), ``ece_uncalibrated``, the speed and ``checkpoint``."""
    names, rule = predictor.labels, predictor.decision
    y, z = np.asarray(s.labels), logits.astype(np.float64)
    probabilities = predictor.postprocess(logits, np.float64)
    m = multilabel.multilabel_metrics(y, predictor.decide(probabilities), probabilities, names)
    n = len(logits)
    return {"split": s.name, "num_examples": n, **m, "labels": list(names),
            "thresholds": dict(zip(names, rule.thresholds)), "min_labels": rule.min_labels,
            "loss": binary_nll(z, y),
            "ece_uncalibrated": multilabel.mean_ece(sigmoid(z), y),
            "examples_per_second": n / seconds if seconds > 0 else 0.0, "checkpoint": checkpoint}


def _label_set_errors(predictor: Predictor, s: Split, logits: np.ndarray, n: int) -> list[dict[str, Any]]:
    """A multi-label model's ``n`` most confident mistakes: texts whose label set is wrong, ranked by the
    probability of their most confident wrong decision (a label given with probability p, or missed with 1 - p).
    Each: ``{"index", "labels", "true_labels", "probability", "wrong"}`` (``wrong``: the labels decided wrongly)."""
    p = predictor.postprocess(logits, np.float64)
    chosen, y = predictor.decide(p), np.asarray(s.labels).astype(bool)
    confidence = np.where(chosen != y, np.where(chosen, p, 1 - p), 0.0).max(axis=1)     # (n,)
    wrong = np.flatnonzero(confidence > 0)
    order = wrong[np.argsort(-confidence[wrong], kind="stable")][:max(0, n)]
    names = predictor.labels
    return [{"index": int(i), "labels": [names[j] for j in np.flatnonzero(chosen[i])],
             "true_labels": [names[j] for j in np.flatnonzero(y[i])], "probability": float(confidence[i]),
             "wrong": [names[j] for j in np.flatnonzero(chosen[i] != y[i])]} for i in order]


def _listed_errors(predictor: Predictor, s: Split, logits: np.ndarray, n: int,
                   flags: Mapping[str, dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The ``n`` most confident mistakes (``logits``: ``(len(s.texts), num_labels)``), each with its ``text``,
    and with ``flags``, its ``audit`` flag or ``None``; the probabilities are ``predict``'s (the predictor's
    postprocess)."""
    mistakes = _label_set_errors(predictor, s, logits, n) if predictor.multi_label else \
        confident_errors(predictor.postprocess(logits), s.labels, n, predictor.labels)
    listed = [{**e, "text": s.texts[e["index"]]} for e in mistakes]
    if flags is not None:
        for e in listed:
            e["audit"] = flags.get(e["text"])
    return listed


def _keep(directory: str | Path, result: dict[str, Any], source: str, own: bool, cb: EvalCallbacks) -> None:
    """Record the result in the checkpoint folder (``own``: the run's own data, the card's headline for the split;
    else a record of its own beside it) and refresh its card; a read-only folder only loses that."""
    try:   # for `sentiment info` and the card
        record_eval(directory, result, source, own)
        write_card(directory)   # the card lists the new result
    except OSError as exc:
        cb.on_note(f"result not recorded in {directory} ({exc.strerror or exc})")

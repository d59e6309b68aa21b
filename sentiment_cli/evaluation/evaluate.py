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
from ..inference.multilabel import Decision, decide, sigmoid
from ..card.readme import write_card
from ..checkpoint import Checkpoint, load_checkpoint, record_eval
from ..data.splits import Split, is_own_data, load_split, scoring_spec
from ..data.labels import LABELS
from ..model.classifier import SentimentClassifier
from ..inference.torch_backend import batched_logits
from ..data.tokenizer import encode_texts


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
    """Metrics (see :func:`classification_metrics`) plus ``loss`` and ``examples_per_second``.

    ``label_names`` names the model's ``num_labels`` outputs. With ``return_logits``, also
    ``"logits"``: the ``(len(ids), num_labels)`` float32 CPU tensor the metrics were computed
    from (for :func:`confident_errors`).
    """
    start = time.perf_counter()
    logits = batched_logits(model, ids, batch_size=batch_size, device=device, bf16=bf16, on_batch=on_batch)
    seconds = time.perf_counter() - start
    if np.ndim(labels) == 2:
        metrics = validation_metrics(logits.numpy(), np.asarray(labels), label_names)
    else:
        target = torch.as_tensor(list(labels), dtype=torch.long)
        metrics = classification_metrics(target.tolist(), logits.argmax(1).tolist(), label_names)
        metrics["loss"] = float(torch.nn.functional.cross_entropy(logits, target)) if len(target) else 0.0
    metrics["examples_per_second"] = len(ids) / seconds if seconds > 0 else 0.0
    metrics["seconds"] = seconds
    if return_logits:
        metrics["logits"] = logits
    return metrics


def validation_metrics(logits: np.ndarray, y: np.ndarray, label_names: Sequence[str]) -> dict[str, Any]:
    """A multi-label model's figures on validation during training (``y``: ``(n, num_labels)`` 0/1): ``loss``
    (mean binary cross-entropy), ``accuracy`` (subset accuracy) and ``f1`` ``{"macro", "micro"}`` at the
    thresholds that suit each label best on these same rows (what the post-fit thresholds will reach; the
    epoch with the best macro-F1 is kept), with :func:`~.multilabel.multilabel_metrics`' other figures."""
    probabilities = sigmoid(logits)
    thresholds, _, _ = multilabel.fit_thresholds(probabilities, y)
    m = multilabel.multilabel_metrics(y, decide(probabilities, thresholds, 0), probabilities, label_names)
    return {**m, "num_examples": len(y), "accuracy": m["subset_accuracy"],
            "f1": {"macro": m["macro"]["f1"], "micro": m["micro"]["f1"]},
            "loss": multilabel.binary_nll(logits, y)}


def confident_errors(logits: torch.Tensor, labels: Sequence[int], n: int,
                     label_names: Sequence[str] = LABELS) -> list[dict[str, Any]]:
    """The ``n`` misclassified examples with the highest probability on the wrong label.

    Args:
        logits: ``(num_examples, num_labels)`` logits.
        labels: true label ids, same length.
        n: how many to return (fewer if there are fewer mistakes).
        label_names: the class names, by id.

    Returns:
        Most confident first: ``{"index", "label", "probability", "true_label"}``
        per example, where ``index`` is its position in the split, ``label``
        the predicted label and ``probability`` the softmax probability given to it.
    """
    if n <= 0 or len(labels) == 0:
        return []
    probs = torch.softmax(logits.float(), dim=-1)                      # (num_examples, num_labels)
    confidence, predicted = probs.max(dim=1)                           # (num_examples,) each
    target = torch.as_tensor(list(labels), dtype=torch.long)
    wrong = torch.nonzero(predicted != target).flatten()
    order = wrong[torch.argsort(confidence[wrong], descending=True, stable=True)][:n]
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
    cb, device = callbacks or EvalCallbacks(), torch.device(device)
    ckpt, s, source = _load(directory, split, data, text_column, label_column, device, cb,   # preprocess
                            label_columns)
    result, logits = _score(ckpt, s, str(directory), device, batch_size, cb)                 # compute
    if record:
        _keep(directory, result, source, is_own_data(ckpt.config, data), cb)
    if errors:
        result["errors"] = _listed_errors(ckpt, s, logits, errors, flags)
    return result


def _load(directory: str | Path, split: str, data: str | None, text_column: str | None,
          label_column: str | None, device: torch.device, cb: EvalCallbacks,
          label_columns: tuple[str, ...] | None = None) -> tuple[Checkpoint, Split, str]:
    """The checkpoint and the split to score: ``(checkpoint, split, the data's source)``; a multi-label model's
    data is read as several labels per text, whatever the file looks like; raises as :func:`evaluate_checkpoint`."""
    ckpt = load_checkpoint(directory, device)
    spec = scoring_spec(ckpt.config, split, data, text_column, label_column, single_file_hint=_SINGLE_FILE_HINT,
                        label_columns=label_columns, multi_label=ckpt.multi_label or None)
    cb.on_stage(f"loading the {split} split")
    return ckpt, load_split(spec, split, label_names=ckpt.labels), spec.source


def _score(ckpt, s: Split, checkpoint: str, device: torch.device, batch_size: int | None,
           cb: EvalCallbacks) -> tuple[dict[str, Any], torch.Tensor]:
    """Tokenize and score a loaded split: ``(the eval --json object without errors, the logits)``."""
    cfg = ckpt.config
    ids = encode_texts(ckpt.tokenizer, s.texts, cfg.data)
    cb.on_start(len(ids))
    if ckpt.multi_label:
        return _score_label_sets(ckpt, s, ids, checkpoint, device, batch_size, cb)
    m = evaluate_ids(ckpt.model, ids, s.labels, ckpt.labels, device=device, bf16=cfg.training.autocast_bf16,
                     batch_size=cfg.training.eval_batch_size if batch_size is None else batch_size,
                     on_batch=cb.on_batch, return_logits=True)
    result = {"split": s.name, "num_examples": m["num_examples"], "accuracy": m["accuracy"],
              "labels": list(ckpt.labels), "precision": m["precision"], "recall": m["recall"], "f1": m["f1"],
              "support": m["support"], "confusion_matrix": m["confusion_matrix"], "loss": m["loss"],
              "examples_per_second": m["examples_per_second"], "checkpoint": checkpoint}
    if len(ids):
        result.update(calibration_report(m["logits"].numpy(), s.labels, ckpt.temperature))
    return result, m["logits"]


def _score_label_sets(ckpt: Checkpoint, s: Split, ids: list[list[int]], checkpoint: str, device: torch.device,
                      batch_size: int | None, cb: EvalCallbacks) -> tuple[dict[str, Any], torch.Tensor]:
    """:func:`_score` of a multi-label model: its decision rule (the temperatures and thresholds fitted on
    validation) applied to the split, and :func:`~.multilabel.multilabel_metrics`' figures, with ``labels``,
    ``thresholds`` (by label), ``loss`` (mean binary cross-entropy), ``ece_uncalibrated``, the speed and
    ``checkpoint``."""
    cfg, rule = ckpt.config, Decision.from_json(ckpt.decision, len(ckpt.labels))
    start = time.perf_counter()
    logits = batched_logits(ckpt.model, ids, batch_size=cfg.training.eval_batch_size if batch_size is None
                            else batch_size, device=device, bf16=cfg.training.autocast_bf16, on_batch=cb.on_batch)
    seconds = time.perf_counter() - start
    y, z = np.asarray(s.labels), logits.numpy().astype(np.float64)
    probabilities = rule.probabilities(z)
    m = multilabel.multilabel_metrics(y, rule.labels(probabilities), probabilities, ckpt.labels)
    result = {"split": s.name, "num_examples": len(ids), **m, "labels": list(ckpt.labels),
              "thresholds": dict(zip(ckpt.labels, rule.thresholds)), "min_labels": rule.min_labels,
              "loss": multilabel.binary_nll(z, y),
              "ece_uncalibrated": multilabel.mean_ece(sigmoid(z), y),
              "examples_per_second": len(ids) / seconds if seconds > 0 else 0.0, "checkpoint": checkpoint}
    return result, logits


def _label_set_errors(ckpt: Checkpoint, s: Split, logits: torch.Tensor, n: int) -> list[dict[str, Any]]:
    """A multi-label model's ``n`` most confident mistakes: texts whose label set is wrong, ranked by the
    probability of their most confident wrong decision (a label given with probability p, or missed with 1 - p).
    Each: ``{"index", "labels", "true_labels", "probability", "wrong"}`` (``wrong``: the labels decided wrongly)."""
    rule = Decision.from_json(ckpt.decision, len(ckpt.labels))
    p = rule.probabilities(logits.numpy().astype(np.float64))
    chosen, y = rule.labels(p), np.asarray(s.labels).astype(bool)
    confidence = np.where(chosen != y, np.where(chosen, p, 1 - p), 0.0).max(axis=1)     # (n,)
    wrong = np.flatnonzero(confidence > 0)
    order = wrong[np.argsort(-confidence[wrong], kind="stable")][:max(0, n)]
    names = ckpt.labels
    return [{"index": int(i), "labels": [names[j] for j in np.flatnonzero(chosen[i])],
             "true_labels": [names[j] for j in np.flatnonzero(y[i])], "probability": float(confidence[i]),
             "wrong": [names[j] for j in np.flatnonzero(chosen[i] != y[i])]} for i in order]


def _listed_errors(ckpt: Checkpoint, s: Split, logits: torch.Tensor, n: int,
                   flags: Mapping[str, dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The ``n`` most confident mistakes (``logits``: ``(len(s.texts), num_labels)``), each with its ``text``,
    and with ``flags``, its ``audit`` flag or ``None``."""
    mistakes = _label_set_errors(ckpt, s, logits, n) if ckpt.multi_label else \
        confident_errors(logits / ckpt.temperature, s.labels, n, ckpt.labels)   # as predict's
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

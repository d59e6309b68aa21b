"""The model card's facts: everything known about a checkpoint, as one JSON-ready dict (``sentiment info --json``).

:func:`model_card` gathers what the folder holds: its config and labels, the parameter counts (from the config,
on the meta device: no weights read), training's ``metrics.json``, the ``sentiment eval`` and
``sentiment export`` records kept for the weights now there (:func:`~sentiment_cli.checkpoint.read_evals`,
:func:`~sentiment_cli.checkpoint.read_exports`), and the temperature. ``card/text.py`` and ``card/readme.py``
render it; this module reads, and never prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..checkpoint import (STATE_DIR, read_checkpoint_config, read_compression, read_evals, read_exports, read_metrics,
                          read_temperature, weights_digest)
from ..model.classifier import SentimentClassifier
from ..model.skeleton import no_init
from ..ngram.report import fitted_form, model_phrase

CURVES_FILE = "curves.png"
CARD_FILE = "README.md"
UNKNOWN = "unknown"


def model_card(directory: str | Path) -> dict[str, Any]:
    """Everything known about a checkpoint, as one JSON-ready dict (``sentiment info --json``).

    Keys: ``checkpoint``, ``name``, ``created``, ``labels`` (class names by id), ``class_balance``
    (examples per class, by split: ``train`` and ``validation`` from training, other splits from
    ``sentiment eval``; empty for checkpoints that predate it), ``config`` (the
    whole run configuration), ``vocab_size``, ``parameters`` (``embedding``,
    ``non_embedding``, ``total``, from ``model.num_parameters()``), ``ngram_score`` (what the model adds
    to its head's logits, in a phrase, e.g. its n-gram score; ``None`` for nothing), ``data``
    (``source``, ``train_examples``, ``validation_examples``, ``fingerprint``:
    SHA-256 of the training split, ``"unknown"`` for checkpoints that predate
    it), ``training`` (epochs, best epoch, device, wall time...), ``metrics``
    by split (``validation`` from the training history; other splits from
    ``sentiment eval``), ``calibration`` (``temperature``, ``fitted``, ``ece`` by
    split: after and before the temperature), ``exports`` (``sentiment export`` records by name: parity
    with PyTorch, sizes, int8 accuracy), ``compression`` (what was pruned and quantized, or ``None``),
    ``versions``, ``files`` (``curves``: the picture's file name, or ``None``), ``data_rules`` (the default's settings chosen from the data: ``key``,
    ``value``, ``reason``; empty for other runs), ``search`` (the default's search on the validation split:
    budget, metric, each candidate, the choice; ``None`` for a run that did not search), ``behaviour`` (the
    built-in behavioural suite's test half: failure rates by capability and test; ``None`` when it does not
    apply).

    Raises:
        CheckpointError: no checkpoint at ``directory``, or an invalid ``config.json`` / ``metrics.json``.
    """
    directory = Path(directory)
    config, vocab_size, labels = read_checkpoint_config(directory)
    metrics = read_metrics(directory)
    data = metrics.get("data") or {}
    weights = weights_digest(directory)   # hashes the whole weights file: once for both kinds of record
    evals = read_evals(directory, weights)
    return {
        "checkpoint": str(directory),
        "name": directory.resolve().name,
        "kind": metrics.get("kind", "classifier"),   # "pretrained": a `sentiment pretrain` encoder
        "pretrained": metrics.get("pretrained"),      # the encoder a classifier started from, if any
        "created": metrics.get("created", UNKNOWN),
        "labels": list(labels),
        "class_balance": _class_balance(data, evals, labels),
        "config": config.to_dict(),
        "vocab_size": vocab_size,
        "tokenizer": _tokenizer_kind(directory, config),   # the units it reads: word, char, unigram, bpe
        "size_bytes": _size_bytes(directory),   # the checkpoint's files (weights, tokenizer, config, records)
        "state_bytes": _size_bytes(directory / STATE_DIR),   # trainer_state/, kept for `train --resume`
        "compression": (compression := _compression(directory)),   # what was pruned and quantized, or None
        **_architecture(config, vocab_size, len(labels), metrics),   # "parameters", "ngram_score"
        "teacher": model_phrase(metrics),   # what distillation learned from, as training reported it
        "data": _data_record(data, config),
        "training": _training_record(metrics, config),
        "metrics": _metrics_by_split(metrics, evals, compression is not None),
        "calibration": _calibration(directory, metrics, evals),
        "exports": read_exports(directory, weights),   # sentiment export: parity with PyTorch, int8 accuracy
        "data_rules": metrics.get("data_rules") or [],   # the default's settings chosen from the data
        "search": metrics.get("search"),   # the default's search on the validation split (training/search.py)
        "behaviour": metrics.get("behaviour"),   # the built-in behavioural suite's test half (behaviour/run.py)
        "versions": metrics.get("versions", {}),
        "files": _files(directory),
    }


def _architecture(config, vocab_size: int, num_labels: int, metrics: dict[str, Any]) -> dict[str, Any]:
    """The card's facts from the model the config describes, built on the meta device (shapes only: no
    allocation, no weights read, no torch._dynamo): ``parameters`` (``model.num_parameters()``) and
    ``ngram_score`` (its phrase in the fitted form, or ``None``)."""
    with torch.device("meta"), no_init():
        model = SentimentClassifier.from_config(config, vocab_size, num_labels)
    multi_label = bool((metrics.get("data") or {}).get("multi_label"))
    return {"parameters": model.num_parameters(),
            "ngram_score": model.ngram_score.description(fitted_form(metrics), multi_label)
            if model.ngram_score is not None else None}


def _compression(directory: Path) -> dict[str, Any] | None:
    """``config.json``'s ``"compression"`` record (``model/compress.py``: the share of each table's rows kept, int8
    or not, in words under ``method``), or ``None`` for a checkpoint that was not compressed."""
    compression = read_compression(directory)
    return None if compression is None else compression.record()


def _files(directory: Path) -> dict[str, str | None]:
    """The picture and the card a checkpoint holds: ``{"curves": name or None, "card": name or None}``."""
    return {"curves": CURVES_FILE if (directory / CURVES_FILE).exists() else None,
            "card": CARD_FILE if (directory / CARD_FILE).exists() else None}


def _tokenizer_kind(directory: Path, config) -> str:
    """What the saved tokenizer reads (``word``, ``char``, ``unigram``, ``bpe``); ``[data] tokenizer`` when the
    file cannot be read."""
    from ..checkpoint import TOKENIZER_FILE
    from ..data.tokenizer import load_tokenizer, tokenizer_kind
    from ..errors import CheckpointError

    try:
        return tokenizer_kind(load_tokenizer(directory / TOKENIZER_FILE))
    except CheckpointError:
        return config.data.tokenizer


def _size_bytes(directory: Path) -> int:
    """Bytes of the files directly in ``directory`` (for a checkpoint: not its ``trainer_state/``); 0 when it is
    not a folder."""
    if not directory.is_dir():
        return 0
    return sum(f.stat().st_size for f in directory.iterdir() if f.is_file())


def _data_record(data: dict[str, Any], config) -> dict[str, Any]:
    """The card's ``data``: where the rows came from, how many, and their fingerprint."""
    return {"source": data.get("source", config.data.source),
            "validation_from": data.get("validation_from"),
            "train_examples": data.get("train_examples", data.get("reviews")),   # pretrained: unlabelled reviews
            "validation_examples": data.get("validation_examples"),
            "negation_augment": data.get("negation_augment", 0),   # pairs of rule-negated sentences among them
            "multi_label": bool(data.get("multi_label")),   # several labels per text, and how they were read
            "reading": data.get("reading") or "", "unlabelled_rows": data.get("unlabelled_rows", 0),
            "fingerprint": data.get("fingerprint", UNKNOWN)}


def _training_record(metrics: dict[str, Any], config) -> dict[str, Any]:
    """The card's ``training``: epochs run and planned, the best one, seed, device, wall time, and the loss's
    class weights by label name (``None`` unless ``class_weight = "balanced"``)."""
    return {"epochs": len(metrics.get("history") or []), "epochs_planned": config.training.epochs,
            "best_epoch": metrics.get("best_epoch"), "stopped_early": metrics.get("stopped_early"),
            "seed": metrics.get("seed", config.training.seed), "device": metrics.get("device", UNKNOWN),
            "device_name": metrics.get("device_name"), "wall_time_seconds": metrics.get("wall_time_seconds"),
            "class_weights": metrics.get("class_weights"), "refit": _refit_record(metrics)}


def _refit_record(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """What the card says of a refit (``training/refit.py``): the held-out run's rows, best epoch and its
    validation accuracy; ``None`` for a run that was not refitted."""
    first = metrics.get("held_out_run")
    if not isinstance(first, dict):
        return None
    return {"validation_examples": first.get("validation_examples"), "best_epoch": first.get("best_epoch"),
            "best_validation_accuracy": first.get("best_validation_accuracy")}


def _metrics_by_split(metrics: dict[str, Any], evals: dict[str, dict[str, Any]],
                      compressed: bool = False) -> dict[str, dict[str, Any]]:
    """The card's ``metrics``: ``validation`` from the training history's best epoch (the full model's, said so
    when the checkpoint was ``compressed`` after it), other splits from ``sentiment eval`` records (``evals``, by
    split: the weights in the folder)."""
    data, best = metrics.get("data") or {}, metrics.get("best_epoch")
    by_split: dict[str, dict[str, Any]] = {}
    best_record = next((r for r in metrics.get("history") or [] if r.get("epoch") == best), None)
    if best_record is not None and best_record.get("validation_accuracy") is not None:
        by_split["validation"] = {"num_examples": data.get("validation_examples"),
                                  "accuracy": best_record.get("validation_accuracy"),
                                  "loss": best_record.get("validation_loss"),
                                  "f1_macro": best_record.get("validation_f1_macro"),   # None before it was kept
                                  "source": f"training, epoch {best}"
                                            + (", before compression" if compressed else "")}
    for split, r in evals.items():
        # a multi-label record: subset accuracy, and macro-F1 under "macro"
        by_split[split] = {"num_examples": r.get("num_examples"),
                           "accuracy": r.get("accuracy", r.get("subset_accuracy")),
                           "loss": r.get("loss"),
                           "f1_macro": (r.get("f1") or {}).get("macro", (r.get("macro") or {}).get("f1")),
                           "source": f"sentiment eval, {r.get('evaluated', UNKNOWN)}",
                           "data": r.get("data")}
    return by_split


def _class_balance(data: dict[str, Any], evals: dict[str, dict[str, Any]],
                   labels: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """The card's ``class_balance``: examples per class of train and validation (from training), then of
    each split ``sentiment eval`` scored."""
    balance = {split: counts for split, counts in (data.get("class_counts") or {}).items() if counts}
    for split, r in evals.items():
        balance[split] = _eval_balance(r, labels)
    return balance


def _calibration(directory: Path, metrics: dict[str, Any], evals: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The card's ``calibration``: the ``temperature`` in ``config.json`` (1.0: none fitted), whether it was
    ``fitted`` (on the validation split at the end of training), the ECE after / before it by split
    (``validation`` from training, other splits from ``sentiment eval``), and the n-gram score's fitted
    weight ``ngram_scale`` when training chose one."""
    fitted = metrics.get("calibration") or {}
    ece: dict[str, dict[str, float]] = {}
    if "ece" in fitted:
        ece["validation"] = {"ece": fitted["ece"], "ece_uncalibrated": fitted.get("ece_uncalibrated")}
    for split, r in evals.items():
        if "ece" in r:
            ece[split] = {"ece": r["ece"], "ece_uncalibrated": r.get("ece_uncalibrated")}
    out = {"temperature": read_temperature(directory), "fitted": "ece" in fitted, "ece": ece}
    if isinstance(fitted.get("decision"), dict):   # multi-label: a temperature and a threshold per label
        out["decision"] = fitted["decision"]
        out["shared_threshold_labels"] = len(fitted.get("shared_threshold_labels") or [])
    if "ngram_scale" in fitted:   # the n-gram score's weight, chosen with it (training/score_weight.py)
        out["ngram_scale"] = fitted["ngram_scale"]
    return out


def _eval_balance(record: dict[str, Any], labels: tuple[str, ...]) -> dict[str, int]:
    """Examples per class of an eval record: its ``support``, or its confusion matrix's row sums."""
    if isinstance(record.get("support"), dict):
        return {k: v for k, v in record["support"].items()}
    if isinstance(record.get("per_label"), dict):   # multi-label: the texts that carry each label
        return {k: v.get("support") for k, v in record["per_label"].items() if isinstance(v, dict)}
    cm = record.get("confusion_matrix") or []
    names = record.get("labels") or labels
    return {name: sum(row) for name, row in zip(names, cm)} if len(cm) == len(names) else {}

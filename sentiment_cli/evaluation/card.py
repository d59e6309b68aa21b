"""The model card: everything known about a checkpoint, as a dict (``sentiment info``) and as ``README.md``.

After training, :func:`write_training_report` adds two files to the
checkpoint folder:

    curves.png   loss and accuracy per epoch, train and validation (needs matplotlib, see ``plots.py``)
    README.md    the model card, in Markdown

The card lists the metrics of ``sentiment eval`` runs kept in the folder
(:func:`~sentiment_cli.checkpoint.read_evals`) for the weights now there.
:func:`write_card` rewrites ``README.md``; ``sentiment eval`` calls it after
recording a result. This module prints nothing and never imports rich: the
CLI renders the card.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import (METRICS_FILE, atomic_write, read_checkpoint_config, read_evals, read_exports,
                         read_temperature, weights_digest)
from ..errors import CheckpointError
from ..model.classifier import SentimentClassifier
from ..ngram.report import fitted_form, model_phrase
from ..wording import plural
from .plots import PlotUnavailable, curves_png, write_png

CURVES_FILE = "curves.png"
CARD_FILE = "README.md"
UNKNOWN = "unknown"


def _read_metrics(directory: Path) -> dict[str, Any]:
    path = directory / METRICS_FILE
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    return obj if isinstance(obj, dict) else {}


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
    with PyTorch, sizes, int8 accuracy), ``versions``, ``files`` (``curves``: the picture's
    file name, or ``None``), ``data_rules`` (the default's settings chosen from the data: ``key``,
    ``value``, ``reason``; empty for other runs).

    Raises:
        CheckpointError: no checkpoint at ``directory``, or an invalid ``config.json`` / ``metrics.json``.
    """
    directory = Path(directory)
    config, vocab_size, labels = read_checkpoint_config(directory)
    metrics = _read_metrics(directory)
    with torch.device("meta"):  # shapes only: counts parameters without allocating or reading weights
        model = SentimentClassifier.from_config(config, vocab_size, len(labels))
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
        "parameters": model.num_parameters(),
        "ngram_score": model.ngram_score.description(fitted_form(metrics)) if model.ngram_score is not None else None,
        "teacher": model_phrase(metrics),   # what distillation learned from, as training reported it
        "data": {"source": data.get("source", config.data.source),
                 "validation_from": data.get("validation_from"),
                 "train_examples": data.get("train_examples", data.get("reviews")),   # pretrained: unlabelled
                 "validation_examples": data.get("validation_examples"),
                 "fingerprint": data.get("fingerprint", UNKNOWN)},
        "training": _training_record(metrics, config),
        "metrics": _metrics_by_split(metrics, evals),
        "calibration": _calibration(directory, metrics, evals),
        "exports": read_exports(directory, weights),   # sentiment export: parity with PyTorch, int8 accuracy
        "data_rules": metrics.get("data_rules") or [],   # the default's settings chosen from the data
        "versions": metrics.get("versions", {}),
        "files": {"curves": CURVES_FILE if (directory / CURVES_FILE).exists() else None,
                  "card": CARD_FILE if (directory / CARD_FILE).exists() else None},
    }


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


def _metrics_by_split(metrics: dict[str, Any], evals: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The card's ``metrics``: ``validation`` from the training history's best epoch, other splits from
    ``sentiment eval`` records (``evals``, by split)."""
    data, best = metrics.get("data") or {}, metrics.get("best_epoch")
    by_split: dict[str, dict[str, Any]] = {}
    best_record = next((r for r in metrics.get("history") or [] if r.get("epoch") == best), None)
    if best_record is not None and best_record.get("validation_accuracy") is not None:
        by_split["validation"] = {"num_examples": data.get("validation_examples"),
                                  "accuracy": best_record.get("validation_accuracy"),
                                  "loss": best_record.get("validation_loss"),
                                  "f1_macro": best_record.get("validation_f1_macro"),   # None before it was kept
                                  "source": f"training, epoch {best}"}
    for split, r in evals.items():
        by_split[split] = {"num_examples": r.get("num_examples"), "accuracy": r.get("accuracy"),
                           "loss": r.get("loss"), "f1_macro": (r.get("f1") or {}).get("macro"),
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
        ece["validation"] = {"ece": fitted["ece"], "ece_uncalibrated": fitted["ece_uncalibrated"]}
    for split, r in evals.items():
        if "ece" in r:
            ece[split] = {"ece": r["ece"], "ece_uncalibrated": r.get("ece_uncalibrated")}
    out = {"temperature": read_temperature(directory), "fitted": "ece" in fitted, "ece": ece}
    if "ngram_scale" in fitted:   # the n-gram score's weight, chosen with it (training/score_weight.py)
        out["ngram_scale"] = fitted["ngram_scale"]
    return out


def _eval_balance(record: dict[str, Any], labels: tuple[str, ...]) -> dict[str, int]:
    """Examples per class of an eval record: its ``support``, or its confusion matrix's row sums."""
    if isinstance(record.get("support"), dict):
        return {k: v for k, v in record["support"].items()}
    cm = record.get("confusion_matrix") or []
    names = record.get("labels") or labels
    return {name: sum(row) for name, row in zip(names, cm)} if len(cm) == len(names) else {}


def class_balance_text(counts: dict[str, int]) -> str:
    """``"neg 283 (52.4%), pos 257 (47.6%)"``: examples per class and their share."""
    total = sum(counts.values())
    return ", ".join(f"{name} {n:,} ({n / total:.1%})" if total else f"{name} {n:,}" for name, n in counts.items())


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "–"


def _num(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else "–"


RESULT_COLUMNS = ("split", "reviews", "accuracy", "macro F1", "loss", "from")


def card_results(card: dict[str, Any]) -> list[tuple[str, ...]]:
    """The card's metrics as display rows, one per split, in :data:`RESULT_COLUMNS` order."""
    rows = []
    for split, r in card["metrics"].items():
        src = r["source"]
        if r.get("data") and r["data"] != card["data"]["source"]:
            src += f", data {r['data']}"
        rows.append((split, _count(r.get("num_examples")), _num(r.get("accuracy"), ".2%"),
                     _num(r.get("f1_macro"), ".4f"), _num(r.get("loss"), ".4f"), src))
    return rows


def card_sections(card: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """The card's facts as display text: ``[(section, [(key, value), ...]), ...]``.

    Shared by :func:`card_markdown` and the CLI's ``sentiment info``, so both say the same.

    Args:
        card: :func:`model_card`'s dict.
    """
    rules = [(rule["key"], f"{_toml_value(rule['value'])}: {rule['reason']}") for rule in card.get("data_rules") or []]
    return [("Model", _model_facts(card)), ("Training data", _data_facts(card)), ("Training", _training_facts(card)),
            *([("Settings chosen from the data", rules)] if rules else []), *_calibration_sections(card)]


def _model_facts(card: dict[str, Any]) -> list[tuple[str, str]]:
    """The "Model" section: architecture, parameter counts, vocabulary, input length."""
    m, d, p = card["config"]["model"], card["config"]["data"], card["parameters"]
    norm = "pre-norm" if m["norm_first"] else "post-norm"
    layers = plural(m["n_layers"], f"{norm} encoder layer")
    truncation = (f"first {d['max_length']} tokens" if d["truncation"] == "head" else
                  f"{d['max_length']} tokens, head and tail ({d['head_fraction']:.0%} from the start)")
    sites = [f"{name} {m[key]:g}" for name, key in (("feed-forward hidden layer", "activation_dropout"),
                                                     ("attention", "attention_dropout"),
                                                     ("before the head", "head_dropout")) if m[key]]
    dropout = ", ".join([f"dropout {m['dropout']:g} (embeddings, residuals)"] + sites)
    return [
        ("architecture", f"{layers}, d_model {m['d_model']}, {m['n_heads']} heads, feed-forward {m['d_ff']} "
                         f"({m['activation']}), {dropout}; masked max-pool; dense head"
                         + (f"; plus {card['ngram_score']}" if card.get("ngram_score") else "")),
        ("parameters", f"{p['total']:,} ({p['embedding']:,} embedding, {p['non_embedding']:,} non-embedding)"),
        ("vocabulary", f"{card['vocab_size']:,} word-level tokens ({d['pre_tokenizer']} pre-tokenizer, lowercased)"
                       + (f"; word bigrams hashed into {m['bigram_buckets']:,} buckets" if m.get("bigram_buckets")
                          else "")),
        ("input", truncation),
    ]


def _data_facts(card: dict[str, Any]) -> list[tuple[str, str]]:
    """The "Training data" section: source, labels, review counts, fingerprint, class balance."""
    d, data = card["config"]["data"], card["data"]
    return [
        ("source", str(data["source"])),
        *([] if card.get("kind") == "pretrained" else
          [("labels", f"{len(card['labels'])} classes: " + ", ".join(card["labels"]))]),
        ("training reviews", _count(data["train_examples"])),
        ("validation reviews", _validation_text(data, d, card["training"]["seed"]) if d["validation_fraction"] > 0
         else "none (validation_fraction 0: trained on all of train)"),
        ("fingerprint", str(data["fingerprint"])),
        *((f"class balance, {split}", class_balance_text(counts))
          for split, counts in card.get("class_balance", {}).items()),
    ]


def _training_facts(card: dict[str, Any]) -> list[tuple[str, str]]:
    """The "Training" section: the encoder it started from, epochs, optimizer, class weights (when balanced),
    device, time, seed, versions."""
    t = card["training"]
    epochs, optimizer = _pretraining_text(card) if card.get("kind") == "pretrained" else _fine_tuning_text(card)
    start = []
    if card.get("pretrained"):
        pre = card["pretrained"]
        start = [("initialised from", f"{pre.get('from')} ({pre.get('epochs')} pretraining epochs, "
                                      f"{_num(pre.get('wall_time_seconds'), '.0f')} s)")]
    return [
        *start,
        ("epochs", epochs),
        ("optimizer", optimizer),
        *_class_weight_facts(t.get("class_weights")),
        *_refit_facts(t.get("refit")),
        ("device", t["device"] + (f" ({t['device_name']})" if t.get("device_name") else "")),
        ("wall time", _num(t["wall_time_seconds"], ".0f") + " s" if t["wall_time_seconds"] is not None else UNKNOWN),
        ("seed", str(t["seed"])),
        ("created", str(card["created"])),
        ("versions", ", ".join(f"{k} {v}" for k, v in card["versions"].items()) or UNKNOWN),
    ]


def _refit_facts(refit: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The "refit" fact of a run trained again on every row after its hold-out (``training/refit.py``)."""
    if not refit:
        return []
    acc = refit.get("best_validation_accuracy")
    seen = f" (validation accuracy {acc:.2%})" if isinstance(acc, (int, float)) else ""
    held, epochs = _count(refit.get("validation_examples")), refit.get("best_epoch")
    return [("refit", f"these weights were trained again on every training row, the {held} held-out rows "
                      f"included, for {epochs} epoch{'' if epochs == 1 else 's'}, the count that was best on "
                      f"them{seen}; the calibration below was fitted on the held-out rows before")]


def _class_weight_facts(weights: dict[str, float] | None) -> list[tuple[str, str]]:
    """The "class weights" fact of a run trained with ``class_weight = "balanced"``; none otherwise."""
    if not weights:
        return []
    return [("class weights", "balanced, n / (classes × count) (scikit-learn's heuristic): "
                              + ", ".join(f"{name} {w:.3g}" for name, w in weights.items()))]


def _fine_tuning_text(card: dict[str, Any]) -> tuple[str, str]:
    """A classifier's ``(epochs, optimizer)`` facts: epochs run and the best, the optimizer and its regularisation."""
    t, tr = card["training"], card["config"]["training"]
    validated = card["config"]["data"]["validation_fraction"] > 0
    epochs = f"{t['epochs']} of {t['epochs_planned']}, " + (f"best epoch {t['best_epoch']}" if validated
                                                            else "the last kept (no validation)")
    if t["stopped_early"]:
        epochs += " (stopped early)"
    scale = tr.get("embedding_lr_scale", 1.0)
    embedding = f", token embedding {tr['lr'] * scale:g}" if scale != 1.0 else ""
    optimizer = (f"AdamW, lr {tr['lr']:g}{embedding} ({tr['schedule']} schedule), weight decay "
                 f"{tr['weight_decay']:g}, batch {tr['batch_size']}")
    regularisation = [f"{name} {tr[key]:g}" for name, key in (
        ("word dropout", "token_dropout"), ("label smoothing", "label_smoothing"),
        ("adversarial training (Miyato et al. 2017), epsilon", "adversarial_epsilon")) if tr.get(key)]
    if tr.get("distill_reviews"):
        teacher = card.get("teacher") or "an n-gram model over hashed token 1-3-grams"
        regularisation.append(f"distillation (Hinton et al. 2015) from a teacher, {teacher}, on "
                              f"{tr['distill_reviews']:,} unlabelled reviews per epoch, weight {tr['distill_weight']:g}")
    if regularisation:
        optimizer += "; " + ", ".join(regularisation)
    return epochs, optimizer


def _pretraining_text(card: dict[str, Any]) -> tuple[str, str]:
    """A pretrained encoder's ``(epochs, optimizer)`` facts: word2vec or masked-language-model pretraining."""
    pre = card["config"]["pretrain"]
    if pre["objective"] == "word2vec":
        what = "word2vec (skip-gram) pretraining of the token embedding"
        optimizer = (f"gensim Word2Vec, window {pre['window']}, 5 negative samples, "
                     f"frequent words downsampled at {pre['subsample']:g}")
    else:
        what = ("replaced-token-detection (ELECTRA) pretraining, generator of "
                f"{pre.get('generator_layers', 1)} layer(s), loss weight {pre.get('rtd_weight', 50.0):g}"
                if pre["objective"] == "electra" else "masked-language-model pretraining")
        optimizer = (f"AdamW, lr {pre['lr']:g} (cosine schedule), weight decay {pre['weight_decay']:g}, "
                     f"batch {pre['batch_size']}, {pre['mask_fraction']:.0%} of tokens masked")
    epochs = f"{card['training']['epochs']} of {pre['epochs']} of {what} on {pre['splits']} (classifier head untrained)"
    return epochs, optimizer


def _calibration_sections(card: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """The "Calibration" section (the temperature, ECE by split) of a classifier's card; none for an encoder."""
    cal = card.get("calibration")
    if not cal or card.get("kind") == "pretrained":
        return []
    how = ("fitted on the validation split at the end of training (Guo et al. 2017)" if cal["fitted"]
           else "none fitted (no validation split, or trained before temperatures were fitted)")
    return [("Calibration", [
        ("temperature", f"{cal['temperature']:.4g}: probabilities are softmax(logits / T); {how}"),
        *((("n-gram score's weight", f"{cal['ngram_scale']:g} (the logits are the encoder's + {cal['ngram_scale']:g} "
            "x the score's), chosen on the validation split from 1 to 5 by the NLL after the temperature"),)
          if "ngram_scale" in cal else ()),
        *((f"ECE, {split}", f"{r['ece']:.2%} with the temperature, {_num(r.get('ece_uncalibrated'), '.2%')} "
                            f"without (15 bins)") for split, r in cal["ece"].items()),
    ])]


def _validation_text(data: dict[str, Any], d: dict[str, Any], seed: int) -> str:
    if data.get("validation_from"):
        return f"{_count(data['validation_examples'])} (the source's own validation split: {data['validation_from']})"
    blocks = ", in blocks of consecutive reviews" if d.get("validation_split") == "blocks" else ""
    return (f"{_count(data['validation_examples'])} ({d['validation_fraction']:.0%} of train, stratified{blocks}, "
            f"seed {seed})")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a valid TOML basic string


def config_toml(config: dict[str, Any]) -> str:
    """The run configuration (``Config.to_dict()``) as a TOML file ``sentiment train --config`` reads back."""
    out = []
    for table, values in config.items():
        out.append(f"[{table}]")
        out += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
        out.append("")
    return "\n".join(out)


def _exports_markdown(exports: dict[str, dict[str, Any]]) -> list[str]:
    """The card's "Exports" section: each ONNX file with its parity check against PyTorch."""
    if not exports:
        return []
    lines = ["", "## Exports", "", "| file | held-out reviews | label agreement with PyTorch | max logit difference "
             "| size | test accuracy before → after |", "|---|---:|---:|---:|---:|---|"]
    for name, r in exports.items():
        p, q = r["parity"], r.get("int8") or {}
        size = r["bytes"].get("onnx_int8" if q else "onnx")
        acc = f"{q['accuracy_before']:.2%} → {q['accuracy_after']:.2%}" if q else "–"
        agreement = q.get("label_agreement_with_pytorch", p["label_agreement"])
        diff = q.get("max_logit_difference_to_pytorch", p["max_logit_difference"])
        lines.append(f"| {_md(Path(r['file']).name)} ({name}) | {p['reviews']:,} | {agreement:.2%} | {diff:.1e} | "
                     f"{size / 2**20:.1f} MiB | {acc} |")
    return lines


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def card_markdown(card: dict[str, Any]) -> str:
    """The model card as Markdown: the checkpoint's ``README.md``.

    Args:
        card: :func:`model_card`'s dict.
    """
    version = card["versions"].get("sentiment_cli", UNKNOWN)
    lines = [
        f"# Model card: {card['name']}",
        "",
        f"Text classifier over {len(card['labels'])} classes (" + ", ".join(card["labels"]) + "): a Transformer "
        f"encoder trained with sentiment-cli {version} on {card['data']['source']}.",
        "",
        "## Results",
        "",
        "| " + " | ".join(RESULT_COLUMNS) + " |",
        "|---|---:|---:|---:|---:|---|",
        *("| " + " | ".join(_md(c) for c in row) + " |" for row in card_results(card)),
    ]
    if not any(s != "validation" for s in card["metrics"]):
        lines += ["", f"Test metrics appear here after `sentiment eval --split test --checkpoint {card['checkpoint']}`."]
    for title, facts in card_sections(card):
        lines += ["", f"## {title}", "", "| | |", "|---|---|"]
        lines += [f"| {key} | {_md(value)} |" for key, value in facts]
    lines += _exports_markdown(card.get("exports") or {})
    if card["files"]["curves"]:
        lines += ["", f"![training curves: loss and accuracy per epoch]({card['files']['curves']})"]
    lines += [
        "",
        "## Configuration",
        "",
        "Save as a `.toml` file to train the same model again with `sentiment train --config FILE`.",
        "",
        "```toml",
        config_toml(card["config"]).rstrip("\n"),
        "```",
        "",
        "## Use",
        "",
        "```bash",
        f'sentiment predict --checkpoint {card["checkpoint"]} "A moving, beautifully acted film."',
        f'sentiment predict --checkpoint {card["checkpoint"]} --explain "The plot was thin, but the acting was superb."',
        f"sentiment eval --checkpoint {card['checkpoint']} --split test --errors 5",
        "```",
        "",
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- after training

@dataclass
class TrainingReport:
    """What :func:`write_training_report` wrote: ``curves`` is ``None`` without matplotlib, and ``note`` says why."""

    card: Path
    curves: Path | None
    note: str | None = None


def write_card(directory: str | Path) -> Path:
    """(Re)write the checkpoint's model card, ``README.md``, from what the folder holds now.

    Returns:
        The path written.

    Raises:
        OSError: the folder is not writable.
        CheckpointError: the folder holds no valid checkpoint.
    """
    path = Path(directory) / CARD_FILE
    atomic_write(path, card_markdown(model_card(directory)))
    return path


def write_training_report(directory: str | Path) -> TrainingReport:
    """Write ``curves.png`` (when matplotlib is there) and ``README.md`` into a trained checkpoint folder.

    Without matplotlib the run still succeeds: no picture (a stale one from
    an earlier run in the same folder is removed) and ``note`` says how to
    get it.

    Raises:
        OSError: the folder is not writable.
        CheckpointError: the folder holds no valid checkpoint.
    """
    directory = Path(directory)
    metrics = _read_metrics(directory)
    curves, note = directory / CURVES_FILE, None
    try:
        png = curves_png(metrics.get("history") or [], metrics.get("best_epoch"),
                         title=f"{directory.resolve().name}: training curves")
    except PlotUnavailable as exc:
        curves.unlink(missing_ok=True)
        curves, note = None, f"no {CURVES_FILE}: {exc}"
    else:
        write_png(curves, png)
    return TrainingReport(write_card(directory), curves, note)

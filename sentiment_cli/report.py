"""What a checkpoint is and how well it does: training curves, confusion-matrix pictures, the model card.

After training, :func:`write_training_report` adds two files to the
checkpoint folder:

    curves.png   loss and accuracy per epoch, train and validation (needs matplotlib)
    README.md    the model card, in Markdown

``sentiment eval`` keeps its last result per split in ``eval_<split>.json``
(:func:`record_eval`), tagged with the SHA-256 of the weights it scored, so
the card lists test metrics only for the weights now in the folder.

Pictures need matplotlib, an optional extra (``pip install
"sentiment-cli[plot]"``); they are drawn on a bare ``Figure`` with the
non-interactive Agg canvas (no pyplot, no display, no global state). This
module prints nothing and never imports rich: the CLI renders the card.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from .checkpoint import METRICS_FILE, WEIGHTS_FILE, atomic_write, read_config, write_json
from .errors import CheckpointError, SentimentError
from .model import LABELS, SentimentClassifier

CURVES_FILE = "curves.png"
CARD_FILE = "README.md"
EVAL_PREFIX = "eval_"
PLOT_INSTALL = 'pip install "sentiment-cli[plot]"'
UNKNOWN = "unknown"


class PlotUnavailable(SentimentError):
    """matplotlib is not installed, so no picture can be drawn (exit 1); the message says how to get it."""


def require_matplotlib():
    """``(Figure, FigureCanvasAgg)`` from matplotlib.

    Raises:
        PlotUnavailable: matplotlib is not installed; the message gives the install command.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotUnavailable(f"matplotlib is not installed; to get the picture: {PLOT_INSTALL}") from None
    return Figure, FigureCanvasAgg


def plot_available() -> bool:
    """Whether matplotlib can be imported (pictures can be drawn)."""
    try:
        require_matplotlib()
    except PlotUnavailable:
        return False
    return True


def _png(fig, canvas_cls) -> bytes:
    canvas_cls(fig)  # attaches the Agg canvas to the figure
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def curves_png(history: list[dict[str, Any]], best_epoch: int | None = None, title: str = "") -> bytes:
    """Training curves as PNG bytes: loss (left) and accuracy (right) per epoch, train and validation.

    Args:
        history: ``metrics.json``'s ``history`` (``epoch``, ``train_loss``,
            ``validation_loss``, ``train_accuracy``, ``validation_accuracy``;
            the validation values are ``None`` for a run without validation,
            and then only the train curves are drawn).
        best_epoch: marked with a dotted line when given and the run had validation.
        title: figure title.

    Raises:
        PlotUnavailable: matplotlib is not installed.
        ValueError: ``history`` is empty.
    """
    if not history:
        raise ValueError("no epochs to plot")
    Figure, Canvas = require_matplotlib()
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    epochs = [r["epoch"] for r in history]
    validated = any(r.get("validation_accuracy") is not None for r in history)   # not when trained on all of train
    fig = Figure(figsize=(10, 4.4), layout="constrained")
    ax_loss, ax_acc = fig.subplots(1, 2)
    for ax, key, name in ((ax_loss, "loss", "cross-entropy loss"), (ax_acc, "accuracy", "accuracy")):
        scale = 100.0 if key == "accuracy" else 1.0
        ax.plot(epochs, [r[f"train_{key}"] * scale for r in history], "o-", color="tab:blue",
                label="train (running mean over the epoch)")
        if validated:
            ax.plot(epochs, [r[f"validation_{key}"] * scale for r in history], "s-", color="tab:orange",
                    label="validation (after the epoch)")
        if validated and best_epoch is not None:
            ax.axvline(best_epoch, color="grey", linestyle=":", linewidth=1.2, label=f"best epoch ({best_epoch})")
        ax.set_title(key)
        ax.set_xlabel("epoch")
        ax.set_ylabel(name)
        ax.set_xlim(epochs[0] - 0.5, epochs[-1] + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        if key == "accuracy":
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}%"))
        ax.grid(alpha=0.3)
    handles, labels = ax_loss.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), frameon=False)
    if title:
        fig.suptitle(title)
    return _png(fig, Canvas)


def confusion_png(confusion_matrix: list[list[int]], title: str = "") -> bytes:
    """A confusion matrix as PNG bytes: rows true label, columns predicted, counts and row shares.

    Args:
        confusion_matrix: ``[[tn, fp], [fn, tp]]`` (rows true, columns predicted).
        title: figure title.

    Raises:
        PlotUnavailable: matplotlib is not installed.
    """
    Figure, Canvas = require_matplotlib()
    cm = torch.tensor(confusion_matrix, dtype=torch.float64)
    rows = cm.sum(dim=1, keepdim=True).clamp(min=1)
    share = (cm / rows).tolist()                                        # row-normalised: recall per class
    fig = Figure(figsize=(4.8, 4.2))
    ax = fig.subplots()
    ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
    for i in range(len(LABELS)):
        for j in range(len(LABELS)):
            ax.text(j, i, f"{int(cm[i, j]):,}\n{share[i][j]:.1%}", ha="center", va="center",
                    color="white" if share[i][j] > 0.5 else "black")
    ax.set_xticks(range(len(LABELS)), LABELS)
    ax.set_yticks(range(len(LABELS)), LABELS)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true label")
    if title:
        ax.set_title(title)
    return _png(fig, Canvas)


def write_png(path: str | Path, png: bytes) -> None:
    """Write PNG bytes atomically (see :func:`~sentiment_cli.checkpoint.atomic_write`).

    Raises:
        OSError: the folder does not exist or is not writable.
    """
    atomic_write(path, png)


# ----------------------------------------------------------------------------- eval records

def weights_digest(directory: str | Path) -> str | None:
    """``"sha256:<hex>"`` of ``model.safetensors``, or ``None`` when it is missing."""
    path = Path(directory) / WEIGHTS_FILE
    try:
        with open(path, "rb") as fh:
            return "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def record_eval(directory: str | Path, result: dict[str, Any], data_source: str) -> Path:
    """Keep ``sentiment eval``'s result for its split in ``eval_<split>.json`` and refresh ``README.md``.

    Args:
        directory: the checkpoint folder that was evaluated.
        result: the ``eval --json`` object (``split``, ``accuracy``...; ``errors`` is not kept).
        data_source: the dataset the split came from.

    Returns:
        The path written.

    Raises:
        OSError: the folder is not writable (the eval itself is unaffected).
    """
    directory = Path(directory)
    record = {k: v for k, v in result.items() if k not in ("errors", "checkpoint")}
    record.update(data=data_source, evaluated=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  weights=weights_digest(directory))
    path = directory / f"{EVAL_PREFIX}{result['split']}.json"
    write_json(path, record)
    atomic_write(directory / CARD_FILE, card_markdown(model_card(directory)))
    return path


def read_evals(directory: str | Path) -> dict[str, dict[str, Any]]:
    """The eval records of the weights now in ``directory``, by split (stale or unreadable ones are skipped)."""
    directory = Path(directory)
    current = weights_digest(directory)
    out = {}
    for path in sorted(directory.glob(f"{EVAL_PREFIX}*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("weights") == current and "split" in record:
            out[record["split"]] = record
    return out


def read_exports(directory: str | Path) -> dict[str, dict[str, Any]]:
    """The ``sentiment export`` records (``export_<name>.json``) of the weights now in ``directory``, by name."""
    directory = Path(directory)
    current = weights_digest(directory)
    out = {}
    for path in sorted(directory.glob("export_*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("weights") == current and "parity" in record:
            out[path.stem.removeprefix("export_")] = record
    return out


# ----------------------------------------------------------------------------- model card

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

    Keys: ``checkpoint``, ``name``, ``created``, ``labels``, ``config`` (the
    whole run configuration), ``vocab_size``, ``parameters`` (``embedding``,
    ``non_embedding``, ``total``, from ``model.num_parameters()``), ``data``
    (``source``, ``train_examples``, ``validation_examples``, ``fingerprint``:
    SHA-256 of the training split, ``"unknown"`` for checkpoints that predate
    it), ``training`` (epochs, best epoch, device, wall time...), ``metrics``
    by split (``validation`` from the training history; other splits from
    ``sentiment eval``), ``versions``, ``files`` (``curves``: the picture's
    file name, or ``None``).

    Raises:
        CheckpointError: no checkpoint at ``directory``, or an invalid ``config.json`` / ``metrics.json``.
    """
    directory = Path(directory)
    config, vocab_size = read_config(directory)
    metrics = _read_metrics(directory)
    with torch.device("meta"):  # shapes only: counts parameters without allocating or reading weights
        counts = SentimentClassifier(config.model, vocab_size=vocab_size,
                                     max_length=config.data.max_length).num_parameters()
    data = metrics.get("data") or {}
    history = metrics.get("history") or []
    best = metrics.get("best_epoch")
    by_split: dict[str, dict[str, Any]] = {}
    best_record = next((r for r in history if r.get("epoch") == best), None)
    if best_record is not None and best_record.get("validation_accuracy") is not None:
        by_split["validation"] = {"num_examples": data.get("validation_examples"),
                                  "accuracy": best_record.get("validation_accuracy"),
                                  "loss": best_record.get("validation_loss"), "f1_macro": None,
                                  "source": f"training, epoch {best}"}
    for split, r in read_evals(directory).items():
        by_split[split] = {"num_examples": r.get("num_examples"), "accuracy": r.get("accuracy"),
                           "loss": r.get("loss"), "f1_macro": (r.get("f1") or {}).get("macro"),
                           "source": f"sentiment eval, {r.get('evaluated', UNKNOWN)}",
                           "data": r.get("data")}
    return {
        "checkpoint": str(directory),
        "name": directory.resolve().name,
        "kind": metrics.get("kind", "classifier"),   # "pretrained": a `sentiment pretrain` encoder
        "pretrained": metrics.get("pretrained"),      # the encoder a classifier started from, if any
        "created": metrics.get("created", UNKNOWN),
        "labels": list(LABELS),
        "config": config.to_dict(),
        "vocab_size": vocab_size,
        "parameters": counts,
        "data": {"source": data.get("source", config.data.source),
                 "train_examples": data.get("train_examples", data.get("reviews")),   # pretrained: unlabelled
                 "validation_examples": data.get("validation_examples"),
                 "fingerprint": data.get("fingerprint", UNKNOWN)},
        "training": {"epochs": len(history), "epochs_planned": config.training.epochs, "best_epoch": best,
                     "stopped_early": metrics.get("stopped_early"), "seed": metrics.get("seed", config.training.seed),
                     "device": metrics.get("device", UNKNOWN), "device_name": metrics.get("device_name"),
                     "wall_time_seconds": metrics.get("wall_time_seconds")},
        "metrics": by_split,
        "exports": read_exports(directory),   # sentiment export: parity with PyTorch, int8 accuracy
        "versions": metrics.get("versions", {}),
        "files": {"curves": CURVES_FILE if (directory / CURVES_FILE).exists() else None,
                  "card": CARD_FILE if (directory / CARD_FILE).exists() else None},
    }


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
    """
    m, d, tr = card["config"]["model"], card["config"]["data"], card["config"]["training"]
    t, p, data = card["training"], card["parameters"], card["data"]
    norm = "pre-norm" if m["norm_first"] else "post-norm"
    layers = f"{m['n_layers']} {norm} encoder layer{'s' if m['n_layers'] != 1 else ''}"
    truncation = (f"first {d['max_length']} tokens" if d["truncation"] == "head" else
                  f"{d['max_length']} tokens, head and tail ({d['head_fraction']:.0%} from the start)")
    device = t["device"] + (f" ({t['device_name']})" if t.get("device_name") else "")
    validated = d["validation_fraction"] > 0
    epochs = f"{t['epochs']} of {t['epochs_planned']}, " + (f"best epoch {t['best_epoch']}" if validated
                                                            else "the last kept (no validation)")
    if t["stopped_early"]:
        epochs += " (stopped early)"
    optimizer = (f"AdamW, lr {tr['lr']:g} ({tr['schedule']} schedule), weight decay "
                 f"{tr['weight_decay']:g}, batch {tr['batch_size']}")
    regularisation = [f"{name} {tr[key]:g}" for name, key in (
        ("word dropout", "token_dropout"), ("label smoothing", "label_smoothing"),
        ("adversarial training (Miyato et al. 2017), epsilon", "adversarial_epsilon")) if tr.get(key)]
    if regularisation:
        optimizer += "; " + ", ".join(regularisation)
    if card.get("kind") == "pretrained":
        pre = card["config"]["pretrain"]
        if pre["objective"] == "word2vec":
            what = "word2vec (skip-gram) pretraining of the token embedding"
            optimizer = (f"gensim Word2Vec, window {pre['window']}, 5 negative samples, "
                         f"frequent words downsampled at {pre['subsample']:g}")
        else:
            what = "masked-language-model pretraining"
            optimizer = (f"AdamW, lr {pre['lr']:g} (cosine schedule), weight decay {pre['weight_decay']:g}, "
                         f"batch {pre['batch_size']}, {pre['mask_fraction']:.0%} of tokens masked")
        epochs = f"{t['epochs']} of {pre['epochs']} of {what} on {pre['splits']} (classifier head untrained)"
    start = []
    if card.get("pretrained"):
        pre = card["pretrained"]
        start = [("initialised from", f"{pre.get('from')} ({pre.get('epochs')} pretraining epochs, "
                                      f"{_num(pre.get('wall_time_seconds'), '.0f')} s)")]
    sites = [f"{name} {m[key]:g}" for name, key in (("feed-forward hidden layer", "activation_dropout"),
                                                     ("attention", "attention_dropout"),
                                                     ("before the head", "head_dropout")) if m[key]]
    dropout = ", ".join([f"dropout {m['dropout']:g} (embeddings, residuals)"] + sites)
    return [
        ("Model", [
            ("architecture", f"{layers}, d_model {m['d_model']}, {m['n_heads']} heads, feed-forward {m['d_ff']} "
                             f"({m['activation']}), {dropout}; masked max-pool; dense head"),
            ("parameters", f"{p['total']:,} ({p['embedding']:,} embedding, {p['non_embedding']:,} non-embedding)"),
            ("vocabulary", f"{card['vocab_size']:,} word-level tokens ({d['pre_tokenizer']} pre-tokenizer, lowercased)"
                           + (f"; word bigrams hashed into {m['bigram_buckets']:,} buckets" if m.get("bigram_buckets")
                              else "")),
            ("input", truncation),
        ]),
        ("Training data", [
            ("source", str(data["source"])),
            ("training reviews", _count(data["train_examples"])),
            ("validation reviews", f"{_count(data['validation_examples'])} "
                                   f"({d['validation_fraction']:.0%} of train, stratified"
                                   f"{', in blocks of consecutive reviews' if d.get('validation_split') == 'blocks' else ''}"
                                   f", seed {t['seed']})" if validated else "none (validation_fraction 0: trained on all of train)"),
            ("fingerprint", str(data["fingerprint"])),
        ]),
        ("Training", [
            *start,
            ("epochs", epochs),
            ("optimizer", optimizer),
            ("device", device),
            ("wall time", _num(t["wall_time_seconds"], ".0f") + " s" if t["wall_time_seconds"] is not None else UNKNOWN),
            ("seed", str(t["seed"])),
            ("created", str(card["created"])),
            ("versions", ", ".join(f"{k} {v}" for k, v in card["versions"].items()) or UNKNOWN),
        ]),
    ]


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
        "IMDB movie-review sentiment classifier (labels: " + ", ".join(card["labels"]) + "): a Transformer "
        f"encoder trained from scratch with sentiment-cli {version}.",
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
    card = directory / CARD_FILE
    atomic_write(card, card_markdown(model_card(directory)))
    return TrainingReport(card, curves, note)

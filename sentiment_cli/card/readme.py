"""The model card as Markdown: the checkpoint's ``README.md``, and :func:`write_card`, which (re)writes it.

``sentiment eval`` and ``sentiment export`` rewrite the card after recording a result; training writes it with
its curves (``evaluation/training_report.py``). The "Configuration" section is the run config as TOML
(``toml_writer.py``) that ``sentiment train --config`` reads back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..checkpoint import atomic_write
from ..toml_writer import toml_tables
from .facts import CARD_FILE, UNKNOWN, model_card
from .text import RESULT_COLUMNS, card_results, card_sections


def _exports_markdown(exports: dict[str, dict[str, Any]]) -> list[str]:
    """The card's "Exports" section: each ONNX file with its parity check against PyTorch."""
    if not exports:
        return []
    lines = ["", "## Exports", "", "| file | held-out texts | label agreement with PyTorch | max logit difference "
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
        toml_tables(card["config"]).rstrip("\n"),
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

"""What the commands' rendering shares: ``--json``'s one line, the consoles, notes, a label's colour, a text made
safe and short for a table, and :func:`safe`, the one escape of every string of the user's that reaches Rich.
Each command's own tables and panels live beside it, in its module (spaCy's CLI style: ``cli/train.py`` renders train and pretrain, ``cli/evaluate.py`` eval, ...).

Everything here only draws what a library call returned; nothing computes.
"""

from __future__ import annotations

import json
import math
from typing import Any


def json_text(obj: Any, *, ensure_ascii: bool = False) -> str:
    """``obj`` as one line of JSON that any parser reads: never ``NaN`` or ``Infinity`` (Python's ``json``
    writes them, JSON has no such numbers). A non-finite float becomes ``null``; what ``--json`` prints goes
    through here."""
    try:
        return json.dumps(obj, ensure_ascii=ensure_ascii, allow_nan=False)
    except ValueError:   # a NaN or an infinity somewhere: null, as JavaScript's JSON.stringify writes them
        return json.dumps(_finite(obj), ensure_ascii=ensure_ascii, allow_nan=False)


def _finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by ``None``, in dicts, lists and tuples."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def consoles():
    """``(stdout console, stderr console)``."""
    from rich.console import Console
    return Console(), Console(stderr=True)


def safe(value: Any) -> str:
    """``value`` as text Rich prints as it is: every ``[`` that Rich's markup would read as a tag escaped (a label
    ``[/]`` would end in ``MarkupError``, ``[neutral]`` would print as nothing), control characters and bidi
    overrides shown as escapes (:func:`printable`).

    The one escape of the CLI: every string that comes from the user or their data (labels, column names,
    texts, file names, suite and test names, a library's message) goes through it before it reaches a Rich
    console, table cell, title, status or progress description; the markup the CLI writes itself does not.
    """
    from rich.markup import escape
    return escape(printable(str(value)))


def print_note(console, text: str) -> None:
    """A yellow ``note:`` line: something the user should know that did not stop the command."""
    console.print(f"[yellow]note:[/] {safe(text)}", highlight=False, soft_wrap=True)


def label_style(label: str, labels) -> str | None:
    """How to colour a label: with two classes the first red and the second green (IMDB's
    negative / positive); with more, bold (their order need not mean anything)."""
    labels = list(labels)
    if len(labels) == 2 and label in labels:
        return "red" if label == labels[0] else "green"
    return "bold"


def shorten(text: str, width: int) -> str:
    """``text`` on one line (``<br />`` and runs of spaces as one space), cut to ``width`` characters with ``…``."""
    text = " ".join(text.replace("<br />", " ").split())
    return text if len(text) <= width else text[:width - 1].rstrip() + "…"


_BIDI_CONTROLS = set(range(0x202A, 0x202F)) | set(range(0x2066, 0x206A))


def printable(text: str) -> str:
    """``text`` safe for a terminal table: control characters and bidi overrides shown as escapes.

    A review holding ``ESC[2J`` would otherwise clear the user's screen, and a
    right-to-left override would reverse the rest of the table row.
    """
    import unicodedata

    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x100 and unicodedata.category(c) == "Cc"
                   else f"\\u{ord(c):04x}" if ord(c) in _BIDI_CONTROLS else c for c in text)

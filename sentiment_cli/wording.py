"""How counts read in messages, tables and the model card: one place for the plural, and for a list cut short."""

from __future__ import annotations


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, with an ``s`` unless ``count`` is 1: ``plural(1, "row")`` is ``"1 row"``,
    ``plural(2_000, "such row")`` is ``"2,000 such rows"`` (thousands separated). ``noun`` is a phrase whose
    last word takes a plain ``s``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def listed(names, most: int = 20) -> str:
    """At most ``most`` of ``names``, comma-separated, then how many more: ``"a, b and 3 more"``; ``"none"``
    when there are none (a message never lists hundreds of labels on one line)."""
    names = list(names)
    if not names:
        return "none"
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")

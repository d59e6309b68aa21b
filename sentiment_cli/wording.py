"""How counts read in messages, tables and the model card: one place for the plural."""

from __future__ import annotations


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, with an ``s`` unless ``count`` is 1: ``plural(1, "row")`` is ``"1 row"``,
    ``plural(2_000, "such row")`` is ``"2,000 such rows"`` (thousands separated). ``noun`` is a phrase whose
    last word takes a plain ``s``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"

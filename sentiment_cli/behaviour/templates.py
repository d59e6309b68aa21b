"""Templates filled from lexicons, sampled with a seed (CheckList's ``editor.template``, written here).

``{key}`` is an entry of lexicon ``key``, the same one wherever ``{key}`` appears in the template;
``{key1}``, ``{key2}`` (``key`` plus digits, when ``key1`` is no lexicon of its own) are distinct entries of
``key``; ``{a:key}`` puts "a" or "an" before the entry. A template with no placeholder is one sentence.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Mapping, Sequence

PLACEHOLDER = re.compile(r"\{(a:)?([A-Za-z_][A-Za-z0-9_]*)\}")
_VOWEL_SOUND = re.compile(r"^(?:[aeio]|u(?![nts]i|ni|se|ro|tri)|hour|honest|heir)", re.IGNORECASE)


def placeholders(template: str, lexicons: Mapping[str, Sequence[str]]) -> list[tuple[str, str]]:
    """The distinct placeholders of ``template``, in order: ``(key, lexicon)`` (``key`` without ``a:``).

    Raises:
        ValueError: a brace that opens or closes no placeholder.
    """
    rest = PLACEHOLDER.sub("", template)
    if "{" in rest or "}" in rest:
        raise ValueError(f"template {template!r} has a brace outside a {{placeholder}}")
    out: dict[str, str] = {}
    for _, key in PLACEHOLDER.findall(template):
        out.setdefault(key, lexicon_of(key, lexicons))
    return list(out.items())


def lexicon_of(key: str, lexicons: Mapping[str, Sequence[str]]) -> str:
    """The lexicon a placeholder reads: ``key`` itself, else ``key`` without its trailing digits."""
    if key in lexicons:
        return key
    return key.rstrip("0123456789") or key


def article(word: str) -> str:
    """``"a"`` or ``"an"`` for ``word`` (by its first letters: an approximation of English sound rules)."""
    return "an" if _VOWEL_SOUND.match(word) else "a"


def fill(template: str, lexicons: Mapping[str, Sequence[str]], samples: int, rng: random.Random) -> list[str]:
    """Up to ``samples`` distinct sentences from ``template``: every fill when there are at most ``samples``,
    else ``samples`` drawn by ``rng`` (placeholders of one lexicon get distinct entries).

    Args:
        template: the template (checked by :func:`placeholders`).
        lexicons: name -> entries; every placeholder's lexicon must be there.
        samples: at most this many sentences, at least 1.
        rng: the sampler (seeded by the caller, so the cases are the same on every run).

    Returns:
        The sentences, in a stable order.
    """
    keys = placeholders(template, lexicons)
    if not keys:
        return [template]
    pools = [lexicons[lexicon] for _, lexicon in keys]
    if math.prod(len(p) for p in pools) <= samples:
        combos = [c for c in itertools.product(*pools) if _distinct(c, keys)]
    else:
        combos, seen = [], set()
        for _ in range(samples * 20):   # bounded: a crowded product may yield fewer than samples
            combo = tuple(rng.choice(p) for p in pools)
            if combo not in seen and _distinct(combo, keys):
                seen.add(combo)
                combos.append(combo)
                if len(combos) == samples:
                    break
    return [_substitute(template, dict(zip((k for k, _ in keys), combo))) for combo in combos]


def _distinct(combo: Sequence[str], keys: Sequence[tuple[str, str]]) -> bool:
    """Whether placeholders that share a lexicon got distinct entries."""
    by_lexicon: dict[str, set[str]] = {}
    for value, (_, lexicon) in zip(combo, keys):
        if value in by_lexicon.setdefault(lexicon, set()):
            return False
        by_lexicon[lexicon].add(value)
    return True


def _substitute(template: str, values: Mapping[str, str]) -> str:
    def one(match: re.Match) -> str:
        value = values[match.group(2)]
        return f"{article(value)} {value}" if match.group(1) else value

    text = PLACEHOLDER.sub(one, template)
    return text[:1].upper() + text[1:] if template[:1] in "{" and text[:1].islower() else text

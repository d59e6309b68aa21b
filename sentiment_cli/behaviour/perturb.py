"""The perturbations of INV and DIR tests: functions of a text that give changed copies of it.

Written here (CheckList's use a spaCy model, which this tool would have to download). Each takes the text,
a seeded ``random.Random`` and, for ``swap``, ``append`` and ``prepend``, a lexicon's entries, and returns
up to ``n`` distinct copies that differ from the text; none when the perturbation does not apply (a text
with no number for ``number``), and the case is then left out of the test.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Sequence

# Contractions and their long forms, both ways (a text is expanded when it has a contraction, else contracted).
CONTRACTIONS = (
    ("is not", "isn't"), ("are not", "aren't"), ("was not", "wasn't"), ("were not", "weren't"),
    ("do not", "don't"), ("does not", "doesn't"), ("did not", "didn't"), ("cannot", "can't"),
    ("will not", "won't"), ("would not", "wouldn't"), ("could not", "couldn't"), ("should not", "shouldn't"),
    ("have not", "haven't"), ("has not", "hasn't"), ("had not", "hadn't"), ("I am", "I'm"), ("it is", "it's"),
    ("that is", "that's"), ("there is", "there's"), ("what is", "what's"), ("you are", "you're"),
    ("they are", "they're"), ("we are", "we're"), ("I have", "I've"), ("I will", "I'll"), ("I would", "I'd"),
    ("let us", "let's"), ("he is", "he's"), ("she is", "she's"),
)
_DOMAINS = ("example.com", "t.co", "bit.ly", "imdb.com", "reviews.example.org", "youtu.be")


def typo(text: str, rng: random.Random, n: int) -> list[str]:
    """Two adjacent letters of one word swapped (a word of four letters or more), one word per copy."""
    words = [m for m in re.finditer(r"[A-Za-z]{4,}", text)]
    out = []
    for m in rng.sample(words, len(words)):
        i = m.start() + rng.randrange(1, len(m.group()) - 1)   # never the first letter
        if text[i] != text[i + 1]:
            out.append(text[:i] + text[i + 1] + text[i] + text[i + 2:])
    return _distinct(out, text, n)


def contraction(text: str, rng: random.Random, n: int) -> list[str]:
    """Contractions expanded ("isn't" -> "is not") when the text has any, else long forms contracted."""
    expanded = _replace_all(text, [(short, long) for long, short in CONTRACTIONS])
    if expanded != text:
        return [expanded]
    return _distinct([_replace_all(text, CONTRACTIONS)], text, n)


def punctuation(text: str, rng: random.Random, n: int) -> list[str]:
    """The final punctuation mark removed, or a full stop added; and "!" for a final "."."""
    stripped = text.rstrip()
    bare = stripped.rstrip(".!?")
    out = [bare if bare != stripped else stripped + "."]
    if stripped.endswith(".") and not stripped.endswith(".."):
        out.append(stripped[:-1] + "!")
    return _distinct(out, text, n)


LONG_NUMBER = 18   # digits: a longer run is not read as an int


def number(text: str, rng: random.Random, n: int) -> list[str]:
    """A number (a run of digits) changed to another of about its size: between half and twice it, or, for a
    run longer than :data:`LONG_NUMBER` digits (Python refuses ``int`` of over 4,300), random digits of the
    same count."""
    found = list(re.finditer(r"\d+", text))
    out = []
    for _ in range(4 * n):
        if not found:
            break
        m = rng.choice(found)
        if len(m.group()) > LONG_NUMBER:
            other = str(rng.randint(1, 9)) + "".join(rng.choices("0123456789", k=len(m.group()) - 1))
        else:
            value = int(m.group())
            other = str(rng.randint(max(1, value // 2), max(value * 2, value + 9)))
        out.append(text[:m.start()] + other + text[m.end():])
    return _distinct(out, text, n)


def url(text: str, rng: random.Random, n: int) -> list[str]:
    """A link added at the end."""
    out = []
    for _ in range(n):
        path = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(8))
        out.append(f"{text.rstrip()} https://{rng.choice(_DOMAINS)}/{path}")
    return _distinct(out, text, n)


def handle(text: str, rng: random.Random, n: int) -> list[str]:
    """An @handle added at the start or the end."""
    out = []
    for _ in range(n):
        name = "@" + "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 10)))
        out.append(f"{name} {text}" if rng.random() < 0.5 else f"{text.rstrip()} {name}")
    return _distinct(out, text, n)


def swap(text: str, rng: random.Random, n: int, entries: Sequence[str]) -> list[str]:
    """Every occurrence of the first lexicon entry found in the text replaced by another entry (whole words;
    a capital first letter kept)."""
    for entry in sorted(entries, key=len, reverse=True):   # "New York City" before "New York"
        pattern = re.compile(rf"(?<!\w){re.escape(entry)}(?!\w)", re.IGNORECASE)
        if pattern.search(text):
            others = [e for e in entries if e.lower() != entry.lower()]
            picks = rng.sample(others, min(n, len(others)))
            return _distinct([pattern.sub(lambda m, e=e: _same_case(m.group(), e), text) for e in picks], text, n)
    return []


def append(text: str, rng: random.Random, n: int, entries: Sequence[str]) -> list[str]:
    """A lexicon entry (a phrase) added at the end."""
    return _distinct([f"{text.rstrip()} {e}" for e in rng.sample(list(entries), min(n, len(entries)))], text, n)


def prepend(text: str, rng: random.Random, n: int, entries: Sequence[str]) -> list[str]:
    """A lexicon entry (a phrase) added at the start."""
    return _distinct([f"{e} {text}" for e in rng.sample(list(entries), min(n, len(entries)))], text, n)


PERTURBATIONS: dict[str, Callable[..., list[str]]] = {
    "typo": typo, "contraction": contraction, "punctuation": punctuation, "number": number, "url": url,
    "handle": handle, "swap": swap, "append": append, "prepend": prepend,
}
NEEDS_LEXICON = ("swap", "append", "prepend")


def perturbed(name: str, text: str, rng: random.Random, n: int, entries: Sequence[str] | None = None) -> list[str]:
    """Up to ``n`` copies of ``text`` changed by perturbation ``name`` (:data:`PERTURBATIONS`).

    Raises:
        KeyError: an unknown ``name``.
    """
    function = PERTURBATIONS[name]
    return function(text, rng, n, entries) if name in NEEDS_LEXICON else function(text, rng, n)


def _replace_all(text: str, pairs: Sequence[tuple[str, str]]) -> str:
    for old, new in pairs:
        text = re.sub(rf"(?<!\w){re.escape(old)}(?!\w)", lambda m, new=new: _same_case(m.group(), new), text,
                      flags=re.IGNORECASE)
    return text


def _same_case(found: str, new: str) -> str:
    """``new`` with ``found``'s capital first letter, if it had one."""
    return new[:1].upper() + new[1:] if found[:1].isupper() else new


def _distinct(texts: Sequence[str], original: str, n: int) -> list[str]:
    out: list[str] = []
    for t in texts:
        if t != original and t not in out:
            out.append(t)
    return out[:n]

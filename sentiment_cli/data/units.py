"""Which units of text the model reads, measured on the data: ``[data] tokenizer = "auto"``.

Words split at spaces suit text written with spaces between words. Thai, Lao, Khmer, Burmese, Chinese and
Japanese are written without them: a space-split "word" is a phrase or a whole message, seen once, and
both the encoder's vocabulary and the n-gram score's word n-grams learn almost nothing from it (issue 55:
Wisesight's Thai messages, the n-gram score on such words 43.9% test accuracy against 71.8% for a linear
model over character 2-4-grams). There the model reads characters where most of those letters are Han
characters (Chinese; each one a morpheme: Chinese hotel reviews' dev split, the default's search, log-loss 0.2242
against 0.2401 read as Unigram subwords), and otherwise subwords learned from the training texts
(:data:`SUBWORD_UNITS`; Thai, whose letters spell sounds: Wisesight's dev split, the rules' whole run, 73.0%
against 71.1% read as characters, whose encoder added nothing to the n-gram score; docs/decisions.md#text-without-spaces).

The rule (:func:`choose_units`) reads a sample of the training texts: the share of their letters (Unicode
categories L and M, :mod:`unicodedata`) that sit in runs of at least :data:`LONG_RUN` letters without
whitespace or belong to a script written without spaces (:data:`SPACELESS_SCRIPTS`). Above
:data:`CHAR_SHARE` the model reads characters when over :data:`HAN_SHARE` of those letters are Han (``CJK``),
else :data:`SUBWORD_UNITS`; at most, words. The scripts of those letters (the first word of each letter's Unicode
name: ``THAI``, ``CJK``, ``HIRAGANA``) name the reason.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .tokenizer_kind import TokenizerKind

# Scripts written without spaces between words (the first word of their letters' Unicode names); Korean's
# Hangul is written with spaces.
SPACELESS_SCRIPTS = frozenset({"THAI", "LAO", "KHMER", "MYANMAR", "TIBETAN", "CJK", "HIRAGANA", "KATAKANA"})
LONG_RUN = 12        # letters without whitespace: longer than nearly every word of a language written with spaces
CHAR_SHARE = 0.5     # share of letters in such runs above which the text is not read as words
HAN_SHARE = 0.5      # share of those letters that are Han characters above which the text is read as characters
SUBWORD_UNITS = "unigram"   # what other text without spaces is read as ([data] tokenizer)
SCRIPT_NAMES = {"CJK": "Han", "KATAKANA-HIRAGANA": "Kana"}   # how a reason names a script (else its title case)
SAMPLE = 2000        # texts the rule reads, a seeded draw
SAMPLE_CHARS = 1000  # characters of each text it reads


@dataclass(frozen=True)
class Units:
    """The rule's measure and choice.

    Attributes:
        kind: ``"char"``, :data:`SUBWORD_UNITS` or ``"word"`` (``[data] tokenizer``).
        share: share of the sampled letters that are spaceless (:func:`spaceless_letters`), 0 to 1.
        scripts: the most common scripts of those letters, most common first (at most 2).
    """

    kind: str
    share: float
    scripts: tuple[str, ...] = ()

    def reason(self) -> str:
        """Why, in a phrase with the figures (the ``note:`` line of ``train``)."""
        measured = f"{self.share:.0%} of the training texts' letters are in runs of {LONG_RUN} or more without a " \
                   "space or in a script written without spaces"
        if TokenizerKind(self.kind).joined:
            names = " and ".join(SCRIPT_NAMES.get(s, s.title()) for s in self.scripts)
            scripts = f" ({names} script)" if names else ""
            if self.kind == TokenizerKind.CHAR:
                return f"{measured}{scripts}: text written without spaces, mostly in Han characters (each a " \
                       "morpheme), is read as characters"
            return f"{measured}{scripts}: text written without spaces between words is read as subwords learned " \
                   f"from it ({self.kind})"
        return f"{measured} (at most {CHAR_SHARE:.0%}): words, split at spaces"


def _script(ch: str) -> str:
    """The first word of a character's Unicode name (``THAI``, ``CJK``, ``LATIN``), ``""`` when unnamed."""
    return unicodedata.name(ch, "").split(" ", 1)[0]


def spaceless_letters(text: str) -> tuple[int, int, Counter]:
    """``(spaceless letters, letters, their scripts)`` of one text. Letters are Unicode categories L* and M*; a
    letter is spaceless in a run (a maximal stretch without whitespace) of :data:`LONG_RUN` letters or more, or
    when its script is one of :data:`SPACELESS_SCRIPTS` (a short Chinese review is one short run)."""
    spaceless, letters, scripts = 0, 0, Counter()
    for run in text.split():
        names = [_script(ch) for ch in run if unicodedata.category(ch)[0] in "LM"]
        letters += len(names)
        found = names if len(names) >= LONG_RUN else [n for n in names if n in SPACELESS_SCRIPTS]
        spaceless += len(found)
        scripts.update(found)
    return spaceless, letters, scripts


def choose_units(texts: Sequence[str], seed: int = 0) -> Units:
    """The units ``[data] tokenizer = "auto"`` resolves to for these texts (see the module's docstring).

    Args:
        texts: the training texts (any sequence; :data:`SAMPLE` of them are read, the first
            :data:`SAMPLE_CHARS` characters of each).
        seed: draws the sample.

    Returns:
        :class:`Units`; ``"word"`` when the texts hold no letter.
    """
    rows = np.random.default_rng(seed).permutation(len(texts))[:SAMPLE]
    long_letters, letters, scripts = 0, 0, Counter()
    for i in rows:
        lo, n, s = spaceless_letters(str(texts[int(i)])[:SAMPLE_CHARS])
        long_letters, letters = long_letters + lo, letters + n
        scripts.update(s)
    share = long_letters / letters if letters else 0.0
    named = tuple(name for name, _ in scripts.most_common(2) if name)
    if share <= CHAR_SHARE:
        return Units("word", share, named)
    return Units("char" if scripts["CJK"] > HAN_SHARE * long_letters else SUBWORD_UNITS, share, named)


def distinct_char_ngrams(texts: Sequence[str], max_n: int, max_chars: int) -> int:
    """How many distinct character 1-``max_n``-grams ``texts`` hold, as a character tokenizer reads them
    (lowercased, a run of whitespace one space, the first ``max_chars`` characters): what the n-gram score's
    table is sized from with character tokens (``training/auto.py``), rather than from occurrences, which
    repeat far more than words do."""
    seen: set[str] = set()
    for text in texts:
        t = " ".join(str(text).lower().split())[:max_chars]
        for n in range(1, max_n + 1):
            seen.update(t[i:i + n] for i in range(len(t) - n + 1))
    return len(seen)

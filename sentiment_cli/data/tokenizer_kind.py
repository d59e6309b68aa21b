"""What units a tokenizer reads: :class:`TokenizerKind`, the one place that knows what each kind means.

``[data] tokenizer`` names one (``"auto"`` resolves to one: ``data/units.py``); a saved ``tokenizer.json`` is read
back as one (:meth:`TokenizerKind.of`). Every reader of a tokenizer asks this value what it needs (whether its
tokens are subwords, whether a token has character n-grams of its own, whether tokens are joined for display, the
card's phrase) instead of comparing strings.
"""

from __future__ import annotations

from enum import Enum
from typing import Any


class TokenizerKind(str, Enum):
    """The units of a tokenizer; a ``str`` (``TokenizerKind.WORD == "word"``), as ``[data] tokenizer`` spells it."""

    WORD = "word"
    CHAR = "char"
    UNIGRAM = "unigram"
    BPE = "bpe"

    @classmethod
    def of(cls, tokenizer: Any) -> "TokenizerKind":
        """What a built or saved ``tokenizers.Tokenizer`` reads (its model type, and a character split).

        Raises:
            ValueError: a model type this tool does not build.
        """
        model = type(tokenizer.model).__name__
        if model == "WordLevel":
            return cls.CHAR if type(tokenizer.pre_tokenizer).__name__ == "Split" else cls.WORD
        return cls({"Unigram": "unigram", "BPE": "bpe"}.get(model, model.lower()))

    @property
    def subword(self) -> bool:
        """Whether it reads learned subwords (Unigram or BPE, with byte fallback)."""
        return self in (TokenizerKind.UNIGRAM, TokenizerKind.BPE)

    @property
    def has_pieces(self) -> bool:
        """Whether a token has character n-grams of its own (a word or a subword; a character has none)."""
        return self is not TokenizerKind.CHAR

    @property
    def joined(self) -> bool:
        """Whether its tokens are joined without spaces for display (characters and subwords; words are not)."""
        return self is not TokenizerKind.WORD

    def units(self) -> str:
        """The units in words: ``"words"``, ``"characters"``, ``"unigram subwords"``, ``"bpe subwords"``."""
        return {"word": "words", "char": "characters"}.get(self.value, f"{self.value} subwords")

    def vocabulary_phrase(self, size: int, pre_tokenizer: str) -> str:
        """The model card's vocabulary line for ``size`` entries."""
        if self is TokenizerKind.CHAR:
            return f"{size:,} characters (a run of spaces one token, lowercased)"
        if self.subword:
            name = "Unigram" if self is TokenizerKind.UNIGRAM else "BPE"
            return f"{size:,} {name} subwords with byte fallback (lowercased)"
        return f"{size:,} word-level tokens ({pre_tokenizer} pre-tokenizer, lowercased)"

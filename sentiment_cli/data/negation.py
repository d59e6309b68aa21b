"""Negation scope in the token ids: a word a negator governs gets an id of its own, ``id + SCOPE_OFFSET``.

Das & Chen (2001) and Pang, Lee & Vaithyanathan (2002, 4) mark each word between a negator and the next
punctuation mark ("not a good film ." -> "not NOT_a NOT_good NOT_film ."), so that a bag of n-grams tells
"good" from "not ... good". Here the mark is carried by the id: ``id + SCOPE_OFFSET`` (an offset above any
vocabulary), so that every reader of the ids sees it without a second input:

- the n-gram score hashes marked ids as other n-grams (``ngram/features.py``: "NOT_good" is a feature);
- the encoder embeds ``id mod SCOPE_OFFSET`` and adds a learned scope vector where the mark is
  (``model/classifier.py``), so a marked word shares its embedding with the plain one.

``[data] negation_scope`` chooses the rule:

- ``"none"``;
- ``"clause"``: from a negator to the next punctuation mark (a token ending in ``. , ; : ! ?``), as Das & Chen;
- ``"sentence"``: from a negator to the next ``. ; : ! ?`` or contrast word ("but", "however", "although",
  "though", "yet", "whereas"), commas included ("I don't think, given the cast, that it is good"); and a
  negator with nothing to govern (followed by such a stop, or last: "I hoped it would be good, but it was
  not.") marks its sentence up to it, the antecedent of the elided verb phrase.

Negators are the words below, ``n't`` (the ``t`` of "didn't" split off as a token, or a whole "didn't"), and
common misspellings without the apostrophe.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np

from ..untrusted import MAX_VOCAB_SIZE

# Above MAX_VOCAB_SIZE, so a marked id never collides with a vocabulary id; and prime, so that the hashes of
# ngram/features.py and the bigram embedding (id mod buckets, buckets often a power of two) tell it from the
# plain id (2**24 would vanish mod 2**22)
SCOPE_OFFSET = 16_777_259
assert MAX_VOCAB_SIZE < SCOPE_OFFSET
RULES = ("none", "clause", "sentence")

NEGATORS = frozenset({
    "not", "no", "never", "nothing", "nobody", "none", "nowhere", "neither", "nor", "cannot", "without",
    "t",   # the end of "didn't" as the punctuation pre-tokenizer splits it ("didn", "'", "t")
    "dont", "didnt", "doesnt", "isnt", "wasnt", "arent", "werent", "cant", "couldnt", "wouldnt", "shouldnt",
    "wont", "havent", "hasnt", "hadnt", "aint",
})
CLAUSE_END = frozenset(".,;:!?")
STOP_END = frozenset(";:.!?")       # what ends a "sentence" scope: all but the comma
SENTENCE_END = frozenset(".!?")
CONTRAST = frozenset({"but", "however", "although", "though", "yet", "whereas"})

NONE, NEGATOR, CLAUSE, SENTENCE, WORDLESS, STOP = 0, 1, 2, 4, 8, 16   # role bits of a vocabulary entry
_ROLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # tokenizer -> its roles, while it lives


def is_negator(word: str) -> bool:
    """Whether a word (lower case, no trailing punctuation) is a negator: one of :data:`NEGATORS` or a
    ``n't`` contraction."""
    return word in NEGATORS or word.endswith("n't")


def role_of(token: str) -> int:
    """A vocabulary entry's role bits: :data:`NEGATOR`, :data:`CLAUSE` (it ends a clause: its last character
    is ``. , ; : ! ?``), :data:`SENTENCE` (its last character is ``. ! ?``), :data:`STOP` (it ends a
    ``"sentence"`` scope: its last character is ``; : . ! ?``, or it is a contrast word), :data:`WORDLESS` (no letter or
    digit: punctuation, never marked; :func:`token_roles` gives it to the special tokens too)."""
    word = token.rstrip(".,;:!?")
    role = NEGATOR if is_negator(word) else NONE
    if token and token[-1] in CLAUSE_END:
        role |= CLAUSE
    if token and token[-1] in SENTENCE_END:
        role |= SENTENCE
    if (token and token[-1] in STOP_END) or word in CONTRAST:
        role |= STOP
    if not any(c.isalnum() for c in token):
        role |= WORDLESS
    return role


def token_roles(tokenizer) -> np.ndarray:
    """``(vocab_size,)`` uint8 role bits of each id of ``tokenizer``'s vocabulary (:func:`role_of`), cached
    per tokenizer."""
    cached = _ROLES.get(tokenizer)
    if cached is not None:
        return cached
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    roles = np.zeros(max(vocab.values(), default=0) + 1, np.uint8)
    for token, i in vocab.items():
        roles[i] = role_of(token)
    for i, added in tokenizer.get_added_tokens_decoder().items():   # <pad>, <unk>: never marked
        if added.special:
            roles[i] |= WORDLESS
    _ROLES[tokenizer] = roles
    return roles


def mark_scope(ids: Sequence[int], roles: np.ndarray, rule: str) -> list[int]:
    """``ids`` with each id in a negator's scope raised by :data:`SCOPE_OFFSET` (module docstring).

    ``<pad>``, ``<unk>``, negators and punctuation are never marked; a negator inside a scope starts it again.

    Args:
        ids: one text's token ids (the whole tokenization, before truncation).
        roles: :func:`token_roles` of the tokenizer that gave ``ids``.
        rule: one of :data:`RULES`.

    Returns:
        The ids, marked; the same length.
    """
    out = list(ids)
    if rule == "none":
        return out
    ends = CLAUSE if rule == "clause" else STOP
    role_of_id = [int(roles[t]) if t < len(roles) else NONE for t in ids]
    in_scope, sentence_start = False, 0
    for i, (token, role) in enumerate(zip(ids, role_of_id)):
        if in_scope and not role & (NEGATOR | WORDLESS) and not (role & ends and not role & CLAUSE):   # not 'but'
            out[i] = token + SCOPE_OFFSET
        if role & NEGATOR:
            governs = i + 1 < len(ids) and not role_of_id[i + 1] & ends and not role & ends
            if not governs and rule == "sentence":
                _mark_back(out, ids, role_of_id, sentence_start, i)
            in_scope = governs
        elif role & ends:
            in_scope = False
        if role & SENTENCE:
            sentence_start = i + 1
    return out


def _mark_back(out: list[int], ids: Sequence[int], role_of_id: Sequence[int], start: int, stop: int) -> None:
    """Mark ``ids[start:stop]`` (a sentence up to a negator with nothing to govern), negators and punctuation
    aside."""
    for j in range(start, stop):
        token, role = ids[j], role_of_id[j]
        if not role & (NEGATOR | WORDLESS) and out[j] < SCOPE_OFFSET:
            out[j] = token + SCOPE_OFFSET


def vocabulary_id(token_id):
    """The vocabulary id of a (possibly marked) id: ``token_id mod SCOPE_OFFSET``; elementwise on an array or tensor
    of ids (``ngram/features.py``: a marked word's character n-grams are its plain word's)."""
    return token_id % SCOPE_OFFSET

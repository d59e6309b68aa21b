"""Augmentation by rule: sentences of the training reviews, negated, with the label flipped where the rule is safe.

A review's label says little about how negation works: "not" is as common in positive reviews as in negative
ones, and "not good" is one n-gram among thousands. ``[training] negation_augment = N`` adds up to N pairs of
short labelled rows to a two-class sentiment training split (labels negative / positive):

1. the sentences of the training reviews (4 to 25 words), with no negator, no contrast word ("but",
   "although", ...) and no question mark;
2. a sentence whose negated part (the words after the new negator) has a clear polarity that agrees with its
   review: the sum of those words' log-count ratios in the training split (Wang & Manning 2012's ``r``, words
   counted once per review, words in fewer than ``min_reviews`` reviews left out, so names do not count) has
   the review's sign and is among the N largest in size (one sentence per review at most);
3. one rule of English negation applies exactly once: a copula or modal gets "not" after it ("was good" ->
   "was not good", "can recommend" -> "can not recommend"), or a past-tense verb after a subject pronoun
   becomes "did not" + its base form ("I loved it" -> "I did not love it"; the base form is the more frequent
   of the word without "d" and without "ed" in the training split).

Each pair adds the sentence with its review's label and the negated sentence with the other label, so that the
model sees the same words both ways. Polarity shifting by negation is the rule of Polanyi & Zaenen (2006,
"Contextual valence shifters"); it fails for some idioms ("not bad" is weaker than "good"), which is why
only the two-class label set gets it. Deterministic: the same split gives the same rows.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from ..data.labels import LABELS, SENTIMENT_ALIASES
from ..data.negation import is_negator
from ..data.splits import Split
from .policy import DEFAULT

NEGATIVE_NAMES, POSITIVE_NAMES = ((name, *SENTIMENT_ALIASES[name]) for name in LABELS)   # two-class sentiment
CONTRAST = frozenset({"but", "although", "though", "however", "yet", "except", "despite", "while", "whereas",
                      "unless", "if", "whether", "than", "only", "even"})
AUXILIARIES = frozenset({"is", "was", "are", "were", "am", "will", "would", "can", "could", "should", "must",
                         "might", "may"})
SUBJECTS = frozenset({"i", "we", "they", "you", "he", "she"})
MIN_WORDS, MAX_WORDS = 4, 20
_SENTENCE = re.compile(r"[^.!?]+[.!]")
_WORD = re.compile(r"[a-z']+")


def polar_labels(label_names: Sequence[str]) -> tuple[int, int] | None:
    """``(negative id, positive id)`` when the label set is two-class sentiment, else ``None``."""
    names = [n.casefold() for n in label_names]
    if len(names) != 2:
        return None
    neg = next((i for i, n in enumerate(names) if n in NEGATIVE_NAMES), None)
    pos = next((i for i, n in enumerate(names) if n in POSITIVE_NAMES), None)
    return (neg, pos) if neg is not None and pos is not None else None


def negated(sentence: str, base_form: dict[str, str]) -> tuple[str, str] | None:
    """``(negated sentence, scope)``: ``sentence`` with the one negation rule applied (module docstring) and the
    words the new negator governs (the rest of the sentence); ``None`` where no rule applies exactly once, or the
    sentence is unsafe (a negator, a contrast word, a question)."""
    words = _WORD.findall(sentence.lower())
    if not MIN_WORDS <= len(words) <= MAX_WORDS or "?" in sentence:
        return None
    if any(is_negator(w) or w in CONTRAST for w in words):
        return None
    aux = [m for m in re.finditer(r"\b[A-Za-z]+\b", sentence) if m.group().lower() in AUXILIARIES]
    verbs = [m for m in re.finditer(r"\b([A-Za-z]+) ([a-z]+ed)\b", sentence)
             if m.group(1).lower() in SUBJECTS and m.group(2) in base_form]
    if len(aux) + len(verbs) != 1:
        return None
    if aux:
        return sentence[:aux[0].end()] + " not" + sentence[aux[0].end():], sentence[aux[0].end():]
    m = verbs[0]
    return sentence[:m.start(2)] + "did not " + base_form[m.group(2)] + sentence[m.end(2):], sentence[m.start(2):]


def augment(split: Split, pairs: int, min_reviews: int = DEFAULT.fit.augment_min_reviews) -> tuple[Split, int]:
    """``split`` with up to ``pairs`` rule-negated sentence pairs appended (module docstring).

    Args:
        split: the training split; left as it is unless its labels are two-class sentiment.
        pairs: the most pairs to add (0: none).
        min_reviews: a word's log-count ratio counts when this many training texts hold it
            (:attr:`~.policy.FitPolicy.augment_min_reviews`).

    Returns:
        ``(split, added)``: the split (a new one when rows were added) and the number of pairs added.
    """
    ids = polar_labels(split.label_names)
    if not pairs or ids is None or not len(split):
        return split, 0
    neg, pos = ids
    ratio, base_form = word_statistics(split, neg, pos, min_reviews)
    scored = []
    for text, label in zip(split.texts, split.labels):
        best = None
        for sentence in _SENTENCE.findall(text.replace("<br />", " ")):
            sentence = " ".join(sentence.split())
            rule = negated(sentence, base_form)
            if rule is None:
                continue
            flipped, scope = rule
            score = sum(ratio.get(w, 0.0) for w in set(_WORD.findall(scope.lower())))
            agrees = score if label == pos else -score
            if agrees > 0 and (best is None or agrees > best[0]):
                best = (agrees, sentence, flipped)
        if best is not None:
            scored.append((best[0], best[1], best[2], label))
    scored.sort(key=lambda s: -s[0])
    chosen = scored[:pairs]
    texts = [t for _, sentence, flipped, _ in chosen for t in (sentence, flipped)]
    labels = [y for _, _, _, label in chosen for y in (label, pos if label == neg else neg)]
    return Split(split.name, split.texts + texts, split.labels + labels, split.label_names, split.where), len(chosen)


def word_statistics(split: Split, neg: int, pos: int, min_reviews: int) -> tuple[dict[str, float], dict[str, str]]:
    """The words' log-count ratios ``log((1 + p_w) / (1 + n_w)) - log(P / N)`` (reviews of each class holding
    the word, once per review), and each ``-ed`` word's base form by frequency in the split."""
    counts = {neg: Counter(), pos: Counter()}
    totals = Counter(split.labels)
    frequency: Counter = Counter()
    for text, label in zip(split.texts, split.labels):
        words = set(_WORD.findall(text.lower()))
        if label in counts:
            counts[label].update(words)
        frequency.update(words)
    prior = math.log((1 + totals[pos]) / (1 + totals[neg]))
    ratio = {w: math.log((1 + counts[pos][w]) / (1 + counts[neg][w])) - prior for w, n in frequency.items()
             if n >= min_reviews}
    base_form = {}
    for w in frequency:
        if w.endswith("ed") and len(w) > 4:
            options = [b for b in (w[:-1], w[:-2]) if frequency.get(b, 0) > 0]
            if options:
                base_form[w] = max(options, key=lambda b: frequency[b])
    return ratio, base_form

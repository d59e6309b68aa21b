"""A general sentiment lexicon as training rows: what words mean outside the training set.

A model trained on reviews learns a word's polarity from the reviews that hold it, and the reviews barely say what
the commonest words mean: on IMDB "hate" is in 696 training reviews, 43% of them positive, "dislike" in 139, 53%
positive, so "I hate this." reads positive. ``[training] lexicon_prior = N`` adds up to N one-word rows to a
two-class sentiment training split (labels negative / positive): the words of VADER's lexicon (Hutto & Gilbert
2014, "VADER: A Parsimonious Rule-based Model for Sentiment Analysis of Social Media Text", ICWSM; MIT licence,
the ``vaderSentiment`` package), each labelled by the sign of its human-rated valence (-4 to +4), where:

1. **the labels are polarity**: VADER's score of each training text (the mean valence of its words) tells the two
   labels apart with ROC AUC at least :attr:`~.policy.FitPolicy.lexicon_auc`; labels of another meaning that
   happen to be named negative / positive (or whose texts VADER cannot read: another language) get no row;
2. the word's valence is at least :attr:`~.policy.FitPolicy.lexicon_min_valence` in size (the strongest first, each
   as :attr:`~.policy.FitPolicy.lexicon_repeats` rows: one word is one token against a review's hundreds);
3. **the user's labels do not say otherwise**: a word in at least ``augment_min_reviews`` training texts whose
   log-count ratio (``augment.py``; Wang & Manning 2012's ``r``) has the other sign and a size of at least
   :attr:`~.policy.FitPolicy.lexicon_contradiction` is left out: the data's meaning wins.

The rows teach the encoder only, as the rule-negated sentences do (the n-gram score is fitted on the user's rows).
Deterministic: the same split gives the same rows.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Sequence

import numpy as np

from ..data.splits import Split
from .augment import word_statistics, polar_labels
from .policy import DEFAULT, FitPolicy

_WORD = re.compile(r"[a-z']+")


@functools.cache
def vader_lexicon() -> dict[str, float]:
    """VADER's single words (letters only, lower case) and their mean valence (-4 to +4), from the installed
    ``vaderSentiment`` package's ``vader_lexicon.txt``; emoticons and entries with other characters are left out.

    Raises:
        ModuleNotFoundError: ``vaderSentiment`` is not installed.
    """
    text = (importlib.resources.files("vaderSentiment") / "vader_lexicon.txt").read_text(encoding="utf-8")
    out = {}
    for line in text.splitlines():
        word, valence, *_ = line.split("\t") + ["", ""]
        if re.fullmatch(r"[a-z]+", word):
            out[word] = float(valence)
    return out


def polarity_auc(texts: Sequence[str], positive: Sequence[bool], lexicon: dict[str, float]) -> float:
    """ROC AUC (scikit-learn's ``roc_auc_score``) of the texts' lexicon scores (each text's mean valence over its
    words, 0 for a word outside ``lexicon``) against ``positive``: 0.5 says nothing, 1 separates the labels; ``nan``
    with one class only."""
    from sklearn.metrics import roc_auc_score

    y = np.asarray(positive, bool)
    if y.all() or not y.any():
        return float("nan")
    return float(roc_auc_score(y, [_score(t, lexicon) for t in texts]))


def _score(text: str, lexicon: dict[str, float]) -> float:
    words = _WORD.findall(text.lower())
    return sum(lexicon.get(w, 0.0) for w in words) / max(1, len(words))


def lexicon_rows(split: Split, rows: int, policy: FitPolicy = DEFAULT.fit) -> tuple[Split, int, str]:
    """``split`` with up to ``rows`` one-word rows of VADER's lexicon appended (module docstring).

    Args:
        split: the training split (its own rows; other rows may follow them, as the rule-negated sentences do:
            they are read too).
        rows: the most rows to add (0: none).
        policy: the lexicon's numbers (:class:`~.policy.FitPolicy`).

    Returns:
        ``(split, added, reason)``: the split (a new one when rows were added), the rows added (the words times
        :attr:`~.policy.FitPolicy.lexicon_repeats`), and one line
        saying why (the AUC, or why none).
    """
    ids = None if split.multi_label else polar_labels(split.label_names)
    if not rows or ids is None or not len(split):
        return split, 0, "the labels are not one of negative / positive per text"
    neg, pos = ids
    lexicon = vader_lexicon()
    labelled = [(t, y) for t, y in zip(split.texts, split.labels) if y in (neg, pos)]
    auc = polarity_auc([t for t, _ in labelled], [y == pos for _, y in labelled], lexicon)
    if not auc >= policy.lexicon_auc:
        return split, 0, (f"VADER's word scores tell the labels apart with ROC AUC {auc:.2f}, under "
                          f"{policy.lexicon_auc:.2f}: the labels are not read as polarity")
    ratio, _ = word_statistics(split, neg, pos, policy.augment_min_reviews)
    words = []
    for word, valence in lexicon.items():
        if abs(valence) < policy.lexicon_min_valence:
            continue
        r = ratio.get(word, 0.0)
        if r * valence < 0 and abs(r) >= policy.lexicon_contradiction:
            continue   # the user's labels say otherwise
        words.append((-abs(valence), word, pos if valence > 0 else neg))
    chosen = sorted(words)[:max(0, rows // policy.lexicon_repeats)]
    texts = [w for _, w, _ in chosen for _ in range(policy.lexicon_repeats)]
    labels = [y for _, _, y in chosen for _ in range(policy.lexicon_repeats)]
    reason = (f"VADER's word scores tell the labels apart with ROC AUC {auc:.2f} (at least "
              f"{policy.lexicon_auc:.2f}): the labels are polarity")
    return (Split(split.name, split.texts + texts, split.labels + labels, split.label_names, split.where),
            len(texts), reason)

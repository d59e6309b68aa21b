"""What ``suggest`` leaves out: noise-like texts, duplicates, and near-duplicates of a text picked or known.

- **noise-like** texts (:func:`noise_reason`): empty, fewer than ``MIN_WORDS`` words, mostly not letters
  (numbers, symbols, markup), or no word the checkpoint's vocabulary knows (the model reads nothing in it, so
  its "uncertainty" is its prior, not a question about the text). Uncertainty sampling otherwise favours
  exactly these (small-text issue 24);
- **duplicates**: texts equal after :func:`normalise` (case, accents, punctuation and spacing) (:func:`text_key`);
- **near-duplicates**: a cosine similarity of ``NEAR_DUPLICATE`` or more over the texts' binarised hashed word
  1-3-grams (:func:`text_vectors`: the n-gram score's features, ``ngram/features.py``, of the normalised words).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence

import numpy as np

from ..data.tokenizer import UNK_ID
from ..ngram.features import ngram_features, word_ids

MIN_WORDS = 2                 # fewer words than this: nothing to label
MIN_LETTER_SHARE = 0.5        # under this share of letters among the non-space characters: not text
NEAR_DUPLICATE = 0.9          # cosine over binarised word 1-3-grams at or above which two texts are near-duplicates
HASH_FEATURES = 1 << 20       # buckets of the near-duplicate vectors

LEFT_OUT = {   # reason -> what it means, for the summary
    "empty": "no token at all",
    "too short": f"fewer than {MIN_WORDS} words",
    "not text": f"under {MIN_LETTER_SHARE:.0%} of its characters are letters",
    "unknown words only": "no word the checkpoint's vocabulary knows",
    "duplicate": "the same text (after normalising case, accents, punctuation and spaces) as an earlier one",
    "near-duplicate": f"cosine similarity of word 1-3-grams >= {NEAR_DUPLICATE} with a text picked or known",
}
_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalise(text: str) -> str:
    """``text`` for duplicate detection: NFKC, accents stripped, lower case, runs of non-word characters as one
    space."""
    t = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text))
    t = "".join(c for c in t if not unicodedata.combining(c)).casefold()
    return _NON_WORD.sub(" ", t).strip()


def noise_reason(text: str, ids: Sequence[int]) -> str | None:
    """Why ``text`` is noise-like (a key of :data:`LEFT_OUT`), or ``None`` when it is worth labelling.

    Args:
        text: the raw text.
        ids: its token ids under the checkpoint's tokenizer (``<unk>`` = 1).

    Returns:
        ``"empty"``, ``"too short"``, ``"not text"``, ``"unknown words only"`` or ``None``.
    """
    if not ids or not text.strip():
        return "empty"
    if len(_NON_WORD.sub(" ", text).split()) < MIN_WORDS:
        return "too short"
    chars = [c for c in text if not c.isspace()]
    if sum(c.isalpha() for c in chars) < MIN_LETTER_SHARE * len(chars):
        return "not text"
    if all(i <= UNK_ID for i in ids):
        return "unknown words only"
    return None


def text_vectors(texts: Sequence[str]):
    """``(len(texts), HASH_FEATURES + 1)`` float32 scipy CSR: the binarised hashed word 1-3-grams of the normalised
    texts (:func:`~sentiment_cli.ngram.features.ngram_features` of :func:`~sentiment_cli.ngram.features.word_ids`),
    rows of unit L2 norm, so that a row product is a cosine similarity. Independent of any checkpoint."""
    import scipy.sparse as sp

    x = ngram_features([word_ids(normalise(t).split()) for t in texts], HASH_FEATURES)
    norms = np.sqrt(np.diff(x.indptr)).astype(np.float32)                 # a row of n ones has norm sqrt(n)
    return (sp.diags(np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)) @ x).tocsr()


def text_key(text: str) -> bytes:
    """A 16-byte hash of the normalised text: equal for duplicates (see :func:`normalise`)."""
    return hashlib.blake2b(normalise(text).encode("utf-8", "surrogatepass"), digest_size=16).digest()


def not_near_known(vectors, known_vectors) -> np.ndarray:
    """``(m,)`` bool: the rows of ``vectors`` whose cosine with every row of ``known_vectors`` is below
    :data:`NEAR_DUPLICATE`."""
    if known_vectors is None or known_vectors.shape[0] == 0:
        return np.ones(vectors.shape[0], bool)
    best = np.zeros(vectors.shape[0])
    for lo in range(0, known_vectors.shape[0], 4096):   # (m, 4096) similarities at a time
        sims = (vectors @ known_vectors[lo:lo + 4096].T).max(axis=1)
        best = np.maximum(best, sims.toarray().ravel())
    return best < NEAR_DUPLICATE - 1e-6


class Picker:
    """Greedy picking that refuses a candidate too similar to one already picked."""

    def __init__(self, vectors):
        self.vectors = vectors                      # (m, HASH_FEATURES + 1) unit rows
        self.picked: list[int] = []
        self.refused = 0

    def take(self, j: int) -> bool:
        """Pick candidate ``j`` unless its cosine similarity to a picked row reaches ``NEAR_DUPLICATE``;
        whether it was picked."""
        if self.picked:
            sims = (self.vectors[self.picked] @ self.vectors[j].T).toarray().ravel()
            if sims.max() >= NEAR_DUPLICATE - 1e-6:
                self.refused += 1
                return False
        self.picked.append(j)
        return True

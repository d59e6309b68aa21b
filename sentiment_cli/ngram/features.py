"""The n-gram score's features: hashed token 1-n-grams (torch) and their sparse matrices (scipy).

Token ids are hashed one order at a time into ``buckets`` rows, as fastText does (Joulin et al. 2017,
"Bag of Tricks for Efficient Text Classification", 2.2); the score reads each distinct n-gram of a text
once (binarised counts, as NB-LR is fitted; ``[model] ngram_weighting = "sublinear"``: ``1 + ln(count)``).
The torch functions are what the model and its ONNX export run; :func:`ngram_features` builds the same
features as a scipy matrix for the fits, and :func:`word_ids` gives token ids to words without a vocabulary
(``sentiment suggest``'s near-duplicates).

Shapes use ``batch``, ``seq_len`` and ``max_n`` (the longest n-gram, ``[model] ngram_max_n``: 3 for word
tokens, as every checkpoint before it; more for character tokens, whose n-grams are character n-grams
within and across words, as scikit-learn's ``analyzer="char"``). Token id 0 is ``<pad>`` and 1 is
``<unk>``. scipy is imported inside :func:`ngram_features`, so inference never pays for it.

With ``[model] ngram_word_chars`` the score also reads each word's character n-grams (:func:`word_pieces`: the
n-grams of the word within spaces, fastText's subword units, Bojanowski et al. 2017, "Enriching Word Vectors
with Subword Information", 3.2; scikit-learn's ``analyzer="char_wb"``), looked up from a table over the
vocabulary, so the model's one input stays its token ids. ``P`` is :data:`PIECES_PER_WORD`.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..data.negation import vocabulary_id
from ..data.tokenizer import UNK_ID

HASH_MULTIPLIER = 1_000_003   # as the bigram embedding's hash: a prime larger than any vocabulary here
MAX_N = 3                     # the score reads token 1-3-grams unless [model] ngram_max_n says otherwise
WORD_IDS = (1 << 31) - 2      # word_ids' range above <unk>: a hashed word id is in [2, 2**31)
_POSITION_BASE = 1 << 32      # more entries than any review has n-grams
PIECE_MIN_N = 2               # a word's shortest character n-gram (word_pieces), as char_wb 2-5 on Subj's dev
PIECES_PER_WORD = 40          # a word's pieces kept, shortest n first: all of 2-5 for a word of 10 letters
TERM_FREQUENCIES = ("binary", "sublinear")   # what a distinct n-gram of a text counts before its idf
TFIDF = ("tfidf", "sublinear")               # the weightings ([model] ngram_weighting) with an idf


def term_frequency(weighting: str) -> str:
    """What a distinct n-gram of a text counts before its idf under ``[model] ngram_weighting``: ``"sublinear"``
    (``1 + ln(count)``) with that weighting, else ``"binary"`` (1)."""
    return "sublinear" if weighting == "sublinear" else "binary"


def word_pieces(tokens: Sequence[str], buckets: int, max_chars: int) -> np.ndarray:
    """Each vocabulary word's hashed character n-grams, n from :data:`PIECE_MIN_N` to ``max_chars``, of the word
    within spaces (``" good "``: ``" g"``, ``"go"``, ..., ``"od "``; fastText's subword n-grams with its ``<``
    ``>`` as spaces, Bojanowski et al. 2017, 3.2), each distinct piece once, the shorter n first, at most
    :data:`PIECES_PER_WORD`. A piece's bucket is its CRC-32 (stable across runs and machines) mod ``buckets``,
    plus 1; 0 pads a row. ``<pad>`` and ``<unk>`` (ids 0, 1) have none.

    Args:
        tokens: the vocabulary's tokens by id (``tokens[i]`` is id ``i``'s).
        buckets: the n-gram score's hashed buckets (word n-grams and pieces share them).
        max_chars: the longest piece (``[model] ngram_word_chars``), at least :data:`PIECE_MIN_N`.

    Returns:
        ``(len(tokens), PIECES_PER_WORD)`` int32 in ``[0, buckets]``.

    Raises:
        ValueError: ``max_chars`` is below :data:`PIECE_MIN_N`.
    """
    if max_chars < PIECE_MIN_N:
        raise ValueError(f"word pieces need max_chars of at least {PIECE_MIN_N}, got {max_chars}")
    table = np.zeros((len(tokens), PIECES_PER_WORD), np.int32)
    for i, token in enumerate(tokens):
        if i <= UNK_ID or not token:
            continue
        word = f" {token} "
        pieces = dict.fromkeys(word[j:j + n] for n in range(PIECE_MIN_N, max_chars + 1)
                               for j in range(len(word) - n + 1))                 # distinct, in order
        hashed = [zlib.crc32(p.encode("utf-8", "surrogatepass")) % buckets + 1 for p in pieces]
        row = list(dict.fromkeys(hashed))[:PIECES_PER_WORD]
        table[i, :len(row)] = row
    return table


def ngram_buckets(input_ids: Tensor, buckets: int, max_n: int = MAX_N, pieces: Tensor | None = None) -> Tensor:
    """The hashed bucket of each word n-gram ending at each token, for n = 1 .. ``max_n``.

    The hashing trick of fastText (Joulin et al. 2017, 2.2), one order at a time:
    ``h_1 = id mod buckets`` and ``h_n[t] = (h_(n-1)[t-1] * 1_000_003 + id[t]) mod buckets``,
    stored as ``h + 1``. Bucket 0 means "no n-gram": where any of its tokens is ``<pad>`` or
    ``<unk>``, or the review starts within it. Unigrams and longer n-grams share one bucket space.

    Args:
        input_ids: ``(batch, seq_len)`` int64 token ids.
        buckets: number of hashed buckets, at least 1.
        max_n: longest n-gram.
        pieces: ``(vocab_size, P)`` :func:`word_pieces` table, or ``None``: each token's pieces follow its
            n-grams (a word marked in a negator's scope, ``data/negation.py``, has its plain word's pieces).

    Returns:
        ``(batch, seq_len, max_n)`` int64 in ``[0, buckets]``; ``[..., n - 1]`` holds the n-grams; with
        ``pieces``, ``(batch, seq_len, max_n + P)``, ``[..., max_n:]`` the token's pieces.
    """
    token_real = input_ids > UNK_ID                                           # (batch, seq_len)
    hashed, real = input_ids % buckets, token_real                            # the unigrams
    orders = [torch.where(real, hashed + 1, torch.zeros_like(hashed))]
    for _ in range(2, max_n + 1):
        hashed = (nn.functional.pad(hashed, (1, 0))[:, :-1] * HASH_MULTIPLIER + input_ids) % buckets
        real = nn.functional.pad(real, (1, 0), value=False)[:, :-1] & token_real
        orders.append(torch.where(real, hashed + 1, torch.zeros_like(hashed)))
    out = torch.stack(orders, dim=-1)                                        # (batch, seq_len, max_n)
    if pieces is None:
        return out
    words = vocabulary_id(input_ids)                                         # a word marked in a negator's scope
    return torch.cat([out, pieces[words].long()], dim=-1)                    # (batch, seq_len, max_n + P)


def first_occurrences(buckets: Tensor) -> Tensor:
    """Which entries are the first (leftmost) of their bucket in their row, bucket 0 never.

    The score reads binarised counts (an n-gram present or not, as NB-LR is fitted), so a
    repeated n-gram counts once.

    Args:
        buckets: ``(batch, k)`` int64, e.g. :func:`ngram_buckets` flattened to ``(batch, seq_len * max_n)``.

    Returns:
        ``(batch, k)`` bool.
    """
    ordered, order, first = _runs(buckets)
    first = first & (ordered > 0)
    return torch.zeros_like(first).scatter(1, order, first)                  # back to input order


def occurrence_counts(buckets: Tensor) -> Tensor:
    """How many times each row's bucket occurs in that row, at the bucket's first (leftmost) entry; 0 at every
    other entry and at bucket 0: the term frequencies of :func:`first_occurrences`' entries.

    Args:
        buckets: ``(batch, k)`` int64, as :func:`first_occurrences` takes them.

    Returns:
        ``(batch, k)`` int64.
    """
    ordered, order, first = _runs(buckets)
    run = first.long().cumsum(1) - 1                                         # (batch, k) each entry's run
    lengths = torch.zeros_like(run).scatter_add(1, run, torch.ones_like(run))   # (batch, k) each run's length
    counts = torch.where(first & (ordered > 0), lengths.gather(1, run), torch.zeros_like(run))
    return torch.zeros_like(counts).scatter(1, order, counts)                # back to input order


def _runs(buckets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(ordered, order, first)``, each ``(batch, k)``: each row's buckets ascending, the input position of each,
    and whether each is the first of its bucket's run (its leftmost entry in the input)."""
    # Sorting (bucket, position) pairs, all distinct, puts each bucket's leftmost entry first without
    # a stable sort (which ONNX export lacks). The base is a constant, not k, so that an exported
    # graph does not freeze the traced length into it; buckets < 2**22 keep the key below 2**63.
    key = buckets * _POSITION_BASE + torch.arange(buckets.shape[1], device=buckets.device)   # (batch, k)
    ordered_key, order = torch.sort(key, dim=1)                              # (batch, k) each
    ordered = torch.div(ordered_key, _POSITION_BASE, rounding_mode="floor")  # (batch, k) buckets, ascending
    previous = nn.functional.pad(ordered, (1, 0), value=-1)[:, :-1]   # (batch, k): no (k - 1) axis, which
    return ordered, order, ordered != previous                        # torch.export fails to bound at max_n 2


def ngram_features(ids: Sequence[Sequence[int]], buckets: int, batch_size: int = 256, max_n: int = MAX_N,
                   pieces: Tensor | None = None, tf: str = "binary"):
    """Hashed token 1-``max_n``-grams' term frequencies, exactly as :meth:`~.score.NgramScore.token_logits` reads
    them.

    Args:
        ids: token ids per text (as the model gets them: encoded and truncated); an empty text has none.
        buckets: number of hashed buckets.
        batch_size: texts hashed at a time (memory only; the result does not depend on it).
        max_n: the longest n-gram (``[model] ngram_max_n``).
        pieces: the words' character n-grams (:func:`word_pieces`, as a tensor), or ``None``.
        tf: ``"binary"`` (1 for each distinct n-gram) or ``"sublinear"`` (``1 + ln(count)``, scikit-learn's
            ``sublinear_tf``; Manning, Raghavan & Schuetze 2008, "Introduction to Information Retrieval", 6.4.1).

    Returns:
        ``(len(ids), buckets + 1)`` float32 scipy CSR matrix; column 0 ("no n-gram") is empty.

    Raises:
        ValueError: an unknown ``tf``.
    """
    if tf not in TERM_FREQUENCIES:
        raise ValueError(f"unknown term frequency {tf!r}; known: {', '.join(TERM_FREQUENCIES)}")
    import scipy.sparse as sp

    from ..data.batching import collate

    blocks = []
    for lo in range(0, len(ids), batch_size):
        input_ids, _ = collate([row if len(row) else [0] for row in ids[lo:lo + batch_size]])   # <pad>: none
        flat = ngram_buckets(input_ids, buckets, max_n, pieces).flatten(1)      # (batch, seq_len * (max_n + P))
        rows = torch.arange(flat.shape[0]).unsqueeze(1).expand_as(flat)
        keep = flat > 0
        x = sp.csr_matrix((np.ones(int(keep.sum()), np.float32), (rows[keep].numpy(), flat[keep].numpy())),
                          shape=(flat.shape[0], buckets + 1))
        x.sum_duplicates()
        x.data[:] = 1.0 if tf == "binary" else 1.0 + np.log(x.data)
        blocks.append(x)
    return sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, buckets + 1), dtype=np.float32)


def idf_weights(x, min_df: int = 1) -> np.ndarray:
    """Smoothed inverse document frequencies of the n-gram columns ``x`` (the training texts'):
    ``idf = ln((1 + n) / (1 + df)) + 1`` (scikit-learn's ``TfidfVectorizer(smooth_idf=True)``; Sparck Jones
    1972), and 0 for a column fewer than ``min_df`` training texts fill (at least one), so that such an n-gram
    counts in neither the score nor a text's norm (as an n-gram outside a vectorizer's vocabulary, whose
    ``min_df`` left it out).

    Args:
        x: ``(n_texts, n_columns)`` scipy CSR (:func:`ngram_features`; only where its entries lie matters).
        min_df: the fewest training texts an n-gram must be in to count (``[model] ngram_min_df``).

    Returns:
        ``(n_columns,)`` float32.
    """
    df = np.bincount(x.indices, minlength=x.shape[1])
    idf = np.log((1.0 + x.shape[0]) / (1.0 + df)) + 1.0
    return np.where(df >= max(1, min_df), idf, 0.0).astype(np.float32)


def tfidf_rows(x, idf: np.ndarray):
    """TF-IDF rows of n-gram columns: each row ``x * idf`` over its L2 norm (Salton & Buckley 1988), as
    :meth:`~.score.NgramScore.token_logits` weighs them with ``[model] ngram_weighting = "tfidf"`` (binary tf)
    or ``"sublinear"`` (``1 + ln(count)``); a row with no counted n-gram stays zero.

    Args:
        x: ``(n_texts, n_columns)`` scipy CSR of term frequencies (:func:`ngram_features`).
        idf: ``(n_columns,)`` from :func:`idf_weights`.

    Returns:
        ``(n_texts, n_columns)`` float32 CSR.
    """
    import scipy.sparse as sp

    weighted = sp.csr_matrix(x @ sp.diags(idf.astype(np.float32)), dtype=np.float32)
    norms = np.sqrt(np.asarray(weighted.multiply(weighted).sum(axis=1)).ravel())
    return sp.diags(np.where(norms > 0, 1.0 / np.maximum(norms, 1e-12), 0.0).astype(np.float32)) @ weighted


def weighted_rows(x, weighting: str, min_df: int, *others) -> tuple[list, np.ndarray | None]:
    """The rows the fits read under ``[model] ngram_weighting``: with an idf (:data:`TFIDF`), ``x`` and each of
    ``others`` as :func:`tfidf_rows` with the idf of ``x`` (the training texts', :func:`idf_weights` with
    ``min_df``); else all as they are and no idf.

    Args:
        x: ``(n_texts, n_columns)`` scipy CSR of the training texts' term frequencies (:func:`ngram_features`).
        weighting: ``[model] ngram_weighting``.
        min_df: ``[model] ngram_min_df``.
        others: more CSR matrices of the same columns (e.g. the validation texts'), weighed by the same idf.

    Returns:
        ``([x, *others], idf)``: the weighted matrices, and ``(n_columns,)`` float32 or ``None``.
    """
    if weighting not in TFIDF:
        return [x, *others], None
    idf = idf_weights(x, min_df)
    return [tfidf_rows(m, idf) for m in (x, *others)], idf


def word_ids(words: Sequence[str]) -> list[int]:
    """Token ids for ``words`` without a vocabulary: each word's stable hash (BLAKE2b, 8 bytes) in
    ``[2, 2**31)``, above ``<pad>`` and ``<unk>``, so that every word counts in :func:`ngram_features`
    (two words share an id with probability about 2**-31)."""
    return [2 + int.from_bytes(hashlib.blake2b(w.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                               "little") % WORD_IDS for w in words]

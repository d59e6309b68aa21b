"""Token ids into model batches: length buckets (:func:`make_batches`) and padding (:func:`collate`).

Shapes use ``batch`` (reviews) and ``seq_len`` (tokens in the longest review
of the batch). Padding is ``<pad>`` (id 0) and is marked in a boolean
``padding_mask``, ``True`` at padding, as ``SentimentClassifier`` expects.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .tokenizer import PAD_ID


def make_batches(lengths: Sequence[int], batch_size: int, *, shuffle: bool, seed: int = 0,
                 bucket: bool = True, pool_batches: int = 50) -> list[np.ndarray]:
    """Split example indices into batches.

    With ``bucket``, indices are (after shuffling) grouped in pools of
    ``pool_batches * batch_size``, sorted by length inside each pool and cut
    into batches, so a batch holds reviews of similar length and little
    padding; the batch order is then shuffled again. Without ``shuffle`` the
    order is deterministic (sorted by length when bucketing, for fast eval).

    Args:
        lengths: token count of each example.
        batch_size: examples per batch (the last batch may be smaller).
        shuffle: shuffle examples and batches with ``seed``.
        seed: seed for the shuffle (e.g. ``hash`` of run seed and epoch).

    Returns:
        A list of int64 index arrays covering every example exactly once.
    """
    n = len(lengths)
    lengths = np.asarray(lengths)
    rng = np.random.default_rng(seed)
    order = rng.permutation(n) if shuffle else np.arange(n)
    if bucket:
        pool = batch_size * pool_batches if shuffle else max(n, 1)   # no examples: no batch (a step of 0 is no range)
        chunks = [order[i:i + pool] for i in range(0, n, pool)]
        order = np.concatenate([c[np.argsort(lengths[c], kind="stable")] for c in chunks]) if n else order
    batches = [order[i:i + batch_size] for i in range(0, n, batch_size)]
    if shuffle and bucket:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def collate(ids: Sequence[Sequence[int]], indices: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad a batch of token-id lists to the longest one.

    Args:
        ids: token ids per example.
        indices: which examples form the batch (default: all).

    Returns:
        ``(input_ids, padding_mask)``: ``(batch, seq_len)`` int64 and
        ``(batch, seq_len)`` bool, ``True`` at padding.
    """
    rows = [ids[i] for i in indices] if indices is not None else list(ids)
    lengths = torch.tensor([len(r) for r in rows])
    seq_len = int(lengths.max())
    input_ids = torch.full((len(rows), seq_len), PAD_ID, dtype=torch.long)
    for i, r in enumerate(rows):
        input_ids[i, :len(r)] = torch.as_tensor(r, dtype=torch.long)
    # From lengths, not from ids: a literal "<pad>" typed in a review is still a real token.
    padding_mask = torch.arange(seq_len).unsqueeze(0) >= lengths.unsqueeze(1)   # (batch, seq_len)
    return input_ids, padding_mask

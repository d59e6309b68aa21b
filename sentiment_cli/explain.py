"""Exact token-level explanations: which words moved the prediction, and by how much.

The classifier ends in a masked max-pool and a linear head (``model.py``)::

    pooled[f] = hidden[argmax[f], f]          one winning token per feature f
    logits    = W @ pooled + b                W: (2, d_model), b: (2,)

so the logit margin (positive minus negative, the log-odds of "positive")
splits exactly over the tokens that won the pool. With
``w = W[1] - W[0]`` (``(d_model,)``)::

    logits[1] - logits[0] = (b[1] - b[0]) + sum_j score[j]
    score[j]              = sum_f [argmax[f] == j] * pooled[f] * w[f]

A token that won no feature scores exactly 0; padding never wins a feature
(the pool runs over real tokens only), so it never receives a score. The
scores are in logit units: a score of +1 multiplies the odds of "positive"
by e. It is the exact decomposition of a linear function into weight times
input (the "gradient x input" attribution of Shrikumar et al. 2017, which
is exact for linear functions), applied to the features the max-pool
selected. It explains the head given the encoder's token states; those
states mix context through attention, so a token's score is that of the
word in its context, not of the word alone.

Computed in float32 without autocast, so that the decomposition is exact to
float rounding; head dropout is the identity in eval mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .config import DataConfig
from .data import collate
from .model import LABELS, SentimentClassifier, masked_max_pool
# torch-free, shared with the ONNX Runtime path (Explanation re-exported here)
from .prediction import Explanation, token_rows
from .tokenizer import UNK_TOKEN


@dataclass
class TokenScores:
    """Scores for one padded batch.

    Attributes:
        scores: ``(batch, seq_len)`` float32, each token's share of the logit
            margin; exactly 0 at padding and at tokens that won no feature.
        bias: ``b[1] - b[0]``, the part of the margin no token carries.
        logits: ``(batch, 2)`` float32, the model's logits from the same pass.
    """

    scores: Tensor
    bias: float
    logits: Tensor


@torch.inference_mode()
def token_scores(model: SentimentClassifier, input_ids: Tensor, padding_mask: Tensor) -> TokenScores:
    """Split each review's logit margin over its tokens (see the module docstring).

    Args:
        model: the classifier; put in eval mode here (dropout off).
        input_ids: ``(batch, seq_len)`` int64 token ids, on the model's device.
        padding_mask: ``(batch, seq_len)`` bool, ``True`` at padding; each row
            needs at least one real token.

    Returns:
        :class:`TokenScores` on the CPU; for every row ``i``,
        ``scores[i].sum() + bias == logits[i, 1] - logits[i, 0]`` up to float rounding.
    """
    model.eval()
    hidden = model.encode(input_ids, padding_mask).float()            # (batch, seq_len, d_model)
    pooled, argmax = masked_max_pool(hidden, padding_mask)            # (batch, d_model) each
    logits = model.head(model.head_dropout(pooled))                   # (batch, 2)
    weight, bias = model.head.weight.float(), model.head.bias.float()  # (2, d_model), (2,)
    w = weight[1] - weight[0]                                         # (d_model,)
    contributions = pooled * w                                        # (batch, d_model)
    scores = torch.zeros(hidden.shape[:2], dtype=torch.float32, device=hidden.device)  # (batch, seq_len)
    scores.scatter_add_(1, argmax, contributions)
    return TokenScores(scores.cpu(), float(bias[1] - bias[0]), logits.float().cpu())


def explain_texts(model: SentimentClassifier, tokenizer, config: DataConfig, texts: Sequence[str], *,
                  batch_size: int = 64, device: torch.device | str = "cpu") -> list[Explanation]:
    """Explain each review: its prediction and one score per token it was classified on.

    The token ids are those :func:`~sentiment_cli.tokenizer.encode` gives
    (same normalisation and truncation, including ``head_tail``), and each
    token keeps its character span in the review.

    Args:
        model: the classifier (on ``device``).
        tokenizer: its ``tokenizers.Tokenizer``.
        config: the checkpoint's data settings (``max_length``, ``truncation``, ``head_fraction``).
        texts: the reviews.
        batch_size: reviews per forward pass (results do not depend on it).
        device: where the model lives.

    Returns:
        One :class:`Explanation` per text, in input order.
    """
    device = torch.device(device)
    rows = token_rows(tokenizer, config, texts)
    out: list[Explanation] = []
    for lo in range(0, len(rows), batch_size):
        chunk = rows[lo:lo + batch_size]
        input_ids, padding_mask = collate([r[0] for r in chunk])
        ts = token_scores(model, input_ids.to(device), padding_mask.to(device))
        probs = torch.softmax(ts.logits, dim=-1).tolist()
        for i, (ids, spans, positions, n) in enumerate(chunk):
            text = texts[lo + i]
            p = probs[i]
            k = int(p[1] > p[0])
            out.append(Explanation(
                text=text, label=LABELS[k], probability=p[k], probabilities=dict(zip(LABELS, p)),
                tokens=[text[a:b] or UNK_TOKEN for a, b in spans], scores=ts.scores[i, :len(ids)].tolist(),
                bias=ts.bias, ids=ids, spans=spans, positions=positions, num_tokens=n))
    return out

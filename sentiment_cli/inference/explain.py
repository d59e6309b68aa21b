"""Exact token-level explanations: which words moved the prediction, and by how much.

The classifier ends in a masked max-pool and a linear head (``model.py``)::

    pooled[f] = hidden[argmax[f], f]          one winning token per feature f
    logits    = W @ pooled + b                W: (num_labels, d_model), b: (num_labels,)

so any fixed linear combination of the logits splits exactly over the tokens
that won the pool. The one explained is the *margin* of a target class ``k``:
its logit minus the mean of the other classes' logits. With
``w = W[k] - mean_{j != k} W[j]`` (``(d_model,)``)::

    logits[k] - mean_{j != k} logits[j] = (b[k] - mean_{j != k} b[j]) + sum_t score[t]
    score[t]                            = sum_f [argmax[f] == t] * pooled[f] * w[f]

The target is the predicted class when there are three or more classes. With
two it is always the second label (``positive`` for IMDB), so the margin is
``logits[1] - logits[0]``, the log-odds of that label, for every review: a
score's sign says which of the two labels a token pushed towards. (The margin
of the predicted class would flip that sign on reviews predicted as the first
label.)

A token that won no feature scores exactly 0; padding never wins a feature
(the pool runs over real tokens only), so it never receives a score. The
scores are in logit units: with two classes a score of +1 multiplies the odds
of the second label by e. It is the exact decomposition of a linear function
into weight times input (the "gradient x input" attribution of Shrikumar et
al. 2017, which is exact for linear functions), applied to the features the
max-pool selected. It explains the head given the encoder's token states;
those states mix context through attention, so a token's score is that of
the word in its context, not of the word alone.

A model with an n-gram score (``[model] ngram_buckets``) adds a linear term
to the positive logit: ``ngram_scale * (sum of its distinct n-grams' weights +
intercept)``. Each n-gram's share goes to the token that ends it and the
intercept to the bias, so the decomposition stays exact.

Computed in float32 without autocast, so that the decomposition is exact to
float rounding; head dropout is the identity in eval mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..data.batching import collate
from ..config import DataConfig
from ..data.labels import LABELS
from ..model.classifier import SentimentClassifier, masked_max_pool
# torch-free, shared with the ONNX Runtime path (Explanation re-exported here)
from .prediction import Explanation, prediction, token_rows
from ..runtime import inference_attention
from ..data.tokenizer import UNK_TOKEN


@dataclass
class TokenScores:
    """Scores for one padded batch.

    Attributes:
        scores: ``(batch, seq_len)`` float32, each token's share of its row's margin; exactly 0 at
            padding and at tokens that won no feature.
        bias: ``(batch,)`` float32, ``b[k] - mean_{j != k} b[j]`` for each row's target ``k``: the
            part of the margin no token carries.
        logits: ``(batch, num_labels)`` float32, the model's logits from the same pass.
        targets: ``(batch,)`` int64, each row's target class (see the module docstring).
    """

    scores: Tensor
    bias: Tensor
    logits: Tensor
    targets: Tensor


def target_classes(logits: Tensor) -> Tensor:
    """Each row's target class: the second label with two classes, else the predicted (argmax) class.

    Args:
        logits: ``(batch, num_labels)``.

    Returns:
        ``(batch,)`` int64.
    """
    if logits.shape[1] == 2:
        return torch.ones(logits.shape[0], dtype=torch.long, device=logits.device)
    return logits.argmax(dim=1)


def contrast(values: Tensor, targets: Tensor) -> Tensor:
    """``values[k] - mean_{j != k} values[j]`` for each row's target ``k``, over the class dimension.

    The others are summed with a 0/1 mask, so with two classes this is ``values[k] - values[other]``
    exactly (no rounding from adding and removing the target).

    Args:
        values: ``(num_labels, ...)`` (the head's weight or bias).
        targets: ``(batch,)`` class ids.

    Returns:
        ``(batch, ...)``.
    """
    n = values.shape[0]
    others = torch.ones(targets.shape[0], n, dtype=values.dtype, device=values.device)
    others[torch.arange(targets.shape[0]), targets] = 0.0                       # (batch, num_labels)
    shape = (targets.shape[0], n) + (1,) * (values.dim() - 1)
    rest = (values.unsqueeze(0) * others.view(shape)).sum(dim=1) / (n - 1)       # (batch, ...)
    return values[targets] - rest


@torch.inference_mode()
def token_scores(model: SentimentClassifier, input_ids: Tensor, padding_mask: Tensor) -> TokenScores:
    """Split each review's margin (its target class's logit against the others') over its tokens.

    See the module docstring for the target and the formula.

    Args:
        model: the classifier; put in eval mode here (dropout off).
        input_ids: ``(batch, seq_len)`` int64 token ids, on the model's device.
        padding_mask: ``(batch, seq_len)`` bool, ``True`` at padding; each row
            needs at least one real token.

    Returns:
        :class:`TokenScores` on the CPU; for every row ``i`` with target ``k = targets[i]``,
        ``scores[i].sum() + bias[i] == logits[i, k] - mean_{j != k} logits[i, j]`` up to float
        rounding (``logits[i, 1] - logits[i, 0]`` with two classes).
    """
    model.eval()
    with inference_attention(input_ids.device):   # the attention path of batched_logits: the same logits
        hidden = model.hidden_states(input_ids, padding_mask).float()    # (batch, seq_len, d_model)
    pooled, argmax = masked_max_pool(hidden, padding_mask)            # (batch, d_model) each
    logits = model.head(model.head_dropout(pooled))                   # (batch, num_labels)
    weight, bias = model.head.weight.float(), model.head.bias.float()  # (num_labels, d_model), (num_labels,)
    ngram = None
    if model.config.ngram_buckets:   # the n-gram score's share: each n-gram's weight on the token that ends it
        ngram = model.ngram_token_logits(input_ids).float()           # (batch, seq_len, 2)
        logits = logits + ngram.sum(1) + model.ngram_logit_bias()
    targets = target_classes(logits)                                  # (batch,)
    w = contrast(weight, targets)                                     # (batch, d_model)
    contributions = pooled * w                                        # (batch, d_model)
    scores = torch.zeros(hidden.shape[:2], dtype=torch.float32, device=hidden.device)  # (batch, seq_len)
    scores.scatter_add_(1, argmax, contributions)
    bias = contrast(bias, targets)                                    # (batch,)
    if ngram is not None:   # two classes: the target's contrast is +-(positive - negative)
        sign = targets.float() * 2 - 1                                # (batch,)
        scores = scores + sign.unsqueeze(1) * (ngram[..., 1] - ngram[..., 0])
        b = model.ngram_logit_bias().float()
        bias = bias + sign * (b[1] - b[0])
    return TokenScores(scores.cpu(), bias.cpu(), logits.float().cpu(), targets.cpu())


def explain_texts(model: SentimentClassifier, tokenizer, config: DataConfig, texts: Sequence[str], *,
                  batch_size: int = 64, device: torch.device | str = "cpu",
                  labels: Sequence[str] = LABELS, temperature: float = 1.0) -> list[Explanation]:
    """Explain each review: its prediction and one score per token it was classified on.

    The token ids are those :func:`~sentiment_cli.data.tokenizer.encode_texts` gives
    (same normalisation and truncation, including ``head_tail``), and each
    token keeps its character span in the review.

    Args:
        model: the classifier (on ``device``).
        tokenizer: its ``tokenizers.Tokenizer``.
        config: the checkpoint's data settings (``max_length``, ``truncation``, ``head_fraction``).
        texts: the reviews.
        batch_size: reviews per forward pass (results do not depend on it).
        device: where the model lives.
        labels: the class names, by id (``model.num_labels`` of them).
        temperature: the checkpoint's temperature; the probabilities are ``softmax(logits / temperature)``
            (the scores explain the logits, which it does not change).

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
        probs = torch.softmax(ts.logits / temperature, dim=-1).tolist()
        for i, (ids, spans, positions, n) in enumerate(chunk):
            text = texts[lo + i]
            p = prediction(text, probs[i], labels)
            out.append(Explanation(
                text=text, label=p.label, probability=p.probability, probabilities=p.probabilities,
                tokens=[text[a:b] or UNK_TOKEN for a, b in spans], scores=ts.scores[i, :len(ids)].tolist(),
                bias=float(ts.bias[i]), ids=ids, spans=spans, positions=positions, num_tokens=n,
                target=labels[int(ts.targets[i])]))
    return out

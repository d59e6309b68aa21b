"""The masked-language-model objective (``[pretrain] objective = "mlm"``): BERT's corruption, the sampled
softmax's candidates, the prediction head tied to the token embedding, and :class:`MaskedLMObjective`,
one step's loss.

``electra`` (:mod:`.electra`) uses the same pieces for its generator, a small masked language model.
See :mod:`.pretrain`'s docstring for the objective and its sources.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import PretrainConfig
from ..data.tokenizer import UNK_ID

MASK_ID = UNK_ID
FIRST_WORD_ID = 2   # ids below are <pad> and <unk>: never drawn as random words or negatives


class MaskedLMHead(nn.Module):
    """Predicts a masked word from its contextual state; the output matrix is the token embedding.

    Args:
        embedding: the classifier's token embedding, ``(vocab_size, d_model)``; shared, not copied.
    """

    def __init__(self, embedding: nn.Embedding):
        super().__init__()
        d = embedding.embedding_dim
        self.embedding = embedding
        self.transform = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.bias = nn.Parameter(torch.zeros(embedding.num_embeddings))
        # Embedding rows start at N(0, 1), so a dot product with a unit-variance state has variance
        # d_model; scale it back to ~1, or the first logits are ~sqrt(d_model) large and the loss explodes.
        self.scale = embedding.embedding_dim ** -0.5

    def forward(self, hidden: Tensor, candidates: Tensor) -> Tensor:
        """Logits over ``candidates``.

        Args:
            hidden: ``(n, d_model)`` encoder states at the masked positions.
            candidates: ``(k,)`` int64 word ids to score.

        Returns:
            ``(n, k)`` logits.
        """
        h = self.norm(F.gelu(self.transform(hidden))) * self.scale                 # (n, d_model)
        return h @ self.embedding.weight[candidates].T + self.bias[candidates]      # (n, k)


def mask_tokens(input_ids: Tensor, padding_mask: Tensor, mask_fraction: float, vocab_size: int,
                generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """BERT's corruption: choose ``mask_fraction`` of the real tokens; 80% mask, 10% random word, 10% kept.

    Args:
        input_ids: ``(batch, seq_len)`` int64.
        padding_mask: ``(batch, seq_len)`` bool, ``True`` at padding (never chosen).
        mask_fraction: probability that a real token is chosen, in (0, 1).
        vocab_size: random words are drawn from ``[2, vocab_size)``.
        generator: CPU random generator (reproducible masks).

    Returns:
        ``(corrupted, chosen, targets)``: ``(batch, seq_len)`` int64 input,
        ``(batch, seq_len)`` bool positions to predict, ``(n_chosen,)`` original ids.
    """
    shape = input_ids.shape
    u = torch.rand(shape, generator=generator)
    chosen = (torch.rand(shape, generator=generator) < mask_fraction) & ~padding_mask
    random_words = torch.randint(FIRST_WORD_ID, max(vocab_size, FIRST_WORD_ID + 1), shape, generator=generator)
    corrupted = torch.where(chosen & (u < 0.8), torch.full_like(input_ids, MASK_ID), input_ids)
    corrupted = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_words, corrupted)
    return corrupted, chosen, input_ids[chosen]


def sampled_candidates(targets: Tensor, negatives: int, vocab_size: int,
                       generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """The softmax's candidate words: the batch's targets plus ``negatives`` uniform draws.

    With ``negatives >= vocab_size`` the candidates are the whole vocabulary: the exact softmax, which
    costs little on a GPU.

    Args:
        targets: ``(n,)`` int64 word ids to predict.
        negatives: extra words drawn uniformly from ``[2, vocab_size)``; ``vocab_size`` or more: all words.
        vocab_size: vocabulary size.
        generator: CPU random generator.

    Returns:
        ``(candidates, target_index)``: ``(k,)`` sorted unique ids and ``(n,)``
        the position of each target in ``candidates``.
    """
    if negatives >= vocab_size:
        return torch.arange(vocab_size), targets.cpu()
    drawn = torch.randint(FIRST_WORD_ID, max(vocab_size, FIRST_WORD_ID + 1), (negatives,), generator=generator)
    candidates = torch.unique(torch.cat([targets.cpu(), drawn]))                  # sorted
    return candidates, torch.searchsorted(candidates, targets.cpu())


class MaskedLMObjective(nn.Module):
    """One masked-language-model step: corrupt the batch, predict the chosen words from the encoder's states.

    Args:
        model: the encoder being pretrained (a ``SentimentClassifier``); its token embedding is the
            head's output matrix (shared, not copied; the model itself is not registered here).
        config: the ``[pretrain]`` settings (``mask_fraction``, ``negatives``).
        generator: CPU random generator for the masks and the candidates (reproducible runs).
    """

    def __init__(self, model: nn.Module, config: PretrainConfig, generator: torch.Generator):
        super().__init__()
        self.head = MaskedLMHead(model.token_embedding)
        self.config = config
        self.generator = generator

    @classmethod
    def for_run(cls, model: nn.Module, config: Any, generator: torch.Generator) -> "MaskedLMObjective":
        """The step for a pretraining run of ``config`` (the whole config; its registry record names this class)."""
        return cls(model, config.pretrain, generator)

    def forward(self, model: nn.Module, input_ids: Tensor, padding_mask: Tensor) -> tuple[Tensor | None, dict]:
        """The step's loss and its tally.

        Args:
            model: the encoder; ``model.hidden_states`` gives ``(batch, seq_len, d_model)``.
            input_ids: ``(batch, seq_len)`` int64, on the CPU.
            padding_mask: ``(batch, seq_len)`` bool, ``True`` at padding, on the CPU.

        Returns:
            ``(loss, tally)``: the mean cross-entropy over the chosen words (``None`` when none was
            chosen) and sums for the epoch's record: ``loss_sum``, ``correct``, ``count`` (chosen words).
        """
        device = self.head.bias.device
        vocab_size = self.head.embedding.num_embeddings
        corrupted, chosen, targets = mask_tokens(input_ids, padding_mask, self.config.mask_fraction, vocab_size,
                                                 self.generator)
        if not bool(chosen.any()):
            return None, {}
        candidates, target_index = sampled_candidates(targets, self.config.negatives, vocab_size, self.generator)
        hidden = model.hidden_states(corrupted.to(device), padding_mask.to(device))   # (batch, seq_len, d_model)
        logits = self.head(hidden[chosen.to(device)], candidates.to(device))           # (n_chosen, k)
        target_index = target_index.to(device)
        loss = F.cross_entropy(logits.float(), target_index)
        n = int(targets.numel())
        return loss, {"loss_sum": loss.item() * n, "correct": int((logits.argmax(1) == target_index).sum()),
                      "count": n}

    @staticmethod
    def record(tally: dict) -> dict:
        """The epoch's ``metrics.json`` entries from its summed tally."""
        n = max(tally.get("count", 0), 1)
        return {"mlm_loss": tally.get("loss_sum", 0.0) / n, "mlm_accuracy": tally.get("correct", 0) / n,
                "masked_tokens": tally.get("count", 0)}

"""Replaced-token detection (``[pretrain] objective = "electra"``; Clark et al. 2020, "ELECTRA:
Pre-training Text Encoders as Discriminators Rather Than Generators").

A small generator, a masked language model (:mod:`.mlm`), fills the masked positions of each review with
words sampled from its own predictions; the encoder being pretrained, the discriminator, then reads the
filled-in review and says for every real token whether it was replaced. The loss is the generator's
masked-word cross-entropy plus ``rtd_weight`` (the paper's lambda, 50) times the discriminator's binary
cross-entropy. Every real token teaches the discriminator, not only the 15% that are masked, which is
why the paper's small models learn several times more per step than masked language models of the
same size (its section 3.2 and table 1).

As in the paper, the generator shares the token embedding with the discriminator and is smaller: it
has ``generator_layers`` encoder layers of ``[model]``'s ``d_model`` and ``n_heads``, with a quarter of
its ``d_ff``. A sampled word goes to the discriminator without a gradient (the paper's choice: no
adversarial training of the generator). The generator and both heads are dropped after pretraining:
the checkpoint holds the discriminator, an ordinary classifier whose dense head is untrained.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import PretrainConfig
from ..model.classifier import encoder_stack, sinusoidal_encoding
from .mlm import MaskedLMHead, mask_tokens, sampled_candidates


class ElectraGenerator(nn.Module):
    """A small masked language model over the discriminator's token embedding.

    Args:
        embedding: the discriminator's token embedding, ``(vocab_size, d_model)``; shared, not copied.
        model_config: the discriminator's ``[model]`` settings (``d_model``, ``n_heads``, dropout).
        layers: encoder layers of the generator.
        max_length: longest input in tokens (sizes the positional encoding).
    """

    def __init__(self, embedding: nn.Embedding, model_config, layers: int, max_length: int):
        super().__init__()
        d = embedding.embedding_dim
        small = dataclasses.replace(model_config, n_layers=layers, d_ff=max(model_config.d_ff // 4, 1))
        self.embedding = embedding
        self.register_buffer("positional_encoding", sinusoidal_encoding(max_length, d), persistent=False)
        self.norm = nn.LayerNorm(d)
        self.encoder = encoder_stack(small)
        self.head = MaskedLMHead(embedding)

    def forward(self, input_ids: Tensor, padding_mask: Tensor, chosen: Tensor, candidates: Tensor) -> Tensor:
        """Logits over ``candidates`` at the chosen positions.

        Args:
            input_ids: ``(batch, seq_len)`` int64 corrupted ids.
            padding_mask: ``(batch, seq_len)`` bool, ``True`` at padding.
            chosen: ``(batch, seq_len)`` bool, the positions to predict.
            candidates: ``(k,)`` int64 word ids.

        Returns:
            ``(n_chosen, k)`` logits.
        """
        seq_len = input_ids.shape[1]
        x = self.embedding(input_ids) + self.positional_encoding[:seq_len]     # (batch, seq_len, d_model)
        hidden = self.encoder(self.norm(x), src_key_padding_mask=padding_mask)  # (batch, seq_len, d_model)
        return self.head(hidden[chosen], candidates)                           # (n_chosen, k)


class ReplacedTokenHead(nn.Module):
    """The discriminator's head: dense, GELU, and one logit per token (replaced or not).

    Args:
        d_model: width of the encoder's states.
    """

    def __init__(self, d_model: int):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, 1)

    def forward(self, hidden: Tensor) -> Tensor:
        """``(batch, seq_len, d_model)`` states to ``(batch, seq_len)`` logits of "replaced"."""
        return self.out(F.gelu(self.dense(hidden))).squeeze(-1)


def fill_in(input_ids: Tensor, chosen: Tensor, logits: Tensor, candidates: Tensor,
            sampler: torch.Generator) -> Tensor:
    """The discriminator's input: each chosen position holds a word sampled from the generator's softmax.

    Args:
        input_ids: ``(batch, seq_len)`` int64 original ids, on the device.
        chosen: ``(batch, seq_len)`` bool, on the device.
        logits: ``(n_chosen, k)`` the generator's logits over ``candidates``.
        candidates: ``(k,)`` int64 word ids, on the device.
        sampler: a random generator on the device.

    Returns:
        ``(batch, seq_len)`` int64; a sample may equal the original word, and then counts as not replaced.
    """
    probs = torch.softmax(logits.detach().float(), dim=-1)                        # (n_chosen, k)
    drawn = torch.multinomial(probs, 1, generator=sampler).squeeze(1)            # (n_chosen,)
    filled = input_ids.clone()
    filled[chosen] = candidates[drawn]
    return filled


class ElectraObjective(nn.Module):
    """One replaced-token-detection step: the generator's loss plus ``rtd_weight`` times the discriminator's.

    Args:
        model: the encoder being pretrained (a ``SentimentClassifier``, the discriminator); not registered here.
        config: the ``[pretrain]`` settings (``mask_fraction``, ``negatives``, ``generator_layers``,
            ``rtd_weight``).
        generator: CPU random generator for the masks and the candidates.
        seed: seeds the device-side sampler of the generator's words.
    """

    def __init__(self, model: nn.Module, config: PretrainConfig, generator: torch.Generator, seed: int):
        super().__init__()
        self.generator_model = ElectraGenerator(model.token_embedding, model.config, config.generator_layers,
                                                model.max_length)
        self.rtd_head = ReplacedTokenHead(model.token_embedding.embedding_dim)
        self.config = config
        self.generator = generator
        self.seed = seed
        self._sampler: torch.Generator | None = None

    @classmethod
    def for_run(cls, model: nn.Module, config: Any, generator: torch.Generator) -> "ElectraObjective":
        """The step for a pretraining run of ``config`` (the whole config: its ``[training] seed`` seeds the
        sampler; its registry record names this class)."""
        return cls(model, config.pretrain, generator, config.training.seed)

    def _sampler_on(self, device: torch.device) -> torch.Generator:
        if self._sampler is None or self._sampler.device != device:
            self._sampler = torch.Generator(device=device).manual_seed(self.seed)
        return self._sampler

    def forward(self, model: nn.Module, input_ids: Tensor, padding_mask: Tensor) -> tuple[Tensor | None, dict]:
        """The step's loss and its tally.

        Args:
            model: the discriminator; ``model.hidden_states`` gives ``(batch, seq_len, d_model)``.
            input_ids: ``(batch, seq_len)`` int64, on the CPU.
            padding_mask: ``(batch, seq_len)`` bool, ``True`` at padding, on the CPU.

        Returns:
            ``(loss, tally)``: ``None`` and ``{}`` when no token was chosen; the tally sums the
            discriminator's loss (``loss_sum``), right answers (``correct``) and real tokens (``count``),
            the replaced tokens, and the generator's loss, right answers and masked words.
        """
        device = self.rtd_head.out.weight.device
        vocab_size = model.token_embedding.num_embeddings
        corrupted, chosen, targets = mask_tokens(input_ids, padding_mask, self.config.mask_fraction, vocab_size,
                                                 self.generator)
        if not bool(chosen.any()):
            return None, {}
        candidates, target_index = sampled_candidates(targets, self.config.negatives, vocab_size, self.generator)
        ids, mask, chosen = input_ids.to(device), padding_mask.to(device), chosen.to(device)
        candidates, target_index = candidates.to(device), target_index.to(device)
        gen_logits = self.generator_model(corrupted.to(device), mask, chosen, candidates)   # (n_chosen, k)
        gen_loss = F.cross_entropy(gen_logits.float(), target_index)
        filled = fill_in(ids, chosen, gen_logits, candidates, self._sampler_on(device))    # (batch, seq_len)
        replaced = (filled != ids).float()                                                  # (batch, seq_len)
        real = ~mask
        rtd_logits = self.rtd_head(model.hidden_states(filled, mask)).float()              # (batch, seq_len)
        rtd_loss = F.binary_cross_entropy_with_logits(rtd_logits[real], replaced[real])
        loss = gen_loss + self.config.rtd_weight * rtd_loss
        n_real, n_chosen = int(real.sum()), int(targets.numel())
        return loss, {
            "loss_sum": rtd_loss.item() * n_real, "count": n_real,
            "correct": int(((rtd_logits > 0).float() == replaced)[real].sum()),
            "replaced": int(replaced[real].sum()),
            "gen_loss_sum": gen_loss.item() * n_chosen, "gen_count": n_chosen,
            "gen_correct": int((gen_logits.argmax(1) == target_index).sum()),
        }

    @staticmethod
    def record(tally: dict) -> dict:
        """The epoch's ``metrics.json`` entries from its summed tally."""
        n, g = max(tally.get("count", 0), 1), max(tally.get("gen_count", 0), 1)
        return {"rtd_loss": tally.get("loss_sum", 0.0) / n, "rtd_accuracy": tally.get("correct", 0) / n,
                "replaced_fraction": tally.get("replaced", 0) / n,
                "mlm_loss": tally.get("gen_loss_sum", 0.0) / g, "mlm_accuracy": tally.get("gen_correct", 0) / g,
                "masked_tokens": tally.get("gen_count", 0)}

"""The classifier: embeddings + sinusoidal positions -> Transformer encoder -> masked max-pool -> dense head.

A token's embedding is its word's row of the token embedding, plus (with
``bigram_buckets`` > 0) a hashed row for the pair (previous word, this word).

Shapes use ``batch`` (reviews), ``seq_len`` (tokens in the longest review of
the batch, at most ``max_length``) and ``d_model``. Token id 0 is ``<pad>``;
``padding_mask`` is ``True`` at padding positions, as in
``nn.TransformerEncoder``'s ``src_key_padding_mask``.

Unlike the notebook this grew from, padding never influences a real token:
attention ignores padded keys and the max-pool runs over real tokens only, so
a review's logits do not depend on what else is in its batch.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .config import ModelConfig
from .tokenizer import PAD_ID, UNK_ID  # noqa: F401  (re-exported: other modules import them from here)

NUM_LABELS = 2
LABELS = ("negative", "positive")
BIGRAM_HASH_MULTIPLIER = 1_000_003   # a prime larger than any vocabulary here


def sinusoidal_encoding(max_length: int, d_model: int) -> Tensor:
    """Fixed positional encodings of Vaswani et al. 2017 ("Attention Is All You Need", 3.5).

    ``PE[pos, 2i] = sin(pos / 10000^(2i / d_model))`` and
    ``PE[pos, 2i+1] = cos(pos / 10000^(2i / d_model))``.

    Args:
        max_length: number of positions.
        d_model: encoding width; must be even.

    Returns:
        Tensor of shape ``(max_length, d_model)``, float32.

    Raises:
        ValueError: ``d_model`` is odd.
    """
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")
    position = torch.arange(max_length, dtype=torch.float64).unsqueeze(1)          # (max_length, 1)
    inv_freq = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (d_model/2,)
    angles = position * inv_freq                                                     # (max_length, d_model/2)
    pe = torch.zeros(max_length, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.float()


def bigram_buckets(input_ids: Tensor, buckets: int) -> Tensor:
    """The hashed bucket of each token's word bigram (the previous token, this token).

    The hashing trick of fastText (Joulin et al. 2017, "Bag of Tricks for Efficient Text
    Classification", 2.2): ``bucket = (previous * 1_000_003 + current) mod buckets + 1``, so that
    bigrams need no vocabulary of their own (distinct bigrams may share a bucket). Bucket 0 means
    "no bigram": at the first position, and where either token is ``<pad>`` or ``<unk>`` (so word
    dropout, which turns words into ``<unk>``, drops their bigrams too). With head+tail truncation
    the last head token and the first tail token form one bigram that was not in the text.

    Args:
        input_ids: ``(batch, seq_len)`` int64 token ids (below 2**43, far more than any vocabulary).
        buckets: number of hashed buckets, at least 1.

    Returns:
        ``(batch, seq_len)`` int64 in ``[0, buckets]``.
    """
    previous = nn.functional.pad(input_ids[:, :-1], (1, 0), value=PAD_ID)   # (batch, seq_len)
    real = (previous > UNK_ID) & (input_ids > UNK_ID)                         # (batch, seq_len)
    hashed = (previous * BIGRAM_HASH_MULTIPLIER + input_ids) % buckets + 1   # (batch, seq_len)
    return torch.where(real, hashed, torch.zeros_like(hashed))


def masked_max_pool(hidden: Tensor, padding_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Max over real (non-padding) tokens, per feature.

    Args:
        hidden: ``(batch, seq_len, d_model)``.
        padding_mask: ``(batch, seq_len)`` bool, ``True`` at padding. Every row
            must have at least one real token.

    Returns:
        ``(pooled, argmax)``: ``(batch, d_model)`` values and the
        ``(batch, d_model)`` token index that won each feature.
    """
    masked = hidden.masked_fill(padding_mask.unsqueeze(-1), float("-inf"))  # (batch, seq_len, d_model)
    pooled, argmax = masked.max(dim=1)                                       # (batch, d_model) each
    return pooled, argmax


class SentimentClassifier(nn.Module):
    """Transformer encoder sentiment classifier.

    Args:
        config: layer sizes and switches (:class:`ModelConfig`).
        vocab_size: rows of the token embedding (the tokenizer's vocabulary size).
        max_length: longest input, in tokens; sizes the positional-encoding buffer.

    Raises:
        ValueError: ``d_model`` is odd or not divisible by ``n_heads``.
    """

    def __init__(self, config: ModelConfig, vocab_size: int, max_length: int):
        super().__init__()
        if config.d_model % config.n_heads:
            raise ValueError(f"n_heads ({config.n_heads}) must divide d_model ({config.d_model})")
        self.config = config
        self.vocab_size = vocab_size
        self.max_length = max_length
        d = config.d_model
        self.embed_scale = math.sqrt(d) if config.scale_embedding else 1.0
        self.token_embedding = nn.Embedding(vocab_size, d, padding_idx=PAD_ID)
        self.bigram_embedding = None
        if config.bigram_buckets:
            # Row 0 (no bigram) stays zero; the others start at zero, so training starts from the
            # word-only model (and from its word2vec initialisation) and adds what bigrams tell.
            self.bigram_embedding = nn.Embedding(config.bigram_buckets + 1, d, padding_idx=0)
            nn.init.zeros_(self.bigram_embedding.weight)
        # A buffer, not a parameter: fixed, moves with .to(device), not saved in the checkpoint.
        self.register_buffer("positional_encoding", sinusoidal_encoding(max_length, d), persistent=False)
        self.embedding_norm = nn.LayerNorm(d) if config.embedding_norm else nn.Identity()
        self.embedding_dropout = nn.Dropout(config.dropout)
        layer = nn.TransformerEncoderLayer(
            d_model=d, nhead=config.n_heads, dim_feedforward=config.d_ff, dropout=config.dropout,
            activation=config.activation, batch_first=True, norm_first=config.norm_first,
        )
        # nn.TransformerEncoderLayer uses one rate for residual, feed-forward and attention dropout.
        # Attention dropout has its own rate: any rate > 0 makes CPU attention leave the fused
        # flash kernel for the unfused path, 4-5x slower per training step at seq_len 400.
        layer.self_attn.dropout = config.attention_dropout
        # So has the feed-forward hidden layer (d_ff wide, the largest dropout mask): on CPU,
        # drawing that mask took about 1/7 of a training step at d_model 64, d_ff 256.
        layer.dropout = nn.Dropout(config.activation_dropout)
        self.encoder = nn.TransformerEncoder(
            layer, num_layers=config.n_layers, enable_nested_tensor=False,
            # pre-norm stacks need a final LayerNorm; post-norm layers already end with one
            norm=nn.LayerNorm(d) if config.norm_first else None,
        )
        self.head_dropout = nn.Dropout(config.head_dropout)
        self.head = nn.Linear(d, NUM_LABELS)

    def encode(self, input_ids: Tensor, padding_mask: Tensor, embedding_perturbation: Tensor | None = None) -> Tensor:
        """Contextual token states.

        Args:
            input_ids: ``(batch, seq_len)`` int64 token ids, ``seq_len <= max_length``.
            padding_mask: ``(batch, seq_len)`` bool, ``True`` at padding.
            embedding_perturbation: optional ``(batch, seq_len, d_model)`` added to the token
                embeddings (word + bigram) before the positions (adversarial training; its gradient
                is the loss's gradient with respect to the token embeddings).

        Returns:
            ``(batch, seq_len, d_model)``.
        """
        seq_len = input_ids.shape[1]
        x = self.token_embedding(input_ids)                                   # (batch, seq_len, d_model)
        if self.bigram_embedding is not None:
            x = x + self.bigram_embedding(bigram_buckets(input_ids, self.config.bigram_buckets))
        x = x * self.embed_scale                                              # (batch, seq_len, d_model)
        if embedding_perturbation is not None:
            x = x + embedding_perturbation                                    # (batch, seq_len, d_model)
        x = x + self.positional_encoding[:seq_len]                            # broadcast (seq_len, d_model)
        x = self.embedding_dropout(self.embedding_norm(x))
        if x.device.type == "cpu" and not bool(padding_mask.any()):
            # Nothing to mask (one review, or a batch of equal lengths): skip the mask and its
            # checks, whose first call makes torch import sympy (~0.4 s of a cold `predict`).
            padding_mask = None
        if x.device.type == "cpu" and torch.backends.mha.get_fastpath_enabled():
            # The fused inference "fast path" materialises (batch, n_heads, seq_len, seq_len)
            # attention weights; on CPU it is 2-2.5x slower than the SDPA path used in training
            # (bench: seed and default configs, batch 128-512), so inference takes the SDPA path too.
            torch.backends.mha.set_fastpath_enabled(False)
            try:
                return self.encoder(x, src_key_padding_mask=padding_mask)    # (batch, seq_len, d_model)
            finally:
                torch.backends.mha.set_fastpath_enabled(True)
        return self.encoder(x, src_key_padding_mask=padding_mask)            # (batch, seq_len, d_model)

    def forward(self, input_ids: Tensor, padding_mask: Tensor, embedding_perturbation: Tensor | None = None) -> Tensor:
        """Logits for (negative, positive).

        Args:
            input_ids: ``(batch, seq_len)`` int64 token ids.
            padding_mask: ``(batch, seq_len)`` bool, ``True`` at padding; each
                row needs at least one real token.
            embedding_perturbation: optional ``(batch, seq_len, d_model)``, see :meth:`encode`.

        Returns:
            ``(batch, 2)`` logits.
        """
        hidden = self.encode(input_ids, padding_mask, embedding_perturbation)   # (batch, seq_len, d_model)
        pooled, _ = masked_max_pool(hidden, padding_mask)                   # (batch, d_model)
        return self.head(self.head_dropout(pooled))                         # (batch, 2)

    def num_parameters(self) -> dict[str, int]:
        """Parameter counts: ``{"embedding": .., "non_embedding": .., "total": ..}`` (embedding: token and bigram)."""
        emb = sum(e.weight.numel() for e in (self.token_embedding, self.bigram_embedding) if e is not None)
        total = sum(p.numel() for p in self.parameters())
        return {"embedding": emb, "non_embedding": total - emb, "total": total}

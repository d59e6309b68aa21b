"""The classifier: embeddings + sinusoidal positions -> Transformer encoder -> masked max-pool -> dense head.

A token's embedding is its word's row of the token embedding, plus (with
``bigram_buckets`` > 0) a hashed row for the pair (previous word, this word).
The logits may also get the *n-gram score* (``ngram/score.py``): a module fitted
outside gradient descent that gives each token a share of the logits plus a
constant. The one :meth:`SentimentClassifier.forward`
returns a :class:`ClassifierOutput`: the logits and, when asked, each token's
share of them and the constant no token carries, which is what explanations
and the ONNX export read.

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
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..compact_table import CompactTable
from ..config import Config, ModelConfig
from ..data.negation import SCOPE_OFFSET, vocabulary_id
from ..data.tokenizer import PAD_ID, UNK_ID
from ..ngram.score import NgramScore
from .dropout import ByteDropout

BIGRAM_HASH_MULTIPLIER = 1_000_003   # a prime larger than any vocabulary here


def sinusoidal_encoding(max_length: int, d_model: int) -> Tensor:
    """Fixed positional encodings of Vaswani et al. 2017 ("Attention Is All You Need", 3.5).

    ``PE[pos, 2i] = sin(pos / 10000^(2i / d_model))`` and
    ``PE[pos, 2i+1] = cos(pos / 10000^(2i / d_model))``.

    Args:
        max_length: number of positions.
        d_model: encoding width; must be even.

    Returns:
        Tensor of shape ``(max_length, d_model)``, float32, on the default device; under
        ``with torch.device("meta")`` (a model built for its shapes) an empty one: computing it there
        would run through ``torch._refs`` and import ``torch._dynamo`` (see ``model/skeleton.py``).

    Raises:
        ValueError: ``d_model`` is odd.
    """
    if d_model % 2:
        raise ValueError(f"d_model must be even, got {d_model}")
    if torch.get_default_device().type == "meta":
        return torch.empty(max_length, d_model)
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


@dataclass
class ClassifierOutput:
    """What one forward pass gives (the ``SequenceClassifierOutput`` of Hugging Face transformers, with
    the extras an exact explanation needs).

    Attributes:
        logits: ``(batch, num_labels)``, one per class in label-id order.
        token_logits: with ``token_logits=True``, ``(batch, seq_len, num_labels)``: each token's share
            of each class's logit (0 at padding and at tokens that won no pooled feature), so that
            ``token_logits.sum(1) + bias == logits``; else ``None``.
        bias: ``(num_labels,)``, the part of the logits no token carries (the head's bias, plus the
            n-gram score's constant).
    """

    logits: Tensor
    token_logits: Tensor | None
    bias: Tensor


def encoder_stack(config: ModelConfig) -> nn.TransformerEncoder:
    """``n_layers`` post- or pre-norm Transformer encoder layers (Vaswani et al. 2017), batch first.

    ``nn.TransformerEncoderLayer`` uses one dropout rate for the residual, feed-forward and attention
    paths; here attention and the feed-forward hidden layer have rates of their own
    (``attention_dropout``, ``activation_dropout``).
    """
    d = config.d_model
    layer = nn.TransformerEncoderLayer(
        d_model=d, nhead=config.n_heads, dim_feedforward=config.d_ff, dropout=config.dropout,
        activation=config.activation, batch_first=True, norm_first=config.norm_first,
    )
    # Any attention dropout > 0 makes CPU attention leave the fused flash kernel for the unfused
    # path, which materialises every attention matrix and is several times slower, so a model may
    # want residual dropout without it.
    layer.self_attn.dropout = config.attention_dropout
    # The feed-forward hidden layer's mask (d_ff wide) is the largest one drawn; every mask is drawn as bytes
    # (model/dropout.py: torch's float draws were a third of a quiet CPU's training step)
    layer.dropout = ByteDropout(config.activation_dropout)
    layer.dropout1, layer.dropout2 = ByteDropout(config.dropout), ByteDropout(config.dropout)
    return nn.TransformerEncoder(
        layer, num_layers=config.n_layers, enable_nested_tensor=False,
        # pre-norm stacks need a final LayerNorm; post-norm layers already end with one
        norm=nn.LayerNorm(d) if config.norm_first else None,
    )


def pooled_token_logits(pooled: Tensor, argmax: Tensor, seq_len: int, head: nn.Linear) -> Tensor:
    """Each token's share of the head's logits, bias left out.

    The head is linear and each pooled feature ``f`` comes from one token (``argmax[f]``), so
    ``logits[c] = b[c] + sum_t sum_f [argmax[f] == t] * pooled[f] * W[c, f]``: an exact split
    (the "gradient x input" attribution of Shrikumar et al. 2017, exact for linear functions).

    Args:
        pooled: ``(batch, d_model)`` max-pooled features.
        argmax: ``(batch, d_model)`` the token index that won each feature.
        seq_len: tokens per row.
        head: the dense head, weight ``(num_labels, d_model)``.

    Returns:
        ``(batch, seq_len, num_labels)``.
    """
    positions = torch.arange(seq_len, device=pooled.device)                     # (seq_len,)
    won = (argmax.unsqueeze(1) == positions.view(1, -1, 1)).to(pooled.dtype)    # (batch, seq_len, d_model)
    return (won * pooled.unsqueeze(1)) @ head.weight.T                          # (batch, seq_len, num_labels)


class SentimentClassifier(nn.Module):
    """Transformer encoder text classifier.

    Args:
        config: layer sizes and switches (:class:`ModelConfig`).
        vocab_size: rows of the token embedding (the tokenizer's vocabulary size).
        max_length: longest input, in tokens; sizes the positional-encoding buffer.
        num_labels: classes, one output of the dense head each (2 or more).
        negation_scope: the ids carry negation-scope marks (``[data] negation_scope``, ``data/negation.py``):
            the token embedding reads ``id mod SCOPE_OFFSET`` and a learned scope vector is added where
            ``id >= SCOPE_OFFSET``.

    The n-gram score, when ``config`` asks for one (``ngram_buckets`` > 0), is a module mapping
    ``(batch, seq_len)`` token ids to ``(token_logits, bias)``, ``(batch, seq_len, num_labels)`` and
    ``(num_labels,)``; it starts unfitted (zero), and its ``load_hook`` says how its tensors are named
    in a checkpoint.

    Raises:
        ValueError: ``d_model`` is odd or not divisible by ``n_heads``, ``num_labels`` is below 2, or
            the n-gram score does not support ``num_labels``.
    """

    def __init__(self, config: ModelConfig, vocab_size: int, max_length: int, num_labels: int = 2,
                 negation_scope: bool = False):
        super().__init__()
        if config.d_model % config.n_heads:
            raise ValueError(f"n_heads ({config.n_heads}) must divide d_model ({config.d_model})")
        if num_labels < 2:
            raise ValueError(f"num_labels must be at least 2, got {num_labels}")
        self.config = config
        self.vocab_size = vocab_size
        self.max_length = max_length
        self.num_labels = num_labels
        d = config.d_model
        self.embed_scale = math.sqrt(d) if config.scale_embedding else 1.0
        self.token_embedding = nn.Embedding(vocab_size, d, padding_idx=PAD_ID)
        self.bigram_embedding = None
        if config.bigram_buckets:
            # Row 0 (no bigram) stays zero; the others start at zero, so training starts from the
            # word-only model (and from its word2vec initialisation) and adds what bigrams tell.
            self.bigram_embedding = nn.Embedding(config.bigram_buckets + 1, d, padding_idx=0)
            nn.init.zeros_(self.bigram_embedding.weight)
        self.scope_embedding = None
        if negation_scope:
            # Row 0 (outside any scope) stays zero; row 1 starts at zero, so a marked word starts as its plain self.
            self.scope_embedding = nn.Embedding(2, d, padding_idx=0)
            nn.init.zeros_(self.scope_embedding.weight)
        # A buffer, not a parameter: fixed, moves with .to(device), not saved in the checkpoint.
        self.register_buffer("positional_encoding", sinusoidal_encoding(max_length, d), persistent=False)
        self.embedding_norm = nn.LayerNorm(d) if config.embedding_norm else nn.Identity()
        self.embedding_dropout = ByteDropout(config.dropout)
        self.encoder = encoder_stack(config)
        self.head_dropout = ByteDropout(config.head_dropout)
        self.head = nn.Linear(d, num_labels)
        self.ngram_score = NgramScore.from_config(config, num_labels, vocab_size)
        if self.ngram_score is not None:
            self.register_load_state_dict_pre_hook(self.ngram_score.load_hook)

    @classmethod
    def from_config(cls, config: Config, vocab_size: int, num_labels: int = 2) -> "SentimentClassifier":
        """The classifier a run configuration describes, freshly initialised.

        The config holds every setting the model needs (``[model]``, and ``[data] max_length``
        for the positional encoding); only the vocabulary size comes from the tokenizer.

        Args:
            config: the whole run configuration.
            vocab_size: the tokenizer's vocabulary size (rows of the token embedding).
            num_labels: classes (the label set's size; 2 for checkpoints that predate label sets).

        Raises:
            ValueError: as the constructor.
        """
        return cls(config.model, vocab_size=vocab_size, max_length=config.data.max_length, num_labels=num_labels,
                   negation_scope=config.data.negation_scope != "none")

    def hidden_states(self, input_ids: Tensor, padding_mask: Tensor,
                      embedding_perturbation: Tensor | None = None) -> Tensor:
        """Contextual token states.

        Args:
            input_ids: ``(batch, seq_len)`` int64 token ids (marked ones ``+ SCOPE_OFFSET``),
                ``seq_len <= max_length``.
            padding_mask: ``(batch, seq_len)`` bool, ``True`` at padding.
            embedding_perturbation: optional ``(batch, seq_len, d_model)`` added to the token
                embeddings (word + bigram) before the positions (adversarial training; its gradient
                is the loss's gradient with respect to the token embeddings).

        Returns:
            ``(batch, seq_len, d_model)``.
        """
        seq_len = input_ids.shape[1]
        if self.scope_embedding is None:
            x = self.token_embedding(input_ids)                               # (batch, seq_len, d_model)
        else:
            x = self.token_embedding(vocabulary_id(input_ids))                # (batch, seq_len, d_model)
            x = x + self.scope_embedding((input_ids >= SCOPE_OFFSET).long())  # (batch, seq_len, d_model)
        if self.bigram_embedding is not None:
            x = x + self.bigram_embedding(bigram_buckets(input_ids, self.config.bigram_buckets))
        x = x * self.embed_scale                                              # (batch, seq_len, d_model)
        if embedding_perturbation is not None:
            x = x + embedding_perturbation                                    # (batch, seq_len, d_model)
        x = x + self.positional_encoding[:seq_len]                            # broadcast (seq_len, d_model)
        x = self.embedding_dropout(self.embedding_norm(x))
        if x.device.type == "cpu" and not torch.compiler.is_exporting() and not bool(padding_mask.any()):
            # Nothing to mask (one review, or a batch of equal lengths): skip the mask and its
            # checks, whose first call makes torch import sympy (a large share of a cold `predict`).
            # Not while exporting: a data-dependent branch has no graph form, and the mask is exact.
            padding_mask = None
        # Inference on CPU runs this under runtime.inference_attention (the torch backend), so that
        # attention takes the same path as in training.
        return self.encoder(x, src_key_padding_mask=padding_mask)            # (batch, seq_len, d_model)

    def forward(self, input_ids: Tensor, padding_mask: Tensor, embedding_perturbation: Tensor | None = None, *,
                encoder_only: bool = False, token_logits: bool = False) -> ClassifierOutput:
        """Logits, and on request each token's share of them.

        Args:
            input_ids: ``(batch, seq_len)`` int64 token ids.
            padding_mask: ``(batch, seq_len)`` bool, ``True`` at padding; each
                row needs at least one real token.
            embedding_perturbation: optional ``(batch, seq_len, d_model)``, see :meth:`hidden_states`.
            encoder_only: leave the n-gram score out. Training does: on the reviews it was fitted on, the
                score is near-certain and would leave the encoder little to learn.
            token_logits: also compute :attr:`ClassifierOutput.token_logits` (explanations, export).

        Returns:
            :class:`ClassifierOutput`.
        """
        hidden = self.hidden_states(input_ids, padding_mask, embedding_perturbation)   # (batch, seq_len, d_model)
        pooled, argmax = masked_max_pool(hidden, padding_mask)              # (batch, d_model) each
        logits = self.head(self.head_dropout(pooled))                       # (batch, num_labels)
        shares = pooled_token_logits(pooled, argmax, input_ids.shape[1], self.head) if token_logits else None
        bias = self.head.bias
        if self.ngram_score is not None and not encoder_only:
            ngram_shares, ngram_bias = self.ngram_score(input_ids)   # (batch, seq_len, num_labels), (num_labels,)
            logits = logits + ngram_shares.sum(1) + ngram_bias
            bias = bias + ngram_bias
            shares = shares + ngram_shares if shares is not None else None
        return ClassifierOutput(logits, shares, bias)

    def num_parameters(self) -> dict[str, int]:
        """Parameter counts: ``{"embedding": .., "non_embedding": .., "total": ..}`` (embedding: token and bigram,
        counted whole when a compressed checkpoint holds them as their stored rows, ``compact_table.py``)."""
        tables = [e for e in (self.token_embedding, self.bigram_embedding) if e is not None]
        emb = sum(e.numel() if isinstance(e, CompactTable) else e.weight.numel() for e in tables)
        non_embedding = sum(p.numel() for name, p in self.named_parameters()
                            if not name.startswith(("token_embedding.", "bigram_embedding.")))
        return {"embedding": emb, "non_embedding": non_embedding, "total": emb + non_embedding}

"""The classifier: embeddings + sinusoidal positions -> Transformer encoder -> masked max-pool -> dense head.

A token's embedding is its word's row of the token embedding, plus (with
``bigram_buckets`` > 0) a hashed row for the pair (previous word, this word).
With ``ngram_buckets`` > 0 the logits also get an n-gram score: a linear model
over the review's hashed word 1-3-grams (NB-LR, Wang & Manning 2012) that
``train`` fits on the training split (``teacher.fit_ngram_score``) rather
than learns by gradient.

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

from ..config import Config, ModelConfig
from ..data.tokenizer import PAD_ID, UNK_ID

BIGRAM_HASH_MULTIPLIER = 1_000_003   # a prime larger than any vocabulary here
NGRAM_MAX_N = 3                      # the n-gram score reads word 1-3-grams
_POSITION_BASE = 1 << 32             # more entries than any review has n-grams


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


def ngram_buckets(input_ids: Tensor, buckets: int, max_n: int = NGRAM_MAX_N) -> Tensor:
    """The hashed bucket of each word n-gram ending at each token, for n = 1 .. ``max_n``.

    The same hashing trick as :func:`bigram_buckets`, one order at a time:
    ``h_1 = id mod buckets`` and ``h_n[t] = (h_(n-1)[t-1] * 1_000_003 + id[t]) mod buckets``,
    stored as ``h + 1``. Bucket 0 means "no n-gram": where any of its tokens is ``<pad>`` or
    ``<unk>``, or the review starts within it. Unigrams and longer n-grams share one bucket space.

    Args:
        input_ids: ``(batch, seq_len)`` int64 token ids.
        buckets: number of hashed buckets, at least 1.
        max_n: longest n-gram.

    Returns:
        ``(batch, seq_len, max_n)`` int64 in ``[0, buckets]``; ``[..., n - 1]`` holds the n-grams.
    """
    token_real = input_ids > UNK_ID                                           # (batch, seq_len)
    hashed, real = input_ids % buckets, token_real                            # the unigrams
    orders = [torch.where(real, hashed + 1, torch.zeros_like(hashed))]
    for _ in range(2, max_n + 1):
        hashed = (nn.functional.pad(hashed[:, :-1], (1, 0)) * BIGRAM_HASH_MULTIPLIER + input_ids) % buckets
        real = nn.functional.pad(real[:, :-1], (1, 0), value=False) & token_real
        orders.append(torch.where(real, hashed + 1, torch.zeros_like(hashed)))
    return torch.stack(orders, dim=-1)                                       # (batch, seq_len, max_n)


def first_occurrences(buckets: Tensor) -> Tensor:
    """Which entries are the first (leftmost) of their bucket in their row, bucket 0 never.

    The n-gram score reads binarised counts (an n-gram present or not, as NB-LR is fitted), so
    a repeated n-gram counts once.

    Args:
        buckets: ``(batch, k)`` int64, e.g. :func:`ngram_buckets` flattened to ``(batch, seq_len * max_n)``.

    Returns:
        ``(batch, k)`` bool.
    """
    # Sorting (bucket, position) pairs, all distinct, puts each bucket's leftmost entry first without
    # a stable sort (which ONNX export lacks). The base is a constant, not k, so that an exported
    # graph does not freeze the traced length into it; buckets < 2**22 keep the key below 2**63.
    key = buckets * _POSITION_BASE + torch.arange(buckets.shape[1], device=buckets.device)   # (batch, k)
    ordered_key, order = torch.sort(key, dim=1)                              # (batch, k) each
    ordered = torch.div(ordered_key, _POSITION_BASE, rounding_mode="floor")  # (batch, k) buckets, ascending
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    first = first & (ordered > 0)
    return torch.zeros_like(first).scatter(1, order, first)                  # back to input order


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
        num_labels: classes, one output of the dense head each (2 or more).

    Raises:
        ValueError: ``d_model`` is odd or not divisible by ``n_heads``, ``num_labels`` is below 2, or
            the model has an n-gram score (``ngram_buckets`` > 0) and ``num_labels`` is not 2.
    """

    def __init__(self, config: ModelConfig, vocab_size: int, max_length: int, num_labels: int = 2):
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
        # flash kernel for the unfused path, which materialises every attention matrix and is
        # several times slower, so a model may want residual dropout without it.
        layer.self_attn.dropout = config.attention_dropout
        # So has the feed-forward hidden layer: its mask (d_ff wide) is the largest one drawn,
        # and drawing it is a noticeable share of a CPU training step.
        layer.dropout = nn.Dropout(config.activation_dropout)
        self.encoder = nn.TransformerEncoder(
            layer, num_layers=config.n_layers, enable_nested_tensor=False,
            # pre-norm stacks need a final LayerNorm; post-norm layers already end with one
            norm=nn.LayerNorm(d) if config.norm_first else None,
        )
        self.head_dropout = nn.Dropout(config.head_dropout)
        self.head = nn.Linear(d, num_labels)
        if config.ngram_buckets:
            if num_labels != 2:
                raise ValueError(f"the n-gram score needs two classes, got num_labels {num_labels}")
            # Buffers, not parameters: fitted by NB-LR (teacher.fit_ngram_score), never by the
            # optimizer, yet saved with the weights. Row 0 (no n-gram) stays zero.
            self.register_buffer("ngram_weight", torch.zeros(config.ngram_buckets + 1))
            self.register_buffer("ngram_bias", torch.zeros(()))

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
            ValueError: ``d_model`` is odd or not divisible by ``n_heads``, or ``num_labels`` is below 2.
        """
        return cls(config.model, vocab_size=vocab_size, max_length=config.data.max_length, num_labels=num_labels)

    def hidden_states(self, input_ids: Tensor, padding_mask: Tensor, embedding_perturbation: Tensor | None = None) -> Tensor:
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
            # checks, whose first call makes torch import sympy (a large share of a cold `predict`).
            padding_mask = None
        # Inference on CPU runs this under runtime.inference_attention (predict.batched_logits,
        # explain.token_scores), so that attention takes the same path as in training.
        return self.encoder(x, src_key_padding_mask=padding_mask)            # (batch, seq_len, d_model)

    def forward(self, input_ids: Tensor, padding_mask: Tensor, embedding_perturbation: Tensor | None = None,
                ngram_score: bool = True) -> Tensor:
        """Logits, one per class in label-id order.

        Args:
            input_ids: ``(batch, seq_len)`` int64 token ids.
            padding_mask: ``(batch, seq_len)`` bool, ``True`` at padding; each
                row needs at least one real token.
            embedding_perturbation: optional ``(batch, seq_len, d_model)``, see :meth:`hidden_states`.
            ngram_score: add the n-gram score (when the model has one). Training leaves it out:
                on the reviews it was fitted on, the score is near-certain and would leave the
                encoder little to learn (``[training] ngram_residual`` adds a cross-fitted one instead).

        Returns:
            ``(batch, num_labels)`` logits.
        """
        hidden = self.hidden_states(input_ids, padding_mask, embedding_perturbation)   # (batch, seq_len, d_model)
        pooled, _ = masked_max_pool(hidden, padding_mask)                   # (batch, d_model)
        logits = self.head(self.head_dropout(pooled))                       # (batch, num_labels)
        if ngram_score and self.config.ngram_buckets:
            logits = logits + self.ngram_token_logits(input_ids).sum(1) + self.ngram_logit_bias()
        return logits

    def ngram_token_logits(self, input_ids: Tensor) -> Tensor:
        """Each token's share of the n-gram score's logits: the scaled NB-LR weights of the distinct
        n-grams that end at it (a repeated n-gram counts at its first occurrence only).

        The score is a product of experts with the encoder: ``ngram_scale * (w . x + b)`` joins the
        positive class's logit, where ``x`` are the review's binarised hashed 1-3-grams and ``w``, ``b``
        an NB-LR model (Wang & Manning 2012) fitted on the training split.

        Args:
            input_ids: ``(batch, seq_len)`` int64 token ids (the model must have ``ngram_buckets`` > 0).

        Returns:
            ``(batch, seq_len, 2)``: 0 for the negative class, the share of the positive one; summed
            over tokens and added to :meth:`ngram_logit_bias`, the score's logits.
        """
        buckets = ngram_buckets(input_ids, self.config.ngram_buckets)       # (batch, seq_len, max_n)
        flat = buckets.flatten(1)                                           # (batch, seq_len * max_n)
        present = first_occurrences(flat).to(self.ngram_weight.dtype)       # (batch, seq_len * max_n)
        share = (self.ngram_weight[flat] * present).view(buckets.shape).sum(-1)   # (batch, seq_len)
        share = share * self.config.ngram_scale
        return torch.stack([torch.zeros_like(share), share], dim=-1)        # (batch, seq_len, 2)

    def ngram_logit_bias(self) -> Tensor:
        """``(2,)``: the n-gram score's intercept, scaled, on the positive class's logit."""
        b = self.ngram_bias * self.config.ngram_scale
        return torch.stack([torch.zeros_like(b), b])

    def num_parameters(self) -> dict[str, int]:
        """Parameter counts: ``{"embedding": .., "non_embedding": .., "total": ..}`` (embedding: token and bigram)."""
        emb = sum(e.weight.numel() for e in (self.token_embedding, self.bigram_embedding) if e is not None)
        total = sum(p.numel() for p in self.parameters())
        return {"embedding": emb, "non_embedding": total - emb, "total": total}

"""The memory a training run's model takes, estimated before it is allocated, and the refusal of a model this
machine cannot hold.

Each ``[model]`` size has its own bound in the config, but sizes each within bounds can be too big together
(d_model 4,096, d_ff 65,536, 64 layers: 38.7 billion parameters, about 620 GB to train). The estimate counts
the model's tensors exactly (the model built on the ``meta`` device: no memory allocated) at
:data:`TRAINING_BYTES_PER_VALUE` each (float32 weights, gradients and AdamW's two moments), plus the
activations one batch keeps for the backward pass (:func:`activation_bytes`, a lower bound). The n-gram fit's
own bound is ``ngram/memory.py``'s.
"""

from __future__ import annotations

import math

from ..config import Config
from ..errors import ConfigError
from .skeleton import tensor_specs

TRAINING_BYTES_PER_VALUE = 16   # float32 weight + gradient + AdamW's exp_avg and exp_avg_sq
# float32 values a layer keeps per token for the backward pass, in units of d_model and d_ff: the input, the
# norms, Q, K, V, the attention output and its projection, the residual (8 x d_model); the feed-forward
# block's hidden layer before and after its activation (2 x d_ff). Attention's own (seq_len x seq_len)
# probabilities are left out (the fused kernel keeps none), so the figure is a lower bound.
ACTIVATION_D_MODEL, ACTIVATION_D_FF = 8, 2


def model_values(config: Config, vocab_size: int, num_labels: int) -> int:
    """The number of values (parameters and buffers) in the classifier ``config`` describes, counted on the
    ``meta`` device: nothing is allocated, whatever the sizes.

    Raises:
        ValueError: the config describes no model (as :class:`~.classifier.SentimentClassifier`).
    """
    return sum(math.prod(shape) for _, shape in tensor_specs(config, vocab_size, num_labels).values())


def activation_bytes(config: Config, seq_len: int | None = None) -> int:
    """Bytes of the float32 activations one training batch keeps for the backward pass (a lower bound):
    ``n_layers x batch_size x seq_len x (8 d_model + 2 d_ff) x 4``.

    Args:
        config: ``[model]`` sizes and ``[training] batch_size``.
        seq_len: the longest training text in tokens; default ``[data] max_length`` (a batch is padded to its
            longest text, at most that).
    """
    m, tokens = config.model, min(seq_len or config.data.max_length, config.data.max_length)
    per_token = ACTIVATION_D_MODEL * m.d_model + ACTIVATION_D_FF * m.d_ff
    return m.n_layers * config.training.batch_size * tokens * per_token * 4


def training_bytes(config: Config, vocab_size: int, num_labels: int, seq_len: int | None = None) -> int:
    """The memory training the classifier takes, estimated before it is built: its values at
    :data:`TRAINING_BYTES_PER_VALUE` bytes each plus :func:`activation_bytes`, in bytes."""
    return (TRAINING_BYTES_PER_VALUE * model_values(config, vocab_size, num_labels)
            + activation_bytes(config, seq_len))


def check_training_memory(config: Config, vocab_size: int, num_labels: int, available: int | None, where: str,
                          seq_len: int | None = None) -> None:
    """Refuse, before anything is allocated, a model whose training needs more than the ``available`` bytes
    (``runtime.memory_bytes``: the machine's memory, or the GPU's; ``None``: unknown, nothing refused).

    Args:
        where: the memory named in the message (``"this machine"``, ``"the GPU"``).
        seq_len: as :func:`activation_bytes`.

    Raises:
        ConfigError: one line with the figure, the parameters, the memory there is and what to lower.
    """
    if available is None:
        return
    values = model_values(config, vocab_size, num_labels)
    need = TRAINING_BYTES_PER_VALUE * values + activation_bytes(config, seq_len)
    if need <= available:
        return
    m = config.model
    raise ConfigError(f"the model ([model] d_model {m.d_model:,}, d_ff {m.d_ff:,}, n_layers {m.n_layers}, "
                      f"vocabulary {vocab_size:,}: {_count(values)} values) needs about "
                      f"{need / 1e9:,.1f} GB to train (weights, gradients and AdamW's moments, "
                      f"{TRAINING_BYTES_PER_VALUE * values / 1e9:,.1f} GB; a batch's activations, "
                      f"{activation_bytes(config, seq_len) / 1e9:,.1f} GB), more than the {available / 1e9:,.1f} GB "
                      f"of {where}; lower [model] d_model, d_ff or n_layers, or [training] batch_size")


def _count(n: int) -> str:
    """``38.7 billion``, ``21.6 million``, ``5,000``."""
    for size, word in ((1e9, "billion"), (1e6, "million")):
        if n >= size:
            return f"{n / size:,.1f} {word}"
    return f"{n:,}"

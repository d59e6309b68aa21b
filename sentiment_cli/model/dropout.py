"""Dropout whose mask costs less to draw on a CPU: one random byte per element instead of a float.

Dropout (Srivastava et al. 2014, "Dropout: A Simple Way to Prevent Neural Networks from Overfitting") zeroes each
element with probability ``p`` and scales the rest by ``1 / (1 - p)``. torch's CPU kernel draws the mask with
``bernoulli_``, a float per element from one generator thread: on a quiet 2-core CPU it was a third of the IMDB
default's training step (``python -m bench.train_step --profile``; ``docs/decisions.md#the-encoders-step-on-a-cpu``, "The encoder's step on a
quiet CPU"). Here the mask comes from numpy's PCG64 as bytes (a byte per element, about five times cheaper to
draw), seeded from torch's generator, so ``torch.manual_seed`` still fixes a run. ``p`` is rounded to a multiple of
1/256 (0.1 drops 26/256 = 10.16%); the scale is the exact inverse of the kept share, so the expected output is the
input, as with torch's dropout. On another device, or outside training, it is ``nn.functional.dropout``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

_LEVELS = 256   # a byte's values: the mask's resolution


class ByteDropout(nn.Dropout):
    """``nn.Dropout`` (a drop-in: same ``p``, no weights) with its CPU mask drawn as random bytes.

    Args:
        p: the probability of zeroing an element, in ``[0, 1)``; rounded to a multiple of 1/256 when drawn.

    Raises:
        ValueError: ``p`` outside ``[0, 1]`` (as ``nn.Dropout``).
    """

    def forward(self, x: Tensor) -> Tensor:
        """``x`` ``(...)`` with elements zeroed at rate ``p`` and the rest scaled up in training; ``x`` itself
        otherwise."""
        if not self.training or self.p == 0 or x.device.type != "cpu" or self.inplace:
            return nn.functional.dropout(x, self.p, self.training, self.inplace)
        cut = min(round(self.p * _LEVELS), _LEVELS - 1)    # bytes below it are dropped
        keep = byte_mask(x.shape, cut)                      # (...) bool
        return torch.where(keep, x * (_LEVELS / (_LEVELS - cut)), 0.0)


def byte_mask(shape: torch.Size, cut: int) -> Tensor:
    """A bool mask of ``shape``, each element ``True`` with probability ``(256 - cut) / 256``, independently.

    The bytes come from a numpy ``Generator`` (PCG64) seeded by a draw from torch's global CPU generator.

    Args:
        shape: the mask's shape.
        cut: bytes below it are ``False``, 0 to 255.

    Returns:
        ``shape`` bool tensor.
    """
    size = math.prod(shape)
    if not size:
        return torch.ones(shape, dtype=torch.bool)
    seed = int(torch.randint(0, 2**62, (1,)).item())
    draws = np.random.default_rng(seed).bytes(size)
    return torch.frombuffer(bytearray(draws), dtype=torch.uint8).view(shape) >= cut

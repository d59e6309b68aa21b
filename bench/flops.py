"""FLOP accounting of ``python -m bench``: the encoder's matmul FLOPs, and the machine's matmul peak to compare
them with (``GFLOP/s`` and ``of fp32 / bf16 peak`` in the benchmark's table)."""

from __future__ import annotations

import statistics
import time


def encoder_flops(lengths, d_model: int, d_ff: int, n_layers: int, train: bool) -> float:
    """Matmul FLOPs of the encoder over reviews of the given token counts.

    Per layer and review of ``n`` tokens (forward): projections Q, K, V and out
    ``8 n d^2``, attention scores and weighted sum ``4 n^2 d``, feed-forward
    ``4 n d d_ff``. Training counts 3x the forward pass (backward = 2x forward,
    Kaplan et al. 2020). Embedding look-ups, norms and softmax are not counted.
    """
    d = d_model
    fwd = sum(n_layers * (8 * n * d * d + 4 * n * n * d + 4 * n * d * d_ff) for n in lengths)
    return fwd * (3 if train else 1)


def matmul_peak(dtype_name: str, size: int = 2048, repeats: int = 5) -> float:
    """Median GFLOP/s of ``torch.matmul`` on ``size`` x ``size`` matrices of ``dtype_name``."""
    import torch

    dtype = getattr(torch, dtype_name)
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    torch.matmul(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        times.append(time.perf_counter() - start)
    return 2 * size ** 3 / statistics.median(times) / 1e9

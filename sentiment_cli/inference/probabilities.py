"""Torch-free: probabilities from logits, ``softmax(logits / T)`` with a checkpoint's temperature ``T``.

The one post-processing of logits: both backends' predictions (``inference/prediction.py``), the calibration
metrics (``evaluation/calibration.py``) and the audit's fits use it. NumPy only, so ``predict --onnx`` and
``serve --onnx`` stay without torch.
"""

from __future__ import annotations

import numpy as np


def softmax(logits: np.ndarray, temperature: float = 1.0, dtype=np.float64) -> np.ndarray:
    """Softmax of ``logits / temperature`` over the last axis, max subtracted (Guo et al. 2017, 4.2).

    Args:
        logits: ``(n, num_labels)``.
        temperature: ``T > 0``; 1 leaves the logits as they are. It never changes the argmax.
        dtype: the arithmetic's precision: float64 for the calibration metrics, float32 for predictions
            (the precision of the model's logits).

    Returns:
        ``(n, num_labels)`` probabilities of ``dtype``; each row sums to 1.
    """
    z = np.asarray(logits, dtype=dtype)
    if temperature != 1.0:
        z = z / dtype(temperature)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)

"""``suggest``'s diverse strategy: uncertainty spread over the space (Zhdanov 2019).

The ``CANDIDATES_PER_PICK * n`` most uncertain texts are clustered into ``n`` clusters by k-means weighted by
their uncertainty, over their word 1-3-grams reduced by LSA (``space="ngram"``) or over the model's max-pooled
encoder states (``"encoder"``), and the most uncertain text of each cluster is picked: the "diverse mini-batch"
recipe of Zhdanov 2019 ("Diverse mini-batch Active Learning", arXiv:1901.05954).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import UsageError
from .exclusions import Picker

LSA_DIMENSIONS = 64


def pooled_states(predictor: Any, texts: Sequence[str]) -> np.ndarray:
    """``(len(texts), d_model)`` float32: the checkpoint's max-pooled encoder states (the head's input), in input order.

    Raises:
        UsageError: the predictor has no PyTorch model (an ONNX file).
    """
    from ..inference.torch_backend import batched_pooled

    backend = predictor.backend
    if not hasattr(backend, "checkpoint"):
        raise UsageError("the diverse strategy reads the model's encoder states; give a checkpoint folder, not ONNX")
    ids = predictor.preprocess(texts, check=False)
    return batched_pooled(backend.checkpoint.model, ids, batch_size=backend.batch_size, device=backend.device)


def diverse(predictor: Any, texts: list[str], scores: np.ndarray, n: int, seed: int, picker: Picker,
             space: str = "encoder") -> np.ndarray:
    """Pick the most uncertain text of each of ``n`` clusters (Zhdanov 2019) into ``picker``.

    k-means (scikit-learn, k-means++ seeding, one run) over the candidates' L2-normalised max-pooled encoder states
    (``space="encoder"``) or LSA vectors of their word 1-3-grams (``"ngram"``), each weighted by its uncertainty;
    clusters are visited best member first, round after round, until ``n`` are picked or the candidates run out.

    Args:
        texts: the candidates ``(m,)``, most uncertain first.
        scores: ``(m,)`` their uncertainty.

    Returns:
        ``(m,)`` int: each candidate's cluster.
    """
    from sklearn.cluster import KMeans

    if len(texts) == 0:
        return np.zeros(0, np.int64)
    if space == "encoder":
        x = pooled_states(predictor, texts).astype(np.float64)              # (m, d_model)
    else:
        from sklearn.decomposition import TruncatedSVD

        v = picker.vectors[:, np.unique(picker.vectors.indices)]            # the used buckets only: a fast SVD
        dims = min(LSA_DIMENSIONS, len(texts) - 1, v.shape[1] - 1)
        x = (TruncatedSVD(dims, random_state=seed).fit_transform(v) if dims >= 1
             else v.toarray()).astype(np.float64)                           # (m, dims)
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    k = min(n, len(texts), len(np.unique(x, axis=0)))
    clusters = KMeans(n_clusters=k, n_init=1, random_state=seed).fit_predict(x, sample_weight=scores + 1e-6)
    members = [list(np.flatnonzero(clusters == c)) for c in range(k)]     # each most uncertain first
    members = [js for js in members if js]
    members.sort(key=lambda js: js[0])
    while len(picker.picked) < n and any(members):
        for js in members:
            while js and len(picker.picked) < n:
                if picker.take(js.pop(0)):
                    break
    return clusters

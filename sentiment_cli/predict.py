"""Score reviews with a trained checkpoint. Imports neither ``datasets`` nor the CLI.

A :class:`Predictor` loads a checkpoint once and scores texts in batches; a
review's result does not depend on the other reviews in its batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import torch

from .checkpoint import load_checkpoint
from .evaluate import batched_logits
from .model import LABELS
# torch-free, shared with the ONNX Runtime path (re-exported here)
from .prediction import Prediction, check_texts, chunked as _chunked  # noqa: F401
from .tokenizer import encode


class Predictor:
    """Loads ``directory`` once; :meth:`predict` scores texts.

    Args:
        directory: a checkpoint folder written by ``sentiment train``.
        device: ``cpu``, ``cuda`` or a :class:`torch.device`.
        batch_size: reviews per forward pass; default: the checkpoint's ``[training] eval_batch_size``.

    Raises:
        CheckpointError: the checkpoint is missing or unusable.
        ValueError: ``batch_size`` is less than 1.
    """

    def __init__(self, directory: str | Path, device: str | torch.device = "cpu", batch_size: int | None = None):
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.device = torch.device(device)
        self.checkpoint = load_checkpoint(directory, self.device)
        self.batch_size = self.config.training.eval_batch_size if batch_size is None else batch_size

    @property
    def config(self):
        return self.checkpoint.config

    @property
    def labels(self) -> list[str]:
        """The label names by id (the one place callers such as ``serve`` read them from)."""
        return list(LABELS)

    def logits(self, texts: Sequence[str], *, first: int = 1) -> torch.Tensor:
        """``(len(texts), 2)`` logits, in input order.

        Args:
            texts: the reviews.
            first: number of ``texts[0]`` in error messages (for streams scored in chunks).

        Raises:
            UsageError: a text is empty or only whitespace, or is not valid Unicode
                (an unpaired surrogate); the message gives its number.
        """
        check_texts(texts, first)
        ids = encode(self.checkpoint.tokenizer, texts, self.config.data)
        return batched_logits(self.checkpoint.model, ids, batch_size=self.batch_size, device=self.device,
                              bf16=self.config.training.autocast_bf16)

    def predict(self, texts: Sequence[str], *, first: int = 1) -> list[Prediction]:
        """Label and probabilities for each text, in input order.

        Raises:
            UsageError: as :meth:`logits`.
        """
        if not texts:
            return []
        probs = torch.softmax(self.logits(texts, first=first), dim=-1)   # (n, 2)
        out = []
        for text, p in zip(texts, probs.tolist()):
            k = int(p[1] > p[0])
            out.append(Prediction(text, LABELS[k], p[k], dict(zip(LABELS, p))))
        return out

    def predict_stream(self, texts: Iterable[str], chunk: int = 1024) -> Iterator[Prediction]:
        """Score an iterable lazily, ``chunk`` texts at a time: memory is bounded by ``chunk``, not the input.

        Raises:
            UsageError: as :meth:`logits`, numbering texts from the start of the stream.
        """
        return _chunked(texts, chunk, self.predict)

    def explain(self, texts: Sequence[str], *, first: int = 1) -> list["Explanation"]:
        """Prediction and per-token scores for each text, in input order (see :mod:`sentiment_cli.explain`).

        Raises:
            UsageError: as :meth:`logits`.
        """
        from .explain import explain_texts

        check_texts(texts, first)
        return explain_texts(self.checkpoint.model, self.checkpoint.tokenizer, self.config.data, texts,
                             batch_size=self.batch_size, device=self.device)

    def explain_stream(self, texts: Iterable[str], chunk: int = 256) -> Iterator["Explanation"]:
        """Explain an iterable lazily, ``chunk`` texts at a time (bounded memory)."""
        return _chunked(texts, chunk, self.explain)

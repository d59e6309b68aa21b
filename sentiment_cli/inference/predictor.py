"""Score reviews with a trained checkpoint. Imports neither ``datasets`` nor the CLI.

:func:`batched_logits` runs the model over token ids in length-bucketed
batches; a :class:`Predictor` loads a checkpoint once and turns texts into
:class:`Prediction` objects. A review's result does not depend on the other
reviews in its batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import torch

from ..data.batching import collate, make_batches
from ..checkpoint import load_checkpoint
from ..model.classifier import SentimentClassifier
# torch-free, shared with the ONNX Runtime path (re-exported here)
from .prediction import Prediction, check_texts, chunked as _chunked, prediction  # noqa: F401
from ..runtime import autocast, inference_attention
from ..data.tokenizer import encode_texts


@torch.inference_mode()
def batched_logits(model: SentimentClassifier, ids: Sequence[Sequence[int]], *, batch_size: int,
                   device: torch.device, bf16: bool = False,
                   on_batch: Callable[[int], None] | None = None) -> torch.Tensor:
    """Logits for every example, in input order.

    Examples are batched by length (little padding); thanks to the padding
    mask, the result for one example does not depend on its batch.

    Args:
        model: the classifier (put in eval mode here).
        ids: token ids per example (each 1 to ``max_length`` long).
        batch_size: examples per forward pass.
        device: where the model lives.
        bf16: run the forward pass under bf16 autocast.
        on_batch: called with the size of each finished batch (progress).

    Returns:
        ``(len(ids), num_labels)`` float32 logits on the CPU.
    """
    model.eval()
    out = torch.empty(len(ids), model.num_labels)
    with inference_attention(device):
        for batch in make_batches([len(x) for x in ids], batch_size, shuffle=False, bucket=True):
            input_ids, padding_mask = collate(ids, batch)
            with autocast(device, bf16):
                logits = model(input_ids.to(device), padding_mask.to(device))
            out[torch.as_tensor(batch)] = logits.float().cpu()
            if on_batch is not None:
                on_batch(len(batch))
    return out


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
    def labels(self) -> tuple[str, ...]:
        """The class names, by id: the model's outputs, in order."""
        return self.checkpoint.labels

    def logits(self, texts: Sequence[str], *, first: int = 1) -> torch.Tensor:
        """``(len(texts), num_labels)`` logits, in input order (before the temperature).

        Args:
            texts: the reviews.
            first: number of ``texts[0]`` in error messages (for streams scored in chunks).

        Raises:
            UsageError: a text is empty or only whitespace, or is not valid Unicode
                (an unpaired surrogate); the message gives its number.
        """
        check_texts(texts, first)
        ids = encode_texts(self.checkpoint.tokenizer, texts, self.config.data)
        return batched_logits(self.checkpoint.model, ids, batch_size=self.batch_size, device=self.device,
                              bf16=self.config.training.autocast_bf16)

    def predict(self, texts: Sequence[str], *, first: int = 1) -> list[Prediction]:
        """Label and probabilities for each text, in input order.

        Raises:
            UsageError: as :meth:`logits`.
        """
        if not texts:
            return []
        logits = self.logits(texts, first=first)                          # (n, num_labels)
        probs = self.probabilities(logits).tolist()                       # (n, num_labels)
        labels = self.labels
        # the label is the logits' argmax, which the temperature never changes
        return [Prediction(text, labels[k], p[k], dict(zip(labels, p)))
                for text, p, k in zip(texts, probs, logits.argmax(dim=-1).tolist())]

    @property
    def temperature(self) -> float:
        """The checkpoint's temperature (1.0 when it has none); see :mod:`sentiment_cli.evaluation.calibration`."""
        return self.checkpoint.temperature

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """``softmax(logits / temperature)`` (Guo et al. 2017): ``(n, num_labels)`` logits to probabilities.

        The temperature never changes which label is the most probable (the argmax of the logits).
        """
        return torch.softmax(logits / self.temperature, dim=-1)

    def predict_stream(self, texts: Iterable[str], chunk: int = 1024) -> Iterator[Prediction]:
        """Score an iterable lazily, ``chunk`` texts at a time: memory is bounded by ``chunk``, not the input.

        Raises:
            UsageError: as :meth:`logits`, numbering texts from the start of the stream.
        """
        return _chunked(texts, chunk, self.predict)

    def explain(self, texts: Sequence[str], *, first: int = 1) -> list["Explanation"]:
        """Prediction and per-token scores for each text, in input order (see :mod:`sentiment_cli.inference.explain`).

        Raises:
            UsageError: as :meth:`logits`.
        """
        from .explain import explain_texts

        check_texts(texts, first)
        return explain_texts(self.checkpoint.model, self.checkpoint.tokenizer, self.config.data, texts,
                             batch_size=self.batch_size, device=self.device, labels=self.labels,
                             temperature=self.temperature)

    def explain_stream(self, texts: Iterable[str], chunk: int = 256) -> Iterator["Explanation"]:
        """Explain an iterable lazily, ``chunk`` texts at a time (bounded memory)."""
        return _chunked(texts, chunk, self.explain)


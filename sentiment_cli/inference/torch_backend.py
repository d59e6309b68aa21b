"""The PyTorch backend of :class:`~sentiment_cli.inference.predictor.Predictor`: a checkpoint folder's model.

:func:`batched_logits` runs the model over token ids in length-bucketed
batches (also used by evaluation, calibration and the export's parity check);
:class:`TorchBackend` loads a checkpoint once and runs its forward pass for
the predictor. A review's result does not depend on the other reviews in its
batch (the padding mask). Imports neither ``datasets`` nor the CLI.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..card.facts import model_card
from ..checkpoint import Checkpoint, load_checkpoint
from ..data.batching import collate, make_batches
from ..model.classifier import SentimentClassifier, masked_max_pool
from ..runtime import autocast, inference_attention


@torch.inference_mode()
def batched_logits(model: SentimentClassifier, ids: Sequence[Sequence[int]], *, batch_size: int,
                   device: torch.device, bf16: bool = False, encoder_only: bool = False,
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
        encoder_only: the encoder's logits alone (the model's ``encoder_only``).
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
                logits = model(input_ids.to(device), padding_mask.to(device), encoder_only=encoder_only).logits
            out[torch.as_tensor(batch)] = logits.float().cpu()
            if on_batch is not None:
                on_batch(len(batch))
    return out


@torch.inference_mode()
def batched_pooled(model: SentimentClassifier, ids: Sequence[Sequence[int]], *, batch_size: int,
                   device: torch.device) -> np.ndarray:
    """The max-pooled encoder state of every example (the dense head's input), in input order.

    What ``sentiment suggest --strategy diverse`` clusters; batched by length, like :func:`batched_logits`.

    Args:
        model: the classifier (put in eval mode here).
        ids: token ids per example (each 1 to ``max_length`` long).
        batch_size: examples per forward pass.
        device: where the model lives.

    Returns:
        ``(len(ids), d_model)`` float32.
    """
    model.eval()
    out = np.zeros((len(ids), model.config.d_model), np.float32)
    with inference_attention(device):
        for batch in make_batches([len(x) for x in ids], batch_size, shuffle=False, bucket=True):
            input_ids, padding_mask = collate(ids, batch)
            hidden = model.hidden_states(input_ids.to(device), padding_mask.to(device))   # (batch, seq_len, d_model)
            out[np.asarray(batch)] = masked_max_pool(hidden, padding_mask.to(device))[0].float().cpu().numpy()
    return out


@torch.inference_mode()
def batched_token_logits(model: SentimentClassifier, ids: Sequence[Sequence[int]], *, batch_size: int,
                         device: torch.device, on_batch: Callable[[int], None] | None = None
                         ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """Logits and each token's share of them, for every example, in input order, in float32 without
    autocast (so that the shares add up to the logits to float rounding).

    Args:
        model: the classifier (put in eval mode here).
        ids: token ids per example.
        batch_size: examples per forward pass.
        device: where the model lives.
        on_batch: called with the size of each finished batch (progress).

    Returns:
        ``(len(ids), num_labels)`` float32 logits; per example, ``(len(ids[i]), num_labels)`` token
        logits; ``(num_labels,)`` the bias no token carries (see
        :class:`~sentiment_cli.model.classifier.ClassifierOutput`).
    """
    model.eval()
    logits, shares, bias = [], [], np.zeros(model.num_labels, np.float32)
    with inference_attention(device):   # the attention path of batched_logits: the same logits
        for lo in range(0, len(ids), batch_size):
            chunk = ids[lo:lo + batch_size]
            input_ids, padding_mask = collate(chunk)
            out = model(input_ids.to(device), padding_mask.to(device), token_logits=True)
            logits.append(out.logits.float().cpu().numpy())
            token_logits = out.token_logits.float().cpu().numpy()               # (batch, seq_len, num_labels)
            shares.extend(token_logits[i, :len(row)] for i, row in enumerate(chunk))
            bias = out.bias.float().cpu().numpy()
            if on_batch is not None:
                on_batch(len(chunk))
    return (np.concatenate(logits) if logits else np.zeros((0, model.num_labels), np.float32)), shares, bias


class TorchBackend:
    """A checkpoint folder's model on PyTorch, for :class:`~sentiment_cli.inference.predictor.Predictor`.

    Args:
        directory: a checkpoint folder written by ``sentiment train``, or a checkpoint already loaded (a
            training run's record, :meth:`~sentiment_cli.checkpoint.CheckpointRecord.loaded`).
        device: ``cpu``, ``cuda`` or a :class:`torch.device`.
        batch_size: reviews per forward pass; default: the checkpoint's ``[training] eval_batch_size``.

    Raises:
        CheckpointError: the checkpoint is missing or unusable.
    """

    def __init__(self, directory: str | Path | Checkpoint, device: str | torch.device = "cpu",
                 batch_size: int | None = None):
        self.device = torch.device(device)
        if isinstance(directory, Checkpoint):   # already in memory (a training run's record): used as it is
            self.checkpoint = directory
            directory.model.to(self.device).eval()
        else:
            self.checkpoint = load_checkpoint(directory, self.device)
        self.directory = self.checkpoint.directory
        self.config = self.checkpoint.config
        self.labels = self.checkpoint.labels
        self.temperature = self.checkpoint.temperature
        self.decision = self.checkpoint.decision   # a multi-label model's rule (checkpoint.read_decision), else None
        self.tokenizer = self.checkpoint.tokenizer
        self.batch_size = self.config.training.eval_batch_size if batch_size is None else batch_size

    @property
    def card(self) -> dict[str, Any]:
        """The model card (``sentiment info --json``), read from the folder."""
        return model_card(self.directory)

    def forward(self, rows: Sequence[Sequence[int]], *, token_logits: bool = False,
                on_batch: Callable[[int], None] | None = None
                ) -> tuple[np.ndarray, list[np.ndarray] | None, np.ndarray | None]:
        """``(logits, token_logits, bias)`` for token-id rows, in input order: ``(n, num_labels)``
        float32; with ``token_logits``, per row ``(len(row), num_labels)`` (else ``None``);
        with ``token_logits``, ``(num_labels,)`` the part of the logits no token carries (else ``None``).
        ``on_batch``: called with each finished batch's size (progress)."""
        model = self.checkpoint.model
        if token_logits:
            return batched_token_logits(model, rows, batch_size=self.batch_size, device=self.device,
                                        on_batch=on_batch)
        logits = batched_logits(model, rows, batch_size=self.batch_size, device=self.device,
                                bf16=self.config.training.autocast_bf16, on_batch=on_batch)
        return logits.numpy(), None, None

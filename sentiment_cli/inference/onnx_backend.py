"""The ONNX Runtime backend of :class:`~sentiment_cli.inference.predictor.Predictor`: no torch in the process.

``sentiment export --format onnx`` writes one self-contained ``.onnx`` file: the
graph (inputs ``input_ids`` ``(batch, seq_len)`` int64 and ``padding_mask``
``(batch, seq_len)`` bool, ``True`` at padding; outputs ``logits`` ``(batch,
num_labels)`` and ``token_logits`` ``(batch, seq_len, num_labels)``, each token's
share of each class's logit, the head's bias left out) plus, in its metadata, the
checkpoint's ``config.json``, ``tokenizer.json``, label names, head bias and
model card.

The predictor forms predictions and explanations from these outputs exactly as
from the PyTorch backend's (:mod:`sentiment_cli.inference.explain`), with the
temperature from ``config.json`` (1.0 when absent); :class:`OnnxBackend` needs
only that file, ``onnxruntime``, ``tokenizers`` and numpy. Its logits equal the
PyTorch model's to about 1e-6 (checked at export).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..config import stored_config_from_dict
from ..errors import CheckpointError, ConfigError, SentimentError
from ..data.labels import LABELS
from ..data.tokenizer import PAD_ID, tokenizer_from_str

ONNX_FILE = "model.onnx"
ONNX_INSTALL = 'pip install "sentiment-cli[onnx]"'
# metadata keys written by sentiment_cli.inference.export
META_CONFIG, META_TOKENIZER, META_LABELS = "sentiment.config", "sentiment.tokenizer", "sentiment.labels"
META_BIAS, META_CARD = "sentiment.head_bias", "sentiment.card"


class OnnxUnavailable(SentimentError):
    """onnxruntime is not installed (exit 1); the message names the install command."""


def onnx_path(path: str | Path) -> Path:
    """The ``.onnx`` file for ``path``: the file itself, or ``model.onnx`` in a checkpoint folder.

    Raises:
        CheckpointError: there is no such file.
    """
    path = Path(path)
    file = path / ONNX_FILE if path.is_dir() else path
    if not file.is_file():
        raise CheckpointError(f"no ONNX model at {file}; write one with `sentiment export --format onnx "
                              f"--checkpoint {path if path.is_dir() else path.parent}`")
    return file


def pad(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """``(input_ids, padding_mask)``: ``(batch, seq_len)`` int64 and bool (``True`` at padding)."""
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), PAD_ID, dtype=np.int64)
    mask = np.ones((len(rows), width), dtype=bool)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
        mask[i, :len(r)] = False
    return ids, mask


def _temperature(raw: dict[str, Any], path: Path) -> float:
    """``config.json``'s top-level ``temperature`` (fitted on validation after training; 1.0 when absent).

    Raises:
        CheckpointError: it is not a positive finite number.
    """
    value = raw.get("temperature", 1.0)
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value <= 0:
        raise CheckpointError(f"{path}: temperature must be a positive number, got {value!r}"[:240])
    return float(value)


class OnnxBackend:
    """An exported ``.onnx`` file on ONNX Runtime, for :class:`~sentiment_cli.inference.predictor.Predictor`.

    It carries what the PyTorch checkpoint does: label names (``config.json``'s ``labels``;
    negative/positive for checkpoints that predate label sets), temperature, tokenizer, config, card.

    Args:
        path: a ``.onnx`` file written by ``sentiment export``, or a checkpoint folder holding ``model.onnx``.
        batch_size: reviews per run; default: the checkpoint's ``[training] eval_batch_size``.
        threads: ONNX Runtime intra-op threads (default: its own choice, the number of cores).

    Raises:
        OnnxUnavailable: onnxruntime is not installed.
        CheckpointError: no such file, not an ONNX model, or not one ``sentiment export`` wrote.
    """

    def __init__(self, path: str | Path, batch_size: int | None = None, threads: int | None = None):
        self.path = onnx_path(path)
        self.session = _session(self.path, threads)
        meta = self.session.get_modelmeta().custom_metadata_map
        raw, labels, self.bias = _metadata(meta, self.path)
        if (len(labels) < 2 or self.bias.shape != (len(labels),)
                or self.session.get_outputs()[1].name != "token_logits"):
            raise CheckpointError(f"{self.path}: written by an older `sentiment export`, or its label names do not "
                                  f"match its outputs; export the checkpoint again")
        self.temperature = _temperature(raw, self.path)
        for key in ("format_version", "vocab_size", "architecture", "labels", "temperature"):
            raw.pop(key, None)
        try:
            self.config = stored_config_from_dict(raw, f"{self.path} (config)")
        except ConfigError as exc:
            raise CheckpointError(str(exc)) from None
        self.tokenizer = tokenizer_from_str(meta[META_TOKENIZER], self.path)
        self.labels = tuple(str(x) for x in labels)
        self.card: dict[str, Any] = json.loads(meta.get(META_CARD, "{}"))
        self.batch_size = self.config.training.eval_batch_size if batch_size is None else batch_size

    def forward(self, rows: Sequence[Sequence[int]], *, token_logits: bool = False
                ) -> tuple[np.ndarray, list[np.ndarray] | None, np.ndarray | None]:
        """``(logits, token_logits, bias)`` for token-id rows, in input order, as
        :meth:`TorchBackend.forward <sentiment_cli.inference.torch_backend.TorchBackend.forward>`.

        Rows are run in batches of similar length (little padding); the padding mask makes
        each row's result independent of its batch.
        """
        logits = np.empty((len(rows), len(self.labels)), dtype=np.float32)
        shares: list[np.ndarray] = [np.empty(0)] * len(rows)
        outputs = ["logits", "token_logits"] if token_logits else ["logits"]
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        for lo in range(0, len(order), self.batch_size):
            batch = order[lo:lo + self.batch_size]
            ids, mask = pad([rows[i] for i in batch])
            out = self.session.run(outputs, {"input_ids": ids, "padding_mask": mask})
            for j, i in enumerate(batch):
                logits[i] = out[0][j]
                if token_logits:
                    shares[i] = out[1][j, :len(rows[i])]
        return (logits, shares, self.bias) if token_logits else (logits, None, None)


def _session(path: Path, threads: int | None):
    """An ONNX Runtime session on the CPU.

    Raises:
        OnnxUnavailable: onnxruntime is not installed.
        CheckpointError: not a usable ONNX model.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        raise OnnxUnavailable(f"ONNX Runtime is not installed: {ONNX_INSTALL}") from None
    options = ort.SessionOptions()
    options.log_severity_level = 3   # ORT's warnings are about graph rewrites, not the user's input
    if threads:
        options.intra_op_num_threads = threads
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:   # onnxruntime raises its own Exception subclasses for a bad file
        raise CheckpointError(f"{path}: not a usable ONNX model ({str(exc).splitlines()[0][:160]})") from None


def _metadata(meta: dict[str, str], path: Path) -> tuple[dict[str, Any], list, np.ndarray]:
    """``(config, labels, bias)`` from the file's ``sentiment export`` metadata.

    Raises:
        CheckpointError: a key is missing or unreadable.
    """
    missing = [k for k in (META_CONFIG, META_TOKENIZER, META_LABELS, META_BIAS) if k not in meta]
    if missing:
        raise CheckpointError(f"{path}: not written by `sentiment export` (no {missing[0]} metadata)")
    try:
        raw = json.loads(meta[META_CONFIG])
        labels = json.loads(meta[META_LABELS])
        bias = np.asarray(json.loads(meta[META_BIAS]), dtype=np.float32)
    except ValueError as exc:
        raise CheckpointError(f"{path}: unreadable `sentiment export` metadata ({exc})") from None
    labels = raw.get("labels", labels) or list(LABELS)
    if not isinstance(labels, list):
        raise CheckpointError(f"{path}: written by an older `sentiment export`, or its label names do not "
                              f"match its outputs; export the checkpoint again")
    return raw, labels, bias

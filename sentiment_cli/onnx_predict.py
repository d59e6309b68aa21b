"""Score reviews with an exported ONNX model on ONNX Runtime: no torch in the process.

``sentiment export --format onnx`` writes one self-contained ``.onnx`` file: the
graph (inputs ``input_ids`` ``(batch, seq_len)`` int64 and ``padding_mask``
``(batch, seq_len)`` bool, ``True`` at padding; outputs ``logits`` ``(batch,
num_labels)`` and ``scores`` ``(batch, seq_len)``, each token's share of the
logit margin as in :mod:`sentiment_cli.explain`) plus, in its metadata, the
checkpoint's ``config.json``, ``tokenizer.json``, label names, head bias and
model card. :class:`OnnxPredictor` needs only that file, ``onnxruntime``,
``tokenizers`` and numpy; it gives the same :class:`~sentiment_cli.prediction.Prediction`
and :class:`~sentiment_cli.prediction.Explanation` objects as the PyTorch
:class:`~sentiment_cli.predict.Predictor` (logits equal to ~1e-6, checked at export).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .config import stored_config_from_dict
from .errors import CheckpointError, ConfigError, SentimentError
from .prediction import Explanation, Prediction, check_texts, chunked, token_rows
from .tokenizer import PAD_ID, UNK_TOKEN, encode, tokenizer_from_str

ONNX_FILE = "model.onnx"
ONNX_INSTALL = 'pip install "sentiment-cli[onnx]"'
# metadata keys written by sentiment_cli.export
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


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of ``(n, num_labels)`` float32 logits (max subtracted, as torch does)."""
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def pad(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """``(input_ids, padding_mask)``: ``(batch, seq_len)`` int64 and bool (``True`` at padding)."""
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), PAD_ID, dtype=np.int64)
    mask = np.ones((len(rows), width), dtype=bool)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
        mask[i, :len(r)] = False
    return ids, mask


class OnnxPredictor:
    """Loads an exported ``.onnx`` file once; :meth:`predict` and :meth:`explain` score texts.

    Args:
        path: a ``.onnx`` file written by ``sentiment export``, or a checkpoint folder holding ``model.onnx``.
        batch_size: reviews per run; default: the checkpoint's ``[training] eval_batch_size``.
        threads: ONNX Runtime intra-op threads (default: its own choice, the number of cores).

    Raises:
        OnnxUnavailable: onnxruntime is not installed.
        CheckpointError: no such file, not an ONNX model, or not one ``sentiment export`` wrote.
        ValueError: ``batch_size`` is less than 1.
    """

    def __init__(self, path: str | Path, batch_size: int | None = None, threads: int | None = None):
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        try:
            import onnxruntime as ort
        except ImportError:
            raise OnnxUnavailable(f"ONNX Runtime is not installed: {ONNX_INSTALL}") from None
        self.path = onnx_path(path)
        options = ort.SessionOptions()
        options.log_severity_level = 3   # ORT's warnings are about graph rewrites, not the user's input
        if threads:
            options.intra_op_num_threads = threads
        try:
            self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:   # onnxruntime raises its own Exception subclasses for a bad file
            raise CheckpointError(f"{self.path}: not a usable ONNX model ({str(exc).splitlines()[0][:160]})") from None
        meta = self.session.get_modelmeta().custom_metadata_map
        missing = [k for k in (META_CONFIG, META_TOKENIZER, META_LABELS, META_BIAS) if k not in meta]
        if missing:
            raise CheckpointError(f"{self.path}: not written by `sentiment export` (no {missing[0]} metadata)")
        raw = json.loads(meta[META_CONFIG])
        for key in ("format_version", "vocab_size", "architecture", "labels"):
            raw.pop(key, None)
        try:
            self.config = stored_config_from_dict(raw, f"{self.path} (config)")
        except ConfigError as exc:
            raise CheckpointError(str(exc)) from None
        self.tokenizer = tokenizer_from_str(meta[META_TOKENIZER], self.path)
        self._labels = list(json.loads(meta[META_LABELS]))
        self.bias = json.loads(meta[META_BIAS])
        self.card: dict[str, Any] = json.loads(meta.get(META_CARD, "{}"))
        self.batch_size = self.config.training.eval_batch_size if batch_size is None else batch_size

    @property
    def labels(self) -> list[str]:
        """The label names by id, as stored in the exported file."""
        return list(self._labels)

    def _run(self, rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, list[np.ndarray]]:
        """Logits ``(n, num_labels)`` and per-row token scores for token-id rows, in input order.

        Rows are run in batches of similar length (little padding); the padding mask makes
        each row's result independent of its batch.
        """
        logits = np.empty((len(rows), len(self._labels)), dtype=np.float32)
        scores: list[np.ndarray] = [np.empty(0)] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        for lo in range(0, len(order), self.batch_size):
            batch = order[lo:lo + self.batch_size]
            ids, mask = pad([rows[i] for i in batch])
            out_logits, out_scores = self.session.run(["logits", "scores"], {"input_ids": ids, "padding_mask": mask})
            for j, i in enumerate(batch):
                logits[i] = out_logits[j]
                scores[i] = out_scores[j, :len(rows[i])]
        return logits, scores

    def logits(self, texts: Sequence[str], *, first: int = 1) -> np.ndarray:
        """``(len(texts), num_labels)`` float32 logits, in input order.

        Raises:
            UsageError: a text is empty or not valid Unicode (see :func:`~sentiment_cli.prediction.check_texts`).
        """
        check_texts(texts, first)
        return self._run(encode(self.tokenizer, texts, self.config.data))[0]

    def predict(self, texts: Sequence[str], *, first: int = 1) -> list[Prediction]:
        """Label and probabilities for each text, in input order.

        Raises:
            UsageError: as :meth:`logits`.
        """
        if not texts:
            return []
        probs = softmax(self.logits(texts, first=first)).tolist()
        out = []
        for text, p in zip(texts, probs):
            k = int(np.argmax(p))
            out.append(Prediction(text, self._labels[k], p[k], dict(zip(self._labels, p))))
        return out

    def explain(self, texts: Sequence[str], *, first: int = 1) -> list[Explanation]:
        """Prediction and per-token scores for each text, as :meth:`Predictor.explain <sentiment_cli.predict.Predictor.explain>`.

        Raises:
            UsageError: as :meth:`logits`.
        """
        check_texts(texts, first)
        rows = token_rows(self.tokenizer, self.config.data, texts)
        logits, scores = self._run([r[0] for r in rows])
        probs = softmax(logits).tolist()
        out = []
        for text, (ids, spans, positions, n), p, s in zip(texts, rows, probs, scores):
            k = int(np.argmax(p))
            out.append(Explanation(text=text, label=self._labels[k], probability=p[k],
                                   probabilities=dict(zip(self._labels, p)),
                                   tokens=[text[a:b] or UNK_TOKEN for a, b in spans], scores=s.tolist(),
                                   bias=float(self.bias), ids=ids, spans=spans, positions=positions, num_tokens=n))
        return out

    def predict_stream(self, texts: Iterable[str], chunk: int = 1024) -> Iterator[Prediction]:
        """Score an iterable lazily, ``chunk`` texts at a time (bounded memory)."""
        return chunked(texts, chunk, self.predict)

    def explain_stream(self, texts: Iterable[str], chunk: int = 256) -> Iterator[Explanation]:
        """Explain an iterable lazily, ``chunk`` texts at a time (bounded memory)."""
        return chunked(texts, chunk, self.explain)

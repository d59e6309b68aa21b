"""Score reviews with an exported ONNX model on ONNX Runtime: no torch in the process.

``sentiment export --format onnx`` writes one self-contained ``.onnx`` file: the
graph (inputs ``input_ids`` ``(batch, seq_len)`` int64 and ``padding_mask``
``(batch, seq_len)`` bool, ``True`` at padding; outputs ``logits`` ``(batch,
num_labels)`` and ``token_logits`` ``(batch, seq_len, num_labels)``, each token's
share of each class's logit, the head's bias left out) plus, in its metadata, the
checkpoint's ``config.json``, ``tokenizer.json``, label names, head bias and
model card.

An explanation (:mod:`sentiment_cli.inference.explain`) splits the margin of a target class
``k`` (the second label with two classes, else the predicted class):
``logits[k] - mean_{j != k} logits[j]``. The head is linear, so that margin's
per-token scores are the same combination of ``token_logits``, and its bias the same
combination of the head's bias: :func:`contrast` computes both here, in numpy.
Probabilities are ``softmax(logits / temperature)``, with ``temperature`` from
``config.json`` (1.0 when absent), as the PyTorch predictor. :class:`OnnxPredictor` needs only that file, ``onnxruntime``,
``tokenizers`` and numpy; it gives the same :class:`~sentiment_cli.inference.prediction.Prediction`
and :class:`~sentiment_cli.inference.prediction.Explanation` objects as the PyTorch
:class:`~sentiment_cli.inference.predictor.Predictor` (logits equal to ~1e-6, checked at export).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..config import stored_config_from_dict
from ..errors import CheckpointError, ConfigError, SentimentError
from ..data.labels import LABELS
from .prediction import Explanation, Prediction, check_texts, chunked, prediction, token_rows
from ..data.tokenizer import PAD_ID, UNK_TOKEN, encode_texts, tokenizer_from_str

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


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise ``softmax(logits / temperature)`` of ``(n, num_labels)`` float32 logits (max subtracted, as
    torch does); temperature scaling as Guo et al. 2017, "On Calibration of Modern Neural Networks"."""
    z = logits / np.float32(temperature) if temperature != 1.0 else logits
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def target_classes(logits: np.ndarray) -> np.ndarray:
    """Each row's explained class: the second label with two classes, else the predicted (argmax) class.

    Args:
        logits: ``(n, num_labels)``.

    Returns:
        ``(n,)`` int64 (as :func:`sentiment_cli.inference.explain.target_classes`).
    """
    if logits.shape[1] == 2:
        return np.ones(len(logits), dtype=np.int64)
    return logits.argmax(axis=1)


def contrast(values: np.ndarray, target: int) -> np.ndarray:
    """``values[..., k] - mean_{j != k} values[..., j]`` over the last (class) axis, for target ``k``.

    The others are summed with a 0/1 mask, so with two classes this is ``values[..., k] - values[..., other]``.

    Args:
        values: ``(..., num_labels)`` (token logits ``(seq_len, num_labels)``, or the head's bias ``(num_labels,)``).
        target: the class id ``k``.

    Returns:
        ``values.shape[:-1]``.
    """
    n = values.shape[-1]
    others = np.ones(n, dtype=values.dtype)
    others[target] = 0
    return values[..., target] - (values * others).sum(axis=-1) / (n - 1)


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


class OnnxPredictor:
    """Loads an exported ``.onnx`` file once; :meth:`predict` and :meth:`explain` score texts.

    Results equal the PyTorch :class:`~sentiment_cli.inference.predictor.Predictor`'s (logits to about 1e-6, checked
    at export): the same label names (``config.json``'s ``labels``; negative/positive for checkpoints
    that predate label sets), the same temperature, the same explanation target and margin.

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
        try:
            raw = json.loads(meta[META_CONFIG])
            labels = json.loads(meta[META_LABELS])
            bias = np.asarray(json.loads(meta[META_BIAS]), dtype=np.float32)
        except ValueError as exc:
            raise CheckpointError(f"{self.path}: unreadable `sentiment export` metadata ({exc})") from None
        labels = raw.get("labels", labels) or list(LABELS)
        if (not isinstance(labels, list) or len(labels) < 2 or bias.shape != (len(labels),)
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
        self._labels = tuple(str(x) for x in labels)
        self.bias = bias   # (num_labels,) the head's bias
        self.card: dict[str, Any] = json.loads(meta.get(META_CARD, "{}"))
        self.batch_size = self.config.training.eval_batch_size if batch_size is None else batch_size

    @property
    def labels(self) -> tuple[str, ...]:
        """The class names, by id: the model's outputs, in order (as the checkpoint's ``config.json``)."""
        return self._labels

    def _run(self, rows: Sequence[Sequence[int]], *, tokens: bool = False) -> tuple[np.ndarray, list[np.ndarray]]:
        """Logits ``(n, num_labels)`` for token-id rows, in input order, and with ``tokens`` each row's
        ``(len(row), num_labels)`` token logits (else an empty list).

        Rows are run in batches of similar length (little padding); the padding mask makes
        each row's result independent of its batch.
        """
        logits = np.empty((len(rows), len(self._labels)), dtype=np.float32)
        scores: list[np.ndarray] = [np.empty(0)] * len(rows) if tokens else []
        outputs = ["logits", "token_logits"] if tokens else ["logits"]
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        for lo in range(0, len(order), self.batch_size):
            batch = order[lo:lo + self.batch_size]
            ids, mask = pad([rows[i] for i in batch])
            out = self.session.run(outputs, {"input_ids": ids, "padding_mask": mask})
            for j, i in enumerate(batch):
                logits[i] = out[0][j]
                if tokens:
                    scores[i] = out[1][j, :len(rows[i])]
        return logits, scores

    def logits(self, texts: Sequence[str], *, first: int = 1) -> np.ndarray:
        """``(len(texts), num_labels)`` float32 logits, in input order.

        Raises:
            UsageError: a text is empty or not valid Unicode (see :func:`~sentiment_cli.inference.prediction.check_texts`).
        """
        check_texts(texts, first)
        return self._run(encode_texts(self.tokenizer, texts, self.config.data))[0]

    def predict(self, texts: Sequence[str], *, first: int = 1) -> list[Prediction]:
        """Label and probabilities for each text, in input order.

        Raises:
            UsageError: as :meth:`logits`.
        """
        if not texts:
            return []
        probs = softmax(self.logits(texts, first=first), self.temperature).tolist()   # (n, num_labels)
        return [prediction(text, p, self._labels) for text, p in zip(texts, probs)]

    def explain(self, texts: Sequence[str], *, first: int = 1) -> list[Explanation]:
        """Prediction and per-token scores for each text, as :meth:`Predictor.explain <sentiment_cli.inference.predictor.Predictor.explain>`.

        Raises:
            UsageError: as :meth:`logits`.
        """
        check_texts(texts, first)
        rows = token_rows(self.tokenizer, self.config.data, texts)
        logits, token_logits = self._run([r[0] for r in rows], tokens=True)
        probs = softmax(logits, self.temperature).tolist()
        out = []
        for text, (ids, spans, positions, n), p, t, k in zip(texts, rows, probs, token_logits,
                                                            target_classes(logits).tolist()):
            pred = prediction(text, p, self._labels)
            out.append(Explanation(text=text, label=pred.label, probability=pred.probability,
                                   probabilities=pred.probabilities,
                                   tokens=[text[a:b] or UNK_TOKEN for a, b in spans],
                                   scores=contrast(t, k).tolist(), bias=float(contrast(self.bias, k)),
                                   ids=ids, spans=spans, positions=positions, num_tokens=n,
                                   target=self._labels[k]))
        return out

    def predict_stream(self, texts: Iterable[str], chunk: int = 1024) -> Iterator[Prediction]:
        """Score an iterable lazily, ``chunk`` texts at a time (bounded memory)."""
        return chunked(texts, chunk, self.predict)

    def explain_stream(self, texts: Iterable[str], chunk: int = 256) -> Iterator[Explanation]:
        """Explain an iterable lazily, ``chunk`` texts at a time (bounded memory)."""
        return chunked(texts, chunk, self.explain)

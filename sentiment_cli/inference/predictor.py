"""One predictor for every backend: preprocess (check, tokenize) -> forward (a backend) -> postprocess.

The pipeline of Hugging Face transformers' ``pipelines/base.py``, in three steps:

- preprocess: :func:`~sentiment_cli.inference.prediction.check_texts`, then the checkpoint's
  tokenizer and truncation (:func:`~sentiment_cli.data.tokenizer.encode_texts`, or
  :func:`~sentiment_cli.inference.prediction.token_rows` when an explanation needs each token's span);
- forward: a backend's ``forward(rows, token_logits=...)`` gives logits ``(n, num_labels)``, and with
  ``token_logits`` each token's share of them and the bias no token carries. Two backends implement
  only this: :class:`~sentiment_cli.inference.torch_backend.TorchBackend` (a checkpoint folder, on
  PyTorch) and :class:`~sentiment_cli.inference.onnx_backend.OnnxBackend` (an exported file, on ONNX
  Runtime, no torch in the process);
- postprocess, written once and torch-free: softmax with the checkpoint's temperature, the label,
  and the explanation (:mod:`sentiment_cli.inference.explain`).

This module does not import torch: the torch backend is imported only when asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..config import Config
from ..data.tokenizer import encode_texts, tokenizer_kind
from ..data.tokenizer_kind import TokenizerKind
from ..errors import CheckpointError, UsageError
from .explain import LabelSetExplanation, explanations, label_set_explanations
from .multilabel import Decision, LabelSet, label_sets
from .prediction import Explanation, Prediction, check_iterable, check_texts, chunked, predictions, text_list, token_rows
from .probabilities import softmax


class Backend(Protocol):
    """What a backend provides: the checkpoint's settings and one forward pass."""

    config: Config
    labels: tuple[str, ...]
    temperature: float
    decision: dict[str, Any] | None   # a multi-label model's rule (untrusted.stored_decision), else None
    tokenizer: Any
    batch_size: int

    @property
    def card(self) -> dict[str, Any]:
        """The model card, as ``sentiment info --json`` prints it."""
        ...

    def forward(self, rows: Sequence[Sequence[int]], *, token_logits: bool = False,
                on_batch: Callable[[int], None] | None = None
                ) -> tuple[np.ndarray, list[np.ndarray] | None, np.ndarray | None]:
        """``(logits, token_logits, bias)`` for token-id rows (each at most ``max_length`` ids), in input
        order: ``(n, num_labels)`` float32 logits before the temperature; with ``token_logits``, per row
        ``(len(row), num_labels)`` token shares and ``(num_labels,)`` the part no token carries (the exact
        explanation), else ``None`` for both. ``on_batch``: called with each finished batch's size."""
        ...


def finite_logits(logits: np.ndarray, first: int = 1) -> np.ndarray:
    """``logits``, checked: every one a finite number, so that no probability is NaN (``--json`` would print
    ``NaN``, which is not JSON, and ``serve`` answer 500s). The loaders refuse NaN and infinite weights; this
    catches a model whose finite weights still overflow.

    Raises:
        CheckpointError: a non-finite logit; the message gives the first such text's number (``first`` is
            the number of row 0).
    """
    bad = ~np.isfinite(logits).all(axis=-1)
    if bad.any():
        raise CheckpointError(f"the model gave NaN or infinite logits for review {first + int(np.argmax(bad))}; "
                              "its weights are unusable (export or train the checkpoint again)")
    return logits


class Predictor:
    """Loads a model once; :meth:`predict` and :meth:`explain` score texts.

    Args:
        path: a checkpoint folder written by ``sentiment train`` (or a loaded ``checkpoint.Checkpoint``: a
            training run's record); with ``onnx``, a ``.onnx`` file written by ``sentiment export`` or a folder
            holding ``model.onnx``.
        device: where the PyTorch model runs (``cpu``, ``cuda`` or a ``torch.device``); not with ``onnx``.
        batch_size: reviews per forward pass; default: the checkpoint's ``[training] eval_batch_size``.
        onnx: run the exported model on ONNX Runtime instead of PyTorch.
        threads: ONNX Runtime intra-op threads (default: its own choice); only with ``onnx``.

    Raises:
        CheckpointError: the checkpoint (or ONNX file) is missing or unusable; later, from :meth:`predict` and
            :meth:`explain`, a model that gives NaN or infinite logits (:func:`finite_logits`).
        OnnxUnavailable: ``onnx`` without onnxruntime installed.
        ValueError: ``batch_size`` is less than 1.
    """

    def __init__(self, path: str | Path | Any, device: Any = "cpu", batch_size: int | None = None, *,
                 onnx: bool = False, threads: int | None = None):
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if onnx:
            from .onnx_backend import OnnxBackend

            self.backend: Backend = OnnxBackend(path, batch_size=batch_size, threads=threads)
        else:
            from .torch_backend import TorchBackend

            self.backend = TorchBackend(path, device, batch_size=batch_size)

    @property
    def config(self) -> Config:
        """The checkpoint's configuration."""
        return self.backend.config

    @property
    def labels(self) -> tuple[str, ...]:
        """The class names, by id: the model's outputs, in order."""
        return self.backend.labels

    @property
    def temperature(self) -> float:
        """The checkpoint's temperature (1.0 when it has none); see :mod:`sentiment_cli.evaluation.calibration`."""
        return self.backend.temperature

    @property
    def card(self) -> dict[str, Any]:
        """The model card (``sentiment info --json``)."""
        return self.backend.card

    @property
    def multi_label(self) -> bool:
        """Whether the model gives several labels per text (:meth:`predict` then returns one :class:`LabelSet` each)."""
        return self.backend.decision is not None

    @property
    def decision(self) -> Decision | None:
        """A multi-label model's decision rule (a temperature and a threshold per label), else ``None``."""
        d = self.backend.decision
        return None if d is None else Decision(tuple(d["temperatures"]), tuple(d["thresholds"]), d["min_labels"])

    def preprocess(self, texts: Sequence[str], *, first: int = 1, check: bool = True) -> list[list[int]]:
        """The first step: ``texts`` checked (with ``check``) and tokenized with the checkpoint's tokenizer and
        truncation: one row of token ids per text (each 1 to ``max_length`` ids).

        Args:
            texts: the reviews.
            first: number of ``texts[0]`` in error messages (for streams scored in chunks).
            check: refuse empty or invalid texts (:func:`~.prediction.check_texts`); ``False`` for texts a data
                reader already checked (``eval``) or a caller sets aside itself (``suggest``'s noise).

        Raises:
            UsageError: with ``check``, as :meth:`logits`.
        """
        if check:
            texts = text_list(texts, first)
            check_texts(texts, first)
        return encode_texts(self.backend.tokenizer, texts, self.config.data)

    def forward(self, rows: Sequence[Sequence[int]], *, token_logits: bool = False,
                on_batch: Callable[[int], None] | None = None
                ) -> tuple[np.ndarray, list[np.ndarray] | None, np.ndarray | None]:
        """The second step: the backend's forward over token-id rows, ``(logits, token_logits, bias)`` as
        :meth:`Backend.forward` (``(n, num_labels)`` float32 logits before the temperature, not yet checked
        finite); ``on_batch`` is called with each finished batch's size (progress)."""
        if on_batch is None:   # a backend of one's own may not take it
            return self.backend.forward(rows, token_logits=token_logits)
        return self.backend.forward(rows, token_logits=token_logits, on_batch=on_batch)

    def postprocess(self, logits: np.ndarray, dtype=np.float32) -> np.ndarray:
        """The third step, the one place a temperature or a decision rule's temperatures are applied:
        ``(n, num_labels)`` probabilities of ``(n, num_labels)`` logits, columns in :attr:`labels` order.

        Single-label: ``softmax(logits / T)`` computed in ``dtype`` (:func:`~.probabilities.softmax`; float32:
        what :meth:`predict` reports; float64: the calibration metrics' and ``suggest``'s arithmetic). Multi-label:
        each label's ``sigmoid(logit / T_label)`` (:meth:`~.multilabel.Decision.probabilities`, float64), cast to
        ``dtype``.

        Raises:
            UsageError: ``logits`` is not ``(n, num_labels)`` (another model's, or a 1-D array).
        """
        logits = self._by_label(logits, "logits")
        if self.multi_label:
            return self.decision.probabilities(logits).astype(dtype, copy=False)
        return softmax(logits, self.temperature, dtype)

    def decide(self, probabilities: np.ndarray) -> np.ndarray:
        """What each text is given, from :meth:`postprocess`'s ``(n, num_labels)`` probabilities: a multi-label
        model's ``(n, num_labels)`` bool label sets (:meth:`~.multilabel.Decision.labels`: a threshold per label,
        ``min_labels``); a single-label model's ``(n,)`` label ids (the most probable, the lower id on a tie).

        Raises:
            UsageError: ``probabilities`` is not ``(n, num_labels)``.
        """
        probabilities = self._by_label(probabilities, "probabilities")
        if self.multi_label:
            return self.decision.labels(probabilities)
        return probabilities.argmax(axis=1)

    def _by_label(self, values: Any, what: str) -> np.ndarray:
        """``values`` as an ``(n, num_labels)`` array, a column per label of this model (n may be 0).

        Raises:
            UsageError: another shape (a 1-D array, another number of columns), naming ``what``.
        """
        array = np.asarray(values)
        if array.ndim != 2 or array.shape[1] != len(self.labels):
            raise UsageError(f"{what}: expected an (n, {len(self.labels)}) array, a column per label "
                             f"({', '.join(self.labels)})"[:200] + f", got shape {array.shape}")
        return array

    def logits(self, texts: Sequence[str], *, first: int = 1) -> np.ndarray:
        """``(len(texts), num_labels)`` float32 logits, in input order (before the temperature).

        Args:
            texts: the reviews.
            first: number of ``texts[0]`` in error messages (for streams scored in chunks).

        Raises:
            UsageError: ``texts`` is one ``str``, ``None`` or not an iterable of ``str`` (any iterable is: a list,
                a generator, a NumPy array, a pandas Series); a text is empty or only whitespace, or is not valid Unicode
                (an unpaired surrogate); the message gives its number.
        """
        return finite_logits(self.forward(self.preprocess(texts, first=first))[0], first)

    def predict_proba(self, texts: Sequence[str], *, first: int = 1, dtype=np.float32) -> np.ndarray:
        """``(len(texts), num_labels)`` probabilities of ``dtype``, columns in :attr:`labels` order: the softmax
        of the logits over the checkpoint's temperature (rows sum to 1), or with a multi-label model each label's
        ``sigmoid(logit / T_label)`` (independent; see :mod:`~.multilabel`): :meth:`postprocess` of
        :meth:`logits`. In float32 these are the numbers :meth:`predict` reports.

        Raises:
            UsageError: as :meth:`logits`.
        """
        texts = text_list(texts, first)
        if not texts:
            return np.zeros((0, len(self.labels)), dtype)
        return self.postprocess(self.logits(texts, first=first), dtype)

    def predict(self, texts: Sequence[str], *, first: int = 1) -> list[Prediction] | list[LabelSet]:
        """Label and probabilities for each text, in input order: a :class:`Prediction` each, or with a
        multi-label model a :class:`~.multilabel.LabelSet` each (its labels, a probability per label).

        Raises:
            UsageError: as :meth:`logits`.
        """
        texts = text_list(texts, first)
        if not texts:
            return []
        logits = self.logits(texts, first=first)
        probabilities = self._postprocessed(logits)
        if self.multi_label:
            return label_sets(texts, logits, self.labels, self.decision, probabilities)
        return predictions(texts, logits, self.labels, probabilities=probabilities)

    def explain(self, texts: Sequence[str], *, first: int = 1) -> list[Explanation] | list[LabelSetExplanation]:
        """Prediction and per-token scores for each text, in input order (see :mod:`sentiment_cli.inference.explain`);
        with a multi-label model a :class:`~.explain.LabelSetExplanation` each (one explanation per predicted label).

        Raises:
            UsageError: as :meth:`logits`.
        """
        return self.explain_scored(texts, first=first)[1]

    def explain_scored(self, texts: Sequence[str], *, first: int = 1
                       ) -> tuple[np.ndarray, list[Explanation] | list[LabelSetExplanation]]:
        """``(logits, explanations)`` from ONE forward: the ``(len(texts), num_labels)`` float32 logits the
        explanations were formed from (for :meth:`postprocess`: ``predict --explain --data``'s columns), and
        :meth:`explain`'s list.

        Raises:
            UsageError: as :meth:`logits`.
        """
        texts = text_list(texts, first)
        check_texts(texts, first)
        rows = token_rows(self.backend.tokenizer, self.config.data, texts)
        logits, token_logits, bias = self.forward([r[0] for r in rows], token_logits=True)
        finite_logits(logits, first)
        kind = tokenizer_kind(self.backend.tokenizer)
        join = kind.joined   # characters or subwords: pieces joined for display
        across = kind is TokenizerKind.CHAR   # characters whose n-grams cross spaces: pieces too
        probabilities = self._postprocessed(logits)
        if self.multi_label:
            return logits, label_set_explanations(texts, rows, logits, token_logits, bias, self.labels,
                                                  self.decision, join_pieces=join, probabilities=probabilities,
                                                  across_spaces=across)
        return logits, explanations(texts, rows, logits, token_logits, bias, self.labels, join_pieces=join,
                                    probabilities=probabilities, across_spaces=across)

    def _postprocessed(self, logits: np.ndarray) -> np.ndarray:
        """:meth:`postprocess` in the precision :meth:`predict` reports: float32 (a softmax's), or float64 for a
        multi-label model (its decision compares them with the thresholds)."""
        return self.postprocess(logits, np.float64 if self.multi_label else np.float32)

    def predict_stream(self, texts: Iterable[str], chunk: int = 1024) -> Iterator[Prediction]:
        """Score an iterable lazily, ``chunk`` texts at a time: memory is bounded by ``chunk``, not the input.

        Raises:
            UsageError: as :meth:`logits`, numbering texts from the start of the stream.
        """
        check_iterable(texts)
        return chunked(texts, chunk, self.predict)

    def explain_stream(self, texts: Iterable[str], chunk: int = 256) -> Iterator[Explanation]:
        """Explain an iterable lazily, ``chunk`` texts at a time (bounded memory)."""
        check_iterable(texts)
        return chunked(texts, chunk, self.explain)

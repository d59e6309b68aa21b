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
only that file, ``onnxruntime``, ``onnx`` (to check the file's tensors first: :func:`check_tensors`),
``tokenizers`` and numpy. Its logits equal the
PyTorch model's to about 1e-6 (checked at export).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..config import stored_config_from_dict
from ..decoding import json_loads
from ..errors import CheckpointError, ConfigError, SentimentError
from ..data.labels import LABELS
from ..data.tokenizer import PAD_ID, check_token_ids, tokenizer_from_str
from ..untrusted import (WEIGHTS_LIMIT, file_digest, read_regular_file, stored_decision, stored_temperature,
                         stored_vocab_size)

ONNX_FILE = "model.onnx"
ONNX_INSTALL = 'pip install "sentiment-cli[onnx]"'
# metadata keys written by sentiment_cli.inference.export
META_CONFIG, META_TOKENIZER, META_LABELS = "sentiment.config", "sentiment.tokenizer", "sentiment.labels"
META_BIAS, META_CARD = "sentiment.head_bias", "sentiment.card"
META_WEIGHTS = "sentiment.weights"   # "sha256:<hex>" of the model.safetensors it was exported from
WEIGHTS_FILE, CONFIG_FILE = "model.safetensors", "config.json"   # checkpoint.py's names (it imports torch)
CONFIG_LIMIT = 64 << 20   # checkpoint.JSON_LIMIT
OUTPUTS = ["logits", "token_logits"]   # the graph's outputs, in order
# The most an exported file may hold, in bytes: one protobuf (at most 2 GiB) without external data.
ONNX_LIMIT = 2 << 30


class OnnxUnavailable(SentimentError):
    """onnxruntime is not installed (exit 1); the message names the install command."""


def onnx_path(path: str | Path) -> Path:
    """The ``.onnx`` file for ``path``: the file itself, or ``model.onnx`` in a checkpoint folder.

    Raises:
        CheckpointError: there is no such file.
    """
    path = Path(path)
    file = path / ONNX_FILE if path.is_dir() else path
    if not file.exists():   # a device or a FIFO is refused when read (read_regular_file)
        if path.is_dir():
            how = f"--checkpoint {path}"
        elif (path.parent / "config.json").is_file():   # a file named beside a checkpoint's files
            how = f"--checkpoint {path.parent} --output {path}"
        else:
            how = f"--checkpoint CHECKPOINT_FOLDER --output {path}"
        raise CheckpointError(f"no ONNX model at {file}; write one with `sentiment export --format onnx {how}`")
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


def _stored(check, raw: dict[str, Any], key: str, default: Any, path: Path) -> Any:
    """``config.json``'s top-level ``key`` (``default`` when absent), checked by ``check`` (the torch
    backend's rule: :func:`~sentiment_cli.untrusted.stored_temperature`,
    :func:`~sentiment_cli.untrusted.stored_vocab_size`).

    Raises:
        CheckpointError: ``check`` refuses it; the message names ``path``.
    """
    try:
        return check(raw.get(key, default))
    except ValueError as exc:
        raise CheckpointError(f"{path} (config): {exc}") from None


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
        folder = Path(path) if Path(path).is_dir() else None   # model.onnx must then be inside it
        model = _read_model(self.path, folder)
        check_tensors(model, self.path)   # before ONNX Runtime reads a byte of data from anywhere else
        self.session = _session(model, self.path, threads)
        del model
        meta = self.session.get_modelmeta().custom_metadata_map
        raw, labels, self.bias = _metadata(meta, self.path)
        check_exported_from(meta, self.path)   # beside a checkpoint: of its weights and config as they are now
        _check_outputs(self.session, len(labels), self.path)
        self.temperature = _stored(stored_temperature, raw, "temperature", 1.0, self.path)
        vocab_size = _stored(stored_vocab_size, raw, "vocab_size", None, self.path)
        self.decision = None if raw.get("multi_label") is None else \
            _stored(lambda v: stored_decision(v, len(labels)), raw, "multi_label", None, self.path)
        for key in ("format_version", "vocab_size", "architecture", "labels", "temperature", "multi_label",
                    "compression"):
            raw.pop(key, None)
        try:
            self.config = stored_config_from_dict(raw, f"{self.path} (config)")
        except ConfigError as exc:
            raise CheckpointError(str(exc)) from None
        tokenizer = tokenizer_from_str(meta[META_TOKENIZER], f"{self.path} (tokenizer.json)")
        self.tokenizer = check_token_ids(tokenizer, vocab_size, f"{self.path} (tokenizer.json)")
        self.labels = tuple(labels)
        self.card: dict[str, Any] = _card(meta, self.path)
        self.batch_size = self.config.training.eval_batch_size if batch_size is None else batch_size

    def forward(self, rows: Sequence[Sequence[int]], *, token_logits: bool = False,
                on_batch: Callable[[int], None] | None = None
                ) -> tuple[np.ndarray, list[np.ndarray] | None, np.ndarray | None]:
        """``(logits, token_logits, bias)`` for token-id rows, in input order, as
        :meth:`TorchBackend.forward <sentiment_cli.inference.torch_backend.TorchBackend.forward>`
        (``on_batch``: called with each finished batch's size).

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
            if on_batch is not None:
                on_batch(len(batch))
        return (logits, shares, self.bias) if token_logits else (logits, None, None)


def _read_model(path: Path, folder: Path | None) -> bytes:
    """The bytes of the exported file: a regular file of at most :data:`ONNX_LIMIT` bytes (inside ``folder``
    when given).

    Raises:
        CheckpointError: missing, not a regular file (``/dev/zero``, a FIFO), a link leaving ``folder``, or too
            large; the message names ``path``.
    """
    try:
        return read_regular_file(path, ONNX_LIMIT, folder)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc.strerror})") from None


def check_tensors(model: bytes, path: Path) -> None:
    """Refuse what ``sentiment export`` never writes and ONNX Runtime would act on: a tensor whose data lies in
    another file (``data_location`` EXTERNAL, or ``external_data`` entries: the runtime would read that file,
    relative to the current folder), and a float tensor holding NaN, or an infinity beside other values
    (every prediction would be NaN; an export's masks fill with a one-element -inf, which is allowed). Every
    tensor is checked: initializers (sparse ones too), node attributes, subgraphs and functions.

    Work and memory are bounded by the file's size (at most :data:`ONNX_LIMIT`): each tensor is converted
    to numpy on its own, from bytes already in ``model``.

    Raises:
        OnnxUnavailable: the ``onnx`` package is not installed.
        CheckpointError: not an ONNX protobuf, or such a tensor; the message names ``path`` and the tensor.
    """
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise OnnxUnavailable(f"the onnx package is not installed: {ONNX_INSTALL}") from None
    try:
        proto = onnx.ModelProto.FromString(model)
    except Exception as exc:   # protobuf's DecodeError, or a RecursionError for absurd nesting
        raise CheckpointError(f"{path}: not a usable ONNX model (not an ONNX protobuf: {str(exc)[:100]})") from None
    t = onnx.TensorProto   # the float8 types have no infinity, and NaN only in some: left to the runtime
    floats = (t.FLOAT16, t.FLOAT, t.DOUBLE, t.BFLOAT16)
    for tensor in _tensors(proto):
        name = tensor.name or "(unnamed)"
        if tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.external_data):
            where = next((e.value for e in tensor.external_data if e.key == "location"), "another file")
            raise CheckpointError(f"{path}: tensor {name!r} keeps its data in {where!r}"[:200] + ", outside the "
                                  "file; `sentiment export` writes one self-contained file, so it is refused")
        if tensor.data_type not in floats:
            continue
        try:
            values = numpy_helper.to_array(tensor).astype(np.float32, copy=False)
        except Exception as exc:   # a size that does not match its shape, an unknown type
            raise CheckpointError(f"{path}: not a usable ONNX model (tensor {name!r}: {str(exc)[:100]})") from None
        # an export's masks fill with one -inf (a scalar constant); a weight is never NaN or infinite
        if np.isnan(values).any() or (values.size > 1 and not np.isfinite(values).all()):
            raise CheckpointError(f"{path}: tensor {name!r} holds NaN or infinite values; export the "
                                  "checkpoint again")


def _tensors(proto) -> Iterator[Any]:
    """Every ``TensorProto`` of a ``ModelProto``: initializers, sparse initializers' values and indices, node
    attributes' tensors, in the main graph, every subgraph (``If``, ``Loop``, ``Scan``) and every function.
    Iterative (no recursion limit), each graph visited once."""
    graphs, nodes = [proto.graph], [n for f in proto.functions for n in f.node]
    while graphs or nodes:
        if graphs:
            graph = graphs.pop()
            yield from graph.initializer
            for sparse in graph.sparse_initializer:
                yield from (sparse.values, sparse.indices)
            nodes.extend(graph.node)
            continue
        for attribute in nodes.pop().attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            for sparse in [attribute.sparse_tensor] if attribute.HasField("sparse_tensor") else []:
                yield from (sparse.values, sparse.indices)
            for sparse in attribute.sparse_tensors:
                yield from (sparse.values, sparse.indices)
            graphs.extend([attribute.g] if attribute.HasField("g") else [])
            graphs.extend(attribute.graphs)


def _session(model: bytes, path: Path, threads: int | None):
    """An ONNX Runtime session on the CPU for ``model`` (the bytes of ``path``).

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
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:   # onnxruntime raises its own Exception subclasses for a bad file
        raise CheckpointError(f"{path}: not a usable ONNX model ({str(exc).splitlines()[0][:160]})") from None


def _metadata(meta: dict[str, str], path: Path) -> tuple[dict[str, Any], tuple[str, ...], np.ndarray]:
    """``(config, labels, bias)`` from the file's ``sentiment export`` metadata: the config a JSON object, two
    or more distinct label names (the config's, else the labels entry's, else IMDB's two), one finite bias
    per label.

    Raises:
        CheckpointError: a key is missing, not JSON, or not of its shape; the message names the key.
    """
    missing = [k for k in (META_CONFIG, META_TOKENIZER, META_LABELS, META_BIAS) if k not in meta]
    if missing:
        raise CheckpointError(f"{path}: not written by `sentiment export` (no {missing[0]} metadata)")
    raw = _json_meta(meta, META_CONFIG, path)
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: its config is not a JSON object ({META_CONFIG} metadata)")
    labels = raw.get("labels", _json_meta(meta, META_LABELS, path)) or list(LABELS)
    if (not isinstance(labels, list) or len(labels) < 2 or len(set(map(str, labels))) != len(labels)
            or not all(isinstance(x, str) and x.strip() for x in labels)):
        raise CheckpointError(f"{path}: its label names must be two or more distinct names, got {labels!r}"[:240])
    try:
        bias = np.asarray(_json_meta(meta, META_BIAS, path), dtype=np.float32)
    except (TypeError, ValueError):
        bias = np.empty(0, np.float32)
    if bias.shape != (len(labels),) or not np.isfinite(bias).all():
        raise CheckpointError(f"{path}: its {META_BIAS} metadata is not {len(labels)} finite numbers, one per label "
                              f"name; export the checkpoint again")
    return raw, tuple(labels), bias


def check_exported_from(meta: dict[str, str], path: Path) -> None:
    """An exported file that sits beside a checkpoint's ``model.safetensors`` and ``config.json`` (its folder's
    ``model.onnx``, or any ``.onnx`` there) must be an export of those files as they are now: the weights'
    digest it recorded at export (:data:`META_WEIGHTS`) and the ``config.json`` it embeds must match them.
    A file on its own (deployed without the checkpoint) is self-contained and not checked; nor is one exported
    before the digest was recorded. Torch-free: the digest is ``untrusted.file_digest``'s.

    Raises:
        CheckpointError: the checkpoint was trained (or its config changed) since the export; the message says
            to export again.
    """
    folder = path.parent
    weights, config = folder / WEIGHTS_FILE, folder / CONFIG_FILE
    recorded = meta.get(META_WEIGHTS)
    if recorded is None or not weights.exists() or not config.exists():
        return
    try:
        same = (file_digest(weights, WEIGHTS_LIMIT, folder) == recorded
                and read_regular_file(config, CONFIG_LIMIT, folder).decode("utf-8") == meta[META_CONFIG])
    except (OSError, CheckpointError, UnicodeDecodeError):
        same = False
    if not same:
        raise CheckpointError(f"{path}: not an export of {weights} as it is now (the checkpoint was trained again, "
                              f"or its config.json changed, after the export); export it again: "
                              f"sentiment export --format onnx --checkpoint {folder}"
                              + ("" if path.name == ONNX_FILE else f" --output {path}"))


def _json_meta(meta: dict[str, str], key: str, path: Path) -> Any:
    """The metadata entry ``key``, parsed as JSON.

    Raises:
        CheckpointError: it is not valid JSON; the message names ``key``.
    """
    try:
        return json_loads(meta[key])
    except ValueError as exc:
        raise CheckpointError(f"{path}: its {key} metadata is not valid JSON ({str(exc)[:100]})") from None


def _card(meta: dict[str, str], path: Path) -> dict[str, Any]:
    """The model card from the metadata (``{}`` when the file has none).

    Raises:
        CheckpointError: it is not a JSON object; the message names the key.
    """
    card = _json_meta(meta, META_CARD, path) if META_CARD in meta else {}
    if not isinstance(card, dict):
        raise CheckpointError(f"{path}: its {META_CARD} metadata is not a JSON object")
    return card


def _check_outputs(session, num_labels: int, path: Path) -> None:
    """Check the graph's outputs: :data:`OUTPUTS`, in order, ``logits`` one per label name.

    Raises:
        CheckpointError: other outputs, or a number of logits per review that is not ``num_labels``.
    """
    outputs = session.get_outputs()
    names = [o.name for o in outputs]
    if names != OUTPUTS:
        raise CheckpointError(f"{path}: its graph's outputs are {', '.join(names) or 'none'}, not "
                              f"{', '.join(OUTPUTS)}: written by an older `sentiment export`, or altered; "
                              f"export the checkpoint again"[:300])
    width = outputs[0].shape[-1] if outputs[0].shape else None
    if width != num_labels:
        raise CheckpointError(f"{path}: {num_labels} label names for a graph of {width} logits per review; "
                              f"export the checkpoint again")

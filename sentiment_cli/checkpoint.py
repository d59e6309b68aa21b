"""The checkpoint folder: atomic writes, safe loads, a format version.

A checkpoint is a self-describing folder, in the manner of Hugging Face's::

    config.json        all settings, the vocabulary size, labels, format_version, and the
                       ``temperature`` fitted on the validation split (1.0 = none; absent
                       in checkpoints written before it existed)
    model.safetensors  the weights (never pickle); a table whose rows are mostly zero (the n-gram score's
                       hashed buckets) as its non-zero rows (``weights_file.py``, format_version 2), in
                       float16 where that loses nothing (format_version 3); a compressed checkpoint's
                       pruned and int8 tables as their stored rows (``model/compress.py``, format_version 4,
                       with ``config.json``'s ``"compression"``)
    tokenizer.json     the ``tokenizers`` tokenizer
    metrics.json       per-epoch history, device, wall time, seed, versions
    eval_<split>.json  the last ``sentiment eval`` result per split, tagged with the
                       SHA-256 of the weights it scored (:func:`record_eval`)
    export_<name>.json the last ``sentiment export`` of each kind (``onnx``, ``onnx-int8``): its
                       parity check against PyTorch, sizes, same tag (:func:`read_exports`)

Every file is written to a temporary file in the same folder and moved into
place with ``os.replace``, so a crash leaves either the old or the new file,
never half of one. Loading never unpickles, and treats the folder as untrusted input: it reads only
regular files inside it, within size limits, and checks sizes, tensor shapes and token ids against the
config before it allocates the model (:func:`load_checkpoint`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from .config import Config, stored_config_from_dict
from .decoding import json_loads
from .errors import CheckpointError, ConfigError, UsageError
from .data.labels import LABELS
from .model.classifier import SentimentClassifier
from .model.compress import Compression, compress, install_tables, table_codes
from .model.skeleton import tensor_specs, uninitialised_classifier
from .data.tokenizer import check_token_ids, tokenizer_from_str
from .weights_file import compact_codes, compact_tables, dense_specs, pack, packed_shapes, unpack
from .untrusted import (WEIGHTS_LIMIT, file_digest, read_regular_file, stored_decision,
                        stored_metrics, stored_temperature, stored_vocab_size)

# 2: the weights file may hold packed tables; 3: a packed table's values may be float16 (weights_file.py); 4: compact
# tables of a compressed checkpoint (int8 rows, config.json's "compression"; model/compress.py). All read.
CHECKPOINT_FORMAT_VERSION = 4
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
METRICS_FILE = "metrics.json"
STATE_DIR = "trainer_state"   # the last completed epoch, for `train --resume` (training/state.py)
# The most a file of a checkpoint may hold, in bytes: a checkpoint is untrusted input, read only as regular
# files inside its folder (untrusted.read_regular_file). Generous: the weights (untrusted.WEIGHTS_LIMIT, 8 GiB);
# a 4,000,000-word tokenizer.json is about 120 MB.
TOKENIZER_LIMIT = 512 << 20
JSON_LIMIT = 64 << 20
# safetensors' dtype names (its header) as torch dtypes, to compare a file's tensors with a model's
_SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                       "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                       "U8": torch.uint8, "BOOL": torch.bool}


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same folder, fsync, ``os.replace``.

    A crash or an error at any point leaves ``path`` as it was (old content, or
    absent) and removes the temporary file.

    Raises:
        OSError: the folder is not writable or the disk is full; its ``filename`` is ``path``,
            and ``path`` is unchanged.
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual file mode
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        if isinstance(exc, OSError) and exc.filename is None:   # name the file the user knows
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(output: Path) -> None:
    """Create ``output`` if needed and prove it writable with a probe file (``os.access`` lies to root).

    Raises:
        UsageError: the folder cannot be created or written.
    """
    try:
        output.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"output {output} is a file, not a folder") from None
    except OSError as exc:
        raise UsageError(f"cannot create output folder {output}: {exc.strerror}") from None
    if not output.is_dir():
        raise UsageError(f"output {output} is not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=output)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"output folder {output} is not writable ({exc.strerror})") from None


def write_json(path: str | Path, obj: Any) -> None:
    """Atomically write ``obj`` as indented JSON."""
    atomic_write(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def checkpoint_config(config: Config, vocab_size: int, labels: tuple[str, ...] | list[str] = LABELS) -> dict[str, Any]:
    """The ``config.json`` payload: format version, the label names by id, vocabulary size, the run config."""
    return {"format_version": CHECKPOINT_FORMAT_VERSION, "architecture": "SentimentClassifier",
            "labels": list(labels), "vocab_size": vocab_size, **config.to_dict()}


CHECKPOINT_FILES = (WEIGHTS_FILE, TOKENIZER_FILE, CONFIG_FILE, METRICS_FILE)


@dataclass
class CheckpointRecord:
    """A checkpoint in memory: everything its folder holds, which :func:`write_checkpoint` alone writes.

    A training run builds it (the kept epoch's weights, then each post-fit step's part: the config with its
    post-fit values, the temperature or the multi-label decision, the metrics) and writes it once.

    Attributes:
        config: the run config, with its post-fit values (``[model] ngram_scale`` chosen by ``score_weight.py``).
        weights: the model's state dict, CPU tensors by name (a copy: the model may train on).
        vocab_size: the embedding's rows (``config.json``'s ``vocab_size``).
        tokenizer_json: the ``tokenizer.json`` text.
        metrics: the ``metrics.json`` content.
        labels: the class names by id (one per output of the model's head).
        temperature: ``config.json``'s ``"temperature"``, or ``None`` before one is fitted (the key is then absent).
        decision: a multi-label model's rule, ``config.json``'s ``"multi_label"``, or ``None``.
        compression: what :func:`~sentiment_cli.model.compress.compress` did to ``weights`` (``config.json``'s
            ``"compression"``; the writer stores those tables as their int8 rows), or ``None``: nothing.
        full: a compressed record's model before compression, while a training run holds it (``train
            --keep-full`` writes it beside); never written with this record.
    """

    config: Config
    weights: dict[str, torch.Tensor]
    vocab_size: int
    tokenizer_json: str
    metrics: dict[str, Any]
    labels: tuple[str, ...] = LABELS
    temperature: float | None = None
    decision: dict[str, Any] | None = None
    compression: Compression | None = None
    full: "CheckpointRecord | None" = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, model: SentimentClassifier, config: Config, tokenizer_json: str, metrics: dict[str, Any],
           labels: tuple[str, ...] | list[str] = LABELS) -> "CheckpointRecord":
        """The record of ``model`` as it is now: its weights copied to the CPU (``metrics`` is kept, not copied).

        Raises:
            ValueError: ``labels`` does not have one name per output of the model's head.
        """
        if len(labels) != model.num_labels:
            raise ValueError(f"{len(labels)} label names for a head of {model.num_labels} outputs")
        weights = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in model.state_dict().items()}
        return cls(config, weights, model.vocab_size, tokenizer_json, metrics, tuple(labels))

    def compressed(self, compression: Compression) -> "CheckpointRecord":
        """A copy of the record with its tables compressed (:func:`~sentiment_cli.model.compress.compress`) and
        ``compression`` recorded: what :func:`write_checkpoint` stores as int8 rows, and whose :meth:`model` gives
        exactly the logits of the folder written from it, once loaded.

        Raises:
            ValueError: already compressed, or a table holds NaN or infinite values.
        """
        if self.compression is not None:
            raise ValueError("the record is compressed already: compress the full record")
        return dataclasses.replace(self, weights=compress(self.weights, compression), compression=compression)

    def config_json(self) -> dict[str, Any]:
        """The ``config.json`` payload: :func:`checkpoint_config`, then ``"temperature"``, ``"multi_label"`` and
        ``"compression"`` when set.

        Raises:
            ValueError: a temperature or decision that loading would refuse (``untrusted.py``).
        """
        payload = checkpoint_config(self.config, self.vocab_size, self.labels)
        if self.temperature is not None:
            payload["temperature"] = float(stored_temperature(self.temperature))
        if self.decision is not None:
            payload["multi_label"] = stored_decision(self.decision, len(self.labels))
        if self.compression is not None:
            payload["compression"] = self.compression.record()
        return payload

    def model(self, device: str | torch.device = "cpu") -> SentimentClassifier:
        """The classifier ``config`` describes holding ``weights`` (checked as a loaded file's are), in eval mode.

        Raises:
            CheckpointError: the weights do not fit the config.
        """
        model = uninitialised_classifier(self.config, self.vocab_size, len(self.labels))
        load_weights(model, self.weights, "the kept weights", against="the run's config")
        return model.to(device).eval()

    def loaded(self, directory: str | Path, device: str | torch.device = "cpu") -> "Checkpoint":
        """The record as :func:`load_checkpoint` would give it back from ``directory``, without reading it.

        Raises:
            CheckpointError: the weights or the tokenizer do not fit the config.
        """
        tokenizer = check_token_ids(tokenizer_from_str(self.tokenizer_json, TOKENIZER_FILE), self.vocab_size,
                                    TOKENIZER_FILE)
        return Checkpoint(Path(directory), self.config, self.model(device), tokenizer, self.metrics, self.labels,
                          1.0 if self.temperature is None else self.temperature, self.decision, self.compression)


def write_checkpoint(directory: str | Path, record: CheckpointRecord) -> None:
    """Write ``record`` as a whole checkpoint folder, one atomic file at a time (weights, tokenizer, config,
    metrics: a crash leaves each file old or new). The one writer of ``config.json`` and, with
    :func:`write_metrics`, of ``metrics.json``.

    With a ``compression``, its tables are stored as their int8 rows (``weights_file.pack``), which requires
    ``weights`` to be :func:`~sentiment_cli.model.compress.compress`'s output for it.

    Raises:
        ValueError: a temperature or decision that loading would refuse, or compressed tables that are not what
            the compression gives (nothing is written then).
        OSError: the folder cannot be created or written.
    """
    config_json = record.config_json()
    weights = tensors_to_bytes(record.weights, codes=table_codes(record.weights, record.compression))
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(directory / WEIGHTS_FILE, weights)
    atomic_write(directory / TOKENIZER_FILE, record.tokenizer_json)
    write_json(directory / CONFIG_FILE, config_json)
    write_metrics(directory, record.metrics)


def write_metrics(directory: str | Path, metrics: dict[str, Any]) -> None:
    """Write ``metrics.json`` alone, atomically: a training epoch that kept no new weights, the search's record.

    Raises:
        OSError: the folder is not writable.
    """
    write_json(Path(directory) / METRICS_FILE, metrics)


def read_record(directory: str | Path) -> CheckpointRecord:
    """A checkpoint folder read back as its :class:`CheckpointRecord` (checked as :func:`load_checkpoint` checks it).

    The weights are the float state dict (a compressed checkpoint's tables whole, as
    :func:`~sentiment_cli.model.compress.compress` gave them), with its ``compression``.

    Raises:
        CheckpointError: as :func:`load_checkpoint`.
    """
    directory = Path(directory)
    ckpt = load_checkpoint(directory)
    text = read_checkpoint_file(directory / TOKENIZER_FILE, TOKENIZER_LIMIT).decode("utf-8")
    weights = read_weights(directory / WEIGHTS_FILE) if ckpt.compression is not None else \
        {k: v.detach().clone() for k, v in ckpt.model.state_dict().items()}
    record = CheckpointRecord(ckpt.config, weights, ckpt.model.vocab_size, text, ckpt.metrics, ckpt.labels)
    raw = _read_json(directory / CONFIG_FILE)
    record.temperature = ckpt.temperature if "temperature" in raw else None
    record.decision = ckpt.decision
    record.compression = ckpt.compression
    return record


def read_checkpoint_file(path: Path, limit: int = JSON_LIMIT) -> bytes:
    """The bytes of one file of a checkpoint folder: a regular file of at most ``limit`` bytes, inside the
    folder once links are resolved (see :func:`~sentiment_cli.untrusted.read_regular_file`).

    Raises:
        CheckpointError: missing, not a regular file (``/dev/zero``, a FIFO), a link leaving the folder, or
            larger than ``limit``; the message names the file.
    """
    try:
        return read_regular_file(path, limit, path.parent)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc.strerror})") from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        obj = json_loads(read_checkpoint_file(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:   # JsonNumberTooLong: over Python's 4,300 digits
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return obj


def read_metrics(directory: str | Path) -> dict[str, Any]:
    """A checkpoint's ``metrics.json`` (training's record: history, data, device, versions...), read as every
    file of the folder is (:func:`read_checkpoint_file`, within :data:`JSON_LIMIT`); ``{}`` when there is none.

    Every reader takes it from here, checked (:func:`~sentiment_cli.untrusted.stored_metrics`: each key it
    knows of the type its readers expect), so a crafted or damaged file is one error, not a crash in the card.

    Raises:
        CheckpointError: not a regular file inside the folder, over the limit, not a JSON object, or a key of
            the wrong type (the message names it: ``metrics.json: data must be an object, got an integer``).
    """
    path = Path(directory) / METRICS_FILE
    if not path.exists():
        return {}
    try:
        return stored_metrics(_read_json(path))
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}"[:300]) from None


@dataclass
class Checkpoint:
    """A loaded checkpoint: the model (eval mode, on ``device``), its tokenizer, config and metrics."""

    directory: Path
    config: Config
    model: SentimentClassifier
    tokenizer: Any  # tokenizers.Tokenizer
    metrics: dict[str, Any]
    labels: tuple[str, ...] = LABELS   # class names by id: the model's outputs, in order
    temperature: float = 1.0   # softmax(logits / temperature); see calibration.py
    decision: dict[str, Any] | None = None   # a multi-label model's rule (untrusted.stored_decision), else None
    compression: Compression | None = None   # config.json's "compression" (model/compress.py), else None

    @property
    def multi_label(self) -> bool:
        """Whether the model gives several labels per text (sigmoid per label, a threshold each)."""
        return self.decision is not None


def load_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], path: str | Path,
                 against: str = "config.json") -> None:
    """Copy ``state`` into ``model`` after checking every tensor's name, shape, dtype and values.

    ``load_state_dict`` alone would silently cast a tampered dtype (float16
    weights into float32 parameters) and accept NaN weights; both are refused.

    Raises:
        CheckpointError: a tensor is missing, extra, of another shape or dtype, or
            not finite, or the n-gram score's word pieces index outside its buckets; the message names
            ``path``, the tensor, and ``against`` (what the model was built from).
    """
    check_tensor_specs(_specs(model.state_dict()), _specs(state), path, against)
    for name, tensor in state.items():
        if tensor.is_floating_point() and not all_finite(tensor):
            raise CheckpointError(f"{path}: tensor {name} holds NaN or infinite values")
    score = getattr(model, "ngram_score", None)
    problem = score.pieces_problem(state["ngram_pieces"]) if score is not None and "ngram_pieces" in state else None
    if problem:
        raise CheckpointError(f"{path}: {problem}")
    model.load_state_dict(state, strict=True)


def all_finite(tensor: torch.Tensor) -> bool:
    """Whether every value of a floating-point ``tensor`` (any shape, empty included) is finite.

    Its least and greatest values are finite exactly when all are (``torch.aminmax`` propagates NaN, and an
    infinity is the least or the greatest): one pass, without the boolean copy that
    ``torch.isfinite(tensor).all()`` makes (several times slower on the n-gram score's millions of weights).
    """
    return tensor.numel() == 0 or all(bool(torch.isfinite(v)) for v in torch.aminmax(tensor))


def _specs(tensors: dict[str, torch.Tensor]) -> dict[str, tuple[Any, tuple[int, ...]]]:
    return {name: (t.dtype, tuple(t.shape)) for name, t in tensors.items()}


def check_tensor_specs(expected: dict[str, tuple[Any, tuple[int, ...]]], found: dict[str, tuple[Any, tuple[int, ...]]],
                       path: str | Path, against: str = "config.json") -> None:
    """Check that ``found`` has exactly the tensors of ``expected``, each of the same ``(dtype, shape)``.

    Raises:
        CheckpointError: a tensor is missing, extra, or of another dtype or shape; the message names
            ``path``, the tensor and ``against`` (what ``expected`` was built from).
    """
    missing, extra = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
    if missing or extra:
        what = "; ".join(x for x in (f"missing {', '.join(missing[:3])}" if missing else "",
                                     f"unexpected {', '.join(extra[:3])}" if extra else "") if x)
        raise CheckpointError(f"{path}: does not match {against} ({what})")
    for name, (dtype, shape) in found.items():
        want_dtype, want_shape = expected[name]
        if shape != want_shape or dtype != want_dtype:
            raise CheckpointError(f"{path}: does not match {against}: tensor {name} is {dtype} "
                                  f"{shape}, the model expects {want_dtype} {want_shape}"[:400])


def safetensors_specs(data: bytes, path: str | Path) -> tuple[dict[str, tuple[Any, tuple[int, ...]]],
                                                            dict[str, tuple[int, ...]]]:
    """Each tensor's ``(dtype, shape)`` as the model will hold it, from a safetensors file's header, without touching
    its data; and the shapes of the tables packed as their non-zero rows (:mod:`~sentiment_cli.weights_file`).
    A compressed checkpoint's compact tables count as float32 tables whole here (:func:`weights_layout` also gives
    how they are stored).

    The format: an 8-byte little-endian header length, then a JSON object mapping each tensor's name to
    its ``dtype``, ``shape`` and ``data_offsets`` (and an optional ``__metadata__``).

    Raises:
        CheckpointError: the header is truncated or malformed, or a packed table's entries do not fit its shape.
    """
    specs, packed, _ = weights_layout(data, path)
    return specs, packed


def weights_layout(data: bytes, path: str | Path) -> tuple[dict[str, tuple[Any, tuple[int, ...]]],
                                                         dict[str, tuple[int, ...]], dict[str, Any]]:
    """``(specs, packed, compact)``: :func:`safetensors_specs`'s two, and each compact table's ``(shape, code)``
    (``weights_file.compact_codes``), from the header alone.

    Raises:
        CheckpointError: the header is truncated or malformed, or a packed or compact table's entries do not fit its
            shape.
    """
    try:
        size = int.from_bytes(data[:8], "little")
        if len(data) < 8 or size > len(data) - 8:
            raise ValueError("the header is longer than the file")
        header = json_loads(data[8:8 + size])
        found = {name: (_SAFETENSORS_DTYPES.get(entry["dtype"], entry["dtype"]), tuple(int(n) for n in entry["shape"]))
                 for name, entry in header.items() if name != "__metadata__"}
        packed = packed_shapes(header.get("__metadata__"))
        compact = compact_codes(header.get("__metadata__"))
        return dense_specs(found, packed, compact), packed, compact
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CheckpointError(f"{path}: corrupt or truncated (its header: {str(exc)[:160]})") from None


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The state dict a checkpoint's ``model.safetensors`` holds, its packed tables rebuilt whole (CPU tensors by
    name); the file read within :data:`WEIGHTS_LIMIT` and checked as untrusted, against no model.

    Raises:
        CheckpointError: the file is missing, too large, corrupt, or a packed table does not fit its shape or
            would take over 4 x :data:`WEIGHTS_LIMIT` bytes whole.
    """
    path = Path(path)
    return tensors_from_bytes(read_checkpoint_file(path, WEIGHTS_LIMIT), path)


def tensors_to_bytes(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None,
                     codes: dict[str, Any] | None = None) -> bytes:
    """A safetensors file's bytes for ``tensors`` (CPU, contiguous), each mostly-zero table packed and each table
    of ``codes`` stored compactly (:func:`~sentiment_cli.weights_file.pack`), with ``metadata`` beside the
    packing's; read back by :func:`tensors_from_bytes`. The model's weights file and the trainer state's tensors
    file.

    Raises:
        ValueError: a table of ``codes`` is not what its compression gives.
    """
    packed_tensors, packed = pack(tensors, codes)
    return _canonical_header(st_save(packed_tensors, metadata={"format": "pt", **(metadata or {}), **packed}))


def _canonical_header(data: bytes) -> bytes:
    """A safetensors file's bytes with its JSON header's keys sorted: the library writes its metadata from a hash map
    whose order changes from process to process, so the same tensors gave other bytes (and another sha256) once the
    header held two metadata keys. The offsets are the data's own, so the order changes nothing else; the header is
    padded with spaces to 8 bytes, as the library pads it."""
    n = int.from_bytes(data[:8], "little")
    text = json.dumps(json.loads(data[8:8 + n]), sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + data[8 + n:]


def weights_bytes(weights: dict[str, torch.Tensor], compression: Compression | None = None) -> int:
    """The bytes ``model.safetensors`` takes for ``weights`` written with ``compression`` (``weights`` being
    :func:`~sentiment_cli.model.compress.compress`'s output for it): exactly what :func:`write_checkpoint`
    writes, so that a rule can choose the smallest candidate within a tolerance.

    Raises:
        ValueError: as :func:`tensors_to_bytes`.
    """
    return len(tensors_to_bytes(weights, codes=table_codes(weights, compression)))


def tensors_from_bytes(data: bytes, path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file's bytes ``data`` (named ``path`` in errors), its packed tables
    (:mod:`~sentiment_cli.weights_file`) rebuilt whole; checked as untrusted, against no model.

    Raises:
        CheckpointError: corrupt or truncated data, or a packed table that does not fit its shape or would take
            over 4 x :data:`WEIGHTS_LIMIT` bytes whole.
    """
    path = Path(path)
    specs, packed, compact = weights_layout(data, path)
    dense = sum(math.prod(shape) for _, shape in specs.values()) * 8   # at most 8 bytes a value
    if dense > 4 * WEIGHTS_LIMIT:   # no model bounds the packed tables here: the file's own size does
        raise CheckpointError(f"{path}: its packed tables would take {dense / 2**30:,.1f} GB whole, above "
                              f"{4 * WEIGHTS_LIMIT / 2**30:,.0f} GB")
    try:
        return unpack(st_load(data), packed, compact)
    except (SafetensorError, ValueError, OSError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: corrupt or truncated ({str(exc)[:120]})") from None


def _tensors(data: bytes, packed: dict[str, tuple[int, ...]], compact: dict[str, Any],
             path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(state, tables)``: the tensors of a weights file's bytes ``data``, the ``packed`` tables rebuilt whole, and
    each ``compact`` table as its stored rows (a :class:`~sentiment_cli.compact_table.CompactTable`).

    Raises:
        CheckpointError: corrupt data, packed or compact rows out of order or range, or a compact table's fill or
            exponents out of range.
    """
    try:
        rest, tables = compact_tables(st_load(data), compact)
        return unpack(rest, packed), tables
    except (SafetensorError, ValueError, OSError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: corrupt or truncated ({str(exc)[:120]})") from None


def read_config(directory: str | Path) -> tuple[Config, int]:
    """``(config, vocab_size)`` from ``config.json``.

    Raises:
        CheckpointError: no checkpoint there, invalid JSON, a newer format version, or invalid settings.
    """
    config, vocab_size, _ = read_checkpoint_config(directory)
    return config, vocab_size


def _labels(raw: Any, path: Path) -> tuple[str, ...]:
    """``config.json``'s ``labels``: absent in folders that predate label sets (then IMDB's two)."""
    if raw is None:
        return LABELS
    if (not isinstance(raw, list) or len(raw) < 2 or not all(isinstance(x, str) and x.strip() for x in raw)
            or len(set(raw)) != len(raw)):
        raise CheckpointError(f"{path}: labels must be a list of two or more distinct names, got {raw!r}"[:240])
    return tuple(raw)


def check_format_version(path: Path, version, newest: int, kind: str) -> None:
    """Refuse a file with no integer ``format_version``, or one newer than this tool reads.

    Raises:
        CheckpointError: naming ``path`` and, for a newer version, the upgrade.
    """
    if not isinstance(version, int):
        raise CheckpointError(f"{path}: no format_version; not a sentiment {kind}")
    if version > newest:
        raise CheckpointError(f"{path}: format_version {version} is newer than this tool reads "
                              f"({newest}); upgrade sentiment-cli")


def read_checkpoint_config(directory: str | Path) -> tuple[Config, int, tuple[str, ...]]:
    """``(config, vocab_size, labels)`` from ``config.json``; ``labels`` are the class names by id.

    Raises:
        CheckpointError: as :func:`read_config`; also malformed ``labels``.
    """
    directory = Path(directory)
    path = directory / CONFIG_FILE
    if not path.exists():
        raise CheckpointError(f"no trained model at {directory}; run `sentiment train` first")
    raw = _read_json(path)
    check_format_version(path, raw.pop("format_version", None), CHECKPOINT_FORMAT_VERSION, "checkpoint")
    try:
        vocab_size = stored_vocab_size(raw.pop("vocab_size", None))
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    labels = _labels(raw.pop("labels", None), path)
    for key in ("architecture", "temperature", "multi_label", "compression"):
        raw.pop(key, None)
    try:
        config = stored_config_from_dict(raw, str(path))
    except ConfigError as exc:
        raise CheckpointError(str(exc)) from None
    return config, vocab_size, labels


def checkpoint_inputs(directory: str | Path, data: str | None = None) -> list[tuple[str, str | Path]]:
    """What a command scoring the checkpoint ``directory`` reads, as ``(what, path)`` pairs for
    :func:`~sentiment_cli.outputs.check_output`'s ``inputs``: the folder itself, and ``data`` (``--data``) or,
    without it, the data the checkpoint was trained on (``config.json``'s ``[data] source``; left out when
    ``config.json`` cannot be read, which loading the checkpoint then reports). Reads only ``config.json``."""
    inputs: list[tuple[str, str | Path]] = [("the checkpoint folder", directory)]
    if data is not None:
        return inputs + [("--data", data)]
    try:
        source = (_read_json(Path(directory) / CONFIG_FILE).get("data") or {}).get("source")
    except (CheckpointError, AttributeError):
        return inputs
    return inputs + ([("the checkpoint's data", source)] if isinstance(source, str) and source else [])


def load_checkpoint(directory: str | Path, device: str | torch.device = "cpu", *,
                    pretrained_ok: bool = False) -> Checkpoint:
    """Load a checkpoint folder for inference, without unpickling anything.

    Args:
        directory: the checkpoint folder.
        device: where to put the model.
        pretrained_ok: also accept an encoder from ``sentiment pretrain``
            (whose dense head is untrained).

    Everything is checked before the model is allocated: each file is a regular file inside the folder
    within its size limit (:data:`WEIGHTS_LIMIT`, :data:`TOKENIZER_LIMIT`, :data:`JSON_LIMIT`), the
    config's sizes within their bounds, the temperature within
    :data:`~sentiment_cli.untrusted.TEMPERATURE_RANGE`, every token id below ``vocab_size``, and the weights'
    tensors (from the safetensors header) those of the model the config describes.

    Raises:
        CheckpointError: a file is missing, truncated, corrupt, of a newer
            format, not a regular file inside the folder, too large, out of
            its bounds, or does not match the others (shapes, vocabulary
            size, token ids); the message names the file. Also a pretrained
            encoder unless ``pretrained_ok``.
    """
    directory = Path(directory)
    config, vocab_size, labels = read_checkpoint_config(directory)   # sizes within the config's bounds
    temperature = read_temperature(directory)
    decision = read_decision(directory, len(labels))
    tokenizer = _checkpoint_tokenizer(directory / TOKENIZER_FILE, vocab_size)
    metrics = read_metrics(directory)
    if metrics.get("kind") == "pretrained" and not pretrained_ok:
        raise CheckpointError(f"{directory} holds a pretrained encoder whose classifier head is untrained; "
                              f"fine-tune it first: sentiment train --init {directory}")
    compression = read_compression(directory)
    weights_path = directory / WEIGHTS_FILE
    data = read_checkpoint_file(weights_path, WEIGHTS_LIMIT)
    specs, packed, compact = weights_layout(data, weights_path)
    model = _model_for(config, vocab_size, len(labels), specs, weights_path)
    state, tables = _tensors(data, packed, compact, weights_path)
    del data
    _install(model, tables, weights_path)
    load_weights(model, state, weights_path)
    model.to(device).eval()
    return Checkpoint(directory, config, model, tokenizer, metrics, labels, temperature, decision, compression)


def _install(model: SentimentClassifier, tables: dict[str, Any], path: Path) -> None:
    """Put a compressed checkpoint's compact tables in ``model`` in place of its float ones (freed), so that the
    loaded model holds their stored rows only (:func:`~sentiment_cli.model.compress.install_tables`).

    Raises:
        CheckpointError: a table the model has no place for; the message names ``path``.
    """
    try:
        install_tables(model, tables)
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


def read_compression(directory: str | Path) -> Compression | None:
    """``config.json``'s ``"compression"`` (what was pruned and quantized, ``model/compress.py``), or ``None`` for a
    checkpoint that was not compressed.

    Raises:
        CheckpointError: ``config.json`` is missing or invalid, or the record is malformed.
    """
    path = Path(directory) / CONFIG_FILE
    raw = _read_json(path).get("compression")
    if raw is None:
        return None
    try:
        return Compression.from_record(raw)
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


def _checkpoint_tokenizer(path: Path, vocab_size: int) -> Any:
    """``tokenizer.json``, read within its size limit, with exactly ``vocab_size`` tokens and every id it can
    give below ``vocab_size`` (the embedding's rows).

    Raises:
        CheckpointError: unreadable, not a tokenizer, or not matching ``vocab_size``; the message names it.
    """
    try:
        text = read_checkpoint_file(path, TOKENIZER_LIMIT).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: not a valid tokenizer file (not UTF-8: {exc.reason})") from None
    tokenizer = tokenizer_from_str(text, path)
    if tokenizer.get_vocab_size() != vocab_size:
        raise CheckpointError(f"{path}: vocabulary of {tokenizer.get_vocab_size()} "
                              f"tokens, but config.json says vocab_size {vocab_size}")
    return check_token_ids(tokenizer, vocab_size, path)


def _model_for(config: Config, vocab_size: int, num_labels: int, found: dict[str, tuple[Any, tuple[int, ...]]],
               path: Path) -> SentimentClassifier:
    """The model ``config.json`` describes, allocated only once the weights' tensors (``found``: their
    ``(dtype, shape)`` from the file's header) match it: they are first compared with a model built on the
    ``meta`` device, which allocates no memory (:func:`~sentiment_cli.model.skeleton.tensor_specs`). The model
    returned is not initialised (its weights are loaded next, every one of them).

    Raises:
        CheckpointError: the tensors do not match (the message names ``path``), or the config describes
            no model (naming ``config.json``).
    """
    try:
        check_tensor_specs(tensor_specs(config, vocab_size, num_labels), found, path)
        return uninitialised_classifier(config, vocab_size, num_labels)
    except ValueError as exc:
        raise CheckpointError(f"{path.parent / CONFIG_FILE}: {exc}") from None


def read_temperature(directory: str | Path) -> float:
    """The temperature in ``config.json`` (Guo et al. 2017): 1.0 when absent (a checkpoint written before it).

    Raises:
        CheckpointError: ``config.json`` is missing or invalid, or the temperature is not a finite number > 0.
    """
    path = Path(directory) / CONFIG_FILE
    try:
        return stored_temperature(_read_json(path).get("temperature", 1.0))
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


def read_decision(directory: str | Path, num_labels: int) -> dict[str, Any] | None:
    """A multi-label model's decision rule, ``config.json``'s ``"multi_label"`` (per-label temperatures and
    thresholds, ``min_labels``), checked by :func:`~sentiment_cli.untrusted.stored_decision`; ``None`` for a
    model of one label per text.

    Raises:
        CheckpointError: ``config.json`` is missing or invalid, or the record is malformed.
    """
    path = Path(directory) / CONFIG_FILE
    raw = _read_json(path).get("multi_label")
    if raw is None:
        return None
    try:
        return stored_decision(raw, num_labels)
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


# ----------------------------------------------------------------------------- eval records

EVAL_PREFIX = "eval_"


def weights_digest(directory: str | Path) -> str | None:
    """``"sha256:<hex>"`` of ``model.safetensors``, or ``None`` when it is missing.

    Raises:
        CheckpointError: it is not a regular file inside the folder, or is over :data:`WEIGHTS_LIMIT`.
    """
    path = Path(directory) / WEIGHTS_FILE
    try:
        return file_digest(path, WEIGHTS_LIMIT, path.parent)
    except FileNotFoundError:
        return None


def record_eval(directory: str | Path, result: dict[str, Any], data_source: str, own: bool = True) -> Path:
    """Keep ``sentiment eval``'s result for its split in ``eval_<split>.json`` (the run's own data: the card's
    headline result for that split), or, for other data, in ``eval_<split>-<digest>.json``, one per dataset,
    listed beside it as ``"<split>, <data's name>"`` and never replacing it.

    The model card (``README.md``) is not rewritten here; the caller does that
    (see :func:`~sentiment_cli.evaluation.evaluate.evaluate_checkpoint`).

    Args:
        directory: the checkpoint folder that was evaluated.
        result: the ``eval --json`` object (``split``, ``accuracy``...; ``errors`` is not kept).
        data_source: the dataset the split came from.
        own: ``data_source`` is the data the checkpoint was trained on (``eval`` without ``--data``).

    Returns:
        The path written.

    Raises:
        OSError: the folder is not writable (the eval itself is unaffected).
    """
    directory = Path(directory)
    record = {k: v for k, v in result.items() if k not in ("errors", "checkpoint")}
    record.update(data=data_source, evaluated=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  weights=weights_digest(directory))
    path = directory / f"{EVAL_PREFIX}{result['split']}.json"
    if not own:
        where = Path(data_source).expanduser()
        key = str(where.resolve()) if where.exists() else data_source
        path = path.with_stem(f"{path.stem}-{hashlib.sha256(key.encode()).hexdigest()[:12]}")
        record["label"] = f"{result['split']}, {where.name or data_source}"
    write_json(path, record)
    return path


def _current_records(directory: Path, prefix: str, required: str, weights: str | None):
    """``(path, record)`` of each ``<prefix>*.json`` in ``directory`` that belongs to the weights now there
    (``weights``: their :func:`weights_digest`, computed here when not given) and holds ``required``; stale,
    unreadable or malformed records are skipped."""
    current = weights or weights_digest(directory)
    for path in sorted(directory.glob(f"{prefix}*.json")):
        try:
            record = json_loads(read_checkpoint_file(path))
        except (CheckpointError, ValueError):
            continue
        if isinstance(record, dict) and record.get("weights") == current and required in record:
            yield path, record


def read_evals(directory: str | Path, weights: str | None = None) -> dict[str, dict[str, Any]]:
    """The eval records of the weights now in ``directory``, by split, then those of other data by their
    ``label`` (``"test, other.csv"``, :func:`record_eval`); stale or unreadable ones are skipped.

    ``weights`` is their :func:`weights_digest` when the caller has it already (it hashes the whole file).
    """
    records = [record for _, record in _current_records(Path(directory), EVAL_PREFIX, "split", weights)]
    own = {record["split"]: record for record in records if "label" not in record}
    return own | {str(record["label"]): record for record in records if "label" in record}


EXPORT_PREFIX = "export_"


def read_exports(directory: str | Path, weights: str | None = None) -> dict[str, dict[str, Any]]:
    """The ``sentiment export`` records (``export_<name>.json``) of the weights now in ``directory``, by name
    (stale or unreadable ones are skipped); ``weights`` as for :func:`read_evals`."""
    return {path.stem.removeprefix(EXPORT_PREFIX): record
            for path, record in _current_records(Path(directory), EXPORT_PREFIX, "parity", weights)}

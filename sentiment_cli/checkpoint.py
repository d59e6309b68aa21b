"""The checkpoint folder: atomic writes, safe loads, a format version.

A checkpoint is a self-describing folder, in the manner of Hugging Face's::

    config.json        all settings, the vocabulary size, labels, format_version, and the
                       ``temperature`` fitted on the validation split (1.0 = none; absent
                       in checkpoints written before it existed)
    model.safetensors  the weights (never pickle)
    tokenizer.json     the ``tokenizers`` tokenizer
    metrics.json       per-epoch history, device, wall time, seed, versions
    eval_<split>.json  the last ``sentiment eval`` result per split, tagged with the
                       SHA-256 of the weights it scored (:func:`record_eval`)
    export_<name>.json the last ``sentiment export`` of each kind (``onnx``, ``onnx-int8``): its
                       parity check against PyTorch, sizes, same tag (:func:`read_exports`)

Every file is written to a temporary file in the same folder and moved into
place with ``os.replace``, so a crash leaves either the old or the new file,
never half of one. Loading never unpickles.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from .config import Config, stored_config_from_dict
from .errors import CheckpointError, ConfigError, UsageError
from .data.labels import LABELS
from .model.classifier import SentimentClassifier
from .data.tokenizer import load_tokenizer

CHECKPOINT_FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
METRICS_FILE = "metrics.json"


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


def save_weights(directory: str | Path, model: torch.nn.Module) -> None:
    """Atomically write the model's parameters to ``model.safetensors`` (CPU tensors)."""
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    atomic_write(Path(directory) / WEIGHTS_FILE, st_save(state, metadata={"format": "pt"}))


def checkpoint_config(config: Config, vocab_size: int, labels: tuple[str, ...] | list[str] = LABELS) -> dict[str, Any]:
    """The ``config.json`` payload: format version, the label names by id, vocabulary size, the run config."""
    return {"format_version": CHECKPOINT_FORMAT_VERSION, "architecture": "SentimentClassifier",
            "labels": list(labels), "vocab_size": vocab_size, **config.to_dict()}


def save_checkpoint(directory: str | Path, *, config: Config, model: SentimentClassifier,
                    tokenizer_json: str, metrics: dict[str, Any],
                    labels: tuple[str, ...] | list[str] = LABELS) -> None:
    """Write (or refresh) a whole checkpoint folder, one atomic file at a time.

    Args:
        labels: the class names by id (``model.num_labels`` of them).

    Raises:
        ValueError: ``labels`` does not have one name per output of the model's head.
        OSError: the folder cannot be created or written.
    """
    if len(labels) != model.num_labels:
        raise ValueError(f"{len(labels)} label names for a head of {model.num_labels} outputs")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_weights(directory, model)
    atomic_write(directory / TOKENIZER_FILE, tokenizer_json)
    write_json(directory / CONFIG_FILE, checkpoint_config(config, model.vocab_size, labels))
    write_json(directory / METRICS_FILE, metrics)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return obj


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


def load_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], path: str | Path,
                 against: str = "config.json") -> None:
    """Copy ``state`` into ``model`` after checking every tensor's name, shape, dtype and values.

    ``load_state_dict`` alone would silently cast a tampered dtype (float16
    weights into float32 parameters) and accept NaN weights; both are refused.

    Raises:
        CheckpointError: a tensor is missing, extra, of another shape or dtype, or
            not finite; the message names ``path``, the tensor, and ``against`` (what
            the model was built from).
    """
    expected = model.state_dict()
    missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or extra:
        what = "; ".join(x for x in (f"missing {', '.join(missing[:3])}" if missing else "",
                                     f"unexpected {', '.join(extra[:3])}" if extra else "") if x)
        raise CheckpointError(f"{path}: does not match {against} ({what})")
    for name, tensor in state.items():
        want = expected[name]
        if tensor.shape != want.shape or tensor.dtype != want.dtype:
            raise CheckpointError(f"{path}: does not match {against}: tensor {name} is {tensor.dtype} "
                                  f"{tuple(tensor.shape)}, the model expects {want.dtype} {tuple(want.shape)}")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"{path}: tensor {name} holds NaN or infinite values")
    model.load_state_dict(state, strict=True)


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
    version = raw.pop("format_version", None)
    if not isinstance(version, int):
        raise CheckpointError(f"{path}: no format_version; not a sentiment checkpoint")
    if version > CHECKPOINT_FORMAT_VERSION:
        raise CheckpointError(f"{path}: format_version {version} is newer than this tool reads "
                              f"({CHECKPOINT_FORMAT_VERSION}); upgrade sentiment-cli")
    vocab_size = raw.pop("vocab_size", None)
    if not isinstance(vocab_size, int) or vocab_size < 3:
        raise CheckpointError(f"{path}: vocab_size must be an integer >= 3")
    labels = _labels(raw.pop("labels", None), path)
    for key in ("architecture", "temperature"):
        raw.pop(key, None)
    try:
        config = stored_config_from_dict(raw, str(path))
    except ConfigError as exc:
        raise CheckpointError(str(exc)) from None
    return config, vocab_size, labels


def load_checkpoint(directory: str | Path, device: str | torch.device = "cpu", *,
                    pretrained_ok: bool = False) -> Checkpoint:
    """Load a checkpoint folder for inference, without unpickling anything.

    Args:
        directory: the checkpoint folder.
        device: where to put the model.
        pretrained_ok: also accept an encoder from ``sentiment pretrain``
            (whose dense head is untrained).

    Raises:
        CheckpointError: a file is missing, truncated, corrupt, of a newer
            format, or does not match the others (shapes, vocabulary size);
            the message names the file. Also a pretrained encoder unless
            ``pretrained_ok``.
    """
    directory = Path(directory)
    config, vocab_size, labels = read_checkpoint_config(directory)
    tokenizer = load_tokenizer(directory / TOKENIZER_FILE)
    if tokenizer.get_vocab_size() != vocab_size:
        raise CheckpointError(f"{directory / TOKENIZER_FILE}: vocabulary of {tokenizer.get_vocab_size()} "
                              f"tokens, but config.json says vocab_size {vocab_size}")
    weights_path = directory / WEIGHTS_FILE
    try:
        state = st_load(weights_path.read_bytes())
    except FileNotFoundError:
        raise CheckpointError(f"{weights_path}: missing") from None
    except (SafetensorError, ValueError, OSError) as exc:
        raise CheckpointError(f"{weights_path}: corrupt or truncated ({str(exc)[:120]})") from None
    model = SentimentClassifier.from_config(config, vocab_size, len(labels))
    load_weights(model, state, weights_path)
    metrics_path = directory / METRICS_FILE
    metrics = _read_json(metrics_path) if metrics_path.exists() else {}
    if metrics.get("kind") == "pretrained" and not pretrained_ok:
        raise CheckpointError(f"{directory} holds a pretrained encoder whose classifier head is untrained; "
                              f"fine-tune it first: sentiment train --init {directory}")
    model.to(device).eval()
    return Checkpoint(directory, config, model, tokenizer, metrics, labels, read_temperature(directory))


def read_temperature(directory: str | Path) -> float:
    """The temperature in ``config.json`` (Guo et al. 2017): 1.0 when absent (a checkpoint written before it).

    Raises:
        CheckpointError: ``config.json`` is missing or invalid, or the temperature is not a finite number > 0.
    """
    path = Path(directory) / CONFIG_FILE
    value = _read_json(path).get("temperature", 1.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise CheckpointError(f"{path}: temperature must be a finite number > 0, got {value!r}")
    return float(value)


def write_temperature(directory: str | Path, temperature: float) -> None:
    """Store ``temperature`` as ``config.json``'s top-level ``"temperature"``, atomically; the rest is kept.

    Raises:
        CheckpointError: ``config.json`` is missing or invalid.
        ValueError: ``temperature`` is not a finite number > 0.
        OSError: the folder is not writable (``config.json`` is then unchanged).
    """
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature}")
    path = Path(directory) / CONFIG_FILE
    raw = _read_json(path)
    raw["temperature"] = float(temperature)
    write_json(path, raw)


# ----------------------------------------------------------------------------- eval records

EVAL_PREFIX = "eval_"


def weights_digest(directory: str | Path) -> str | None:
    """``"sha256:<hex>"`` of ``model.safetensors``, or ``None`` when it is missing."""
    path = Path(directory) / WEIGHTS_FILE
    try:
        with open(path, "rb") as fh:
            return "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def record_eval(directory: str | Path, result: dict[str, Any], data_source: str) -> Path:
    """Keep ``sentiment eval``'s result for its split in ``eval_<split>.json``.

    The model card (``README.md``) is not rewritten here; the caller does that
    (see :func:`~sentiment_cli.evaluation.evaluate.evaluate_checkpoint`).

    Args:
        directory: the checkpoint folder that was evaluated.
        result: the ``eval --json`` object (``split``, ``accuracy``...; ``errors`` is not kept).
        data_source: the dataset the split came from.

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
    write_json(path, record)
    return path


def _current_records(directory: Path, prefix: str, required: str, weights: str | None):
    """``(path, record)`` of each ``<prefix>*.json`` in ``directory`` that belongs to the weights now there
    (``weights``: their :func:`weights_digest`, computed here when not given) and holds ``required``; stale,
    unreadable or malformed records are skipped."""
    current = weights or weights_digest(directory)
    for path in sorted(directory.glob(f"{prefix}*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("weights") == current and required in record:
            yield path, record


def read_evals(directory: str | Path, weights: str | None = None) -> dict[str, dict[str, Any]]:
    """The eval records of the weights now in ``directory``, by split (stale or unreadable ones are skipped).

    ``weights`` is their :func:`weights_digest` when the caller has it already (it hashes the whole file).
    """
    return {record["split"]: record
            for _, record in _current_records(Path(directory), EVAL_PREFIX, "split", weights)}


EXPORT_PREFIX = "export_"


def read_exports(directory: str | Path, weights: str | None = None) -> dict[str, dict[str, Any]]:
    """The ``sentiment export`` records (``export_<name>.json``) of the weights now in ``directory``, by name
    (stale or unreadable ones are skipped); ``weights`` as for :func:`read_evals`."""
    return {path.stem.removeprefix(EXPORT_PREFIX): record
            for path, record in _current_records(Path(directory), EXPORT_PREFIX, "parity", weights)}

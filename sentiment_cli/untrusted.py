"""What the loaders accept of an untrusted checkpoint folder or exported file.

A checkpoint (or an ``.onnx`` file) may come from anywhere, so loading reads only regular files of a bounded
size, inside their folder once links are resolved (:func:`open_regular_file`, :func:`read_regular_file`), and
checks each stored value before anything is allocated from it (:func:`stored_temperature`,
:func:`stored_vocab_size`). Both backends, the PyTorch one (``checkpoint.py``) and the ONNX one
(``inference/onnx_backend.py``), keep these rules; the ONNX one without torch.
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from .errors import CheckpointError

# Bounds of what a checkpoint (or an exported file) may ask of the loader.
MAX_VOCAB_SIZE = 4_000_000   # rows of the token embedding; [data] vocab_size and config.json's vocab_size
# softmax(logits / T) in float32 (inference/probabilities.py) stays finite while T is a normal float32 and
# logits / T cannot overflow: with T >= 1e-3 that needs |logits| > 3.4e35. Training fits T in [0.05, 20].
TEMPERATURE_RANGE = (1e-3, 1e3)


def stored_temperature(value: Any) -> float:
    """A checkpoint's temperature (``config.json``'s ``"temperature"``), checked: a number in
    :data:`TEMPERATURE_RANGE`, the one rule of both backends.

    Raises:
        ValueError: anything else (not a number, NaN, infinite, <= 0, or outside the range); the message
            starts with ``temperature must be``.
    """
    lo, hi = TEMPERATURE_RANGE
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ValueError(f"temperature must be a finite number > 0, from {lo:g} to {hi:g}, got {value!r}"[:200])
    return float(value)


def stored_vocab_size(value: Any) -> int:
    """A checkpoint's ``vocab_size`` (the token embedding's rows), checked: an integer from 3 to
    :data:`MAX_VOCAB_SIZE`.

    Raises:
        ValueError: anything else; the message starts with ``vocab_size must be``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 3 <= value <= MAX_VOCAB_SIZE:
        raise ValueError(f"vocab_size must be an integer from 3 to {MAX_VOCAB_SIZE:,}, got {value!r}"[:200])
    return value


def open_regular_file(path: str | Path, limit: int, folder: str | Path | None = None) -> BinaryIO:
    """``path`` opened for reading (binary), only if it is a regular file of at most ``limit`` bytes and,
    given ``folder``, inside ``folder`` once links are resolved (a link within the folder is followed).

    A device (``/dev/zero``), a FIFO or a socket is refused without reading it (the file is opened
    non-blocking and checked with ``fstat``, so a FIFO cannot stall the open), and so is a file larger
    than ``limit`` bytes.

    Raises:
        FileNotFoundError: no such file (or a dangling link).
        CheckpointError: outside ``folder``, not a regular file, or larger than ``limit``; the message
            names ``path``.
    """
    path = Path(path)
    if folder is not None:
        real, root = os.path.realpath(path), os.path.realpath(folder)
        if os.path.commonpath([real, root]) != root:
            raise CheckpointError(f"{path}: a link to a file outside {folder} ({real}); a checkpoint's files "
                                  "must be inside its folder")
    fh = os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb")
    info = os.fstat(fh.fileno())
    problem = ("not a regular file (a device, FIFO, socket or folder); refusing to read it"
               if not stat.S_ISREG(info.st_mode) else
               f"larger than {limit:,} bytes ({info.st_size:,}); not a checkpoint file" if info.st_size > limit else "")
    if problem:
        fh.close()
        raise CheckpointError(f"{path}: {problem}")
    return fh


def read_regular_file(path: str | Path, limit: int, folder: str | Path | None = None) -> bytes:
    """The bytes of ``path``, as :func:`open_regular_file` allows (at most ``limit`` bytes are ever read).

    Raises:
        FileNotFoundError, CheckpointError: as :func:`open_regular_file`.
    """
    with open_regular_file(path, limit, folder) as fh:
        data = fh.read(os.fstat(fh.fileno()).st_size + 1)
    if len(data) > limit:   # it grew while being read
        raise CheckpointError(f"{path}: larger than {limit:,} bytes; not a checkpoint file")
    return data




DECISION_TEMPERATURES = (1e-3, 1e3)   # a multi-label record's per-label temperatures outside are refused


def stored_decision(raw: Any, num_labels: int) -> dict[str, Any]:
    """A multi-label checkpoint's decision record (``config.json``'s ``"multi_label"``: ``temperatures``,
    ``thresholds``, ``min_labels``), checked: ``{"temperatures": [float], "thresholds": [float], "min_labels": int}``.

    Raises:
        ValueError: not an object; lists not of ``num_labels`` finite numbers; a temperature outside
            :data:`DECISION_TEMPERATURES` or a threshold outside (0, 1]; ``min_labels`` not 0 or 1.
    """
    if not isinstance(raw, dict):
        raise ValueError("the multi_label record must be an object")
    temps = _numbers(raw.get("temperatures"), num_labels, "temperatures")
    thresholds = _numbers(raw.get("thresholds"), num_labels, "thresholds")
    lo, hi = DECISION_TEMPERATURES
    if not all(lo <= t <= hi for t in temps):
        raise ValueError(f"multi_label temperatures must lie in [{lo:g}, {hi:g}]")
    if not all(0.0 < t <= 1.0 for t in thresholds):
        raise ValueError("multi_label thresholds must lie in (0, 1]")
    min_labels = raw.get("min_labels", 0)
    if isinstance(min_labels, bool) or min_labels not in (0, 1):
        raise ValueError(f"multi_label min_labels must be 0 or 1, got {str(min_labels)[:20]!r}")
    return {"temperatures": temps, "thresholds": thresholds, "min_labels": int(min_labels)}


def _numbers(value: Any, n: int, name: str) -> list[float]:
    """``value`` as ``n`` finite floats, or a ValueError naming the record's ``name``."""
    if not isinstance(value, list) or len(value) != n or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value):
        raise ValueError(f"multi_label {name} must be a list of {n} finite numbers")
    return [float(v) for v in value]

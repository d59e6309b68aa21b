"""What the loaders accept of an untrusted checkpoint folder or exported file.

A checkpoint (or an ``.onnx`` file) may come from anywhere, so loading reads only regular files of a bounded
size, inside their folder once links are resolved (:func:`open_regular_file`, :func:`read_regular_file`), and
checks each stored value before anything is allocated from it (:func:`stored_temperature`,
:func:`stored_vocab_size`). Both backends, the PyTorch one (``checkpoint.py``) and the ONNX one
(``inference/onnx_backend.py``), keep these rules; the ONNX one without torch.
"""

from __future__ import annotations

import hashlib
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
# The most a checkpoint's model.safetensors may hold, in bytes. Generous: the weights of a 4,000,000-word
# vocabulary at d_model 256 are 4 GB.
WEIGHTS_LIMIT = 8 << 30


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




def file_digest(path: str | Path, limit: int, folder: str | Path | None = None) -> str:
    """``"sha256:<hex>"`` of a file read as :func:`open_regular_file` reads it (a regular file within ``limit``
    bytes, inside ``folder``): the tag of a checkpoint's weights on its eval and export records, and in an
    exported ONNX file (``inference/export.py``), checked by the ONNX backend without torch.

    Raises:
        FileNotFoundError, CheckpointError: as :func:`open_regular_file`.
    """
    with open_regular_file(path, limit, folder) as fh:
        return "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()


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


# ----------------------------------------------------------------------------- metrics.json's shape
# A spec: a kind ("int", "number", "str", "bool", "any"), a tuple of specs (any of them; None: null), an
# _Object (known keys, each optional unless required; other keys pass), a _ListOf or a _MapOf.

class _Object:
    def __init__(self, fields: dict[str, Any], required: tuple[str, ...] = ()):
        self.fields, self.required = fields, required


class _ListOf:
    def __init__(self, item: Any):
        self.item = item


class _MapOf:
    def __init__(self, value: Any):
        self.value = value


_NUM, _OPT_NUM, _OPT_INT, _OPT_STR = "number", ("number", None), ("int", None), ("str", None)
_TOML_VALUE = ("int", "number", "str", "bool", _ListOf(("int", "number", "str", "bool")))
_HISTORY_ROW = _Object({"epoch": "int", **{k: _OPT_NUM for k in (
    "train_loss", "train_accuracy", "validation_loss", "validation_accuracy", "validation_f1_macro",
    "train_examples_per_second", "train_seconds")}}, required=("epoch",))
_CANDIDATE = _Object({"name": "str", "kind": "str", "status": "str", "validation_accuracy": _OPT_NUM,
                      "validation_nll": _OPT_NUM, "seconds": _OPT_NUM, "ended": _OPT_STR,
                      "settings": (_MapOf("any"), None)})
_BEHAVIOUR = _Object({"suite": "str", "half": "str", "mean_failure_rate": _OPT_NUM, "cases": "int",
                      "capabilities": _ListOf(_Object({"capability": "str", "tests": "int", "failure_rate": _OPT_NUM})),
                      "tests": _ListOf(_Object({"name": "str", "capability": "str", "type": "str", "cases": "int",
                                                "failure_rate": _OPT_NUM}, required=("name",)))})
METRICS_SHAPE = _Object({
    "created": "str", "seed": "int", "kind": "str", "objective": "str", "num_parameters": _MapOf("int"),
    "config": _MapOf("any"), "history": _ListOf(_HISTORY_ROW), "best_epoch": _OPT_INT,
    "best_validation_accuracy": _OPT_NUM, "best_validation_f1_macro": _OPT_NUM, "stopped_early": "bool",
    "wall_time_seconds": _OPT_NUM, "device": "str", "device_name": _OPT_STR, "world_size": "int",
    "versions": _MapOf(_OPT_STR), "class_weights": (_MapOf(_NUM), None), "made_by_this_run": "bool",
    "pretrained": (_MapOf("any"), None), "held_out_run": (_MapOf("any"), None),
    "data": _Object({"source": "str", "train_examples": _OPT_INT, "validation_examples": _OPT_INT,
                     "reviews": _OPT_INT, "fingerprint": "str", "negation_augment": "int", "multi_label": "bool",
                     "reading": _OPT_STR, "unlabelled_rows": "int", "validation_from": _OPT_STR,
                     "labels": _ListOf("str"), "class_counts": (_MapOf((_MapOf("int"), None)), None)}),
    "calibration": _Object({"temperature": _NUM, "ece": _NUM, "ece_uncalibrated": _OPT_NUM, "ngram_scale": _NUM,
                            "decision": (_MapOf("any"), None), "shared_threshold_labels": (_ListOf("any"), None)}),
    "behaviour": (_BEHAVIOUR, None),
    "search": (_Object({"chosen": "str", "chosen_by": _Object({"rule": "str", "why": _OPT_STR}), "metric": "str",
                        "budget_seconds": _OPT_NUM, "seconds": _OPT_NUM, "candidates": _ListOf(_CANDIDATE)}), None),
    "data_rules": _ListOf(_Object({"key": "str", "value": _TOML_VALUE, "reason": "str"},
                                  required=("key", "value", "reason"))),
})


def stored_metrics(raw: Any) -> dict[str, Any]:
    """A checkpoint's ``metrics.json`` (training's record), checked against :data:`METRICS_SHAPE`: each key the
    readers (the model card, ``info``, ``eval``, ``export``, ``train --init``) use, where present, of the type
    they expect, down to the rows of ``history``, the search's candidates and the behavioural tests. Keys it
    does not know pass (a newer version's).

    Raises:
        ValueError: not an object, or a key of another type; the message names the key's path
            (``data.class_counts.train must be an object, got int``).
    """
    _check(raw, METRICS_SHAPE, "")
    return raw


def _check(value: Any, spec: Any, path: str) -> None:
    """Raise a ValueError naming ``path`` unless ``value`` fits ``spec`` (see :data:`METRICS_SHAPE`)."""
    if isinstance(spec, tuple):
        if value is None and None in spec:
            return
        fits = [s for s in spec if s is not None and _kind_fits(value, s)]
        if not fits:
            raise ValueError(_wrong(path, " or ".join(_name(s) for s in spec), value))
        return _check(value, fits[0], path)
    if not _kind_fits(value, spec):
        raise ValueError(_wrong(path, _name(spec), value))
    if isinstance(spec, _Object):
        for key in spec.required:
            if key not in value:
                raise ValueError(f"{path or 'metrics.json'} has no {key!r}")
        for key, inner in spec.fields.items():
            if key in value:
                _check(value[key], inner, f"{path}.{key}" if path else key)
    elif isinstance(spec, _ListOf):
        for i, item in enumerate(value):
            _check(item, spec.item, f"{path}[{i}]")
    elif isinstance(spec, _MapOf):
        for key, item in value.items():
            _check(item, spec.value, f"{path}.{key}")


def _kind_fits(value: Any, spec: Any) -> bool:
    if isinstance(spec, (_Object, _MapOf)):
        return isinstance(value, dict)
    if isinstance(spec, _ListOf):
        return isinstance(value, list)
    if spec == "any":
        return True
    if isinstance(value, bool):
        return spec == "bool"
    return isinstance(value, {"int": int, "number": (int, float), "str": str, "bool": bool}[spec])


def _name(spec: Any) -> str:
    if spec is None:
        return "null"
    if isinstance(spec, (_Object, _MapOf)):
        return "an object"
    if isinstance(spec, _ListOf):
        return "a list"
    return {"int": "an integer", "number": "a number", "str": "a string", "bool": "true or false"}.get(spec, spec)


def _wrong(path: str, expected: str, value: Any) -> str:
    found = ("null" if value is None else "true or false" if isinstance(value, bool) else
             {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number"}
             .get(type(value), type(value).__name__))
    return f"{path or 'metrics.json'} must be {expected}, got {found}"

"""Resumable training state in ``<checkpoint>/trainer_state/``: safetensors for tensors, JSON for the rest.

``trainer_state/`` holds the *last completed* epoch, everything needed to continue exactly where it stopped, and
the *kept* epoch (the best so far), whose weights the run's checkpoint will hold: the epoch loop writes nothing
else while it runs (the orchestrator writes the checkpoint folder once, at the end)::

    trainer_state/
      epoch-0003.safetensors   model weights ("model.*"), AdamW moments and step
                               counts ("optimizer.*"), RNG states ("rng.rank0.cpu", ...); a table
                               whose rows are mostly zero packed as the checkpoint's weights are
                               (``weights_file.py``, format_version 2)
      epoch-0002.safetensors   the kept epoch's file, while it is not the last (its "model.*" are the kept weights)
      tokenizer.json           the run's tokenizer
      state.json               format_version, epoch, kept_epoch, config, loop progress (best so far,
                               epochs since best, metrics history), the optimizer's
                               param_groups and the scheduler's state as JSON with
                               {"__tensor__": key} references into the safetensors
                               file, and the sha256 of the files

A finished run's trainer state is removed (``train --keep-state`` keeps it); a stopped run's stays, for
``train --resume``.

Saving is atomic as a whole, not only file by file: the new epoch's tensors
go to a new file name, ``state.json`` is replaced last (``os.replace``, the
commit point), and only then are older epoch files deleted. A crash at any
moment leaves a ``state.json`` that names complete files with matching
hashes: the previous epoch's or the new one's. Loading never unpickles.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..checkpoint import (STATE_DIR, TOKENIZER_FILE, _read_json, atomic_write, check_format_version,
                          tensors_from_bytes, tensors_to_bytes, write_json)
from ..config import Config, stored_config_from_dict
from ..errors import CheckpointError, ConfigError

TRAINER_STATE_FORMAT_VERSION = 3   # 3: the kept epoch's file; 2: packed tables in the tensors file (1, 2 read too)
STATE_FILE = "state.json"
# In a run's trainer state while its refit is in progress (refit.py): {"stage": "refit", "folder", "epochs", ...}
REFIT_FILE = "refit.json"


@dataclass
class TrainerState:
    """Everything needed to continue a run after its last completed epoch.

    Attributes:
        epoch: completed epochs (>= 1).
        config: the run's configuration.
        vocab_size: rows of the embedding matrix.
        progress: the training loop's own JSON bookkeeping (:meth:`LoopState.progress`: best so far,
            epochs since, metrics with the history).
        model: ``model.state_dict()`` as CPU tensors.
        optimizer: ``optimizer.state_dict()`` (tensors on the CPU).
        scheduler: ``scheduler.state_dict()``.
        rng: RNG states as uint8 tensors, keyed ``rank{r}.cpu`` / ``rank{r}.cuda``.
        tokenizer_json: the ``tokenizer.json`` text.
        world_size: processes the run used (1 unless launched with torchrun).
        tensors_path: the safetensors file it was loaded from (for error messages).
        kept_epoch: the epoch whose weights the run keeps (the best so far); ``None``: none (an older state).
        kept: those weights, when loaded (``model`` itself when ``kept_epoch`` is ``epoch``).
    """

    epoch: int
    config: Config
    vocab_size: int
    progress: dict[str, Any]
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    rng: dict[str, torch.Tensor]
    tokenizer_json: str
    world_size: int = 1
    tensors_path: Path | None = None
    kept_epoch: int | None = None
    kept: dict[str, torch.Tensor] | None = None


@dataclass
class LoopState:
    """Where a run stands after ``epoch`` completed epochs: the trainer state's ``progress`` (and ``epoch``).

    The training loop updates it after every epoch; ``resume.py`` reads it back from a saved run.

    Attributes:
        epoch: completed epochs (0 before the first one ends).
        best_accuracy: best validation accuracy so far (-1 before the first epoch).
        since_best: epochs since the best one (compared with ``patience``).
        metrics: the ``metrics.json`` content (history, best epoch, wall time...).
    """

    epoch: int = 0
    best_accuracy: float = -1.0
    since_best: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)

    def progress(self) -> dict[str, Any]:
        """The JSON the trainer state keeps as ``progress`` (it stores ``epoch`` itself)."""
        return {"best_accuracy": self.best_accuracy, "since_best": self.since_best, "metrics": self.metrics}


def state_path(directory: str | Path) -> Path:
    """``<directory>/trainer_state/state.json``."""
    return Path(directory) / STATE_DIR / STATE_FILE


def has_trainer_state(directory: str | Path) -> bool:
    """Whether ``directory`` holds a trainer state to resume from."""
    return state_path(directory).is_file()


# ---------------------------------------------------------------------------- state dicts <-> JSON + tensors

def refit_record_path(directory: str | Path) -> Path:
    """Where ``directory``'s trainer state records a refit in progress (``refit.py``)."""
    return Path(directory) / STATE_DIR / REFIT_FILE


def refit_in_progress(directory: str | Path) -> bool:
    """Whether ``directory``'s trainer state records a refit in progress (stopped, or killed, before its end)."""
    return refit_record_path(directory).is_file()


def write_refit_record(directory: str | Path, record: dict[str, Any]) -> None:
    """Write the refit-in-progress record into ``directory``'s trainer state (:data:`REFIT_FILE`)."""
    path = refit_record_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)


def encode_state(obj: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    """A JSON-ready copy of a (nested) state dict; tensors move into ``tensors`` under dotted keys.

    Tensors become ``{"__tensor__": key}``, tuples ``{"__tuple__": [...]}``
    and int-keyed dicts (the optimizer's per-parameter state)
    ``{"__int_keys__": [[k, v], ...]}``, so that :func:`decode_state` gives
    back an equal object.

    Raises:
        TypeError: a value that is neither a tensor, a container nor a JSON scalar.
    """
    if isinstance(obj, torch.Tensor):
        tensors[key] = obj.detach().to("cpu").contiguous().clone()
        return {"__tensor__": key}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: encode_state(v, f"{key}.{k}", tensors) for k, v in obj.items()}
        if all(isinstance(k, int) and not isinstance(k, bool) for k in obj):
            return {"__int_keys__": [[k, encode_state(v, f"{key}.{k}", tensors)] for k, v in obj.items()]}
        raise TypeError(f"{key}: dict keys must be all strings or all integers")
    if isinstance(obj, tuple):
        return {"__tuple__": [encode_state(v, f"{key}.{i}", tensors) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [encode_state(v, f"{key}.{i}", tensors) for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"{key}: cannot store a {type(obj).__name__} in the trainer state")


def decode_state(obj: Any, tensors: dict[str, torch.Tensor], where: str) -> Any:
    """Inverse of :func:`encode_state`.

    Raises:
        CheckpointError: a referenced tensor is missing (the message names ``where``).
    """
    if isinstance(obj, dict):
        if set(obj) == {"__tensor__"}:
            key = obj["__tensor__"]
            if key not in tensors:
                raise CheckpointError(f"{where}: tensor {key!r} is missing from the safetensors file")
            return tensors[key]
        if set(obj) == {"__tuple__"}:
            return tuple(decode_state(v, tensors, where) for v in obj["__tuple__"])
        if set(obj) == {"__int_keys__"}:
            return {int(k): decode_state(v, tensors, where) for k, v in obj["__int_keys__"]}
        return {k: decode_state(v, tensors, where) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode_state(v, tensors, where) for v in obj]
    return obj


# ---------------------------------------------------------------------------- save

def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save_trainer_state(directory: str | Path, state: TrainerState) -> Path:
    """Write ``state`` to ``<directory>/trainer_state/`` (see the module docstring for the protocol).

    Returns:
        The path of ``state.json``.

    Raises:
        OSError: the folder cannot be written (the previous state stays loadable).
        TypeError: the optimizer or scheduler state holds something that is neither
            a tensor nor JSON.
    """
    folder = Path(directory) / STATE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {f"model.{k}": v.detach().to("cpu").contiguous()
                                        for k, v in state.model.items()}
    optimizer = encode_state(state.optimizer, "optimizer", tensors)
    scheduler = encode_state(state.scheduler, "scheduler", tensors)
    tensors.update({f"rng.{k}": v.to("cpu").contiguous() for k, v in state.rng.items()})
    blob = tensors_to_bytes(tensors, {"epoch": str(state.epoch)})   # packing is lossless: a resume is bit for bit
    tensors_name = f"epoch-{state.epoch:04d}.safetensors"
    atomic_write(folder / tensors_name, blob)
    tokenizer = state.tokenizer_json.encode("utf-8")
    tok_path = folder / TOKENIZER_FILE
    if not tok_path.is_file() or tok_path.read_bytes() != tokenizer:   # constant within a run
        atomic_write(tok_path, tokenizer)
    files = {"tensors": {"name": tensors_name, "sha256": _sha256(blob)},
             "tokenizer": {"name": TOKENIZER_FILE, "sha256": _sha256(tokenizer)}}
    files["kept"] = files["tensors"] if state.kept_epoch == state.epoch else _kept_entry(folder, state.kept_epoch)
    doc = {
        "format_version": TRAINER_STATE_FORMAT_VERSION,
        "epoch": state.epoch,
        "kept_epoch": state.kept_epoch if files["kept"] else None,
        "world_size": state.world_size,
        "vocab_size": state.vocab_size,
        "config": state.config.to_dict(),
        "progress": state.progress,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "files": {name: entry for name, entry in files.items() if entry},
    }
    path = folder / STATE_FILE
    write_json(path, doc)                                   # the commit point
    if state.epoch == 1:   # a new run's first epoch: an older run's refit record is not this run's
        (folder / REFIT_FILE).unlink(missing_ok=True)
    keep = {tensors_name, (files["kept"] or {}).get("name")}
    for old in folder.glob("epoch-*.safetensors"):
        if old.name not in keep:
            old.unlink(missing_ok=True)
    for tmp in folder.glob(".*.tmp"):                       # left by a process killed mid-write
        tmp.unlink(missing_ok=True)
    return path


def _kept_entry(folder: Path, kept_epoch: int | None) -> dict[str, str] | None:
    """The ``files`` entry of the kept epoch's tensors, as the state saved at that epoch named them; ``None`` when
    there is none (no epoch kept, or an older state that did not keep its file)."""
    if kept_epoch is None or not (folder / STATE_FILE).is_file():
        return None
    try:
        doc = _read_json(folder / STATE_FILE)
    except CheckpointError:
        return None
    entry = (doc.get("files") or {}).get("kept")
    return entry if doc.get("kept_epoch") == kept_epoch and isinstance(entry, dict) else None


def clear_trainer_state(directory: str | Path) -> None:
    """Remove ``<directory>/trainer_state/`` (``state.json`` first, so no half-removed state is resumable)."""
    folder = Path(directory) / STATE_DIR
    if not folder.is_dir():
        return
    (folder / STATE_FILE).unlink(missing_ok=True)
    for p in folder.iterdir():
        if p.is_file():
            p.unlink(missing_ok=True)
    try:
        folder.rmdir()
    except OSError:
        pass


# ---------------------------------------------------------------------------- load

def _read_verified(folder: Path, entry: Any, state_file: Path) -> tuple[Path, bytes]:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not isinstance(entry.get("sha256"), str):
        raise CheckpointError(f"{state_file}: malformed \"files\" entry")
    name = entry["name"]
    if Path(name).name != name or name in ("", ".", ".."):
        raise CheckpointError(f"{state_file}: file name {name!r} must be a plain name inside {folder}")
    path = folder / name
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc.strerror})") from None
    if _sha256(data) != entry["sha256"]:
        raise CheckpointError(f"{path}: does not match {state_file} (sha256 differs): truncated, corrupt or replaced")
    return path, data


def load_trainer_state(directory: str | Path) -> TrainerState:
    """Read and verify ``<directory>/trainer_state/``.

    Raises:
        CheckpointError: nothing to resume there, or a file is missing,
            truncated, corrupt, tampered with (hash mismatch), of a newer format
            version, or malformed; the message names the file.
    """
    directory = Path(directory)
    folder = directory / STATE_DIR
    path = folder / STATE_FILE
    if not path.is_file():
        raise CheckpointError(f"nothing to resume in {directory}: no {STATE_DIR}/{STATE_FILE} (a run saves it "
                              "after its first epoch; a finished run keeps it only with --keep-state)")
    doc = _read_json(path)
    check_format_version(path, doc.get("format_version"), TRAINER_STATE_FORMAT_VERSION, "trainer state")
    try:
        epoch, world_size, vocab_size = doc["epoch"], doc.get("world_size", 1), doc["vocab_size"]
        progress, files = doc["progress"], doc["files"]
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (epoch, world_size, vocab_size)) \
                or epoch < 1 or world_size < 1 or vocab_size < 3 or not isinstance(progress, dict) \
                or not isinstance(files, dict):
            raise TypeError("epoch, world_size, vocab_size must be positive integers; progress and files objects")
        tensors_path, blob = _read_verified(folder, files.get("tensors"), path)
        _, tokenizer = _read_verified(folder, files.get("tokenizer"), path)
        tensors = tensors_from_bytes(blob, tensors_path)
        kept_epoch, kept = _load_kept(folder, doc, path, tensors_path, tensors)
        where = f"{path} / {tensors_path.name}"
        optimizer = decode_state(doc["optimizer"], tensors, where)
        scheduler = decode_state(doc["scheduler"], tensors, where)
        if not isinstance(optimizer, dict) or not isinstance(scheduler, dict):
            raise TypeError("optimizer and scheduler must be objects")
        config = stored_config_from_dict(doc["config"], str(path))
    except ConfigError as exc:
        raise CheckpointError(str(exc)) from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{path}: malformed trainer state ({type(exc).__name__}: {str(exc)[:120]})") from None
    try:
        tokenizer_json = tokenizer.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(f"{folder / TOKENIZER_FILE}: not UTF-8 text") from None
    return TrainerState(
        epoch=epoch, config=config, vocab_size=vocab_size, progress=progress,
        model={k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")},
        optimizer=optimizer, scheduler=scheduler,
        rng={k[len("rng."):]: v for k, v in tensors.items() if k.startswith("rng.")},
        tokenizer_json=tokenizer_json, world_size=world_size, tensors_path=tensors_path,
        kept_epoch=kept_epoch, kept=kept,
    )


def _load_kept(folder: Path, doc: dict[str, Any], path: Path, tensors_path: Path,
               tensors: dict[str, torch.Tensor]) -> tuple[int | None, dict[str, torch.Tensor] | None]:
    """``(kept_epoch, kept weights)`` of a loaded state (``(None, None)`` for an older one that kept none).

    Raises:
        CheckpointError: the kept file is missing, does not match its hash, or is malformed.
    """
    kept_epoch, entry = doc.get("kept_epoch"), (doc.get("files") or {}).get("kept")
    if kept_epoch is None or entry is None:
        return None, None
    if not isinstance(kept_epoch, int) or isinstance(kept_epoch, bool) or kept_epoch < 0:
        raise CheckpointError(f"{path}: kept_epoch must be a non-negative integer")
    if entry.get("name") == tensors_path.name:
        found = tensors
    else:
        kept_path, blob = _read_verified(folder, entry, path)
        found = tensors_from_bytes(blob, kept_path)
    return kept_epoch, {k[len("model."):]: v for k, v in found.items() if k.startswith("model.")}

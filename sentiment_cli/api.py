"""The Python API at the package's top level: :func:`load` a checkpoint to score texts, :func:`train` one.

``sentiment_cli.load`` and ``sentiment_cli.train`` are these functions, imported on first use (the package's
``__getattr__``), so that ``import sentiment_cli`` stays light. Each is what a command does without its
rendering: :func:`load` is ``sentiment predict``'s :class:`~.inference.predictor.Predictor`, :func:`train` is
``sentiment train`` (the same config resolution, data rules and search, checkpoint folder and
``metrics.json``), quiet unless asked. Errors are the CLI's one-line ones (:mod:`sentiment_cli.errors`).
The guide: ``docs/python.md``.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, DataError, UsageError
from .training.callbacks import TrainResult

if TYPE_CHECKING:
    from .config import Config
    from .inference.predictor import Predictor
    from .training.callbacks import TrainCallbacks
    from .training.policy import Policy

__all__ = ["DEFAULT_OUTPUT", "TrainResult", "load", "train"]

DEFAULT_OUTPUT = Path("checkpoints/default")   # `sentiment train`'s default --output, relative to the cwd
_DEVICES = "cpu, cuda, cuda:N or auto"
# A bare keyword names the key of that name in the first of these sections that has one: the training
# keys [pretrain] shares (epochs, lr, batch_size...) are [training]'s, as `sentiment train --epochs` is.
_SECTION_ORDER = ("training", "data", "model", "predict", "pretrain")


def load(path: str | os.PathLike[str], *, onnx: bool = False, device: Any = "cpu",
         batch_size: int | None = None) -> Predictor:
    """Load a checkpoint once, to score texts with its :class:`~sentiment_cli.inference.predictor.Predictor`.

    ``predict(texts)``: a ``Prediction`` per text (``label``, ``probability``, ``probabilities``), or with a
    multi-label checkpoint a ``LabelSet`` (``labels``, ``probabilities``); ``predict_proba(texts)``: a float32
    array ``(len(texts), len(labels))``, columns in ``labels`` order; ``explain(texts)``: per-token scores.

    Args:
        path: a checkpoint folder written by ``sentiment train`` or :func:`train` (``~`` is expanded); with
            ``onnx``, a ``.onnx`` file written by ``sentiment export`` or a folder holding ``model.onnx``.
        onnx: run the exported model on ONNX Runtime (CPU), without importing torch.
        device: where the PyTorch model runs: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"`` (CUDA when
            available) or a ``torch.device``; only ``"cpu"`` with ``onnx``.
        batch_size: texts per forward pass (default: the checkpoint's ``[training] eval_batch_size``).

    Raises:
        CheckpointError: the checkpoint (or ONNX file) is missing, incomplete, corrupt or incompatible.
        UsageError: an unknown device, ``cuda`` where torch sees no GPU, a device with ``onnx``, or
            ``batch_size`` below 1.
        OnnxUnavailable: ``onnx`` without onnxruntime installed (``pip install 'sentiment-cli[onnx]'``).
        TypeError: ``path`` is not a ``str`` or a path.
    """
    from .inference.predictor import Predictor

    folder = _as_path(path, "path")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                   or batch_size < 1):
        raise UsageError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if onnx:
        if str(device) != "cpu":
            raise UsageError(f"device {device!r} with onnx=True: the ONNX model runs on ONNX Runtime's CPU; "
                             "leave device out, or load the checkpoint folder without onnx")
        return Predictor(folder, batch_size=batch_size, onnx=True)
    return Predictor(folder, _torch_device(device), batch_size=batch_size)


def _as_path(path: Any, name: str) -> Path:
    """``path`` (a ``str`` or an ``os.PathLike``) as a :class:`Path`, ``~`` expanded.

    Raises:
        TypeError: anything else.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or a path, got {type(path).__name__}")
    return Path(path).expanduser()


def _torch_device(device: Any) -> Any:
    """``device`` as a ``torch.device``: ``"auto"`` resolved, a CUDA device checked to exist.

    Raises:
        UsageError: not a device torch knows, or CUDA where torch sees none.
    """
    import torch

    if isinstance(device, str) and device.strip() == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise UsageError(f"device {device!r}: not a device; use {_DEVICES}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"device {device!r}: torch sees no CUDA device here; use device='cpu' or 'auto'")
    if resolved.type not in ("cpu", "cuda"):
        raise UsageError(f"device {device!r}: not supported; use {_DEVICES}")
    return resolved


def train(data: str | os.PathLike[str], *, config: str | os.PathLike[str] | Config | None = None,
          output: str | os.PathLike[str] = DEFAULT_OUTPUT, progress: bool | TrainCallbacks = False,
          force: bool = False, policy: Policy | None = None, keep_state: bool = False, keep_full: bool = False,
          **overrides: Any) -> TrainResult:
    """Train a classifier on ``data`` and write its checkpoint folder, as ``sentiment train`` does.

    The config is resolved as the command resolves it: the preset or TOML file ``config`` (default: the
    ``default`` preset), then ``overrides``; with the ``default`` preset, the data rules fit every key not
    overridden to the data and the search runs within ``[training] time_budget`` (up to 30 minutes; ``5m``
    for a small set; ``time_budget=0`` trains once), exactly as on the command line. Another preset, a file
    or a ``Config`` object is used as it is.

    Args:
        data: what ``sentiment train --data`` reads: a CSV, TSV, JSON, JSON Lines or Parquet file, a folder
            of them (or the Hub layout, or aclImdb), or, as a ``str``, a Hub dataset id. A ``pathlib.Path`` is
            always a local path.
        config: a preset name (``default``, ``seed``, ``sst5``, ``gpu``), a TOML file, or a
            :class:`~sentiment_cli.config.Config`.
        output: the checkpoint folder to write (default ``checkpoints/default`` under the working directory,
            as the command's); an earlier run's trainer state there is replaced. An existing folder that
            holds other files is refused (``UsageError``) unless ``force``; the data's folder always is.
        force: write into an existing ``output`` folder that holds files this tool did not write.
        policy: the default's tuning numbers (:class:`~sentiment_cli.training.policy.Policy`; ``None``: the
            shipped one); ``keep_state`` and ``keep_full``: as ``--keep-state`` and ``--keep-full``.
        progress: ``False`` (default): quiet, nothing printed; ``True``: plain lines on stderr (each stage,
            each note, one line per epoch; no progress bars); or your :class:`~sentiment_cli.training.callbacks.TrainCallbacks`.
        **overrides: config keys (docs/configuration.md), with Python values: ``epochs=1`` (a bare key is the
            key of that name in [training], [data], [model], [predict] or [pretrain], the first that has it),
            ``pretrain__epochs=2`` (``section__key``), or ``**{"model.d_model": 64}``. Checked as a TOML
            file is.

    Returns:
        :class:`TrainResult`: the checkpoint folder and its metrics.

    Raises:
        ConfigError: an unknown config, preset or key (with the closest key's name), a value of the wrong
            type or out of range, or ``data`` also given as ``source=``.
        DataError: the data cannot be read (a missing file, a column or label problem: the CLI's messages).
        UsageError: an unusable device or output folder.
        CheckpointError: ``init_from`` is damaged or does not fit the config.
        Interrupted: Ctrl-C (SIGINT) stopped the run at the next step; the last completed epoch is saved
            and ``sentiment train --resume OUTPUT`` continues it (a second Ctrl-C raises KeyboardInterrupt).
        TypeError: ``data``, ``output``, ``config`` or ``progress`` of the wrong type.
    """
    from .training.policy import DEFAULT
    from .training.run import train as run_train

    cfg, fit_to_data = _config_of(data, config, overrides)
    out = _as_path(output, "output")
    callbacks = _callbacks(progress)
    try:
        with _stop_on_ctrl_c() as stop:
            result = run_train(cfg, out, callbacks, stop=stop, fit_to_data=fit_to_data, force=force,
                               policy=policy or DEFAULT, keep_state=keep_state, keep_full=keep_full)
    finally:
        close = getattr(callbacks, "close", None)
        if callable(close):
            close()
    return dataclasses.replace(result, record=None)   # the caller loads the folder; the weights are not kept


def _config_of(data: Any, config: Any, overrides: dict[str, Any]) -> tuple[Config, frozenset[str] | None]:
    """:func:`train`'s config and the keys its data rules leave (``_config``), ``data`` as ``[data] source``.

    Raises:
        ConfigError: ``data`` also given as ``source=``, or as :func:`_config`.
    """
    keys = _dotted(overrides)
    if "data.source" in keys:
        raise ConfigError("train(): data is given twice, as the data argument and as source=; give one")
    keys["data.source"] = _source(data)
    return _config(config, keys)


def _source(data: Any) -> str:
    """``[data] source`` for ``data``: a ``str`` as the command takes it, a path checked to exist.

    Raises:
        DataError: a ``pathlib.Path`` (or other ``os.PathLike``) that does not exist.
        TypeError: neither a ``str`` nor a path.
    """
    if isinstance(data, str):
        return data
    path = _as_path(data, "data")
    if not path.exists():
        raise DataError(f"data {path}: no such file or folder")
    return str(path)


def _dotted(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``{"epochs": 1, "model__d_model": 64, "data.max_length": 128}`` -> ``{"training.epochs": 1, ...}``:
    each keyword as the ``section.key`` it names; paths as ``str``.

    Raises:
        ConfigError: a key no section has (naming the closest), or a section without that key.
    """
    from .config import SECTIONS

    known = {name: {f.name for f in dataclasses.fields(cls)} for name, cls in SECTIONS.items()}
    out: dict[str, Any] = {}
    for name, value in overrides.items():
        section, sep, key = name.replace("__", ".", 1).partition(".")
        if not sep:
            key = section
            section = next((s for s in _SECTION_ORDER if key in known[s]), "")
        if section not in known or key not in known[section]:
            raise ConfigError(f"train(): unknown setting {name}={value!r}: {_unknown(section, key, known)}; "
                              "every key: docs/configuration.md")
        out[f"{section}.{key}"] = os.fspath(value) if isinstance(value, os.PathLike) else value
    return out


def _unknown(section: str, key: str, known: dict[str, set[str]]) -> str:
    """Why ``section.key`` names no setting (``section`` ``""``: a bare key no section has), with the nearest
    spelling that does: ``"[model] has no key epochs; [training] and [pretrain] have"``."""
    if section and section not in known:
        near = difflib.get_close_matches(section, sorted(known), n=1)
        return f"no section {section}" + (f" (did you mean {near[0]}?)" if near else f" ({', '.join(known)})")
    holders = [s for s in known if key in known[s]]
    if holders:
        return f"[{section}] has no key {key}; " + " and ".join(f"[{s}]" for s in holders) + " " + \
            ("has" if len(holders) == 1 else "have")
    near = difflib.get_close_matches(key, sorted(known[section] if section else set().union(*known.values())), n=1)
    return f"no key {key}" + (f" in [{section}]" if section else "") + (f" (did you mean {near[0]}?)" if near else "")


def _config(config: Any, keys: dict[str, Any]) -> tuple[Config, frozenset[str] | None]:
    """The run's config and the keys the data rules leave alone (``None``: apply none), as the command's.

    Raises:
        ConfigError: as :func:`~sentiment_cli.config.load_config` and :meth:`~sentiment_cli.config.Config.with_keys`.
        TypeError: ``config`` is not a name, a path or a ``Config``.
    """
    from .config import Config, given_keys, load_config

    if isinstance(config, Config):
        return config.with_keys(keys, "train()"), None
    if config is not None and not isinstance(config, (str, os.PathLike)):
        raise TypeError(f"config must be a preset name, a path or a Config, got {type(config).__name__}")
    name = os.fspath(config) if config is not None else None
    sections: dict[str, dict[str, Any]] = {}
    for dotted, value in keys.items():
        section, _, key = dotted.partition(".")
        sections.setdefault(section, {})[key] = value
    return load_config(name).with_keys(keys, "train()"), given_keys(name, (), sections)


def _callbacks(progress: Any) -> TrainCallbacks | None:
    """The hooks for ``progress``: none, plain lines on stderr (:class:`~.training.callbacks.LogCallbacks`), or the
    caller's own. The library never imports the command line (``cli/``).

    Raises:
        TypeError: neither a bool nor an object with the hooks (``on_stage``, ``on_epoch_end``...).
    """
    if progress is True:
        from .training.callbacks import LogCallbacks

        return LogCallbacks()
    if progress is False or progress is None:
        return None
    if not callable(getattr(progress, "on_epoch_end", None)):
        raise TypeError(f"progress must be True, False or a TrainCallbacks, got {type(progress).__name__}")
    return progress


def _stop_on_ctrl_c():
    """``stop_on_signals`` for SIGINT alone: the caller's SIGTERM handling is left as it is."""
    import signal

    from .training.interrupts import stop_on_signals

    return stop_on_signals((signal.SIGINT,))

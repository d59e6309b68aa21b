"""The pretrained folder a training run starts from (``[training] init_from``, ``train --init``): made first when
missing (:func:`ensure_pretrained`, the pretraining stage of ``pretrain.py``), checked against the run's settings and
loaded (:func:`load_pretrained`), and the weights a run takes from it (:func:`pretrained_weights`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import torch

from . import distributed
from .. import objectives
from ..checkpoint import CONFIG_FILE, Checkpoint, load_checkpoint
from ..config import Config
from ..data.sources import absolute_source
from ..errors import CheckpointError, ConfigError, Interrupted, UsageError
from ..objectives import ENCODER_KEYS
from .budget import Budget
from .callbacks import TrainCallbacks
from .interrupts import StopFlag
from .pretrain import pretrain, pretraining_texts
from .run_data import RunData

_TOKEN_KEYS = ("vocab_size", "min_frequency", "pre_tokenizer", "tokenizer")


def _objective(pretrained) -> str:
    return pretrained.metrics.get("objective", "mlm")   # folders from before word2vec have no "objective"


def ensure_pretrained(config: Config, callbacks: TrainCallbacks | None = None, *,
                      stop: StopFlag | None = None, data: RunData | None = None,
                      budget: Budget | None = None,
                      worth: Callable[[list[str]], bool] | None = None) -> tuple[Checkpoint | None, bool]:
    """The pretrained folder ``[training] init_from`` names, made first (the pretraining stage) when missing.

    This is what lets one ``sentiment train`` run the whole default job. The
    stage pretrains into a hidden sibling folder and renames it into place
    only once every epoch is done, so an interrupted or crashed stage never
    leaves a folder that a later run would take for a finished one.

    Args:
        config: the run configuration (its ``[pretrain]`` settings make the folder).
        callbacks: progress hooks; the stage reports like ``sentiment pretrain``.
        stop: polled by the stage (see :func:`pretrain`).
        data: the run's source, read once (see :func:`pretrain`).
        budget: the stage's part of a time budget (see :func:`pretrain`); ``None``: every epoch.
        worth: given the texts pretraining would read, whether to pretrain (the default's search asks whether its
            budget holds the stage and an encoder trial after it); ``None``: always.

    Returns:
        ``(checkpoint, made)``: the folder loaded by :func:`load_pretrained`, and whether this call made it;
        ``(None, False)`` when ``worth`` said no (nothing was made).

    Raises:
        CheckpointError, ConfigError: as :func:`load_pretrained`; also a folder there that is neither a
            pretrained encoder nor empty.
        UsageError: the folder is missing and the run has several processes (torchrun).
        Interrupted: ``stop`` was set during the stage; nothing was kept.
        DataError, SentimentError: as :func:`pretrain`.
    """
    cb = callbacks or TrainCallbacks()
    directory = Path(config.training.init_from)
    made = False
    if not (directory / CONFIG_FILE).exists():
        if directory.is_dir() and any(directory.iterdir()):
            raise CheckpointError(f"init_from {directory}: holds no pretrained encoder (no {CONFIG_FILE}) and is "
                                  "not empty; give a new or empty folder with --init")
        if distributed.from_env().world_size > 1:
            raise UsageError(f"init_from {directory}: no pretrained encoder there, and pretraining runs in one "
                             f"process; run `sentiment pretrain -o {shlex.quote(str(directory))}` first, then torchrun")
        p = config.pretrain
        cb.on_stage(f"no pretrained encoder in {directory}: pretraining one first ({p.objective}, {p.epochs} "
                    f"epochs on {p.splits}; `sentiment pretrain` runs this stage alone)")
        if worth is not None and not worth(pretraining_texts(config, data or RunData(absolute_source(
                config.data.source)))):
            return None, False
        made = _pretrain_into(config, directory, cb.for_pretraining(), stop or StopFlag(), data, budget)
    return load_pretrained(directory, config), made


def _pretrain_into(config: Config, directory: Path, cb: TrainCallbacks, stop: StopFlag, data: RunData | None,
                   budget: Budget | None = None) -> bool:
    """Run :func:`pretrain` into a hidden sibling of ``directory``, then rename it to ``directory``; whether it
    did (``False``: another run pretrained ``directory`` meanwhile and finished first, and its folder is kept,
    this one's removed; :func:`load_pretrained` then takes it if its settings are this config's, or names the
    key that differs).

    Raises:
        Interrupted, SentimentError: as :func:`pretrain` (the hidden folder removed).
        OSError: the rename failed for another reason (the hidden folder removed).
    """
    directory.parent.mkdir(parents=True, exist_ok=True)
    partial = directory.parent / f".{directory.name}.pretraining-{uuid.uuid4().hex[:8]}"
    try:
        pretrain(config, partial, cb, stop=stop, data=data, budget=budget)
    except Interrupted as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise Interrupted(f"pretraining interrupted by {stop.reason or 'a signal'}; nothing was kept in "
                          f"{directory} (the next `sentiment train` pretrains again)",
                          exit_code=exc.exit_code) from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    try:
        if directory.is_dir():
            directory.rmdir()   # empty (checked before); a folder cannot be renamed over a non-empty one
        os.replace(partial, directory)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
        if not (directory / CONFIG_FILE).exists():
            raise
        cb.on_note(f"another run pretrained {directory} while this one did, and finished first: its folder is "
                   "used (if its settings are this run's), this run's removed")
        return False
    return True


def is_pretrained(directory: str | Path) -> bool:
    """Whether ``directory`` holds a pretraining folder's ``config.json`` already (``ensure_pretrained`` would load
    it rather than pretrain)."""
    return (Path(directory) / CONFIG_FILE).is_file()


def _rebuild_hint(directory: Path) -> str:
    return f"delete {directory} to pretrain it again with this config, or give another folder with --init"


def pretraining_reads(config: Config) -> list[tuple[str, str, object]]:
    """``(section, key, value)`` of the settings that decide which reviews a pretraining stage reads: the
    source, ``[pretrain] splits``, the unlabelled text, and with the training split its hold-out (fraction,
    kind and the seed that draws it)."""
    d, p = config.data, config.pretrain
    keys = [("data", "source", absolute_source(d.source)), ("pretrain", "splits", p.splits)]
    if "unsupervised" in p.splits.split("+"):
        keys.append(("data", "unlabelled", absolute_source(d.unlabelled) if d.unlabelled else ""))
    if "train" in p.splits.split("+"):   # the training part of train: the hold-out is left out
        keys.append(("data", "validation_fraction", d.validation_fraction))
        if d.validation_fraction > 0:
            keys += [("data", "validation_split", d.validation_split), ("training", "seed", config.training.seed)]
    return keys


def load_pretrained(directory: str | Path, config: Config) -> Checkpoint:
    """Load a ``sentiment pretrain`` checkpoint to start ``config``'s training from, after checking it fits.

    It fits when it is complete (every configured epoch done), its ``[model]``
    shape and ``[data]`` tokenizer settings are ``config``'s, and it was
    pretrained on the same reviews (source, ``[pretrain] splits`` and, when
    those include train, the same validation hold-out, which it must not have
    seen). A word2vec folder trained the token embedding only, so of the shape
    only ``d_model`` must match.

    Returns:
        :class:`~.checkpoint.Checkpoint` (its model on CPU).

    Raises:
        CheckpointError: no checkpoint there, it is damaged or incomplete, it was not written by
            ``sentiment pretrain``, or its pretraining objective is unknown to this version.
        ConfigError: a setting differs from ``config``'s (the message names the first key that differs
            and says how to rebuild the folder).
    """
    directory = Path(directory)
    if not (directory / CONFIG_FILE).exists():
        raise CheckpointError(f"init_from {directory}: no pretrained encoder there; "
                              f"run `sentiment pretrain -o {shlex.quote(str(directory))}` first")
    ckpt = load_checkpoint(directory, pretrained_ok=True)
    if ckpt.metrics.get("kind") != "pretrained":   # a trained classifier: a run continues from its weights alone
        _check_keys(directory, config, ckpt, ENCODER_KEYS + ("bigram_buckets",))
        return ckpt
    objective = _objective(ckpt)
    if objective not in objectives.names():
        raise CheckpointError(f"init_from {directory}: unknown objective {objective!r} in its metrics.json "
                              f"(this version knows {', '.join(objectives.names())})")
    done, planned = len(ckpt.metrics.get("history", [])), ckpt.config.pretrain.epochs
    by_time = ckpt.metrics.get("stopped_by_time")   # ended on purpose by a time share (the search): complete
    if done < planned and not (isinstance(by_time, dict) and by_time.get("epoch") == done and done >= 1):
        raise CheckpointError(f"init_from {directory}: its pretraining stopped after epoch {done} of {planned}; "
                              f"delete {directory} to pretrain it again")
    _check_keys(directory, config, ckpt, objectives.objective(objective).fixes)
    theirs = {(s, k): v for s, k, v in pretraining_reads(ckpt.config)}
    theirs[("data", "source")] = ckpt.metrics.get("data", {}).get("source", theirs[("data", "source")])
    for section, key, mine in pretraining_reads(config):
        if (section, key) in theirs and theirs[(section, key)] != mine:
            raise ConfigError(f"init_from {directory}: [{section}] {key} is {theirs[(section, key)]!r} there "
                              f"but {mine!r} in this config; {_rebuild_hint(directory)}")
    return ckpt


def _check_keys(directory: Path, config: Config, ckpt: Checkpoint, model_keys: tuple[str, ...]) -> None:
    """Refuse a folder whose ``[model]`` ``model_keys`` or tokenizer settings differ from ``config``'s.

    Raises:
        ConfigError: naming the first key that differs and how to rebuild the folder.
    """
    for section, keys in (("model", model_keys), ("data", _TOKEN_KEYS)):
        mine, theirs = getattr(config, section), getattr(ckpt.config, section)
        for key in keys:
            if getattr(mine, key) != getattr(theirs, key):
                raise ConfigError(f"init_from {directory}: [{section}] {key} is {getattr(theirs, key)!r} there "
                                  f"but {getattr(mine, key)!r} in this config; {_rebuild_hint(directory)}")


def pretrained_weights(pretrained, like: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The tensors a fine-tuning run takes from a pretrained folder (its objective's ``takes``, ``objectives/``), or
    from a trained classifier's folder (``train --init`` of a finished run: every tensor but the n-gram score's,
    which the run fits again, the dense head included when it has as many classes), those of ``like`` (the new
    model's state dict) in its shapes."""
    if pretrained.metrics.get("kind") == "pretrained":
        takes = objectives.objective(_objective(pretrained)).takes_tensor
        return {k: v for k, v in pretrained.model.state_dict().items() if takes(k)}
    return {k: v for k, v in pretrained.model.state_dict().items() if not k.startswith("ngram_")
            and (like is None or (k in like and like[k].shape == v.shape))}

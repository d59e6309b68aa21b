"""The training loop: tokenizer on train, AdamW over length-bucketed batches, best epoch kept.

Progress is reported through :class:`TrainCallbacks` (the CLI renders it
with rich); this module prints nothing itself.
"""

from __future__ import annotations

import dataclasses
import math
import platform
import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from . import __version__
from .checkpoint import save_checkpoint, write_json, METRICS_FILE
from .config import Config
from .data import collate, load_train_validation, make_batches
from .errors import SentimentError, UsageError
from .evaluate import autocast, evaluate_ids
from .model import SentimentClassifier
from .report import TrainingReport, write_training_report
from .tokenizer import build_tokenizer, encode, save_tokenizer


class TrainCallbacks:
    """Hooks for progress reporting; the default does nothing."""

    def on_stage(self, text: str) -> None:
        """A preparation stage begins (loading data, building the tokenizer...)."""

    def on_epoch_start(self, epoch: int, epochs: int, num_examples: int) -> None:
        """Epoch ``epoch`` (1-based) of ``epochs`` starts over ``num_examples`` reviews."""

    def on_step(self, examples: int, loss: float, accuracy: float, examples_per_second: float) -> None:
        """A step over ``examples`` reviews ended; running epoch loss/accuracy so far."""

    def on_validation_start(self, num_examples: int) -> None:
        """Validation of ``num_examples`` reviews starts."""

    def on_validation_step(self, examples: int) -> None:
        """A validation batch of ``examples`` reviews ended."""

    def on_epoch_end(self, record: dict[str, Any]) -> None:
        """An epoch ended; ``record`` is its entry in ``metrics.json``'s history."""


@dataclass
class TrainResult:
    """What a finished run produced: the checkpoint folder and its ``metrics.json`` content."""

    output: Path
    metrics: dict[str, Any]
    report: TrainingReport | None = None   # curves.png and README.md (report.py)


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU.

    Raises:
        UsageError: ``cuda`` was asked for but torch sees no CUDA device.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device here; use --device cpu or auto")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) RNGs."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def lr_lambda(config: Config, total_steps: int):
    """Multiplier of the peak learning rate at each step: linear warmup, then constant/linear/cosine decay."""
    t = config.training
    warmup = int(t.warmup_fraction * total_steps)

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if t.schedule == "constant":
            return 1.0
        progress = (step - warmup) / max(1, total_steps - warmup)
        if t.schedule == "linear":
            return max(0.0, 1.0 - progress)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return f


def make_optimizer(model: torch.nn.Module, config: Config) -> torch.optim.AdamW:
    """AdamW (Loshchilov & Hutter 2019); weight decay on matrices only, not biases or norms."""
    t = config.training
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": t.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=t.lr, betas=t.betas)


def versions() -> dict[str, str]:
    """Versions of Python and the libraries a run depends on."""
    import tokenizers
    out = {"python": platform.python_version(), "torch": torch.__version__,
           "tokenizers": tokenizers.__version__, "sentiment_cli": __version__}
    try:
        import datasets
        out["datasets"] = datasets.__version__
    except ImportError:  # pragma: no cover
        pass
    return out


def _absolute_source(source: str) -> str:
    p = Path(source).expanduser()
    return str(p.resolve()) if p.exists() else source


def train(config: Config, output: str | Path, callbacks: TrainCallbacks | None = None) -> TrainResult:
    """Train a classifier and write the best epoch (by validation accuracy) to ``output``.

    Args:
        config: the whole run configuration.
        output: checkpoint folder; created if needed.
        callbacks: progress hooks.

    Returns:
        :class:`TrainResult` with the folder and its metrics.

    Raises:
        UsageError: unusable device or output folder.
        DataError: the dataset cannot be loaded.
    """
    cb = callbacks or TrainCallbacks()
    t = config.training
    output = Path(output)
    _check_writable(output)
    device = resolve_device(t.device)
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, source=_absolute_source(config.data.source)))
    start = time.perf_counter()
    seed_everything(t.seed)

    cb.on_stage(f"loading {config.data.source}")
    train_split, val_split = load_train_validation(config.data.source, config.data.validation_fraction, t.seed)
    cb.on_stage(f"building the tokenizer on {len(train_split):,} training reviews")
    tokenizer = build_tokenizer(train_split.texts, config.data, length=len(train_split))
    tokenizer_json = save_tokenizer(tokenizer)
    cb.on_stage("tokenizing")
    train_ids = encode(tokenizer, train_split.texts, config.data)
    val_ids = encode(tokenizer, val_split.texts, config.data)
    train_labels = torch.tensor(train_split.labels, dtype=torch.long)

    model = SentimentClassifier(config.model, vocab_size=tokenizer.get_vocab_size(),
                                max_length=config.data.max_length).to(device)
    optimizer = make_optimizer(model, config)
    steps_per_epoch = math.ceil(len(train_ids) / t.batch_size)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(config, steps_per_epoch * t.epochs))

    metrics: dict[str, Any] = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": str(device), "device_name": _device_name(device), "seed": t.seed,
        "versions": versions(), "num_parameters": model.num_parameters(),
        "data": {"source": config.data.source, "train_examples": len(train_split),
                 "validation_examples": len(val_split), "fingerprint": train_split.fingerprint()},
        "config": config.to_dict(),
        "history": [], "best_epoch": None, "best_validation_accuracy": None,
        "stopped_early": False, "wall_time_seconds": None,
    }
    lengths = [len(x) for x in train_ids]
    best, since_best = -1.0, 0
    for epoch in range(1, t.epochs + 1):
        model.train()
        cb.on_epoch_start(epoch, t.epochs, len(train_ids))
        epoch_start = time.perf_counter()
        loss_sum, correct, seen = 0.0, 0, 0
        for batch in make_batches(lengths, t.batch_size, shuffle=True, seed=t.seed * 100_003 + epoch,
                                  bucket=t.bucket_batches):
            input_ids, padding_mask = collate(train_ids, batch)
            target = train_labels[torch.as_tensor(batch)].to(device)
            with autocast(device, t.autocast_bf16):
                logits = model(input_ids.to(device), padding_mask.to(device))
            loss = F.cross_entropy(logits.float(), target, label_smoothing=t.label_smoothing)
            if not torch.isfinite(loss):
                raise SentimentError(f"training diverged at epoch {epoch} (loss {loss.item()}); lower --lr")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if t.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
            optimizer.step()
            scheduler.step()
            n = len(batch)
            loss_sum += loss.item() * n
            correct += int((logits.argmax(1) == target).sum())
            seen += n
            cb.on_step(n, loss_sum / seen, correct / seen, seen / (time.perf_counter() - epoch_start))
        train_seconds = time.perf_counter() - epoch_start
        cb.on_validation_start(len(val_ids))
        val = evaluate_ids(model, val_ids, val_split.labels, batch_size=t.eval_batch_size, device=device,
                           bf16=t.autocast_bf16, on_batch=cb.on_validation_step)
        record = {"epoch": epoch, "train_loss": loss_sum / seen, "train_accuracy": correct / seen,
                  "validation_loss": val["loss"], "validation_accuracy": val["accuracy"],
                  "train_examples_per_second": seen / train_seconds, "train_seconds": train_seconds,
                  "learning_rate": scheduler.get_last_lr()[0]}
        metrics["history"].append(record)
        improved = val["accuracy"] > best
        record["best"] = improved
        metrics["wall_time_seconds"] = time.perf_counter() - start
        if improved:
            best, since_best = val["accuracy"], 0
            metrics["best_epoch"], metrics["best_validation_accuracy"] = epoch, best
            save_checkpoint(output, config=config, model=model, tokenizer_json=tokenizer_json, metrics=metrics)
        else:
            since_best += 1
            write_json(output / METRICS_FILE, metrics)
        cb.on_epoch_end(record)
        if t.patience and since_best >= t.patience:
            metrics["stopped_early"] = True
            break
    metrics["wall_time_seconds"] = time.perf_counter() - start
    write_json(output / METRICS_FILE, metrics)
    return TrainResult(output, metrics, write_training_report(output))


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"


def _check_writable(output: Path) -> None:
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output folder {output}: {exc.strerror}") from None
    if not output.is_dir():
        raise UsageError(f"output {output} is not a folder")
    import os
    if not os.access(output, os.W_OK):
        raise UsageError(f"output folder {output} is not writable")

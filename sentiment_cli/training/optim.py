"""Optimisation: AdamW parameter groups, learning-rate schedules, and one optimizer step.

Shared by fine-tuning (``loop.py``) and masked-LM pretraining (``pretrain.py``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..config import Config


def lr_lambda(schedule: str, warmup_fraction: float, total_steps: int):
    """Multiplier of the peak learning rate at each step: linear warmup over ``warmup_fraction`` of
    ``total_steps``, then ``schedule`` (``constant``, ``linear`` or ``cosine``) decay."""
    warmup = int(warmup_fraction * total_steps)

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = (step - warmup) / max(1, total_steps - warmup)
        if schedule == "linear":
            return max(0.0, 1.0 - progress)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return f


def decay_groups(params, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW parameter groups: decay on matrices only, not on biases or norms."""
    params = list(params)
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def make_optimizer(model: torch.nn.Module, config: Config) -> torch.optim.AdamW:
    """AdamW (Loshchilov & Hutter 2019) with :func:`decay_groups`; the token embedding (the one a
    pretrained folder gives) in a group of its own when ``embedding_lr_scale`` is not 1."""
    t = config.training
    embedding = [model.token_embedding.weight] if t.embedding_lr_scale != 1.0 else []
    groups = decay_groups((p for p in model.parameters() if not any(p is e for e in embedding)), t.weight_decay)
    if embedding:   # its own group only when it differs, so that older trainer states still resume
        groups.append({"params": embedding, "weight_decay": t.weight_decay, "lr": t.lr * t.embedding_lr_scale})
    return torch.optim.AdamW(groups, lr=t.lr, betas=t.betas)


def optimizer_step(optimizer: torch.optim.Optimizer, scheduler, parameters, grad_clip: float) -> None:
    """After the backward pass(es): global-norm clipping of ``parameters`` (``grad_clip`` > 0), one
    optimizer and one scheduler step, then the gradients are cleared for the next step."""
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(parameters, grad_clip)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)

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
    pretrained folder gives) in a group of its own when ``embedding_lr_scale`` is not 1.

    With ``[training] sparse_embeddings`` the model's token and bigram embeddings are switched to sparse
    gradients and the optimizer is :class:`LazyAdamW` (only the rows a batch used are updated); with
    ``fused_optimizer``, torch's fused AdamW kernel updates the dense parameters."""
    t = config.training
    embedding = [model.token_embedding.weight] if t.embedding_lr_scale != 1.0 else []
    groups = decay_groups((p for p in model.parameters() if not any(p is e for e in embedding)), t.weight_decay)
    if embedding:   # its own group only when it differs, so that older trainer states still resume
        groups.append({"params": embedding, "weight_decay": t.weight_decay, "lr": t.lr * t.embedding_lr_scale})
    options = {"fused": True} if getattr(t, "fused_optimizer", False) else {}
    if getattr(t, "sparse_embeddings", False):
        for name in ("token_embedding", "bigram_embedding"):
            if getattr(model, name, None) is not None:
                getattr(model, name).sparse = True
        return LazyAdamW(groups, lr=t.lr, betas=t.betas, **options)
    return torch.optim.AdamW(groups, lr=t.lr, betas=t.betas, **options)


class LazyAdamW(torch.optim.AdamW):
    """AdamW whose parameters with a sparse gradient (embeddings with ``sparse=True``) are updated on the rows the
    gradient holds only: their moments, the decoupled weight decay and the step, as in lazy Adam (TensorFlow
    Addons' ``LazyAdam``, torch's ``SparseAdam``, which has no weight decay). A dense AdamW step over a 50,000 x 64
    token table and 131,073 x 64 bigram rows costs six passes over 11.6 M values per step; a batch uses a few
    thousand rows. Rows not in a batch keep their moments as they were (no decay while unused): lazy Adam's
    approximation. Dense parameters take torch's AdamW step (fused when asked). The state has AdamW's keys
    (``step``, ``exp_avg``, ``exp_avg_sq``), so trainer states save and resume alike.
    """

    @torch.no_grad()
    def step(self, closure=None):
        """One step: the sparse rows (:meth:`_sparse_step`), then AdamW on the rest."""
        held = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and p.grad.is_sparse:
                    self._sparse_step(p, group)
                    held.append((p, p.grad))
                    p.grad = None
        try:
            return super().step(closure)
        finally:
            for p, grad in held:
                p.grad = grad

    def _sparse_step(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        """Lazy AdamW on the rows of ``p`` its sparse gradient holds (Loshchilov & Hutter 2019, Algorithm 2, on
        those rows: ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``, ``p -= lr (wd p + m_hat / (sqrt(v_hat) +
        eps))`` with the bias corrections of the parameter's step count)."""
        grad = p.grad.coalesce()
        rows, values = grad.indices()[0], grad.values()
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        step = float(state["step"])
        (b1, b2), lr, eps, wd = group["betas"], float(group["lr"]), group["eps"], group["weight_decay"]
        m = state["exp_avg"][rows].mul_(b1).add_(values, alpha=1 - b1)
        v = state["exp_avg_sq"][rows].mul_(b2).addcmul_(values, values, value=1 - b2)
        state["exp_avg"][rows], state["exp_avg_sq"][rows] = m, v
        denom = (v / (1 - b2 ** step)).sqrt_().add_(eps)
        w = p[rows]
        if wd:
            w.mul_(1 - lr * wd)
        p[rows] = w.addcdiv_(m, denom, value=-lr / (1 - b1 ** step))


def clip_grad_norm(parameters, max_norm: float) -> None:
    """Global-norm clipping (Pascanu et al. 2013) of dense and sparse gradients together: each sparse gradient's
    norm is its coalesced values' (``torch.nn.utils.clip_grad_norm_`` takes dense gradients)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    sparse = [g for g in grads if g.is_sparse]
    dense = [g for g in grads if not g.is_sparse]
    norms = [torch.linalg.vector_norm(g.coalesce().values()) for g in sparse]
    if dense:
        norms += list(torch._foreach_norm(dense))
    total = torch.linalg.vector_norm(torch.stack(norms)) if norms else torch.tensor(0.0)
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in dense:
        g.mul_(scale)
    for g in sparse:
        g.mul_(scale)


def optimizer_step(optimizer: torch.optim.Optimizer, scheduler, parameters, grad_clip: float) -> None:
    """After the backward pass(es): global-norm clipping of ``parameters`` (``grad_clip`` > 0), one
    optimizer and one scheduler step, then the gradients are cleared for the next step."""
    if grad_clip > 0:
        if isinstance(optimizer, LazyAdamW):
            clip_grad_norm(list(parameters), grad_clip)
        else:
            torch.nn.utils.clip_grad_norm_(parameters, grad_clip)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)

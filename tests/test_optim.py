"""The optimizer's levers (training/optim.py): lazy AdamW on sparse embedding rows, the clipping of sparse and
dense gradients together, fused AdamW in a run."""

from __future__ import annotations

import torch

from sentiment_cli.training.optim import LazyAdamW, clip_grad_norm
from sentiment_cli.training.run import train

from .conftest import small_config


def _two_embeddings():
    torch.manual_seed(0)
    dense, sparse = torch.nn.Embedding(10, 4), torch.nn.Embedding(10, 4, sparse=True)
    sparse.weight.data.copy_(dense.weight.data)
    return dense, sparse


def test_lazy_adamw_is_adamw_when_every_row_is_in_every_batch():
    dense, sparse = _two_embeddings()
    a = torch.optim.AdamW(dense.parameters(), lr=0.01, weight_decay=0.05)
    b = LazyAdamW(sparse.parameters(), lr=0.01, weight_decay=0.05)
    for _ in range(5):
        for emb, opt in ((dense, a), (sparse, b)):
            opt.zero_grad()
            (emb(torch.arange(10)).sum(1) ** 2).sum().backward()
            opt.step()
    assert torch.allclose(dense.weight, sparse.weight, atol=1e-6)
    assert set(b.state[sparse.weight]) == {"step", "exp_avg", "exp_avg_sq"}   # AdamW's state: saved alike


def test_lazy_adamw_leaves_the_rows_a_batch_did_not_use():
    _, sparse = _two_embeddings()
    before = sparse.weight.detach().clone()
    opt = LazyAdamW(sparse.parameters(), lr=0.01, weight_decay=0.05)
    sparse(torch.tensor([1, 3])).sum().backward()
    opt.step()
    moved = (sparse.weight != before).any(1)
    assert moved[[1, 3]].all() and not moved[[0, 2, 4, 5, 6, 7, 8, 9]].any()


def test_sparse_and_dense_gradients_are_clipped_to_one_global_norm():
    _, sparse = _two_embeddings()
    linear = torch.nn.Linear(3, 3)
    (sparse(torch.tensor([1, 2, 2])).sum() * 100).backward()
    (linear(torch.ones(3)).sum() * 100).backward()
    params = [*sparse.parameters(), *linear.parameters()]
    clip_grad_norm(params, 1.0)
    norm = torch.sqrt(sum((p.grad.coalesce().values() if p.grad.is_sparse else p.grad).pow(2).sum() for p in params))
    assert abs(float(norm) - 1.0) < 1e-4


def test_a_run_with_sparse_embeddings_and_fused_adamw_trains(tmp_path):
    cfg = small_config(epochs=1, sparse_embeddings=True, fused_optimizer=True)
    result = train(cfg, tmp_path / "run")
    assert result.metrics["best_validation_accuracy"] is not None and result.metrics["calibration"]

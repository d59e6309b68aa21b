"""The notebook's IMDB model and loop (``../shared/seeds/001_*``), kept faithful for timing.

A few lines following the notebook: its own multi-head attention, learned
embeddings plus frozen sinusoidal position embeddings and a LayerNorm, one
post-norm encoder layer, max over *all* positions (padding included), a dense
head; every review padded (or cut) to ``max_length`` = 200, no mask. Used only
by the benchmark, as the speed reference measured in the same run.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, d_model, bias=False)
        self.W_v = nn.Linear(d_model, d_model, bias=False)
        self.W_h = nn.Linear(d_model, d_model)

    def forward(self, x):
        b = x.size(0)
        split = lambda t: t.view(b, -1, self.num_heads, self.d_k).transpose(1, 2)   # noqa: E731
        q, k, v = split(self.W_q(x)), split(self.W_k(x)), split(self.W_v(x))
        a = torch.softmax(torch.matmul(q / math.sqrt(self.d_k), k.transpose(2, 3)), dim=-1)
        h = torch.matmul(a, v).transpose(1, 2).contiguous().view(b, -1, self.num_heads * self.d_k)
        return self.W_h(h)


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, num_heads: int, d_ff: int):
        super().__init__()
        self.mha = MultiHeadAttention(d_model, num_heads)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.ln1, self.ln2 = nn.LayerNorm(d_model, eps=1e-6), nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, x):
        x = self.ln1(x + self.mha(x))
        return self.ln2(x + self.ffn(x))


class NotebookClassifier(nn.Module):
    def __init__(self, vocab_size: int, d_model: int = 32, num_heads: int = 2, d_ff: int = 128,
                 num_layers: int = 1, max_positions: int = 10000):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, d_model, padding_idx=0)
        theta = np.array([[p / np.power(10000, 2 * (j // 2) / d_model) for j in range(d_model)]
                          for p in range(max_positions)])
        pe = torch.zeros(max_positions, d_model)
        pe[:, 0::2] = torch.FloatTensor(np.sin(theta[:, 0::2]))
        pe[:, 1::2] = torch.FloatTensor(np.cos(theta[:, 1::2]))
        self.position_embeddings = nn.Embedding.from_pretrained(pe, freeze=True)
        self.norm = nn.LayerNorm(d_model, eps=1e-12)
        self.layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers))
        self.dense = nn.Linear(d_model, 2)

    def forward(self, x):
        pos = torch.arange(x.size(1), device=x.device).unsqueeze(0).expand_as(x)
        h = self.norm(self.word_embeddings(x) + self.position_embeddings(pos))
        for layer in self.layers:
            h = layer(h)
        return self.dense(h.max(dim=1).values)   # the notebook's max over padding too


def pad_fixed(ids: list[list[int]], max_length: int) -> torch.Tensor:
    """The notebook's ``fix_length``: every review cut or padded (id 0) to ``max_length``."""
    out = torch.zeros(len(ids), max_length, dtype=torch.long)
    for i, r in enumerate(ids):
        r = r[:max_length]
        out[i, :len(r)] = torch.as_tensor(r)
    return out


def train_epochs(model, x: torch.Tensor, y: torch.Tensor, *, epochs: int, batch_size: int = 164,
                 lr: float = 1e-3, seed: int = 1234) -> list[float]:
    """The notebook's loop (AdamW, cross-entropy, shuffled batches); returns examples/s per epoch."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    speeds = []
    for _ in range(epochs):
        model.train()
        start = time.perf_counter()
        for idx in torch.randperm(len(x), generator=g).split(batch_size):
            out = model(x[idx])
            loss = F.cross_entropy(out, y[idx])
            model.zero_grad()
            loss.backward()
            opt.step()
        speeds.append(len(x) / (time.perf_counter() - start))
    return speeds


@torch.no_grad()
def evaluate(model, x: torch.Tensor, y: torch.Tensor, batch_size: int = 164) -> tuple[float, float]:
    """``(accuracy, reviews_per_second)`` with the notebook's fixed-length batches."""
    model.eval()
    start = time.perf_counter()
    correct = 0
    for i in range(0, len(x), batch_size):
        correct += int((model(x[i:i + batch_size]).argmax(1) == y[i:i + batch_size]).sum())
    return correct / len(x), len(x) / (time.perf_counter() - start)

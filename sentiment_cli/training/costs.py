"""What the search's work will cost, measured on this machine before it starts: an encoder's training step, the
cheapest encoder trial worth running, and word2vec's pretraining stage.

The search (``search.py``) starts no work that its :class:`~.budget.Budget` cannot finish or use: pretraining only
when an encoder trial still fits after it, a trial only when its floor fits. Each estimate is a short timed probe of
the real work (a training step of the rules' model on a random batch; word2vec on a sample of the texts), so a busy
or slow machine gets its own figures.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence

import numpy as np
import torch

from ..config import Config
from ..model.classifier import SentimentClassifier
from ..runtime import autocast
from .loop import adversarial_perturbation
from .optim import make_optimizer
from .policy import SearchPolicy

PROBE_STEPS = 2          # timed steps after one warm-up step; the fastest counts
PROBE_TEXTS = 2000       # texts word2vec's probe reads


def encoder_step_seconds(config: Config, vocab_size: int, num_labels: int, length: int,
                         device: torch.device | str = "cpu") -> float:
    """Seconds of one training step of the encoder ``config`` describes: a random batch of ``[training]
    batch_size`` texts of ``length`` tokens, forward, backward (twice with adversarial training on texts that
    short), AdamW's step, the fastest of :data:`PROBE_STEPS` after a warm-up step.

    Args:
        config: the run's config (its ``[model]``, ``[training]`` and ``[data] max_length``).
        vocab_size: the token embedding's rows.
        num_labels: classes.
        length: tokens a text (a batch's padded length), at most ``max_length``.
        device: where the trials train.
    """
    t = config.training
    # the encoder's step leaves the n-gram score out (a multi-label score's table alone can hold 235 MB)
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, ngram_buckets=0))
    model = SentimentClassifier.from_config(config, vocab_size, num_labels).to(device)
    optimizer = make_optimizer(model, config)
    length = max(1, min(length, config.data.max_length))
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, max(4, vocab_size), (t.batch_size, length), generator=generator).to(device)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    labels = torch.randint(0, num_labels, (t.batch_size,), generator=generator).to(device)
    adversarial = t.adversarial_epsilon > 0 and (t.adversarial_max_length == 0 or length <= t.adversarial_max_length)
    times = []
    for _ in range(PROBE_STEPS + 1):
        began = time.perf_counter()
        delta = torch.zeros(*ids.shape, config.model.d_model, device=device, requires_grad=adversarial)
        with autocast(device, t.autocast_bf16):
            loss = torch.nn.functional.cross_entropy(model(ids, mask, delta, encoder_only=True).logits, labels)
        loss.backward()
        if adversarial:
            with autocast(device, t.autocast_bf16):
                perturbed = model(ids, mask, adversarial_perturbation(delta.grad, t.adversarial_epsilon),
                                  encoder_only=True).logits
            torch.nn.functional.cross_entropy(perturbed, labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - began)
    return min(times[1:])


def trial_floor(step_seconds: float, config: Config, train_rows: int, val_rows: int, policy: SearchPolicy) -> float:
    """Seconds the cheapest encoder trial worth running takes: :attr:`SearchPolicy.min_steps` steps (or half its
    schedule when shorter), two validation passes, at the trial's :attr:`~SearchPolicy.size_margin`."""
    t = config.training
    planned = math.ceil(train_rows / t.batch_size) * t.epochs
    steps = max(1, min(policy.min_steps, planned // 2 or planned))
    validation = math.ceil(val_rows / t.batch_size) * step_seconds / policy.validation_speedup
    return (steps * step_seconds + 2 * validation) / policy.size_margin


def word2vec_seconds(config: Config, texts: Sequence[str]) -> float:
    """Seconds word2vec's pretraining stage takes to its first epoch's end on ``texts``: the tokenizer built, the
    texts tokenized and one epoch over them, timed on a sample of :data:`PROBE_TEXTS` and scaled by the texts'
    characters.

    Args:
        config: the run's config (``[data]`` for the tokenizer, ``[pretrain]``, ``[model] d_model``).
        texts: the texts pretraining reads.
    """
    from gensim.models import Word2Vec

    from ..data.tokenizer import build_tokenizer, vocabulary

    if not texts:
        return 0.0
    rows = np.random.default_rng(0).permutation(len(texts))[:PROBE_TEXTS]
    sample = [texts[i] for i in rows]
    began = time.perf_counter()
    tokenizer = build_tokenizer(sample, config.data, length=len(sample))
    word_of = vocabulary(tokenizer)
    sentences = [[word_of[i] for i in e.ids] for e in tokenizer.encode_batch(sample)]
    p = config.pretrain
    Word2Vec(sentences, vector_size=config.model.d_model, window=p.window, sample=p.subsample, min_count=1, sg=1,
             negative=5, epochs=1, workers=1, seed=0)
    seconds = time.perf_counter() - began
    scale = sum(len(texts[i]) for i in rows) or 1
    total = sum(len(t) for t in texts) if len(texts) <= 200_000 else len(texts) * scale / len(sample)
    return seconds * total / scale

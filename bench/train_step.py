"""One training step of the default's encoder on CPU: where its time goes, and what each lever saves.

    python -m bench.train_step [--profile] [--rounds 5] [--seq-len 256] [--threads 2] [--variants ...]

The model is the IMDB default's (``configs/default.toml``: d_model 64, one layer, d_ff 256, a 50,000-row token
embedding and 131,073 hashed bigram rows, word dropout; its adversarial step with the ``adv`` lever), a batch of 64
random reviews of ``--seq-len`` tokens. ``--profile`` prints ``torch.profiler``'s table of one step (CPU time by
operator). Otherwise each variant (a lever, or several) runs ``--rounds`` rounds of ``--steps`` steps, the variants
interleaved round by round so that the machine's other load falls on all of them alike, and the median step time
of each is printed with its ratio to the baseline's. A variant ``NAME@N`` runs with ``N`` threads
(``baseline@1``). The load average is printed before and after: on a shared
machine only the ratios within one run mean something.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from sentiment_cli.config import load_config
from sentiment_cli.model.classifier import SentimentClassifier
from sentiment_cli.runtime import autocast
from sentiment_cli.training.loop import adversarial_perturbation
from sentiment_cli.training.optim import make_optimizer, optimizer_step

VARIANTS = ("baseline", "fused", "sparse", "bf16", "sparse+fused+bf16")
# A variant is levers joined by "+": fused (AdamW), sparse (embedding gradients, lazy AdamW), bf16 (autocast),
# adv (the adversarial step, on in the default), nodrop (every dropout rate 0), torchdrop (torch's own dropout
# kernel instead of the byte masks of model/dropout.py); "@N" runs it with N threads.


def build(variant: str):
    """``(model, optimizer, config)`` of the IMDB default for ``variant`` (its levers, see :data:`VARIANTS`)."""
    cfg = load_config("default").override("model", ngram_buckets=0)
    levers = set(variant.split("@")[0].split("+"))
    cfg = cfg.override("training", sparse_embeddings="sparse" in levers, fused_optimizer="fused" in levers,
                       autocast_bf16="bf16" in levers, adversarial_epsilon=2.0 if "adv" in levers else 0.0)
    if "nodrop" in levers:
        cfg = cfg.override("model", dropout=0.0, activation_dropout=0.0, head_dropout=0.0)
    torch.manual_seed(0)
    model = SentimentClassifier.from_config(cfg, 50_000, 2)
    if "torchdrop" in levers:   # the kernel the byte masks replaced
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, torch.nn.Dropout):
                    setattr(module, name, torch.nn.Dropout(child.p))
    return model, make_optimizer(model, cfg), cfg


def batch(seq_len: int, size: int = 64):
    ids = torch.randint(2, 50_000, (size, seq_len))
    mask = torch.zeros(size, seq_len, dtype=torch.bool)
    mask[size // 2:, seq_len * 3 // 4:] = True   # half the reviews a quarter shorter
    ids[mask] = 0
    return ids, mask, torch.randint(0, 2, (size,))


def step(model, optimizer, cfg, ids, mask, y) -> None:
    """One step as ``loop.py`` takes it: forward (the encoder), cross-entropy, backward, with adversarial training
    a second forward and backward on the perturbed embeddings, clip, AdamW."""
    t = cfg.training
    delta = torch.zeros(*ids.shape, cfg.model.d_model, requires_grad=True) if t.adversarial_epsilon else None
    with autocast(torch.device("cpu"), t.autocast_bf16):
        logits = model(ids, mask, delta, encoder_only=True).logits
    loss = torch.nn.functional.cross_entropy(logits.float(), y, label_smoothing=t.label_smoothing)
    loss.backward()
    if delta is not None:
        with autocast(torch.device("cpu"), t.autocast_bf16):
            perturbed = adversarial_perturbation(delta.grad, t.adversarial_epsilon)
            logits = model(ids, mask, perturbed, encoder_only=True).logits
        torch.nn.functional.cross_entropy(logits.float(), y, label_smoothing=t.label_smoothing).backward()
    optimizer_step(optimizer, _NoSchedule(), model.parameters(), t.grad_clip)


class _NoSchedule:
    def step(self) -> None:
        pass


def timed(variants: list[str], rounds: int, seq_len: int, steps: int = 5, threads: int = 2) -> None:
    built = {v: build(v) for v in variants}
    data = batch(seq_len)
    for v in variants:   # warm up
        step(*built[v], *data)
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(rounds):
        for v in variants:
            torch.set_num_threads(int(v.split("@")[1]) if "@" in v else threads)
            began = time.perf_counter()
            for _ in range(steps):
                step(*built[v], *data)
            times[v].append((time.perf_counter() - began) / steps)
    base = statistics.median(times[variants[0]])
    for v in variants:
        m = statistics.median(times[v])
        print(f"{v:24s} {m * 1000:8.1f} ms/step  {64 / m:7.0f} reviews/s  x{base / m:.2f} vs {variants[0]}")


def profile(variant: str, seq_len: int) -> None:
    from torch.profiler import ProfilerActivity, profile as prof

    built, data = build(variant), batch(seq_len)
    for _ in range(3):
        step(*built, *data)
    with prof(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(5):
            step(*built, *data)
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.train_step", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5, help="steps a round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"load average {os.getloadavg()[0]:.2f}, {args.threads} threads, batch 64 x {args.seq_len} tokens")
    if args.profile:
        profile(args.variants[0], args.seq_len)
    else:
        timed(args.variants, args.rounds, args.seq_len, args.steps, args.threads)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

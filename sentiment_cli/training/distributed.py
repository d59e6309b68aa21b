"""Data-parallel training under ``torchrun``: process group, sharding, and the few collectives the loop needs.

``torchrun --nproc_per_node N -m sentiment_cli train ...`` starts N copies of
the CLI with ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` in their
environment; :func:`from_env` reads them. The training loop then wraps the
model in ``DistributedDataParallel`` (Li et al. 2020, "PyTorch Distributed:
Experiences on Accelerating Data Parallel Training"), gives each rank a
disjoint shard of the training set (``DistributedSampler``), and
all-reduces the epoch's loss and accuracy. Every helper here is a no-op
returning the local value when the run is not distributed, so the loop has
one code path.

Tensors for collectives live on the training device (NCCL needs CUDA
tensors; gloo takes CPU ones). Nothing is pickled: ``broadcast_object_list``
and friends are avoided in favour of plain tensors.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from ..errors import UsageError


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in a ``torchrun`` job (``world_size == 1``: not distributed)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def enabled(self) -> bool:
        """More than one process: collectives and a process group are needed."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that logs and writes checkpoints."""
        return self.rank == 0


def from_env(environ: Mapping[str, str] | None = None) -> DistInfo:
    """Read ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` as set by ``torchrun``; absent: a single process.

    Raises:
        UsageError: the variables are present but not consistent integers.
    """
    env = os.environ if environ is None else environ
    if "WORLD_SIZE" not in env:
        return DistInfo()
    try:
        world = int(env["WORLD_SIZE"])
        rank = int(env.get("RANK", "0"))
        local = int(env.get("LOCAL_RANK", str(rank)))
    except ValueError:
        raise UsageError("WORLD_SIZE, RANK and LOCAL_RANK must be integers (as torchrun sets them)") from None
    if world < 1 or not 0 <= rank < world or local < 0:
        raise UsageError(f"inconsistent torchrun environment: RANK={rank}, WORLD_SIZE={world}, LOCAL_RANK={local}")
    return DistInfo(rank, local, world)


def device_for(info: DistInfo, device: torch.device) -> torch.device:
    """The device of this rank: ``cuda:LOCAL_RANK`` for CUDA runs under torchrun, else ``device``.

    Raises:
        UsageError: more local ranks than visible CUDA devices.
    """
    if not info.enabled or device.type != "cuda":
        return device
    if info.local_rank >= torch.cuda.device_count():
        raise UsageError(f"LOCAL_RANK {info.local_rank} but only {torch.cuda.device_count()} CUDA devices "
                         "are visible; lower --nproc_per_node")
    device = torch.device("cuda", info.local_rank)
    torch.cuda.set_device(device)
    return device


@contextmanager
def process_group(info: DistInfo, device: torch.device) -> Iterator[None]:
    """Initialise the default process group (NCCL on CUDA, gloo on CPU) and always destroy it on exit.

    On a normal exit the ranks meet at a barrier first, so that none shuts its connections while another
    still works inside the group: after a refit, rank 0 moves files and draws the card while the others are
    done, and a rank tearing gloo down then aborted once on CI ("terminate called without an active
    exception").

    Re-entrant: inside an open group (the refit's second run, ``refit.py``) it keeps that group. A second
    ``init_process_group`` after ``destroy_process_group`` in the same torchrun job can hang on the
    rendezvous store's stale keys (pytorch/pytorch#55967, #114585), so one group serves the whole job.
    """
    if not info.enabled or dist.is_initialized():
        yield
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, rank=info.rank, world_size=info.world_size,
                            device_id=device if device.type == "cuda" else None)
    try:
        yield
    except BaseException:
        _destroy()   # no barrier: the other ranks may never reach it
        raise
    dist.barrier()   # every rank is done with the group before any rank tears its connections down
    _destroy()


def _destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier(info: DistInfo) -> None:
    """Wait for every rank (no-op in a single process)."""
    if info.enabled:
        dist.barrier()


@contextmanager
def main_first(info: DistInfo) -> Iterator[None]:
    """Rank 0 runs the block first (e.g. to fill the ``datasets`` cache), then the other ranks."""
    if not info.is_main:
        barrier(info)
    yield
    if info.is_main:
        barrier(info)


def all_reduce(info: DistInfo, values: Sequence[float], device: torch.device, op: str = "sum") -> list[float]:
    """Element-wise ``sum`` or ``max`` of ``values`` over all ranks (float64)."""
    if not info.enabled:
        return [float(v) for v in values]
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return t.tolist()


def broadcast_floats(info: DistInfo, values: Sequence[float] | None, n: int, device: torch.device) -> list[float]:
    """Rank 0's ``n`` floats on every rank (``values`` is ignored on the other ranks)."""
    if not info.enabled:
        return [float(v) for v in values]
    t = torch.tensor(values if info.is_main else [0.0] * n, dtype=torch.float64, device=device)
    dist.broadcast(t, src=0)
    return t.tolist()


def broadcast_bytes(info: DistInfo, data: bytes | None, device: torch.device) -> bytes:
    """Rank 0's ``data`` on every rank, sent as a uint8 tensor (no pickling)."""
    if not info.enabled:
        return data
    size = torch.tensor([len(data) if info.is_main else 0], dtype=torch.int64, device=device)
    dist.broadcast(size, src=0)
    if info.is_main:
        buf = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
    else:
        buf = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    dist.broadcast(buf, src=0)
    return data if info.is_main else bytes(buf.cpu().numpy())


def all_gather_tensor(info: DistInfo, tensor: torch.Tensor, device: torch.device) -> list[torch.Tensor]:
    """Every rank's ``tensor`` (same shape and dtype on all ranks), as CPU tensors in rank order."""
    if not info.enabled:
        return [tensor.cpu()]
    local = tensor.to(device)
    out = [torch.empty_like(local) for _ in range(info.world_size)]
    dist.all_gather(out, local)
    return [t.cpu() for t in out]


def shard(num_examples: int, info: DistInfo, *, seed: int, epoch: int) -> np.ndarray:
    """This rank's example indices for ``epoch``, from ``torch.utils.data.DistributedSampler``.

    The sampler shuffles all indices with ``seed + epoch`` and deals them out
    round-robin; it pads by repeating a few indices so that every rank gets
    ``ceil(num_examples / world_size)`` of them and runs the same number of
    steps. Single process: all indices, in order.

    Returns:
        int64 indices, shape ``(ceil(num_examples / world_size),)``.
    """
    if not info.enabled:
        return np.arange(num_examples)
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(num_examples), num_replicas=info.world_size, rank=info.rank,
                                 shuffle=True, seed=seed, drop_last=False)
    sampler.set_epoch(epoch)
    return np.fromiter(iter(sampler), dtype=np.int64)

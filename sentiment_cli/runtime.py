"""Where and how the model runs: device, seeding, precision, and the library versions a run records.

Shared by training, pretraining, evaluation and prediction; knows nothing of
the model or the data.
"""

from __future__ import annotations

import contextlib
import os
import platform
import random
import threading
from collections.abc import Iterator

import numpy as np
import torch

from . import __version__
from .errors import UsageError


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


def device_name(device: torch.device) -> str:
    """A readable name for ``metrics.json``: the GPU's name, or the CPU's with the thread count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) RNGs."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def autocast(device: torch.device, enabled: bool):
    """bf16 autocast on ``device`` when ``enabled``, else a no-op context."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


_attention_lock = threading.Lock()
_attention_users = 0          # blocks inside inference_attention, over all threads
_fastpath_before = True       # the switch's value when the first of them entered


@contextlib.contextmanager
def inference_attention(device: torch.device) -> Iterator[None]:
    """Within the block, inference on a CPU computes attention as training does, not by torch's "fast path".

    In eval mode without gradients, ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention``
    switch to a fused inference kernel (``torch.backends.mha`` "fast path"). On a CPU that kernel
    materialises the ``(batch, n_heads, seq_len, seq_len)`` attention weights, which makes it slower
    than the ``scaled_dot_product_attention`` path that training uses; turning it off keeps
    inference on the faster path and gives validation, ``eval`` and ``predict`` the numbers of
    one code path. On other devices the block changes nothing.

    torch has no per-module switch, only the process-wide
    ``torch.backends.mha.set_fastpath_enabled``, so it is turned off for the block alone (never in
    the model's forward pass, never for the rest of the process). Blocks on several threads
    (a server's) are counted under a lock: the switch goes back to its earlier value when the
    last of them ends, not while another thread is still inside one.

    Args:
        device: where the model runs.
    """
    global _attention_users, _fastpath_before
    if device.type != "cpu":
        yield
        return
    with _attention_lock:
        if _attention_users == 0:
            _fastpath_before = torch.backends.mha.get_fastpath_enabled()
            torch.backends.mha.set_fastpath_enabled(False)
        _attention_users += 1
    try:
        yield
    finally:
        with _attention_lock:
            _attention_users -= 1
            if _attention_users == 0:
                torch.backends.mha.set_fastpath_enabled(_fastpath_before)


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bfloat16 in hardware (a GPU with bf16; a CPU with AVX512-BF16 or AMX).

    Where it does not, bf16 autocast still gives the same kind of results but emulates
    bf16 and can be slower than float32.
    """
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        # torch's own probes (private; where a torch version lacks them, assume support)
        probes = [getattr(torch.cpu, name, lambda: True) for name in
                  ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
        return any(probe() for probe in probes)
    return True


def usable_cores() -> int:
    """The CPU cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count`` where it is missing)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def pinned_threads() -> int | None:
    """The thread count the user pinned with the ``OMP_NUM_THREADS`` environment variable (a positive integer),
    or ``None`` where it is unset or not one. A pinned count makes a run's float sums, and so its results, the
    same from run to run whatever else the machine is doing."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def free_threads(own: float) -> int:
    """Threads for this process's CPU math: the cores it may run on less the load the other processes put on them
    (the 1-minute load average less ``own``, the runnable threads this process itself contributed), rounded, at
    least 1. A step of the encoder waits for all its threads, so a thread whose core another process keeps busy
    slows every step: on a 2-core machine with other CPU-bound work, one thread trains faster than two
    (docs/decisions.md#training-threads). Where the load average is missing, every usable core.
    """
    cores = usable_cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):   # pragma: no cover
        return cores
    others = max(0.0, load - own)
    return max(1, min(cores, int(cores - others + 0.5)))


CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")   # v2, v1


def memory_bytes(device: torch.device) -> tuple[int | None, str]:
    """The memory a model trained on ``device`` can have, in bytes, and its name for a message: the GPU's
    total memory; on the CPU the machine's physical memory, or a container's (cgroup) limit when lower.
    ``None`` when it cannot be read."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory, "the GPU"
    try:
        total: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):   # not a POSIX system that says
        total = None
    for path in CGROUP_LIMITS:
        try:
            with open(path, encoding="ascii") as fh:
                limit = fh.read().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if limit.isdigit():   # "max": no limit
            total = min(total, int(limit)) if total else int(limit)
    return total, "this machine"


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

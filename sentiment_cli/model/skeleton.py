"""The classifier built without its random starting weights: its tensors' shapes, or the frame a checkpoint fills.

Loading a checkpoint needs the model's tensors twice over: first their names, dtypes and shapes, to check the
weights file against ``config.json`` before anything is allocated (:func:`tensor_specs`, on the ``meta``
device), then the model that the weights are copied into (:func:`uninitialised_classifier`). Neither needs
the random draws of ``torch.nn.init`` that a fresh model starts from, and on the ``meta`` device one of them
(``normal_``, the embeddings') runs through ``torch._refs``, whose first call imports ``torch._dynamo`` and
``sympy`` (about a second of a cold ``sentiment predict``). :func:`no_init` skips them: a
``TorchFunctionMode`` (thread-local, like the ``with torch.device(...)`` context) that answers every
public ``torch.nn.init`` function by returning its tensor untouched, and passes every other call through.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..config import Config
from .classifier import SentimentClassifier


class _SkipInit(TorchFunctionMode):
    """Every public ``torch.nn.init`` function returns its tensor as it is; other calls run as usual."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == torch.nn.init.__name__:
            return kwargs["tensor"] if "tensor" in kwargs else args[0]
        return func(*args, **kwargs)


@contextmanager
def no_init() -> Iterator[None]:
    """Within it, modules are built without ``torch.nn.init``'s draws: their parameters hold whatever
    ``torch.empty`` gave (on the ``meta`` device, nothing), so what is built must be filled before use
    (``load_state_dict(strict=True)``) or used only for its shapes; so are the n-gram score's tables, zeroed by
    ``nn.init.zeros_``. Other buffers and anything computed otherwise (the positional encoding) are made as usual.
    Affects only the calling thread."""
    with _SkipInit():
        yield


def tensor_specs(config: Config, vocab_size: int, num_labels: int) -> dict[str, tuple[Any, tuple[int, ...]]]:
    """The ``(dtype, shape)`` of each tensor in the ``state_dict`` of the classifier ``config`` describes, by
    name (as a checkpoint's weights file names them), from a model built on the ``meta`` device without
    initialising it: no memory is allocated, whatever the sizes, and ``torch._dynamo`` is not imported.

    Raises:
        ValueError: the config describes no model (as :class:`SentimentClassifier`).
    """
    with torch.device("meta"), no_init():
        state = SentimentClassifier.from_config(config, vocab_size, num_labels).state_dict()
    return {name: (t.dtype, tuple(t.shape)) for name, t in state.items()}


def uninitialised_classifier(config: Config, vocab_size: int, num_labels: int) -> SentimentClassifier:
    """The classifier ``config`` describes, on the CPU, its parameters not initialised (see :func:`no_init`):
    a frame for ``load_state_dict(..., strict=True)``, which sets every one of them.

    Raises:
        ValueError: as :class:`SentimentClassifier`.
    """
    with no_init():
        return SentimentClassifier.from_config(config, vocab_size, num_labels)

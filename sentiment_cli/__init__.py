"""sentiment: a small from-scratch Transformer sentiment classifier for IMDB, as a library and a CLI.

The Python API (``docs/python.md``)::

    import sentiment_cli
    model = sentiment_cli.load("checkpoints/default")     # a Predictor
    model.predict(["A moving film."])                      # label and probabilities per text
    result = sentiment_cli.train("reviews.csv", config="seed", output="checkpoints/mine", epochs=3)

``load``, ``train``, ``TrainResult`` and ``Predictor`` are imported on first use (PEP 562), so that
``import sentiment_cli`` itself imports nothing heavy (no torch, numpy or datasets). The modules below
are the library's layers (``sentiment_cli.inference.predictor``, ``sentiment_cli.training.run``...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Predictor", "TrainResult", "__version__", "load", "train"]

# Each lazy name -> the module that defines it.
_LAZY = {"load": ".api", "train": ".api", "TrainResult": ".api", "Predictor": ".inference.predictor"}

if TYPE_CHECKING:
    from .api import TrainResult, load, train
    from .inference.predictor import Predictor


def __getattr__(name: str) -> Any:
    """``sentiment_cli.load`` and the other names of :data:`_LAZY`: the module is imported on first use,
    and the name cached in the package."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

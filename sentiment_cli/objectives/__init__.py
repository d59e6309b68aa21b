"""The pretraining objectives (``[pretrain] objective``), found by a registry: each is one module of this
package, named for the objective, whose ``OBJECTIVE`` is its :class:`Objective`.

A new objective is one new module here (its step, a ``torch`` module, may sit in ``training/`` and is named
by its dotted path): the config's choices (:func:`names`), pretraining's loop and step, what a fine-tuning run
takes from its folder and must match, and the model card's words all come from its record, and no other file
changes. This package is torch-free and imports nothing of the package but the wording of the config (it sits
at the config's level): the config's check of a checkpoint's settings (the ONNX path's too) and the model card
read it without torch.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

# The [model] keys a pretrained encoder's weights fix: their shapes and how its tokenizer's ids are embedded.
ENCODER_KEYS = ("d_model", "n_heads", "n_layers", "d_ff", "activation", "norm_first", "scale_embedding",
                "embedding_norm", "bigram_buckets")


@dataclass(frozen=True)
class Objective:
    """One pretraining objective.

    Attributes:
        name: its ``[pretrain] objective`` value (the module's name).
        summary: what it trains, in a few words with its source (the config key's help).
        fixes: the ``[model]`` keys a fine-tuning run from its folder must match.
        takes: what a fine-tuning run takes of the folder's weights: ``"embedding"`` (the token embedding
            alone) or ``"encoder"`` (every tensor but the dense head's, which predicted words, not labels).
        describe: ``describe(pretrain)`` -> the model card's ``(what, optimizer)`` words, from the folder's
            ``[pretrain]`` settings (a dict).
        step: ``"module:Class"`` of the step that trains the whole encoder (``Class.for_run(model, config,
            generator)`` gives a module whose call is one step's ``(loss, tally)``; pretraining's encoder loop
            runs it); ``None``: the objective has its own loop (word2vec's, on the token embedding alone).
    """

    name: str
    summary: str
    fixes: tuple[str, ...]
    takes: str
    describe: Callable[[dict[str, Any]], tuple[str, str]]
    step: str | None = None

    def takes_tensor(self, name: str) -> bool:
        """Whether a fine-tuning run takes the folder's tensor ``name`` (a ``state_dict`` key)."""
        return name == "token_embedding.weight" if self.takes == "embedding" else not name.startswith("head.")

    def step_class(self) -> Any:
        """The class :attr:`step` names, imported now (it imports torch).

        Raises:
            ValueError: the objective has no step (its own loop).
        """
        if self.step is None:
            raise ValueError(f"the {self.name} objective has its own loop, no step")
        module, _, attribute = self.step.partition(":")
        return getattr(importlib.import_module(module), attribute)


@cache
def _registry() -> dict[str, Objective]:
    """Every module of this package's ``OBJECTIVE``, by name (imported once, in name order)."""
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        objective = importlib.import_module(f"{__name__}.{info.name}").OBJECTIVE
        if objective.name != info.name:
            raise ValueError(f"objectives/{info.name}.py declares the objective {objective.name!r}")
        found[objective.name] = objective
    return found


def names() -> tuple[str, ...]:
    """The objectives this version knows, in name order (the config's choices)."""
    return tuple(_registry())


def summary() -> str:
    """The config key's help: each objective and what it trains, in name order."""
    return "; ".join(f"{o.name}: {o.summary}" for o in _registry().values())


def objective(name: str) -> Objective:
    """The objective ``name``.

    Raises:
        KeyError: an objective this version does not know.
    """
    return _registry()[name]

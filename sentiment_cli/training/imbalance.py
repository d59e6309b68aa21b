"""Class imbalance: ``[training] class_weight = "balanced"`` weighs each labelled review's loss by its class.

Class ``c`` of ``n_c`` of the ``n`` training reviews weighs ``n / (k * n_c)``,
``k`` the number of classes present in the training split: scikit-learn's
``compute_class_weight("balanced")`` (the heuristic of King & Zeng 2001,
"Logistic Regression in Rare Events Data"). Every class then carries the same
total weight, and the mean weight over the training reviews is 1, so the
learning rate keeps its meaning. The run computes the weights once, from the
training split; ``distill.loss_function`` applies them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .policy import DEFAULT, FitPolicy


def class_weights(labels: Sequence[int] | torch.Tensor, num_classes: int, mode: str,
                  policy: FitPolicy = DEFAULT.fit) -> torch.Tensor | None:
    """Each class's loss weight under ``mode``, from the training split's label ids ``labels``.

    A class absent from ``labels`` gets weight 0 (no review carries it; there is nothing to divide by);
    ``k`` counts the present classes, so the present ones weigh exactly what scikit-learn's
    ``compute_class_weight("balanced", classes=np.unique(labels), y=labels)`` gives them.

    Args:
        labels: ``(n,)`` label ids, each in ``[0, num_classes)``.
        num_classes: the model's classes.
        mode: ``[training] class_weight``: ``"none"`` or ``"balanced"``.
        policy: several labels per text's weights (:attr:`~.policy.FitPolicy.pos_weight_power`, ``max_pos_weight``).

    Returns:
        ``None`` for ``"none"``; for ``"balanced"``, ``(num_classes,)`` float32 weights, by label id.

    Raises:
        ValueError: an unknown ``mode``, or a label outside ``[0, num_classes)``.
    """
    if mode == "none":
        return None
    if mode != "balanced":
        raise ValueError(f"class_weight must be none or balanced, got {mode!r}")
    y = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    if y.dim() == 2:
        return positive_weights(y, policy.pos_weight_power, policy.max_pos_weight)
    if len(y) and not (0 <= int(y.min()) and int(y.max()) < num_classes):
        raise ValueError(f"label ids must be in [0, {num_classes}), got {int(y.min())} to {int(y.max())}")
    counts = torch.bincount(y, minlength=num_classes).double()
    present = counts > 0
    weights = torch.zeros(num_classes, dtype=torch.float64)
    weights[present] = len(y) / (int(present.sum()) * counts[present])
    return weights.float()


def positive_weights(y: torch.Tensor, power: float = DEFAULT.fit.pos_weight_power,
                     cap: float = DEFAULT.fit.max_pos_weight) -> torch.Tensor:
    """Multi-label ``"balanced"``: each label's ``pos_weight`` of the binary cross-entropy,
    ``min(cap, (n_negative / n_positive) ** power)`` (1 for a label with no positive). 1 would give each label's
    positives the weight of its negatives; GoEmotions' dev split chose the square root (``docs/decisions.md``,
    class weights; :attr:`~.policy.FitPolicy.pos_weight_power`).

    Args:
        y: ``(n, num_labels)`` 0/1.
        power: the exponent.
        cap: the largest weight.

    Returns:
        ``(num_labels,)`` float32.
    """
    pos = y.sum(0).double()
    neg = len(y) - pos
    ratio = torch.where(pos > 0, neg / pos.clamp(min=1), torch.ones_like(pos))
    return ratio.pow(power).clamp(max=cap).float()


def weights_report(weights: torch.Tensor | None, label_names: Sequence[str]) -> dict[str, float] | None:
    """``metrics.json``'s ``"class_weights"``: ``{label name: weight}``, or ``None`` without weights."""
    if weights is None:
        return None
    return {name: float(w) for name, w in zip(label_names, weights.tolist())}

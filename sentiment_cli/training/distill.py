"""Distillation: the fitted n-gram score as a teacher that labels unlabelled reviews, and the loss that learns from it.

With ``[training] distill_reviews`` > 0 the run's n-gram score, fitted on the training split first
(``ngram/fit.py``: the model's own score, or a stand-alone one when the model has none), is the teacher:
the source's unlabelled reviews get its probabilities as soft targets, and each epoch trains on all
labelled reviews plus a fresh seeded draw of ``distill_reviews`` unlabelled ones (Hinton et al. 2015,
"Distilling the Knowledge in a Neural Network", at temperature 1).

The encoder's training loss leaves the n-gram score out (``encoder_only=True``); validation, evaluation
and prediction add it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..config import Config
from ..data.splits import DataSpec
from ..errors import DataError
from ..ngram.fit import FittedScore
from .callbacks import TrainCallbacks
from .run_data import RunData


@dataclass
class Distillation:
    """The unlabelled reviews of distillation and every training review's soft target.

    Attributes:
        ids: the unlabelled reviews' token ids (they follow the labelled ones in the run's reviews).
        targets: ``(num_labelled + len(ids), num_classes)`` float32 target distributions: the label,
            smoothed by ``label_smoothing``, for a labelled review; the teacher's probabilities for an
            unlabelled one.
        weights: ``(num_labelled + len(ids),)`` float32 loss weights: 1, or ``distill_weight``.
        report: what ``metrics.json`` says about distillation (``"distillation"``).
    """

    ids: list[list[int]]
    targets: torch.Tensor
    weights: torch.Tensor
    report: dict[str, Any]


def distillation(config: Config, data: RunData, tokenizer, teacher: FittedScore | None, train_labels: list[int],
                 cb: TrainCallbacks) -> Distillation | None:
    """Label the source's unlabelled reviews (from ``data``, the run's source read once) with the teacher's
    probabilities (``None`` without distillation).

    Args:
        config: the run's config (``[training] distill_reviews``, ``distill_weight``, ``label_smoothing``).
        data: the run's source, read once (:class:`~.run_data.RunData`).
        tokenizer: the run's tokenizer.
        teacher: the fitted n-gram score (:func:`~sentiment_cli.ngram.fit.fit_ngram_score`), or ``None``.
        train_labels: the labelled reviews' label ids, or a ``(num_labelled, num_labels)`` 0/1 matrix with several
            labels per text (the teacher's targets are then each label's sigmoid probability).
        cb: progress (``on_stage``).

    Raises:
        DataError: the source has no ``unsupervised`` split, or fewer unlabelled reviews than
            ``distill_reviews``.
    """
    t = config.training
    if not t.distill_reviews or teacher is None:
        return None
    start = time.perf_counter()
    texts = data.pretraining_texts(DataSpec.from_config(config), "unsupervised",
                                   missing_hint="distillation needs unlabelled text: give it with --unlabelled "
                                                "PATH, or set training.distill_reviews=0")
    if len(texts) < t.distill_reviews:
        raise DataError(f"[training] distill_reviews is {t.distill_reviews:,} but {config.data.source} has "
                        f"{len(texts):,} unlabelled texts; lower it")
    cb.on_stage(f"tokenizing {len(texts):,} unlabelled texts and labelling them with the teacher")
    ids = data.ids(tokenizer, texts, config.data)
    eps, n = t.label_smoothing, len(train_labels)
    if np.ndim(train_labels) == 2:   # several labels per text: each label's own probability (sigmoid)
        soft = torch.sigmoid(torch.from_numpy(teacher.score.logits(ids)).float())  # (n_unlabelled, num_labels)
        hard = torch.as_tensor(np.asarray(train_labels), dtype=torch.float32) * (1 - eps) + eps / 2
    else:
        soft = teacher.score.probabilities(ids)                                   # (n_unlabelled, num_labels)
        hard = F.one_hot(torch.tensor(train_labels, dtype=torch.long), soft.shape[1]).float() * (1 - eps) \
            + eps / soft.shape[1]
    report = {"unlabelled_reviews": len(texts), "reviews_per_epoch": t.distill_reviews, "weight": t.distill_weight,
              "labelling_seconds": time.perf_counter() - start}
    return Distillation(ids=ids, targets=torch.cat([hard, soft]),
                        weights=torch.cat([torch.ones(n), torch.full((len(texts),), t.distill_weight)]),
                        report=report)


def epoch_reviews(num_labelled: int, distill: Distillation | None, config: Config, epoch: int) -> np.ndarray:
    """The indices into the run's reviews that ``epoch`` trains on: every labelled review, plus, with
    distillation, ``distill_reviews`` unlabelled ones drawn afresh for each epoch (seeded by the
    run's seed and the epoch, so a resumed run draws the same)."""
    pool = np.arange(num_labelled)
    if distill is None:
        return pool
    rng = np.random.default_rng([config.training.seed, epoch])
    drawn = rng.choice(len(distill.ids), config.training.distill_reviews, replace=False)
    return np.concatenate([pool, num_labelled + np.sort(drawn)])


def loss_function(config: Config, distill: Distillation | None, train_labels: torch.Tensor, index: torch.Tensor,
                  device: torch.device, class_weights: torch.Tensor | None = None):
    """The loss of a batch's ``(batch, num_classes)`` logits for the reviews ``index`` names: cross-entropy
    with label smoothing; with distillation, the weighted cross-entropy against each review's target
    distribution (labelled or the teacher's; Hinton et al. 2015 with temperature 1). With several labels per text
    (``train_labels`` ``(num_labelled, num_labels)`` 0/1), the binary cross-entropy per label, ``class_weights``
    being each label's ``pos_weight`` (:func:`~.imbalance.positive_weights`).

    Args:
        config: the run's config (``label_smoothing``).
        distill: distillation's targets and weights, or ``None`` without it.
        train_labels: ``(num_labelled,)`` int64 label ids of the labelled reviews.
        index: ``(batch,)`` int64 indices into the run's reviews (from ``num_labelled`` on: unlabelled ones).
        device: where the logits are.
        class_weights: ``(num_classes,)`` float32 weights by class (``[training] class_weight``,
            :func:`~.imbalance.class_weights`), or ``None``. Without distillation they are
            ``F.cross_entropy``'s ``weight`` (the mean divides by the batch's summed target weights; with
            label smoothing torch weighs each class's smoothing term by its own weight); with it, a labelled
            review's loss weight is multiplied by its class's weight (unlabelled ones keep ``distill_weight``).

    Returns:
        ``logits -> scalar loss`` (float32).
    """
    t = config.training
    pos_weight = None if class_weights is None else class_weights.to(device)
    if train_labels.dim() == 2 and distill is None:   # several labels per text
        return _multi_label_loss(train_labels[index].to(device), t.label_smoothing, pos_weight)
    if train_labels.dim() == 2:   # per-label targets: the labels', or the teacher's sigmoid probabilities
        q, w = distill.targets[index].to(device), distill.weights[index].to(device)
        return lambda logits: (w * F.binary_cross_entropy_with_logits(
            logits.float(), q, pos_weight=pos_weight, reduction="none").mean(1)).sum() / w.sum()
    if distill is None:
        target = train_labels[index].to(device)
        weight = None if class_weights is None else class_weights.to(device)
        return lambda logits: F.cross_entropy(logits.float(), target, weight=weight, label_smoothing=t.label_smoothing)
    w = distill.weights[index]
    if class_weights is not None:
        labelled = index < len(train_labels)
        w = w.clone()
        w[labelled] *= class_weights[train_labels[index[labelled]]]
    q, w = distill.targets[index].to(device), w.to(device)
    return lambda logits: (w * -(q * F.log_softmax(logits.float(), 1)).sum(1)).sum() / w.sum()


def _multi_label_loss(target: torch.Tensor, smoothing: float, pos_weight: torch.Tensor | None):
    """``logits -> scalar``: the mean binary cross-entropy of ``(batch, num_labels)`` logits against ``target``
    ``(batch, num_labels)`` 0/1, smoothed towards 1/2 (``y (1 - eps) + eps / 2``), with each label's positives
    weighted by ``pos_weight`` (``(num_labels,)``, :func:`~.imbalance.positive_weights`) when given."""
    soft = target.float() * (1 - smoothing) + smoothing / 2
    return lambda logits: F.binary_cross_entropy_with_logits(logits.float(), soft, pos_weight=pos_weight)

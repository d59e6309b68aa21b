"""The n-gram teacher in training: fit it, let it label unlabelled reviews, and the loss that learns from it.

With ``[model] ngram_buckets`` > 0 or ``[training] distill_reviews`` > 0, a run
first fits the n-gram score (``model/ngram.py``, NB-LR or logistic regression
over hashed token 1-3-grams, as ``[model] ngram_fit`` says or cross-validation
on the training split picks; seconds to a minute) on the training split: the
model's own score, or a stand-alone one of
:data:`~sentiment_cli.model.ngram.TEACHER_BUCKETS` buckets for distillation
alone. Every rank fits it itself, and a resumed run fits it again: the choice
and the fit are deterministic, so the result equals the score saved with the
weights.

- **Distillation** (``distill_reviews``): the source's unlabelled reviews get
  the teacher's probabilities as soft targets, and each epoch trains on all
  labelled reviews plus a fresh seeded draw of ``distill_reviews`` unlabelled
  ones (Hinton et al. 2015, "Distilling the Knowledge in a Neural Network",
  at temperature 1).
- **Residual training** (``ngram_residual``): the encoder's training logits
  add each labelled review's score from a teacher fitted on the other
  :data:`RESIDUAL_FOLDS` folds (stacking), in the form and C of the full fit,
  since on its own training reviews the full fit is near-certain.

The encoder's training loss otherwise leaves the score out
(``encoder_only=True``); validation, evaluation and prediction add it.
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
from ..model.classifier import SentimentClassifier
from ..model.ngram import TEACHER_BUCKETS, FitLimit, NgramScore, buckets_within
from .callbacks import TrainCallbacks
from .run_data import RunData

RESIDUAL_FOLDS = 5   # ngram_residual: folds of the training split for the cross-fitted scores


@dataclass
class Teacher:
    """The fitted n-gram teacher.

    Attributes:
        score: the fitted :class:`~sentiment_cli.model.ngram.NgramScore` (the model's own, or stand-alone).
        report: what ``metrics.json`` says about it (``"teacher"``).
        cross_fitted: with ``ngram_residual``, ``(num_labelled, num_labels)`` float32: each training
            text's unscaled logits from the teacher fitted on the other folds; else ``None``.
    """

    score: NgramScore
    report: dict[str, Any]
    cross_fitted: torch.Tensor | None = None


@dataclass
class Distillation:
    """The unlabelled reviews of distillation and every training review's soft target.

    Attributes:
        ids: the unlabelled reviews' token ids (they follow the labelled ones in the run's reviews).
        targets: ``(num_labelled + len(ids), num_classes)`` float32 target distributions: the label,
            smoothed by ``label_smoothing``, for a labelled review; the teacher's probabilities for an
            unlabelled one.
        weights: ``(num_labelled + len(ids),)`` float32 loss weights: 1, or ``distill_weight``.
        report: what ``metrics.json`` adds about distillation to ``"teacher"``.
    """

    ids: list[list[int]]
    targets: torch.Tensor
    weights: torch.Tensor
    report: dict[str, Any]


def fit_limit(config: Config, num_labels: int) -> FitLimit | None:
    """The memory bound of the run's n-gram fit (``[training] ngram_fit_gb``), with what else to lower in its
    message: the model's ``ngram_buckets``, or distillation for a teacher of its own; ``None`` without a fit."""
    m, t = config.model, config.training
    if not (m.ngram_buckets or t.distill_reviews):
        return None
    fits = buckets_within(num_labels, t.ngram_fit_gb)
    if not m.ngram_buckets:
        return FitLimit(t.ngram_fit_gb, instead="--set training.distill_reviews=0 (no distillation, no teacher)")
    most = f"{fits} at most" if 0 < fits < m.ngram_buckets else "N"
    fewer = f"fewer buckets (--set model.ngram_buckets={most}; 0: no n-gram score)" if fits else \
        "no n-gram score (--set model.ngram_buckets=0)"
    no_lr = "--set model.ngram_fit=nb-lr (no logistic regression)" if m.ngram_fit != "nb-lr" else ""
    return FitLimit(t.ngram_fit_gb, instead=fewer, without_lr=no_lr)


def check_fit_size(config: Config, num_labels: int) -> None:
    """Refuse, before the model is built, a run whose n-gram score (or teacher) would hold more weights than
    ``[training] ngram_fit_gb`` allows: ``(buckets + 1) x classes`` float32, a few copies at once
    (:func:`~sentiment_cli.model.ngram.fit_bytes`); the fit checks again once the texts' n-grams are known.

    Raises:
        DataError: one line naming the size, the limit, and the settings that change it.
    """
    limit = fit_limit(config, num_labels)
    if limit is not None:
        limit.check(config.model.ngram_buckets or TEACHER_BUCKETS, num_labels)


def fit_teacher(config: Config, model: SentimentClassifier, train_ids: list[list[int]], train_labels: list[int],
                val_ids: list[list[int]], val_labels: list[int], cb: TrainCallbacks) -> Teacher | None:
    """Fit the n-gram teacher on the training split, as the model's own score when it has one.

    The report (``metrics.json``'s ``"teacher"``) names the form fitted, its C and how they were
    chosen, with each candidate's cross-validated accuracy when cross-validation chose
    (:meth:`~sentiment_cli.model.ngram.NgramFit.report`). With ``[training] class_weight = "balanced"``
    the teacher's fits weigh the classes as the encoder's loss does (scikit-learn's ``class_weight``).

    Returns:
        The :class:`Teacher`, or ``None`` when the run has neither an n-gram score nor distillation.

    Raises:
        DataError: fewer than two classes among the labels, or a label id out of range.
    """
    t = config.training
    if not (config.model.ngram_buckets or t.distill_reviews):
        return None
    start = time.perf_counter()
    score = model.logit_term if config.model.ngram_buckets else NgramScore(
        TEACHER_BUCKETS, num_labels=model.num_labels, fit=config.model.ngram_fit)
    how = "choosing its form by cross-validation" if score.fit_form == "auto" else score.fit_form.upper()
    cb.on_stage(f"fitting the n-gram teacher (token 1-3-grams, {how}) on {len(train_ids):,} training reviews")
    weighting = "balanced" if t.class_weight == "balanced" else None   # as scikit-learn names it
    limit = fit_limit(config, model.num_labels)
    fit = score.fit(train_ids, train_labels, class_weight=weighting, limit=limit)
    source = "" if fit.form == "lr" else " (Wang & Manning 2012)"
    balanced = ", classes balanced" if weighting else ""
    report: dict[str, Any] = {"model": f"{score.form_phrase} over hashed token 1-3-grams{balanced}{source}",
                              "buckets": score.buckets, "in_logits": bool(config.model.ngram_buckets),
                              "class_weight": t.class_weight, **fit.report()}
    if val_ids:
        report["validation_accuracy"] = float((score.logits(val_ids).argmax(1) == np.asarray(val_labels)).mean())
    cross_fitted = None
    if t.ngram_residual:
        cb.on_stage(f"cross-fitting the n-gram teacher over {RESIDUAL_FOLDS} folds")
        cross_fitted = torch.from_numpy(cross_fitted_logits(train_ids, train_labels, score.buckets, model.num_labels,
                                                            t.seed, form=fit.form, C=fit.C,
                                                            class_weight=weighting, limit=limit))
        report["cross_fitted_folds"] = RESIDUAL_FOLDS
    report["seconds"] = time.perf_counter() - start
    return Teacher(score, report, cross_fitted)


def cross_fitted_logits(ids: list[list[int]], labels: list[int], buckets: int, num_labels: int,
                        seed: int, *, form: str, C: float, class_weight: str | None = None,
                        limit: FitLimit | None = None) -> np.ndarray:
    """``(len(ids), num_labels)`` float32: each text's unscaled n-gram logits from a score fitted on the
    other folds (:data:`RESIDUAL_FOLDS` seeded random folds), each in ``form`` with ``C`` (the full
    fit's choice, not chosen again per fold), ``class_weight`` (the full fit's) and ``limit``."""
    fold = np.random.default_rng([seed, RESIDUAL_FOLDS]).permutation(len(ids)) % RESIDUAL_FOLDS
    out = np.zeros((len(ids), num_labels), np.float32)
    y = np.asarray(labels)
    for k in range(RESIDUAL_FOLDS):
        inside, outside = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
        score = NgramScore(buckets, num_labels=num_labels)
        score.fit([ids[i] for i in inside], y[inside], form=form, C=C, class_weight=class_weight, limit=limit)
        out[outside] = score.logits([ids[i] for i in outside])
    return out


def distillation(config: Config, data: RunData, tokenizer, teacher: Teacher | None, train_labels: list[int],
                 cb: TrainCallbacks) -> Distillation | None:
    """Label the source's unlabelled reviews (from ``data``, the run's source read once) with the teacher's
    probabilities (``None`` without distillation).

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
                        f"{len(texts):,} unlabelled reviews; lower it")
    cb.on_stage(f"tokenizing {len(texts):,} unlabelled reviews and labelling them with the teacher")
    ids = data.ids(tokenizer, texts, config.data)
    soft = teacher.score.probabilities(ids)                                       # (n_unlabelled, num_labels)
    eps, n, classes = t.label_smoothing, len(train_labels), soft.shape[1]
    hard = F.one_hot(torch.tensor(train_labels, dtype=torch.long), classes).float() * (1 - eps) + eps / classes
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


def residual_offset(teacher: Teacher | None, config: Config, index: torch.Tensor, num_labelled: int,
                    device: torch.device) -> torch.Tensor | float:
    """What the training logits add for the n-gram score: nothing (0.0) unless ``ngram_residual``;
    then ``(batch, num_labels)``, the cross-fitted logits times ``ngram_scale`` (0 for unlabelled
    reviews, whose distillation target is the score itself)."""
    if teacher is None or teacher.cross_fitted is None:
        return 0.0
    labelled = index < num_labelled
    offset = torch.zeros(len(index), teacher.cross_fitted.shape[1])
    offset[labelled] = teacher.cross_fitted[index[labelled]] * config.model.ngram_scale
    return offset.to(device)


def loss_function(config: Config, distill: Distillation | None, train_labels: torch.Tensor, index: torch.Tensor,
                  device: torch.device, class_weights: torch.Tensor | None = None):
    """The loss of a batch's ``(batch, num_classes)`` logits for the reviews ``index`` names: cross-entropy
    with label smoothing; with distillation, the weighted cross-entropy against each review's target
    distribution (labelled or the teacher's; Hinton et al. 2015 with temperature 1).

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


def teacher_report(teacher: Teacher | None, distill: Distillation | None) -> dict[str, Any] | None:
    """``metrics.json``'s ``"teacher"``: the fit's report plus distillation's, or ``None`` without a teacher."""
    if teacher is None:
        return None
    return {**teacher.report, **(distill.report if distill is not None else {})}

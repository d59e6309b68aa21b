"""A training run's fit of the n-gram score on the training split: the model's own score, or a stand-alone one.

With ``[model] ngram_buckets`` > 0 or ``[training] distill_reviews`` > 0, a run first fits the n-gram score
(:class:`~.estimator.NgramEstimator`: NB-LR or logistic regression over hashed token 1-3-grams, as ``[model]
ngram_fit`` says or cross-validation on the training split picks; seconds to a minute) on the training split:
the model's own score, or a stand-alone one of :data:`STANDALONE_BUCKETS` buckets that distillation alone
reads (``training/distill.py``). Every rank fits it itself, and a resumed run fits it again: the choice and the
fit are deterministic, so the result equals the score saved with the weights. With ``[training]
ngram_residual`` the fit also gives each training text's cross-fitted logits (``crossfit.py``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..config import Config
from .crossfit import RESIDUAL_FOLDS, residual_logits
from .estimator import NgramEstimator
from .features import ngram_features, weighted_rows
from .forms import form_phrase
from .memory import fit_limit
from .score import NgramScore

STANDALONE_BUCKETS = 1 << 22   # buckets of a score that distillation alone reads ([model] ngram_buckets 0)
# ``cache(key, make)``: the estimator a fit of ``key`` (:func:`fit_key`) made earlier in the run, else ``make()``
FitCache = Callable[[str, Callable[[], NgramEstimator]], NgramEstimator]


@dataclass
class FittedScore:
    """The n-gram score fitted on a run's training split.

    Attributes:
        score: the fitted :class:`~.score.NgramScore` (the model's own, or stand-alone).
        report: what ``metrics.json``'s ``"ngram_score"`` says of it (``report.py``).
        cross_fitted: with ``ngram_residual``, ``(num_labelled, num_labels)`` float32: each training
            text's unscaled logits from the score fitted on the other folds; else ``None``.
    """

    score: NgramScore
    report: dict[str, Any]
    cross_fitted: torch.Tensor | None = None

    def residual_offset(self, index: torch.Tensor, num_labelled: int, scale: float,
                        device: torch.device) -> torch.Tensor | float:
        """What the encoder's training logits add for the score: nothing (0.0) without cross-fitted logits;
        else ``(batch, num_labels)``, the cross-fitted logits of the reviews ``index`` names times ``scale``
        (``[model] ngram_scale``; 0 for unlabelled reviews, from ``num_labelled`` on, whose distillation target
        is the score itself)."""
        if self.cross_fitted is None:
            return 0.0
        labelled = index < num_labelled
        offset = torch.zeros(len(index), self.cross_fitted.shape[1])
        offset[labelled] = self.cross_fitted[index[labelled]] * scale
        return offset.to(device)


def check_fit_size(config: Config, num_labels: int) -> None:
    """Refuse, before the model is built, a run whose n-gram score would hold more weights than
    ``[training] ngram_fit_gb`` allows: ``(buckets + 1) x classes`` float32, a few copies at once
    (:func:`~.memory.fit_bytes`); the fit checks again once the texts' n-grams are known.

    Raises:
        DataError: one line naming the size, the limit, and the settings that change it.
    """
    limit = fit_limit(config, num_labels)
    if limit is not None:
        limit.check(config.model.ngram_buckets or STANDALONE_BUCKETS, num_labels)


def rows_digest(x, labels) -> str:
    """A SHA-256 digest of the binarised n-gram rows ``x`` (scipy CSR, before any TF-IDF weighting; their shape
    names the buckets) and their labels: computed once per set of rows, and joined with each fit's settings by
    :func:`fit_key`."""
    h = hashlib.sha256(repr(x.shape).encode())
    for part in (x.indptr, x.indices, np.asarray(labels)):
        h.update(np.ascontiguousarray(part).tobytes())
    return h.hexdigest()


def fit_key(rows: str, form: str, C: float | None, class_weight: str | None, weighting: str = "binary",
            min_df: int = 1, fit_intercept: bool = True) -> str:
    """What a fit depends on: the rows and labels (``rows``, :func:`rows_digest`), the form, C, class weighting and
    the rows' weighting (``[model] ngram_weighting``: binarised or TF-IDF; ``ngram_min_df``) and the intercept.
    Two fits with the same key give the same estimator (the fits are deterministic), so the search's n-gram stage
    hands its winner's fit to the encoder trials that read the same rows (issue 54: work done once)."""
    return hashlib.sha256(repr((rows, form, C, class_weight, weighting, min_df, fit_intercept)).encode()).hexdigest()


def fit_ngram_score(config: Config, score: NgramScore | None, num_labels: int, train_ids: Sequence[Sequence[int]],
                    train_labels: Sequence[int], val_ids: Sequence[Sequence[int]], val_labels: Sequence[int],
                    on_stage: Callable[[str], None] = lambda message: None,
                    cache: FitCache | None = None) -> FittedScore | None:
    """Fit the n-gram score on the training split: ``score`` (the model's own) when given, else a stand-alone
    one of :data:`STANDALONE_BUCKETS` buckets when the run distils.

    The report (``metrics.json``'s ``"ngram_score"``) names the form fitted, its C and how they were chosen,
    with each candidate's cross-validated accuracy when cross-validation chose
    (:meth:`~.estimator.NgramEstimator.report`). With ``[training] class_weight = "balanced"`` the fits weigh
    the classes as the encoder's loss does (scikit-learn's ``class_weight``).

    Args:
        config: the run's config.
        score: the model's n-gram score, or ``None`` when it has none.
        num_labels: classes.
        train_ids, train_labels: the training texts' token ids (as the model reads them) and label ids.
        val_ids, val_labels: the validation texts', for the report's ``validation_accuracy`` (may be empty).
        on_stage: called with a line naming each stage (fit, cross-fit) before it starts.
        cache: the run's fits by :func:`fit_key` (``None``: fit anew).

    Returns:
        The :class:`FittedScore`, or ``None`` when the run has neither an n-gram score nor distillation.

    Raises:
        DataError: fewer than two classes among the labels, a label id out of range, or a fit above
            ``[training] ngram_fit_gb``.
    """
    t = config.training
    if not (config.model.ngram_buckets or t.distill_reviews):
        return None
    start = time.perf_counter()
    if score is None:
        score = NgramScore(STANDALONE_BUCKETS, num_labels=num_labels, max_n=config.model.ngram_max_n,
                           weighting=config.model.ngram_weighting)
    form = config.model.ngram_fit
    how = "choosing its form by cross-validation" if form == "auto" else form.upper() + (
        f", C {config.model.ngram_c:g}" if config.model.ngram_c else "")
    what = (f"the n-gram score (token 1-{score.max_n}-grams{score.pieces_phrase()}, {how}) on {len(train_ids):,} "
            "training reviews")
    fitted, x, idf = _fitted(config, score, num_labels, train_ids, train_labels, cache,
                             lambda made: on_stage(("fitting " if made else "the search's fit of ") + what))
    score.load_fit(fitted.coef_, fitted.intercept_, fitted.form_, idf)
    score.keep_half_precision()   # what the checkpoint stores in two bytes a weight, bit for bit
    report = _report(config, score, fitted)
    if len(val_ids):
        report.update(_validation_report(score.logits(val_ids), np.asarray(val_labels)))
    cross_fitted = None
    if t.ngram_residual:
        on_stage(f"cross-fitting the n-gram score over {RESIDUAL_FOLDS} folds")
        cross_fitted = torch.from_numpy(residual_logits(
            x, train_labels, num_labels, t.seed, form=fitted.form_, C=fitted.C_,
            class_weight=fit_weighting(t.class_weight, train_labels), limit=fit_limit(config, num_labels)))
        report["cross_fitted_folds"] = RESIDUAL_FOLDS
    report["seconds"] = time.perf_counter() - start
    return FittedScore(score, report, cross_fitted)


def _fitted(config: Config, score: NgramScore, num_labels: int, train_ids: Sequence[Sequence[int]],
            train_labels: Sequence[int], cache: FitCache | None,
            say: Callable[[bool], None]) -> tuple[NgramEstimator, Any, np.ndarray | None]:
    """``(estimator, x, idf)``: the fit of ``score``'s features of the training texts (``x``, TF-IDF rows when
    ``score`` is so weighted, with their ``idf``; else binarised and ``None``), taken from ``cache`` when a fit with
    the same :func:`fit_key` was made earlier in the run. ``say(True)`` is called before a fit, ``say(False)``
    when the earlier one is taken.

    Raises:
        DataError: as :func:`fit_ngram_score`.
    """
    weighting = fit_weighting(config.training.class_weight, train_labels)
    x = ngram_features(train_ids, score.buckets, max_n=score.max_n, pieces=score.pieces, tf=score.term_frequency)
    pinned_c, min_df = config.model.ngram_c or None, config.model.ngram_min_df   # ngram_c 0: default or CV's C
    key = fit_key(rows_digest(x, train_labels), config.model.ngram_fit, pinned_c, weighting,
                  score.weighting, min_df, config.model.ngram_intercept) if cache else ""
    (x,), idf = weighted_rows(x, score.weighting, min_df)

    made = []

    def make() -> NgramEstimator:
        made.append(True)
        say(True)
        return NgramEstimator(num_labels, config.model.ngram_fit, pinned_c, class_weight=weighting,
                              limit=fit_limit(config, num_labels),
                              fit_intercept=config.model.ngram_intercept).fit(x, train_labels)

    fitted = cache(key, make) if cache else make()
    if not made:
        say(False)
    return fitted, x, idf


def fit_weighting(class_weight: str, labels) -> str | None:
    """The fits' ``class_weight`` as scikit-learn names it: ``"balanced"`` with ``[training] class_weight =
    "balanced"``, else ``None``; ``None`` with several labels per text (``labels`` a 0/1 matrix), whose thresholds
    per label do the balancing: on GoEmotions' dev a balanced LR scored 0.453 macro-F1 against 0.462 unweighted,
    and a balanced fit of a rare label converges slowly (NB-LR C 1: minutes)."""
    if np.ndim(labels) == 2:
        return None
    return "balanced" if class_weight == "balanced" else None


def _validation_report(logits: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """The score alone on validation: ``validation_accuracy``; with several labels per text (``y`` a 0/1
    matrix) ``validation_micro_f1`` at probability 0.5 (logit 0) instead."""
    if y.ndim == 2:
        predicted, truth = logits > 0, y.astype(bool)
        tp = float((predicted & truth).sum())
        return {"validation_micro_f1": 2 * tp / max(1.0, float(predicted.sum() + truth.sum()))}
    return {"validation_accuracy": float((logits.argmax(1) == y).mean())}


def _report(config: Config, score: NgramScore, fitted: NgramEstimator) -> dict[str, Any]:
    """The fit's part of ``metrics.json``'s ``"ngram_score"``: ``model`` (in words), ``form``, ``buckets``,
    ``in_logits``, ``class_weight``, ``C``, ``chosen_by`` and cross-validation's record."""
    source = "" if fitted.form_ == "lr" else " (Wang & Manning 2012)"
    balanced = ", classes balanced" if fitted.class_weight else ""
    return {"model": f"{form_phrase(fitted.form_, score.num_labels, fitted.multi_label_)} over hashed token "
                     f"1-{score.max_n}-grams{score.pieces_phrase()}"
                     f"{balanced}{source}",
            "buckets": score.buckets, "in_logits": bool(config.model.ngram_buckets),
            "class_weight": config.training.class_weight, **fitted.report()}

"""Out-of-fold class probabilities for every labelled row: the n-gram score's two forms cross-fitted and averaged.

Confident learning needs, for each row, class probabilities from a model that never saw that row's
label (Northcutt, Jiang & Chuang 2021, "Confident Learning: Estimating Uncertainty in Dataset Labels",
JAIR 70, section 3; cleanlab's docs, "out-of-sample predicted probabilities"). This module gives them, the
cross-fitting itself being the n-gram package's (``ngram/crossfit.py``, shared with training's residual scores):

1. the texts become token ids with :data:`AUDIT_DATA` (words and punctuation, lowercased; a
   vocabulary of the words seen at least twice, since a word seen once cannot carry a label from one
   fold to another), and hashed, binarised token 1-3-grams (:func:`~sentiment_cli.ngram.features.ngram_features`);
2. the C of each of the score's two forms, NB-LR and logistic regression, is chosen once on all rows
   by :func:`~sentiment_cli.ngram.selection.select_forms` (3-fold cross-validation on up to 10,000 texts);
3. the rows are split into ``folds`` stratified folds (scikit-learn's ``StratifiedKFold``, seeded),
   and for each fold both forms are fitted on the others (:func:`~sentiment_cli.ngram.crossfit.cross_fit`)
   and give the held-out rows' logits;
4. when the largest class outnumbers the smallest by more than 5 to 1 (the rule ``train`` balances its loss
   by, :data:`~sentiment_cli.data.labels.IMBALANCE_RATIO`), every fit weighs the classes as balanced
   (scikit-learn's ``class_weight="balanced"``). Unweighted, a rare class's prior shrinks its probabilities
   on its own rows, and confident learning flags them: on TREC-6's own labels, 24 of ABBR's 84 questions
   (29%) unweighted, 6 balanced, with about as many flags in all (docs/audit.md, "A rare class keeps its rows");
5. each form's out-of-fold logits are calibrated by a temperature and the two averaged, and a last
   temperature is fitted on the average (Guo et al. 2017; cleanlab's per-class thresholds are averages
   of these probabilities, so over-confident ones flag too few rows). The average is again one linear
   score of the n-grams, so a row's logits still split exactly over its tokens (``audit/reasons.py``).

Why the n-gram score and no encoder: it is fitted in seconds (IMDB's 22,500-row folds: well under a
minute each on one core), and an encoder per fold costs minutes to half an hour each; the averaged two
forms and 10 folds were chosen on flipped labels of the dev splits of Subj and TREC-6 (docs/audit.md has
the measurements).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..config import DataConfig
from ..data.tokenizer import build_tokenizer, encode_texts, resolved_kind
from ..errors import DataError
from ..evaluation.calibration import fit_temperature
from ..inference.multilabel import sigmoid
from ..inference.probabilities import softmax
from ..data.labels import IMBALANCE_RATIO, imbalance
from ..ngram.crossfit import cross_fit as cross_fit_forms
from ..ngram.crossfit import full_logits
from ..ngram.features import MAX_N, ngram_features
from ..ngram.forms import form_phrase
from ..ngram.memory import FIT_GB, FitLimit, buckets_within
from ..ngram.score import NgramScore
from ..ngram.selection import Selection, select_forms
from ..wording import plural
from .callbacks import AuditCallbacks

# The token ids the audit's n-gram score reads (1,024 tokens keep 98% of IMDB's reviews whole): words, or
# characters for text written without spaces (data/units.py; where the default reads subwords too: encode).
AUDIT_DATA = DataConfig(max_length=1024, truncation="head_tail", vocab_size=1_000_000, min_frequency=2,
                        pre_tokenizer="punctuation", tokenizer="auto")
FOLDS = 10   # 10 folds against 5: a better F1 on the dev splits of Subj and TREC-6 (docs/audit.md)
SEED = 0
MAX_BUCKETS = 1 << 22     # as the default preset's n-gram score
MIN_BUCKETS = 1 << 16


@dataclass
class CrossFit:
    """The out-of-fold logits of every row and each fold's fitted score.

    Attributes:
        logits: ``(n, num_labels)`` float32 unscaled out-of-fold logits (``[0, margin]`` with two classes).
        fold: ``(n,)`` int64: the fold each row was held out in.
        weights: per fold, the averaged score's weights as a scipy CSC matrix ``(buckets + 1, k)``
            (``k`` = 1 with two classes, else ``num_labels``; see :func:`~sentiment_cli.ngram.crossfit.cross_fit`).
        intercepts: per fold, ``(k,)`` float64.
        selection: cross-validation's choice among the forms and C (:func:`~sentiment_cli.ngram.selection.select_fit`),
            with every candidate's accuracy.
        C: the C of each form averaged (:func:`~sentiment_cli.ngram.selection.select_forms`).
        scale: each form's weight in the average, ``1 / (forms * its temperature)``.
        temperature: fitted on ``logits`` (the average) and the given labels.
        buckets: hashed n-gram buckets.
        num_labels: classes.
        seconds: wall time of the choice and the folds.
        class_weight: every fit's: ``None``, or ``"balanced"`` for imbalanced classes (:func:`class_weighting`).
        notes: what scikit-learn warned of during the fits, each in one line (:class:`Warned`).
        temperatures: multi-label (``audit/multilabel.py``): ``(num_labels,)`` per-label temperatures of the
            sigmoids, ``logits`` one column per label, ``weights`` / ``intercepts`` empty; ``None``: single-label.
    """

    logits: np.ndarray
    fold: np.ndarray
    weights: list
    intercepts: list[np.ndarray]
    selection: Selection
    C: dict[str, float]
    scale: dict[str, float]
    temperature: float
    buckets: int
    num_labels: int
    seconds: float
    class_weight: str | None = None
    notes: tuple[str, ...] = ()
    temperatures: np.ndarray | None = None

    @property
    def multi_label(self) -> bool:
        """One sigmoid per label (several labels per text), not a softmax over classes."""
        return self.temperatures is not None

    @property
    def model_phrase(self) -> str:
        """The cross-fitted model in words (the audit's ``method.model``): its forms, their C, the features."""
        if self.multi_label:
            forms = " and ".join(f"{'NB-LR' if form == 'nb-lr' else 'logistic regression'} (C {C:g})"
                                 for form, C in self.C.items())
            return (f"the average of {forms}, one binary fit per label, over hashed token 1-3-grams, each "
                    "calibrated per label")
        forms = " and ".join(f"{form_phrase(form, self.num_labels)} (C {C:g})" for form, C in self.C.items())
        weighted = ", classes balanced" if self.class_weight == "balanced" else ""
        return f"the average of {forms} over hashed token 1-3-grams{weighted}, each calibrated"

    @property
    def folds(self) -> int:
        """The number of folds fitted (k)."""
        return len(self.weights)

    def probabilities(self) -> np.ndarray:
        """``(n, num_labels)`` float64: ``softmax(logits / temperature)``, each row summing to 1; multi-label:
        ``sigmoid(logits / temperatures)`` per label (``inference/multilabel.py``)."""
        if self.multi_label:
            return sigmoid(self.logits, self.temperatures)
        return softmax(self.logits, self.temperature)

    def score(self, fold: int) -> NgramScore:
        """Fold ``fold``'s fitted score as the model's own :class:`~sentiment_cli.ngram.score.NgramScore`
        module (scale 1), so that its ``token_logits`` split a held-out row's logits over its tokens."""
        score = NgramScore(self.buckets, num_labels=self.num_labels)
        score.load_fit(self.weights[fold].toarray(), self.intercepts[fold])
        return score


def check_folds(labels: Sequence[int], label_names: Sequence[str], folds: int, where: str) -> None:
    """Stratified ``folds``-fold cross-fitting needs two classes and ``folds`` rows of every class present.

    Raises:
        DataError: one class only, or the first class with fewer rows than folds (the message suggests
            a ``--folds`` that works, when one does).
    """
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=len(label_names))
    present = np.flatnonzero(counts)
    if len(present) < 2:
        only = label_names[present[0]] if len(present) else "none"
        raise DataError(f"{where}: one class only ({only!r}); an audit compares each row with the other classes, "
                        "so it needs labelled rows of at least two")
    rare = [int(c) for c in present if counts[c] < folds]
    if rare:
        c = min(rare, key=lambda i: counts[i])
        fix = f"lower --folds to {counts[c]}, or " if counts[c] >= 2 else ""
        raise DataError(f"{where}: class {label_names[c]!r} has {plural(counts[c], 'row')}, "
                        f"too few for {folds} folds (each fold holds out rows of every class); {fix}add rows of it "
                        "or drop the class")


def class_weighting(labels: Sequence[int]) -> str | None:
    """``"balanced"`` when the largest class present outnumbers the smallest by more than
    :data:`~sentiment_cli.data.labels.IMBALANCE_RATIO` to 1, as ``train`` decides its loss's weights;
    else ``None``."""
    counts = np.bincount(np.asarray(labels, dtype=np.int64))
    return "balanced" if imbalance(counts[counts > 0].tolist()) > IMBALANCE_RATIO else None


def encode(texts: Sequence[str]):
    """``(tokenizer, ids)``: a vocabulary built on ``texts`` (labels unused) with :data:`AUDIT_DATA`, and
    each text's token ids. Text the default would read as subwords is read as characters: a linear score reads
    those better (Wisesight's dev, LR: character 1-4-grams 71.4%, Unigram pieces' 1-3-grams 69.8%)."""
    kind = "word" if resolved_kind(texts, AUDIT_DATA) == "word" else "char"
    data = dataclasses.replace(AUDIT_DATA, tokenizer=kind)
    tokenizer = build_tokenizer(texts, data, length=len(texts))
    return tokenizer, encode_texts(tokenizer, texts, data)


def bucket_count(ids: Sequence[Sequence[int]]) -> int:
    """Hashed buckets for these texts: the next power of two above 4x their n-gram occurrences, in
    [:data:`MIN_BUCKETS`, :data:`MAX_BUCKETS`] (the default's rule, ``training/auto.py``)."""
    occurrences = MAX_N * sum(len(i) for i in ids)
    return min(MAX_BUCKETS, 1 << max(16, math.ceil(math.log2(max(1, 4 * occurrences)))))


def audit_buckets(ids: Sequence[Sequence[int]], num_labels: int, limit_gb: float) -> int:
    """:func:`bucket_count`, made smaller (down to :data:`MIN_BUCKETS`) when the weights of that many buckets
    for ``num_labels`` classes would not fit ``limit_gb`` GB (:func:`~sentiment_cli.ngram.memory.buckets_within`)."""
    return min(bucket_count(ids), max(MIN_BUCKETS, buckets_within(num_labels, limit_gb)))


class Warned:
    """Warnings raised inside :meth:`catch` (scikit-learn's, cleanlab's), counted by kind, not printed: Python
    prints them with the library's file paths, and the user cannot act on most. :meth:`notes` says them in words."""

    def __init__(self):
        self.counts: dict[str, int] = {}

    @contextlib.contextmanager
    def catch(self):
        """Within the block, every warning is counted here instead of printed."""
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = self._show
            yield self

    def _show(self, message, category, *args, **kwargs) -> None:
        self.counts[category.__name__] = self.counts.get(category.__name__, 0) + 1

    def notes(self) -> tuple[str, ...]:
        """One line per kind of warning, in words."""
        out = []
        for kind, n in self.counts.items():
            if kind == "ConvergenceWarning":
                out.append(f"{plural(n, 'fit')} of logistic regression stopped at the iteration limit before "
                           "converging (scikit-learn's ConvergenceWarning); their weights are used as they are")
            else:
                out.append(f"{plural(n, 'warning')} from the libraries during the audit ({kind}), not shown")
        return tuple(out)


def cross_fit(ids: Sequence[Sequence[int]], labels: Sequence[int], num_labels: int, folds: int = FOLDS,
              seed: int = SEED, callbacks: AuditCallbacks | None = None, fit_gb: float = FIT_GB) -> CrossFit:
    """Out-of-fold logits of the n-gram score for every row (module docstring), within ``fit_gb`` GB.

    Bounded before it allocates: the buckets shrink (:func:`audit_buckets`) so that the weights fit ``fit_gb``,
    and a fit that still would not (too many classes, or logistic regression's copies for too many n-gram
    columns) is refused. Warnings are not printed (:class:`Warned`); :attr:`CrossFit.notes` says them in words.

    Raises:
        DataError: the fit would need more than ``fit_gb`` GB; the message names ``--fit-gb``.
    """
    warned = Warned()
    with warned.catch():
        cross = _cross_fit(ids, labels, num_labels, folds, seed, callbacks, fit_gb)
    cross.notes = warned.notes()
    return cross


def _cross_fit(ids: Sequence[Sequence[int]], labels: Sequence[int], num_labels: int, folds: int = FOLDS,
               seed: int = SEED, callbacks: AuditCallbacks | None = None, fit_gb: float = FIT_GB) -> CrossFit:
    """Out-of-fold logits of the n-gram score for every row (module docstring).

    Both forms of the score, NB-LR and logistic regression, each at the C that cross-validation scored best,
    are fitted on every fold, with balanced class weights when :func:`class_weighting` says so; each form's
    out-of-fold logits are divided by a temperature fitted on them, and the two averaged (one linear score,
    so the explanation stays exact); a last temperature is fitted on the
    average.

    Args:
        ids: each text's token ids (:func:`encode`).
        labels: ``(n,)`` given label ids in ``[0, num_labels)``; every class present has at least ``folds``
            rows (:func:`check_folds`).
        num_labels: classes.
        folds: stratified folds, at least 2.
        seed: the folds' shuffle.
        callbacks: progress: ``on_stage`` for the choice of C, ``on_fold_start`` / ``on_fold_end`` per fold.

    Returns:
        The :class:`CrossFit`. Work is linear in the rows and their tokens: the choice reads at most
        10,000 texts, and each fold two fits on the other folds.
    """
    from sklearn.model_selection import StratifiedKFold

    cb = callbacks or AuditCallbacks()
    start = time.perf_counter()
    y = np.asarray(labels, dtype=np.int64)
    buckets = audit_buckets(ids, num_labels, fit_gb)
    limit = FitLimit(fit_gb, "--fit-gb N", "audit fewer classes" if num_labels > 2 else "")
    limit.check(buckets, num_labels)
    x = ngram_features(ids, buckets)
    limit.check(buckets, num_labels, len(np.unique(x.indices)))
    cb.on_stage(f"choosing C for NB-LR and logistic regression by 3-fold cross-validation on "
                f"{min(len(y), 10_000):,} rows")
    weighting = class_weighting(y)
    selection, forms = select_forms(x, y, num_labels, weighting)
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    fits = cross_fit_forms(x, y, splitter.split(np.zeros(len(y)), y), forms, num_labels, class_weight=weighting,
                           on_fold_start=lambda f, inside, outside: cb.on_fold_start(f + 1, folds, inside, outside),
                           on_fold_end=lambda f, outside: cb.on_fold_end(f + 1, outside))
    scale = {form: 1.0 / (len(forms) * fit_temperature(full_logits(z, num_labels), y))
             for form, z in fits.scores.items()}
    average = sum(scale[form] * z for form, z in fits.scores.items()).astype(np.float32)
    weights = [sum(scale[form] * _sparse(e.coef_) for form, e in per.items()).tocsc() for per in fits.fits]
    intercepts = [sum(scale[form] * e.intercept_ for form, e in per.items()) for per in fits.fits]
    full = full_logits(average, num_labels)
    return CrossFit(full, fits.fold, weights, intercepts, selection, forms, scale, fit_temperature(full, y),
                    buckets, num_labels, time.perf_counter() - start, weighting)


def _sparse(w: np.ndarray):
    """A fold's weights, mostly zero (an n-gram absent from the fold's texts has none), as a CSC matrix."""
    import scipy.sparse as sp

    return sp.csc_matrix(w)

"""The n-gram score's fit as a scikit-learn-style estimator: the form and C pinned, or chosen by cross-validation.

:class:`NgramEstimator` keeps scikit-learn's contract (the "Developing scikit-learn estimators" guide):
``__init__`` stores its parameters as given, :meth:`~NgramEstimator.fit` checks them and returns the
estimator, and what it learned ends in ``_`` (``coef_``, ``intercept_``, ``form_``, ``C_``). It reads the
binarised hashed n-gram counts of :func:`~.features.ngram_features`; :class:`~.score.NgramScore` takes its
weights into the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .forms import DEFAULT_C, FIT_FORMS, fit_columns, label_ids, predicted
from .memory import FitLimit
from .selection import Selection, select_fit

_PARAMS = ("num_labels", "form", "C", "class_weight", "limit", "fit_intercept")


class NgramEstimator:
    """A linear model over binarised hashed n-gram counts in one of the two forms (``forms.py``).

    Args:
        num_labels: classes, 2 or more.
        form: ``"auto"`` (:func:`~.selection.select_fit` chooses the form and C on the texts fitted), ``"nb-lr"``
            or ``"lr"``.
        C: inverse L2 strength of a pinned form; ``None``: the form's :data:`~.forms.DEFAULT_C`. Ignored with
            ``"auto"``.
        class_weight: ``None``, or ``"balanced"``: each class's texts weigh inversely to its count
            (scikit-learn's ``class_weight``, :func:`~.forms.fit_columns`), as ``[training] class_weight``
            weighs the encoder's loss.
        limit: the memory the fit may take (:class:`~.memory.FitLimit`), checked once the texts' n-gram columns
            are known, before scikit-learn allocates; ``None``: unbounded.

    Attributes:
        coef_: ``(n_features, k)`` float32 weights, row 0 ("no n-gram") zero; ``k`` = 1 with two classes (the
            log-odds of the second), else ``num_labels``.
        intercept_: ``(k,)`` float64.
        form_: the form fitted, ``"nb-lr"`` or ``"lr"``.
        C_: its inverse L2 strength.
        chosen_by_: ``"cross-validation"``, ``"config"`` (a pinned form at its default C) or ``"caller"`` (a
            pinned form at a given C).
        selection_: cross-validation's :class:`~.selection.Selection` (every candidate's accuracy), or ``None``.
        multi_label_: whether ``y`` was a 0/1 matrix of several labels per text (one binary fit per label).
    """

    def __init__(self, num_labels: int = 2, form: str = "auto", C: float | None = None,
                 class_weight: str | None = None, limit: FitLimit | None = None, fit_intercept: bool = True):
        self.num_labels = num_labels
        self.fit_intercept = fit_intercept
        self.form = form
        self.C = C
        self.class_weight = class_weight
        self.limit = limit

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's parameters, as scikit-learn's ``get_params``."""
        return {name: getattr(self, name) for name in _PARAMS}

    def set_params(self, **params: Any) -> "NgramEstimator":
        """Set constructor parameters, as scikit-learn's ``set_params``.

        Raises:
            ValueError: a name that is no parameter.
        """
        for name, value in params.items():
            if name not in _PARAMS:
                raise ValueError(f"unknown parameter {name!r} of NgramEstimator; known: {', '.join(_PARAMS)}")
            setattr(self, name, value)
        return self

    def fit(self, x, y: Sequence[int]) -> "NgramEstimator":
        """Fit on features ``x`` and labels ``y``. Deterministic, so every DDP rank and a resumed run fit alike.

        Args:
            x: ``(n_texts, buckets + 1)`` scipy CSR binarised counts (:func:`~.features.ngram_features`).
            y: ``(n_texts,)`` label ids in ``[0, num_labels)``.

        Returns:
            ``self``, fitted.

        Raises:
            ValueError: ``num_labels`` below 2, or an unknown ``form``.
            DataError: fewer than two classes among the labels, an id out of range, or a fit above ``limit``.
        """
        if self.num_labels < 2:
            raise ValueError(f"the n-gram score needs at least two classes, got num_labels {self.num_labels}")
        if self.form not in ("auto", *FIT_FORMS):
            raise ValueError(f"unknown n-gram fit {self.form!r}; known: auto, {', '.join(FIT_FORMS)}")
        y = label_ids(y, self.num_labels)
        self.multi_label_ = y.ndim == 2   # a (n_texts, num_labels) 0/1 matrix: one binary fit per label
        if self.limit is not None:
            self.limit.check(x.shape[1] - 1, self.num_labels, len(np.unique(x.indices)), self.form != "nb-lr",
                             self.multi_label_)
        self.selection_: Selection | None = None
        if self.form == "auto":
            self.selection_ = select_fit(x, y, self.num_labels, class_weight=self.class_weight)
            self.form_, self.C_, self.chosen_by_ = self.selection_.form, self.selection_.C, "cross-validation"
        else:
            pinned = self.C is None
            self.form_, self.C_ = self.form, DEFAULT_C[self.form] if pinned else self.C
            self.chosen_by_ = "config" if pinned else "caller"
        self.coef_, self.intercept_ = fit_columns(x, y, self.num_labels, self.form_, self.C_, self.class_weight,
                                                  self.fit_intercept)
        self.coef_[0] = 0.0   # "no n-gram" is never a feature
        return self

    def decision_function(self, x) -> np.ndarray:
        """``(n_texts, k)`` float64 scores ``x @ coef_ + intercept_`` (``k`` as :attr:`coef_`)."""
        return x @ self.coef_ + self.intercept_

    def margins(self, x) -> np.ndarray:
        """``(n_texts, k)`` float32 scores as :meth:`~.score.NgramScore.margins` computes them right after the fit:
        with two classes the intercept is added in float32 (NumPy's rule for a Python float), with more in
        float64, then rounded."""
        if self.coef_.shape[1] == 1:
            return (x @ self.coef_[:, 0] + float(self.intercept_[0])).astype(np.float32)[:, None]
        return (x @ self.coef_ + self.intercept_).astype(np.float32)

    def predict(self, x) -> np.ndarray:
        """``(n_texts,)`` label ids: the sign of the one score with two classes, the largest score with more."""
        return predicted(self.decision_function(x))

    def report(self) -> dict[str, Any]:
        """What ``metrics.json``'s ``"ngram_score"`` says of the fit: ``form``, ``C``, ``chosen_by``, and with
        cross-validation ``cv_folds``, ``cv_texts`` and ``cv_accuracy``."""
        out = {"form": self.form_, "C": self.C_, "chosen_by": self.chosen_by_}
        if self.selection_ is not None:
            s = self.selection_
            out.update(cv_folds=s.cv_folds, cv_texts=s.cv_texts, cv_accuracy=s.cv_accuracy)
        return out

"""The memory a fit of the n-gram score takes, bounded before anything is allocated.

The weights are ``(buckets + 1, k)`` float32 (``k`` = 1 with two classes, else the classes), of which a few
copies are alive during a fit; logistic regression adds L-BFGS's vectors over the columns the texts fill.
:class:`FitLimit` refuses a fit above ``[training] ngram_fit_gb`` (``sentiment audit --fit-gb``) with a message
naming what to change; :func:`fit_limit` is a run's, worded for its config.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import NGRAM_FIT_GB, Config
from ..errors import DataError

FIT_GB = NGRAM_FIT_GB         # the most memory a fit may take, in GB: [training] ngram_fit_gb's default, audit's
DENSE_COPIES = 3              # (buckets + 1, k) float32 matrices alive at once: the score's, the fit's, load_fit's
LBFGS_VECTORS = 28            # float64 vectors of the parameters L-BFGS keeps: 2m + 5 (scipy, m = 10) + 3 (sklearn)


def fit_bytes(buckets: int, num_labels: int, seen: int = 0, lr: bool = True, multi_label: bool = False) -> int:
    """The bytes a fit of the n-gram score takes at its peak, estimated before anything is allocated.

    The weights are ``(buckets + 1, k)`` float32, ``k`` = 1 with two classes, else ``num_labels``, of which
    :data:`DENSE_COPIES` are alive at once; logistic regression (``lr``: the form may be ``"lr"``) adds
    L-BFGS's :data:`LBFGS_VECTORS` float64 vectors of its parameters, one per class and column of the ``seen``
    columns that occur in the texts (``(seen + 1) * num_labels`` parameters, 1 class with two). With several
    labels per text (``multi_label``) the fits are binary, one label after another: one label's vectors at a
    time (Reuters' 59 topics over 567,143 columns: 0.13 GB, not 7.5).
    The texts' features themselves are linear in their tokens and not counted.

    Args:
        buckets: hashed buckets.
        num_labels: classes (labels), 2 or more.
        seen: columns that occur in the training texts (0 before they are known).
        lr: whether a logistic regression may be fitted (``ngram_fit`` ``"auto"`` or ``"lr"``).
        multi_label: one binary fit per label (one-vs-rest, :func:`~.forms.fit_columns` on a 0/1 matrix).
    """
    k = 1 if num_labels == 2 else num_labels
    dense = DENSE_COPIES * (buckets + 1) * k * 4
    fitted = 1 if multi_label else k   # the classes one L-BFGS fit holds
    return dense + (LBFGS_VECTORS * 8 * (seen + 1) * fitted if lr and seen else 0)


@dataclass(frozen=True)
class FitLimit:
    """The most memory a fit of the n-gram score may take, and what the refusal tells the user.

    Attributes:
        gb: the limit, in GB (10^9 bytes).
        setting: what raises it, as the message names it.
        instead: what else the user may do, a phrase (e.g. fewer buckets), or empty.
        without_lr: what else, when the weights alone fit and logistic regression's copies do not, or empty.
    """

    gb: float = FIT_GB
    setting: str = "--set training.ngram_fit_gb=N ([training] ngram_fit_gb)"
    instead: str = ""
    without_lr: str = ""

    def check(self, buckets: int, num_labels: int, seen: int = 0, lr: bool = True, multi_label: bool = False) -> None:
        """Refuse a fit that :func:`fit_bytes` puts above :attr:`gb`, before it allocates anything (arguments as
        :func:`fit_bytes`').

        Raises:
            DataError: one line: the size, the limit, :attr:`setting` and :attr:`instead`.
        """
        need = fit_bytes(buckets, num_labels, seen, lr, multi_label)
        if need <= self.gb * 1e9:
            return
        part = f", and logistic regression's working copies for {seen:,} n-gram columns" if lr and seen else ""
        other = [self.instead] if self.instead else []
        if part and self.without_lr and fit_bytes(buckets, num_labels) <= self.gb * 1e9:
            other.append(self.without_lr)
        raise DataError(f"the n-gram score of {buckets:,} buckets x {num_labels:,} classes needs about "
                        f"{need / 1e9:,.1f} GB to fit (its weights{part}), above the limit of {self.gb:g} GB; "
                        f"raise it with {self.setting}" + "".join(f", or {o}" for o in other))


def buckets_within(num_labels: int, limit_gb: float) -> int:
    """The most buckets whose weights alone (:func:`fit_bytes` without logistic regression) fit ``limit_gb``, as a
    power of two (0 when not even one does): what a message suggests."""
    k = 1 if num_labels == 2 else num_labels
    most = int(limit_gb * 1e9) // (DENSE_COPIES * k * 4) - 1
    return 1 << (most.bit_length() - 1) if most >= 1 else 0


def fit_limit(config: Config, num_labels: int) -> FitLimit | None:
    """The memory bound of a run's n-gram fit (``[training] ngram_fit_gb``), with what else to lower in its
    message: the model's ``ngram_buckets``, or distillation for a stand-alone score; ``None`` without a fit."""
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

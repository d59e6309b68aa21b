"""Which rows are likely mislabelled, ranked, and what the noise looks like per class: cleanlab's confident learning.

Given each row's given label and out-of-fold class probabilities (``audit/probabilities.py``), confident
learning (Northcutt, Jiang & Chuang 2021, "Confident Learning: Estimating Uncertainty in Dataset Labels",
JAIR 70) counts the rows confidently of another class than their label (the *confident joint*, with a
per-class threshold: the mean probability of that class among the rows labelled with it), estimates the
joint distribution of given and true labels from it, and flags the rows that two of its rules agree on
(``filter_by="both"``): per class pair, as many rows as that estimate says are wrong, those with the largest
margin of the other class over the given one first (``prune_by_noise_rate``); and per given class, as many
rows as it is estimated to hold errors, those least likely of their given label first (``prune_by_class``).
With two classes the rules flag the same rows. With more, the agreement flagged fewer correct rows: on 5%
flips of TREC-6's training labels (3 seeds, uniform and class-conditional), precision 0.430 → 0.515 and
0.382 → 0.445, F1 0.565 → 0.626 and 0.523 → 0.574, for recall 0.826 → 0.799 and 0.826 → 0.808
(docs/audit.md, "A rare class keeps its rows, and fewer correct rows flagged").
This module calls cleanlab for all of it (``cleanlab.filter.find_label_issues``,
``cleanlab.rank.get_label_quality_scores``, ``cleanlab.count.estimate_joint``; docs at
https://docs.cleanlab.ai) and only shapes the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_PAIRS = 5   # the most confused class pairs a summary lists
FILTER_BY = "both"   # cleanlab's rule for which rows to flag (module docstring)


@dataclass
class LabelIssues:
    """The flagged rows, ranked, and every row's label quality.

    Attributes:
        ranked: ``(m,)`` int64 row indices of the rows flagged as likely label errors, the least likely
            of its given label first (cleanlab's ranking by self-confidence).
        quality: ``(n,)`` float64 label quality of every row in [0, 1]: the probability of its given
            label (cleanlab's ``self_confidence``); low is suspicious.
        suggested: ``(n,)`` int64: each row's most probable class other than its given one.
    """

    ranked: np.ndarray
    quality: np.ndarray
    suggested: np.ndarray


def find_issues(labels: Sequence[int], probabilities: np.ndarray) -> LabelIssues:
    """Rank the likely label errors with cleanlab (module docstring).

    Args:
        labels: ``(n,)`` given label ids in ``[0, num_labels)``, every class present.
        probabilities: ``(n, num_labels)`` out-of-fold probabilities, rows summing to 1.

    Returns:
        The :class:`LabelIssues`.
    """
    from cleanlab.filter import find_label_issues
    from cleanlab.rank import get_label_quality_scores

    y = np.asarray(labels, dtype=np.int64)
    p = np.asarray(probabilities, dtype=np.float64)
    ranked = find_label_issues(y, p, filter_by=FILTER_BY, return_indices_ranked_by="self_confidence", n_jobs=1)
    quality = get_label_quality_scores(y, p, method="self_confidence")
    others = p.copy()
    others[np.arange(len(y)), y] = -1.0
    return LabelIssues(np.asarray(ranked, dtype=np.int64), np.asarray(quality, dtype=np.float64),
                       others.argmax(1).astype(np.int64))


def summary(labels: Sequence[int], probabilities: np.ndarray, issues: LabelIssues,
            label_names: Sequence[str]) -> dict[str, Any]:
    """The estimated noise per class and the most confused class pairs.

    The estimate is cleanlab's ``estimate_joint`` (the calibrated confident joint, Northcutt et al. 2021,
    section 3.1): ``joint[i, j]`` is the share of rows given label ``i`` whose true label is ``j``.

    Args:
        labels: ``(n,)`` given label ids.
        probabilities: ``(n, num_labels)`` out-of-fold probabilities.
        issues: :func:`find_issues`' result for them.
        label_names: the class names, by id.

    Returns:
        ``{"rows", "flagged", "estimated_error_rate", "classes", "pairs"}``: ``classes`` a list of
        ``{"label", "rows", "flagged", "estimated_error_rate"}`` per class (the share of its rows whose
        true label is estimated to be another); ``pairs`` at most :data:`MAX_PAIRS` of
        ``{"given", "likely", "estimated_rows", "flagged"}``, most estimated rows first (pairs estimated
        at under half a row are left out).
    """
    from cleanlab.count import estimate_joint

    y = np.asarray(labels, dtype=np.int64)
    n, k = len(y), len(label_names)
    joint = estimate_joint(y, np.asarray(probabilities, dtype=np.float64))        # (k, k), sums to 1
    rows = np.bincount(y, minlength=k)
    flagged = np.zeros((k, k), np.int64)
    np.add.at(flagged, (y[issues.ranked], issues.suggested[issues.ranked]), 1)
    given_share = joint.sum(1)
    rate = np.where(given_share > 0, 1 - np.diag(joint) / np.maximum(given_share, 1e-12), 0.0)
    classes = [{"label": label_names[c], "rows": int(rows[c]), "flagged": int(flagged[c].sum()),
                "estimated_error_rate": float(rate[c])} for c in range(k)]
    off = [(joint[i, j] * n, i, j) for i in range(k) for j in range(k) if i != j and joint[i, j] * n >= 0.5]
    pairs = [{"given": label_names[i], "likely": label_names[j], "estimated_rows": float(est),
              "flagged": int(flagged[i, j])} for est, i, j in sorted(off, reverse=True)[:MAX_PAIRS]]
    return {"rows": n, "flagged": int(len(issues.ranked)),
            "estimated_error_rate": float(1 - np.trace(joint)), "classes": classes, "pairs": pairs}

"""The warnings an audit's result carries: when its flags say more about the out-of-fold model than the data.

Two cases, decided here from the summary (:func:`~sentiment_cli.audit.label_issues.summary`) so that the table
and ``audit --json`` say the same: more than :data:`WEAK_AUDIT_SHARE` of the rows flagged (the model is wrong
on many rows, so many flags are its own mistakes), and a class flagged far above the rest
(:data:`CROWDED_CLASS` times the overall share, and over :data:`WEAK_AUDIT_SHARE`: a small or hard class can
look like noise).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

WEAK_AUDIT_SHARE = 0.2   # flagging more than this share of the rows says more about the model than the data
CROWDED_CLASS = 1.5      # a class flagged at over this times the overall share (and over WEAK_AUDIT_SHARE) gets a note


@dataclass(frozen=True)
class AuditWarning:
    """One warning about an audit's flags.

    Attributes:
        kind: ``"many_flagged"`` (the whole split) or ``"crowded_class"`` (one class).
        label: the class of a ``crowded_class`` warning; ``None`` for ``many_flagged``.
        share: the share of the rows (of the class, for ``crowded_class``) flagged, in [0, 1].
        message: the warning in words.
    """

    kind: str
    label: str | None
    share: float
    message: str

    def to_dict(self) -> dict[str, Any]:
        """``{"kind", "label", "share", "message"}``, as ``audit --json`` prints it."""
        return asdict(self)


def audit_warnings(summary: dict[str, Any], out_of_fold_accuracy: float) -> list[AuditWarning]:
    """The warnings of an audit whose summary is ``summary`` (``rows``, ``flagged``, ``classes``: each with
    ``label``, ``rows``, ``flagged``) and whose out-of-fold accuracy is ``out_of_fold_accuracy`` (in [0, 1])."""
    rows, flagged = summary["rows"], summary["flagged"]
    found = []
    if flagged > WEAK_AUDIT_SHARE * rows:
        found.append(AuditWarning("many_flagged", None, flagged / rows,
                                  f"{flagged / rows:.0%} of the rows are flagged: the out-of-fold model is right on "
                                  f"{out_of_fold_accuracy:.0%} of them, so many flags are its own mistakes; the top "
                                  "of the ranking is the most trustworthy"))
    for c in summary["classes"]:
        share = c["flagged"] / max(c["rows"], 1)
        if share > max(WEAK_AUDIT_SHARE, CROWDED_CLASS * flagged / rows):
            found.append(AuditWarning("crowded_class", c["label"], share,
                                      f"{c['flagged']:,} of the {c['rows']:,} rows of {c['label']} are flagged "
                                      f"({share:.0%}): a small or hard class can look like noise to the out-of-fold "
                                      "model; read its flags before removing any"))
    return found

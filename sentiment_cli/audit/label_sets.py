"""The multi-label audit's findings: each flagged row's given and suggested label sets, and the ``--output`` records.

:func:`audit_label_sets` is :func:`~sentiment_cli.audit.run.audit`'s path for a split with several labels per
text (``audit/multilabel.py`` has the method). A :class:`LabelSetFinding` names the row's given labels, the
suggested set (the given set with the labels cleanlab doubts flipped; where every row of the data carries a
label, an empty suggestion becomes the row's most probable label), the labels that look wrong (*unlikely*:
given, but improbable out of fold; *missing*: not given, but probable) and the row's label quality.

In ``--output``: JSON Lines keeps ``given``, ``suggested``, ``unlikely`` and ``missing`` as lists; CSV joins
them with the data's label separator (``,`` where the labels were not read from one joined column).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..data.multilabel import Options, find_reading
from .callbacks import AuditCallbacks
from .multilabel import (check_label_folds, cross_fit_labels, find_label_set_issues, label_set_summary,
                         out_of_fold_scores)
from .probabilities import Warned, encode
from .rows import locations
from .warnings import AuditWarning, audit_warnings

ADDED = ("given", "suggested", "unlikely", "missing", "quality", "rank", "line")   # the output's added columns
LISTS = ("given", "suggested", "unlikely", "missing")
SEPARATOR = ","   # CSV's join of a label list where the data has no separator of its own


@dataclass
class LabelSetFinding:
    """One multi-label row flagged as likely holding a wrong label set.

    Attributes:
        rank: 1 for the most likely error.
        row: 0-based index of the row in its split.
        file, line: where it is (as :class:`~sentiment_cli.audit.run.Finding`).
        text: the row's text.
        given: its labels, in label-id order.
        suggested: the given labels with the doubted ones flipped, most probable first.
        unlikely: given labels that look wrong (improbable out of fold), least probable first.
        missing: labels not given that look right (probable out of fold), most probable first.
        quality: cleanlab's multi-label label quality, in [0, 1]; low is suspicious.
        probabilities: every label's calibrated out-of-fold probability, in label-id order.
    """

    rank: int
    row: int
    file: str | None
    line: int
    text: str
    given: list[str]
    suggested: list[str]
    unlikely: list[str]
    missing: list[str]
    quality: float
    probabilities: dict[str, float] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """``"file:line"``, or ``"row N"``."""
        return f"{self.file}:{self.line}" if self.file else f"row {self.line}"

    def reasons_text(self) -> str:
        """The doubted labels with their probabilities, e.g. ``"unlikely: anger 0.01; missing: joy 0.93"``."""
        parts = [f"{kind}: " + ", ".join(f"{n} {self.probabilities[n]:.2f}" for n in names)
                 for kind, names in (("unlikely", self.unlikely), ("missing", self.missing)) if names]
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The ``audit --json`` object: ``rank``, ``row``, ``file``, ``line``, ``text``, ``given``, ``suggested``,
        ``unlikely``, ``missing`` (lists of label names), ``quality`` and ``probabilities`` (label -> out-of-fold
        probability, every label)."""
        return {"rank": self.rank, "row": self.row, "file": self.file, "line": self.line, "text": self.text,
                "given": self.given, "suggested": self.suggested, "unlikely": self.unlikely,
                "missing": self.missing, "quality": self.quality, "probabilities": self.probabilities}


def audit_label_sets(rows, folds: int, seed: int, cb: AuditCallbacks, fit_gb: float):
    """The multi-label audit of ``rows`` (a :class:`~sentiment_cli.data.splits.Rows` whose split is multi-label):
    ``(findings, method, summary, warnings)`` as :func:`~sentiment_cli.audit.run.audit` assembles them.

    ``method`` holds ``model``, ``C``, ``cv_accuracy`` (each candidate's cross-validated score: minus the summed
    binary log-loss per text), ``folds``, ``temperature`` (the mean of ``temperatures``), ``temperatures``
    (label -> T), ``buckets``, ``class_weight`` (``None``), ``out_of_fold_accuracy`` (subset accuracy at 0.5 per
    label), ``out_of_fold_micro_f1``, ``seconds``, ``notes``, ``multi_label`` (``True``).

    Raises:
        DataError: fewer rows than ``folds``, no label given, or a fit above ``fit_gb`` GB.
    """
    s, names = rows.split, tuple(rows.split.label_names)
    y = np.asarray(s.labels, dtype=np.uint8)
    check_label_folds(y, names, folds, s.where)
    cb.on_stage(f"tokenizing {len(s):,} rows")
    _, ids = encode(s.texts)
    cross = cross_fit_labels(ids, y, len(names), folds, seed, cb, fit_gb)
    cb.on_stage("ranking the likely label-set errors (cleanlab, multi-label)")
    p = cross.probabilities()
    warned = Warned()
    with warned.catch():   # cleanlab's warnings, said in words below
        issues = find_label_set_issues(y, p)
    file, lines = locations(rows.file, len(s))
    suggested = issues.suggested(y)
    if y.any(1).all():   # every row carries a label, so every suggestion does: an empty one, its most probable
        empty = np.flatnonzero(~suggested.any(1))
        suggested[empty, p[empty].argmax(1)] = True
    findings = [_finding(rank, i, file, lines[i], s.texts[i], y[i], suggested[i], float(issues.quality[i]), p[i],
                         names) for rank, i in enumerate(issues.ranked.tolist(), 1)]
    method = {"model": cross.model_phrase, "C": cross.C, "cv_accuracy": cross.selection.cv_accuracy,
              "folds": folds, "temperature": float(np.mean(cross.temperatures)),
              "temperatures": dict(zip(names, cross.temperatures.tolist())), "buckets": cross.buckets,
              "class_weight": None, **out_of_fold_scores(y, p), "seconds": cross.seconds,
              "notes": [*cross.notes, *warned.notes()], "multi_label": True}
    counts = label_set_summary(y, p, issues, names)
    warnings: list[AuditWarning] = audit_warnings(counts, method["out_of_fold_accuracy"])
    return findings, method, counts, warnings


def _finding(rank: int, i: int, file: str | None, line: int, text: str, given: np.ndarray, suggested: np.ndarray,
             quality: float, p: np.ndarray, names: Sequence[str]) -> LabelSetFinding:
    """Row ``i``'s finding from its ``(L,)`` given and suggested vectors and probabilities ``p``: *unlikely* are
    the given labels the suggestion drops, *missing* the ones it adds."""
    g, sug = np.asarray(given, dtype=bool), np.asarray(suggested, dtype=bool)
    by_p = np.argsort(-p, kind="stable")
    pick = lambda mask: [names[j] for j in by_p.tolist() if mask[j]]   # noqa: E731  (most probable first)
    return LabelSetFinding(rank, i, file, line, text, [names[j] for j in np.flatnonzero(g)], pick(sug),
                           pick(g & ~sug)[::-1], pick(sug & ~g), quality, dict(zip(names, (float(x) for x in p))))


def label_separator(rows) -> str:
    """The separator the data joins labels with (``data/multilabel.py``'s reading of its label column), else
    :data:`SEPARATOR`."""
    if not rows.label_column:
        return SEPARATOR
    try:
        reading = find_reading(rows.dataset, rows.text_column, rows.label_column, Options(), rows.split.where)
    except Exception:   # noqa: BLE001  (the split was read already; a separator only formats the CSV)
        return SEPARATOR
    return reading.separator if reading is not None and reading.kind == "joined" and reading.separator else SEPARATOR


def label_set_records(rows, findings: Sequence[LabelSetFinding], output: str | Path
                      ) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """``(records, added columns)`` of ``--output``: each flagged row's input columns (as read) and :data:`ADDED`;
    label lists stay lists in ``.jsonl`` and are joined by :func:`label_separator` in ``.csv``."""
    if not findings:
        return [], ADDED
    joined = Path(output).suffix.lower() != ".jsonl"
    sep = label_separator(rows) if joined else ""
    columns = rows.dataset.select([f.row for f in findings]).to_dict()
    out = []
    for k, f in enumerate(findings):
        d = f.to_dict()
        added = {c: (sep.join(d[c]) if joined and c in LISTS else d[c]) for c in ADDED if c in d}
        added.update(quality=round(f.quality, 6))
        out.append({**{c: v[k] for c, v in columns.items()}, **added})
    return out, ADDED

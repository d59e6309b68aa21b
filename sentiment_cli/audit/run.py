"""The ``sentiment audit`` use case: the likely label errors of a labelled split, ranked, with reasons.

:func:`audit` reads a split whole (``data/splits.py``: :func:`~sentiment_cli.data.splits.load_rows`),
cross-fits the n-gram score for out-of-fold probabilities (``audit/probabilities.py``), ranks the likely
label errors with cleanlab (``audit/label_issues.py``), explains each flagged row exactly
(``audit/reasons.py``) and locates it in its file (``audit/rows.py``). A multi-label split (several labels per
text) takes the one-vs-rest path of ``audit/multilabel.py`` and ``audit/label_sets.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..data.splits import DataSpec, load_rows
from ..inference.prediction import Explanation
from .callbacks import AuditCallbacks
from ..ngram.memory import FIT_GB
from .probabilities import FOLDS, SEED, Warned, check_folds, cross_fit, encode
from .label_issues import find_issues, summary
from .reasons import explain_rows
from ..outputs import TABLE_TYPES, check_output
from .label_sets import audit_label_sets, label_set_records
from .multilabel import LABEL_SET_FOLDS
from .rows import ADDED, locations, write_output
from .warnings import AuditWarning, audit_warnings

TOP_TOKENS = 5   # tokens a finding's reasons name


@dataclass
class Finding:
    """One row flagged as a likely label error.

    Attributes:
        rank: 1 for the most likely error.
        row: 0-based index of the row in its split (the source's order).
        file: the file it is in; ``None`` where there are no lines to name (:func:`~.rows.locations`).
        line: the line of ``file`` it starts on; without a file, its 1-based row number.
        given, suggested: its label and the most probable other one.
        quality: the out-of-fold probability of the given label (cleanlab's self-confidence), in [0, 1].
        explanation: the split of ``logit(suggested) - logit(given)`` over its tokens (``audit/reasons.py``).
    """

    rank: int
    row: int
    file: str | None
    line: int
    given: str
    suggested: str
    quality: float
    explanation: Explanation

    @property
    def where(self) -> str:
        """``"file:line"``, or ``"row N"``."""
        return f"{self.file}:{self.line}" if self.file else f"row {self.line}"

    @property
    def text(self) -> str:
        """The row's text, as the explanation read it."""
        return self.explanation.text

    def reasons(self, k: int = TOP_TOKENS) -> list[tuple[str, float]]:
        """The ``k`` tokens that pushed hardest towards the suggested label, strongest first."""
        return self.explanation.top(k)

    def reasons_text(self, k: int = TOP_TOKENS) -> str:
        """:meth:`reasons` as ``"waste +1.20, boring +0.84"``."""
        return ", ".join(f"{t} {s:+.2f}" for t, s in self.reasons(k))

    def to_dict(self) -> dict[str, Any]:
        """The ``audit --json`` object: ``rank``, ``row``, ``file``, ``line``, ``text``, ``given``, ``suggested``,
        ``quality``, ``probabilities`` (calibrated, out-of-fold), ``tokens`` and ``scores`` (same length),
        ``bias`` (``bias + sum(scores)`` = ``logit(suggested) - logit(given)``) and ``reasons``
        (the top tokens as ``[token, score]`` pairs)."""
        e = self.explanation
        return {"rank": self.rank, "row": self.row, "file": self.file, "line": self.line, "text": e.text,
                "given": self.given, "suggested": self.suggested, "quality": self.quality,
                "probabilities": e.probabilities, "tokens": e.tokens, "scores": e.scores, "bias": e.bias,
                "reasons": [list(r) for r in self.reasons()]}


@dataclass
class AuditResult:
    """What an audit found.

    Attributes:
        where: the file (or ``source: split``) audited.
        split: the split's name.
        labels: the class names, by id.
        method: how the out-of-fold probabilities were made: ``{"model"`` (in words), ``"C"`` (per form),
            ``"cv_accuracy"`` (of every candidate form and C), ``"folds"``, ``"temperature"``, ``"buckets"``,
            ``"out_of_fold_accuracy"``, ``"seconds"}``.
        summary: :func:`~sentiment_cli.audit.label_issues.summary`'s dict.
        findings: every flagged row, ranked (:class:`Finding`, or with ``multi_label``
            :class:`~.label_sets.LabelSetFinding`).
        seconds: wall time, loading included.
        warnings: when the flags say more about the out-of-fold model than the data (``audit/warnings.py``).
        output: the file written, if any.
        multi_label: the split holds several labels per text: ``findings`` are
            :class:`~.label_sets.LabelSetFinding` (given and suggested label lists), ``method`` has ``temperatures``
            (one per label) for ``temperature`` (``audit/multilabel.py``).
    """

    where: str
    split: str
    labels: tuple[str, ...]
    method: dict[str, Any]
    summary: dict[str, Any]
    findings: list[Finding]
    seconds: float
    warnings: list[AuditWarning]
    output: Path | None = None
    multi_label: bool = False


def audit(source: str, split: str = "train", *, folds: int | None = None, text_column: str | None = None,
          label_column: str | None = None, output: str | Path | None = None, force: bool = False,
          seed: int = SEED, callbacks: AuditCallbacks | None = None, fit_gb: float = FIT_GB) -> AuditResult:
    """Find the likely label errors of ``split`` of ``source`` (module docstring).

    Args:
        source: a folder, a file or a Hub id (as ``train --data``).
        split: ``train``, ``validation`` or ``test``, read whole.
        folds: stratified folds of the cross-fit (multi-label: seeded random folds), at least 2; ``None``:
            :data:`~.probabilities.FOLDS` (10), multi-label :data:`~.multilabel.LABEL_SET_FOLDS` (5).
        text_column, label_column: the columns; default: found by their usual names.
        output: also write every flagged row to this ``.csv`` / ``.jsonl`` file (:func:`~.rows.write_output`).
        force: ``output`` may replace an existing file (never ``source`` or a file inside it).
        seed: the folds' shuffle.
        callbacks: progress hooks.
        fit_gb: the most memory the n-gram fits may take, in GB (:func:`~.probabilities.cross_fit`).

    Returns:
        The :class:`AuditResult`.

    Raises:
        UsageError: a bad ``output`` name or folder, an existing file without ``force``, or ``source`` itself
            (checked before any work, :func:`~sentiment_cli.outputs.check_output`); an unknown split, a named
            column missing.
        DataError: the data cannot be loaded or is unusable (as ``train``), one class only, or a class with
            fewer rows than ``folds`` (multi-label: fewer rows than ``folds``, or no label given), or a fit that
            would need more than ``fit_gb`` GB.
    """
    cb = callbacks or AuditCallbacks()
    start = time.perf_counter()
    if output is not None:
        output = check_output(output, force=force, suffixes=TABLE_TYPES, inputs=[("--data", source)])
    cb.on_stage(f"loading {source}")
    rows = load_rows(DataSpec(source, text_column=text_column or "", label_column=label_column or ""), split)
    s = rows.split
    run = audit_label_sets if s.multi_label else _audit_labels
    folds = folds or (LABEL_SET_FOLDS if s.multi_label else FOLDS)
    findings, method, counts, warnings = run(rows, folds, seed, cb, fit_gb)
    result = AuditResult(s.where, split, s.label_names, method, counts, findings, time.perf_counter() - start,
                         warnings, multi_label=s.multi_label)
    if output is not None:
        records, added = (label_set_records(rows, findings, output) if s.multi_label
                          else (_records(rows, findings), ADDED))
        write_output(output, records, rows.dataset.column_names, added)
        result.output = output
    return result


def _audit_labels(rows, folds: int, seed: int, cb: AuditCallbacks, fit_gb: float):
    """The single-label audit of ``rows`` (:func:`audit`): ``(findings, method, summary, warnings)``.

    Raises:
        DataError: as :func:`audit`.
    """
    s, names = rows.split, rows.split.label_names
    check_folds(s.labels, names, folds, s.where)
    cb.on_stage(f"tokenizing {len(s):,} rows")
    tokenizer, ids = encode(s.texts)
    cross = cross_fit(ids, s.labels, len(names), folds, seed, cb, fit_gb)
    cb.on_stage("ranking the likely label errors (cleanlab)")
    y = np.asarray(s.labels, dtype=np.int64)
    probabilities = cross.probabilities()
    warned = Warned()
    with warned.catch():   # cleanlab's warnings, said in words below
        issues = find_issues(y, probabilities)
        explained = explain_rows(cross, tokenizer, s.texts, issues.ranked, y, issues.suggested, names)
    file, lines = locations(rows.file, len(s))
    findings = [Finding(rank, int(i), file, lines[i], names[y[i]], names[issues.suggested[i]], float(issues.quality[i]),
                        explained[int(i)]) for rank, i in enumerate(issues.ranked.tolist(), 1)]
    method = {"model": cross.model_phrase,
              "C": cross.C, "cv_accuracy": cross.selection.cv_accuracy, "folds": folds,
              "temperature": cross.temperature, "buckets": cross.buckets, "class_weight": cross.class_weight,
              "out_of_fold_accuracy": float((probabilities.argmax(1) == y).mean()), "seconds": cross.seconds,
              "notes": [*cross.notes, *warned.notes()]}
    counts = summary(y, probabilities, issues, names)
    return findings, method, counts, audit_warnings(counts, method["out_of_fold_accuracy"])


def _records(rows, findings: list[Finding]) -> list[dict[str, Any]]:
    """The output's records: each flagged row's input columns (as read) and the added ones."""
    if not findings:
        return []
    columns = rows.dataset.select([f.row for f in findings]).to_dict()
    return [{**{c: v[k] for c, v in columns.items()}, "given": f.given, "suggested": f.suggested,
             "quality": round(f.quality, 6), "rank": f.rank, "line": f.line, "reasons": f.reasons_text()}
            for k, f in enumerate(findings)]

"""Where each audited row is, as the user sees it (file and line), and the audit's ``--output`` file.

A CSV / TSV row is located by the line its record starts on (after the header; a quoted field may span
lines), a JSON Lines row by its line (blank lines skipped, as ``datasets`` skips them); other sources
(Parquet, a JSON array, the Hub layout, ``aclImdb``) by their 1-based row number.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import UsageError

OUTPUT_TYPES = (".csv", ".jsonl")
ADDED = ("given", "suggested", "quality", "rank", "line", "reasons")   # columns the output adds to the input's


def check_output(path: str | Path) -> Path:
    """Check ``--output`` before any work: a ``.csv`` or ``.jsonl`` name in an existing folder.

    Raises:
        UsageError: another suffix, or a missing folder.
    """
    p = Path(path)
    if p.suffix.lower() not in OUTPUT_TYPES:
        raise UsageError(f"--output {path}: write .csv or .jsonl (the suffix chooses the format)")
    if not p.expanduser().parent.is_dir():
        raise UsageError(f"--output {path}: folder {p.parent} does not exist")
    return p


def locations(file: str | None, n: int) -> list[str]:
    """``"file:line"`` (or ``"row i"``) for each of the ``n`` rows of a split read from ``file``.

    Falls back to row numbers when the file's records do not number ``n`` (a file changed since it was read).
    """
    lines = None
    if file is not None:
        suffix = Path(file).suffix.lower()
        if suffix in (".csv", ".tsv"):
            lines = _csv_lines(file, "\t" if suffix == ".tsv" else ",")
        elif suffix == ".jsonl" or (suffix == ".json" and not _json_array(file)):
            lines = _jsonl_lines(file)
    if lines is None or len(lines) != n:
        return [f"row {i + 1}" for i in range(n)]
    return [f"{file}:{line}" for line in lines]


def _csv_lines(file: str, sep: str) -> list[int]:
    """The line each record after the header starts on (empty lines skipped, as pandas skips them)."""
    out = []
    with open(file, encoding="utf-8-sig", newline="") as fh:
        reader = csv.reader(fh, delimiter=sep)
        start = 1
        for k, row in enumerate(reader):
            if k and row and any(row):
                out.append(start)
            start = reader.line_num + 1
    return out


def _json_array(file: str) -> bool:
    with open(file, encoding="utf-8-sig") as fh:
        return fh.read(4096).lstrip().startswith("[")


def _jsonl_lines(file: str) -> list[int]:
    with open(file, encoding="utf-8-sig") as fh:
        return [n for n, line in enumerate(fh, 1) if line.strip()]


def write_output(path: str | Path, records: Sequence[dict[str, Any]], input_columns: Sequence[str]) -> None:
    """Write the flagged rows, ranked: the input's columns, then :data:`ADDED`, as CSV or JSON Lines.

    A column of the input named like an added one keeps its name; the added one becomes ``audit_<name>``.
    Written to a temporary file in the same folder and moved into place, so a failed write leaves no half file.

    Args:
        path: ``.csv`` or ``.jsonl`` (:func:`check_output`).
        records: one dict per row, with the input's columns and the added ones (unprefixed).
        input_columns: the input's column names, in order.
    """
    p = Path(path).expanduser()
    names = {c: (f"audit_{c}" if c in input_columns else c) for c in ADDED}
    rows = [{**{c: r[c] for c in input_columns}, **{names[c]: r[c] for c in ADDED}} for r in records]
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            if p.suffix.lower() == ".csv":
                writer = csv.DictWriter(fh, fieldnames=[*input_columns, *names.values()])
                writer.writeheader()
                writer.writerows(rows)
            else:
                fh.writelines(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

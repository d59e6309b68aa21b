"""Where each audited row is, as the user sees it (file and line), and the audit's ``--output`` file.

A CSV / TSV row is located by the line its record starts on (after the header; a quoted field may span
lines), a JSON Lines row by its line (blank lines skipped, as ``datasets`` skips them); other sources
(Parquet, a JSON array, the Hub layout, ``aclImdb``) by their 1-based row number.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..decoding import json_loads
from ..errors import UsageError
from ..arrow_output import write_table
from ..outputs import TABLE_TYPES

# Columns the output adds to the input's; "line" is the file's line (or the row number, 1-based, without one).
ADDED = ("given", "suggested", "quality", "rank", "line", "reasons")
MAX_FIELD = 2**31 - 1   # the CSV reader's field limit at most (a C long on every platform)


def locations(file: str | None, n: int) -> tuple[str | None, list[int]]:
    """``(file, numbers)``: the line each of the ``n`` rows of a split read from ``file`` starts on, or
    ``(None, 1-based row numbers)`` where there are no lines to name (Parquet, a JSON array, a Hub dataset),
    or when the file's records do not number ``n`` (a file changed since it was read).
    """
    lines = None
    if file is not None:
        suffix = Path(file).suffix.lower()
        if suffix in (".csv", ".tsv"):
            lines = _csv_lines(file, "\t" if suffix == ".tsv" else ",")
        elif suffix == ".jsonl" or (suffix == ".json" and not _json_array(file)):
            lines = _jsonl_lines(file)
    if lines is None or len(lines) != n:
        return None, list(range(1, n + 1))
    return file, lines


def _csv_lines(file: str, sep: str) -> list[int] | None:
    """The line each record after the header starts on (empty lines skipped, as pandas skips them), or
    ``None`` when Python's CSV reader cannot follow a file that ``train`` read (then rows are numbered)."""
    out = []
    try:
        with open(file, encoding="utf-8-sig", newline="") as fh, field_limit(file):
            reader = csv.reader(fh, delimiter=sep)
            start = 1
            for k, row in enumerate(reader):
                if k and row and any(row):
                    out.append(start)
                start = reader.line_num + 1
    except (csv.Error, UnicodeDecodeError):
        return None
    return out


@contextmanager
def field_limit(file: str | Path):
    """Python's CSV reader accepts fields as long as ``file`` (a field cannot be longer), instead of its
    128 KiB default, which a review read by ``train`` (pandas, no such limit) may pass; restored on exit."""
    old = csv.field_size_limit()
    csv.field_size_limit(max(old, min(os.path.getsize(file) + 1, MAX_FIELD)))
    try:
        yield
    finally:
        csv.field_size_limit(old)


def _json_array(file: str) -> bool:
    with open(file, encoding="utf-8-sig") as fh:
        return fh.read(4096).lstrip().startswith("[")


def _jsonl_lines(file: str) -> list[int]:
    with open(file, encoding="utf-8-sig") as fh:
        return [n for n, line in enumerate(fh, 1) if line.strip()]


def write_output(path: str | Path, records: Sequence[dict[str, Any]], input_columns: Sequence[str],
                 added: Sequence[str] = ADDED) -> None:
    """Write the flagged rows, ranked: the input's columns, then ``added`` (:data:`ADDED`; a multi-label audit's:
    ``audit/label_sets.py``), as CSV or JSON Lines.

    A column of the input named like an added one keeps its name; the added one becomes ``audit_<name>``.
    Written as :func:`~sentiment_cli.arrow_output.write_table` writes (atomically), so a failed write leaves no
    half file.

    Args:
        path: ``.csv`` or ``.jsonl`` (checked before the audit by :func:`~sentiment_cli.outputs.check_output`).
        records: one dict per row, with the input's columns and the added ones (unprefixed).
        input_columns: the input's column names, in order.
        added: the added columns, in order.
    """
    names = {c: (f"audit_{c}" if c in input_columns else c) for c in added}
    rows = [{**{c: r[c] for c in input_columns}, **{names[c]: r[c] for c in added}} for r in records]
    write_table(path, [*input_columns, *names.values()], rows)


def read_flags(path: str | Path, text_column: str | None = None) -> dict[str, dict[str, Any]]:
    """The rows an audit's ``--output`` file flagged, by text: ``{text: {"rank", "given", "suggested", "quality"}}``.

    For ``eval --errors --audit FILE``: a mistake of the model whose text the audit flagged is likely the
    data's, not the model's. The text column is ``text_column`` or found by its usual names; the added
    columns may carry the ``audit_`` prefix (:func:`write_output`). Reads the file once, in memory
    linear in its size.

    Raises:
        UsageError: not a ``.csv`` / ``.jsonl`` file, or a named column is missing.
        DataError: the file is unreadable or not an audit's output (no text column, no ``rank`` column).
        OSError: the file cannot be opened.
    """
    from ..data.columns import TEXT_COLUMNS, resolve_column
    from ..errors import DataError

    p = Path(path)
    if p.suffix.lower() not in TABLE_TYPES:
        raise UsageError(f"--audit {path}: give the .csv or .jsonl file that 'sentiment audit --output' wrote")
    try:
        with open(p, encoding="utf-8", newline="") as fh, field_limit(p):
            records = list(csv.DictReader(fh)) if p.suffix.lower() == ".csv" else \
                [json_loads(line) for line in fh if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: not an audit's output ({exc})") from None
    if not records:
        return {}
    if not all(isinstance(r, dict) for r in records):
        raise DataError(f"{path}: not an audit's output (expected one object per line)")
    columns = list(records[0])
    text = resolve_column(columns, text_column or "", TEXT_COLUMNS, "text", str(path))
    added = {c: (f"audit_{c}" if f"audit_{c}" in columns else c) for c in ADDED}
    if added["rank"] not in columns or added["suggested"] not in columns:
        raise DataError(f"{path}: not an audit's output (no {added['rank']!r} or {added['suggested']!r} column)")
    out = {}
    for r in records:
        try:
            out[str(r[text])] = {"rank": int(r[added["rank"]]), "given": str(r.get(added["given"])),
                                 "suggested": str(r[added["suggested"]]), "quality": float(r[added["quality"]])}
        except (KeyError, TypeError, ValueError):
            raise DataError(f"{path}: not an audit's output (a row without rank, suggested or quality)") from None
    return out

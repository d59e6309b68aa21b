"""The one table writer: a stream of Arrow tables (``predict --data``'s scored batches) as Parquet, CSV or JSON
Lines, or rows of dicts (``audit``, ``suggest`` and ``check``'s ``--output``: :func:`write_table`) as CSV or
JSON Lines.

The format follows the file's suffix (:data:`STREAM_TYPES`); with no file, JSON Lines go to stdout. Tables are
written as they come, so memory holds one batch. A file is written to a temporary file beside it and moved into
place when the last batch is in (:func:`~sentiment_cli.outputs.atomic_file`): an interrupted or failed run
leaves no half file, and an existing file as it was.

CSV has no lists: a list column (a multi-label model's ``labels``, ``top_tokens``) is written there as JSON
text (``["joy", "love"]``). Parquet and JSON Lines keep the types. Neither CSV nor JSON holds bytes: a binary
column is written there as base64 text (RFC 4648; Parquet keeps it binary). Rows of dicts are written by the
standard library's ``csv`` (a header, then a line a row) or as the same JSON lines as a table's rows.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .errors import UsageError
from .outputs import TABLE_TYPES, atomic_file

if TYPE_CHECKING:
    import pyarrow as pa

STREAM_TYPES = (".parquet", ".csv", ".jsonl")


class ArrowStreamWriter:
    """Writes tables one after another to ``path`` (or JSON Lines to ``stdout`` when ``path`` is ``None``).

    Use as a context manager: the file is complete, and in place, only when the block ends without an error.

    Args:
        path: the file; ``None``: JSON Lines to ``stdout``.
        stdout: where JSON Lines go without a file (default ``sys.stdout``).
        suffixes: the formats this writer may write (:data:`STREAM_TYPES`; :func:`write_table`: CSV, JSON Lines).

    Raises:
        UsageError: ``path`` has another suffix (checked at construction).
        ValueError: a table's columns differ from the first one's.
    """

    def __init__(self, path: str | Path | None, stdout: IO[str] | None = None,
                 suffixes: Sequence[str] = STREAM_TYPES):
        self.path = None if path is None else Path(path).expanduser()
        if self.path is not None and self.path.suffix.lower() not in suffixes:
            listed = ", ".join(suffixes) if len(suffixes) > 2 else " or ".join(suffixes)
            raise UsageError(f"--output {path}: write {listed} (the suffix chooses the format)")
        self.format = ".jsonl" if self.path is None else self.path.suffix.lower()
        self._stdout = stdout or sys.stdout
        self._stack = ExitStack()
        self._writer = None      # the Parquet or CSV writer, opened with the first table's schema
        self._text: IO[str] | None = None
        self._tmp: Path | None = None
        self.rows = 0

    def __enter__(self) -> "ArrowStreamWriter":
        if self.path is not None:
            self._tmp = self._stack.enter_context(atomic_file(self.path))
        return self

    def __exit__(self, *exc) -> bool:
        try:
            if self._writer is not None:
                self._writer.close()
            if self._text is not None and self._text is not self._stdout:
                self._text.close()
            elif self._text is not None:
                self._text.flush()
        except BaseException:   # a failed close (a full disk): the temporary file goes too
            self._stack.__exit__(*sys.exc_info())
            raise
        self._stack.__exit__(*exc)   # atomic_file: moves the file into place, or removes it after an error
        return False

    def write(self, table: "pa.Table") -> None:
        """Append ``table``'s rows.

        Raises:
            ValueError: its columns differ from the first table's.
        """
        if self.format == ".parquet":
            self._parquet(table)
        elif self.format == ".csv":
            self._csv(table)
        else:
            self._jsonl(table)
        self.rows += table.num_rows

    def write_rows(self, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
        """Write rows of dicts (keyed by ``columns``, in that order), once per writer: CSV with a header (the
        standard library's ``csv``), or JSON Lines as :meth:`write` writes a table's rows.

        Raises:
            UsageError: a Parquet file (rows of dicts have no Arrow types).
        """
        if self.format == ".parquet":
            raise UsageError(f"--output {self.path}: rows are written as {' or '.join(TABLE_TYPES)}")
        text = self._open_text()
        if self.format == ".csv":
            writer = csv.DictWriter(text, fieldnames=list(columns))
            writer.writeheader()
            for row in rows:
                writer.writerow(row)
                self.rows += 1
            return
        for row in rows:
            text.write(_json_line({c: row[c] for c in columns}))
            self.rows += 1

    def _open_text(self) -> IO[str]:
        """The text stream JSON Lines (and rows' CSV) go to: stdout, or the temporary file, opened once."""
        if self._text is None:
            self._text = self._stdout if self._tmp is None else open(self._tmp, "w", encoding="utf-8", newline="")
        return self._text

    def _parquet(self, table: "pa.Table") -> None:
        import pyarrow.parquet as pq

        if self._writer is None:
            self._writer = pq.ParquetWriter(str(self._tmp), table.schema)
        self._writer.write_table(table)

    def _csv(self, table: "pa.Table") -> None:
        import pyarrow.csv as pcsv

        table = _binary_as_base64(_lists_as_json(table))
        if self._writer is None:
            self._writer = pcsv.CSVWriter(str(self._tmp), table.schema)
        self._writer.write_table(table)

    def _jsonl(self, table: "pa.Table") -> None:
        rows = _binary_as_base64(table).to_pylist()
        self._open_text().writelines(_json_line(row) for row in rows)


def _json_line(row: Mapping[str, Any]) -> str:
    """One JSON Lines record: the row as one line of JSON, non-ASCII kept, other values as their ``str``."""
    return json.dumps(row, ensure_ascii=False, default=str) + "\n"


def write_table(path: str | Path, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write ``rows`` (dicts keyed by ``columns``) as CSV (a header, then one line per row) or JSON Lines (one
    object per line), by ``path``'s suffix (``outputs.TABLE_TYPES``); atomically (module docstring).

    Returns:
        The path written.

    Raises:
        UsageError: another suffix.
        OSError: the folder is not writable or the disk is full; ``path`` is then unchanged.
    """
    with ArrowStreamWriter(path, suffixes=TABLE_TYPES) as writer:
        writer.write_rows(columns, rows)
    return Path(path)


def _binary_as_base64(table: "pa.Table") -> "pa.Table":
    """``table`` with each binary column (binary, large or fixed-size) as base64 text (RFC 4648)."""
    import base64

    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type) \
                or pa.types.is_fixed_size_binary(field.type):
            values = [None if v is None else base64.b64encode(v).decode("ascii") for v in table.column(i).to_pylist()]
            table = table.set_column(i, field.name, pa.array(values, pa.string()))
    return table


def _lists_as_json(table: "pa.Table") -> "pa.Table":
    """``table`` with each list or struct column as JSON text (CSV holds no nested values)."""
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if pa.types.is_nested(field.type):
            text = [None if v is None else json.dumps(v, ensure_ascii=False) for v in table.column(i).to_pylist()]
            table = table.set_column(i, field.name, pa.array(text, pa.string()))
    return table

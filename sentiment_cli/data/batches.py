"""One split of a source, read as a stream of Arrow tables with every column (``predict --data``).

The source is read as ``train`` and ``eval`` read it (:func:`~sentiment_cli.data.sources.load_source`: CSV,
TSV, JSON Lines, Parquet, a folder of them, the Hub layout, with their one-line errors), which puts each file
into ``datasets``' Arrow cache. The batches are then read from those cache files with plain reads, not through
the memory map ``datasets`` keeps: a page of a map stays in the process's resident memory once touched, so
reading a large file through it would make peak memory grow with the number of rows. Here it is bounded by
one batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import DataError, UsageError
from .columns import feature_type, find_text_column
from .sources import SPLIT_FILES, load_source

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class TableStream:
    """A split to read in batches.

    Attributes:
        where: the file (or ``source: split``) for messages.
        text_column: the column holding the texts.
        num_rows: the split's rows.
        column_names: the input's columns, in order.
    """

    where: str
    text_column: str
    num_rows: int
    column_names: list[str]
    _dataset: Any
    source_types: dict[str, Any] | None = None   # a Parquet file's dictionary-encoded columns: name -> type

    def batches(self, rows: int) -> Iterator["pa.Table"]:
        """The split's rows in order, ``rows`` at a time (the last batch may be shorter).

        Raises:
            ValueError: ``rows`` is less than 1.
        """
        if rows < 1:
            raise ValueError(f"rows must be >= 1, got {rows}")
        import pyarrow as pa

        pending: list[pa.RecordBatch] = []
        held = 0
        for batch in _record_batches(self._dataset):
            while len(batch):
                take = batch.slice(0, rows - held)
                pending.append(take)
                held += len(take)
                batch = batch.slice(len(take))
                if held == rows:
                    yield self._as_source(pa.Table.from_batches(pending))
                    pending, held = [], 0
        if pending:
            yield self._as_source(pa.Table.from_batches(pending))

    def _as_source(self, table: "pa.Table") -> "pa.Table":
        """``table`` with the source file's dictionary-encoded columns encoded again (``datasets``' cache
        holds their values), so that a column comes out with the type it went in with."""
        for name, kind in (self.source_types or {}).items():
            i = table.schema.get_field_index(name)
            if i >= 0 and table.schema.field(i).type == kind.value_type:
                table = table.set_column(i, name, table.column(i).cast(kind))
        return table


def _record_batches(ds) -> Iterator["pa.RecordBatch"]:
    """``ds``'s record batches: from its cache files with plain reads (module docstring) when it is exactly
    those files, else from the table it holds in memory."""
    from .arrow_cache import cache_files, file_batches, file_rows

    files = cache_files(ds)
    if files is not None and sum(file_rows(f) for f in files) == ds.num_rows:
        for name in files:
            yield from file_batches(name)
        return
    yield from ds.data.to_batches()


def open_split(source: str, split: str | None = None, text_column: str = "") -> TableStream:
    """The split ``split`` of ``source`` (a file's rows when ``None``), with its text column found.

    Args:
        source: a file, a folder or the Hub layout (as ``--data``).
        split: ``train``, ``validation`` (or ``dev``), ``test``, ``unsupervised``...; needed when a folder
            has several.
        text_column: the column of texts; empty: the one column named like a text column (``text``,
            ``review``, ``sentence``, ``content``).

    Raises:
        DataError: the source cannot be read, or has no such split, or no (or several) text columns, or the
            column does not hold text.
        UsageError: a folder with several splits and no ``split``; ``text_column`` is not a column.
    """
    src = load_source(source)
    split = choose_split(src.splits, split, source)
    ds = src.splits[split]
    where = src.where(split)
    column = find_text_column(ds.column_names, text_column, where, lambda c: feature_type(ds.features[c]))
    return TableStream(where, column, ds.num_rows, list(ds.column_names), ds, _dictionary_columns(where))


def choose_split(names: Iterable[str], split: str | None, source: str) -> str | None:
    """Which of a source's splits ``names`` to read: ``split`` under its canonical name (``dev`` is
    ``validation``: ``SPLIT_FILES``), or with ``None`` the one split there is (``None`` when there is none). The
    rule of ``predict --data``, with and without ``--ray``.

    Raises:
        UsageError: several splits and no ``split``.
        DataError: no such split (the message names those there are).
    """
    names = sorted(names)
    if split is None:
        if len(names) > 1:
            raise UsageError(f"--data {source} has the splits {', '.join(names)}; choose one with --split NAME")
        return names[0] if names else None
    wanted = SPLIT_FILES.get(split, split)
    if wanted not in names:
        raise DataError(f"--data {source} has no split {split!r}; it has {', '.join(names) or 'no named split'}")
    return wanted


def _dictionary_columns(where: str) -> dict[str, Any] | None:
    """A Parquet file's dictionary-encoded columns (name -> Arrow type), from its schema alone; ``None`` for
    another source or an unreadable schema (the data was read already: its errors were reported then)."""
    if not where.lower().endswith(".parquet"):
        return None
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(where)
    except (OSError, pa.ArrowException):
        return None
    return {f.name: f.type for f in schema if pa.types.is_dictionary(f.type)} or None

"""A dataset's text column read a chunk of rows at a time, without keeping its memory-mapped pages resident.

``datasets`` memory-maps its Arrow cache files, and every page a reader touches then counts in the process's
resident memory until the map is closed: checking, tokenizing or hashing every text of a 400,000-review split
through that map would keep its whole text column (over 500 MB) resident. :class:`TextColumn` maps the cache
files only to learn where each text lies (kept as 19 bytes a row: file, byte position, length, null; then the
map is closed) and reads the texts' bytes with ``os.pread``, so that resident memory holds the texts being read,
not the file. A column held in memory (a dataset built in Python, such as ``aclImdb``'s) is read from memory.
:class:`Texts` is the lazy sequence of some of a column's rows, in a given order, that a training split holds
instead of a list of strings.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from .arrow_cache import cache_files, string_offsets

CHUNK_ROWS = 4096   # texts read at a time when a column is iterated


class TextColumn:
    """Column ``name`` of the ``datasets.Dataset`` ``dataset``: its texts by row, read when asked.

    Attributes:
        dataset, name: the dataset and the column.
        key: ``(id(dataset), name)``: the same for the same dataset object and column.
    """

    def __init__(self, dataset: Any, name: str):
        self.dataset, self.name = dataset, name
        self.key = (id(dataset), name)
        self._chunks: list[pa.Array] = list(dataset.data.column(name).chunks)   # metadata: no text is read
        self._starts = np.cumsum([0] + [len(c) for c in self._chunks], dtype=np.int64)   # (chunks + 1,)
        self._located = _locate(dataset, name, self._chunks)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def arrow_chunks(self) -> Iterator[pa.Array]:
        """The column's Arrow chunks in row order: from a file, each a new array read with one ``pread``; from
        memory, the dataset's own."""
        for c, chunk in enumerate(self._chunks):
            if self._located is None or not len(chunk):
                yield chunk
            else:
                yield self._located.read_chunk(int(self._starts[c]), int(self._starts[c + 1]), chunk)

    def take(self, rows: Sequence[int] | np.ndarray) -> list[str | None]:
        """The texts of ``rows`` (any order, repeats allowed), as Python strings (``None``: a null row).

        Raises:
            IndexError: a row outside ``[0, len(self))``.
        """
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(rows) and (rows.min() < 0 or rows.max() >= len(self)):
            raise IndexError(f"row outside 0..{len(self) - 1}")
        if self._located is not None:
            return self._located.texts(rows)
        return _take_in_memory(self._chunks, self._starts, rows)

    def iter_texts(self, rows: np.ndarray | None = None, chunk_rows: int = CHUNK_ROWS) -> Iterator[list[str | None]]:
        """Lists of at most ``chunk_rows`` texts: of ``rows`` in that order, or (``None``) of every row in order."""
        if rows is None:
            for chunk in self.arrow_chunks():
                for lo in range(0, len(chunk), chunk_rows):
                    yield chunk.slice(lo, chunk_rows).to_pylist()
            return
        for lo in range(0, len(rows), chunk_rows):
            yield self.take(rows[lo:lo + chunk_rows])


class Texts(Sequence):
    """The texts of ``rows`` of ``column``, in that order: a ``Sequence[str]`` read a chunk at a time.

    Iterating reads :data:`CHUNK_ROWS` texts at a time; indexing one row reads it alone; a slice or index array
    gives another :class:`Texts`. ``+`` with another sequence gives a list (every text read).

    Attributes:
        column: the :class:`TextColumn`.
        rows: ``(len,)`` int64 row numbers in the column.
    """

    def __init__(self, column: TextColumn, rows: np.ndarray | None = None):
        self.column = column
        self.rows = np.arange(len(column), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            return self.column.take(self.rows[[index]])[0]
        return Texts(self.column, self.rows[index])

    def __iter__(self) -> Iterator[str]:
        for block in self.column.iter_texts(self.rows):
            yield from block

    def __add__(self, other: Sequence[str]) -> list[str]:
        return list(self) + list(other)

    def __radd__(self, other: Sequence[str]) -> list[str]:
        return list(other) + list(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Texts, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None   # type: ignore[assignment]   # mutable-sequence semantics: equal by content

    def __repr__(self) -> str:
        return f"Texts({len(self):,} rows of column {self.column.name!r})"


def _take_in_memory(chunks: list[pa.Array], starts: np.ndarray, rows: np.ndarray) -> list[str | None]:
    """``rows``' texts from chunks held in memory: one ``take`` per chunk touched, then back in ``rows``' order."""
    out: list[str | None] = [None] * len(rows)
    which = np.searchsorted(starts, rows, side="right") - 1
    order = np.argsort(which, kind="stable")
    for group in np.split(order, np.flatnonzero(np.diff(which[order])) + 1):
        if not len(group):
            continue
        c = int(which[group[0]])
        for k, text in zip(group.tolist(), chunks[c].take(pa.array(rows[group] - starts[c])).to_pylist()):
            out[k] = text
    return out


class _Located:
    """Where each row's text lies in the cache files: its file, byte position and byte length, and which rows
    are null (``None`` when none is)."""

    def __init__(self, paths: list[str], file: np.ndarray, position: np.ndarray, length: np.ndarray,
                 null: np.ndarray | None):
        self.fds = [os.open(p, os.O_RDONLY) for p in paths]
        weakref.finalize(self, _close_all, list(self.fds))
        self.file, self.position, self.length, self.null = file, position, length, null   # each (rows,)

    def texts(self, rows: np.ndarray) -> list[str | None]:
        fds, pread = self.fds, os.pread
        out = [pread(fds[f], n, p).decode("utf-8") for f, p, n in
               zip(self.file[rows].tolist(), self.position[rows].tolist(), self.length[rows].tolist())]
        if self.null is not None:
            for k in np.flatnonzero(self.null[rows]).tolist():
                out[k] = None
        return out

    def read_chunk(self, lo: int, hi: int, chunk: pa.Array) -> pa.Array:
        """Rows ``lo:hi`` (one Arrow chunk, contiguous in its file) as a new array of ``chunk``'s type."""
        start = int(self.position[lo])
        end = int(self.position[hi - 1] + self.length[hi - 1])
        data = os.pread(self.fds[int(self.file[lo])], end - start, start) if end > start else b""
        offsets = np.append(self.position[lo:hi] - start, end - start).astype(
            np.int64 if pa.types.is_large_string(chunk.type) else np.int32)
        validity = None
        if chunk.null_count:   # the bitmap, 1 bit a row, from the dataset's own chunk
            validity = pa.array(chunk.is_valid().to_numpy(zero_copy_only=False)).buffers()[1]
        return pa.Array.from_buffers(chunk.type, hi - lo, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                     chunk.null_count)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _locate(dataset: Any, name: str, chunks: list[pa.Array]) -> _Located | None:
    """Each row's place in ``dataset``'s cache files, when its column ``name`` is theirs as stored (memory-mapped,
    uncompressed, no index mapping, the same chunks, the same first and last text); ``None`` otherwise (the
    column is read from memory)."""
    paths = cache_files(dataset)
    if paths is None:
        return None
    parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
    for k, path in enumerate(paths):
        try:
            found = string_offsets(path, name)
        except (OSError, ValueError, pa.ArrowException, BufferError):
            return None
        if found is None:
            return None
        parts += [(k, *part) for part in found]
    if [len(p[1]) for p in parts] != [len(c) for c in chunks if len(c)] or not parts:
        return None
    file = np.concatenate([np.full(len(p[1]), p[0], dtype=np.uint16) for p in parts])
    null = np.concatenate([p[3] for p in parts])
    located = _Located(paths, file, np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]),
                       null if null.any() else None)
    full = [c for c in chunks if len(c)]
    last = len(file) - 1
    if located.texts(np.array([0, last])) != [full[0][0].as_py(), full[-1][len(full[-1]) - 1].as_py()]:
        return None
    return located

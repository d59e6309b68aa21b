"""Many texts' token ids, stored flat in a temporary file and read a row at a time.

A training run reads each review's ids once per epoch, in batches: :class:`TokenIds` keeps them as one flat
int32 array in an unnamed temporary file (``TMPDIR``; removed when the object is freed) and, in memory, 8 bytes
of offset per row, so that a run's resident memory does not grow with its token ids (200 tokens a review:
800 bytes each on disk, against some 7 KB as Python lists of ints). Rows are read with ``os.preadv`` (plain reads:
no page of the file stays mapped). Views (a slice, an index array) share the file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

DTYPE = np.int32   # ids are below 2**31: vocabulary ids, negation marks (negation.py's SCOPE_OFFSET + id)
_ITEM = np.dtype(DTYPE).itemsize
_READ_ROWS = 4096   # rows read at a time when a view is iterated


class _Store:
    """The file and each row's first token: ``starts`` ``(rows + 1,)`` int64, in tokens."""

    def __init__(self, file, starts: np.ndarray):
        self.file, self.starts = file, starts
        self.fd = file.fileno()

    def read(self, lo_token: int, hi_token: int) -> np.ndarray:
        """Tokens ``lo_token:hi_token`` of the file, as a new int32 array."""
        out = np.empty(hi_token - lo_token, dtype=DTYPE)
        if len(out):
            got = os.preadv(self.fd, [out], lo_token * _ITEM)
            if got != out.nbytes:
                raise OSError(f"token-id file: read {got} of {out.nbytes} bytes")
        return out


class TokenIds(Sequence):
    """Token ids of many texts: ``ids[i]`` is row ``i``'s ids, a 1-D int32 array (read from the file each time).

    ``ids[a:b]`` and ``ids[index_array]`` are views (no copy); ``a + b`` copies both into a new file. Build one
    with :class:`TokenIdsWriter` or :meth:`from_rows`.
    """

    def __init__(self, store: _Store, rows: np.ndarray | None = None):
        self._store = store
        self._rows = None if rows is None else np.asarray(rows, dtype=np.int64)

    @classmethod
    def from_rows(cls, rows: Iterable[Sequence[int]]) -> TokenIds:
        """Token ids of ``rows`` (each a sequence of ints), in order."""
        writer = TokenIdsWriter()
        writer.add(rows)
        return writer.finish()

    def __len__(self) -> int:
        return len(self._store.starts) - 1 if self._rows is None else len(self._rows)

    @property
    def lengths(self) -> np.ndarray:
        """``(len(self),)`` int64: each row's number of ids."""
        starts = self._store.starts
        if self._rows is None:
            return np.diff(starts)
        return starts[self._rows + 1] - starts[self._rows]

    def _row(self, i: int) -> int:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"row {i} of {n}")
        i = i + n if i < 0 else i
        return i if self._rows is None else int(self._rows[i])

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            row = self._row(int(index))
            return self._store.read(int(self._store.starts[row]), int(self._store.starts[row + 1]))
        base = np.arange(len(self._store.starts) - 1, dtype=np.int64) if self._rows is None else self._rows
        if isinstance(index, slice) and self._rows is None and index.step in (None, 1):
            lo, hi, _ = index.indices(len(self))
            return TokenIds(self._store, np.arange(lo, max(lo, hi), dtype=np.int64))
        return TokenIds(self._store, base[np.asarray(index) if not isinstance(index, slice) else index])

    def __iter__(self) -> Iterator[np.ndarray]:
        starts = self._store.starts
        rows = np.arange(len(starts) - 1, dtype=np.int64) if self._rows is None else self._rows
        for lo in range(0, len(rows), _READ_ROWS):
            block = rows[lo:lo + _READ_ROWS]
            if len(block) and np.all(np.diff(block) == 1):   # consecutive rows: one read
                first, last = int(block[0]), int(block[-1])
                flat = self._store.read(int(starts[first]), int(starts[last + 1]))
                yield from np.split(flat, (starts[first + 1:last + 1] - starts[first]).tolist())
            else:
                for row in block.tolist():
                    yield self._store.read(int(starts[row]), int(starts[row + 1]))

    def __add__(self, other: Sequence[Sequence[int]]) -> TokenIds:
        writer = TokenIdsWriter()
        writer.add(self)
        writer.add(other)
        return writer.finish()

    def tolist(self) -> list[list[int]]:
        """Every row as a list of ints (small data: tests, messages)."""
        return [row.tolist() for row in self]

    def __repr__(self) -> str:
        return f"TokenIds({len(self):,} rows)"


class TokenIdsWriter:
    """Appends rows of token ids to a new temporary file; :meth:`finish` gives the :class:`TokenIds`."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="sentiment-token-ids-")
        self._lengths: list[np.ndarray] = []

    def add(self, rows: Iterable[Sequence[int]]) -> None:
        """Append ``rows`` (each a sequence of ints below 2**31), in order.

        Raises:
            ValueError: an id outside int32's range.
        """
        batch: list[np.ndarray] = []
        for row in rows:
            batch.append(np.asarray(row, dtype=np.int64))
            if len(batch) == _READ_ROWS:
                self._write(batch)
                batch = []
        self._write(batch)

    def _write(self, batch: list[np.ndarray]) -> None:
        if not batch:
            return
        flat = np.concatenate(batch)
        if len(flat) and (flat.min() < np.iinfo(DTYPE).min or flat.max() > np.iinfo(DTYPE).max):
            raise ValueError("a token id outside int32's range")
        self._file.write(flat.astype(DTYPE).tobytes())
        self._lengths.append(np.fromiter((len(r) for r in batch), dtype=np.int64, count=len(batch)))

    def finish(self) -> TokenIds:
        """The rows written, as a :class:`TokenIds` (the writer is not used again)."""
        self._file.flush()
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, dtype=np.int64)
        starts = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        return TokenIds(_Store(self._file, starts))

"""``datasets``' Arrow cache files, read without their memory map: the one place that knows them.

``datasets`` keeps each split it loads in Arrow stream files (its cache) and memory-maps them; a page of the
map stays in the process's resident memory once touched. The readers of a whole split read the files
themselves instead: :func:`cache_files` says when a dataset is exactly its files (the guard on ``datasets``'
private ``_indices``: no index mapping from a ``select`` or ``shuffle``), :func:`file_batches` reads a file's
record batches with plain reads (``data/batches.py``: ``predict --data``), and :func:`string_offsets` finds
where each text of a string column lies in a file (``data/text_column.py``: ``os.pread`` of one text at a time).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa


def cache_files(dataset: Any) -> list[str] | None:
    """The cache files that hold ``dataset``'s rows, in order, when it is those files as written: a
    ``datasets.Dataset`` with cache files and no index mapping (its private ``_indices`` is ``None``); else
    ``None`` (a dataset built in memory, or a selection of rows: read it through ``datasets``)."""
    paths = [f["filename"] for f in getattr(dataset, "cache_files", None) or []]
    if not paths or getattr(dataset, "_indices", None) is not None:
        return None
    return paths


def file_batches(path: str) -> Iterator[pa.RecordBatch]:
    """The record batches of the Arrow stream file ``path``, one at a time, by plain reads (no memory map)."""
    with pa.OSFile(path, "rb") as fh:
        yield from pa.ipc.open_stream(fh)


def file_rows(path: str) -> int:
    """The rows of the Arrow stream file ``path``, counted batch by batch."""
    return sum(len(b) for b in file_batches(path))


def string_offsets(path: str, name: str) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
    """Per chunk of column ``name`` in the Arrow stream file ``path``: each row's byte position in the file, its
    byte length and whether it is null; ``None`` when the column is not a string column read in place from the
    file's bytes (compressed, say). The file is mapped while its offsets are read, then closed."""
    with open(path, "rb") as fh:
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return _read_offsets(mapped, name)
    finally:
        try:
            mapped.close()
        except BufferError:   # an Arrow buffer still points into the map: it is closed when that is freed
            pass


def _read_offsets(mapped: mmap.mmap, name: str) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
    """:func:`string_offsets` of a mapped file."""
    whole = pa.py_buffer(mapped)
    table = pa.ipc.open_stream(whole).read_all()
    if name not in table.column_names:
        return None
    out = []
    for chunk in table.column(name).chunks:
        if not (pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)):
            return None
        if not len(chunk):
            continue
        data = chunk.buffers()[2]
        if not whole.address <= data.address <= whole.address + whole.size:
            return None   # not read in place from the file: its bytes are elsewhere
        wide = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
        offsets = np.frombuffer(chunk.buffers()[1], dtype=wide)[chunk.offset:chunk.offset + len(chunk) + 1]
        offsets = offsets.astype(np.int64) + (data.address - whole.address)
        null = chunk.is_null().to_numpy(zero_copy_only=False) if chunk.null_count else np.zeros(len(chunk), bool)
        out.append((offsets[:-1], np.diff(offsets), null))
    return out

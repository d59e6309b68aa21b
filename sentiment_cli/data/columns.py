"""Which columns of a split hold the texts and the labels, and the check that every text is real text.

Columns: ``[data] text_column`` / ``label_column``, or when empty the one column named like
:data:`TEXT_COLUMNS` / :data:`LABEL_COLUMNS` (case-insensitive). Texts are checked in Arrow, without
making a Python string per row: a null, empty or whitespace-only text is an error naming its row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import DataError, UsageError
from ..wording import plural

TEXT_COLUMNS = ("text", "review", "sentence", "content")
LABEL_COLUMNS = ("label", "sentiment", "rating", "stars", "class")


def resolve_column(columns: Sequence[str], wanted: str, usual: Sequence[str], role: str, where: str) -> str:
    """The column holding the texts (``role="text"``) or labels (``"label"``) among ``columns``.

    ``wanted`` (from ``[data] text_column`` / ``label_column``) must be there; when it is empty, the
    one column whose name is one of ``usual`` (case-insensitive) is taken.

    Raises:
        UsageError: ``wanted`` is not a column.
        DataError: no column, or several, have a usual name; the message lists the columns found.
    """
    flag = f"--{role}-column NAME ([data] {role}_column)"
    found = ", ".join(columns) or "none"
    if wanted:
        if wanted not in columns:
            raise UsageError(f"{where}: no column {wanted!r} ({flag.replace('NAME', wanted)}); columns: {found}")
        return wanted
    hits = [c for c in columns if c.lower() in usual]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise DataError(f"{where}: no {role} column (looked for {', '.join(usual)}); name it with {flag}; "
                        f"columns: {found}")
    raise DataError(f"{where}: {len(hits)} columns could hold the {role}s ({', '.join(hits)}); choose one with "
                    f"{flag}; columns: {found}")


def find_text_column(columns: Sequence[str], wanted: str, where: str, type_of: Callable[[str], Any]) -> str:
    """The text column among ``columns``: ``wanted``, or the one named like a text column (:data:`TEXT_COLUMNS`),
    checked to hold strings (:func:`require_text` of ``type_of(column)``). What every reader of a split's texts
    uses: ``predict --data`` (``data/batches.py``), its Ray path (``inference/ray_predict.py``).

    Raises:
        UsageError: ``wanted`` is not a column.
        DataError: no column, or several, named like a text column; the column does not hold text.
    """
    column = resolve_column(list(columns), wanted, TEXT_COLUMNS, "text", where)
    require_text(column, type_of(column), where)
    return column


def feature_type(feature: Any) -> Any:
    """A ``datasets`` feature's type as :func:`require_text` reads it: a ``Value``'s dtype (``"string"``), else
    the feature itself."""
    return getattr(feature, "dtype", None) or feature


def require_text(column: str, kind: Any, where: str) -> None:
    """Refuse a column whose type ``kind`` (a ``datasets`` dtype or an Arrow type) is not ``string`` or
    ``large_string``.

    Raises:
        DataError: ``{where}: column 'x' holds int64, not text``.
    """
    if str(kind) not in ("string", "large_string"):
        raise DataError(f"{where}: column {column!r} holds {kind}, not text")


def check_text_column(ds, column: str, where: str):
    """Check that a text column holds strings, none null or blank; return it as a ``datasets.Dataset`` column.

    Raises:
        DataError: naming ``where`` and the first bad row.
    """
    import pyarrow.compute as pc

    require_text(column, feature_type(ds.features[column]), where)
    col = ds.data.column(column)   # Arrow, memory-mapped: checked without making Python strings
    if col.null_count:
        row = pc.indices_nonzero(pc.is_null(col))[0].as_py()
        raise DataError(f"{where}, row {row + 1}: no text (column {column!r} is empty; "
                        f"{plural(col.null_count, 'such row')})")
    from .text_column import TextColumn

    offset = 0
    for chunk in TextColumn(ds, column).arrow_chunks():   # chunk by chunk, read (not mapped): bounded memory
        blank = pc.or_(pc.equal(pc.utf8_length(chunk), 0), pc.utf8_is_space(chunk))
        if pc.any(blank).as_py():
            row = offset + pc.indices_nonzero(blank)[0].as_py()
            raise DataError(f"{where}, row {row + 1}: empty text (column {column!r} holds only whitespace)")
        offset += len(chunk)


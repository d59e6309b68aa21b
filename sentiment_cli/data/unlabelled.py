"""Unlabelled text for pretraining and distillation: the source's ``unsupervised`` split and ``[data] unlabelled``.

``[data] unlabelled`` (``sentiment train --unlabelled PATH``) names one of:

- a plain text file (``.txt``, or no suffix): one text per line, blank lines skipped;
- a file in one of the formats ``--data`` reads (CSV, TSV, JSON, JSON Lines, Parquet) with a text
  column (``[data] text_column``, or the one named like :data:`~.columns.TEXT_COLUMNS`); a label
  column there is ignored, and :func:`load_unlabelled` says so;
- a dataset folder, as ``--data`` reads it: its ``unsupervised`` split when it has one (IMDB's
  50,000 unlabelled reviews), else its ``train`` split's texts (never its test).

:func:`unlabelled_texts` joins the source's own ``unsupervised`` split and these texts; it is what
``[pretrain] splits`` calls ``unsupervised``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DataError
from .columns import LABEL_COLUMNS, TEXT_COLUMNS, resolve_column
from .sources import FILE_TYPES, Source, load_source

TEXT_SUFFIXES = ("", ".txt", ".text")
MAX_LINE_BYTES = 1 << 24   # a "line" longer than 16 MiB is not one text per line


@dataclass
class Unlabelled:
    """Texts without labels, and what to tell the user about how they were read.

    Attributes:
        texts: the texts, in file order.
        where: where they came from (a file, or ``folder: split 'name'``).
        notes: one-line remarks (e.g. a label column that was ignored).
    """

    texts: list[str]
    where: str
    notes: list[str] = field(default_factory=list)


def load_unlabelled(path: str, text_column: str = "", strict: bool = False) -> Unlabelled:
    """Read ``[data] unlabelled`` (see the module docstring).

    Args:
        path: the file or folder.
        text_column: the column holding the texts. Not ``strict`` (``train``: the labelled data's column),
            a file without it has its text column found by name; ``strict`` (``suggest --text-column``), it
            must be there.
        strict: see ``text_column``.

    Raises:
        UsageError: ``strict`` and the file has no column ``text_column``.
        DataError: the path does not exist or cannot be read, is not valid UTF-8, or holds no text.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(f"--unlabelled {path}: no such file or folder")
    if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES:
        return _text_lines(p, path)
    if p.is_file() and p.suffix.lower() not in FILE_TYPES:
        raise DataError(f"--unlabelled {path}: unsupported file type {p.suffix}; give a .txt file (one text per "
                        "line), a CSV, TSV, JSON, JSON Lines or Parquet file with a text column, or a dataset folder")
    src = load_source(str(p))
    split = "unsupervised" if "unsupervised" in src.splits else "train"
    if split not in src.splits:
        raise DataError(f"--unlabelled {path}: no 'unsupervised' or 'train' split (it has: {', '.join(src.splits)})")
    return _column_texts(src, split, text_column, path, strict)


def _text_lines(p: Path, shown: str) -> Unlabelled:
    """One text per line of a plain text file."""
    texts = []
    try:
        with open(p, "rb") as fh:
            for n, raw in enumerate(fh, 1):
                if len(raw) > MAX_LINE_BYTES:
                    raise DataError(f"--unlabelled {shown}, line {n}: longer than {MAX_LINE_BYTES:,} bytes; "
                                    "give one text per line")
                try:
                    line = raw.decode("utf-8-sig" if n == 1 else "utf-8").strip()
                except UnicodeDecodeError as exc:
                    raise DataError(f"--unlabelled {shown}, line {n}: not valid UTF-8 (byte {exc.start + 1})") from None
                if line:
                    texts.append(line)
    except OSError as exc:
        raise DataError(f"--unlabelled {shown}: cannot read it ({exc.strerror or exc})") from None
    if not texts:
        raise DataError(f"--unlabelled {shown}: no text in it")
    return Unlabelled(texts, shown)


def _column_texts(src: Source, split: str, text_column: str, shown: str, strict: bool) -> Unlabelled:
    """The non-blank texts of one split's text column; a label column is noted and ignored."""
    ds = src.splits[split]
    where = f"--unlabelled {src.where(split)}"
    # strict: the column named. Else the run's own text column when this file has it, else the one named
    # like a text column.
    wanted = text_column if strict or text_column in ds.column_names else ""
    column = resolve_column(ds.column_names, wanted, TEXT_COLUMNS, "text", where)
    notes = []
    labels = [c for c in ds.column_names if c.lower() in LABEL_COLUMNS and c != column]
    if labels and split != "unsupervised":
        notes.append(f"{where}: column {labels[0]!r} looks like labels; it is ignored (unlabelled text is read "
                     "for its words only)")
    texts = [t.strip() for t in ds[column] if isinstance(t, str) and t.strip()]
    if not texts:
        raise DataError(f"{where}: no text in column {column!r}")
    return Unlabelled(texts, src.where(split), notes)


def unlabelled_texts(source: Source, unlabelled: str, text_column: str = "") -> Unlabelled | None:
    """The run's unlabelled texts: ``source``'s ``unsupervised`` split, then ``[data] unlabelled``'s texts.

    Returns:
        :class:`Unlabelled`, or ``None`` when there are none.

    Raises:
        DataError: as :func:`load_unlabelled`; also no text column in the source's ``unsupervised`` split.
    """
    parts = []
    if "unsupervised" in source.splits:
        ds = source.splits["unsupervised"]
        where = source.where("unsupervised")
        column = resolve_column(ds.column_names, text_column, TEXT_COLUMNS, "text", where)
        parts.append(Unlabelled([t for t in ds[column] if isinstance(t, str) and t.strip()], where))
    if unlabelled:
        parts.append(load_unlabelled(unlabelled, text_column))
    if not parts:
        return None
    return Unlabelled([t for part in parts for t in part.texts], " + ".join(part.where for part in parts),
                      [note for part in parts for note in part.notes])

"""The files a command writes for the user (``--output``): where it may write, and how a file is put in place.

The rule every command follows (:func:`check_output`, called before any work): a command writes over an
existing file only with ``--force``, and never over its own input (a ``--data`` file, a file inside a
``--data`` folder, a checkpoint's files) or over anything that is not a regular file (a device such as
``/dev/sda``, a FIFO, a socket), ``--force`` or not. A file is written to a temporary file in the
same folder moved into place (:func:`atomic_file`), so a failed write leaves no half file and the old file as
it was; the one table writer, of CSV, JSON Lines or Parquet, is ``arrow_output.py``'s.

Imports neither torch nor the data libraries: the CLI checks an output name before loading anything.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .decoding import json_loads
from .errors import UsageError

TABLE_TYPES = (".csv", ".jsonl")   # what arrow_output.write_table writes; the suffix chooses the format


def check_output(path: str | Path, *, force: bool = False, option: str = "--output",
                 suffixes: Sequence[str] | None = None, inputs: Iterable[tuple[str, str | Path]] = ()) -> Path:
    """``path`` as a :class:`~pathlib.Path`, once it is known that the command may write a file there.

    Args:
        path: the file to write.
        force: an existing file may be replaced (never one of ``inputs``).
        option: the flag named in the messages.
        suffixes: the suffixes accepted (lower case, with the dot), or ``None`` for any.
        inputs: ``(what, path)`` of each thing the command reads, e.g. ``("--data", "reviews.csv")`` or
            ``("the checkpoint's", "ck/model.safetensors")``: a file that is never written over, or a folder
            nothing is written inside.

    Raises:
        UsageError: ``path`` is a folder, is in a folder that does not exist, has another suffix, is (or is
            inside) one of ``inputs``, is not a regular file (a device, FIFO or socket: ``os.replace`` would put a
            file in its place), or exists and ``force`` is not set.
    """
    p = Path(path)
    target = p.expanduser()
    if target.is_dir():
        raise UsageError(f"{option} {path}: is a folder; give a file name")
    if target.exists() and not target.is_file():
        raise UsageError(f"{option} {path}: not a regular file (a device, FIFO or socket); give a file name")
    if suffixes is not None and target.suffix.lower() not in suffixes:
        raise UsageError(f"{option} {path}: write {' or '.join(suffixes)} (the suffix chooses the format)")
    if not target.parent.is_dir():
        raise UsageError(f"{option} {path}: folder {p.parent} does not exist")
    for what, source in inputs:
        if _overlaps(target, Path(source).expanduser()):
            over = "into" if Path(source).expanduser().is_dir() else "over"
            raise UsageError(f"{option} {path}: would write {over} {what} {source}, which this command reads; "
                             "choose another file")
    if target.exists() and not force:
        raise UsageError(f"{option} {path}: the file exists; pass --force to replace it, or choose another name")
    return p


# What a folder made by this tool holds that marks it as such: a checkpoint's or pretrain folder's config.json
# (with its "format_version"), or only the lock and probe files a run that stopped early may leave.
_FOLDER_MARK = "config.json"
_RUN_LEFTOVERS = (".sentiment.lock", ".write-test-")


def check_output_folder(path: str | Path, *, force: bool = False, option: str = "--output",
                        inputs: Iterable[tuple[str, str | Path]] = ()) -> Path:
    """``path`` as a :class:`~pathlib.Path`, once it is known that a command may write a folder of files there
    (``train --output``, ``pretrain --output``): a folder that does not exist yet, an empty folder, or one an
    earlier run of this tool made (its ``config.json`` holds ``"format_version"``); any other existing folder
    only with ``force``. Never one of ``inputs`` (a ``--data`` folder or file, ``--init``), an existing folder
    inside one, or a folder holding one, ``force`` or not (a new folder inside a data folder is allowed: its
    files are read by no one). Reads no data.

    Args:
        path: the folder to write.
        force: write into an existing folder this tool did not make.
        option: the flag named in the messages.
        inputs: ``(what, path)`` of each thing the command reads (paths that do not exist, e.g. Hub ids, are
            skipped).

    Raises:
        UsageError: ``path`` is or is inside one of ``inputs``, holds one of ``inputs``, or is a non-empty
            folder this tool did not make and ``force`` is not set; the message names up to three of its files.
            (A file, or a folder that cannot be written: ``checkpoint.check_writable``.)
    """
    p = Path(path)
    target = p.expanduser()
    for what, source in inputs:
        if _writes_into(target, Path(source).expanduser()):
            raise UsageError(f"{option} {path}: would write into {what} {source}, which this command reads; "
                             "choose another folder")
    if target.is_dir() and not force and not _made_by_us(target):
        names = sorted(e.name for e in target.iterdir() if not e.name.startswith(_RUN_LEFTOVERS))
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise UsageError(f"{option} {path}: the folder holds files this command did not write ({shown}); "
                         "pass --force to write into it, or choose a new folder")
    return p


def _writes_into(target: Path, source: Path) -> bool:
    """Whether writing a folder of files at ``target`` would write over or beside ``source``'s files: ``target``
    is ``source`` (a folder, or a file by any name), an existing folder inside it (part of the data: a split's
    folder), or a folder holding it. A new folder inside a data folder is not: nothing there is read."""
    if not source.exists():
        return False
    if target.exists() and os.path.samefile(target, source):
        return True
    t, s = target.resolve(), source.resolve()
    return t == s or (target.exists() and (t.is_relative_to(s) or s.is_relative_to(t)))


def _made_by_us(folder: Path) -> bool:
    """Whether ``folder`` is empty (but for a stopped run's lock and probe files) or holds a ``config.json``
    this tool wrote (a JSON object with ``"format_version"``)."""
    if all(e.name.startswith(_RUN_LEFTOVERS) for e in folder.iterdir()):
        return True
    mark = folder / _FOLDER_MARK
    try:
        if not mark.is_file() or mark.stat().st_size > 1 << 24:
            return False
        data = json_loads(mark.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "format_version" in data


def _overlaps(target: Path, source: Path) -> bool:
    """Whether writing ``target`` would change ``source``: the same file (by any name or link), or a file
    inside the folder ``source``."""
    if not source.exists():
        return False
    if target.exists() and os.path.samefile(target, source):
        return True
    if source.is_dir():
        return target.resolve().is_relative_to(source.resolve())
    return target.resolve() == source.resolve()


@contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """A temporary file beside ``path`` to write; moved onto ``path`` when the block ends without an error,
    deleted when it raises (or is interrupted), so ``path`` is never left half written.

    Yields:
        The temporary file's path (it exists, empty, with the usual file mode).

    Raises:
        OSError: the folder is not writable; or, from the block, a write failed (a full disk), re-raised with
            ``path`` as its ``filename`` so that the message names the file.
    """
    p = Path(path).expanduser()
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())   # mkstemp makes 0600; give the usual file mode
        yield Path(tmp)
        os.replace(tmp, p)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None or exc.filename == tmp:   # e.g. a full disk: name the file the user asked for
            raise OSError(exc.errno, exc.strerror or " ".join(str(exc).split())[:200], str(p)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

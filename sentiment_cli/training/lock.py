"""One writer per output folder: an exclusive lock that ``train`` (``--resume`` too) and ``pretrain`` hold.

The lock is ``flock(2)`` on :data:`LOCK_FILE` inside the folder. The kernel holds it for the open file,
so it is released when the process ends however it ends, SIGKILL included: there is no stale lock to
clear by hand. The holder writes its pid into the file, only to name it in the refusal; the OS lock, not
the file's presence or content, decides. A run that ends normally removes the file (while still holding
the lock; a process that opened it meanwhile sees it gone and retries on the new one); a killed run
leaves it, empty of meaning, and the next run takes it over.

A lock taken with ``share=True`` is re-entered by this process's later ``output_lock`` calls on the folder:
``train`` holds its output folder's lock from before the data is read to the end, across the search, whose
final run and adoption take it again (a count, not a second ``flock``, which would refuse its own holder).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import SentimentError, UsageError

LOCK_FILE = ".sentiment.lock"
_ATTEMPTS = 50   # a file replaced under us that often in a row is not a race any more
_HELD: dict[str, int] = {}   # folders this process holds with share=True (resolved path -> depth)


class FolderInUse(SentimentError):
    """Another process is writing into the output folder (exit 1)."""


@contextmanager
def output_lock(folder: Path, *, enabled: bool = True, share: bool = False) -> Iterator[None]:
    """Hold the exclusive lock on ``folder`` (an existing folder) for the ``with`` block.

    Args:
        folder: the run's output folder.
        enabled: ``False`` makes this a no-op (torchrun ranks other than 0: rank 0 locks for the run).
        share: calls of this process on ``folder`` within the block enter it instead of refusing.

    Raises:
        FolderInUse: another process holds the lock; the message names its pid.
        UsageError: the lock file cannot be created or locked (e.g. a read-only folder).
    """
    if not enabled:
        yield
        return
    key = str(Path(folder).resolve())
    if key in _HELD:   # this process holds it already (train around the search's runs)
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    fd = _acquire(Path(folder))
    if share:
        _HELD[key] = 1
    try:
        yield
    finally:
        _HELD.pop(key, None)
        _release(Path(folder), fd)


def _acquire(folder: Path) -> int:
    """Open, lock and claim ``folder``'s lock file; its descriptor.

    Raises:
        FolderInUse, UsageError: as :func:`output_lock`.
    """
    path = folder / LOCK_FILE
    for _ in range(_ATTEMPTS):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise UsageError(f"cannot create the lock file {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise FolderInUse(f"output folder {folder} is in use by another run (pid {holder}); wait for it "
                              "to end, stop it, or choose another output folder") from None
        except OSError as exc:
            os.close(fd)
            raise UsageError(f"cannot lock {path}: {exc.strerror}") from None
        if _same_file(path, fd):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
            return fd
        os.close(fd)   # its holder removed that file as it released it: lock the one there now
    raise FolderInUse(f"output folder {folder}: its lock file {LOCK_FILE} keeps being replaced; another "
                      "process is using the folder")


def _holder(fd: int) -> str:
    """The pid the holder wrote into the lock file, or ``unknown`` (not written yet, or not a pid)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return "unknown"
    return text if text.isdigit() else "unknown"


def _same_file(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _release(folder: Path, fd: int) -> None:
    """Remove the lock file (still holding the lock, so no other process can have claimed it), then unlock."""
    try:
        if _same_file(folder / LOCK_FILE, fd):
            os.unlink(folder / LOCK_FILE)
    except OSError:
        pass   # the folder was removed or made read-only under us: closing still releases the lock
    finally:
        os.close(fd)

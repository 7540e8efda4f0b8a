"""Writing an output file atomically, and telling a failed write from a bug.

Every file a command writes (`serq sample -o`, `serq run --records/--states`, `serq oracle run
-o`, `serq oracle agreement --json`) goes through `atomic_write`: the content goes to a temporary
file beside the target, which is renamed over the target only when the whole content was
written. An interrupted or failed run (Ctrl-C, a run-time error, a full disk) therefore never
leaves a file that looks complete, and never destroys the file that was there before.

A target that exists and is not a regular file (`/dev/null`, `/dev/stdout`, a named pipe) is
written in place: renaming over a device would replace the device.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from typing import IO, Iterator

# errno values of a write that failed for a reason outside the program: the device is full, the
# quota is used up, the file is too large, the device failed
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS}


def is_write_failure(exc: BaseException) -> bool:
    """Is EXC a write that failed (full device, quota, I/O error) rather than a bug?"""
    return isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS


def _in_place(path: str) -> bool:
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return False


def _mode_for(path: str) -> int:
    """The permission bits the target keeps (or a new file gets under the umask)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


class AtomicFile:
    """PATH's new content, written to a temporary file beside it (`.fh`); `commit()` renames it
    over PATH, `discard()` removes it and leaves PATH as it was. A target that is not a regular
    file is written in place (commit and discard only close it)."""

    def __init__(self, path: str, mode: str = "w", **open_kw):
        self.path = path
        self.tmp: str | None = None
        self.fh: IO | None = None
        if _in_place(path):
            self.fh = open(path, mode, **open_kw)
            return
        folder = os.path.dirname(os.path.abspath(path))
        fd, self.tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".partial", dir=folder)
        try:
            self.fh = os.fdopen(fd, mode, **open_kw)
        except BaseException:
            os.close(fd)
            self.discard()
            raise

    def commit(self) -> None:
        try:
            self.fh.flush()
            if self.tmp is not None:
                os.fsync(self.fh.fileno())
            self.fh.close()
            if self.tmp is not None:
                os.chmod(self.tmp, _mode_for(self.path))
                os.replace(self.tmp, self.path)
                self.tmp = None
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        if self.fh is not None:
            with contextlib.suppress(OSError):
                self.fh.close()
        if self.tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp)
            self.tmp = None


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", **open_kw) -> Iterator[IO]:
    """A file object to write PATH's new content to; PATH is replaced when the block ends
    normally, untouched when it raises (the temporary file is removed)."""
    f = AtomicFile(path, mode, **open_kw)
    try:
        yield f.fh
    except BaseException:
        f.discard()
        raise
    f.commit()


def write_text(path: str, text: str) -> None:
    with atomic_write(path, "w", encoding="utf-8") as fh:
        fh.write(text)


@contextlib.contextmanager
def replacing(path: str) -> Iterator[str]:
    """A temporary path beside PATH for a library that writes to a path itself (Parquet, a
    figure): it becomes PATH when the block ends normally and is removed when it raises."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=os.path.splitext(path)[1] + ".partial",
                               dir=folder)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, _mode_for(path))
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)

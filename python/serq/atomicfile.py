"""Writing a file so that a reader never sees half of it: a temporary file in the same folder,
then one rename over the target (os.replace is atomic on POSIX and Windows within a volume)."""

from __future__ import annotations

import os
import tempfile


def write_text_atomic(path: str, text: str) -> None:
    """Write TEXT (UTF-8) to PATH atomically; OSError when the folder cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600; a written file gets the usual mode
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise

"""Writing a file atomically: into a temporary file in the same folder, renamed over the target
only once it is complete, so a reader (or a rerun after a kill) never sees half a file."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager


@contextmanager
def replacing(path: str):
    """Yield a temporary path beside PATH; when the block ends without an exception it becomes
    PATH (os.replace), otherwise it is removed."""
    folder = os.path.dirname(path) or "."
    base = os.path.basename(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{base}.", suffix=os.path.splitext(path)[1] + ".tmp")
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)

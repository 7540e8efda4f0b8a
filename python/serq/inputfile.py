"""Reading an input file within limits: a program, a trace CSV, and every JSON input (an IR
file, a sessions file, a scenario, an oracle trace).

A file given on the command line (or named by `use` / `trace`) may be anything: a device that never ends (`/dev/zero`), a
gzip bomb, 100,000 nested `[`, a number with 5,000 digits. Python's `json` reads the first
until memory runs out, recurses on the nesting until RecursionError, and stops at an integer of
more than 4300 digits with a ValueError that names no file. Every JSON input is therefore read
here, once, and refused with a one-line reason when it breaks one of the documented limits
(docs/frontend.md "Limits"):

- only regular files (no devices, pipes or folders), named by a path without a NUL byte;
- a program's source files at most MAX_SOURCE_BYTES bytes together;
- any other input at most MAX_INPUT_BYTES bytes, also after gunzipping (the committed traces
  are < 1 MB);
- nesting at most MAX_JSON_DEPTH deep;
- JSON integers of at most MAX_JSON_INT_DIGITS digits, numbers within binary64's range, and no
  `NaN` / `Infinity` (not JSON).

`serq.sessionsfile.read_json_file` turns a refusal into the SerqError the CLIs print.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
import zlib
from typing import Any

MAX_SOURCE_BYTES = 1 * 2**20
MAX_INPUT_BYTES = 256 * 2**20
MAX_JSON_DEPTH = 10_000
MAX_JSON_INT_DIGITS = 1000


class InputError(ValueError):
    """Why an input file was not read (the message names no file: the caller does)."""


def open_regular(path: str, mode: str = "rb"):
    """PATH opened for reading; InputError unless it is a regular file (a device, a pipe or a
    folder could be endless or block)."""
    if "\0" in os.fspath(path):
        raise InputError("cannot read: the path holds a NUL byte")
    try:
        fh = open(path, mode)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fh.fileno())
    except OSError as exc:
        fh.close()
        raise InputError(f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        fh.close()
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, pipe or socket)"
        raise InputError(f"cannot read: it is {kind}; give a regular file")
    return fh


def read_bytes(path: str, limit: int | None = None) -> bytes:
    """The bytes of the regular file PATH, refused past `limit` bytes (MAX_INPUT_BYTES) before
    reading them all."""
    limit = MAX_INPUT_BYTES if limit is None else limit
    with open_regular(path) as fh:
        try:
            raw = fh.read(limit + 1)
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise InputError(f"the file is larger than the limit of {_size(limit)}")
    return raw


def gunzip(raw: bytes, limit: int | None = None) -> bytes:
    """RAW itself, or its gzip content when it starts with the gzip magic, stopping past `limit`
    bytes of output (MAX_INPUT_BYTES; a small gzip bomb can expand a thousandfold)."""
    limit = MAX_INPUT_BYTES if limit is None else limit
    if raw[:2] != b"\x1f\x8b":
        return raw
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise InputError(f"broken gzip data: {exc}") from None
    if len(out) > limit:
        raise InputError(f"the gzip content is larger than the limit of {_size(limit)}")
    if not d.eof:
        raise InputError("broken gzip data: the stream is cut short")
    return out


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n} bytes"


def _too_deep(text: str, limit: int) -> bool:
    """Does TEXT nest arrays and objects deeper than `limit`? (strings skipped: they may hold
    brackets). Linear; only the bracket characters are looked at one by one."""
    import re

    brackets = re.sub(r'"(?:[^"\\]|\\.)*"?|[^\[\]{}"]+', "", text, flags=re.S)
    depth = 0
    for c in brackets:
        if c in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def _int(s: str) -> int:
    if len(s.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise InputError(f"an integer of {len(s.lstrip('-'))} digits (the limit is {MAX_JSON_INT_DIGITS})")
    return int(s)


def _float(s: str) -> float:
    x = float(s)
    if math.isinf(x):
        raise InputError(f"the number {s[:20]}{'…' if len(s) > 20 else ''} is beyond the range of "
                             "binary64 (about 1.8e308)")
    return x


def _constant(s: str):
    raise InputError(f"{s} is not JSON (JSON has no NaN or infinity)")


def parse(raw: bytes) -> Any:
    """The JSON value in RAW (UTF-8); InputError for bytes that are not UTF-8, text that is
    not JSON, or a limit broken."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not JSON: not UTF-8 text (byte {exc.start})") from None
    if _too_deep(text, MAX_JSON_DEPTH):
        raise InputError(f"nested deeper than the limit of {MAX_JSON_DEPTH} arrays or objects")
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, MAX_JSON_DEPTH + 2000))  # json's decoder recurses per level
    try:
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except InputError:
        raise
    except ValueError as exc:  # JSON syntax
        raise InputError(f"not JSON: {exc}") from None
    finally:
        sys.setrecursionlimit(old)


def read(path: str, gzip_ok: bool = False) -> Any:
    """The JSON value in the file PATH (gzipped or plain when `gzip_ok`), within the limits."""
    raw = read_bytes(path)
    if gzip_ok:
        raw = gunzip(raw)
    return parse(raw)

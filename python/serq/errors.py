"""The one error type of the front-end.

Every problem with a program (unreadable file, syntax, linking, a bad `--set`, a bad trace row)
is a `SerqError` carrying where it is (file, 1-based line and column) and what is wrong. The CLI
prints it as `FILE:LINE:COLUMN: error: message`, then the source line and a caret.
"""

from __future__ import annotations

import contextlib
import sys

#: The Python recursion limit while a command compiles and runs a program. The linker and both
#: engines walk expressions and statements recursively, and the parser admits syntax nested up to
#: `parser.MAX_NESTING` (5,000) levels; Python's default of 1,000 frames failed a 400-term sum. Some
#: of these frames use the C stack too (calls through `*args`, generators), so the limit stays far
#: below what overflows the 8 MiB main-thread stack (a 20,000-deep `else if` chain crashed at a
#: limit of 50,000; at 20,000 it is a RecursionError, reported as an error).
RECURSION_LIMIT = 20_000


@contextlib.contextmanager
def deep_recursion():
    """Room for programs nested up to the parser's limit: RECURSION_LIMIT for the duration."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, RECURSION_LIMIT))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


class SerqError(Exception):
    """A located error in a serQ program (or in its command-line settings when `file` is None)."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None,
                 column: int | None = None, source_line: str | None = None):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.column = column
        self.source_line = source_line
        self.more: list[SerqError] = []  # further errors found in the same pass
        self.about: str | None = None

    def location(self) -> str:
        if self.file is None:
            return "serq"
        if self.line is None:
            return self.file
        return f"{self.file}:{self.line}:{self.column or 1}"

    def render(self) -> str:
        """`FILE:LINE:COLUMN: error: message`, then the source line and a caret under the column."""
        out = f"{self.location()}: error: {self.message}"
        if self.source_line is not None and self.line is not None:
            text, col = shown_line(self.source_line.rstrip("\r\n").expandtabs(1), max(1, self.column or 1))
            out += "\n  " + text + "\n  " + " " * (col - 1) + "^"
        for other in self.more:
            out += "\n" + other.render()
        return out

    def __str__(self) -> str:
        return f"{self.location()}: {self.message}"


# A source line is echoed under its error; a binary file read as a program can make that line
# megabytes long and full of terminal control sequences, so only a window around the column is
# shown and every character that is not printable is shown as `?` (one for one: the caret stays
# under its column).
SHOWN_LINE_WIDTH = 120


def shown_line(text: str, col: int) -> tuple[str, int]:
    """(the part of TEXT to echo, the caret's column in it)."""
    text = "".join(c if c.isprintable() else "?" for c in text)
    if len(text) <= SHOWN_LINE_WIDTH:
        return text, col
    start = max(0, min(col - 1 - SHOWN_LINE_WIDTH // 2, len(text) - SHOWN_LINE_WIDTH))
    window = text[start:start + SHOWN_LINE_WIDTH]
    head = "…" if start > 0 else ""
    tail = "…" if start + SHOWN_LINE_WIDTH < len(text) else ""
    return head + window + tail, col - start + len(head)

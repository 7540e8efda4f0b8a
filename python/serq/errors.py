"""The one error type of serQ and its one renderer.

Every problem with a program (unreadable file, syntax, linking, a bad `--set`, a bad trace row)
is a `SerqError` carrying where it is (file, 1-based line and column) and what is wrong. So is a
run-time error of either engine by the time a command prints it: `serq_spec`'s `SpecError` and
`serq_fast`'s `RunError` hold an IR position ([FILE_INDEX, LINE, COLUMN], docs/ir.md), which
`SerqError.at_ir` names through the IR's `files`. Every command prints an error with
`print_error`: `FILE:LINE:COLUMN: error: message` (the compiler convention: editors jump to the
position at the start of the line), then the source line and a caret when the text is at hand;
`serq: error: message` when the error has no position; exit code 2.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Optional, Sequence

#: The exit code of every command for bad input or a run-time error (1 is a divergence).
EXIT_ERROR = 2

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

    @classmethod
    def at_ir(cls, message: str, at: Optional[Sequence[Any]], files: Optional[Sequence[str]]) -> "SerqError":
        """MESSAGE at the IR position AT ([FILE_INDEX, LINE, COLUMN] or None), its file named
        through FILES (the IR's `files`)."""
        file, line, column = ir_position(at, files)
        return cls(message, file, line, column)

    def location(self) -> str:
        return location_text(self.file, self.line, self.column)

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


def location_text(file: Optional[str], line: Optional[int] = None, column: Optional[int] = None) -> str:
    """`FILE:LINE:COLUMN`, `FILE` when there is no line, `serq` when there is no file (an
    option, a `--set`): the head of every error line."""
    if file is None:
        return "serq"
    if line is None:
        return file
    return f"{file}:{line}:{column or 1}"


def ir_position(at: Optional[Sequence[Any]], files: Optional[Sequence[str]]) -> tuple[Optional[str], Optional[int], Optional[int]]:
    """(file, line, column) of an IR position [FILE_INDEX, LINE, COLUMN] (docs/ir.md); the file
    is `<file I>` when FILES does not name index I, the line None when the IR gives none."""
    if not at:
        return None, None, None
    index, line, column = at
    if files and isinstance(index, int) and 0 <= index < len(files):
        file = files[index]
    else:
        file = f"<file {index}>"
    if not isinstance(line, int) or isinstance(line, bool):  # a statement without a position
        return file, None, None
    return file, line, column if isinstance(column, int) else None


def ir_location(at: Optional[Sequence[Any]], files: Optional[Sequence[str]]) -> str:
    """`FILE:LINE:COLUMN` of an IR position, for a message that points at a second place."""
    if not at:
        return "<unknown location>"
    return location_text(*ir_position(at, files))


def source_names(files: Optional[Sequence[str]], path: str) -> list[str]:
    """The names under which errors show an IR's source files (its `files`: paths relative to the
    main file's folder, docs/ir.md) when the program was read from PATH: as the front-end shows
    them, the main file as PATH was given and the others beside it. An IR read from a `.json`
    file keeps its own names (where its sources are is not known); an IR without files is PATH."""
    if not files:
        return [path]
    if path.endswith(".json"):
        return list(files)
    folder = os.path.dirname(path)
    return [path] + [os.path.normpath(os.path.join(folder, f)) for f in files[1:]]


def number_text(x: Any) -> str:
    """A value in a run-time error message, as the fast engine's floats print (`2.0`, `-0.25`,
    `inf`): the exact spec shows the nearest double of its rational, so that both engines word
    the same fault alike (a value beyond the doubles' range keeps its exact text)."""
    try:
        return repr(float(x))
    except OverflowError:
        return str(x)


def print_error(exc: SerqError) -> int:
    """Print EXC as every command prints an error (to standard error); the exit code, 2."""
    print(exc.render(), file=sys.stderr)
    return EXIT_ERROR


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

"""The errors of the executable semantics: each stops a run with a clear message (docs/spec.md)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

#: An IR source location: the triple [FILE_INDEX, LINE, COLUMN] (docs/ir.md), or None.
At = Optional[Sequence[Any]]


class SpecError(Exception):
    """A run-time error of the semantics (docs/language.md §11.9 guards), with the source location if known."""

    named = False   # expr.evaluate put the name of what was evaluated in front of the message

    def __init__(self, message: str, at: At = None, files: Sequence[str] | None = None) -> None:
        self.message = message
        self.at = at
        self.files = files
        super().__init__(self.render())

    def render(self) -> str:
        return f"{where(self.at, self.files)}: error: {self.message}" if self.at else f"error: {self.message}"


class NotSupported(SpecError):
    """A construct the front-end accepts but serq_spec does not implement yet."""

    def __init__(self, construct: str, at: At = None, files: Sequence[str] | None = None) -> None:
        self.construct = construct
        super().__init__(f"not supported by serq_spec yet: {construct}", at, files)

    def render(self) -> str:
        loc = where(self.at, self.files) if self.at else "<unknown location>"
        return f"error: not supported by serq_spec yet: {self.construct} at {loc}"


class SessionsFileError(SpecError):
    """A sessions file that is malformed or does not fit the program (docs/sessions.md)."""


class InvariantViolation(SpecError):
    """An invariant of docs/language.md §11 broken after a step (invariants.py)."""

    def __init__(self, step: int, problems: list[str], state: str) -> None:
        self.step = step
        self.problems = problems
        self.state = state
        SpecError.__init__(self, f"invariant violated after step {step}: " + "; ".join(problems)
                           + "\nstate: " + state)


def where(at: At, files: Sequence[str] | None) -> str:
    """`file:line:col` of an IR `at` triple [FILE_INDEX, LINE, COLUMN]."""
    if not at:
        return "<unknown location>"
    f, line, col = at
    name = files[f] if files and isinstance(f, int) and 0 <= f < len(files) else f"<file {f}>"
    if line == "?":
        return f"{name} (the IR gives no line for this construct)"
    return f"{name}:{line}:{col}"

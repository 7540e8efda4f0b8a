"""The errors of the executable semantics: each stops a run with a clear message (docs/spec.md)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from serq.errors import SerqError

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

    def located(self, files: Sequence[str] | None = None) -> SerqError:
        """This error as every command prints it (serq.errors): its `at` named through FILES
        (the names the command shows, serq.errors.source_names), else through the IR's file
        list it was raised with."""
        return SerqError.at_ir(self.message, self.at, files if files is not None else self.files)

    def render(self) -> str:
        return self.located().render()


class NotSupported(SpecError):
    """A construct the front-end accepts but serq_spec does not implement yet."""

    def __init__(self, construct: str, at: At = None, files: Sequence[str] | None = None) -> None:
        self.construct = construct
        super().__init__(f"not supported by serq_spec yet: {construct}", at, files)


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


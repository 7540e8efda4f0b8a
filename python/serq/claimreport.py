"""A claim's tally and its report entry (docs/language.md §11.9 "Claims", docs/report.md
`claims`), shared by both engines: serq_spec tallies exact times, serq_fast floats."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass
class ClaimTally:
    """One claim's counts so far: points met (iterations of its engine; the end), of them checked
    (`given` 1), of those where the claim was 1 / 0, and the time of the first of each."""
    iterations: int = 0
    checked: int = 0
    held: int = 0
    violated: int = 0
    first_held: Optional[Any] = None
    first_violated: Optional[Any] = None

    def counts(self) -> list[int]:
        """The four counts (the state line's `claims` row, docs/state.md)."""
        return [self.iterations, self.checked, self.held, self.violated]

    def point(self, now, checked: bool, held: bool) -> None:
        """Count one point at time `now`."""
        self.iterations += 1
        if not checked:
            return
        self.checked += 1
        if held:
            self.held += 1
            if self.first_held is None:
                self.first_held = now
        else:
            self.violated += 1
            if self.first_violated is None:
                self.first_violated = now


def result(kind: str, t: ClaimTally) -> str:
    """holds / fails (every, at end), witnessed / not_witnessed (some); not_evaluated when there
    was no point, out_of_scope when `given` excluded every point."""
    if t.iterations == 0:
        return "not_evaluated"
    if t.checked == 0:
        return "out_of_scope"
    if kind == "some":
        return "witnessed" if t.held else "not_witnessed"
    return "fails" if t.violated else "holds"


def claim_entry(cl: dict, stage_name: Optional[str], t: ClaimTally, time: Callable[[Any], Any]) -> dict:
    """One report entry; `time` maps a time to the report's type (a wire string, a float)."""
    r = result(cl["kind"], t)
    return {"name": cl["name"], "kind": cl["kind"], "stage": stage_name, "result": r,
            "holds": r in ("holds", "witnessed"), "iterations": t.iterations, "checked": t.checked,
            "held": t.held, "violated": t.violated,
            "first_held": None if t.first_held is None else time(t.first_held),
            "first_violated": None if t.first_violated is None else time(t.first_violated)}

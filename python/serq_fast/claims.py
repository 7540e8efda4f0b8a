"""Claims in serq_fast (docs/language.md §11.9 "Claims"), as serq_spec checks them: an iteration
claim is read when its engine's batch is formed, in the `execute` context (engine.Engine._form),
an `at end` claim once when the run is over. Every iteration must be seen, so a program with
iteration claims runs without the decode fast-forward (docs/fast.md).

serq_spec counterpart: `serq_spec/claims.py` (the same tallies, `serq.claimreport`).
"""

from __future__ import annotations

from serq.claimreport import ClaimTally, claim_entry
from serq_fast.expr import RunError, at_text, compile_expr
from serq_fast.sources import no_draw


def _truth(v: float, what: str, at) -> bool:
    if v == 0:
        return False
    if v == 1:
        return True
    raise RunError(f"{what} must be 0 or 1, got {v} at {at_text(at)}")   # as guards (serq.errors.number_text)


class Claims:
    """The program's claims: compiled expressions and one tally each."""

    def __init__(self, ir: dict, sim) -> None:
        self.decls = ir.get("claims", [])
        self.tallies = [ClaimTally() for _ in self.decls]
        compiled = [(c, None if cl["given"] is None else compile_expr(cl["given"], sim), compile_expr(cl["expr"], sim))
                    for c, cl in enumerate(self.decls)]
        self.of_stage: dict[int, list] = {}
        for row in compiled:
            st = self.decls[row[0]]["stage"]
            if st is not None:
                self.of_stage.setdefault(st, []).append(row)
        self.at_end = [row for row in compiled if self.decls[row[0]]["kind"] == "end"]
        self.iterations = bool(self.of_stage)   # iteration claims: no fast-forward

    def _point(self, row, cx, now: float) -> None:
        c, given, body = row
        what = f"claim {self.decls[c]['name']}"
        at = self.decls[c].get("at")
        checked = given is None or _truth(given(cx), f"{what}: `given`", at)
        self.tallies[c].point(now, checked, checked and _truth(body(cx), what, at))

    def iteration(self, stage: int, cx, now: float) -> None:
        """An iteration of engine `stage` starts; cx is its `execute` context."""
        for row in self.of_stage.get(stage, ()):
            self._point(row, cx, now)

    def end(self, sim) -> None:
        """The run is over: the `at end` claims on the final state (no session, no engine)."""
        cx = sim.cx
        saved = (cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job)
        cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job = [], None, no_draw, None, {}, None
        try:
            for row in self.at_end:
                if self.tallies[row[0]].iterations == 0:
                    self._point(row, cx, sim.now)
        finally:
            cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job = saved

    def entries(self, stage_names: list[str]) -> list[dict]:
        """The report's `claims` (docs/report.md), times as floats."""
        return [claim_entry(cl, None if cl["stage"] is None else stage_names[cl["stage"]], t, float)
                for cl, t in zip(self.decls, self.tallies)]

"""Claims (docs/language.md "Claims"): `every` / `some iteration of S (e)`, checked at each
iteration of engine S once its batch is formed (the Step moment, with the `execute` values), and
`at end (e)`, checked once after the run; each with an optional `given (g)` under which it is
checked. A tally per claim lives in the Config (it is state: lockstep compares it, docs/state.md);
`claim_results` turns the tallies into the report's `claims` entries (docs/report.md).
"""

from __future__ import annotations

from typing import Optional

from .config import ClaimTally
from .expr import Env, evaluate
from .values import truth, wire


def tally(cfg, c: int, given, body, what: str) -> None:
    """Count one evaluation point of claim c at cfg.now: `given` and `body` are thunks."""
    t = cfg.claims[c]
    t.iterations += 1
    if given is not None and not truth(given(), f"{what}: `given`"):
        return
    t.checked += 1
    if truth(body(), what):
        t.held += 1
        if t.first_held is None:
            t.first_held = cfg.now
    else:
        t.violated += 1
        if t.first_violated is None:
            t.first_violated = cfg.now


def check_iteration(cfg, e: int, env) -> None:
    """At an iteration of engine e that starts (its batch formed; env is the `execute` env)."""
    for c, cl in enumerate(cfg.program.claims):
        if cl["stage"] == e:
            given = None if cl["given"] is None else (lambda cl=cl: evaluate(cl["given"], env))
            tally(cfg, c, given, lambda cl=cl: evaluate(cl["expr"], env), f"claim {cl['name']}")


def check_end(cfg) -> None:
    """After the run: every `at end` claim, read on the final state (no session, no engine)."""
    for c, cl in enumerate(cfg.program.claims):
        if cl["kind"] == "end" and cfg.claims[c].iterations == 0:
            env = Env(cfg, what=f"claim {cl['name']}")
            given = None if cl["given"] is None else (lambda cl=cl: evaluate(cl["given"], env))
            tally(cfg, c, given, lambda cl=cl: evaluate(cl["expr"], env), f"claim {cl['name']}")


def result(kind: str, t: ClaimTally) -> str:
    """docs/language.md "Claims": holds / fails (every, at end), witnessed / not_witnessed (some);
    not_evaluated when there was no point to check, out_of_scope when `given` excluded them all."""
    if t.iterations == 0:
        return "not_evaluated"
    if t.checked == 0:
        return "out_of_scope"
    if kind == "some":
        return "witnessed" if t.held else "not_witnessed"
    return "fails" if t.violated else "holds"


def claim_entry(cl: dict, stage_name: Optional[str], t: ClaimTally, time) -> dict:
    """One report entry; `time` maps a time value to the report's number type."""
    r = result(cl["kind"], t)
    return {"name": cl["name"], "kind": cl["kind"], "stage": stage_name, "result": r,
            "holds": r in ("holds", "witnessed"), "iterations": t.iterations, "checked": t.checked,
            "held": t.held, "violated": t.violated,
            "first_held": None if t.first_held is None else time(t.first_held),
            "first_violated": None if t.first_violated is None else time(t.first_violated)}


def claim_results(cfg) -> list[dict]:
    """The report's `claims` (docs/report.md), times as wire strings; call after `check_end`."""
    stages = cfg.program.stages
    return [claim_entry(cl, None if cl["stage"] is None else stages[cl["stage"]]["name"], cfg.claims[c], wire)
            for c, cl in enumerate(cfg.program.claims)]

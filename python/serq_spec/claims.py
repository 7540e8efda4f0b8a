"""Claims in serq_spec (docs/language.md §11.9 "Claims"): `every` / `some iteration of E (e)`,
checked at each iteration of engine E once its batch is formed (the Step moment, with what
`execute` reads), and `at end (e)`, checked once after the run; `given (g)` decides whether a
point is checked. The tallies (serq.claimreport) are part of the Config: lockstep compares them
(docs/state.md); `claim_results` gives the report's `claims` entries (docs/report.md)."""

from __future__ import annotations

from serq.claimreport import claim_entry

from .config import Config
from .expr import Env, evaluate
from .values import truth, wire


def tally(cfg: Config, c: int, env: Env) -> None:
    """Count one point of claim c at cfg.now, its expressions read in env."""
    cl = cfg.program.claims[c]
    what = f"claim {cl['name']}"
    at = cl.get("at")   # a value that is not 0 or 1 is an error at the claim
    checked = cl["given"] is None or truth(evaluate(cl["given"], env), f"{what}: `given`", at)
    cfg.claims[c].point(cfg.now, checked, checked and truth(evaluate(cl["expr"], env), what, at))


def check_iteration(cfg: Config, e: int, env: Env) -> None:
    """At an iteration of engine e that starts (its batch formed; env is the `execute` env)."""
    for c, cl in enumerate(cfg.program.claims):
        if cl["stage"] == e:
            tally(cfg, c, env)


def check_end(cfg: Config) -> None:
    """After the run: every `at end` claim, read on the final state (no session, no engine)."""
    for c, cl in enumerate(cfg.program.claims):
        if cl["kind"] == "end" and cfg.claims[c].iterations == 0:
            tally(cfg, c, Env(cfg, what=f"claim {cl['name']}"))


def claim_results(cfg: Config) -> list[dict]:
    """The report's `claims` (docs/report.md), times as wire strings; call after `check_end`."""
    stages = cfg.program.stages
    return [claim_entry(cl, None if cl["stage"] is None else stages[cl["stage"]]["name"], cfg.claims[c], wire)
            for c, cl in enumerate(cfg.program.claims)]

"""Shared by the spec tests: run a program text through serq_spec on a freshly sampled workload."""

from __future__ import annotations

from serq.frontend import compile_source
from serq_spec.program import Program
from serq_spec.sample import sample
from serq_spec.step import run
from serq_spec.workload import Workload


def run_text(text: str, sessions: int, seed: int = 0):
    """The final Config and every `observe` record as (name, serial, time, value) (client records
    left out), invariants checked."""
    return run_ir(compile_source(text, "t.sq", {}), sessions, seed)


# Hand-written IR for what the linker refuses (the engines keep their run-time errors as a guard
# for IR documents not made by the front-end).

def compile_growing_on_every_run(text: str, pool: int = 0) -> dict:
    """`text` compiled, then every run made `growing` on pool index `pool` (the linker refuses
    `growing` on a non-step stage, docs/language.md §11.6)."""
    ir = compile_source(text, "t.sq", {})
    stack = [ir]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            if o.get("op") == "run":
                o["growing"] = pool
            stack.extend(o.values())
        elif isinstance(o, list):
            stack.extend(o)
    return ir


def compile_advance_only_into_admit(text: str) -> dict:
    """`text` compiled, then each engine's `advance running only (e)` moved to its `admit waiting
    only (…)` (the linker refuses per-request keys there, docs/language.md §4.5)."""
    ir = compile_source(text, "t.sq", {})
    for st in ir["stages"]:
        sched = st.get("schedule") or []
        adv = next(s for s in sched if s["op"] == "advance")
        adm = next(s for s in sched if s["op"] == "admit")
        adm["only"], adv["only"] = adv["only"], None
    return ir


def run_ir(ir: dict, sessions: int, seed: int = 0):
    """run_text for an IR document."""
    prog = Program(ir, "t.sq", workload=Workload.replay(sample(ir, seed, sessions, "t.sq")))
    lines = []
    cfg = run(prog, on_step=lambda c, r, k: lines.append(r), check=True)
    names = set(ir["observes"])
    return cfg, [(o[0], o[1], o[3], o[4]) for r in lines for o in r["observations"] if o[0] in names]

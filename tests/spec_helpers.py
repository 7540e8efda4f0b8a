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
    ir = compile_source(text, "t.sq", {})
    prog = Program(ir, "t.sq")
    prog.workload_data = Workload.replay(sample(ir, seed, sessions, "t.sq"))
    lines = []
    cfg = run(prog, on_step=lambda c, r, k: lines.append(r), check=True)
    names = set(ir["observes"])
    obs = [(o[0], o[1], o[3], o[4]) for r in lines for o in r["observations"] if o[0] in names]
    return cfg, obs

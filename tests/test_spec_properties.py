"""Property test: the spec runs random small programs (tests/strategies.py) with every invariant
checked after every step. Set SERQ_LONG=1 for the long profile."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings

from serq.frontend import compile_source
from serq_spec.program import Program
from serq_spec.sample import sample
from serq_spec.step import run
from serq_spec.workload import Workload

from strategies import queue_programs, routing_programs, vllm_programs

LONG = bool(os.environ.get("SERQ_LONG"))
PROFILE = dict(max_examples=400 if LONG else 25, deadline=None, derandomize=not LONG,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
MAX_STEPS = 4000


def replay(case):
    """Sample the case's sessions file, then replay it with the invariants on (they raise)."""
    ir = compile_source(case.text, case.name, {})
    data = sample(ir, case.seed, case.sessions, case.name, max_steps=MAX_STEPS)
    prog = Program(ir, case.name, workload=Workload.replay(data))
    return run(prog, max_steps=MAX_STEPS, check=True)


@settings(**PROFILE)
@given(vllm_programs())
def test_vllm_fragment_keeps_invariants(case):
    cfg = replay(case)
    for s in cfg.sessions:
        assert s.status[0] in ("ended", "queued", "growing", "stage")
    # with a unit or positive cost and room for every request, a run ends with every session done
    # unless a `preempt none` growth stalled forever
    if "preempt lifo" in case.text and "granule" not in case.text and not cfg.events:
        assert all(s.status[0] == "ended" for s in cfg.sessions), case


@settings(**PROFILE)
@given(queue_programs())
def test_queue_programs_keep_invariants(case):
    cfg = replay(case)
    assert not cfg.events and all(s.status[0] == "ended" for s in cfg.sessions)


@settings(**PROFILE)
@given(routing_programs())
def test_routing_programs_keep_invariants(case):
    cfg = replay(case)
    assert not cfg.events and all(s.status[0] == "ended" for s in cfg.sessions)

"""The Config holds the whole state: serialising it to canonical JSON and reading it back gives
a configuration that steps exactly like the original (every tie-break counter is in it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serq.frontend import load_program
from serq_spec.config import from_json
from serq_spec.program import Program
from serq_spec.step import initial, step
from serq_spec.workload import Workload

VEC = Path(__file__).resolve().parent.parent / "vectors" / "spec"


@pytest.mark.parametrize("name", ["s1111_preemption", "lru_release_order", "ps_departure_clock",
                                  "forced_miss", "preempt_head_requeue", "cache_trace",
                                  "content_shared_prefix", "content_duplicate_identity", "fork_join",
                                  "async_speculative_outcome"])
def test_round_trip_at_every_step(name):
    prog = Program(load_program(str(VEC / name / "program.sq"), {}), workload=Workload.replay(json.loads((VEC / name / "sessions.json").read_text())))
    cfg, _ = initial(prog)
    steps = 0
    while True:
        text = cfg.canonical()
        back = from_json(prog, json.loads(text))
        assert back.canonical() == text
        nxt, rec = step(cfg)
        nxt2, rec2 = step(back)
        if rec is None:
            assert rec2 is None
            break
        assert nxt2.canonical() == nxt.canonical(), f"step {steps}"
        cfg = nxt
        steps += 1
    assert steps >= 3

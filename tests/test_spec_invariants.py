"""The invariant checker (issue item 4) catches seeded violations: corrupted configurations and a
fault injected into the semantics itself."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from serq.frontend import load_program
from serq_spec import pools, sessions
from serq_spec.config import Entry, QueueItem
from serq_spec.errors import InvariantViolation
from serq_spec.invariants import check_invariants
from serq_spec.program import Program
from serq_spec.step import run
from serq_spec.workload import Workload

VEC = Path(__file__).resolve().parent.parent / "vectors" / "spec"


def program(name="s1111_preemption"):
    prog = Program(load_program(str(VEC / name / "program.sq"), {}), workload=Workload.replay(json.loads((VEC / name / "sessions.json").read_text())))
    return prog


def mid_run(steps=5):
    """A healthy configuration: two residents decoding, both holding kv and reqs."""
    cfg = run(program(), max_steps=steps)
    assert check_invariants(cfg) == []
    return cfg


def test_healthy_run_has_no_violation():
    cfg = run(program(), check=True)
    assert check_invariants(cfg) == []


def test_used_not_sum_of_allocations():
    cfg = mid_run()
    cfg.pools[0].used += 16
    assert any("sum of holders' allocations" in p for p in check_invariants(cfg))


def test_used_plus_cached_above_cap():
    cfg = mid_run()
    cfg.pools[0].entries.append(Entry(7, 48, cfg.now, 99))
    assert any("> cap" in p for p in check_invariants(cfg))


def test_residents_out_of_admission_order():
    cfg = mid_run()
    jobs = cfg.stages[0].jobs
    jobs.reverse()
    assert any("admission order" in p for p in check_invariants(cfg))


def test_session_in_two_places():
    cfg = mid_run()
    cfg.pools[1].queue.append(QueueItem(0, cfg.now, False))
    assert any("session 0" in p for p in check_invariants(cfg))


def test_negative_quantity():
    cfg = mid_run()
    cfg.stages[0].jobs[0].left = -1
    assert any("negative" in p for p in check_invariants(cfg))


def test_time_going_back():
    cfg = mid_run()
    assert any("time went back" in p for p in check_invariants(cfg, previous_now=cfg.now + 1))


def test_holders_order():
    cfg = mid_run()
    cfg.pools[0].holders.reverse()
    assert any("holders" in p for p in check_invariants(cfg))


def test_injected_fault_stops_the_run_with_step_and_state(monkeypatch):
    """make_room that evicts nothing: an admission then breaks used + cached <= cap; the run stops."""
    # make_room returns the copies of spilled chunks (docs/language.md §11.8.1): none here
    monkeypatch.setattr(sessions, "make_room", lambda cfg, p, need: [])
    monkeypatch.setattr(pools, "make_room", lambda cfg, p, need: [])   # growth (pools.add_units)
    with pytest.raises(InvariantViolation) as err:
        run(program("lru_release_order"), check=True)
    assert err.value.step > 0
    assert "> cap" in str(err.value)
    assert '"pools"' in err.value.state


def test_injected_release_fault_is_caught(monkeypatch):
    """A release that forgets to remove the holder breaks `holders` / `used` bookkeeping."""
    original = pools.release_hold

    def leaky(cfg, session, hold, preempted):
        original(cfg, session, hold, preempted)
        cfg.pools[hold.pools[-1]].used += 1
    monkeypatch.setattr(sessions, "release_hold", leaky)
    with pytest.raises(InvariantViolation) as err:
        run(program("zero_work"), check=True)
    assert "sum of holders' allocations" in str(err.value)


def test_position_beyond_allocation():
    cfg = mid_run()
    h = cfg.sessions[0].holds[-1]
    i = h.pools.index(0)
    h.position[i] = h.alloc[i] + 1
    assert any("beyond its allocation" in p for p in check_invariants(cfg))


def test_iteration_serving_a_non_resident():
    cfg = mid_run()
    it = cfg.stages[0].iteration
    assert it is not None
    it["assign"][0].serial = 42
    assert any("no resident" in p for p in check_invariants(cfg))


def leasing():
    """The vector lease_pins_allocation after step 4 (t = 3): session 0 leases 4 units of mem
    (t = inf), session 2 leases 4 until 7/2 (a pending `lease_end`)."""
    cfg = run(program("lease_pins_allocation"), max_steps=4)
    assert [(x.serial, x.ends_at) for x in cfg.pools[0].leases] == [(0, None), (2, Fraction(7, 2))]
    assert check_invariants(cfg) == []
    return cfg


@pytest.mark.parametrize("corrupt,message", [
    (lambda cfg: setattr(cfg.pools[0], "used", cfg.pools[0].used - 4), "sum of holders' allocations and leases"),
    (lambda cfg: setattr(cfg, "events", [e for e in cfg.events if e.kind != "lease_end"]), "lease_end events"),
    (lambda cfg: setattr(cfg.pools[0].leases[0], "ends_at", Fraction(9)), "lease_end events"),
    (lambda cfg: cfg.pools[0].leases.append(cfg.pools[0].leases[0]), "two leases"),
])
def test_lease_violations_are_caught(corrupt, message):
    cfg = leasing()
    corrupt(cfg)
    assert any(message in p for p in check_invariants(cfg)), check_invariants(cfg)

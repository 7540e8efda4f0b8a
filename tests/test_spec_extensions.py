"""Constructs the spec once refused: `admit waiting only (…)`, `reserve held`, preemption in a
pool that is no engine's memory. Expected values derived by hand in each docstring."""

from __future__ import annotations

import pytest

from serq_spec.errors import SpecError
from serq_spec.step import run

from spec_helpers import compile_advance_only_into_admit, run_ir, run_text


ONLY = """
fn main() {
  device d { kv cap 1600; }
  pool kv on d { block 16; }
  engine e on d {
    reqs cap 4;
    tokens cap 16;
    request (p, q) {
      prefill (p) growing kv;
      decode (q - 1) growing kv;
    }
    schedule {
      advance running;
      admit waiting only (ONLY) taking reqs (1), kv (min(p, budget_left(e))) reserve (p);
    }
    execute (1);
  }
  pool reqs on e { queue fifo; }
  workload { arrive batch(3); }
  server { e (serial == 1 ? 8 : 4, 1); observe t = now; }
}"""


def test_admit_waiting_only_blocks_at_an_excluded_head():
    """`admit waiting only (p < 6)`; prompts 4, 8, 4 (serials 0, 1, 2), output 1, budget 16,
    execute 1. Iteration 1 at t = 0: head 0 (p = 4 < 6) is admitted, prefills 4 tokens (left 12);
    head 1 (p = 8) is excluded: it is not admitted and, as a head that does not fit, stops
    admission (head of line) — serial 2 (p = 4) behind it is NOT admitted although it would
    qualify and fit. IterEnd at 1: serial 0's prefill completes, decode(0) is zero work, it
    observes t = 1 and ends. Then head 1 is still excluded: no tokens, no preemption → no
    iteration; no event is left. Result: one observation (0, 1); serials 1, 2 stay queued on reqs.
    (Under the other reading — skip an excluded head — serial 2 would also finish at t = 1.)"""
    cfg, obs = run_text(ONLY.replace("ONLY", "p < 6"), 3)
    assert [(s, v) for n, s, _t, v in obs if n == "t"] == [(0, 1)]
    assert [q.serial for q in cfg.pools[1].queue] == [1, 2]
    assert cfg.sessions[1].status[0] == cfg.sessions[2].status[0] == "queued"


def test_admit_waiting_only_true_admits_everyone():
    """`only (1)` is no restriction: iteration 1 at t = 0 admits 0, 1, 2 (4 + 8 + 4 = 16 tokens =
    the budget); all finish at IterEnd t = 1 (output 1: no decode)."""
    cfg, obs = run_text(ONLY.replace("ONLY", "1"), 3)
    assert sorted((s, v) for n, s, _t, v in obs if n == "t") == [(0, 1), (1, 1), (2, 1)]


# `admit waiting only (remaining < 6)`, by compile_advance_only_into_admit
ONLY_REMAINING = ONLY.replace("advance running;", "advance running only (remaining < 6);").replace("ONLY", "1")


def test_admit_waiting_only_refuses_per_request_keys():
    """A waiting head has no run: `decoding`, `admission`, `remaining` have no value there (an
    error, docs/language.md §4.5: the per-request keys are a resident's). The linker refuses it
    (tests/test_linker.py); hand-written IR stops the run."""
    with pytest.raises(SpecError, match="a waiting head has no run"):
        run_ir(compile_advance_only_into_admit(ONLY_REMAINING), 3)


HELD = """
fn main() {
  pool m { cap 10; HELD }
  stage s : delay;
  workload { arrive batch(2); }
  server {
    run s (serial);
    hold m (serial == 0 ? 2 : 4) reserve (serial == 0 ? 8 : 4) {
      grow m (serial == 0 ? 3 : 0);
      run s (10);
    }
    observe t = now;
  }
}"""


def test_reserve_held_counts_unallocated_reservations():
    """Pool m, cap 10, `reserve held`. Session 0 (t = 0) asks units 2, reserve 8: need
    max(2, 8) = 8, used 0 + 0 + 8 ≤ 10 → admitted with alloc 2 (used 2, its unallocated
    reservation 8 − 2 = 6); it grows by 3 at once (used 5, alloc 5, unallocated 8 − 5 = 3), then
    runs 10 s (to t = 10). Session 1 arrives at the hold at t = 1: units 4, reserve 4, need 4:
    used 5 + held 3 + 4 = 12 > 10 → waits; at t = 10 session 0 releases (used 0, nothing held):
    0 + 0 + 4 ≤ 10 → admitted, ends at t = 20. Observations: (0, 10), (1, 20).
    Without `reserve held`: 5 + 4 = 9 ≤ 10 → session 1 admitted at t = 1, ends at t = 11."""
    _cfg, obs = run_text(HELD.replace("HELD", "reserve held;"), 2)
    assert sorted((s, v) for n, s, _t, v in obs if n == "t") == [(0, 10), (1, 20)]
    _cfg, obs = run_text(HELD.replace("HELD", ""), 2)
    assert sorted((s, v) for n, s, _t, v in obs if n == "t") == [(0, 10), (1, 11)]


def test_reserve_held_ends_when_the_allocation_reaches_it():
    """Session 0 with reserve 6 and growth 4: alloc 2 + 4 = 6 = its reserve, so nothing of it stays
    held (max(0, 6 − 6) = 0). Session 1 at t = 1: used 6 + held 0 + 4 = 10 ≤ 10 → admitted at
    t = 1, ends at t = 11; session 0 ends at t = 10."""
    text = HELD.replace("HELD", "reserve held;").replace("8 : 4", "6 : 4").replace("3 : 0", "4 : 0")
    _cfg, obs = run_text(text, 2)
    assert sorted((s, v) for n, s, _t, v in obs if n == "t") == [(0, 10), (1, 11)]


PREEMPT = """
fn main() {
  pool m { cap 10; PREEMPT }
  stage s : delay;
  workload { arrive batch(2); }
  server {
    hold m (4) {
      set tries = tries + 1;
      run s (0);
      branch (serial == 0) { run s (0); }
      grow m (serial == 1 && tries == 1 ? 6 : 0);
      run s (10);
    }
    observe t = now;
  }
}"""


def test_preemption_in_a_free_pool_takes_a_ready_holder():
    """Pool m (cap 10, no engine's memory), `preempt by (serial)`. At t = 0, ready = [0, 1].
    0: hold m(4) (used 4), tries 1, `run s (0)` yields → ready [1, 0]. 1: hold m(4) (used 8),
    tries 1, `run s (0)` yields → [0, 1]. 0: the branch's `run s (0)` yields → [1, 0].
    1: grow m(6): 8 + 6 = 14 > 10 → victims: holders of m in a scope and not in a delay — 0
    (ready) and 1 (itself); least key serial → 0 is preempted: computed = its position 0, its
    hold released (used 4), it leaves `ready` and goes back to the head of m's queue; then
    4 + 6 = 10 ≤ 10: 1's allocation is 10; 1 runs s(10) → t = 10, observes 10, releases (used 0).
    Settle at 10: head 0 fits (4), re-runs its body: tries 2, two zero runs, grow 0, s(10) →
    observes t = 20. preemptions = 1, record [0, "m", 0]."""
    cfg, obs = run_text(PREEMPT.replace("PREEMPT", "preempt by (serial);"), 2)
    assert sorted((s, v) for n, s, _t, v in obs if n == "t") == [(0, 20), (1, 10)]
    assert cfg.pools[0].preemptions == 1


def test_preemption_in_a_free_pool_spares_a_holder_in_a_delay():
    """Same program, `preempt lifo`, but session 0 takes no second zero run: the `branch` is for
    serial 5 (nobody). t = 0: 0 holds m(4), yields; 1 holds m(4) (used 8), yields; 0: grow 0,
    run s(10) → in a delay until 10. 1: grow m(6): 14 > 10 → candidates: 0 is in a delay inside
    its hold → not a victim; 1 itself (latest admitted) → 1 preempts itself: computed 0, released
    (used 4), head of m's queue; the growth fails. Settle: m admits its head 1 (4 + 4 = 8 ≤ 10)
    at t = 0: tries 2 → grow 0, s(10) → t = 10. Session 0 also ends at 10.
    Observations (0, 10), (1, 10); preemptions = 1."""
    text = PREEMPT.replace("PREEMPT", "preempt lifo;").replace("serial == 0)", "serial == 5)")
    cfg, obs = run_text(text, 2)
    assert sorted((s, v) for n, s, _t, v in obs if n == "t") == [(0, 10), (1, 10)]
    assert cfg.pools[0].preemptions == 1


EXCLUSIVE_PREEMPT = """
fn main() {
  device d { kv cap 64; }
  pool kv on d { block 16; preempt lifo; }
  engine e on d {
    tokens cap 64;
    reqs cap 8;
    request (p, q) {
      prefill (p) growing kv;
      decode (q - 1) growing kv;
    }
    schedule { exclusive prefill; admit waiting taking reqs (1), kv (p); }
    execute (1);
  }
  pool reqs on e { queue fifo; }
  workload { arrive batch(2); }
  server { e (16, 40); observe t = now; }
}"""


def test_exclusive_prefill_does_not_serve_a_decode_preempted_in_the_same_iteration():
    """Blocks of 16, 4 of them. t = 0: 0 is admitted (kv 16) and prefills 16 alone; t = 1: 1 is
    admitted with the full budget and its prefill replaces 0's tentative decode; from t = 2 both
    decode, 1 token each, each growing to 2 blocks (all 4 used). The iteration at t = 18: 0 is at
    position 32 and needs a third block: lifo preempts 1 (latest admission; computed 32, its 32
    units released), 0 grows. 1 is no longer a resident: it gets no token in that iteration, whose
    batch is [0] alone (§11.6: the residents as they stand now). On main before the fix the decodes
    were served from a snapshot and the run crashed on the preempted one."""
    from serq.frontend import compile_source
    from serq_spec.program import Program
    from serq_spec.sample import sample
    from serq_spec.workload import Workload

    ir = compile_source(EXCLUSIVE_PREEMPT, "t.sq", {})
    prog = Program(ir, "t.sq", workload=Workload.replay(sample(ir, 0, 2, "t.sq")))
    lines = []
    run(prog, on_step=lambda c, r, k: lines.append(r), check=True)
    first = next(r for r in lines if r["preempted"])
    assert first["preempted"] == [[1, "kv", 32]]
    assert [(i["start"], i["assign"]) for i in first["iterations"]] == [(18, [[0, "decode", 1]])]

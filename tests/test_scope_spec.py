"""Constructs the front-end accepts that serq_spec used to refuse (issue 3): their semantics, with
the expected values derived by hand in each docstring (docs/spec.md "Ambiguities resolved")."""

from __future__ import annotations

from fractions import Fraction

from spec_helpers import compile_growing_on_every_run, run_ir, run_text

# A plain run on a step engine is served as a prefill (chunks up to the budget; it counts in
# batch.prefilled): session 0 runs 6 tokens growing kv (block 4), session 1 one token.
PLAIN_GROWING = """
fn main() {
  device d { kv cap 64; }
  pool kv on d { block 4; }
  engine e on d {
    tokens cap 4;
    schedule { advance running; admit waiting; }
    execute (1 + batch.prefilled);
  }
  workload { arrive batch(2); }
  server {
    hold kv (0) { run e (serial == 0 ? 6 : 1) growing kv; }
    observe t = now;
  }
}"""

PLAIN_BARE = """
fn main() {
  device d { kv cap 64; }
  engine e on d {
    tokens cap 2;
    schedule { advance running; admit waiting; }
    execute (1);
  }
  workload { arrive batch(1); }
  server { run e (5); observe t = now; }
}"""


def test_plain_run_on_engine_is_served_as_a_prefill():
    """t = 0: residents s0 (6 left), s1 (1 left), budget 4: s0 takes min(6, 4) = 4 tokens (grows
    kv to 4), the budget is spent; cost 1 + prefilled 4 = 5. t = 5: s0 takes 2 (grows to 8), s1
    takes 1 (grows to 4), prefilled 3, cost 4: both finish at 9. (Were the plain tokens not
    counted as prefilled, the iterations would cost 1 each and end at 1 and 2.)"""
    cfg, obs = run_text(PLAIN_GROWING, 2)
    assert sorted((s, v) for _n, s, _t, v in obs) == [(0, 9), (1, 9)]
    assert cfg.pools[0].used == 0 and cfg.pools[0].cached() == 0


def test_plain_run_without_hold():
    """5 tokens, budget 2, cost 1: chunks 2, 2, 1 at t = 0, 1, 2; done at 3."""
    _cfg, obs = run_text(PLAIN_BARE, 1)
    assert [(s, v) for _n, s, _t, v in obs] == [(0, 3)]


# Non-whole pool amounts: cap 7.5, block 1.5 (docs/spec.md "Non-whole pool amounts").
FRACTIONAL = """
fn main() {
  pool m { cap 7.5; block 1.5; }
  stage s : delay;
  workload { arrive batch(3); }
  server {
    hold m (serial == 0 ? 2.5 : serial == 1 ? 4 : 6) { run s (1); } cache (2.9)
    observe c = cachedin(m);
    observe u = used(m);
  }
}"""


def test_non_whole_pool_amounts():
    """t = 0: s0 takes roundup(2.5) = 3 (two blocks of 1.5), s1 roundup(4) = 4.5; 7.5 = cap, so s2
    (6) waits. t = 1: s0 releases caching round_down(min(2.9, 3)) = 1.5 and observes c = 3/2,
    u = 9/2 (s1 still holds); s1 releases likewise (c = 3/2, u = 0); then s2 is admitted: used 0
    + cached 3 + 6 > 7.5, so one block of 1.5 is evicted from the least recent entry, s0's, which
    goes. t = 2: s2 caches 1.5 (c = 3/2, u = 0). Final cache: s1 and s2, 1.5 each."""
    cfg, obs = run_text(FRACTIONAL, 3)
    got = sorted((s, n, t, v) for n, s, t, v in obs)
    h, q = Fraction(3, 2), Fraction(9, 2)
    assert got == [(0, "c", 1, h), (0, "u", 1, q), (1, "c", 1, h), (1, "u", 1, 0),
                   (2, "c", 2, h), (2, "u", 2, 0)]
    assert sorted((e.owner, e.size) for e in cfg.pools[0].entries) == [(1, h), (2, h)]
    assert cfg.pools[0].evicted_units == h


def test_state_line_amounts_are_ints_when_whole():
    """docs/state.md: pool amounts are JSON ints when whole and "p/q" otherwise. After step 1 of
    FRACTIONAL (s0 released at t = 1): used 9/2, cached 3/2, s0's entry 3/2, released 3/2."""
    import json

    from serq.frontend import compile_source
    from serq_drt.lockstep import sample_sessions, spec_lines

    ir = compile_source(FRACTIONAL, "t.sq", {})
    lines = [json.loads(x) if isinstance(x, str) else x for x in spec_lines(ir, sample_sessions(ir, 0, 3, "t.sq"), "t.sq")]
    pool = lines[1]["pools"][0]
    assert (pool["used"], pool["cached"], pool["entries"][0][1]) == ("9/2", "3/2", "3/2")
    assert lines[1]["records"]["released"] == [[0, "m", "3/2"]]
    assert lines[-1]["pools"][0]["used"] == 0   # whole: an int, as before


# Preemption, in a pool that is no engine's memory, of a holder that is a job of a fifo / ps
# stage: it leaves the stage, its work dropped (docs/spec.md "Ambiguities resolved").
STAGE_VICTIM = """
fn main() {
  pool m { cap 10; preempt by (serial); }
  stage s : delay;
  stage f : KIND;
  workload { arrive batch(3); }
  server {
    run s (serial == 1 ? 1 : 0);
    branch (serial == 2) { run f (4); } else {
      hold m (4) { grow m (serial == 1 ? 6 : 0); run f (10); }
    }
    observe t = now;
  }
}"""


def test_fifo_job_preempted_leaves_the_stage():
    """t = 0: s2 reaches f first (its hold-free branch runs before s0's hold is admitted in the
    pool pass): 4 s of service; s0 holds m(4) and joins f with 10 s. t = 1: s1 holds m(4) (used
    8) and grows 6: 14 > 10, victim by serial = s0, a job of f: it leaves f, its hold released
    (used 4), re-queued at the head of m; s1 grows to 10 and joins f with 10 s.
    fifo(1): s0 was waiting behind s2 and leaves the queue; s2 ends at 4, s1 serves 4–14, then
    s0 is re-admitted and serves 14–24.
    fifo(2): s0 was in service (to 10): its finish is withdrawn; s1 takes the free server, 1–11;
    s2 ends at 4; s0 is re-admitted at 11 and serves 11–21."""
    cfg, obs = run_text(STAGE_VICTIM.replace("KIND", "fifo(1)"), 3)
    assert sorted((s, v) for _n, s, _t, v in obs) == [(0, 24), (1, 14), (2, 4)]
    assert cfg.pools[0].preemptions == 1
    cfg, obs = run_text(STAGE_VICTIM.replace("KIND", "fifo(2)"), 3)
    assert sorted((s, v) for _n, s, _t, v in obs) == [(0, 21), (1, 11), (2, 4)]
    assert cfg.pools[0].preemptions == 1


def test_ps_job_preempted_leaves_the_stage():
    """ps(1). t = 0: s2 (tag 4) and s0 (tag 10) share rate 1/2; s2's departure at 8. t = 1:
    s1 grows, victim s0: the clock is advanced to v = 1/2 and s0 leaves; s1 joins with tag
    1/2 + 10 = 21/2; rate 1/2, s2 departs at 1 + (4 − 1/2)·2 = 8. t = 8: v = 4, s1 alone at rate
    1 departs at 8 + 13/2 = 29/2. Then s0 is admitted and runs alone: 29/2 + 10 = 49/2."""
    cfg, obs = run_text(STAGE_VICTIM.replace("KIND", "ps(1)"), 3)
    assert sorted((s, v) for _n, s, _t, v in obs) == [(0, Fraction(49, 2)), (1, Fraction(29, 2)), (2, 8)]
    assert cfg.pools[0].preemptions == 1


# Two engines share the memory pool kv: b's growth preempts a's resident while a's iteration is
# in flight.
IN_FLIGHT = """
fn main() {
  device d { kv cap 8; }
  pool kv on d { block 4; preempt lifo; }
  engine a on d { tokens cap 4; schedule { advance running; admit waiting; } execute (10); }
  engine b on d { tokens cap 4; schedule { advance running; admit waiting; } execute (1); }
  workload { arrive batch(2); }
  server {
    hold kv (0) {
      observe c = computed;
      branch (serial == 0) { run b (8) growing kv; } else { run a (4) growing kv; }
    }
    observe t = now;
  }
}"""


def test_resident_of_an_iteration_in_flight_leaves_it():
    """t = 0: a serves s1 4 tokens (kv 4, ends at 10); b serves s0 4 (kv 8, ends at 1). t = 1:
    s0 needs a second block: 12 > 8, lifo victim = s1 (admitted last), a resident of a's batch in
    flight: it leaves that batch, its position back to 0 (computed = 0), its hold released (kv 4)
    and re-queued; s0 grows to 8 (ends at 2). t = 2: s0 done (t = 2), s1 re-admitted (c = 0),
    resident of a, whose iteration — now empty — still ends at 10. t = 10: a serves s1's 4 tokens,
    done at 20. (Were the assignment left in a's batch, s1's new run would lose its 4 tokens at
    10 and end there; were the position not restored, c would be 4.)"""
    cfg, obs = run_text(IN_FLIGHT, 2)
    assert sorted((s, n, v) for n, s, _t, v in obs) == [(0, "c", 0), (0, "t", 2), (1, "c", 0), (1, "c", 0),
                                                        (1, "t", 20)]
    assert cfg.pools[0].preemptions == 1


def test_growing_on_a_non_step_stage_is_an_error():
    """A growing run advances a position by the tokens an engine serves; a fifo serves none. The
    linker refuses it (tests/test_linker.py); hand-written IR stops the run."""
    import pytest
    from serq_spec.errors import NotSupported, SpecError

    with pytest.raises(SpecError, match=r"t.sq:6:\d+: error: `growing` needs an engine \(a step stage\), not stage f") as e:
        run_ir(compile_growing_on_every_run(GROWING_FIFO), 1)
    assert not isinstance(e.value, NotSupported)


def test_non_integer_engine_work_is_an_error():
    """Tokens are whole: a run of 5/2 tokens on an engine stops the run where it is written."""
    import pytest

    from serq_spec.errors import NotSupported, SpecError
    with pytest.raises(SpecError, match=r"t.sq:\d+:\d+: error: engine e: run work must be a whole number of tokens, got 2.5") as e:
        run_text(PLAIN_BARE.replace("run e (5)", "run e (2.5)"), 1)
    assert not isinstance(e.value, NotSupported)


# made `growing m` by compile_growing_on_every_run (the linker refuses it)
GROWING_FIFO = """
fn main() {
  pool m { cap 10; }
  stage f : fifo;
  workload { arrive batch(1); }
  server { hold m (2) { run f (5); } observe t = now; }
}"""


def test_cache_minus_inf_keeps_nothing():
    """`cache (ℓ)` keeps round_down(min(ℓ, computed)): with ℓ = −inf that is below 0, so nothing
    (§11.4); +inf keeps the computed amount, here the allocation 4."""
    text = """
fn main() {
  pool m { cap 8; }
  stage s : delay;
  workload { arrive batch(1); }
  server { hold m (4) { run s (1); } cache (ELL) observe c = cachedin(m); }
}"""
    _cfg, obs = run_text(text.replace("ELL", "-inf"), 1)
    assert [v for _n, _s, _t, v in obs] == [0]
    _cfg, obs = run_text(text.replace("ELL", "inf"), 1)
    assert [v for _n, _s, _t, v in obs] == [4]


# a hold whose consumed own prefix on n (4) exceeds its units there (1), preempted through m
ABOVE_ALLOC = """
fn main() {
  pool m { cap 10; preempt by (serial); }
  pool n { cap 4; }
  stage f : fifo(3);
  stage d : delay;
  workload { arrive batch(3); }
  server {
    branch (serial == 0) {
      hold n (4) { load n (4); run f (1); } cache (4);
      hold m (1), n (1) { observe c = cached; run f (10); } cache (4);
    } else {
      branch (serial == 1) {
        run d (3);
        hold m (1) { grow m (9); run f (1); }
      } else {
        run d (2);
        hold n (3) { run f (20); }
      }
    }
  }
}"""


def test_a_position_above_the_allocation_caches_at_most_the_allocation():
    """t = 1: s0's first hold caches 4 on n; its second hold consumes them (c = 4), allocates 1 on
    n, and its position on n starts at 4. t = 2: s2 takes n (3): n is full (used 4). t = 3: s1's
    `grow m (9)` needs 9 with m at 2 of 10: victim s0 (least serial). Its release frees 1 on n and
    keeps min(4, position 4, allocation 1) = 1 (keeping 4 would make used 3 + cached 4 > cap 4).
    t = 4: s1 done; s0 re-admitted, consumes 1 (c = 1); done at 14, keeping its allocations (1, 1)."""
    cfg, obs = run_text(ABOVE_ALLOC, 3)
    assert [(s, t, v) for n, s, t, v in obs if n == "c"] == [(0, 1, 4), (0, 4, 1)]
    assert cfg.pools[0].preemptions == 1
    assert [(e.owner, e.size) for e in cfg.pools[1].entries] == [(0, 1)]

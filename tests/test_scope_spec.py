"""Constructs the front-end accepts that serq_spec used to refuse (issue 3): their semantics, with
the expected values derived by hand in each docstring (docs/spec.md "Ambiguities resolved")."""

from __future__ import annotations

from fractions import Fraction

from spec_helpers import run_text

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
    from serq_fast.lockstep import sample_sessions, spec_lines

    ir = compile_source(FRACTIONAL, "t.sq", {})
    lines = [json.loads(x) if isinstance(x, str) else x for x in spec_lines(ir, sample_sessions(ir, 0, 3, "t.sq"), "t.sq")]
    pool = lines[1]["pools"][0]
    assert (pool["used"], pool["cached"], pool["entries"][0][1]) == ("9/2", "3/2", "3/2")
    assert lines[1]["records"]["released"] == [[0, "m", "3/2"]]
    assert lines[-1]["pools"][0]["used"] == 0   # whole: an int, as before

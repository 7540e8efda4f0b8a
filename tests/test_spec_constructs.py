"""Constructs outside the vLLM request: `release`, hold rejection, `choose`, engine registers.
Expected values derived by hand in each docstring."""

from __future__ import annotations



from spec_helpers import run_text


def test_release_frees_a_pool_early():
    """Session 0 holds a(1), b(3) and releases b after 1 s: session 1 (waiting for b, cap 3) is
    admitted at 1 instead of 2; it ends at 1 + 2 = 3 (session 0 at 2)."""
    cfg, obs = run_text("""
fn main() {
  pool a { cap 4; }
  pool b { cap 3; }
  stage s : delay;
  workload { arrive batch(2); }
  server {
    hold a (1), b (3) { run s (1); release b; run s (1); }
    observe t = now;
  }
}""", 2)
    assert sorted((s, int(v)) for _n, s, _t, v in obs) == [(0, 2), (1, 3)]
    assert cfg.pools[0].used == cfg.pools[1].used == 0


def test_hold_above_cap_is_rejected():
    """A hold of 5 units on a pool of cap 4 (a constant amount) is rejected: the session ends at
    once, the pool's `rejected` counts it, the other session runs normally."""
    cfg, obs = run_text("""
fn main() {
  pool a { cap 4; }
  stage s : delay;
  workload { arrive batch(2); }
  server {
    set need = serial == 0 ? 5 : 2;
    hold a (need) { run s (1); }
    observe t = now;
  }
}""", 2)
    assert cfg.pools[0].rejected == 1
    assert [(s, v) for _n, s, _t, v in obs] == [(1, 1)]
    assert all(x.status == ("ended",) for x in cfg.sessions)


def test_choose_least_keys_ties_to_smallest_index():
    """k in 0..3 by (k == 2 ? 0 : 1) → 2; j in 0..2 by (0) → 0 (ties to the smallest index)."""
    _cfg, obs = run_text("""
fn main() {
  workload { arrive batch(1); }
  server {
    choose k in 4 by (k == 2 ? 0 : 1);
    choose j in 3 by (0);
    observe k_is = k;
    observe j_is = j;
  }
}""", 1)
    assert {(n, int(v)) for n, _s, _t, v in obs} == {("k_is", 2), ("j_is", 0)}


def test_engine_register_counts_iterations():
    """A register incremented by the schedule: one request, budget 8, prompt 8, output 3 → 3
    iterations (prefill, 2 decodes); attempts that start no iteration are undone."""
    cfg, _obs = run_text("""
fn main() {
  device d { kv cap 1600; }
  pool kv on d { block 16; }
  engine e on d {
    reqs cap 4;
    tokens cap 8;
    state n = 0;
    request (p, q) {
      prefill (p) growing kv;
      decode (q - 1) growing kv;
    }
    schedule {
      set n = n + 1;
      advance running;
      admit waiting taking reqs (1), kv (min(p, budget_left(e))) reserve (p);
    }
    execute (1);
  }
  pool reqs on e { queue fifo; }
  workload { arrive batch(1); }
  server { e (8, 3); }
}""", 1)
    assert cfg.stages[0].registers == [3]

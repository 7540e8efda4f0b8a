"""Constructs the front-end accepts that serq_spec used to refuse (issue 3): their semantics, with
the expected values derived by hand in each docstring (docs/spec.md "Ambiguities resolved")."""

from __future__ import annotations

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

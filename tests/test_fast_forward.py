"""The decode fast-forward (docs/fast.md "Speed tricks" 3) against serq_spec, on the cases it
handles beyond plain decode runs: growth while a request waits, and the formation it hands back
to the schedule when a growth evicts the waiting head's cached prefix."""

from __future__ import annotations

import pytest

pytest.importorskip("serq_spec.step")

from serq.frontend import compile_source
from serq_fast import advance, fastforward
from serq_drt.lockstep import Divergence, lockstep

# s0 holds 6 of 12 units and decodes 8 tokens, growing one 2-unit block every other step; s1
# leaves a 6-unit entry in the cache, thinks 0.5 s and asks for 2·cachedin(kv) − 4 units: 8 do not
# fit next to s0's 6 (+ the entry). At t = 6 s0 grows to 8, evicting one block of s1's entry: s1
# now needs 4, which fits (8 + 4 = 12), so it is admitted in that formation. A fast-forward that
# took the growth for granted without re-reading the head would leave s1 waiting.
WATCH = """
fn main() {
  device d { kv cap 12; }
  pool kv on d { block 2; }
  engine e on d {
    slots cap 4;
    tokens cap 8;
    schedule { advance running; admit waiting; }
    execute (1);
  }
  pool slots on e { queue fifo; }
  stage think : delay;
  workload { arrive batch(2); }
  server {
    branch (serial == 0) {
      hold slots (1), kv (5) { run e decode (8) growing kv; }
    } else {
      hold kv (6) { observe x = 0; } cache (6);
      run think (0.5);
      hold slots (1), kv (2 * cachedin(kv) - 4) { run e decode (2) growing kv; }
      observe t = now;
    }
  }
}"""


def _ir(text: str) -> dict:
    return compile_source(text, "watch.sq")


def test_growth_with_a_waiting_head_resumes_the_admission(monkeypatch):
    calls = []
    orig = advance.ff_resume

    def counting(self, it, total, t):
        r = orig(self, it, total, t)
        calls.append((t, self.iter.admitted))
        return r

    monkeypatch.setattr(advance, "ff_resume", counting)
    assert lockstep(_ir(WATCH), 1, 2) > 0
    assert calls == [(6.0, 1)]  # the formation at t = 6 was handed back and admitted s1


def test_seeded_fault_no_watch_is_caught(monkeypatch):
    monkeypatch.setenv("SERQ_FAST_FAULT", "ff_no_watch")
    with pytest.raises(Divergence):
        lockstep(_ir(WATCH), 1, 2)


def test_fast_forward_with_nothing_else_pending(monkeypatch):
    """With no other event pending (the next instant is +inf) the fast-forward still applies."""
    steps = []
    orig = fastforward.bulk

    def counting(self, *a):
        r = orig(self, *a)
        steps.append(r)
        return r

    monkeypatch.setattr(fastforward, "bulk", counting)
    assert lockstep(_ir(WATCH.replace("kv (2 * cachedin(kv) - 4)", "kv (2)")), 1, 2) > 0
    assert max(steps) >= 2

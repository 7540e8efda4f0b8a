"""Lockstep of serq_spec and serq_fast on `lease P (t)` (docs/language.md §11.4): hand-written programs
whose leases end by `release`, by their time and by the session's end, and the seeded fault
`lease_evictable` (docs/fast.md "Seeded faults") that the comparison must catch."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("serq_spec.step")

from serq.frontend import compile_source, load_program
from serq_drt.lockstep import Divergence, fast_lines, lockstep, sample_sessions

ROOT = Path(__file__).resolve().parent.parent
REPLAY = ROOT / "examples" / "replay" / "vllm_replay.sq"

# A free-standing pool under pressure: every session leases what it held for a drawn time, loads
# into the lease, may release it early, and a session that ends while leasing ends the lease.
FREE = """\
fn main() {
  pool mem { cap 12; block 2; evict lru; preempt lifo; }
  stage work : ps(1);
  workload {
    arrive poisson(1);
    turn { set u = 2 * ceil(~uniform(0, 3)); set t = ~uniform(0, 4); }
    session { turn; turn; }
  }
  server {
    hold mem (u) { observe hit = cached; run work (~exp(1)); } cache (u) lease mem (t);
    branch (serial - 2 * floor(serial / 2) == 0) { load mem (0); release mem; }
    tool (~uniform(0, 2));
  }
}
"""

# The body releases the hold's only pool early: at the scope's end there is nothing to lease (the
# spec once failed with an IndexError on a hold left with no pool), and the `release mem;` after
# the tool has nothing to release.
EARLY = """\
fn main() {
  pool mem { cap 10; block 2; evict lru; }
  stage cpu : fifo;
  workload { arrive batch(2); session { turn; } }
  server {
    hold mem (4) { run cpu (1); release mem; run cpu (1); } cache (4) lease mem (inf);
    tool (3);
    release mem;
  }
}
"""


def programs():
    yield "free", compile_source(FREE, "free.sq", {}), 6
    yield "released-early", compile_source(EARLY, "early.sq", {}), 2
    yield "vector", load_program(str(ROOT / "vectors" / "spec" / "lease_pins_allocation" / "program.sq"), {}), 3
    text = REPLAY.read_text().replace('"data/synthetic.csv"', '"data/pin_check.csv"')
    yield "replay-pin", compile_source(text, str(REPLAY), {"sessions": "3", "blocks": "24", "pin": "1"}), 3


CASES = list(programs())


@pytest.mark.parametrize("name,ir,k", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("seed", [1, 2])
def test_lease_programs_agree(name, ir, k, seed):
    assert lockstep(ir, seed, k, name) > 0


def test_the_programs_lease():
    """Not vacuous: each program holds leases, and the free-standing one ends them by time too."""
    for name, ir, k in CASES:
        lines = fast_lines(ir, sample_sessions(ir, 1, k, name))
        assert any("leases" in p for line in lines for p in line["pools"]) == (name != "released-early"), name
    name, ir, k = CASES[0]
    lines = fast_lines(ir, sample_sessions(ir, 1, k, name))
    assert any(line["event"] and line["event"]["kind"] == "lease_end" for line in lines)


LEASING = [c for c in CASES if c[0] != "released-early"]


@pytest.mark.parametrize("name,ir,k", LEASING, ids=[c[0] for c in LEASING])
def test_seeded_lease_fault_is_caught(monkeypatch, name, ir, k):
    """`lease_evictable`: the leased units go to the cache at the scope's end (evictable)."""
    monkeypatch.setenv("SERQ_FAST_FAULT", "lease_evictable")
    with pytest.raises(Divergence):
        lockstep(ir, 1, k, name)
    monkeypatch.delenv("SERQ_FAST_FAULT")
    assert lockstep(ir, 1, k, name) > 0

"""The fast engine's invariant checks (python/serq_fast/invariants.py, `SERQ_FAST_CHECK=1`):
they hold on every example and on random programs, they change nothing the run reports, and a
corrupted state (seeded here: a pool's used amount, a content pool's free count, a lost queue
entry, a branch's end that leaves its parent counting it, an ended branch still listed, a joining
parent its last branch does not wake) stops the run with the broken invariant, the step and the
time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("serq_spec.step")
strategies = pytest.importorskip("strategies")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from serq.frontend import compile_source, load_program  # noqa: E402
from serq_drt.lockstep import lockstep  # noqa: E402
from serq_fast import report  # noqa: E402
from serq_fast.content import BlockPool  # noqa: E402
from serq_fast.invariants import InvariantViolation  # noqa: E402
from serq_fast.pools import Pool  # noqa: E402
from serq_fast.step import Sim  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PROGRAMS = sorted(REPO.glob("examples/*/*.sq")) + sorted(REPO.glob("python/serq_vllm/programs/vllm_scenario*.sq"))
VLLM = REPO / "examples" / "multi-turn" / "vllm.sq"
SHARED = REPO / "examples" / "multi-turn" / "shared_prompt.sq"


# the checks walk every block of a content pool at each step: a smaller cache keeps this one quick.
# offload_content.sq's 20,000-block host tier made it the default run's slowest test (19.8 s): at 3
# sessions, 300 GPU and 100 host blocks it still spills (8,194) and hits the tier (1,378) in 2.5 s.
OFFLOAD_CONTENT = REPO / "examples" / "multi-turn" / "offload_content.sq"
SETS = {SHARED: {"blocks": "1500"},
        OFFLOAD_CONTENT: {"N": "3", "blocks": "300", "host_blocks": "100", "Z": "1"}}


def _run(path: Path, check: bool, horizon: float = 60.0) -> dict:
    sim = Sim(load_program(str(path), SETS.get(path, {})), seed=2, horizon=horizon, warmup=horizon / 10,
              check=check).run()
    return report.build(sim)


# The two heaviest examples (19 s of the default run together) run with -m slow; the checks stay
# on every other example, vllm.sq's engine and content pools among them.
SLOW = {REPO / "examples" / "multi-turn" / "replicas.sq", SHARED}


@pytest.mark.parametrize("path", [pytest.param(p, marks=[pytest.mark.slow] if p in SLOW else [],
                                               id=p.relative_to(REPO).as_posix()) for p in PROGRAMS])
def test_the_examples_keep_the_invariants_and_report_the_same(path):
    assert _run(path, True) == _run(path, False)


def test_the_checks_are_off_by_default(monkeypatch):
    monkeypatch.delenv("SERQ_FAST_CHECK", raising=False)
    assert Sim(load_program(str(VLLM), {}), horizon=1.0).check is False
    monkeypatch.setenv("SERQ_FAST_CHECK", "1")
    assert Sim(load_program(str(VLLM), {}), horizon=1.0).check is True


@settings(max_examples=12, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(strategies.vllm_programs(), strategies.vllm_programs(content=True),
                 strategies.vllm_programs(lag=True), strategies.vllm_programs(arrivals=True, lease=True),
                 strategies.queue_programs()))
def test_random_programs_keep_the_invariants(case):
    _lockstep_checked(case)


def _lockstep_checked(case) -> None:
    # every fast step of a lockstep run is checked (the Sim reads SERQ_FAST_CHECK)
    os.environ["SERQ_FAST_CHECK"] = "1"
    try:
        lockstep(compile_source(case.text, case.name, {}), case.seed, case.sessions, case.name)
    finally:
        del os.environ["SERQ_FAST_CHECK"]


# -- seeded faults: a corrupted state is caught, named, with its step and time ---------------------

def test_a_corrupted_used_amount_is_caught(monkeypatch):
    real = Pool._admit

    def admit_one_unit_too_many(self, h, amounts, reuse):
        real(self, h, amounts, reuse)
        h.pools[0].used += 1.0

    monkeypatch.setattr(Pool, "_admit", admit_one_unit_too_many)
    _run(VLLM, False)   # unchecked, the corruption goes unnoticed
    with pytest.raises(InvariantViolation, match=r"invariant broken at step \d+, time [0-9.e+-]+ .*"
                                                 r"pool reqs: used [0-9.]+ != the holders' and leases' allocations"):
        _run(VLLM, True)


def test_a_corrupted_free_count_is_caught(monkeypatch):
    real = BlockPool.release

    def release_losing_a_free_block(self, blocks):
        real(self, blocks)
        self.nfree -= 1

    monkeypatch.setattr(BlockPool, "release", release_losing_a_free_block)
    with pytest.raises(InvariantViolation, match=r"pool kv: the free queue holds a block twice or \d+ blocks, not nfree"):
        _run(SHARED, True)


def test_a_lost_queue_entry_is_caught(monkeypatch):
    real = Pool.enqueue

    def enqueue_and_lose(self, h, front):
        real(self, h, front)
        self.remove_from_queue(h)

    monkeypatch.setattr(Pool, "enqueue", enqueue_and_lose)
    with pytest.raises(InvariantViolation, match=r"session \d+ is queued on \w+ but not in its queue"):
        _run(VLLM, True)


# -- fork/join (docs/language.md §11.13) ----------------------------------------------------------

AGENT_FORK = REPO / "examples" / "multi-turn" / "agent_fork.sq"


@settings(max_examples=8, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(strategies.fork_programs())
def test_random_fork_programs_keep_the_invariants(case):
    _lockstep_checked(case)


def test_a_miscounted_branch_is_caught(monkeypatch):
    """A branch's end that leaves its parent counting it: the parent waits for a branch that is gone."""
    real = Sim._branch_left

    def branch_left_keeping_the_count(self, b):
        real(self, b)
        b.parent.live_branches += 1

    monkeypatch.setattr(Sim, "_branch_left", branch_left_keeping_the_count)
    with pytest.raises(InvariantViolation, match=r"session [0-9.]+ counts 3 running branch\(es\), 2 are live"):
        _run(AGENT_FORK, True)


def test_an_ended_branch_still_listed_is_caught(monkeypatch):
    real = Sim._branch_left

    def branch_left_staying_listed(self, b):
        real(self, b)
        self.branches[b.tid] = b

    monkeypatch.setattr(Sim, "_branch_left", branch_left_staying_listed)
    with pytest.raises(InvariantViolation, match=r"branch [0-9.]+ ended but is still listed"):
        _run(AGENT_FORK, True)


def test_a_parent_left_joining_is_caught(monkeypatch):
    """The last branch's end that does not wake its joining parent."""
    from serq_fast.defs import JOINING
    real = Sim._branch_left

    def branch_left_leaving_the_parent_joining(self, b):
        waiting = b.parent.status == JOINING
        real(self, b)
        if waiting:
            b.parent.status = JOINING

    monkeypatch.setattr(Sim, "_branch_left", branch_left_leaving_the_parent_joining)
    with pytest.raises(InvariantViolation, match=r"session [0-9.]+ is joining but .* has 0 branch\(es\) running"):
        _run(AGENT_FORK, True)

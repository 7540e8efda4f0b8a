"""Lockstep of serq_spec and serq_fast on `share content` pools (docs/content.md): hand-built
programs with duplicates, eviction pressure and preemption, and the seeded fault
`content_queue_head` that the comparison must catch (docs/fast.md "Seeded faults")."""

from __future__ import annotations

import pytest

pytest.importorskip("serq_spec.step")

from serq_fast.irbuild import N, Bin, Cond, Program, duplicates_ir, shared_prompt_ir, vllm_engine
from serq_drt.lockstep import Divergence, fast_lines, lockstep, sample_sessions


def _pressure_program():
    """The shared-prompt workload on 40 blocks of 16 tokens with a 64-token shared prompt: hits,
    evictions of cached blocks and LIFO preemptions all happen within a few sessions."""
    return shared_prompt_ir(Lambda=3.0, blocks=40, max_seqs=4, system=64)


def _watched_head_program():
    """Session 1 (prompt 40) waits for room behind session 0 (prompt 20, decoding), both on one
    history: when session 0's decode fills its block 2, session 1 hits one more block and fits,
    in that very iteration. The decode fast-forward must stop before that step (docs/fast.md
    "Fast-forward with content pools"). Session 2 only waits 100 s: the fast-forward runs only
    with a later event pending."""
    p = Program()
    A = p.A
    call, kv, reqs, eng = vllm_engine(p, budget=64, bs=8, blocks=5, max_seqs=4, cost=N(1),
                                      content=(N(0), N(0), N(0)))
    wait = p.stage({"name": "wait", "kind": "delay"})
    first = Bin("==", A("serial"), N(0))
    server = p.block(call(Cond(first, N(20), N(40)), Cond(first, N(40), N(5))))
    delay = Cond(Bin("==", A("serial"), N(2)), N(100), Bin("*", A("serial"), N(1.5)))
    session = p.block([p.run(wait, delay), {"op": "turn"}, {"op": "end"}])
    return p.ir({"kind": "batch", "n": 3}, session, server=server)


CASES = [(duplicates_ir, 3), (_pressure_program, 4), (_watched_head_program, 3)]


@pytest.mark.parametrize("ff", [True, False], ids=["fast-forward", "every-step"])
@pytest.mark.parametrize("program,k", CASES, ids=["duplicates", "pressure", "watched-head"])
def test_content_programs_agree(monkeypatch, program, k, ff):
    if not ff:
        monkeypatch.setenv("SERQ_FAST_NO_FF", "1")
    assert lockstep(program(), 1, k) > 0


def test_pressure_program_has_pressure():
    """The pressure case evicts identified blocks, preempts, and hits."""
    ir = _pressure_program()
    lines = fast_lines(ir, sample_sessions(ir, 1, 4))
    rec = [line["records"] for line in lines]
    assert any(r["evicted"] for r in rec)
    assert any(r["preempted"] for r in rec)
    assert any(a[3] > 0 for r in rec for a in r["admitted"] if a[1] == "kv")


# The seed of the pressure case: with seed 1 (stream v2, docs/sessions.md) the misordered queue is
# allocated from in the step it is formed, so the first difference is a block's content, not yet
# the queue; with seed 2 the queue itself differs first.
@pytest.mark.parametrize("program,k,seed", [(duplicates_ir, 3, 1), (_pressure_program, 4, 2)],
                         ids=["duplicates", "pressure"])
def test_seeded_queue_fault_is_caught(monkeypatch, program, k, seed):
    """`content_queue_head`: released blocks join the free queue in block order, not reversed."""
    ir = program()
    monkeypatch.setenv("SERQ_FAST_FAULT", "content_queue_head")
    with pytest.raises(Divergence) as info:
        lockstep(ir, seed, k)
    assert "free_queue" in info.value.path
    monkeypatch.delenv("SERQ_FAST_FAULT")
    assert lockstep(ir, seed, k) > 0

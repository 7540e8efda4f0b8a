"""Session blocks specialised to Python (serq_fast.specialise, docs/fast.md speed trick 5) against
the interpreter (SERQ_FAST_NO_SPECIALISE=1): the same reports and records byte for byte, the
interpreter kept for blocks the generator does not cover, grow / load / drop / release, the statement budget exact, the
compiled code shared by Sims of one program. Lockstep with it on: tests/test_lockstep.py
(and its seeded fault `spec_while_once`), tests/test_lockstep_random.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from serq.frontend import load_program
from serq_fast import report, sessions, specialise
from serq_fast.step import Sim
from serq_fast.expr import RunError
from serq_fast.irbuild import N, Bin, Program, ref
from serq_fast.specialise import covered

EX = Path(__file__).resolve().parents[1] / "examples"


def _run(ir, monkeypatch, specialised, **kw):
    if specialised:
        monkeypatch.delenv("SERQ_FAST_NO_SPECIALISE", raising=False)
    else:
        monkeypatch.setenv("SERQ_FAST_NO_SPECIALISE", "1")
    records: list = []
    sim = Sim(ir, records=records, **kw)
    assert (sim.block_fns is not None) == specialised
    sim.run()
    rows = [(r.serial, r.turn, r.prompt, r.output, r.submit, r.first, r.done, r.hit) for r in records]
    return report.to_json(report.build(sim)), rows


@pytest.mark.parametrize("path,sets,seed,horizon", [
    ("multi-turn/vllm.sq", {}, 1, 300.0),
    ("multi-turn/vllm.sq", {"blocks": "600", "Lambda": "4"}, 2, 60.0),
    ("multi-turn/routing.sq", {}, 3, 200.0),
    ("multi-turn/shared_prompt.sq", {"blocks": "150", "Lambda": "3"}, 4, 15.0),
    ("multi-turn/closed.sq", {}, 5, 100.0),
    ("single-turn/mmc.sq", {}, 6, 2000.0),
    ("single-turn/arguments.sq", {}, 7, 2000.0),
])
def test_reports_identical_to_the_interpreter(monkeypatch, path, sets, seed, horizon):
    ir = load_program(str(EX / path), sets)
    assert all(covered(b) for b in ir["blocks"]), "every example's blocks are covered"
    a = _run(ir, monkeypatch, True, seed=seed, horizon=horizon, warmup=horizon / 10)
    b = _run(ir, monkeypatch, False, seed=seed, horizon=horizon, warmup=horizon / 10)
    assert a[1], "the run served requests"
    assert a == b


def _pool_program():
    """A hold body with `grow` (stalling when the pool is full), `load`, `drop` and `release`."""
    p = Program()
    slots = p.pool("slots", 5)
    srv = p.stage({"name": "srv", "kind": "fifo", "servers": 1})
    body = p.block([p.run(srv, N(1)), {"op": "grow", "pool": ref(slots), "units": N(1)},
                    {"op": "load", "pool": ref(slots), "units": N(1)}, {"op": "drop", "pool": ref(slots)},
                    p.set("x", Bin("+", p.A("x"), N(1))), p.run(srv, N(2)),
                    {"op": "release", "pool": ref(slots)}, p.set("x", Bin("+", p.A("x"), N(1)))])
    server = p.block([{"op": "hold", "pools": [{"pool": ref(slots), "units": N(1), "reserve": None}],
                       "bindings": [], "body": body, "cache": None, "request": None}])
    session = p.block([{"op": "turn"}, p.observe("x", p.A("x")), {"op": "end"}])
    return p.ir({"kind": "poisson", "rate": "1"}, session, server=server), body


def test_grow_load_drop_release_agree(monkeypatch):
    ir, body = _pool_program()
    assert covered(ir["blocks"][body])
    a = _run(ir, monkeypatch, True, seed=1, horizon=500.0)
    assert a == _run(ir, monkeypatch, False, seed=1, horizon=500.0)
    assert '"x"' in a[0]


def test_an_uncovered_block_is_interpreted(monkeypatch):
    """A form the generator does not cover (here `drop`, taken out of COVERED, as a future IR
    form would be) leaves its block to the interpreter, inside a specialised hold."""
    ir, body = _pool_program()
    monkeypatch.setattr(specialise, "COVERED", specialise.COVERED - {"drop"})
    assert not covered(ir["blocks"][body])
    monkeypatch.delenv("SERQ_FAST_NO_SPECIALISE", raising=False)
    sim = Sim(ir, seed=1, horizon=50.0)
    assert id(sim.blocks[body]) not in sim.block_fns
    assert len(sim.block_fns) == len(ir["blocks"]) - 1
    a = _run(ir, monkeypatch, True, seed=1, horizon=500.0)
    assert a == _run(ir, monkeypatch, False, seed=1, horizon=500.0)


def _spin_program():
    """A session that loops over `set` statements and never blocks (the §11.9 guard)."""
    p = Program()
    body = p.block([p.set("x", Bin("+", p.A("x"), N(1))), p.set("y", p.A("x")), p.set("z", p.A("y"))])
    session = p.block([{"op": "loop", "body": body}])
    return p.ir({"kind": "batch", "n": 1}, session)


@pytest.mark.parametrize("limit", [1000, 1001, 1002, 1003])
def test_the_statement_budget_is_exact(monkeypatch, limit):
    """The guard fires at the same statement (its message and the session's attributes) with
    and without specialisation, wherever in the block the budget runs out."""
    monkeypatch.setattr(sessions, "MAX_STATEMENTS", limit)
    seen = []
    for spec in (True, False):
        if spec:
            monkeypatch.delenv("SERQ_FAST_NO_SPECIALISE", raising=False)
        else:
            monkeypatch.setenv("SERQ_FAST_NO_SPECIALISE", "1")
        sim = Sim(_spin_program(), seed=1)
        with pytest.raises(RunError) as info:
            sim.run()
        s = sim.sessions[0]
        seen.append((str(info.value), list(s.attrs), s.frames[-1][1]))
    assert seen[0] == seen[1]
    assert f"executed {limit} statements" in seen[0][0]


def test_compiled_code_is_shared_by_sims_of_one_program(monkeypatch):
    monkeypatch.delenv("SERQ_FAST_NO_SPECIALISE", raising=False)
    ir = load_program(str(EX / "multi-turn/vllm.sq"), {})
    a, b = Sim(ir, seed=1), Sim(ir, seed=2)
    fa = [a.block_fns[id(blk)] for blk in a.blocks]
    fb = [b.block_fns[id(blk)] for blk in b.blocks]
    assert all(x.__code__ is y.__code__ for x, y in zip(fa, fb))
    assert all(x.__globals__ is not y.__globals__ for x, y in zip(fa, fb))  # bound per Sim
    c = Sim(load_program(str(EX / "multi-turn/vllm.sq"), {"blocks": "600"}), seed=1)
    assert fa[0].__code__ is not c.block_fns[id(c.blocks[0])].__code__  # another program

"""`fork { … }` / `join;` in serq_fast (docs/language.md §11.13): the hand-derived vector
vectors/spec/fork_join in the fast engine, generated code against the interpreter, and the guards
for hand-written IR. (Step-by-step agreement with serq_spec: tests/test_lockstep_constructs.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from serq.frontend import compile_source, load_program
from serq_fast import report
from serq_fast.step import Sim
from serq_fast.expr import RunError

ROOT = Path(__file__).resolve().parents[1]


def _rows(sim, name):
    return sim.obs_stats[sim.observe_names.index(name)]


def test_the_fork_join_vector_in_the_fast_engine():
    """vectors/spec/fork_join/README.md: tools_done 3 and 5, done 5 and 7 (means 4 and 6)."""
    sim = Sim(load_program(str(ROOT / "vectors" / "spec" / "fork_join" / "program.sq"), {})).run()
    assert (_rows(sim, "tools_done").n, _rows(sim, "tools_done").mean) == (2, 4.0)
    assert (_rows(sim, "done").n, _rows(sim, "done").mean) == (2, 6.0)
    assert (_rows(sim, "a").mean, _rows(sim, "b").mean) == (4.0, 2.5)
    assert not sim.branches and sim.ended == 2


PROGRAM = """
fn main() {
  stage s : fifo(2);
  stage p : ps(1);
  workload { arrive poisson(0.1); }
  server {
    set n = 0;
    fork { run s (~exp(1)); fork { run p (~exp(2)); } join; }
    fork { while (n < 3) { tool (~exp(1)); branch with (0.5) { run p (1); } set n = n + 1; } }
    run p (~exp(1));
    join;
    observe done = now;
  }
}"""


def test_generated_code_and_interpreter_agree(monkeypatch):
    """A block with `fork`/`join` is left to the interpreter (specialise.covered); the branches'
    own blocks run as generated code. Both give the same report."""
    ir = compile_source(PROGRAM, "t.sq", {})
    out = []
    for off in (False, True):
        if off:
            monkeypatch.setenv("SERQ_FAST_NO_SPECIALISE", "1")
        sim = Sim(ir, seed=5, horizon=1000.0, warmup=100.0).run()
        out.append(report.to_json(report.build(sim)))
    assert out[0] == out[1]
    assert _rows(sim, "done").n > 50


def test_a_turn_in_a_fork_block_is_refused_when_loaded():
    """A hand-edited IR that moves `turn;` into a fork block (the linker refuses it; a branch may
    hold pools, docs/language.md §11.13, but makes no turns)."""
    ir = compile_source("""
fn main() {
  workload { arrive batch(1); session { turn; turn; } }
  server { fork { tool (1); } join; }
}""", "t.sq", {})
    blk = ir["blocks"][ir["workload"]["session"]]
    fork = next(st for st in ir["blocks"][ir["workload"]["server"]] if st["op"] == "fork")
    ir["blocks"][fork["body"]].append(blk.pop(0))
    with pytest.raises(RunError, match="`turn` in a branch"):
        Sim(ir)


def test_an_unjoined_branch_stops_the_run():
    """A hand-edited IR without the inner join: branch 0.1 ends while 0.2 runs."""
    ir = compile_source("""
fn main() {
  workload { arrive batch(1); }
  server { fork { fork { tool (2); } join; } join; }
}""", "t.sq", {})
    outer = next(st for st in ir["blocks"][ir["workload"]["server"]] if st["op"] == "fork")
    blk = ir["blocks"][outer["body"]]
    blk[:] = [st for st in blk if st["op"] != "join"]
    with pytest.raises(RunError, match=r"branch 0.1 ended with 1 branch\(es\) still running"):
        Sim(ir).run()

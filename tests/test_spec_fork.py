"""`fork { … }` / `join;` in serq_spec (docs/language.md §11.13). Expected values derived by
hand in each docstring."""

from __future__ import annotations

import pytest

from serq.frontend import compile_source
from serq_spec.errors import SpecError
from spec_helpers import run_ir, run_text


def observed(obs) -> dict:
    return {name: value for name, _serial, _time, value in obs}


def test_parallel_tool_calls_end_with_the_longest():
    """Three tool calls of 1, 2 and 3 s forked at 0 on the delay stage `tool` all start at 0; the
    join returns when the longest ends, at 3 (sequentially they would end at 1 + 2 + 3 = 6)."""
    _cfg, obs = run_text("""
fn main() {
  workload { arrive batch(1); }
  server {
    fork { tool (1); } fork { tool (2); } fork { tool (3); }
    join;
    observe parallel = now;
    tool (1); tool (2); tool (3);
    observe sequential = now;
  }
}""", 1)
    assert observed(obs) == {"parallel": 3, "sequential": 9}


def test_branches_start_in_textual_order_and_share_attributes():
    """Two branches on one fifo(1) server: the first forked is queued first, so it is served over
    [0, 2] and the second over [2, 3]. Each sets an attribute the session reads after the join."""
    _cfg, obs = run_text("""
fn main() {
  stage s : fifo;
  workload { arrive batch(1); }
  server {
    fork { run s (2); set a = now; }
    fork { run s (1); set b = now; }
    join;
    observe a = a; observe b = b; observe done = now;
  }
}""", 1)
    assert observed(obs) == {"a": 2, "b": 3, "done": 3}


def test_the_forking_thread_goes_on_before_its_branch_runs():
    """`fork` takes no time and does not yield: the session sets a = 2 and reaches `join;` before
    the branch runs and sets a = 1; the join then returns at once (time 0) with a = 1."""
    _cfg, obs = run_text("""
fn main() {
  workload { arrive batch(1); }
  server {
    fork { set a = 1; }
    set a = 2;
    join;
    observe a = a; observe t = now;
  }
}""", 1)
    assert observed(obs) == {"a": 1, "t": 0}


def test_nested_fork_and_a_parent_that_works_before_joining():
    """Branch 0.1 runs a 2 s tool call, then forks 0.2 (3 s) and joins it at 5; meanwhile the
    session runs its own 1 s tool call (mid = 1) and joins 0.1, which ends at 5."""
    cfg, obs = run_text("""
fn main() {
  workload { arrive batch(1); }
  server {
    fork { tool (2); fork { tool (3); } join; set inner = now; }
    tool (1);
    set mid = now;
    join;
    observe inner = inner; observe mid = mid; observe done = now;
  }
}""", 1)
    assert observed(obs) == {"inner": 5, "mid": 1, "done": 5}
    assert not cfg.branches and cfg.sessions[0].forks == 2


def test_ps_branches_share_the_server():
    """Two branches with 1 s of work each on ps(1): each gets rate 1/2, both end at 2."""
    _cfg, obs = run_text("""
fn main() {
  stage p : ps(1);
  workload { arrive batch(1); }
  server { fork { run p (1); } fork { run p (1); } join; observe t = now; }
}""", 1)
    assert observed(obs) == {"t": 2}


def test_branch_jobs_are_named_in_the_state_line():
    """The state line (docs/state.md "Branches"): the session is `joining`, the live branches are
    listed with their status, and their jobs and `finish` events carry their names."""
    from serq_spec.program import Program
    from serq_spec.sample import sample
    from serq_spec.step import run
    from serq_spec.trace import state_line
    from serq_spec.workload import Workload
    ir = compile_source("""
fn main() {
  workload { arrive batch(1); }
  server { fork { tool (1); } fork { tool (2); } join; }
}""", "t.sq", {})
    prog = Program(ir, "t.sq", workload=Workload.replay(sample(ir, 0, 1, "t.sq")))
    lines = []
    run(prog, on_step=lambda c, r, k: lines.append(state_line(c, r, k)), check=True)
    assert lines[0]["sessions"] == [[0, "joining"]]
    assert lines[0]["branches"] == [["0.1", "stage:tool"], ["0.2", "stage:tool"]]
    assert lines[1]["event"]["arg"] == ["tool", "0.1"] and lines[1]["branches"] == [["0.2", "stage:tool"]]
    assert lines[2]["records"]["finished"] == [["tool", "0.2"]]
    assert lines[2]["sessions"] == [[0, "ended"]] and "branches" not in lines[2]


def hand_edited(text: str, edit) -> dict:
    ir = compile_source(text, "t.sq", {})
    edit(ir)
    return ir


def test_an_unjoined_branch_is_a_run_time_error():
    """A hand-edited IR without the inner `join;`: branch 0.1's block ends while 0.2 runs. (Without
    the session's own join, its `end` is refused before: `end` before the join of a fork.)"""
    def drop_inner_join(ir):
        outer = next(st for st in ir["blocks"][ir["workload"]["server"]] if st["op"] == "fork")
        blk = ir["blocks"][outer["body"]]
        blk[:] = [st for st in blk if st["op"] != "join"]
    ir = hand_edited("""
fn main() {
  workload { arrive batch(1); }
  server { fork { fork { tool (2); } join; } join; }
}""", drop_inner_join)
    with pytest.raises(SpecError, match=r"branch 0.1 ended with 1 branch\(es\) still running"):
        run_ir(ir, 1)


def test_a_hold_before_the_join_is_a_run_time_error():
    """A hand-edited IR that moves a hold between a `fork` and its `join;`: the thread that forked
    may not queue for a pool while its branches run (a branch may: docs/language.md §11.13); the
    spec refuses it where it runs."""
    def move_hold(ir):
        blk = ir["blocks"][ir["workload"]["server"]]
        hold = next(st for st in blk if st["op"] == "hold")
        blk.remove(hold)
        blk.insert(next(i for i, st in enumerate(blk) if st["op"] == "join"), hold)
    ir = hand_edited("""
fn main() {
  pool m { cap 1; }
  workload { arrive batch(1); }
  server { fork { tool (1); } join; hold m (1) { tool (1); } }
}""", move_hold)
    with pytest.raises(SpecError, match="`hold` in a branch, or before the `join;` of a fork"):
        run_ir(ir, 1)

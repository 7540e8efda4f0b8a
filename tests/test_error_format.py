"""Both engines report a run-time fault with one located line (issue 13): `serq run --replay`
(serq_fast), `serq spec` (serq_spec) and `serq lockstep` print the same
`FILE:LINE:COLUMN: error: message` for the same fault, the front-end's compiler convention
(serq.errors renders all of them). serq_fast said `message at FILE:L:C`, serq_spec
`FILE:L:C: error: message`, and several faults were worded differently (`negative work -0.5` and
`negative run work (-1/2)`; `an expression produced NaN` and `0 * inf is undefined`).

Each case is a program with a fault at run time and a twin without it that draws the same
values: the twin is sampled (`serq sample` runs serq_spec, which would stop at the fault), and
both engines replay its sessions file on the faulty program; `serq lockstep` samples the faulty
program itself and so stops at the same fault while sampling."""

from __future__ import annotations

from pathlib import Path

import pytest

from serq.cli import main
from test_report_errors import ENGINE_COST_0

MM1 = Path(__file__).resolve().parents[1] / "examples" / "single-turn" / "mm1.sq"

ONE_STAGE = """fn main() {
  stage s : fifo(1);
  workload { arrive poisson(1); }
  server { set w = ~uniform(-2, 1); run s (WORK); }
}
"""

# test_report_errors' engine, its `execute` cost the placeholder
ENGINE = ENGINE_COST_0.replace("execute (0);", "execute (COST);")

GUARD = """fn main() {
  stage s : fifo(1);
  workload { arrive poisson(1); }
  server { set x = ~uniform(0, 3); branch (GUARD) { run s (1); } }
}
"""

CLAIM = """fn main() {
  stage s : fifo(1);
  workload { arrive poisson(1); }
  server { run s (~exp(0.5)); }
  claim drained : at end (VALUE);
}
"""

UNITS = """fn main() {
  pool m { cap 10; }
  stage s : delay;
  workload { arrive poisson(1); }
  server { set u = ~uniform(-3, 3); hold m (UNITS) { run s (1); } }
}
"""

# name: (program, placeholder, value without the fault, value with it, position, message)
CASES = {
    "zero-by-zero": (ONE_STAGE, "WORK", "abs(w)", "abs(w) + 0 / (w - w)", "4:37", "0 / 0 is undefined"),
    "inf-minus-inf": (ONE_STAGE, "WORK", "abs(w)", "1 / (w - w) - 1 / (w - w)", "4:37",
                      "inf - inf is undefined"),
    "inf-by-inf": (ONE_STAGE, "WORK", "abs(w)", "(1 / (w - w)) / (1 / (w - w))", "4:37",
                   "inf / inf is undefined"),
    "negative-work": (ONE_STAGE, "WORK", "abs(w)", "w", "4:37", "negative work -0.954488049296"),
    "infinite-work": (ONE_STAGE, "WORK", "abs(w)", "1 / (w - w)", "4:37", "work inf is not finite"),
    "sqrt-negative": (ONE_STAGE, "WORK", "abs(w)", "sqrt(w)", "4:37",
                      "sqrt of a negative value -0.954488049296"),
    "guard": (GUARD, "GUARD", "min(floor(x), 1)", "floor(x)", "4:36", "a branch guard must be 0 or 1, got 2.0"),
    "claim": (CLAIM, "VALUE", "queue(s) == 0", "queue(s) + 2", "5:3", "claim drained must be 0 or 1, got 2.0"),
    "negative-units": (UNITS, "UNITS", "abs(u)", "u", "5:37", "a negative amount for pool m"),
    "cost-minus-inf": (ENGINE, "COST", "0.01", "-1 / (batch.tokens - batch.tokens)", "16:14",
                       "engine eng: execute: iteration cost -inf is not a finite value >= 0"),
    "cost-nan": (ENGINE, "COST", "0.01", "0 * (1 / (batch.tokens - batch.tokens))", "16:14",
                 "engine eng: execute: 0 * inf is undefined"),
    "cost-zero": (ENGINE, "COST", "0.01", "0.01 - 0.01", "16:14",
                  "engine eng: execute: an iteration with 16 tokens costs 0"),
}


def serq(capsys, *argv) -> tuple[int, str]:
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(CASES))
def test_both_engines_print_one_located_line(tmp_path, capsys, name):
    text, hole, fine, faulty, position, message = CASES[name]
    ok, bad, sessions = tmp_path / "ok.sq", tmp_path / "bad.sq", tmp_path / "ok.json"
    ok.write_text(text.replace(hole, fine))
    bad.write_text(text.replace(hole, faulty))
    rc, err = serq(capsys, "sample", ok, "--seed", "1", "--sessions", "5", "-o", sessions)
    assert rc == 0, err
    expected = f"{bad}:{position}: error: {message}"
    printed = {}
    for argv in (["run", bad, "--replay", sessions], ["spec", bad, "--sessions", sessions],
                 ["lockstep", bad, "--seed", "1", "--sessions", "5"]):
        rc, err = serq(capsys, *argv)
        assert rc == 2, (argv[0], err)
        printed[argv[0]] = err.rstrip("\n")
    assert printed == {command: expected for command in printed}, printed


def test_an_error_without_a_position_names_serq(capsys):
    """A run-time error that has no program position starts with `serq: error:`, as an option's."""
    rc, err = serq(capsys, "run", MM1, "--arrivals", "1000", "--horizon", "1")
    assert rc == 2 and err == "serq: error: --arrivals 1000: not drained by the horizon 1\n", err


# -- fork/join's guards for a hand-edited IR (docs/language.md §11.13) ------------------------------
# The linker refuses these programs, so only an edited IR reaches the engines; serq_fast refuses a
# fork block's statements when it loads the program, serq_spec when they run: both print one line.

def _move_into_fork(op):
    def edit(ir):
        blk = ir["blocks"][ir["workload"]["server"]]
        moved = next(s for s in blk if s["op"] == op)
        fork = next(s for s in blk if s["op"] == "fork")
        blk.remove(moved)
        ir["blocks"][fork["body"]].append(moved)
    return edit


def _fork_into_hold(ir):
    blk = ir["blocks"][ir["workload"]["server"]]
    hold = next(s for s in blk if s["op"] == "hold")
    moved = [s for s in blk if s["op"] in ("fork", "join")]
    blk[:] = [s for s in blk if s not in moved]
    ir["blocks"][hold["body"]][:0] = moved


def _drop_inner_join(ir):
    outer = next(s for s in ir["blocks"][ir["workload"]["server"]] if s["op"] == "fork")
    blk = ir["blocks"][outer["body"]]
    blk[:] = [s for s in blk if s["op"] != "join"]


FORK_CASES = {
    "hold-in-branch": ("""fn main() {
  pool m { cap 1; }
  workload { arrive batch(1); }
  server { fork { tool (1); } join; hold m (1) { tool (1); } }
}""", _move_into_fork("hold"), "t.sq:4:37: error: `hold` in a branch, or before the `join;` of a fork: the linker "
                               "refuses this (docs/language.md §11.13)"),
    "engine-run-in-branch": (ENGINE_COST_0.replace("execute (0);", "execute (0.01);").replace(
        "server { eng (20, 3); }", "server { fork { tool (1); } join; run eng (10); }"), _move_into_fork("run"),
        "t.sq:20:37: error: a run on engine eng in a branch, or before the `join;` of a fork: the linker refuses "
        "this (docs/language.md §11.13)"),
    "fork-in-hold": ("""fn main() {
  pool m { cap 1; }
  workload { arrive batch(1); }
  server { hold m (1) { tool (1); } fork { tool (1); } join; }
}""", _fork_into_hold, "t.sq:4:37: error: a `fork` while the session holds a pool is not supported yet "
                       "(docs/language.md §11.13)"),
    # at the inner `fork`, whose branch 0.2 still runs when branch 0.1's block ends
    "unjoined": ("""fn main() {
  workload { arrive batch(1); }
  server { fork { fork { tool (2); } join; set x = 1; } join; }
}""", _drop_inner_join, "t.sq:3:19: error: branch 0.1 ended with 1 branch(es) still running: every `fork` needs a "
                        "`join;` later in its block (docs/language.md §11.13)"),
}


@pytest.mark.parametrize("name", sorted(FORK_CASES))
def test_fork_guards_print_one_located_line(name):
    from serq.frontend import compile_source
    from serq_fast.expr import RunError
    from serq_fast.step import Sim
    from serq_spec.errors import SpecError
    from spec_helpers import run_ir

    text, edit, expected = FORK_CASES[name]
    ir = compile_source(text, "t.sq", {})
    edit(ir)
    with pytest.raises(SpecError) as spec:
        run_ir(ir, 1)
    with pytest.raises(RunError) as fast:
        Sim(ir).run()
    printed = {engine: exc.value.located(ir["files"]).render() for engine, exc in (("spec", spec), ("fast", fast))}
    assert printed == {"spec": expected, "fast": expected}, printed

"""Issue 18 hardening: the defects the fuzz campaign and hand-written hostile inputs found in the
constructs of this round (flows, `share`, an engine's estimates, K's step stage) and in what they
touch. Every test here failed on the code before its fix (the fix's commit message says so)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serq.cli import main


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err and "internal error" not in cap.err, cap.err
    return rc, cap.out, cap.err


# -- a request block with fewer than two parameters: no output length, so no `tpot` -------------

def _request_program(params: str, args: str) -> str:
    return f"""
fn main() {{
  device acc {{ kv cap 1024; }}
  pool kv on acc {{ block 16; }}
  engine eng on acc {{
    reqs cap 8;
    tokens cap 256;
    request ({params}) {{ prefill (40) growing kv; }}
    schedule {{ advance running; admit waiting taking reqs (1), kv (40); }}
    execute (0.001);
  }}
  pool reqs on eng {{ queue fifo; }}
  workload {{ arrive poisson(2); turn {{ set a = ceil(~uniform(10, 50)); }} }}
  server {{ eng ({args}); }}
}}
"""


@pytest.mark.parametrize("params,args", [("prompt", "a"), ("", "")])
def test_request_block_without_an_output_parameter(tmp_path, capsys, params, args):
    """`request (prompt) { … }` ended `serq sample` / `serq spec` in "malformed IR (TypeError)" and
    `serq run` in a traceback: the request mark's `output` is null when the block has fewer than
    two parameters (docs/ir.md `request`). Both engines now record `ttft` and `response` and no
    `tpot`, and agree step by step."""
    prog = tmp_path / "p.sq"
    prog.write_text(_request_program(params, args))
    sessions = tmp_path / "s.json"
    rc, _, err = run(capsys, "sample", prog, "--seed", "1", "--sessions", "4", "-o", sessions)
    assert rc == 0, err
    rc, out, err = run(capsys, "spec", prog, "--sessions", sessions)
    assert rc == 0, err
    rc, out, err = run(capsys, "lockstep", prog, "--seed", "1", "--sessions", "6")
    assert rc == 0 and "agree" in out + err, err
    rc, out, err = run(capsys, "run", prog, "--horizon", "20", "--json")
    assert rc == 0, err
    client = json.loads(out)["client"]
    assert client["ttft"]["count"] > 0 and client["tpot"]["count"] == 0, client


# -- closed(n) whose sessions take no time: time never advances ------------------------------------

def test_closed_workload_of_sessions_that_take_no_time(tmp_path):
    """Found by the `constructs` fuzz target (`observe o = price(f, 1, 2);` as the whole server
    under `closed(2)`): `serq run` never returned, replacing ended sessions at t = 0 forever. Now a
    located run-time error (§11.9). Run as a process with a timeout, so that the hang of the
    code before the fix fails the test instead of stopping the suite."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    prog = tmp_path / "p.sq"
    prog.write_text("fn main() {\n  stage f : fifo;\n  workload { arrive closed(2); }\n"
                    "  server { observe o = price(f, 1, 2); }\n}\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "python"))
    p = subprocess.run([sys.executable, "-m", "serq.cli", "run", str(prog), "--horizon", "3"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith(f"{prog}:3:3: error: `arrive closed(2)`: ") and "never advances" in p.stderr, p.stderr


# -- issue 18's words where they do not belong: the error says where they do ----------------------

HOSTILE_BASE = """\
fn main() {
  stage a : ps(1);
  pool kv { cap 1024; block 16; }
  stage eng : step { budget 32; cost 0.01 + 0.0001 * tokens; memory kv; }
  pool slots { cap 2; admit via eng; }
  workload { arrive poisson(1); }
  server {
    hold slots (1), kv (20) { run eng prefill (20) growing kv; }
  }
}
"""


@pytest.mark.parametrize("old, new, message, at", [
    # `share` in a block read as a reserved word used as a name
    ("  server {\n", "  server {\n    share maxmin;\n",
     "`share …;` is an item of `fn main` (docs/language.md §11.14), not a statement", (8, 5)),
    # K's item words outside a step stage: a bare syntax error, now with where they belong
    ("  server {\n", "  server {\n    budget 3;\n", "`budget …;` is an item of a K step stage", (8, 12)),
    ("  workload {", "  cost 1;\n  workload {", "`cost …;` is an item of a K step stage", (6, 3)),
    # a lease after a statement that is not a hold (the generator's transfer programs met it)
    ("    hold slots (1), kv (20) { run eng prefill (20) growing kv; }\n",
     "    hold slots (1), kv (20) { run eng prefill (20) growing kv; }\n    run a (1); lease kv (inf);\n",
     "`lease P (t)` follows the block of a hold of P", (9, 16)),
    # a bare engine value outside a step stage's `cost`: an unknown name, now with what it is
    ("  server {\n", "  server {\n    observe x = residents;\n",
     "`residents` is the engine value `running.count` only in a K step stage's `cost`", (8, 17)),
])
def test_misplaced_words_of_issue_18_say_where_they_belong(old, new, message, at):
    from serq.errors import SerqError
    from serq.frontend import compile_source

    text = HOSTILE_BASE.replace(old, new, 1)
    assert text != HOSTILE_BASE
    with pytest.raises(SerqError) as info:
        compile_source(text, "t.sq", {})
    assert message in info.value.message, info.value.message
    assert (info.value.file, info.value.line, info.value.column) == ("t.sq",) + at, (
        info.value.line, info.value.column, info.value.message)


# -- the decode fast-forward beside a busy ps stage ---------------------------------------------

FF_PS = """\
fn main() {
  device acc { }
  pool kv { cap 64 * 16; block 16; preempt lifo; }
  engine eng on acc { slots cap 2; tokens cap 32; schedule { advance running; admit waiting; } execute (1); }
  pool slots on eng { }
  workload { arrive poisson(3); }
  stage a : ps(0.5);
  server {
    hold slots (1), kv (20) { run eng prefill (20) growing kv; run eng decode (4) growing kv; }
    run a (1);
  }
}
"""


def test_fast_forward_beside_a_ps_stage_agrees_in_lockstep(tmp_path, capsys):
    """Found by the `constructs` campaign (seeds 18102-18104, 19004-19008, all of its lockstep
    divergences): with the decode fast-forward on, the engine's iteration end was numbered one
    higher than serq_spec's (step 10: .event.seq 10 vs 11; SERQ_FAST_NO_FF=1 agreed), present
    since a5a9774. Fixed on main by 2330abc (no fast-forward from a template whose end is not the
    last event scheduled); this program fails on main before that commit."""
    prog = tmp_path / "p.sq"
    prog.write_text(FF_PS)
    rc, out, err = run(capsys, "lockstep", prog, "--seed", "1", "--sessions", "3")
    assert rc == 0 and "agree" in out, out + err


# -- a zero-work flow whose array members repeat ----------------------------------------------------

def test_zero_work_flow_over_one_member_twice_is_an_error_in_both_engines(tmp_path, capsys):
    """Found by the campaign (all targets, seed 19008): `run link[i], link[j] (0);` with i = j at
    run time stopped `serq run` with the located error of §11.14 while serq_spec completed the
    zero-work flow at once, so `serq lockstep` diverged at step 0. The rule holds for any work:
    both engines (and the Lean mirror) now check the stages before zero work completes."""
    prog = tmp_path / "p.sq"
    prog.write_text("fn main() {\n  stage link[2] : ps(1);\n  workload { arrive batch(2); }\n"
                    "  server { run link[serial == 0 ? 0 : 1], link[serial == 0 ? 0 : 1] (0); }\n}\n")
    sessions = tmp_path / "s.json"
    rc, _, err = run(capsys, "sample", prog, "--seed", "1", "--sessions", "2", "-o", sessions)
    want = f"{prog}:4:12: error: a run over several stages names one stage twice (link[0], link[0])"
    assert rc == 2 and err.startswith(want), err
    for argv in (["run", prog, "--horizon", "3"], ["lockstep", prog, "--seed", "1", "--sessions", "2"]):
        rc, out, err = run(capsys, *argv)
        assert rc == 2 and err.startswith(want), (argv, out, err)


# -- an engine array whose body reads a member's estimate (fuzz seed 22001) -----------------------

ESTIMATING_ARRAY = """
fn main() {
  device acc[2] { kv cap 1024; }
  pool kv[2] on acc[j] { block 16; }
  engine eng[2] on acc[j] {
    reqs cap 4;
    tokens cap 64;
    request () { prefill (8) growing kv[j]; decode (2) growing kv[j]; }
    schedule { advance running; admit waiting taking reqs[j] (1), kv[j] (16); }
    execute (0.01 + READ);
  }
  pool reqs[2] on eng[j] { queue fifo; }
  workload { arrive poisson(3); }
  server { set x = serial - 2 * floor(serial / 2); eng[x] (); }
}
"""


@pytest.mark.parametrize("read", ["est_rho(eng[j])", "price(eng[j], 1, 2)", "est_wait(eng[1])"])
def test_engine_array_body_reading_an_estimate_of_a_member(tmp_path, capsys, read):
    """Member 0's `execute` reading an estimate of the array marked every member, member 1 not
    yet declared: an IndexError in the linker. Every member keeps its estimates, and the run
    agrees in lockstep."""
    f = tmp_path / "a.sq"
    f.write_text(ESTIMATING_ARRAY.replace("READ", read))
    rc, out, err = run(capsys, "ir", f)
    assert rc == 0, err
    assert [(s["name"], s.get("estimates")) for s in json.loads(out)["stages"]] == [("eng[0]", True), ("eng[1]", True)]
    rc, _, err = run(capsys, "lockstep", f, "--seed", "1", "--sessions", "6")
    assert rc == 0, err


# -- `--set` of a capacity beyond the doubles: refused where the capacity is written -------------

REPLICAS = Path(__file__).resolve().parents[1] / "examples" / "multi-turn" / "replicas.sq"


@pytest.mark.parametrize("setting, where, what, command", [
    ("max_seqs=1e400", "71:14", "capacity `reqs` of about 1e400", ["check"]),
    ("max_seqs=1e-400", "71:14", "capacity `reqs` of about 1e-400", ["check"]),
    ("blocks=1e400", "62:12", "capacity `kv` of about 1e401", ["check"]),
    ("max_seqs=1e400", "71:14", "capacity `reqs` of about 1e400", ["run", "--horizon", "1"]),
    ("max_seqs=1e-400", "71:14", "capacity `reqs` of about 1e-400", ["sample", "--seed", "1", "--sessions", "1"]),
])
def test_a_capacity_beyond_the_doubles_is_refused_at_its_place(tmp_path, capsys, setting, where, what, command):
    """`serq check` accepted `--set max_seqs=1e400` on replicas.sq, `run` and `sample` refused it
    as `serq: error: the cap of pool reqs[0] …` with no place; 1e-400 got as far as a capacity
    printed as a fraction of 400 digits. Every command now refuses it at the `cap`, saying what to give."""
    argv = [command[0], REPLICAS, *command[1:], "--set", setting]
    if command[0] == "sample":
        argv += ["-o", tmp_path / "s.json"]
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert err.startswith(f"{REPLICAS}:{where}: error: {what} is beyond the range of doubles"), err
    assert err.splitlines()[0].endswith("; give a capacity in that range, or inf for no limit"), err


def test_sampling_a_loop_without_an_end_is_located_at_the_loop(tmp_path, capsys):
    """`serq sample` of examples/multi-turn/closed.sq without --horizon said `serq: error:
    closed.sq:39:7: …` (the program's name as the IR keeps it, inside the message); it is a program
    error at the loop now, FILE:LINE:COLUMN first, the path as given."""
    closed = Path(__file__).resolve().parents[1] / "examples" / "multi-turn" / "closed.sq"
    rc, _, err = run(capsys, "sample", closed, "--seed", "1", "--sessions", "2", "-o", tmp_path / "s.json")
    assert rc == 2
    assert err.startswith(f"{closed}:39:7: error: every session enters this `loop` and none can leave it"), err
    assert "sample with --horizon T" in err


FLOWS = Path(__file__).resolve().parents[1] / "examples" / "single-turn" / "flows.sq"
ARGUMENTS = Path(__file__).resolve().parents[1] / "examples" / "single-turn" / "arguments.sq"


@pytest.mark.parametrize("program, setting, expected", [
    (FLOWS, "up=-1", "37:21: error: ps stage uplink: capacity must be positive and finite, got -1; give the work"),
    (FLOWS, "down=0", "38:23: error: ps stage downlink: capacity must be positive and finite, got 0; give the work"),
    (FLOWS, "up=inf", "37:21: error: ps stage uplink: capacity must be positive and finite, got inf; give the work"),
    # the input's own range (docs/language.md §2) refuses it first now, at the declaration; a fifo
    # stage's check is tests/test_inputs.py's, on an input without one
    (ARGUMENTS, "servers=-1", "51:43: error: input \"servers\" = -1 (--set servers=-1) is outside its range "
                              "1 to inf: give a whole number >= 1 (--set servers=…)"),
])
def test_a_stage_capacity_set_out_of_range_is_refused_by_check(capsys, program, setting, expected):
    """`serq check flows.sq --set up=-1` said OK (the constant ps capacity was checked only when
    a run read it), and a fifo stage's servers were refused without the value or what to give."""
    rc, _, err = run(capsys, "check", program, "--set", setting)
    assert rc == 2 and err.startswith(f"{program}:{expected}"), err


# -- `speculate (slots, lookahead, limit)` that is no whole number (fuzz seed 22011) ---------------

SPECULATING = """fn main() {
  device acc { kv cap 1024; }
  pool kv on acc { block 16; }
  engine eng on acc {
    reqs cap 4;
    tokens cap 64;
    speculate (SPEC);
    request (p, o) { prefill (p) growing kv; decode (o) growing kv; }
    schedule { advance running; admit waiting taking reqs (1), kv (16); }
    execute (0.01);
  }
  pool reqs on eng { queue fifo; }
  workload { arrive poisson(1); }
  server { eng (8, 3); }
}
"""


@pytest.mark.parametrize("spec, message", [
    ("1.5, 0, inf", "speculate slots must be a whole number >= 0, got 1.5"),
    ("1, 1/2, 3", "speculate lookahead must be a whole number >= 0, got 0.5"),
    ("1, 0, 2.5", "speculate limit must be a whole number >= 0 or inf, got 2.5"),
    ("1, 0, -inf", "speculate limit must be a whole number >= 0 or inf, got -inf"),
])
def test_speculate_that_is_no_whole_number_is_one_located_line(tmp_path, capsys, spec, message):
    """serq_fast's `_speculates` read a constant's wire text with float(): `speculate (1.5, 0, inf)`
    was a ValueError traceback (`'3/2'`); serq_fast also named the item twice (`engine eng:
    speculate: engine eng: speculate slots …`) and serq_spec worded a fraction otherwise (`… a whole
    number of tokens, got 3/2`). Both engines print one line now, at the item."""
    f = tmp_path / "s.sq"
    f.write_text(SPECULATING.replace("SPEC", spec))
    expected = (f"{f}:7:5: error: engine eng: {message}; it counts tokens: round it (floor(…)) and keep it >= 0")
    for argv in (["run", f, "--horizon", "3"], ["lockstep", f, "--seed", "1", "--sessions", "2"]):
        rc, _, err = run(capsys, *argv)
        assert (rc, err.splitlines()[0] if err else "") == (2, expected), argv


STUCK = """\
fn main() {
  stage eng : step { budget 32; chunk 32; cost 0.01; memory kv; }
  pool kv { cap 4 * 16; block 16; preempt lifo; }
  pool slots { cap 2; admit via eng; }
  workload { arrive batch(1); }
  server {
    hold slots (1), kv (20) { run eng prefill (20) growing kv; run eng decode (80) growing kv; }
  }
}
"""


def test_sampling_a_request_that_cannot_fit_alone_says_why_at_once(tmp_path, capsys):
    """A request that outgrows the whole KV pool preempts itself forever (docs/language.md §11.7):
    `serq sample` without --horizon ran silently into its 2,000,000-step limit, minutes in the
    exact engine (found by the speculative-async helper at SERQ_LOCKSTEP_EXAMPLES=1600). It now
    notes the pool and what to do at the first preemption without progress, and a program whose
    sessions end gets no note. Seeded: the hook not passed to `run` -> the first assert fails."""
    prog = tmp_path / "stuck.sq"
    prog.write_text(STUCK)
    rc, _, err = run(capsys, "sample", prog, "--seed", "1", "--sessions", "1", "--max-steps", "300",
                     "-o", tmp_path / "s.json")
    assert "note: at step" in err and "on pool kv was preempted without progress" in err, err
    assert "sample with --horizon T" in err
    assert rc == 2 and "did not finish within 300 steps" in err
    ok = prog.with_name("fits.sq")
    ok.write_text(STUCK.replace("cap 4 * 16", "cap 8 * 16"))
    rc, _, err = run(capsys, "sample", ok, "--seed", "1", "--sessions", "1", "-o", tmp_path / "t.json")
    assert rc == 0 and "preempted without progress" not in err, err

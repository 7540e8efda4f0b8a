"""Async scheduling (docs/async.md): the front-end of `lag L;` and `eos (e)` — the IR they produce
and each link error, with its message and exact line:column (the marker `@@` of test_linker.py) —
and the state-line keys serq_spec prints for a `lag 1` engine. The rules themselves are pinned by
the hand-derived vectors vectors/spec/async_lag_* (tests/test_spec_vectors.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import compile_err, compile_ok
from test_linker import BASE, edit, expect

ROOT = Path(__file__).resolve().parent.parent

LAG = edit("    tokens cap 128;\n", "    tokens cap 128;\n    lag 1;\n")
EOS = edit("      decode (q - 1 - (need - p)) growing kv;\n",
           "      decode (q - 1 - (need - p)) growing kv;\n      eos (q > 3);\n", LAG)


def hold_of(ir):
    return next(s for b in ir["blocks"] for s in b if s["op"] == "hold")


def test_ir_of_lag_and_eos():
    ir = compile_ok(EOS)
    assert [s.get("lag") for s in ir["stages"] if s["kind"] == "step"] == [1]
    eos = hold_of(ir)["eos"]
    assert eos["k"] == "bin" and eos["op"] == ">"


def test_defaults_lag_0_and_no_eos():
    ir = compile_ok(BASE)
    assert [s["lag"] for s in ir["stages"] if s["kind"] == "step"] == [0]
    assert hold_of(ir)["eos"] is None


def test_lag_from_an_input_and_eos_on_a_hold():
    src = edit("    tokens cap 128;\n", "    tokens cap 128;\n    lag async_on;\n",
               edit('  let rate = args.number("rate", 1);', '  let rate = args.number("rate", 1);\n'
                    '  let async_on = args.number("async_on", 0);'))
    src = edit("  server { eng (a, b); }",
               "  server { eng (a, b); hold slots (1) eos (a > 20) { run cpu (1); } }", src)
    assert [s["lag"] for s in compile_ok(src, {"async_on": "1"})["stages"] if s["kind"] == "step"] == [1]
    # on a lag 0 engine `eos` is allowed and has no effect (one program serves both settings)
    ir = compile_ok(src, {"async_on": "0"})
    holds = [s for b in ir["blocks"] for s in b if s["op"] == "hold" and s["request"] is None]
    assert holds[0]["eos"] is not None


CASES = [
    (edit("    lag 1;\n", "    lag @@2;\n", LAG), "engine eng: `lag` must be 0 or 1, got 2"),
    (edit("    lag 1;\n", "    lag @@1/2;\n", LAG), "`lag` must be 0 or 1, got 1/2"),
    (edit("    lag 1;\n", "    lag @@rate;\n", LAG), None),   # an input: a constant, 1 is fine
    (edit("    lag 1;\n", "    lag @@serial;\n", LAG), "`serial` is a session attribute; a constant cannot read it"),
    (edit("    lag 1;\n", "    lag 1;\n    @@lag 0;\n", LAG), "`lag` given twice in engine `eng`"),
    (edit("  server { eng (a, b); }", "  server { eng (a, b); hold live (1) eos (@@1) { run cpu (1); } }", LAG),
     "`eos (…)` needs an engine request: pool `live`, where this hold queues, is admitted by no engine"),
    (edit("      eos (q > 3);\n", "      eos (q > 3);\n      @@eos (1);\n", EOS), "a second `eos (…)` in this request block"),
]


@pytest.mark.parametrize("marked,fragment", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_async_link_errors(marked, fragment):
    if fragment is None:
        text = marked.replace("@@", "")
        compile_ok(text)
        return
    expect(marked, fragment)


@pytest.mark.parametrize("word", ["lag", "eos"])
def test_the_new_keywords_are_reserved(word):
    e = compile_err(edit("  server { eng (a, b); }", f"  server {{ eng (a, b); set {word} = 1; }}", BASE))
    assert f"`{word}` is a reserved word" in e.message


def spec_lines(name: str) -> list[dict]:
    """serq_spec's state lines (docs/state.md) of a vectors/spec program."""
    from serq.frontend import load_program
    from serq_spec.program import Program
    from serq_spec.step import run
    from serq_spec.trace import state_text
    from serq_spec.workload import Workload
    d = ROOT / "vectors" / "spec" / name
    prog = Program(load_program(str(d / "program.sq"), {}), "program.sq", workload=Workload.replay(json.loads((d / "sessions.json").read_text())))
    lines = []
    run(prog, on_step=lambda cfg, rec, k: lines.append(json.loads(state_text(cfg, rec, k))), check=True)
    return lines


def test_state_line_keys_of_a_lag_engine():
    """docs/async.md §5: `pending` / `due` on the stage, `"pending": true` on a pending resident,
    STATUS `ending:<stage>`, the event `ends`; the step that starts the iteration shows the pool
    before the end is applied."""
    lines = spec_lines("async_lag_end")
    at1 = next(x for x in lines if x["now"] == "1" and x["records"]["iterations"])
    eng = at1["stages"][0]
    assert eng["pending"] == [] and eng["due"] == [0]
    assert [r.get("pending", False) for r in eng["residents"]] == [True, False]
    assert eng["residents"][0]["remaining"] == 0
    assert dict(at1["sessions"])[0] == "ending:eng"
    assert at1["pools"][0]["used"] == 12          # serial 0's block is still held
    ends = [x for x in lines if x["event"] and x["event"]["kind"] == "ends"]
    assert [(x["event"]["time"], x["event"]["arg"]) for x in ends] == [("2", "eng"), ("4", "eng"), ("4", "eng")]
    assert ends[0]["pools"][0]["used"] == 8 and dict(ends[0]["sessions"])[0] == "ended"


def test_a_lag_0_program_prints_no_new_keys():
    lines = spec_lines("zero_work")
    for x in lines:
        for st in x["stages"]:
            assert "pending" not in st and "due" not in st
            for r in st.get("residents", []):
                assert "pending" not in r
        assert x["event"] is None or x["event"]["kind"] != "ends"

"""Claims (docs/language.md "Claims"): the front-end's checks, each at its FILE:LINE:COL, the IR
form (docs/ir.md `claims`), and serq_spec's evaluation and results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import compile_ok
from serq.frontend import load_program
from serq_spec.claims import claim_results
from serq_spec.program import Program
from serq_spec.step import run
from serq_spec.workload import Workload
from test_linker import BASE, SERVER, edit, expect

ROOT = Path(__file__).resolve().parent.parent


def claim(text: str) -> str:
    return edit(SERVER, SERVER + "\n  " + text)


BAD = {
    "unknown stage": (claim("claim c : every iteration of @@nope (1);"), "unknown stage `nope`"),
    "not an engine": (claim("claim c : some iteration of @@cpu (1);"), "`cpu` is not an engine"),
    "engine value at end": (claim("claim c : at end (@@batch.tokens > 0);"), "is a value of an engine"),
    "schedule value": (claim("claim c : every iteration of eng (@@running.preempted == 0);"),
                       "cannot be read in a claim's `every iteration of …`"),
    "now in given": (claim("claim c given (@@now > 1) : every iteration of eng (1);"), "context variable `now`"),
    "now at end": (claim("claim c : at end (@@now > 1);"), "context variable `now`"),
    "draw": (claim("claim c : every iteration of eng (@@~exp(1) > 0);"), "a draw (`~exp`) cannot appear"),
    "attribute": (claim("claim c : at end (@@a > 0);"), "session attribute `a` cannot be read"),
    "undefined context": (claim("claim c : some iteration of eng (@@demand > 0);"), "context variable `demand`"),
    "twice": (claim("claim c : at end (1);\n  claim @@c : at end (0);"), "claim `c` is already declared"),
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_bad_claims_are_located(what):
    marked, fragment = BAD[what]
    expect(marked, fragment)


def test_claims_in_the_ir():
    ir = compile_ok(claim("claim kv_ok given (waiting.count > 0) : every iteration of eng "
                          "(batch.kv_decode + batch.kv_prefill <= 64 * bsz);\n"
                          "  claim some_full : some iteration of eng (batch.tokens == 128);\n"
                          "  claim empty : at end (used(kv) == 0);"))
    every, some, end = ir["claims"]
    assert (every["name"], every["kind"], every["stage"]) == ("kv_ok", "every", 0)
    assert every["given"]["k"] == "bin" and every["expr"]["op"] == "<="
    assert (some["kind"], some["given"]) == ("some", None)
    assert (end["kind"], end["stage"]) == ("end", None)
    assert every["at"][1:] == [BASE[:BASE.index(SERVER)].count("\n") + 2, 3]


def test_vector_claims_reproduce_the_hand_derivation():
    d = ROOT / "vectors" / "spec" / "claims_iterations"
    prog = Program(load_program(str(d / "program.sq"), {}), "program.sq",
                   workload=Workload.replay(json.loads((d / "sessions.json").read_text())))
    got = claim_results(run(prog, check=True))
    assert got == json.loads((d / "expected_claims.json").read_text())


def test_fast_reports_the_same_claims_as_the_derivation():
    from serq_fast.step import Sim
    from serq_fast.report import build
    d = ROOT / "vectors" / "spec" / "claims_iterations"
    ir = load_program(str(d / "program.sq"), {})
    sim = Sim(ir, seed=1, horizon=float("inf"), warmup=0.0, replay=json.loads((d / "sessions.json").read_text()))
    got = build(sim.run())["claims"]
    want = json.loads((d / "expected_claims.json").read_text())
    for w in want:
        w["first_held"], w["first_violated"] = (None if x is None else float(x) for x in (w["first_held"], w["first_violated"]))
    assert got == want


LONG_DECODES = """fn main() {
  device acc { kv cap 100 * 16; }
  pool kv on acc { block 16; evict lru; preempt lifo; }
  engine eng on acc {
    reqs cap 4;
    tokens cap 64;
    request (prompt, output) { prefill (prompt) growing kv; decode (output - 1) growing kv; }
    schedule { advance running; admit waiting taking reqs (1), kv (prompt) reserve (prompt); }
    execute (0.01 + 0.001 * batch.tokens);
  }
  pool reqs on eng { queue fifo; }
  workload { arrive batch(3); }
  server { eng (20, 200); }
  claim one_decode_each : every iteration of eng (batch.decoding <= 3);
  claim some_prefill : some iteration of eng (batch.prefilled > 0);
}
"""


def test_iteration_claims_see_every_decode_iteration_in_lockstep():
    """The decode fast-forward would skip iterations an iteration claim must count: lockstep
    compares the tallies of every step, and both engines count all 200 iterations."""
    from serq_drt.lockstep import lockstep
    from serq_fast.step import Sim
    from serq_fast.report import build
    ir = compile_ok(LONG_DECODES)
    assert lockstep(ir, 1, 3) > 200
    rep = build(Sim(ir, seed=1, horizon=float("inf"), warmup=0.0).run())
    every, some = rep["claims"]
    assert (every["result"], some["result"]) == ("holds", "witnessed")
    assert every["iterations"] == rep["stages"][0]["iterations"] == 200


@pytest.mark.parametrize("budget,step_slo", [("64", "holds"), ("200", "fails")])
def test_the_slo_example_meets_its_header_check(budget, step_slo):
    """examples/single-turn/vllm_slo.sq: the iteration-time SLO holds iff per_token * budget <=
    slo; over budget the first iteration (the first arrival at 0, P >= 101 tokens) breaks it."""
    from serq_fast.step import Sim
    from serq_fast.report import build
    ir = load_program(str(ROOT / "examples" / "single-turn" / "vllm_slo.sq"), {"budget": budget})
    rep = build(Sim(ir, seed=1, horizon=1e5, warmup=0.0, arrivals=100).run())
    got = {c["name"]: c for c in rep["claims"]}
    assert got["step_slo"]["result"] == step_slo
    assert got["step_slo"]["iterations"] == got["step_slo"]["checked"] == rep["stages"][0]["iterations"]
    assert got["drained"]["result"] == "holds"
    if step_slo == "fails":
        assert got["step_slo"]["first_violated"] == 0.0
    else:
        assert got["step_slo"]["violated"] == 0


def test_a_claim_that_is_not_0_or_1_stops_both_engines_at_the_claim():
    from serq_fast.step import Sim
    from serq_fast.expr import RunError
    from serq_spec.errors import SpecError
    from serq_spec.sample import sample
    text = claim("claim toks : every iteration of eng (batch.tokens);")
    ir = compile_ok(text)
    line = text[:text.index("claim toks")].count("\n") + 1
    with pytest.raises(SpecError) as spec_err:
        sample(ir, 1, 2, "t.sq", 100_000, 50.0)
    assert "claim toks must be 0 or 1" in spec_err.value.message and list(spec_err.value.at)[1:] == [line, 3]
    with pytest.raises(RunError, match=r"claim toks must be 0 or 1, got \d+\.0$") as fast_err:
        Sim(ir, seed=1, horizon=50.0).run()
    assert list(fast_err.value.at) == [0, line, 3]


def test_serq_spec_claims_prints_the_entries_last(capsys, monkeypatch):
    from serq.cli import main
    monkeypatch.chdir(ROOT / "vectors" / "spec" / "claims_iterations")
    assert main(["spec", "program.sq", "--sessions", "sessions.json", "--claims"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert json.loads(last) == {"claims": json.loads(Path("expected_claims.json").read_text())}


def test_a_claim_is_a_metric_column():
    from serq.metrics import summarize
    from serq_fast.step import Sim
    from serq_fast.report import build
    ir = load_program(str(ROOT / "examples" / "single-turn" / "vllm_slo.sq"), {"budget": "200"})
    row = summarize(build(Sim(ir, seed=1, horizon=1e5, warmup=0.0, arrivals=50).run()))
    assert (row["claim_step_slo_holds"], row["claim_batched_holds"], row["claim_drained_holds"]) == (0, 1, 1)


def test_the_tallies_survive_the_config_codec():
    from serq_spec.config import from_json
    d = ROOT / "vectors" / "spec" / "claims_iterations"
    prog = Program(load_program(str(d / "program.sq"), {}), "program.sq",
                   workload=Workload.replay(json.loads((d / "sessions.json").read_text())))
    cfg = run(prog, check=True)
    text = cfg.canonical()
    assert json.loads(text)["claims"][1] == [5, 4, 1, 3, "1", "2"]
    assert from_json(prog, json.loads(text)).canonical() == text

"""Runs over several ps stages and `share maxmin | bottleneck;` (docs/language.md §11.14): the
front-end's located refusals, the IR, the seeded faults of serq_fast caught by the hand-derived
vectors (vectors/spec/flow_maxmin, flow_bottleneck) and by random flow programs. The vectors
themselves run in tests/test_spec_vectors.py (spec) and tests/test_lockstep.py (both engines);
the random programs in tests/test_lockstep_random.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import compile_err, compile_ok

from serq_drt.lockstep import Divergence, compare_runs, sample_sessions

strategies = pytest.importorskip("strategies")
from hypothesis import HealthCheck, given, settings  # noqa: E402

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "spec"

BASE = """fn main() {
  stage a : ps(1);
  stage b : ps(2);
  stage f : fifo(1);
  device dev { kv cap 8; }
  engine eng on dev { tokens cap 8; schedule { advance running; admit waiting; } execute (1); }
  pool kv on dev { block 1; }
  stage link[2] : ps(1);
  workload { arrive batch(2); }
  server { STMT }
}
"""


def program(stmt: str, items: str = "") -> tuple[str, int, int]:
    """BASE with `stmt` in the server (its `@@` marks where the error must point) and `items`
    before the workload."""
    text = BASE.replace("  workload", items + "  workload").replace("STMT", stmt)
    if "@@" not in text:
        return text, 0, 0
    i = text.index("@@")
    text = text[:i] + text[i + 2:]
    return text, text.count("\n", 0, i) + 1, i - (text.rfind("\n", 0, i) + 1) + 1


REFUSED = {
    "a fifo stage": ("run a, @@f (1);", "", "`f` is a fifo stage; a run over several stages needs ps stages"),
    "an engine": ("run @@eng, a (1);", "", "`eng` is an engine; a run over several stages needs ps stages"),
    "one stage twice": ("run a, b, @@a (1);", "", "stage `a` is named twice in this run"),
    "one member twice": ("run link[1], @@link[1] (1);", "", "stage `link[1]` is named twice"),
    "prefill": ("@@run a, b prefill (1);", "", "`run … prefill` is not allowed on a run over several stages"),
    "growing": ("hold kv (1) { @@run a, b (1) growing kv; }", "", "`run … growing` is not allowed on a run over"),
    "a second share": ("run a, b (1);", "  share maxmin;\n  @@share bottleneck;\n",
                       "`share maxmin;` is already declared at t.sq:9:3"),
    "an unknown stage": ("run a, @@c (1);", "", "unknown stage `c`"),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_refused_at_file_line_column(what):
    stmt, items, fragment = REFUSED[what]
    text, line, col = program(stmt, items)
    e = compile_err(text)
    assert fragment in e.message, e.message
    assert (e.file, e.line, e.column) == ("t.sq", line, col), (e.line, e.column, e.message)
    assert f"t.sq:{line}:{col}: error: " in e.render()


def test_ir_of_a_flow_and_of_a_program_without_one():
    ir = compile_ok(program("run a, link[serial] (1); run b (1);")[0])
    flow = ir["blocks"][ir["workload"]["server"]][0]
    assert flow["op"] == "flow" and [r["base"] for r in flow["stages"]] == [0, 4]
    assert flow["stages"][1]["count"] == 2 and ir["share"] == "maxmin"   # the default
    assert compile_ok(program("run a, b (1);", "  share bottleneck;\n")[0])["share"] == "bottleneck"
    assert "share" not in compile_ok(program("run a (1);")[0])   # no flow: the IR of before


def vector_divergence(name: str) -> Divergence:
    d = VECTORS / name
    ir = json.loads((d / "ir.json").read_text())
    with pytest.raises(Divergence) as info:
        compare_runs(ir, json.loads((d / "sessions.json").read_text()), name)
    return info.value


def test_seeded_fault_bottleneck_as_maxmin_is_caught_by_the_vector(monkeypatch):
    """`flow_as_maxmin`: serq_fast divides bottleneck rates as maxmin; F's rate at t = 0 is 2/3
    instead of 1/2 (vectors/spec/flow_bottleneck/README.md)."""
    monkeypatch.setenv("SERQ_FAST_FAULT", "flow_as_maxmin")
    d = vector_divergence("flow_bottleneck")
    assert d.step == 0 and "rates" in d.path, (d.step, d.path)


def test_seeded_fault_flow_left_at_one_stage_is_caught_by_the_vector(monkeypatch):
    """`flow_one_stage`: a departing flow leaves its first stage only."""
    monkeypatch.setenv("SERQ_FAST_FAULT", "flow_one_stage")
    d = vector_divergence("flow_maxmin")
    assert d.step == 1, (d.step, d.path)


caught: list = []


@settings(max_examples=20, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(strategies.flow_programs())
def _fault_on_random(case):
    from serq.frontend import compile_source

    ir = compile_source(case.text, case.name, {})
    try:
        compare_runs(ir, sample_sessions(ir, case.seed, case.sessions, case.name), case.name)
    except Divergence:
        caught.append(case)


def test_seeded_fault_flow_left_at_one_stage_is_caught_by_random_programs(monkeypatch):
    """The random flow programs see the fault too (a strategy every program of which hid it
    would make tests/test_lockstep_random.py blind to it). Measured: 16 of the first 20."""
    monkeypatch.setenv("SERQ_FAST_FAULT", "flow_one_stage")
    caught.clear()
    _fault_on_random()
    assert len(caught) >= 5, len(caught)


def test_example_flows_is_mm1_ps_on_the_slower_link():
    """examples/single-turn/flows.sq at its defaults: every job crosses both links, so under
    `share bottleneck` it is M/M/1-PS on the slower link, W = 1/(1 − 0.5) = 2 (its header),
    within 2.5 half-widths of the run's own 95 % CI (tests/test_theory.py's rule)."""
    from serq.frontend import load_program
    from serq_fast.step import Sim

    ir = load_program(str(VECTORS.parent.parent / "examples" / "single-turn" / "flows.sq"), {})
    sim = Sim(ir, seed=11, horizon=12_000, warmup=1_200).run()
    st = sim.obs_stats[sim.observe_names.index("sojourn")]
    assert abs(st.mean - 2.0) <= 2.5 * st.ci(), (st.mean, st.ci())


def test_an_ir_file_with_another_share_is_refused(tmp_path):
    """docs/ir.md `share`: an IR file naming another policy is refused with its JSON path."""
    from serq.errors import SerqError
    from serq.irfile import read_ir_file

    ir = compile_ok(program("run a, b (1);")[0])
    f = tmp_path / "p.json"
    f.write_text(json.dumps(dict(ir, share="fair")))
    with pytest.raises(SerqError) as info:
        read_ir_file(str(f))
    assert "malformed IR: share: expected \"maxmin\" or \"bottleneck\", got \"fair\"" in info.value.message


def test_a_stage_named_twice_at_run_time_is_an_error_at_the_statement_in_both_engines():
    from serq_drt.lockstep import fast_lines, spec_lines
    from serq_fast.expr import RunError
    from serq_spec.errors import SpecError

    text, line, col = program("@@run link[0], link[serial] (1);")
    ir = compile_ok(text)
    # two sessions that draw nothing (sampling them would run into the error too)
    sessions = {"format": "serq-sessions/1", "program": "t.sq", "seed": 0, "inputs": {}, "arrivals": [],
                "machine": [], "trace_picks": [],
                "sessions": [{"serial": k, "init": [], "session": [], "turns": [[]]} for k in range(2)]}
    with pytest.raises(SpecError) as spec:
        spec_lines(ir, sessions, "t.sq")
    with pytest.raises(RunError) as fast:
        fast_lines(ir, sessions)
    words = "a run over several stages names one stage twice (link[0], link[0]); a flow crosses distinct stages"
    assert spec.value.message == fast.value.message == words
    assert list(spec.value.at) == list(fast.value.at) == [0, line, col]


PREEMPT = """fn main() {
  stage a : ps(1);
  stage b : ps(1);
  stage gate : delay;
  pool m { cap 2; preempt by (-serial); }
  workload { arrive batch(2); }
  server {
    hold m (1) {
      run gate (serial == 0 ? 1 : 0);
      grow m (serial == 0 ? 1 : 0);
      run a, b (serial == 1 ? 5 : 1);
    }
    observe done = now;
    run a, b (0);
    observe zero = now;
  }
}
"""


def test_a_holder_preempted_inside_a_flow_leaves_every_stage_and_zero_work_completes_at_once():
    """Derived by hand: session 1 starts a flow of 5 over a, b at t = 0; at t = 1 session 0's
    growth preempts it (`preempt by (-serial)`): it leaves both stages and waits at the head of m.
    Session 0's flow of 1 runs alone at rate 1 until t = 2; its zero-work flow completes at once
    (finished at both stages, `zero` = 2). Session 1 is admitted again at 2 and runs its 5 alone:
    done at 7. Both engines agree on every step."""
    from serq_drt.lockstep import spec_lines

    ir = compile_ok(PREEMPT)
    sessions = {"format": "serq-sessions/1", "program": "t.sq", "seed": 0, "inputs": {}, "arrivals": [],
                "machine": [], "trace_picks": [],
                "sessions": [{"serial": k, "init": [], "session": [], "turns": [[]]} for k in range(2)]}
    lines = [json.loads(x) for x in spec_lines(ir, sessions, "t.sq")]
    at1 = next(x for x in lines if x["now"] == "1")
    assert at1["records"]["preempted"] == [[1, "m", 0]]
    assert [st.get("active") for st in at1["stages"][:2]] == [[[0, "1"]], [[0, "1"]]]   # session 1 on neither
    assert dict(at1["sessions"])[1] == "queued:m"
    obs = [o for x in lines for o in x["records"]["observations"] if o[0] in ("done", "zero")]
    assert [(o[0], o[1], o[3]) for o in obs] == [("done", 0, "2"), ("zero", 0, "2"), ("done", 1, "7"), ("zero", 1, "7")]
    at2 = next(x for x in lines if x["now"] == "2")
    assert at2["records"]["finished"][:4] == [["a", 0], ["b", 0], ["a", 0], ["b", 0]]   # the flow, then zero work
    assert compare_runs(ir, sessions, "t.sq") == len(lines)

"""`serq sample` + `serq spec` on every example program, the seed's vLLM program under a load that
preempts, and bad input: a clear message and exit code 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serq.cli import main
from serq.frontend import load_program

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(str(p.relative_to(REPO)) for p in (REPO / "examples").rglob("*.sq") if "/lib/" not in str(p))


def sample_then_spec(tmp_path, capsys, program, sets=(), sessions=3, horizon=None, seed=1):
    set_args = [a for s in sets for a in ("--set", s)]
    extra = ["--horizon", horizon] if horizon else []
    out = tmp_path / "s.json"
    rc = main(["sample", program, *set_args, "--seed", str(seed), "--sessions", str(sessions), "-o", str(out), *extra])
    err = capsys.readouterr().err
    if rc != 0 and "not supported by serq_spec yet" in err:
        pytest.skip(f"a construct serq_spec reports as unsupported: {err.strip()}")
    assert rc == 0, err
    rc = main(["spec", program, *set_args, "--sessions", str(out), *extra])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    lines = [json.loads(x) for x in cap.out.splitlines()]
    assert lines and lines[0]["step"] == 0 and lines[0]["event"] is None
    assert [x["step"] for x in lines] == list(range(len(lines)))
    return lines


def arrival(program):
    from serq.errors import SerqError
    try:
        return load_program(str(REPO / program), {})["workload"]["arrival"]
    except SerqError as exc:
        pytest.skip(f"the front-end cannot load {program} yet: {exc}")


# Examples whose full run is too long for the default test run: (settings, horizon) that keep
# the run as it is at the defaults, only shorter. shared_prompt.sq at its defaults took 312 s
# here on one core: its 10,000-block pool put the whole free queue (59 KB) into every state line,
# and its 3 sessions of ~10 turns run ~8,000 steps. Its sessions hold at most ~600 blocks, so at
# 1,000 blocks nothing is evicted or preempted either (checked below): the same run, whose first
# 20 s (19 turns, about 2,500 steps) are checked here. tests/test_content_spec.py runs it to the
# end at blocks=400 and checks its prefix hits.
SHORTER = {"examples/multi-turn/shared_prompt.sq": (("blocks=1000",), "20")}

# Examples run smaller, not only shorter: offload_content.sq took 12 s at its defaults; 3 sessions
# on 300 GPU and 100 host blocks still spill and load back from the host tier (75 blocks by t = 3).
SMALLER = {"examples/multi-turn/offload_content.sq": (("N=3", "blocks=300", "host_blocks=100", "Z=1"), "3")}


# shared_prompt.sq (9 s) runs with -m slow: tests/test_content_spec.py samples it and runs it in
# serq_spec to its end in the default run, at 400 blocks.
SLOW_EXAMPLES = {"examples/multi-turn/shared_prompt.sq"}


@pytest.mark.parametrize("program", [pytest.param(p, marks=[pytest.mark.slow] if p in SLOW_EXAMPLES else [], id=p)
                                     for p in EXAMPLES])
def test_example_sample_and_spec(program, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    a = arrival(program)
    sessions = a.get("n", 3) if a["kind"] == "batch" else 3
    horizon = "30" if a["kind"] == "closed" else None   # closed-loop sessions never end
    sets, horizon = SHORTER.get(program, SMALLER.get(program, ((), horizon)))
    lines = sample_then_spec(tmp_path, capsys, program, sets=sets, sessions=sessions,
                             horizon=horizon)
    if program in SHORTER:
        assert not any(x["records"]["evicted"] or x["records"]["preempted"] for x in lines)
        assert sum(o[0] == "hit_tokens" for x in lines for o in x["records"]["observations"]) > 10
    if program in SMALLER:   # still the tier's run: blocks came back from it
        assert sum(p.get("tier_hits", 0) for p in lines[-1]["pools"]) > 0
    times = [json.loads(json.dumps(x["now"])) for x in lines]
    from fractions import Fraction
    assert [Fraction(t) for t in times] == sorted(Fraction(t) for t in times)


def test_vllm_twenty_sessions_preempts(tmp_path, capsys, monkeypatch):
    """The seed's program with 20 sessions at --set blocks=300 --set Lambda=2 preempts."""
    monkeypatch.chdir(REPO)
    lines = sample_then_spec(tmp_path, capsys, "examples/multi-turn/vllm.sq",
                             sets=("blocks=300", "Lambda=2"), sessions=20)
    kv = next(p for p in lines[-1]["pools"] if p["name"] == "kv")
    assert kv["preemptions"] > 0
    assert sum(len(x["records"]["preempted"]) for x in lines) == kv["preemptions"]


# -- bad input --------------------------------------------------------------------------------

def run_cli(capsys, *argv):
    rc = main(list(argv))
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err
    return rc, cap.err


def test_sessions_file_of_another_program(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    other = tmp_path / "other.json"
    assert main(["sample", "examples/single-turn/mm1.sq", "--seed", "1", "--sessions", "3", "-o", str(other)]) == 0
    capsys.readouterr()
    rc, err = run_cli(capsys, "spec", "examples/multi-turn/vllm.sq", "--sessions", str(other))
    assert rc == 2 and "does not fit the program" in err


def test_sessions_file_with_too_many_draws(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    f = tmp_path / "s.json"
    assert main(["sample", "examples/single-turn/mm1.sq", "--seed", "1", "--sessions", "2", "-o", str(f)]) == 0
    capsys.readouterr()
    data = json.loads(f.read_text())
    data["sessions"][0]["session"].append("1")
    f.write_text(json.dumps(data))
    rc, err = run_cli(capsys, "spec", "examples/single-turn/mm1.sq", "--sessions", str(f))
    assert rc == 2 and "does not fit the program" in err and "session 0" in err


@pytest.mark.parametrize("content, message", [
    ("{not json", "cannot read the sessions file"),
    ('{"format": "other"}', "not a serq-sessions/1"),
    ('{"format": "serq-sessions/1", "sessions": [{"serial": 0, "turns": [["0.5"]]}]}', "lowest terms"),
    ('{"format": "serq-sessions/1", "sessions": [{"serial": 3}]}', "serial 0"),
    ('{"format": "serq-sessions/1", "sessions": [], "arrivals": [1.5]}', "must be a string"),
])
def test_malformed_sessions_file(tmp_path, capsys, monkeypatch, content, message):
    monkeypatch.chdir(REPO)
    f = tmp_path / "bad.json"
    f.write_text(content)
    rc, err = run_cli(capsys, "spec", "examples/single-turn/mm1.sq", "--sessions", str(f))
    assert rc == 2 and message in err


def test_missing_files(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    rc, err = run_cli(capsys, "spec", "examples/single-turn/mm1.sq", "--sessions", str(tmp_path / "none.json"))
    assert rc == 2 and "cannot read" in err
    rc, err = run_cli(capsys, "sample", str(tmp_path / "none.sq"), "--seed", "1", "--sessions", "1")
    assert rc == 2 and "error" in err


HEAD_KEY = """
fn main() {
  device d { kv cap 1600; }
  pool kv on d { block 16; }
  engine e on d {
    reqs cap 4;
    tokens cap 64;
    request (p) { prefill (p) growing kv; }
    schedule { advance running; admit waiting only (remaining > 0) taking reqs (1), kv (p); }
    execute (1);
  }
  pool reqs on e { queue fifo; }
  workload { arrive batch(1); }
  server { e (16); }
}
"""

GUARD = """
fn main() {
  stage s : delay;
  workload { arrive batch(1); }
  server { set x = 2; branch (x) { run s (1); } }
}
"""


def write(tmp_path, text, name="p.sq"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_per_request_key_of_a_waiting_head_is_an_error(tmp_path, capsys):
    """A waiting head has no run: `admit waiting only (remaining > 0)` stops with a located error."""
    prog = write(tmp_path, HEAD_KEY)
    rc, err = run_cli(capsys, "sample", prog, "--seed", "1", "--sessions", "1")
    assert rc == 2 and "a per-request key" in err and "a waiting head has no run" in err and "p.sq" in err, err
    assert "not supported" not in err


def test_construct_outside_the_spec_is_named_with_its_location(tmp_path, capsys):
    """An IR document with what the front-end never produces (an observable `est_mean`) is refused
    with the construct and its location."""
    import json as _json
    from serq.frontend import compile_source
    ir = compile_source(GUARD.replace("set x = 2; branch (x) { run s (1); }", "run s (queue(s));"), "p.sq", {})
    run = next(st for b in ir["blocks"] for st in b if st["op"] == "run")
    run["work"]["f"] = "est_mean"
    f = tmp_path / "p.json"
    f.write_text(_json.dumps(ir))
    rc, err = run_cli(capsys, "sample", str(f), "--seed", "1", "--sessions", "1")
    assert rc == 2 and "not supported by serq_spec yet: observable est_mean()" in err and "p.sq:" in err, err


def test_run_time_guard(tmp_path, capsys):
    prog = write(tmp_path, GUARD)
    rc, err = run_cli(capsys, "sample", prog, "--seed", "1", "--sessions", "1")
    assert rc == 2 and "must be 0 or 1" in err and "p.sq:5:" in err


def test_batch_count_must_match(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    rc, err = run_cli(capsys, "sample", "examples/oracle/vllm_request.sq", "--seed", "1", "--sessions", "5")
    assert rc == 2 and "batch(2)" in err


@pytest.mark.parametrize("expr, named", [({"k": "obs", "f": "est_mean", "args": []}, "observable est_mean()"),
                                         ({"k": "ctx", "name": "est_gap"}, "context variable est_gap")])
def test_unsupported_binding_of_a_hold_is_refused_at_load(expr, named):
    """An `at admission` binding is an expression of its hold like the units: what the spec does
    not support in it is refused when the program is loaded (it slid under `drop`/`load` once)."""
    from serq.frontend import compile_source
    from serq_spec.errors import NotSupported
    from serq_spec.program import Program
    from test_spec_extensions import ONLY
    text = ONLY.replace("ONLY", "1").replace("request (p, q) {", "request (p, q) {\n      at admission { need = p; }")
    ir = compile_source(text, "p.sq", {})
    hold = next(st for b in ir["blocks"] for st in b if st.get("bindings"))
    assert hold["op"] == "hold"
    Program(ir, "p.sq")                                 # as compiled: accepted
    hold["bindings"][0]["expr"] = expr
    with pytest.raises(NotSupported, match=named.replace("(", r"\(").replace(")", r"\)")) as e:
        Program(ir, "p.sq")
    assert "p.sq:" in str(e.value)


def test_lockstep_names_the_file_of_a_run_time_error(tmp_path, capsys):
    """`serq lockstep` reports a run-time error at FILE:LINE:COL like `serq spec` and `serq run`
    (it printed the IR file index, `<file 0>:5:23`)."""
    prog = write(tmp_path, GUARD)
    for argv in (["lockstep", prog, "--seed", "1", "--sessions", "1"],
                 ["spec", prog, "--sessions", write(tmp_path, "", "unused.json")],
                 ["run", prog, "--horizon", "10"]):
        if argv[0] == "spec":
            ok = write(tmp_path, GUARD.replace("x = 2", "x = 1"), "ok.sq")
            assert main(["sample", ok, "--seed", "1", "--sessions", "1", "-o", argv[-1]]) == 0
            capsys.readouterr()
        rc, err = run_cli(capsys, *argv)
        assert rc == 2 and "must be 0 or 1" in err and "p.sq:5:23" in err and "<file" not in err, (argv[0], err)


def test_a_run_time_error_divergence_names_the_file(tmp_path, monkeypatch):
    """When only one engine stops with a run-time error, the divergence names its position as
    FILE:LINE:COL (the fast engine's messages carry the IR index `at 0:L:C`, which RunError takes
    out as its position)."""
    from serq.frontend import compile_source
    from serq_drt import lockstep as L
    from serq_fast.expr import RunError

    ir = compile_source(GUARD.replace("x = 2", "x = 1"), "p.sq", {})
    sessions = L.sample_sessions(ir, 1, 1, "p.sq")

    def failing(*a, **k):
        raise RunError("a branch guard must be 0 or 1, got 2.0 at 0:5:23")
    monkeypatch.setattr(L, "fast_lines", failing)
    with pytest.raises(L.Divergence) as e:
        L.compare_runs(ir, sessions, "p.sq")
    assert "(p.sq:5:23: error: a branch guard" in str(e.value.fast), vars(e.value)


def test_sample_refuses_a_loop_no_session_leaves(tmp_path, capsys, monkeypatch):
    """closed.sq's sessions `loop` with no `end` in the loop: without --horizon sampling would only
    run into its step limit (70 s), so it stops at once, locating the loop and saying what to do."""
    monkeypatch.chdir(REPO)
    rc, err = run_cli(capsys, "sample", "examples/multi-turn/closed.sq", "--seed", "1", "--sessions", "3")
    assert rc == 2
    assert "closed.sq:39:7:" in err and "--horizon" in err
    # a loop that can leave through `end` (here inside a branch) is sampled
    src = tmp_path / "leaves.sq"
    src.write_text("""fn main() {
  stage cpu : fifo(1);
  workload {
    arrive poisson(1);
    session { loop { turn; branch with (0.5) { end; } } }
  }
  server { run cpu (~exp(0.5)); }
}
""")
    out = tmp_path / "s.json"
    rc, err = run_cli(capsys, "sample", str(src), "--seed", "1", "--sessions", "4", "-o", str(out))
    assert rc == 0, err
    assert len(json.loads(out.read_text())["sessions"]) == 4


def test_a_sessions_file_sampled_with_other_inputs_says_so(tmp_path, capsys):
    # The draws of a session depend on the deployment (blocks=300 rejects a long conversation and
    # ends its session early), so a file sampled with other --set values can run out of draws;
    # both engines then name the inputs that differ instead of only "does not fit".
    prog = str(REPO / "examples/multi-turn/vllm.sq")
    out = tmp_path / "s.json"
    assert main(["sample", prog, "--set", "blocks=300", "--set", "Lambda=2", "--seed", "1",
                 "--sessions", "5", "-o", str(out)]) == 0
    capsys.readouterr()
    # (Lambda, which the sampled workload reads, is refused before the run: tests/test_inputs.py;
    # blocks only the deployment reads, so the run starts and finds the draws short)
    for argv in (["spec", prog, "--sessions", str(out)], ["run", prog, "--replay", str(out)]):
        assert main(argv + ["--set", "Lambda=2"]) == 2
        err = capsys.readouterr().err
        assert "does not fit the program" in err, err
        assert "sampled with blocks=300; this run has blocks=10000" in err, err
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "other inputs than the sessions file was sampled with: Lambda=0.3 (the file's: 2)" in err, err
    # with the file's own inputs both replay it
    assert main(["spec", prog, "--set", "blocks=300", "--set", "Lambda=2", "--sessions", str(out)]) == 0
    assert main(["run", prog, "--set", "blocks=300", "--set", "Lambda=2", "--replay", str(out)]) == 0


def test_a_zero_denominator_in_a_sessions_file_is_named(tmp_path, capsys):
    # "1/0" matched the rational pattern and reached Fraction(): an internal error in serq_spec and
    # a traceback in serq run --replay; now the wire format refuses it where it stands.
    prog = str(REPO / "examples/single-turn/mm1.sq")
    good = tmp_path / "s.json"
    assert main(["sample", prog, "--seed", "1", "--sessions", "3", "-o", str(good)]) == 0
    data = json.loads(good.read_text())
    data["arrivals"][1] = "1/0"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    capsys.readouterr()
    for argv in (["spec", prog, "--sessions", str(bad)], ["run", prog, "--replay", str(bad)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "arrivals[1]: a zero denominator: '1/0'" in err, err


def test_spec_refuses_a_warmup_not_below_the_horizon(tmp_path, capsys):
    prog = str(REPO / "examples/single-turn/mm1.sq")
    s = tmp_path / "s.json"
    assert main(["sample", prog, "--seed", "1", "--sessions", "3", "-o", str(s)]) == 0
    capsys.readouterr()
    assert main(["spec", prog, "--sessions", str(s), "--warmup", "10", "--horizon", "5"]) == 2
    assert "--warmup must be below --horizon" in capsys.readouterr().err

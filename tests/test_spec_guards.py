"""Defects reported against serq_spec after its author finished, each pinned by a test that failed
before the fix, and the crash hunt that followed: every bad value (inf, -inf, 0 in caps, units,
budgets, work, think times, granules, reuse) is a clear error with exit code 2 — never an
internal error — and printing the docs/state.md line never changes the state."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from serq.cli import main
from serq.frontend import load_program
from serq_spec.program import Program
from serq_spec.step import run
from serq_spec.trace import state_text
from serq_spec.workload import Workload

ENGINE = """
fn main() {{
  device acc {{ kv cap 10 * 16; }}
  pool kv on acc {{ block 16; evict lru; preempt lifo; }}
  engine eng on acc {{
    reqs cap 16;
    tokens cap {tokens};
    {granule}
    request (prompt, output) {{
      observe inside = budget_left(eng);
      prefill (prompt) growing kv;
      decode (output - 1) growing kv;
    }}
    schedule {{
      advance running each at most ({each});
      admit waiting taking reqs (1), kv (min(prompt, budget_left(eng)));
    }}
    execute ({execute});
  }}
  pool reqs on eng {{ queue fifo; }}
  workload {{ arrive batch(2); }}
  server {{
    observe outside = budget_left(eng);
    eng ({prompt}, {output});
  }}
}}
"""


def engine_program(tmp_path, **kw):
    args = {"tokens": "8", "granule": "", "each": "inf", "execute": "1", "prompt": "20", "output": "3"}
    args.update(kw)
    f = tmp_path / "p.sq"
    f.write_text(ENGINE.format(**args))
    return str(f)


def sample_spec(tmp_path, capsys, program, sessions=2, sets=()):
    """`serq sample` then `serq spec`; (exit code, stderr, state lines) of the first that fails."""
    set_args = [a for s in sets for a in ("--set", s)]
    out = tmp_path / "s.json"
    rc = main(["sample", program, *set_args, "--seed", "1", "--sessions", str(sessions), "-o", str(out)])
    cap = capsys.readouterr()
    if rc != 0:
        return rc, cap.err, []
    rc = main(["spec", program, *set_args, "--sessions", str(out)])
    cap = capsys.readouterr()
    return rc, cap.err, [json.loads(x) for x in cap.out.splitlines()]


def assert_clear_error(rc, err, *words):
    assert rc == 2, err
    assert "Traceback" not in err and "internal error" not in err and "malformed IR" not in err, err
    for w in words:
        assert w in err, err


def observations(lines, name):
    return [o for x in lines for o in x["records"]["observations"] if o[0] == name]


# -- a. budget_left(E) with `tokens cap inf` ---------------------------------------------------

def test_budget_left_of_infinite_budget_is_inf(tmp_path, capsys):
    rc, err, lines = sample_spec(tmp_path, capsys, engine_program(tmp_path, tokens="inf"))
    assert rc == 0, err
    outside, inside = observations(lines, "outside"), observations(lines, "inside")
    assert len(outside) == 2 and len(inside) == 2
    assert {o[4] for o in outside + inside} == {"inf"}


def test_budget_left_of_finite_budget_unchanged(tmp_path, capsys):
    rc, err, lines = sample_spec(tmp_path, capsys, engine_program(tmp_path, tokens="8"))
    assert rc == 0, err
    assert [o[4] for o in observations(lines, "outside")] == ["8", "8"]


# -- b. reuse below 0 keeps nothing ------------------------------------------------------------

REUSE = """
fn main() {{
  pool mem {{ cap 100; block 4; evict lru; }}
  stage cpu : delay;
  workload {{ arrive batch(1); session {{ turn; tool (1); turn; }} }}
  server {{
    hold mem (10) reuse ({reuse}) {{
      observe c = cached;
      run cpu (1);
    }} cache (10);
  }}
}}
"""


@pytest.mark.parametrize("reuse, kept", [("-inf", "0"), ("-3", "0"), ("0", "0"), ("3", "0"),
                                         ("5", "4"), ("inf", "8")])
def test_reuse_keeps_at_most_round_down(tmp_path, capsys, reuse, kept):
    f = tmp_path / "r.sq"
    f.write_text(REUSE.format(reuse=reuse))
    rc, err, lines = sample_spec(tmp_path, capsys, str(f), sessions=1)
    assert rc == 0, err
    assert [o[4] for o in observations(lines, "c")] == ["0", kept]
    entries = lines[-1]["pools"][0]["entries"]
    dead = [e for e in entries if e[0] < 0]
    # the first turn cached 8 (10 rounded down to block 4); what the second did not keep is dead
    assert sum(e[1] for e in dead) == 8 - int(kept)


# -- c. granule must be positive ---------------------------------------------------------------

@pytest.mark.parametrize("g", ["0", "-4", "-inf"])
def test_granule_not_positive_is_an_error(tmp_path, capsys, g):
    rc, err, _ = sample_spec(tmp_path, capsys, engine_program(tmp_path, granule=f"granule {g};"))
    assert_clear_error(rc, err, "engine eng", "granule")


@pytest.mark.parametrize("g", ["4", "inf"])
def test_granule_positive_runs(tmp_path, capsys, g):
    rc, err, lines = sample_spec(tmp_path, capsys, engine_program(tmp_path, granule=f"granule {g};"))
    assert rc == 0, err
    if g == "4":   # budget 8, prompt 20: chunks of 8 are multiples of 4; no chunk is rounded to 0
        first = [it for x in lines for it in x["records"]["iterations"]][0]
        assert first["assign"] == [[0, "prefill", 8]]


# -- d. printing a line never changes the state ------------------------------------------------

PS_DRAW = """
fn main() {
  stage cpu : ps(~uniform(1, 2));
  stage gate : delay;
  workload { arrive batch(3); }
  server {
    run gate (serial == 2 ? 0.5 : 0);
    run cpu (serial == 2 ? 0 : serial + 1);
    observe t = now;
  }
}
"""


def run_program(path, sessions_file, on_step=None):
    prog = Program(load_program(path, {}), "p.sq", workload=Workload.replay(json.loads(sessions_file.read_text())))
    return run(prog, on_step=on_step, check=True)


def test_state_line_does_not_draw(tmp_path, capsys):
    """A ps capacity that draws: the lines of `serq spec` must not consume machine-stream values
    (before the fix the line at t = 1/2 drew one, and the replay ran out of draws)."""
    f = tmp_path / "ps.sq"
    f.write_text(PS_DRAW)
    s = tmp_path / "s.json"
    assert main(["sample", str(f), "--seed", "1", "--sessions", "3", "-o", str(s)]) == 0
    capsys.readouterr()
    quiet = run_program(str(f), s)
    lines = []
    loud = run_program(str(f), s, on_step=lambda c, r, k: lines.append(state_text(c, r, k)))
    assert json.dumps(quiet.to_json(), sort_keys=True) == json.dumps(loud.to_json(), sort_keys=True)
    assert quiet.counters.machine == loud.counters.machine
    # the line at t = 1/2 shows the work left at the rate the pending departure was scheduled with
    half = json.loads(lines[1])
    assert half["now"] == "1/2"
    rate = Fraction(json.loads(s.read_text())["machine"][0]) / 2
    assert half["stages"][0]["active"][0] == [0, str(1 - rate / 2)]


def test_state_line_twice_is_the_same(tmp_path, capsys):
    f = tmp_path / "ps.sq"
    f.write_text(PS_DRAW)
    s = tmp_path / "s.json"
    assert main(["sample", str(f), "--seed", "1", "--sessions", "3", "-o", str(s)]) == 0
    capsys.readouterr()

    def twice(c, r, k):
        before = json.dumps(c.to_json(), sort_keys=True)
        assert state_text(c, r, k) == state_text(c, r, k)
        assert json.dumps(c.to_json(), sort_keys=True) == before
    run_program(str(f), s, on_step=twice)


# -- the crash hunt: located arithmetic errors, huge exact values, CLI arguments ---------------

SIMPLE = """
fn main() {{
  stage cpu : fifo(1);
  pool mem {{ cap 100; block 4; evict {evict}; }}
  {extra}
  workload {{ arrive batch(2); }}
  server {{
{body}
  }}
}}
"""


def simple(tmp_path, body, evict="lru", extra=""):
    f = tmp_path / "p.sq"
    f.write_text(SIMPLE.format(body=body, evict=evict, extra=extra))
    return str(f)


@pytest.mark.parametrize("body, message", [
    ("    observe x = (serial * 0) / (serial * 0);", "p.sq:8:5: error: 0 / 0 is undefined"),
    ("    observe x = (serial >= 0 ? inf : 0) - (serial >= 0 ? inf : 0);", "p.sq:8:5: error: inf - inf is undefined"),
    ("    observe x = ln(serial - 5);", "p.sq:8:5: error: ln of a negative value -5.0"),
    ("    hold mem (8) { run cpu (1); } cache ((serial >= 0 ? inf : 1) - (serial >= 0 ? inf : 1));",
     "p.sq:8:5: error: inf - inf is undefined"),
])
def test_arithmetic_error_in_a_statement_is_located(tmp_path, capsys, body, message):
    rc, err, _ = sample_spec(tmp_path, capsys, simple(tmp_path, body))
    assert_clear_error(rc, err, message)


def test_arithmetic_error_without_location_names_what_was_evaluated(tmp_path, capsys):
    """Keys, capacities and gauges have no location in the IR: the message names them."""
    body = "    hold mem (60) { run cpu (1); } cache (60);"
    rc, err, _ = sample_spec(tmp_path, capsys, simple(tmp_path, body, evict="by (age * (size >= 0 ? inf : 1))"))
    assert_clear_error(rc, err, "pool mem: an eviction key: 0 * inf is undefined")
    prog = simple(tmp_path, "    run cpu (1);", extra="gauge g = (queue(cpu) * 0) / (queue(cpu) * 0);")
    assert main(["sample", prog, "--seed", "1", "--sessions", "2", "-o", str(tmp_path / "g.json")]) == 0
    capsys.readouterr()
    rc = main(["spec", prog, "--sessions", str(tmp_path / "g.json"), "--gauges"])
    assert_clear_error(rc, capsys.readouterr().err, "gauge g: 0 / 0 is undefined")


def test_renewal_gap_error_names_the_arrival(tmp_path, capsys):
    f = tmp_path / "r.sq"
    f.write_text("fn main() { stage cpu : fifo(1); workload { arrive renewal(0); } server { run cpu (1); } }")
    rc, err, _ = sample_spec(tmp_path, capsys, str(f), sessions=2)
    assert_clear_error(rc, err, "`arrive renewal(…)`: a renewal gap must be positive and finite, got 0")


@pytest.mark.parametrize("expr, digits", [("(1e300 + serial)" + " * 1e300" * 15, 4801)])
def test_exact_values_beyond_python_text_limit_print(tmp_path, capsys, expr, digits):
    """Python refuses to print an int of more than 4300 digits by default; an exact value may
    have more (before the fix: an internal ValueError). `exp` and `pow` stay within the doubles
    (docs/language.md §4.1); `*` and `/` of the exact arithmetic do not."""
    rc, err, lines = sample_spec(tmp_path, capsys, simple(tmp_path, f"    observe x = {expr};"))
    assert rc == 0, err
    values = [o[4] for o in observations(lines, "x")]
    assert len(values) == 2 and len(values[0].split("/")[0]) >= digits


def test_sample_output_unwritable_is_a_clear_error(tmp_path, capsys):
    prog = simple(tmp_path, "    run cpu (1);")
    rc = main(["sample", prog, "--seed", "1", "--sessions", "2", "-o", str(tmp_path / "no" / "dir" / "s.json")])
    assert_clear_error(rc, capsys.readouterr().err, "cannot write the sessions file")


def test_negative_max_steps_is_refused(tmp_path, capsys):
    prog = simple(tmp_path, "    run cpu (1);")
    rc = main(["sample", prog, "--seed", "1", "--sessions", "2", "--max-steps", "-3"])
    assert_clear_error(rc, capsys.readouterr().err, "--max-steps must be >= 0")
    assert main(["sample", prog, "--seed", "1", "--sessions", "2", "-o", str(tmp_path / "s.json")]) == 0
    capsys.readouterr()
    rc = main(["spec", prog, "--sessions", str(tmp_path / "s.json"), "--max-steps", "-1"])
    assert_clear_error(rc, capsys.readouterr().err, "--max-steps must be >= 0")


ADVERSARIAL = [
    # (what, program keyword arguments of ENGINE) — every one either runs or stops with exit 2
    ("tokens cap inf", dict(tokens="inf")), ("each at most inf", dict(each="inf")),
    ("dynamic tokens cap -1", dict(tokens="(running.count >= 0 ? -1 : 1)")),
    ("dynamic tokens cap -inf", dict(tokens="(running.count >= 0 ? -inf : 1)")),
    ("dynamic each 0", dict(each="(running.count >= 0 ? 0 : 1)")),
    ("dynamic execute inf", dict(execute="(running.count >= 0 ? inf : 1)")),
    ("dynamic execute 0", dict(execute="(running.count >= 0 ? 0 : 1)")),
    ("prompt inf", dict(prompt="(serial >= 0 ? inf : 1)")), ("prompt 0", dict(prompt="0")),
    ("output -inf", dict(output="(serial >= 0 ? -inf : 1)")), ("output 1/2", dict(output="1/2")),
]


@pytest.mark.parametrize("what, kw", ADVERSARIAL, ids=[a[0] for a in ADVERSARIAL])
def test_adversarial_engine_values(tmp_path, capsys, what, kw):
    rc, err, _ = sample_spec(tmp_path, capsys, engine_program(tmp_path, **kw))
    if rc != 0:
        assert_clear_error(rc, err)


# -- a ps rate is fixed between changes of the job set (§11.5) ---------------------------------

PS_READ = """
fn main() {{
  stage cpu : ps(~uniform(1, 2));
  stage gate : delay;
  workload {{ arrive batch(3); }}
  server {{
    run gate (serial == 2 ? 0.5 : 0);
    {probe}
    run cpu (serial == 2 ? 0 : serial + 1);
    observe t = now;
  }}
}}
"""


def ps_run(tmp_path, capsys, probe):
    f = tmp_path / "ps.sq"
    f.write_text(PS_READ.format(probe=probe))
    s = tmp_path / "s.json"
    assert main(["sample", str(f), "--seed", "1", "--sessions", "3", "-o", str(s)]) == 0
    capsys.readouterr()
    lines = []
    cfg = run_program(str(f), s, on_step=lambda c, r, k: lines.append(json.loads(state_text(c, r, k))))
    return cfg, lines, json.loads(s.read_text())["machine"]


def test_ps_departure_leaves_the_other_job_its_exact_share(tmp_path, capsys):
    """Jobs of work 1 and 2 start together at rate φ/2 each: when the first leaves, the second
    has received exactly 1 — whatever φ was drawn. Before the fix the clock was advanced with a
    fresh draw at the departure (another rate than the one the departure was scheduled with)."""
    cfg, lines, machine = ps_run(tmp_path, capsys, "")
    dep = next(x for x in lines if x["event"] and x["event"]["kind"] == "finish" and x["event"]["arg"] == ["cpu", 0])
    assert dep["stages"][0]["active"] == [[1, "1"]]
    assert Fraction(dep["now"]) == 2 / Fraction(machine[0])           # 1 unit at φ₁/2
    assert len(machine) == 2                                          # one draw per reschedule


def test_reading_work_of_a_ps_stage_does_not_change_the_run(tmp_path, capsys):
    """`work(cpu)` read at t = 1/2 advances the clock with the rate in effect; it draws nothing."""
    _, plain, m1 = ps_run(tmp_path, capsys, "")
    _, probed, m2 = ps_run(tmp_path, capsys, "observe w = work(cpu);")
    assert m1 == m2
    def times(lines):
        return [o for o in observations(lines, "t")]

    assert times(plain) == times(probed)
    w = [o for o in observations(probed, "w") if o[1] == 2]
    rate = Fraction(m1[0]) / 2
    assert w[0][4] == str(3 - 2 * rate / 2)                           # 1 + 2 − both jobs' service


def test_front_end_error_is_passed_on_once(tmp_path, capsys):
    """The front-end's located message is printed as it is (before: `serq: error: FILE:L:C: error: …`,
    then `serq: FILE:L:C: error: …`; now as `serq check` prints it)."""
    f = tmp_path / "bad.sq"
    f.write_text("fn main() {\n  pool kv { cap 10; block 0; }\n  workload { arrive batch(1); }\n  server { }\n}\n")
    rc = main(["sample", str(f), "--seed", "1", "--sessions", "1"])
    err = capsys.readouterr().err
    assert_clear_error(rc, err, f"{f}:2:")
    assert err.startswith(f"{f}:2:"), err
    assert err.count("error:") == 1
    rc = main(["sample", str(f), "--set", "nope=1", "--seed", "1", "--sessions", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"{f}:2:") and err.count("error:") == 1 and "serq:" not in err


def test_budget_left_outside_with_a_drawing_budget_is_an_error(tmp_path, capsys):
    """`budget_left(E)` outside E's admission re-reads E's `tokens cap`: with a draw there it
    consumed a machine-stream value on every read (an observable changing the run); §4.3 forbids
    draws wherever the machine re-reads an expression. Without such a read the program runs."""
    prog = engine_program(tmp_path, tokens="floor(~uniform(8, 9))")
    rc, err, _ = sample_spec(tmp_path, capsys, prog)
    assert_clear_error(rc, err, "p.sq:", "budget_left(eng) outside its admission", "draw")
    text = (tmp_path / "p.sq").read_text()
    (tmp_path / "p.sq").write_text(text.replace("observe outside = budget_left(eng);", "")
                                   .replace("observe inside = budget_left(eng);", ""))
    rc, err, lines = sample_spec(tmp_path, capsys, prog)
    assert rc == 0, err


@pytest.mark.parametrize("arrive, work, message", [
    ("batch(2)", "~erlang(serial >= 0 ? inf : 1, 1)", "p.sq:5:5: error: ~erlang(inf, 1): arguments outside"),
    ("renewal(~erlang(inf, 1))", "1", "p.sq:3:29: error: `arrive renewal(…)`: the gap: ~erlang(inf, 1)"),
    ("renewal(~exp(-1))", "1", "p.sq:3:29: error: `arrive renewal(…)`: the gap: ~exp needs a mean >= 0"),
])
def test_draw_the_sampler_cannot_take_is_a_located_error(tmp_path, capsys, arrive, work, message):
    f = tmp_path / "p.sq"
    f.write_text(f"fn main() {{\n  stage cpu : fifo(1);\n  workload {{ arrive {arrive}; }}\n"
                 f"  server {{\n    run cpu ({work});\n  }}\n}}\n")
    rc, err, _ = sample_spec(tmp_path, capsys, str(f), sessions=2)
    assert_clear_error(rc, err, message)

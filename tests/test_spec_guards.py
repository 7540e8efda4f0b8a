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
    prog = Program(load_program(path, {}), "p.sq")
    prog.workload_data = Workload.replay(json.loads(sessions_file.read_text()))
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

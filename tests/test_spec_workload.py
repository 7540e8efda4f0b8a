"""Workload features of the spec: warm-up, gauges, renewal arrivals, unordered trace picks, and
the sessions file's fit to the program (docs/sessions.md)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from serq.cli import main

REPO = Path(__file__).resolve().parent.parent
VEC = REPO / "vectors" / "spec"


def spec_lines(capsys, *argv):
    rc = main(["spec", *argv])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    return [json.loads(x) for x in cap.out.splitlines()]


def observations(lines):
    return [o for x in lines for o in x["records"]["observations"]]


def test_warmup_drops_earlier_records(capsys):
    d = VEC / "s1111_two_turns"
    lines = spec_lines(capsys, str(d / "program.sq"), "--sessions", str(d / "sessions.json"), "--warmup", "5")
    assert any(x["event"] and x["event"]["kind"] == "warmup_end" and x["now"] == "5" for x in lines)
    got = {(o[0], o[3]) for o in observations(lines)}
    assert ("hit", "0") not in got and ("ttft", "2") not in got
    # turn 1 began at 0, before the warm-up: its response and tpot (known at 11) do not count either
    # (client metrics belong to turns counted in `turns`, docs/report.md "client")
    assert ("response", "11") not in got and ("tpot", "11") not in got
    assert {("hit", "16"), ("ttft", "17"), ("response", "26")} <= got
    full = spec_lines(capsys, str(d / "program.sq"), "--sessions", str(d / "sessions.json"))
    assert len(observations(full)) == len(observations(lines)) + 5


def test_gauges_on_request(tmp_path, capsys):
    prog = str(REPO / "examples" / "single-turn" / "ps.sq")
    f = tmp_path / "s.json"
    assert main(["sample", prog, "--seed", "2", "--sessions", "3", "-o", str(f)]) == 0
    capsys.readouterr()
    plain = spec_lines(capsys, prog, "--sessions", str(f))
    assert all("gauges" not in x["records"] for x in plain)
    with_g = spec_lines(capsys, prog, "--sessions", str(f), "--gauges")
    assert all(x["records"]["gauges"][0][0] == "in_system" for x in with_g)
    # the gauge is the ps stage's population at the end of every step
    for x in with_g:
        assert int(x["records"]["gauges"][0][1]) == len(x["stages"][0]["active"])


RENEWAL = """
fn main() {
  stage s : fifo;
  workload { arrive renewal(1/2 + ~uniform(0, 1)); }
  server { set t = now; run s (~exp(1)); observe sojourn = now - t; }
}
"""

TRACE = """
fn main() {
  stage s : delay;
  workload { trace "t.csv"; arrive batch(5); }
  server { run s (new); observe got = new; }
}
"""


def test_renewal_arrivals(tmp_path, capsys):
    p = tmp_path / "r.sq"
    p.write_text(RENEWAL)
    f = tmp_path / "s.json"
    assert main(["sample", str(p), "--seed", "3", "--sessions", "4", "-o", str(f)]) == 0
    capsys.readouterr()
    data = json.loads(f.read_text())
    times = [Fraction(t) for t in data["arrivals"]]
    assert len(times) == 4 and times[0] >= Fraction(1, 2)
    assert all(b - a >= Fraction(1, 2) for a, b in zip(times, times[1:]))
    lines = spec_lines(capsys, str(p), "--sessions", str(f))
    assert [x["event"]["time"] for x in lines if x["event"] and x["event"]["kind"] == "arrive"] == data["arrivals"]
    assert len([o for o in observations(lines) if o[0] == "sojourn"]) == 4


def test_unordered_trace_picks(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("session,turn,new,out,think\n0,1,3,1,0\n1,1,7,1,0\n")
    p = tmp_path / "t.sq"
    p.write_text(TRACE)
    f = tmp_path / "s.json"
    assert main(["sample", str(p), "--seed", "5", "--sessions", "5", "-o", str(f)]) == 0
    capsys.readouterr()
    picks = json.loads(f.read_text())["trace_picks"]
    assert len(picks) == 5 and set(picks) <= {0, 1}
    lines = spec_lines(capsys, str(p), "--sessions", str(f))
    got = {o[1]: o[4] for o in observations(lines)}
    assert got == {i: ("3" if k == 0 else "7") for i, k in enumerate(picks)}


def test_sessions_file_missing_a_turn(tmp_path, capsys):
    prog = str(REPO / "examples" / "multi-turn" / "vllm.sq")
    f = tmp_path / "s.json"
    assert main(["sample", prog, "--seed", "4", "--sessions", "2", "-o", str(f)]) == 0
    capsys.readouterr()
    data = json.loads(f.read_text())
    s = max(data["sessions"], key=lambda s: len(s["turns"]))
    s["turns"].pop()
    f.write_text(json.dumps(data))
    rc = main(["spec", prog, "--sessions", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and "does not fit the program" in err and "Traceback" not in err


@pytest.mark.parametrize("arrivals, bad", [(["-1"], "arrivals[0] = -1"), (["2", "1"], "arrivals[1] = 1")])
@pytest.mark.parametrize("command", ["spec", "run"])
def test_sessions_file_arrivals_are_checked_one_by_one(tmp_path, capsys, command, arrivals, bad):
    """Every arrival is checked, a lone one too (the check once ran over pairs only and a single
    negative arrival failed later as an event in the past): named by its field, no traceback,
    in the spec (`serq spec --sessions`) and in the fast engine's reader (`serq run --replay`)."""
    prog = str(REPO / "examples" / "single-turn" / "mm1.sq")
    f = tmp_path / "s.json"
    n = len(arrivals)
    assert main(["sample", prog, "--seed", "1", "--sessions", str(n), "-o", str(f)]) == 0
    capsys.readouterr()
    data = json.loads(f.read_text())
    assert len(data["arrivals"]) == n
    data["arrivals"] = arrivals
    f.write_text(json.dumps(data))
    argv = ["--sessions", str(f)] if command == "spec" else ["--replay", str(f), "--horizon", "100"]
    rc = main([command, prog, *argv])
    err = capsys.readouterr().err
    assert rc == 2 and bad in err and "must be >= 0" in err and "Traceback" not in err, err

"""A replay uses every value of its sessions file unless a limit cut the run (docs/sessions.md
"Unused values"): a machine-stream value left over when the run ends by itself stops both engines
with the same message; a run cut by --horizon may leave values. Before issue 13 neither engine
checked the machine stream at the end of a replay."""

from __future__ import annotations

import json

import pytest

from serq.cli import main
from test_report_errors import ENGINE_COST_0

# test_report_errors' engine, its `execute` drawing: one machine-stream value per iteration
PROGRAM = ENGINE_COST_0.replace("execute (0);", "execute (~exp(0.01));")


def serq(capsys, *argv) -> tuple[int, str]:
    rc = main([str(a) for a in argv])
    return rc, capsys.readouterr().err


@pytest.fixture()
def replay(tmp_path, capsys):
    """(program, the sampled sessions file, the same with one machine value added by hand)."""
    prog, sampled, edited = tmp_path / "eng.sq", tmp_path / "s.json", tmp_path / "extra.json"
    prog.write_text(PROGRAM)
    assert serq(capsys, "sample", prog, "--seed", "1", "--sessions", "3", "-o", sampled)[0] == 0
    data = json.loads(sampled.read_text())
    assert data["machine"], "the program draws on the machine stream"
    data["machine"].append("1/100")
    edited.write_text(json.dumps(data))
    return prog, sampled, edited, len(data["machine"])


def commands(prog, sessions, *extra):
    return (["run", prog, "--replay", sessions, *extra], ["spec", prog, "--sessions", sessions, *extra])


def test_a_machine_value_left_over_stops_both_engines_alike(replay, capsys):
    prog, sampled, edited, held = replay
    for argv in commands(prog, sampled):
        assert serq(capsys, *argv)[0] == 0, argv[0]
    expected = ("serq: error: the sessions file does not fit the program: the run ended with 1 unused "
                f"draw(s) of the machine stream (it used {held - 1} of {held})\n")
    for argv in commands(prog, edited):
        rc, err = serq(capsys, *argv)
        assert (rc, err) == (2, expected), argv[0]


def test_a_run_cut_by_the_horizon_may_leave_machine_values(replay, capsys):
    """The sampled run ends at about 0.24 s: a horizon of 0.1 cuts it, one of 10 does not."""
    prog, _, edited, _ = replay
    for argv in commands(prog, edited, "--horizon", "0.1"):
        assert serq(capsys, *argv) == (0, ""), argv[0]
    for argv in commands(prog, edited, "--horizon", "10"):
        rc, err = serq(capsys, *argv)
        assert rc == 2 and "unused draw(s) of the machine stream" in err, (argv[0], err)


def test_a_run_cut_by_max_steps_may_leave_machine_values(replay, capsys):
    prog, _, edited, _ = replay
    assert serq(capsys, "spec", prog, "--sessions", edited, "--max-steps", "5")[0] == 0


def test_a_turn_count_that_differs_reads_as_a_sentence():
    # it read "session 0 ended with ran 1 turns, the file has 8" (a replay of another program's file)
    from serq.sessionsfile import unused_session_draws
    msg = unused_session_draws(0, (0, 0), 1, 8, [(1, 0, 3)], (1, 7))
    assert msg == ("the sessions file does not fit the program: session 0 ended with 1 turn(s) run against the "
                   "file's 8; turn 1 stream: used 0 of 3; session stream: used 1 of 7"), msg

"""Program inputs (`args.number`): a repeated `--set`, an input's limits (`in LO to HI`, `whole`;
docs/language.md §2) and a replay under other inputs than its sessions file's (docs/sessions.md
"Inputs of a replay"). examples/single-turn/arguments.sq's header states each; this is its check.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from serq import api
from serq.cli import main
from serq.errors import SerqError
from serq.frontend import compile_source

ROOT = Path(__file__).resolve().parents[1]
ARGUMENTS = ROOT / "examples" / "single-turn" / "arguments.sq"
SERVERS_LINE = 51   # `let servers = args.number("servers", 1, in 1 to inf, whole);`


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err and "internal error" not in cap.err, cap.err
    return rc, cap.out, cap.err


def test_the_line_numbers_below_are_the_example_s():
    line = ARGUMENTS.read_text().splitlines()[SERVERS_LINE - 1]
    assert line.startswith('  let servers = args.number("servers", 1, in 1 to inf, whole);'), line


# -- a repeated --set: the last wins, never silently --------------------------------------------

def test_a_repeated_set_notes_both_values_and_the_last_wins(capsys, tmp_path):
    rc, out, err = run(capsys, "ir", ARGUMENTS, "--set", "rate=0.5", "--set", "servers=2", "--set", "rate=0.8")
    assert rc == 0
    assert err == "serq: note: --set rate is given twice (0.5, then 0.8): the last one, 0.8, is used\n"
    assert json.loads(out)["inputs"]["rate"] == "4/5"


@pytest.mark.parametrize("second", ["nan", "abc", ""])
def test_a_repeated_set_of_no_number_is_refused_without_the_note(capsys, second):
    """The note said `the last one, nan, is used` just above the error refusing nan (hostile-input
    campaign, branch hostile2): a value that is no number is refused alone."""
    rc, _, err = run(capsys, "check", ARGUMENTS, "--set", "rate=0.5", "--set", f"rate={second}")
    assert rc == 2 and err.startswith(f"serq: error: --set rate={second}: ") and "note" not in err, err


@pytest.mark.parametrize("first, second", [("0.5", "0.5"), ("0.5", "1/2"), ("inf", "+inf")])
def test_a_repeated_set_of_the_same_value_is_quiet(capsys, first, second):
    rc, _, err = run(capsys, "check", ARGUMENTS, "--set", f"deadline={first}", "--set", f"deadline={second}")
    assert rc == 0 and err == "", err


# -- an input's limits ----------------------------------------------------------------------------

@pytest.mark.parametrize("setting, column, message", [
    ("servers=0", 43, 'input "servers" = 0 (--set servers=0) is outside its range 1 to inf: give a whole number >= 1'),
    ("servers=inf", 43, None),   # inf is in the range but no whole number
    ("servers=1.5", 56, 'input "servers" = 1.5 (--set servers=1.5) is not a whole number, as its `whole` requires'),
    ("service_time=-1/4", 50, 'input "service_time" = -0.25 (--set service_time=-1/4) is outside its range 0 to inf: '
                              'give a number >= 0 (--set service_time=…)'),
    # a value of hundreds of digits is shown by its size, not spelled out over 400 characters
    # (hostile-input campaign, branch hostile2: `--set servers=1e400` made a 520-character line)
    ("servers=-1e400", 43, 'input "servers" = about -1e400 (--set servers=-1e400) is outside its range 1 to inf: '),
    ("servers=1e-400", 43, 'input "servers" = about 1e-400 (--set servers=1e-400) is outside its range 1 to inf: '),
])
def test_a_value_outside_an_input_s_limits_is_refused_at_the_declaration(capsys, setting, column, message):
    rc, out, err = run(capsys, "check", ARGUMENTS, "--set", setting)
    line = SERVERS_LINE - 1 if setting.startswith("service_time") else SERVERS_LINE
    column = 56 if setting == "servers=inf" else column
    assert rc == 2 and out == ""
    assert err.startswith(f"{ARGUMENTS}:{line}:{column}: error: "), err
    if message:
        assert message in err.splitlines()[0], err


@pytest.mark.parametrize("setting", ["servers=1", "servers=7", "service_time=0", "servers=1e3"])
def test_a_value_within_the_limits_is_taken(capsys, setting):
    rc, _, err = run(capsys, "check", ARGUMENTS, "--set", setting)
    assert rc == 0, err


def test_the_api_a_profile_and_a_sweep_meet_the_same_limits(tmp_path):
    with pytest.raises(SerqError, match=r'input "servers" = 0 \(--set servers=0\) is outside its range'):
        api.load(ARGUMENTS, servers=0)
    profile = json.loads((ROOT / "python" / "serq" / "profiles" / "a100-qwen3-8b-seed.json").read_text())
    profile["set"] = {"servers": "2.5"}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile))
    with pytest.raises(SerqError, match=r"= 2.5 \(the profile's servers=2.5\) is not a whole number") as exc:
        api.load(ARGUMENTS, profile=str(path))
    assert exc.value.render().startswith(f"{ARGUMENTS}:{SERVERS_LINE}:56: error:")
    from serq.sweep import sweep
    with pytest.raises(SerqError, match=r'input "servers" = -1 .* outside its range 1 to inf'):
        sweep(str(ARGUMENTS), {"servers": [1, -1]}, horizon=10, progress=False)


PROGRAM = """use "std/args";
fn main() {
  let x = args.number("x", DECL);
  stage desk : fifo(SERVERS);
  workload { arrive poisson(1); }
  server { run desk (~exp(1)); }
}
"""


def compile_error(decl: str, settings: dict | None = None, servers: str = "1") -> str:
    with pytest.raises(SerqError) as exc:
        compile_source(PROGRAM.replace("DECL", decl).replace("SERVERS", servers), "p.sq", settings or {})
    return exc.value.render()


@pytest.mark.parametrize("decl, message", [
    ("5, in 0 to 2", 'p.sq:3:31: error: input "x" = 5 (its default) is outside its range 0 to 2: change the '
                     "default or the limits"),
    ("0.5, whole", 'p.sq:3:33: error: input "x" = 0.5 (its default) is not a whole number'),
    ("1, in 2 to 1", "p.sq:3:31: error: the range 2 to 1 is empty: write the lower end first"),
    ("1, whole, whole", "p.sq:3:38: error: `whole` is given twice"),
    ("1, in 0 to 2, in 0 to 3", "p.sq:3:42: error: an input has one range (`in … to …`); the first is at p.sq:3:31"),
    ("1, integer", "p.sq:3:31: error: `integer` after an input's default: expected `whole` or `in LO to HI`"),
    ("1, in 0 to now", "p.sq:3:39: error: context variable `now` cannot be read in the upper end of an input's range"),
])
def test_a_bad_limit_is_a_located_error(decl, message):
    assert compile_error(decl).startswith(message)


def test_limits_may_read_constants_and_earlier_inputs_and_leave_the_ir_alone():
    src = PROGRAM.replace('let x = args.number("x", DECL);',
                          'let top = args.number("top", 4);\n  let x = args.number("x", 1, in -inf to top - 1, whole);')
    ir = compile_source(src.replace("SERVERS", "1"), "p.sq", {"x": "3"})
    plain = compile_source(src.replace(", in -inf to top - 1, whole", "").replace("SERVERS", "1"), "p.sq", {"x": "3"})
    assert ir == plain and ir["inputs"]["x"] == "3"
    with pytest.raises(SerqError, match=r'input "x" = 4 \(--set x=4\) is outside its range -inf to 3: give a whole number <= 3'):
        compile_source(src.replace("SERVERS", "1"), "p.sq", {"x": "4"})


def test_a_fifo_stage_still_refuses_bad_servers_from_an_input_without_limits():
    assert compile_error("1", {"x": "-1"}, servers="x").startswith(
        "p.sq:4:21: error: a fifo stage needs a whole, positive number of servers, got -1; give a whole number >= 1")


CHOICES = [   # examples whose input is a choice: (program, input, line of its declaration, a bad value)
    ("single-turn/mg1.sq", "law", 4),
    ("multi-turn/routing.sq", "policy", 3),
    ("multi-turn/replicas.sq", "policy", 3),
    ("multi-turn/priced_eviction.sq", "policy", 2),
    ("multi-turn/offload.sq", "tier", 2),
    ("multi-turn/offload_vllm.sq", "tier", 2),
    ("multi-turn/shared_prompt.sq", "pin", 2),
    ("multi-turn/agent_fork.sq", "parallel", 2),
    ("single-turn/pd_disagg.sq", "R", 3),
    ("single-turn/pd_disagg.sq", "disagg", 2),
    ("single-turn/pd_queues.sq", "nics", 2),
]


@pytest.mark.parametrize("program, name, bad", CHOICES, ids=[f"{p}:{n}" for p, n, _ in CHOICES])
def test_an_example_s_choice_input_refuses_a_value_it_does_not_offer(capsys, program, name, bad):
    path = ROOT / "examples" / program
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if f'args.number("{name}"' in text)
    for value in (bad, -1, "0.5"):
        rc, _, err = run(capsys, "check", path, "--set", f"{name}={value}")
        assert rc == 2 and err.startswith(f"{path}:{line}:"), err
        assert f'input "{name}" = ' in err, err


# -- a replay under other inputs than its sessions file's -----------------------------------------

@pytest.fixture(scope="module")
def sessions(tmp_path_factory) -> Path:
    """arguments.sq sampled at its defaults (rate 0.5, service_time 1): 40 sessions."""
    path = tmp_path_factory.mktemp("replay") / "s.json"
    path.write_text(json.dumps(api.load(ARGUMENTS).sample(seed=3, sessions=40)))
    return path


def replay(capsys, sessions: Path, *sets: str, command: str = "run", program: Path = ARGUMENTS):
    words = ["--replay", sessions, "--horizon", "1000", "--warmup", "0", "--json"] if command == "run" \
        else ["--sessions", sessions]
    return run(capsys, command, program, *words, *[w for s in sets for w in ("--set", s)])


@pytest.mark.parametrize("command", ["run", "spec"])
@pytest.mark.parametrize("sets, named", [
    (["rate=0.8"], "rate=0.8 (the file's: 0.5)"),                       # the arrival times
    (["service_time=2"], "service_time=2 (the file's: 1)"),             # `~det(svc)`'s value
    (["servers=2", "service_time=1/2"], "service_time=0.5 (the file's: 1)"),
])
def test_an_input_the_sampled_workload_reads_must_keep_the_file_s_value(capsys, sessions, command, sets, named):
    rc, out, err = replay(capsys, sessions, *sets, command=command)
    assert rc == 2 and out == ""
    first = err.splitlines()[0]
    assert first.startswith(f"{sessions}: error: this run gives the sampled workload other inputs than the "
                            f"sessions file was sampled with: {named};"), err
    name, value = named.split(" ")[0].split("=")
    assert f"serq sample {ARGUMENTS} --set {name}={value} …" in first and "servers" not in first


@pytest.mark.parametrize("sets", [["servers=2"], ["deadline=1"], ["servers=3", "deadline=2", "rate=1/2"]])
def test_an_input_only_the_deployment_reads_replays_as_asked(capsys, sessions, sets):
    rc, out, err = replay(capsys, sessions, *sets)
    assert rc == 0 and err == "", err
    rc0, out0, _ = replay(capsys, sessions)
    assert json.loads(out)["observe"] != json.loads(out0)["observe"]   # it took effect


def test_a_file_sampled_under_a_set_is_not_replayed_at_the_default(capsys, sessions, tmp_path):
    data = json.loads(sessions.read_text())
    data["inputs"]["rate"] = "4/5"
    other = tmp_path / "s08.json"
    other.write_text(json.dumps(data))
    rc, _, err = replay(capsys, other)
    assert rc == 2 and "rate=0.5 (the file's: 0.8)" in err and "--set rate=0.8," in err, err
    assert replay(capsys, other, "rate=4/5")[0] == 0


READS_THROUGH = """use "std/args";
fn main() {
  let r = args.number("r", 1);
  let m = args.number("m", 1);
  let twice = 2 * r;                 // the arrival rate through a `let`
  stage desk : fifo;
  workload { arrive poisson(twice); }
  server {
    set mean = m / 2;                // the draw's mean through an attribute
    set t = ~exp(mean);
    run desk (t);
  }
}
"""


@pytest.mark.parametrize("setting", ["r=2", "m=3"])
def test_an_input_read_through_a_let_or_an_attribute_counts(capsys, tmp_path, setting):
    program = tmp_path / "p.sq"
    program.write_text(READS_THROUGH)
    s = tmp_path / "s.json"
    s.write_text(json.dumps(api.load(program).sample(seed=1, sessions=5)))
    rc, _, err = replay(capsys, s, setting, program=program)
    assert rc == 2 and f"with: {setting} (the file's: 1)" in err, err


ACCEPTS = """use "std/args";
fn main() {
  let a = args.number("a", 0.5, in 0 to 1);
  let n = args.number("n", 2, in 0 to 4, whole);
  stage desk : fifo;
  workload { arrive batch(2); turn { accept (n, a); } }
  server { run desk (1); }
}
"""


def test_the_alpha_of_accept_is_an_input_the_sampled_workload_reads(capsys, tmp_path):
    """`accept (n, alpha)` (docs/language.md §7.3) draws acceptance counts the file holds: another
    alpha by `--set` would replay the file's counts silently (hostile-input campaign, branch hostile2)."""
    program = tmp_path / "p.sq"
    program.write_text(ACCEPTS)
    s = tmp_path / "s.json"
    s.write_text(json.dumps(api.load(program).sample(seed=1, sessions=2)))
    rc, _, err = replay(capsys, s, "a=0.9", command="spec", program=program)
    assert rc == 2 and f"{s}: error: this run gives the sampled workload other inputs" in err \
        and "with: a=0.9 (the file's: 0.5)" in err, err
    rc, _, err = replay(capsys, s, "a=0.5", "n=2", command="spec", program=program)
    assert rc == 0 and err == "", err


def test_files_without_inputs_replay_unchecked_and_an_ir_file_gets_a_note(capsys, sessions, tmp_path):
    data = json.loads(sessions.read_text())
    del data["inputs"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(data))
    rc, _, err = replay(capsys, bare, "rate=0.8")
    assert rc == 0 and err == "", err
    ir = tmp_path / "a.json"
    rc, out, _ = run(capsys, "ir", ARGUMENTS, "--set", "rate=0.8")
    ir.write_text(out)
    rc, _, err = replay(capsys, sessions, program=ir)
    assert rc == 0
    assert err == (f"serq: note: {sessions}: this run's inputs differ from those the sessions file was sampled "
                   "with (rate: file 0.5, run 0.8); from an IR file serq cannot tell whether the sampled "
                   "workload reads them (a replay keeps the file's values for those it reads): replay the "
                   ".sq program to have this checked\n"), err


def test_the_api_and_a_sweep_check_a_replay_too(sessions):
    data = json.loads(sessions.read_text())
    with pytest.raises(SerqError, match="rate=0.8 \\(the file's: 0.5\\)"):
        api.load(ARGUMENTS, rate=0.8).run(replay=data, horizon=100)
    with pytest.raises(SerqError, match="service_time=2 \\(the file's: 1\\)"):
        api.load(ARGUMENTS, service_time=2).spec(str(sessions))
    from serq.sweep import sweep
    table = sweep(str(ARGUMENTS), {"servers": [1, 2]}, horizon=100, replay=str(sessions), progress=False)
    assert len(table.runs) == 2
    with pytest.raises(SerqError, match="rate=1 \\(the file's: 0.5\\)"):
        sweep(str(ARGUMENTS), {"rate": [0.5, 1]}, horizon=100, replay=str(sessions), progress=False)
    assert Fraction(data["inputs"]["rate"]) == Fraction(1, 2)


def test_a_capacity_search_over_a_replay_may_not_vary_what_the_file_fixed(sessions):
    from serq.capacity import capacity
    with pytest.raises(SerqError, match="rate=1 \\(the file's: 0.5\\)"):
        capacity(str(ARGUMENTS), "rate", "sojourn.mean<5", reps=1, start=1, horizon=100, replay=str(sessions),
                 progress=False)


@pytest.mark.parametrize("value, shown", [(Fraction(-1, 4), "-0.25"), (Fraction(1, 3), "1/3"), (Fraction(1, 40000), "0.000025"),
                                          (Fraction(1, 10 ** 13), "1/10000000000000"), (Fraction(-7), "-7")])
def test_a_value_is_shown_as_a_user_writes_it(value, shown):
    from serq.inputs import shown_value
    assert shown_value(value) == shown


@pytest.mark.parametrize("value", ["abc", 5, None, "1/0"])
def test_a_recorded_input_that_is_no_wire_value_is_named_by_its_path(capsys, sessions, tmp_path, value):
    data = json.loads(sessions.read_text())
    data["inputs"]["rate"] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    rc, _, err = replay(capsys, bad)
    assert rc == 2 and err.startswith(f"{bad}: error: sessions file: inputs.rate: "), err


def test_the_manual_quotes_the_limit_error_as_it_is(capsys):
    """docs/language.md §2 quotes routing.sq's error for `--set policy=-1`, wrapped over lines."""
    path = ROOT / "examples" / "multi-turn" / "routing.sq"
    rc, _, err = run(capsys, "check", path, "--set", "policy=-1")
    first = err.splitlines()[0].replace(str(path), "routing.sq")
    manual = " ".join((ROOT / "docs" / "language.md").read_text().split())
    assert rc == 2 and f"`{first}`" in manual, first

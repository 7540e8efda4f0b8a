"""Issue 13 (hardening): each defect of the hardening audit, as a user meets it: a command that
once ended in a traceback, an unlocated error, a hang or a silently wrong result. Every test here
failed on the code before its fix (the commit message of each fix says so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from serq.cli import main

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "python" / "serq_vllm" / "programs"  # the vLLM model's programs
EXAMPLES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*.sq"))


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err, cap.err
    return rc, cap.out, cap.err


# -- D1: every shipped example runs at any horizon ------------------------------------------------

@pytest.mark.parametrize("horizon", ["1", "5", "20"])
@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_runs_at_any_horizon(capsys, example, horizon):
    """vllm_scenario.sq and vllm_request.sq ended in AttributeError when a request was still
    queued at the horizon: its admission amount reads a schedule `let`, read at the end outside
    any iteration."""
    rc, out, err = run(capsys, "run", ROOT / example, "--horizon", horizon)
    assert rc == 0, err
    assert "requests" in out or "stage" in out


# -- D2 / D9: JSON inputs within limits: nesting, size, regular files, gzip bombs ------------------

MM1 = ROOT / "examples" / "single-turn" / "mm1.sq"
TRACE = ROOT / "vectors" / "vllm" / "h_active_seqs.trace.json.gz"
SCENARIO = ROOT / "vectors" / "vllm" / "h_active_seqs.scenario.json"


def json_commands(f):
    """Every command that reads a JSON file, reading F in that role."""
    return {
        "replay": ["run", MM1, "--replay", f],
        "spec": ["spec", MM1, "--sessions", f],
        "ir-run": ["run", f],
        "ir-sample": ["sample", f, "--seed", "1", "--sessions", "1"],
        "oracle-run": ["oracle", "run", f],
        "compare": ["oracle", "compare", f, TRACE],
        "render": ["oracle", "render", f],
    }


@pytest.mark.parametrize("role", sorted(json_commands("x")))
def test_deeply_nested_json(tmp_path, capsys, role):
    """100,000 `[` ended in RecursionError (serq spec: "internal error")."""
    f = tmp_path / "deep.json"
    f.write_text("[" * 100_000)
    rc, out, err = run(capsys, *json_commands(f)[role])
    assert rc == 2, err
    assert "nested deeper than the limit of 10000" in err, err
    assert "internal error" not in err


@pytest.mark.parametrize("role", sorted(json_commands("x")))
def test_device_as_json_input(capsys, role):
    """`--replay /dev/zero` was read until memory ran out (21.7 GB in 34 s)."""
    rc, out, err = run(capsys, *json_commands("/dev/zero")[role])
    assert rc == 2, err
    assert "not a regular file" in err, err


def test_json_input_larger_than_the_limit(tmp_path, capsys, monkeypatch):
    from serq import inputfile

    monkeypatch.setattr(inputfile, "MAX_INPUT_BYTES", 1000)
    f = tmp_path / "big.json"
    f.write_text("[" + "0," * 1000 + "0]")
    rc, out, err = run(capsys, "run", MM1, "--replay", f)
    assert rc == 2 and "larger than the limit of 1000 bytes" in err, err


def test_gzip_bomb_trace(tmp_path, capsys):
    """A 1 MB gzip bomb as a trace expanded to 2.1 GB."""
    import gzip

    f = tmp_path / "bomb.json.gz"
    with gzip.open(f, "wb") as fh:
        chunk = b" " * 2**20
        for _ in range(300):  # 300 MiB of spaces, past the 256 MiB limit; ~300 KB compressed
            fh.write(chunk)
    for argv in (["oracle", "render", f], ["oracle", "compare", f, TRACE]):
        rc, out, err = run(capsys, *argv)
        assert rc == 2 and "gzip content is larger than the limit of 256 MiB" in err, err


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_device_as_program_or_library(tmp_path, capsys, device):
    """`use "/dev/zero";` ended in MemoryError; `use "/dev/urandom";` grew to 6 GB."""
    rc, out, err = run(capsys, "check", device)
    assert rc == 2 and err.startswith(f"{device}: error: cannot read: it is not a regular file"), err
    f = tmp_path / "p.sq"
    f.write_text(f'use "{device}";\nfn main() {{}}\n')
    rc, out, err = run(capsys, "check", f)
    assert rc == 2 and err.startswith(f"{f}:1:5: error: cannot read library \"{device}\": it is not a "
                                      "regular file"), err


def test_program_sources_larger_than_the_limit(tmp_path, capsys, monkeypatch):
    from serq import inputfile

    monkeypatch.setattr(inputfile, "MAX_SOURCE_BYTES", 100)
    (tmp_path / "lib.sq").write_text("// " + "x" * 60 + "\n")
    f = tmp_path / "p.sq"
    f.write_text('use "lib.sq";\n// ' + "y" * 30 + "\nfn main() {}\n")
    rc, out, err = run(capsys, "check", f)
    assert rc == 2 and err.startswith(f"{f}:1:5: error: cannot read library \"lib.sq\": the program's "
                                      "source files are larger than the limit"), err


# -- D10: a NUL byte in a `use` or `trace` path ------------------------------------------------------

def test_nul_byte_in_a_use_or_trace_path(tmp_path, capsys):
    """Was "internal error … embedded null byte" with no location."""
    f = tmp_path / "p.sq"
    f.write_bytes(b'use "a\x00b.sq";\nfn main() {}\n')
    rc, out, err = run(capsys, "check", f)
    assert rc == 2 and err.startswith(f'{f}:1:5: error: cannot read library "a\\0b.sq": the path holds '
                                      "a NUL byte"), err
    f.write_bytes((PROGRAMS / "vllm_scenario.sq").read_bytes()
                  .replace(b'use "vllm.sq', b'use "' + str(PROGRAMS).encode() + b"/vllm.sq")
                  .replace(b"data/preempt.csv", b"data/pre\x00empt.csv"))
    rc, out, err = run(capsys, "check", f)
    assert rc == 2 and 'error: cannot read trace "data/pre\\0empt.csv": the path holds a NUL byte' in err, err
    assert err.startswith(f"{f}:"), err


# -- D3 / D4: huge but valid numbers --------------------------------------------------------------

ORACLE = ROOT / "examples" / "oracle"


@pytest.mark.parametrize("argv, needle", [
    (["run", PROGRAMS / "vllm_scenario_async.sq", "--set", "shared=1e400", "--horizon", "5"],
     "the length of prefix 1 of about 1e400 is beyond the range of doubles"),
    (["run", ORACLE / "vllm_request.sq", "--set", "block=1e400", "--horizon", "5"],
     "is beyond the range of doubles"),
])
def test_settings_beyond_the_float_range(capsys, argv, needle):
    """Both ended in OverflowError: integer division result too large for a float."""
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and needle in err, err


@pytest.fixture
def mm1_sessions(tmp_path, capsys):
    import json

    f = tmp_path / "mm1.sessions.json"
    assert main(["sample", str(MM1), "--seed", "1", "--sessions", "3", "-o", str(f)]) == 0
    capsys.readouterr()
    return f, json.loads(f.read_text())


def _write(tmp_path, name, data):
    import json

    f = tmp_path / name
    f.write_text(json.dumps(data))
    return f


@pytest.mark.parametrize("command", ["run", "spec"])
def test_huge_draws_in_a_sessions_file(tmp_path, capsys, mm1_sessions, command):
    """A 400-digit draw was an OverflowError in serq run; a 5,000-digit one a ValueError. The
    400-digit one was refused by serq run only; both engines' checker refuses it now."""
    _, data = mm1_sessions
    flag = "--replay" if command == "run" else "--sessions"
    data["sessions"][0]["session"][0] = "1" + "0" * 5000
    rc, out, err = run(capsys, command, MM1, flag, _write(tmp_path, "d5k.json", data))
    assert rc == 2 and "sessions[0].session[0]: a value of 5001 characters" in err, err
    data["sessions"][0]["session"][0] = "1" + "0" * 400
    rc, out, err = run(capsys, command, MM1, flag, _write(tmp_path, "d400.json", data))
    assert rc == 2 and "sessions[0].session[0]: a draw of about 1e400 is beyond the range of doubles" in err, err


@pytest.mark.parametrize("role", sorted(json_commands("x")))
def test_json_integer_of_5000_digits(tmp_path, capsys, role):
    f = tmp_path / "bigint.json"
    f.write_text('{"format": "serq-sessions/1", "seed": ' + "7" * 5000 + "}")
    rc, out, err = run(capsys, *json_commands(f)[role])
    assert rc == 2 and "an integer of 5000 digits (the limit is 1000)" in err, err


def _scenario(**config):
    import json

    data = json.loads(SCENARIO.read_text())
    data["config"].update(config)
    return data


def test_huge_numbers_in_a_scenario(tmp_path, capsys):
    """num_gpu_blocks 10^500 was an uncaught SerqError; arrival_time 10^400 an OverflowError."""
    rc, out, err = run(capsys, "oracle", "run", _write(tmp_path, "b.json", _scenario(num_gpu_blocks=10**500)))
    assert rc == 2 and "config.num_gpu_blocks: must be at most 2^53 in size" in err, err
    rc, out, err = run(capsys, "oracle", "run", _write(tmp_path, "c.json", _scenario(num_gpu_blocks=2**20 + 1)))
    assert rc == 2 and "config.num_gpu_blocks: must be at most 1048576" in err, err
    data = _scenario()
    data["requests"][0]["arrival_time"] = 10**400
    rc, out, err = run(capsys, "oracle", "run", _write(tmp_path, "t.json", data))
    assert rc == 2 and "requests[0].arrival_time: must be a non-negative number" in err, err


def test_huge_time_in_a_trace(tmp_path, capsys):
    from serq import inputfile

    data = inputfile.read(str(TRACE), gzip_ok=True)
    data["steps"][0]["time"] = 10**400
    rc, out, err = run(capsys, "oracle", "render", _write(tmp_path, "tr.json", data))
    assert rc == 2 and "steps[0].time: must be a number (within binary64's range)" in err, err


# -- D5: a sessions file's seed ---------------------------------------------------------------------

@pytest.mark.parametrize("seed", [None, -7, 1.5, True])
@pytest.mark.parametrize("command", ["run", "spec"])
def test_sessions_file_seed_is_a_non_negative_integer(tmp_path, capsys, mm1_sessions, command, seed):
    """`"seed": null` passed the check and `run --replay` crashed (TypeError); -7 was accepted
    while `--seed -1` is refused."""
    _, data = mm1_sessions
    data["seed"] = seed
    flag = "--replay" if command == "run" else "--sessions"
    rc, out, err = run(capsys, command, MM1, flag, _write(tmp_path, "s.json", data))
    assert rc == 2 and "sessions file: seed: must be a non-negative integer" in err, err


# -- D6: a full device ---------------------------------------------------------------------------

FULL = "/dev/full"
needs_full = pytest.mark.skipif(not Path(FULL).exists(), reason="no /dev/full here")


@needs_full
@pytest.mark.parametrize("argv", [
    ["run", MM1], ["ir", MM1], ["check", MM1], ["sample", MM1, "--seed", "1", "--sessions", "2"],
    ["oracle", "render", TRACE], ["oracle", "run", SCENARIO],
])
def test_standard_output_on_a_full_device(argv):
    """`> /dev/full` was an OSError traceback (serq run, oracle render) or "internal error"."""
    import subprocess
    import sys

    with open(FULL, "w") as full:
        p = subprocess.run([sys.executable, "-m", "serq.cli", *map(str, argv)], stdout=full,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT,
                           env={"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 2, p.stderr
    assert p.stderr == "serq: error: writing the output failed: No space left on device\n", p.stderr


@needs_full
@pytest.mark.parametrize("argv, needle", [
    (["run", MM1, "--states", FULL], f"serq: error: --states {FULL}: cannot write: No space left"),
    (["run", MM1, "--records", FULL], f"serq: error: --records {FULL}: cannot write: No space left"),
    (["sample", MM1, "--seed", "1", "--sessions", "2", "-o", FULL], "serq: error: cannot write the sessions file"),
    (["oracle", "run", SCENARIO, "-o", FULL], f"serq: error: cannot write {FULL}: No space left"),
])
def test_output_file_on_a_full_device(capsys, argv, needle):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and err.startswith(needle), err


# -- D8: an interrupted run never leaves a file that looks complete, nor destroys the old one -----

def _only_file(folder):
    return sorted(p.name for p in folder.iterdir())


def test_records_interrupted_while_written(tmp_path, capsys, monkeypatch):
    """Ctrl-C while the records were written left the rows written so far, with nothing marking
    the file incomplete (and the previous file was gone)."""
    import csv

    from serq_fast import report

    f = tmp_path / "mid.csv"
    f.write_text("the previous records\n")
    real = csv.writer

    class Interrupted:
        def __init__(self, fh):
            self.w, self.n = real(fh), 0

        def writerow(self, row):
            self.n += 1
            if self.n == 3:
                raise KeyboardInterrupt
            self.w.writerow(row)

    monkeypatch.setattr(report.csv, "writer", Interrupted)
    rc, out, err = run(capsys, "run", MM1, "--horizon", "50", "--records", f)
    assert rc == 130 and "interrupted" in err
    assert f.read_text() == "the previous records\n"
    assert _only_file(tmp_path) == ["mid.csv"]


def test_states_interrupted_during_the_run(tmp_path, capsys, monkeypatch):
    from serq_fast import trace

    f = tmp_path / "states.jsonl"
    f.write_text("the previous states\n")
    real, calls = trace.dump_line, []

    def interrupted(line):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(line)

    monkeypatch.setattr(trace, "dump_line", interrupted)
    rc, out, err = run(capsys, "run", MM1, "--horizon", "50", "--states", f)
    assert rc == 130
    assert f.read_text() == "the previous states\n"
    assert _only_file(tmp_path) == ["states.jsonl"]


def test_outputs_written_whole_keep_their_permissions(tmp_path, capsys):
    f = tmp_path / "r.csv"
    f.write_text("old\n")
    f.chmod(0o640)
    rc, out, err = run(capsys, "run", MM1, "--horizon", "20", "--records", f, "--states", tmp_path / "s.jsonl")
    assert rc == 0, err
    assert f.read_text().startswith("session,") or f.read_text().count("\n") > 1
    assert (f.stat().st_mode & 0o777) == 0o640
    assert (tmp_path / "s.jsonl").read_text().count("\n") > 1
    assert _only_file(tmp_path) == ["r.csv", "s.jsonl"]


# -- D7: Ctrl-C while the parser is built --------------------------------------------------------

def test_interrupt_while_the_parser_is_built(capsys, monkeypatch):
    """A SIGINT in the first ~0.1 s (importing the subcommands) was a KeyboardInterrupt traceback."""
    import serq.cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(serq.cli, "build_parser", interrupted)
    rc, out, err = run(capsys, "run", MM1)
    assert rc == 130 and err == "serq: interrupted\n"



# -- D11: a sessions file holds exactly what the program's workload spawns ----------------------

@pytest.mark.parametrize("command", ["run", "spec"])
@pytest.mark.parametrize("arrivals, needle", [
    (0, "3 session(s) need 3, the file has 0"),
    (2, "3 session(s) need 3, the file has 2"),
    (100_000, "3 session(s) need 3, the file has 100000"),
])
def test_arrivals_that_do_not_match_the_sessions(tmp_path, capsys, mm1_sessions, command, arrivals, needle):
    """`arrivals: []` with 20 sessions ran 0 sessions, 10 arrivals for 20 ran 10, 10^6 arrivals for
    20 ran on: all with exit 0."""
    _, data = mm1_sessions
    data["arrivals"] = [str(i) for i in range(arrivals)]
    flag = "--replay" if command == "run" else "--sessions"
    rc, out, err = run(capsys, command, MM1, flag, _write(tmp_path, "s.json", data))
    assert rc == 2 and "sessions file: arrivals: the program's `arrive poisson` takes one arrival time" in err, err
    assert needle in err, err


def test_extra_sessions_of_a_batch(tmp_path, capsys):
    prog = PROGRAMS / "vllm_scenario.sq"
    f = tmp_path / "b.json"
    assert main(["sample", str(prog), "--seed", "1", "--sessions", "2", "-o", str(f)]) == 0
    capsys.readouterr()
    import json

    data = json.loads(f.read_text())
    data["sessions"].append(dict(data["sessions"][-1], serial=2))
    for command, flag in (("run", "--replay"), ("spec", "--sessions")):
        rc, out, err = run(capsys, command, prog, flag, _write(tmp_path, "b3.json", data))
        assert rc == 2 and "sessions file: sessions: the program spawns batch(2), the file has 3" in err, err
    data["sessions"].pop()
    data["arrivals"] = ["0", "1"]
    rc, out, err = run(capsys, "run", prog, "--replay", _write(tmp_path, "ba.json", data))
    assert rc == 2 and "(`arrive batch`) takes no arrival times, the file has 2" in err, err


# -- D12: one rule for every path and number on the command line --------------------------------

@pytest.mark.parametrize("argv, needle", [
    (["--records", ""], "--records needs a file path, got an empty one"),
    (["--states", ""], "--states needs a file path, got an empty one"),
    (["--records", "-"], "--records - : records are written to a file"),
    (["--records", "SAME", "--states", "SAME"], "--records and --states name the same file"),
])
def test_output_paths_of_serq_run(tmp_path, capsys, monkeypatch, argv, needle):
    """`--records ''` and `--states ''` did nothing; `--records -` wrote a file named `-`;
    `--records X --states X` lost one of them."""
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, "run", MM1, "--horizon", "5", *argv)
    assert rc == 2 and err.startswith(f"serq: error: {needle}"), err
    assert _only_file(tmp_path) == []


@pytest.mark.parametrize("argv", [
    ["run", MM1, "--horizon", "1_0"], ["run", MM1, "--seed", "٧"], ["run", MM1, "--warmup", "1_0"],
    ["run", MM1, "--arrivals", "１"], ["run", MM1, "--horizon", "1e400"], ["run", MM1, "--horizon", "nan"],
    ["lockstep", MM1, "--sessions", "2", "--horizon", "nan"],
    ["lockstep", MM1, "--sessions", "2_0"], ["lockstep", MM1, "--sessions", "2", "--max-steps", "1_0"],
    ["sample", MM1, "--seed", "1_0", "--sessions", "2"], ["sample", MM1, "--seed", "1", "--sessions", "٢"],
    ["spec", MM1, "--sessions", "x.json", "--max-steps", "1_0"],
    ["oracle", "compare", TRACE, TRACE, "--context", "1_0"],
])
def test_numbers_on_the_command_line_follow_the_set_rule(capsys, argv):
    """`--horizon 1_0` and `--seed ٧` were accepted while `--set` refuses both."""
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err
    assert "in ASCII digits" in err or "beyond binary64's range" in err, err


# -- D13: run-time errors name the statement of the expression ----------------------------------

@pytest.mark.parametrize("need, needle", [
    ("~exp(service)", "a constant of about 1e400 is beyond the range"),  # with --set service=1e400
    ("pow(10, 1e10)", "pow(10.0, 10000000000.0) is beyond the range of doubles"),
    ("~exp(-inf)", "~exp(-inf): arguments outside what the draw can sample"),
    ("0 / (now - now)", "0 / 0 is undefined"),
])
def test_run_time_errors_are_located(tmp_path, capsys, need, needle):
    """These named no position: `--set service=1e400` on mm1.sq, pow(10, 1e10), ~exp(-inf), x/0."""
    f = tmp_path / "mm1.sq"
    f.write_text(MM1.read_text().replace("set need = ~exp(service);", f"set need = {need};"))
    extra = ["--set", "service=1e400"] if "constant" in needle else []
    rc, out, err = run(capsys, "run", f, "--horizon", "5", *extra)
    assert rc == 2 and needle in err and err.startswith(f"{f}:37:5: error: "), err


# -- D19: sampling more sessions than fit is refused up front ------------------------------------

@pytest.mark.parametrize("command", ["sample", "lockstep"])
def test_too_many_sessions_refused_up_front(capsys, command):
    """`serq sample --sessions 1000000000` grew past 2.7 GB before anything said no."""
    rc, out, err = run(capsys, command, MM1, "--seed", "1", "--sessions", "1000000000")
    assert rc == 2 and "--sessions 1000000000: at most 250000 sessions are sampled" in err, err


# -- D14: x / 0 is ±inf in both engines (and SerqLang, and the front-end's constants) -------------

def test_division_by_zero_at_run_time_agrees(tmp_path, capsys):
    """serq_spec gave inf, serq_fast stopped with "division by zero": lockstep diverged at step 2."""
    f = tmp_path / "mm1.sq"
    f.write_text(MM1.read_text().replace("set need = ~exp(service);",
                                         "set need = min(~exp(service), 1 / (now - t_in));"))
    rc, out, err = run(capsys, "lockstep", f, "--seed", "1", "--sessions", "5")
    assert rc == 0 and "steps agree" in out, out + err
    rc, out, err = run(capsys, "run", f, "--horizon", "5")
    assert rc == 0, err


# -- D18: a program too large is refused up front ------------------------------------------------

def test_five_megabyte_program_refused_up_front(tmp_path, capsys):
    """A 5 MB block comment took 1.24 GB; a 5 MB program more than 30 s."""
    import time

    f = tmp_path / "big.sq"
    f.write_text("/*" + "x" * 5_000_000 + "*/ fn main() {}\n")
    t0 = time.perf_counter()
    rc, out, err = run(capsys, "check", f)
    assert rc == 2 and "larger than the limit of 1 MiB together" in err, err
    assert time.perf_counter() - t0 < 2


# -- D16: an exponential `def` is refused at a located limit -------------------------------------

def test_exponential_definition_refused_with_its_location(tmp_path, capsys, monkeypatch):
    """40 levels of d_i(x) = d_{i-1}(x) + d_{i-1}(x) ran `serq check` for more than 30 s CPU."""
    import re

    from serq import linker

    monkeypatch.setattr(linker, "MAX_EXPANSIONS", 1000)  # the real limit, 10000, takes ~2 s to reach
    lines = ["def d0(x) = x + 1;"] + [f"def d{i}(x) = d{i - 1}(x) + d{i - 1}(x);" for i in range(1, 41)]
    f = tmp_path / "expo.sq"
    f.write_text("\n".join(lines) + "\nfn main() {\n  stage s : fifo(1);\n  workload { arrive poisson(1); }\n"
                 "  server { run s (d40(1)); }\n}\n")
    rc, out, err = run(capsys, "check", f)
    assert rc == 2 and re.match(rf"{re.escape(str(f))}:\d+:\d+: error: expanding `d\d+` here passes the "
                                r"limit of 1000 definition expansions", err), err


# -- D11 (rest): a turn list no turn used is an error in both engines -----------------------------

@pytest.mark.parametrize("command", ["run", "spec"])
def test_unused_turn_list_is_an_error(tmp_path, capsys, mm1_sessions, command):
    """A sessions file with a turn list beyond the turns a session runs: serq_spec refused it at
    the session's end, serq_fast replayed it with exit 0 (the list was ignored)."""
    _, data = mm1_sessions
    data["sessions"][1]["turns"].append(["1/2"])
    flag = "--replay" if command == "run" else "--sessions"
    rc, out, err = run(capsys, command, MM1, flag, _write(tmp_path, "s.json", data))
    assert rc == 2 and "session 1" in err and "1 turn" in err and "the file" in err, err


# -- D13 (rest): errors of expressions outside statements name their position, in both engines ---

ENGINE_PROGRAM = """fn main() {
  device acc { kv cap 100 * 16; }
  pool kv on acc { block 16; evict lru; preempt lifo; }
  engine eng on acc {
    reqs cap 4;
    tokens cap 8;
    request (prompt, output) {
      prefill (prompt) growing kv;
      decode (output - 1) growing kv;
    }
    schedule {
      let lim = LET;
      advance running;
      admit waiting each at most (lim) taking reqs (1), kv (prompt);
    }
    execute (COST);
  }
  pool reqs on eng { queue fifo; }
  gauge g = GAUGE;
  workload { arrive batch(2); }
  server { eng (8, 3); }
}
"""


def _engine_program(tmp_path, cost="0.01 + batch.tokens / 1000", let="16", gauge="used(kv)"):
    """The program and the position (`FILE:LINE:COL`) of its `execute`, `let` and gauge expressions."""
    text = ENGINE_PROGRAM.replace("COST", cost).replace("LET", let).replace("GAUGE", gauge)
    f = tmp_path / "eng.sq"
    f.write_text(text)

    def at(needle):
        line = next(i for i, x in enumerate(text.splitlines(), 1) if needle in x)
        return f"eng.sq:{line}:{text.splitlines()[line - 1].index(needle) + 1}"
    return f, {"execute": at(cost), "let": at(let + ";"), "gauge": at(gauge + ";")}


@pytest.mark.parametrize("command", ["run", "sample"])   # serq_fast, serq_spec
@pytest.mark.parametrize("cost, needle", [
    ("0 - batch.tokens", "iteration cost -"),               # a negative cost
    ("0.01 * pow(10, batch.tokens * 1e10)", ""),             # beyond the range (fast) / too large (spec)
    ("0 / (batch.tokens - batch.tokens)", "0 / 0"),
])
def test_execute_errors_are_located(tmp_path, capsys, command, cost, needle):
    """An error of an engine's `execute` named the engine (serq_spec) or nothing (serq_fast), but
    never the position of the expression."""
    f, at = _engine_program(tmp_path, cost=cost)
    argv = ["run", f, "--horizon", "5"] if command == "run" else ["sample", f, "--seed", "1", "--sessions", "2"]
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and "engine eng: execute: " in err and needle in err and at["execute"] in err, err


@pytest.mark.parametrize("command", ["run", "sample"])
def test_gauge_error_is_located(tmp_path, capsys, command):
    """A gauge's expression: `0 / 0` when it is sampled."""
    f, at = _engine_program(tmp_path, gauge="0 / (used(kv) - used(kv))")
    argv = (["run", f, "--horizon", "5"] if command == "run" else ["sample", f, "--seed", "1", "--sessions", "2"])
    rc, out, err = run(capsys, *argv)
    if command == "sample":   # the spec samples gauges only with `serq spec --gauges`
        assert rc == 0, err
        s = tmp_path / "s.json"
        s.write_text(out)
        rc, out, err = run(capsys, "spec", f, "--sessions", s, "--gauges")
    assert rc == 2 and "gauge g: " in err and "0 / 0" in err and at["gauge"] in err, err


# -- D15: long flat code compiles and runs; deeper than the limit is refused where it is -----------

def _server_program(tmp_path, server: str, name="flat.sq"):
    f = tmp_path / name
    f.write_text("fn main() {\n  stage s : fifo(1);\n  workload { arrive poisson(1); }\n  server {\n"
                 f"    set a = 1;\n{server}\n    run s (1);\n  }}\n}}\n")
    return f


@pytest.mark.parametrize("server", [
    "    set b = " + "+".join(["a"] * 1000) + ";",
    "    set b = " + "-" * 1000 + "a;",
], ids=["sum", "minus"])
def test_a_thousand_terms_run_in_both_engines(tmp_path, capsys, server):
    """The engines ran with Python's default recursion limit: a 1,000-term sum or 1,000 unary
    minuses compiled, then `serq run` and `serq lockstep` ended in a RecursionError traceback."""
    f = _server_program(tmp_path, server)
    rc, out, err = run(capsys, "lockstep", f, "--seed", "1", "--sessions", "2")
    assert rc == 0 and "steps agree" in out, err


@pytest.mark.slow
@pytest.mark.parametrize("server", [
    "    set b = " + "+".join(["a"] * 3000) + ";",                                  # 3,000 terms
    "    set b = " + "-" * 3000 + "a;",                                             # 3,000 unary minuses
    "    " + " else ".join(f"if (a == {i}) {{ set b = {i}; }}" for i in range(1500)),  # 1,500 `else if`s
], ids=["sum", "minus", "else-if"])
def test_long_flat_code_compiles_and_runs(tmp_path, capsys, server):
    """Each was refused as "the program is nested too deeply to compile", without a location
    (2-5 s each here: behind -m slow)."""
    f = _server_program(tmp_path, server)
    rc, out, err = run(capsys, "check", f)
    assert rc == 0, err
    rc, out, err = run(capsys, "lockstep", f, "--seed", "1", "--sessions", "2")
    assert rc == 0 and "steps agree" in out, err


def test_nesting_past_the_limit_is_located(tmp_path, capsys):
    from serq.parser import MAX_NESTING

    f = _server_program(tmp_path, "    set b = " + "+".join(["a"] * (MAX_NESTING + 10)) + ";")
    rc, out, err = run(capsys, "check", f)
    assert rc == 2 and err.startswith(f"{f}:6:") and f"nested more than {MAX_NESTING} levels deep" in err, err


@pytest.mark.slow
def test_a_chain_of_3001_use_files(tmp_path, capsys):
    """A chain of 3,001 files, each `use`-ing the next: "nested too deeply", after 15 s (now
    about 3 s: behind -m slow)."""
    import time

    n = 3001
    for i in range(1, n):
        (tmp_path / f"l{i}.sq").write_text(f'use "l{i + 1}.sq";\n' if i + 1 < n else "let z = 1;\n")
    f = tmp_path / "main.sq"
    f.write_text('use "l1.sq";\nfn main() {\n  stage s : fifo(1);\n  workload { arrive poisson(1); }\n'
                 "  server { run s (z); }\n}\n")
    t0 = time.process_time()
    rc, out, err = run(capsys, "check", f)
    assert rc == 0, err
    assert time.process_time() - t0 < 5


# -- D17: the first syntax error of a large file comes at once -------------------------------------

def test_first_syntax_error_of_a_megabyte_of_semicolons(tmp_path, capsys):
    """1 MiB of `;` took 15 s (lexed whole, pre-scanned, then parsed) to say line 1 is wrong."""
    import time

    f = tmp_path / "semi.sq"
    f.write_text(";" * (2**20 - 16))
    t0 = time.process_time()
    rc, out, err = run(capsys, "check", f)
    assert rc == 2 and err.startswith(f"{f}:1:1: error: unexpected ';'"), err
    assert time.process_time() - t0 < 1.5


# -- found by tools/fuzz_campaign.py: an empty path is an error that says so -----------------------

@pytest.mark.parametrize("argv, needle", [
    (["spec", MM1, "--sessions", ""], "serq: error: the path of the sessions file is empty"),
    (["run", MM1, "--horizon", "5", "--replay", ""], "serq: error: --replay needs a file path, got an empty one"),
    (["check", ""], "serq: error: the program's path is empty"),
    (["run", ""], "serq: error: the program's path is empty"),
])
def test_an_empty_path(capsys, argv, needle):
    """`--sessions ''` said ": error: cannot read the sessions file" (no name before the colon),
    `--replay ''` ran live draws as if it were absent, `serq check ''` said ": error: …"."""
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and err.startswith(needle), err


def test_observations_with_a_tiny_mean(tmp_path, capsys):
    """An observation whose mean is below 1e-154 (its square underflows to 0) ended `serq run` in a
    ZeroDivisionError traceback while the report computed its cv² (found by tools/fuzz_campaign.py:
    `set need = pow(1e-400, 0.5)`)."""
    f = tmp_path / "mm1.sq"
    f.write_text(MM1.read_text().replace("set need = ~exp(service);", "set need = 1e-200 * ~exp(1);"))
    rc, out, err = run(capsys, "run", f, "--horizon", "20")
    assert rc == 0, err


@pytest.mark.parametrize("need, call", [("exp(1e10)", "exp(10000000000.0)"),
                                        ("pow(1e10, 1e10 + 0.5)", "pow(10000000000.0, 10000000000.5)")])
def test_exact_arithmetic_beyond_its_range_is_a_located_error(tmp_path, capsys, need, call):
    """serq_spec computes exp and a non-integer pow in a 40-digit decimal context: a result past
    its exponent range raised decimal.Overflow, "internal error in serq_spec" (found by
    tools/fuzz_campaign.py's expressions target). Both engines refuse a result above the largest
    double now (docs/language.md §4.1)."""
    f = tmp_path / "mm1.sq"
    f.write_text(MM1.read_text().replace("set need = ~exp(service);", f"set need = {need};"))
    rc, out, err = run(capsys, "sample", f, "--seed", "1", "--sessions", "2")
    assert rc == 2 and "mm1.sq:37:5: error: " in err and f"{call} is beyond the range of doubles" in err, err


@pytest.mark.parametrize("command", ["run", "spec"])
@pytest.mark.parametrize("field, value", [("inputs", []), ("inputs", 3), ("program", ["x"])])
def test_sessions_file_header_of_the_wrong_type(tmp_path, capsys, mm1_sessions, command, field, value):
    """A sessions file whose `inputs` is not an object: `malformed IR (TypeError: …)` (spec) or an
    AttributeError traceback (run) when a run out of draws compared the header with the run's
    settings (found by tools/fuzz_campaign.py's sessions target)."""
    _, data = mm1_sessions
    data[field] = value
    data["sessions"][0]["session"] = []   # out of draws: the header is read to explain why
    flag = "--replay" if command == "run" else "--sessions"
    f = _write(tmp_path, "s.json", data)
    rc, out, err = run(capsys, command, MM1, flag, f)
    assert rc == 2 and err.startswith(f"{f}: error: sessions file: {field}: must be"), err


@pytest.mark.parametrize("edit, argv", [
    (("0.8);", "1e400);"), []),              # an input's default (the fuzz campaign's programs target)
    (None, ["--set", "lambda=1e400"]),
    (None, ["--set", "lambda=1e-400"]),
])
def test_a_poisson_rate_beyond_the_floats_is_located(tmp_path, capsys, edit, argv):
    """`arrive poisson(lambda)` with lambda 1e400 (`args.number("lambda", 01e400)`, found by
    tools/fuzz_campaign.py's programs target, or `--set lambda=1e400`): serq run said only "a
    constant of about 1e400 is beyond the range of the fast simulator's floats", with no position;
    the IR's poisson arrival now carries the rate's position."""
    f = tmp_path / "mm1.sq"
    f.write_text(MM1.read_text().replace(*edit) if edit else MM1.read_text())
    rc, out, err = run(capsys, "run", f, "--horizon", "3", *argv)
    assert rc == 2 and "`arrive poisson(…)`: the rate: a constant of about 1e" in err, err
    assert err.startswith(f"{f}:32:20: error: "), err   # the one located format (serq.errors)


def test_a_trace_value_beyond_the_floats_is_located(tmp_path, capsys):
    """A workload trace whose CSV holds 1e400: serq run's error had no position (the same defect
    as a poisson rate's); it now names the trace's session and row, at the `trace` declaration."""
    (tmp_path / "t.csv").write_text("session,turn,new,out,think\n1,0,10,5,0\n2,0,1e400,3,0\n")
    f = tmp_path / "t.sq"
    f.write_text('fn main() {\n  stage s : delay;\n  workload { arrive none; trace "t.csv" ordered; }\n'
                 '  server { run s (new + out + think + forced); }\n}\n')
    rc, out, err = run(capsys, "run", f, "--horizon", "3")
    assert rc == 2 and "the trace's session 2, row 1: a constant of about 1e400" in err, err
    assert err.startswith(f"{f}:3:27: error: "), err

"""Bad input on every `serq` command, as a new user gives it: a clear message naming the file
(FILE:LINE:COLUMN for a program) or the option, exit code 2, never a traceback — and the same
rule on every command that reads the same kind of file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serq.cli import main

ROOT = Path(__file__).resolve().parents[1]
MM1 = str(ROOT / "examples" / "single-turn" / "mm1.sq")
VLLM = str(ROOT / "examples" / "multi-turn" / "vllm.sq")


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err, cap.err
    return rc, cap.out, cap.err


@pytest.fixture
def mm1_sessions(tmp_path, capsys):
    f = tmp_path / "mm1.sessions.json"
    assert main(["sample", MM1, "--seed", "1", "--sessions", "3", "-o", str(f)]) == 0
    capsys.readouterr()
    return f


# -- a program's error is FILE:LINE:COLUMN at the start of the message, on every command -----------

ENGINE_ARGS = {
    "check": [],
    "ir": [],
    "sample": ["--seed", "1", "--sessions", "1"],
    "spec": ["--sessions", "unused.json"],
    "run": [],
    "lockstep": ["--sessions", "1"],
}


@pytest.mark.parametrize("command", sorted(ENGINE_ARGS))
def test_program_error_starts_with_its_position(tmp_path, capsys, command):
    """`serq sample` and `serq spec` once printed `serq: FILE:2:…`, unlike check / ir / run /
    lockstep: a position at the start of the line is what editors and scripts look for."""
    f = tmp_path / "bad.sq"
    f.write_text("fn main() {\n  stage s : nope;\n}\n")
    rc, _, err = run(capsys, command, f, *ENGINE_ARGS[command])
    assert rc == 2
    assert err.startswith(f"{f}:2:13: error: "), err
    assert err.count("error:") == 1


@pytest.mark.parametrize("command", sorted(ENGINE_ARGS))
def test_binary_file_as_program(tmp_path, capsys, command):
    """A binary file given as a program: the message names the file and the first bad byte; the
    echoed line is a short window with control characters replaced (it was the whole file,
    megabytes with terminal escape sequences)."""
    f = tmp_path / "model.bin"
    f.write_bytes(b"\x1b[2J" + bytes(b for b in range(256) if b != 10) * 4000)  # no newline, ~1 MB
    rc, _, err = run(capsys, command, f, *ENGINE_ARGS[command])
    assert rc == 2
    assert err.startswith(f"{f}:1:") and "not valid UTF-8" in err, err[:300]
    assert len(err) < 1000, len(err)
    assert "\x1b" not in err and "\x00" not in err


def test_control_characters_in_a_program_line_are_not_echoed(tmp_path, capsys):
    f = tmp_path / "esc.sq"
    f.write_text("fn main() {\n  stage s : \x1b[2Jdelay;\n}\n")
    rc, _, err = run(capsys, "check", f)
    assert rc == 2 and "U+001B" in err and "\x1b" not in err
    line, caret = err.splitlines()[1:3]
    assert caret.index("^") == line.index("?[2J")  # the caret still points at the character


@pytest.mark.parametrize("command", ["check", "ir"])
def test_check_and_ir_of_an_ir_file(tmp_path, capsys, command):
    """`serq check ir.json` once parsed the JSON as a program (`unexpected '{'`), while every engine
    command reads a .json FILE as an IR file."""
    f = tmp_path / "mm1.ir.json"
    assert main(["ir", MM1]) == 0
    f.write_text(capsys.readouterr().out)
    rc, out, err = run(capsys, command, f)
    assert rc == 2 and out == "" and err.startswith(f"{f}: error: this is an IR file"), err
    rc, out, _ = run(capsys, "run", f, "--horizon", "10")
    assert rc == 0 and out.startswith("run: horizon 10")


# -- sessions files: one check for `serq spec --sessions` and `serq run --replay` ------------------

BAD_SESSIONS = [
    ("[1, 2]", "not a serq-sessions/1"),
    ('{"format": "serq-sessions/1"}', "sessions: must be a list"),
    ('{"format": "serq-sessions/1", "sessions": [], "arrivals": ["x"]}', "arrivals[0]"),
    ('{"format": "serq-sessions/1", "sessions": [], "seed": "one"}', "seed"),
    ('{"format": "serq-sessions/1", "sessions": [{"serial": 0, "session": ["inf"]}], "arrivals": ["0"]}',
     "sessions[0].session[0]"),
    ('{"format": "serq-sessions/1", "sessions": [], "trace_picks": [-1]}', "trace_picks[0]"),
    ("", "not JSON"),
    ("\udcff", "not JSON"),
]


@pytest.mark.parametrize("command", ["spec", "run"])
@pytest.mark.parametrize("content, needle", BAD_SESSIONS)
def test_malformed_sessions_file(tmp_path, capsys, command, content, needle):
    """`serq run --replay` once crashed with a traceback on a list, a bad value or a bad seed, and
    ran an empty workload for a file without sessions (`serq spec` refused it)."""
    f = tmp_path / "bad.json"
    f.write_bytes(content.encode("utf-8", "surrogateescape"))
    opt = "--sessions" if command == "spec" else "--replay"
    rc, out, err = run(capsys, command, MM1, opt, f)
    assert rc == 2 and out == ""
    assert err.startswith(f"{f}: error: ") and needle in err, err


@pytest.mark.parametrize("command", ["spec", "run"])
def test_sessions_file_that_is_a_folder_or_missing(tmp_path, capsys, command):
    opt = "--sessions" if command == "spec" else "--replay"
    for path, needle in ((tmp_path, "Is a directory"), (tmp_path / "none.json", "No such file")):
        rc, _, err = run(capsys, command, MM1, opt, path)
        assert rc == 2 and err.startswith(f"{path}: error: cannot read the sessions file") and needle in err


def test_sessions_file_of_another_program(tmp_path, capsys, mm1_sessions):
    """Both engines say that the file does not fit the program; the fast engine (which said only
    `replay: session 0 (session stream) leaves 4 unused draw(s)`) names the file and the program it
    was sampled from; both print the same line (issue 13)."""
    rc, _, err = run(capsys, "run", VLLM, "--replay", mm1_sessions)
    assert rc == 2 and "does not fit the program: " in err and "(it was sampled from mm1.sq, not vllm.sq)" in err, err
    rc, _, spec_err = run(capsys, "spec", VLLM, "--sessions", mm1_sessions)
    assert rc == 2 and spec_err == err, spec_err


def test_closed_loop_replayed_without_its_horizon(tmp_path, capsys):
    """A closed loop is sampled with --horizon and must be replayed with it (docs/sessions.md);
    the message says so instead of blaming another program."""
    closed = ROOT / "examples" / "multi-turn" / "closed.sq"
    f = tmp_path / "c.json"
    assert main(["sample", str(closed), "--seed", "1", "--sessions", "3", "--horizon", "30", "-o", str(f)]) == 0
    rc, _, err = run(capsys, "run", closed, "--replay", f)
    assert rc == 2 and "replay with the same --horizon" in err, err
    rc, out, _ = run(capsys, "run", closed, "--replay", f, "--horizon", "30")
    assert rc == 0 and out.startswith("run: horizon 30")


# -- output paths are checked before the run ----------------------------------------------------------

@pytest.mark.parametrize("where", ["missing-folder", "folder", "under-a-file"])
def test_records_path_checked_before_the_run(tmp_path, capsys, where):
    """`--records` into a folder that does not exist once failed after the whole run (its report
    printed, then `[Errno 2] …`)."""
    path = {"missing-folder": tmp_path / "no" / "r.csv", "folder": tmp_path,
            "under-a-file": Path(MM1) / "r.csv"}[where]
    rc, out, err = run(capsys, "run", MM1, "--horizon", "10", "--records", path)
    assert rc == 2 and out == "", out
    assert err.startswith(f"serq: error: --records {path}: "), err


@pytest.mark.parametrize("where", ["missing-folder", "folder"])
def test_states_path_that_cannot_be_written(tmp_path, capsys, where):
    path = tmp_path / "no" / "s.jsonl" if where == "missing-folder" else tmp_path
    rc, out, err = run(capsys, "run", MM1, "--horizon", "10", "--states", path)
    assert rc == 2 and out == ""
    assert err.startswith(f"serq: error: --states {path}: cannot write"), err


@pytest.mark.parametrize("where", ["missing-folder", "folder"])
def test_sample_output_checked_before_sampling(tmp_path, capsys, where):
    """`-o` into a folder that does not exist was found only after sampling (with --max-steps 0
    the sampling's own error came first)."""
    path = tmp_path / "no" / "s.json" if where == "missing-folder" else tmp_path
    rc, out, err = run(capsys, "sample", MM1, "--seed", "1", "--sessions", "1", "--max-steps", "0", "-o", path)
    assert rc == 2 and out == "" and err.startswith(f"serq: error: cannot write the sessions file {path}: "), err


# -- numbers ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, needle", [
    (["lockstep", MM1, "--sessions", "2", "--horizon", "-0.5"], "--horizon"),  # nan: argparse refuses it
    (["lockstep", MM1, "--sessions", "2", "--horizon", "-1"], "--horizon"),
    (["lockstep", MM1, "--sessions", "2", "--max-steps", "-1"], "--max-steps"),
    (["lockstep", MM1, "--sessions", "2", "--seed", "-1"], "--seed"),
    (["sample", MM1, "--sessions", "2", "--seed", "-1"], "--seed"),
    (["run", MM1, "--seed", "-1"], "--seed"),
    (["run", MM1, "--replay", "s.json", "--arrivals", "2"], "--arrivals does not combine with --replay"),
    (["run", MM1, "--states", "-", "--json"], "--json and --states -"),
    (["lockstep", MM1, "--sessions", "-1"], "--sessions"),
    (["sample", MM1, "--sessions", "-1", "--seed", "1"], "--sessions"),
    (["sample", MM1, "--sessions", "1", "--seed", "1", "--horizon", "nan"], "--horizon"),
    (["sample", MM1, "--sessions", "1", "--seed", "1", "--max-steps", "-1"], "--max-steps"),
])
def test_bad_numbers(capsys, argv, needle):
    """`serq lockstep --horizon nan` once crashed, and negative horizons, step limits and seeds
    were taken silently by lockstep (and negative seeds by sample) while `serq run` refused them."""
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.startswith("serq: error: ") and needle in err, err


def test_infinite_horizon_is_printed_as_inf(capsys, mm1_sessions):
    """The text report once printed `horizon None` (Python's null) for a replay without horizon."""
    rc, out, _ = run(capsys, "run", MM1, "--replay", mm1_sessions)
    assert rc == 0 and out.startswith("run: horizon inf  end "), out.splitlines()[0]


def test_undefined_ci_is_a_dash_in_the_text_report(capsys):
    """A CI that is null in the JSON (fewer than 40 samples) was printed `±inf` in the tables."""
    rc, out, _ = run(capsys, "run", MM1, "--horizon", "10", "--json")
    rep = json.loads(out)
    assert rc == 0 and rep["observe"]["sojourn"]["ci"] is None and rep["observe"]["sojourn"]["count"] > 0
    rc, out, _ = run(capsys, "run", MM1, "--horizon", "10")
    row = next(line for line in out.splitlines() if line.startswith("sojourn "))
    assert row.split()[3] == "-" and "inf" not in row, row


class _ClosedPipe:
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        pass


@pytest.mark.parametrize("command", ["spec", "ir", "check"])
def test_output_into_a_closed_pipe(capsys, monkeypatch, mm1_sessions, command):
    """`serq spec … | head -1` once ended with `internal error in serq_spec: BrokenPipeError`,
    `serq ir … | head` with `internal error in the front-end`, exit 2; a reader that stops early is
    normal use (as for `serq run --states - | head`)."""
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    rc = main([command, MM1] + (["--sessions", str(mm1_sessions)] if command == "spec" else []))
    err = capsys.readouterr().err
    assert rc == 0 and err == "", err


# -- serq oracle agreement --------------------------------------------------------------------------

def test_agreement_without_vectors(tmp_path, capsys):
    """A folder that does not exist or holds no vectors once gave `--- 0 vectors` and exit 0."""
    for d in (tmp_path / "none", tmp_path, Path(MM1)):
        rc, out, err = run(capsys, "oracle", "agreement", d)
        assert rc == 2 and out == "" and "no vectors there" in err, err


def test_agreement_json_path_checked_before_the_run(tmp_path, capsys):
    """`--json` into a missing folder once crashed with a traceback after every vector had run."""
    vec = ROOT / "vectors" / "vllm"
    if not any(vec.glob("*.scenario.json")):
        pytest.fail("vectors/vllm/ holds no scenarios")
    rc, out, err = run(capsys, "oracle", "agreement", vec, "--json", tmp_path / "no" / "a.json")
    assert rc == 2 and out == "" and "--json" in err, err


# -- serq oracle compare / render / vllm: broken files ----------------------------------------------

def _truncated_trace(tmp_path) -> Path:
    gz = sorted((ROOT / "vectors" / "vllm").glob("*.trace.json.gz"))
    if not gz:
        pytest.fail("vectors/vllm/ holds no gzipped trace")
    f = tmp_path / "cut.trace.json.gz"
    f.write_bytes(gz[0].read_bytes()[:100])
    return f


@pytest.mark.parametrize("argv", [["compare", "CUT", "CUT"], ["render", "CUT"]])
def test_oracle_truncated_gzip_trace(tmp_path, capsys, argv):
    """A trace cut short inside its gzip stream once crashed with EOFError."""
    f = _truncated_trace(tmp_path)
    rc, out, err = run(capsys, "oracle", *[str(f) if a == "CUT" else a for a in argv])
    assert rc == 2 and out == "" and err.startswith(f"{f}: error: broken gzip data"), err


def test_oracle_vllm_scenario_that_is_not_text(tmp_path, capsys):
    """Checked before the vLLM environment is looked for, so this runs without vLLM."""
    f = tmp_path / "s.json"
    f.write_bytes(b"\xb4\x00\xff")
    rc, out, err = run(capsys, "oracle", "vllm", f)
    assert rc == 2 and out == "" and err.startswith(f"{f}: error: not a scenario"), err


# -- numbers the front-end takes exactly but floats cannot hold --------------------------------------

@pytest.mark.parametrize("argv, needle", [
    (["run", MM1, "--set", "lambda=1e-400", "--horizon", "10"], "`arrive poisson(…)`: the rate: a constant of about 1e-400 is beyond"),
    (["run", MM1, "--set", "service=1e400", "--horizon", "10"], "mm1.sq:37:5: error: a constant of about 1e400 is beyond"),
    (["sample", MM1, "--set", "lambda=1e-400", "--seed", "1", "--sessions", "2"], "`arrive poisson(…)`: the rate: a constant"),
    (["sample", MM1, "--set", "service=1e400", "--seed", "1", "--sessions", "2"], "mm1.sq:37:5: error: a constant"),
    (["lockstep", MM1, "--set", "service=1e400", "--sessions", "2"], "mm1.sq:37:5: error: a constant"),
])
def test_values_beyond_the_float_range(capsys, argv, needle):
    """`--set` takes exact values up to 10^±1000; the fast simulator and the draws compute in floats
    (a ZeroDivisionError or OverflowError traceback in `serq run`, an internal error in sample).
    Both engines refuse a value beyond the doubles where they load the program (docs/language.md
    §4.1; serq_spec sampled until a draw failed)."""
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == "" and "internal error" not in err
    assert err.startswith((f"{MM1}:", "serq: error: ")) and needle in err and len(err.splitlines()) == 1, err


def test_oracle_run_scenario_that_is_not_text(tmp_path, capsys):
    # serq oracle run reads the scenario itself (load_scenario): bytes that are not UTF-8 were a
    # UnicodeDecodeError traceback
    f = tmp_path / "bin.scenario.json"
    f.write_bytes(b"\xff\xfe{\"requests\": []}")
    rc, out, err = run(capsys, "oracle", "run", f)
    assert rc == 2 and out == "" and err.startswith(f"{f}: error: not a scenario (not UTF-8"), err

"""Fuzz targets for every kind of input the `serq` command reads: programs, sessions files,
scenarios, oracle traces and command-line options (issue 13), and whole programs drawn from the
constructs of issue 18 (tests/fuzz_constructs.py).

Each target mutates a valid input (or draws one from scratch) and runs the real command in this
process. The property is the project's rule for bad input: the command returns (exit 0, 1 where
the command defines it, or 2), never a traceback; an error names where it is (a program's
`FILE:LINE:COLUMN`, the input file, or the option) and is never an "internal error".

By default each target runs a few dozen derandomized examples (the whole file takes a few
seconds). A long campaign: `SERQ_FUZZ_EXAMPLES=1000000 python -m pytest -m fuzz tests/test_input_fuzz.py`
(per target; add SERQ_FUZZ_DEADLINE_MS=5000 to fail on a slow example, i.e. a hang).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import os
import re
import unittest.mock
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serq import cli, frontend
from serq.cli import main

ROOT = Path(__file__).resolve().parents[1]
MM1 = ROOT / "examples" / "single-turn" / "mm1.sq"
SCENARIO = ROOT / "vectors" / "vllm" / "h_active_seqs.scenario.json"
TRACE = ROOT / "vectors" / "vllm" / "h_active_seqs.trace.json.gz"
# a speculative trace: its scheduled entries carry `drafts` and the 7th field, `accepted`
SPEC_TRACE = ROOT / "vectors" / "vllm" / "h_spec_reject.trace.json"

EXAMPLES = int(os.environ.get("SERQ_FUZZ_EXAMPLES", "25"))
_DEADLINE = os.environ.get("SERQ_FUZZ_DEADLINE_MS")
PROFILE = settings(max_examples=EXAMPLES, deadline=int(_DEADLINE) if _DEADLINE else None,
                   derandomize=EXAMPLES <= 1000, database=None, suppress_health_check=list(HealthCheck))
pytestmark = pytest.mark.fuzz


_BUILD_PARSER = cli.build_parser


@functools.cache
def _parser():
    """`serq`'s argument parser, built once: building it is most of the cost of a short command
    (~10 ms, every subcommand's arguments), the same for every input, and parsing with it leaves
    it as it was (argparse copies the defaults it appends to)."""
    return _BUILD_PARSER()


_LOAD_PROGRAM = frontend.load_program
_COMPILED: dict[tuple, str] = {}  # (path, its bytes, settings, optional) -> the IR as JSON text


def _load_program_once(path, settings=None, optional=None) -> dict:
    """frontend.load_program, compiled once per program text: the front-end is deterministic, so
    compiling the same bytes again (the unchanged program of the sessions, scenario and option
    targets; `serq run` after `serq check` of the same edit) checks nothing new and is most of
    what those inputs cost. Only a program without libraries (their text is not in the key) whose
    IR survives JSON unchanged is kept; each caller gets its own copy of the IR."""
    name = os.path.abspath(os.fspath(path))
    if not os.path.isfile(name) or os.path.getsize(name) > 2**20:
        return _LOAD_PROGRAM(path, settings, optional)
    key = (name, Path(name).read_bytes(), tuple(sorted((settings or {}).items())),
           tuple(sorted((optional or {}).items())))
    if key in _COMPILED:
        return json.loads(_COMPILED[key])
    ir = _LOAD_PROGRAM(path, settings, optional)
    text = json.dumps(ir)
    if len(ir.get("files", ())) == 1 and json.loads(text) == ir:
        if len(_COMPILED) >= 64:  # the campaign's edits are mostly new texts: keep the set small
            _COMPILED.clear()
        _COMPILED[key] = text
    return ir


def serq(argv, cwd: Path) -> tuple[int, str]:
    """Run `serq ARGV` in this process; (exit code, stderr). Any exception escaping `main` is a
    traceback the user would have seen: it fails the target."""
    err = io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), \
                unittest.mock.patch.object(cli, "build_parser", _parser), \
                unittest.mock.patch.object(frontend, "load_program", _load_program_once):
            try:
                rc = main([str(a) for a in argv])
            except SystemExit as exc:  # argparse's usage errors
                rc = exc.code
    finally:
        os.chdir(old)
    text = err.getvalue()
    assert "Traceback" not in text and "internal error" not in text, text
    return rc, text


def check_located(rc: int, err: str, allowed=(0, 2), names=()) -> None:
    assert rc in allowed, (rc, err)
    if rc == 2:
        first = err.splitlines()[0] if err else ""
        assert first, "exit 2 without a message"
        # a message names a file (FILE: or FILE:LINE:COL:), the option, or the command
        assert (any(first.startswith(f"{n}") for n in names) or first.startswith(("serq: ", "usage: "))), first


# -- JSON mutations -------------------------------------------------------------------------------

JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "0", "1/2", "-1", "inf", "-inf", "1/0", "abc", "1" + "0" * 400, "9" * 5000,
                     "\u0667", "0x10", " 1", "1e3", "fifo", "lru"]),
    st.just(10 ** 400), st.text(max_size=6),
)
JSON_VALUE = st.recursive(JSON_LEAF, lambda c: st.one_of(st.lists(c, max_size=3),
                                                          st.dictionaries(st.text(max_size=6), c, max_size=3)),
                          max_leaves=6)


def _slots(x, out, parent=None, key=None):
    out.append((parent, key))
    if isinstance(x, dict):
        for k, v in x.items():
            _slots(v, out, x, k)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            _slots(v, out, x, i)


@st.composite
def mutated(draw, base):
    data = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        slots = []
        _slots(data, slots)
        parent, key = slots[draw(st.integers(0, len(slots) - 1))]
        op = draw(st.sampled_from(["replace", "replace", "delete", "duplicate"]))
        if parent is None:
            data = draw(JSON_VALUE) if op == "replace" else data
        elif op == "replace":
            parent[key] = draw(JSON_VALUE)
        elif op == "delete":
            del parent[key]
        elif isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
    return data


def _text(data) -> str:
    return json.dumps(data, allow_nan=False) if draw_ok(data) else "[" * 20000


def draw_ok(data) -> bool:
    try:
        json.dumps(data, allow_nan=False)
        return True
    except (ValueError, TypeError):
        return False


def prepare(d: Path) -> Path:
    """The folder the targets work in: the base sessions file they mutate (tools/fuzz_campaign.py
    prepares one the same way)."""
    rc = main(["sample", str(MM1), "--seed", "1", "--sessions", "3", "-o", str(d / "base.sessions.json")])
    assert rc == 0
    return d


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return prepare(tmp_path_factory.mktemp("fuzz"))


@functools.cache
def _sessions_base(work):
    return json.loads((work / "base.sessions.json").read_text())


@PROFILE
@given(data=st.data())
def test_sessions_files(work, data):
    mutant = data.draw(mutated(_sessions_base(work)))
    f = work / "s.json"
    f.write_text(_text(mutant))
    for argv in (["run", MM1, "--replay", f], ["spec", MM1, "--sessions", f]):
        rc, err = serq(argv, work)
        check_located(rc, err, names=(str(f), MM1))   # the file, or a run-time error in the program


@functools.cache
def _scenario_base():
    return json.loads(SCENARIO.read_text())


@PROFILE
@given(data=st.data())
def test_scenarios(work, data):
    mutant = data.draw(mutated(_scenario_base()))
    f = work / "sc.json"
    f.write_text(_text(mutant))
    rc, err = serq(["oracle", "run", f], work)
    check_located(rc, err, allowed=(0, 1, 2), names=(str(f),))


@functools.cache
def _trace_base(path: Path = TRACE):
    from serq import inputfile

    t = inputfile.read(str(path), gzip_ok=True)
    t["steps"] = t["steps"][:6]
    return t


@PROFILE
@given(data=st.data())
def test_traces(work, data):
    """A mutated trace, half of the time a speculative one (`drafts`, `accepted` in its entries),
    rendered and compared with its own committed trace."""
    base = data.draw(st.sampled_from([TRACE, SPEC_TRACE]))
    mutant = data.draw(mutated(_trace_base(base)))
    f = work / "tr.json"
    f.write_text(_text(mutant))
    for argv in (["oracle", "render", f], ["oracle", "compare", f, base]):
        rc, err = serq(argv, work)
        check_located(rc, err, allowed=(0, 1, 2), names=(str(f), str(base)))


# -- programs: byte and line edits of a shipped example, through `serq check` and `serq run` -----

PROGRAM = MM1.read_text()
LOCATED = re.compile(r"^(?P<file>[^\n]+?):\d+:\d+: error: ")


@PROFILE
@given(st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 4),
                          st.sampled_from(["", "(", ")", "{", "}", ";", "1e400", "0", "-", "/", "/ 0",
                                           "~exp(-inf)", "pow(10, 1e10)", "inf", "\x00", "\"", "let",
                                           "args.number(\"x\", 1)", "*", "\n", "use \"/dev/zero\";"])),
                min_size=1, max_size=4))
def test_programs(work, edits):
    text = PROGRAM
    for at, cut, ins in edits:
        at %= len(text) + 1
        text = text[:at] + ins + text[at + cut:]
    f = work / "p.sq"
    f.write_text(text)
    (work / "std").mkdir(exist_ok=True)
    rc, err = serq(["check", f], work)
    check_located(rc, err, names=(str(f),))
    if rc == 2 and not err.startswith(f"{f}: error: cannot read"):
        assert LOCATED.match(err), err
    if rc == 0:
        rc, err = serq(["run", f, "--horizon", "3"], work)
        check_located(rc, err, names=(str(f),))
        if rc == 2 and not err.startswith("serq: error: "):  # an expression's error names where it is (D13)
            assert LOCATED.match(err), err


# -- expressions: whatever an expression evaluates to at run time, an error names where it is ----

EXPR_LEAF = st.sampled_from(["0", "1", "2", "0.5", "-1", "inf", "-inf", "1e400", "1e-400", "1e10", "now", "t_in",
                             "service", "~exp(1)", "~uniform(0, 1)"])
EXPR = st.recursive(EXPR_LEAF, lambda c: st.one_of(
    st.tuples(c, st.sampled_from(["+", "-", "*", "/", "^", "<", "==", "&&"]), c).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
    st.tuples(st.sampled_from(["exp", "ln", "sqrt", "abs", "floor", "-", "~exp", "~det"]), c).map(lambda t: f"{t[0]}({t[1]})"),
    st.tuples(st.sampled_from(["pow", "min", "max", "~uniform", "~erlang"]), c, c).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
    st.tuples(c, c, c).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})")), max_leaves=6)


@PROFILE
@given(EXPR, st.sampled_from(["fast", "spec"]))
def test_expressions(work, expr, engine):
    """mm1.sq with `need` set to a random expression: both engines either run or stop with an
    error at FILE:LINE:COL (the statement, or the constant the front-end refuses)."""
    f = work / "e.sq"
    f.write_text(PROGRAM.replace("set need = ~exp(service);", f"set need = {expr};"))
    rc, err = serq(["check", f], work)
    check_located(rc, err, names=(str(f),))
    if rc != 0:
        assert LOCATED.match(err), err
        return
    if engine == "fast":
        rc, err = serq(["run", f, "--horizon", "3"], work)
        check_located(rc, err, names=(str(f),))
        if rc == 2:
            assert LOCATED.match(err), err
    else:
        out = work / "e.sessions.json"
        rc, err = serq(["sample", f, "--seed", "1", "--sessions", "2", "-o", out], work)
        check_located(rc, err, names=(str(f),))
        if rc == 2:
            assert LOCATED.match(err) and err.startswith(str(f)), err


# -- constructs: whole programs of flows, `share`, estimates and K's step stage, right and wrong ---

from fuzz_constructs import construct_programs, knobs  # noqa: E402  (tests/ is on the path, as for test_ir)


@PROFILE
@given(construct_programs())
def test_constructs(work, text):
    """A drawn program (tests/fuzz_constructs.py) through every command that takes a program:
    `check` and `ir` refuse it at FILE:LINE:COL or accept it; an accepted one runs on the fast
    engine, is sampled, run on the exact engine and in lockstep, each ending in 0 or an error at
    its place (a run-time error names the statement) — never a traceback, an internal error or a
    disagreement reported as anything but a located error. Where the exact engine stops with a
    run-time error (sampling, or replaying in `serq spec`), the fast engine on the same draws (a
    live run of the same seed and sessions, or `serq run --replay`) stops with the same line."""
    f = work / "c.sq"
    f.write_text(text)
    rc, err = serq(["check", f], work)
    check_located(rc, err, names=(str(f),))
    if rc != 0:
        assert LOCATED.match(err), err
        return
    rc, err = serq(["ir", f], work)
    check_located(rc, err, allowed=(0,), names=(str(f),))
    rc, err = serq(["run", f, "--horizon", "3"], work)
    check_located(rc, err, names=(str(f),))
    if rc == 2 and not err.startswith("serq: error: "):
        assert LOCATED.match(err), err
    out = work / "c.sessions.json"
    rc, err = serq(["sample", f, "--seed", "1", "--sessions", "3", "--max-steps", "400", "-o", out], work)
    check_located(rc, err, names=(str(f),))
    if rc == 0:
        rc, err = serq(["spec", f, "--sessions", out, "--max-steps", "400"], work)
        check_located(rc, err, names=(str(f), str(out)))
        if rc == 2 and "1e300" not in text and "1e-300" not in text:
            # the exact engine stopped within its steps: the fast one replaying the same file
            # stops there too, in the same words (a disagreement the located-error checks let pass)
            fast = serq(["run", f, "--replay", out], work)
            assert fast == (rc, err), f"serq_fast: {fast[1]!r}; serq_spec: {err!r}"
    elif not err.startswith("serq: error: "):
        assert LOCATED.match(err), err
        same = {"poisson(": ["--arrivals", "3"], "batch(3)": []}   # the sampled sessions, live
        live = [v for k, v in same.items() if f"arrive {k}" in text]
        if live and "1e300" not in text and "1e-300" not in text:
            # the exact engine stopped while sampling: a live fast run of the same seed and
            # sessions draws the same values (docs/sessions.md) and stops there in the same words
            fast = serq(["run", f, "--seed", "1", *live[0]], work)
            assert fast == (rc, err), f"serq_fast: {fast[1]!r}; serq_spec: {err!r}"
    # times near 1e300 (a work of 1e300, a ps capacity of 1e-300) are past the fast engine's float
    # ties (docs/fast.md "Float time"): lockstep diverges there by design (fuzz seed 22012)
    if "1e300" not in text and "1e-300" not in text:
        rc, err = serq(["lockstep", f, "--seed", "1", "--sessions", "3", "--max-steps", "400"], work)
        check_located(rc, err, allowed=(0, 2), names=(str(f),))


# -- options --------------------------------------------------------------------------------------

OPTION_VALUES = st.sampled_from(["0", "1", "2", "-1", "3.5", "inf", "-inf", "nan", "1_0", "\u0667", "1e400",
                                 "", "-", "abc", "x.csv", "x.parquet", "s.jsonl", "missing.json",
                                 "/dev/null", "/dev/zero", ".", "a=1", "lambda=1e400", "service=0"])
COMMANDS = {
    "run": ["--seed", "--horizon", "--warmup", "--arrivals", "--records", "--states", "--replay", "--set",
            "--json"],
    "lockstep": ["--seed", "--sessions", "--horizon", "--max-steps", "--set"],
    "sample": ["--seed", "--sessions", "--horizon", "--max-steps", "-o", "--set"],
    "spec": ["--sessions", "--max-steps", "--warmup", "--horizon", "--set", "--gauges"],
    "check": ["--set"],
    "ir": ["--set", "--pretty"],
}
FLAGS = {"--json", "--gauges", "--pretty"}


@PROFILE
@given(st.sampled_from(sorted(COMMANDS)), st.data())
def test_options(work, command, data):
    argv = [command, MM1]
    for opt in data.draw(st.lists(st.sampled_from(COMMANDS[command]), max_size=5)):
        argv.append(opt)
        if opt not in FLAGS:
            argv.append(data.draw(OPTION_VALUES))
    if command in ("sample", "lockstep") and "--sessions" not in argv:
        argv += ["--sessions", "2"]
    if command == "sample" and "--seed" not in argv:
        argv += ["--seed", "1"]
    if command == "spec" and "--sessions" not in argv:
        argv += ["--sessions", "missing.json"]
    if command == "run" and "--horizon" not in argv:
        argv += ["--horizon", "5"]
    # bound the work: a huge horizon or session count is a long run, not a defect
    for i, a in enumerate(argv[:-1]):
        if a in ("--horizon", "--sessions", "--arrivals", "--max-steps") and argv[i + 1] in ("inf",):
            argv[i + 1] = "3"
    rc, err = serq(argv, work)
    check_located(rc, err, allowed=(0, 1, 2), names=tuple(f"{a}:" for a in map(str, argv) if a))


# -- constructs with hostile inputs: `--set` values, and their sessions files mutated -------------

# numbers of every kind most of the time (what reaches a run), now and then no number at all
SET_NUMBERS = ["0", "1", "2", "3", "-1", "0.5", "-0.5", "1/3", "16", "100", "1e300", "-1e300", "1e400", "1e-400",
               "1e-300", "inf", "-inf"]
SET_VALUES = st.sampled_from(SET_NUMBERS * 3 + ["nan", "", "abc", "0x10", "1_0", "\u0667", "1e", "--1"])


REPEATED_SET_NOTE = re.compile(r"^serq: note: --set \S+ is given twice .*\n?", re.M)


def serq_without_repeat_notes(argv, cwd: Path) -> tuple[int, str]:
    """`serq` with the note a repeated `--set` name prints (the drawn settings may repeat a name)
    taken out of stderr: the message a failure must locate is the one after it."""
    rc, err = serq(argv, cwd)
    return rc, REPEATED_SET_NOTE.sub("", err)


@PROFILE
@given(construct_programs(faulty=False), st.data())
def test_construct_settings(work, text, data):
    """A drawn program meant to be accepted, whose flows, transfers, spills, `speculate`, `lag`
    and estimates read inputs (`args.number`), run with `--set` values for them — any number,
    now and then a word or an input the program does not have — through check, run, sample and
    spec: an error names the option (`serq: error: --set …`) or the program's place, never a
    traceback."""
    f = work / "k.sq"
    f.write_text(text)
    names = knobs(text) or ["nosuch"]
    sets = []
    for _ in range(data.draw(st.integers(1, 3))):
        name = "nosuch" if not data.draw(st.integers(0, 7)) else data.draw(st.sampled_from(names))
        sets += ["--set", f"{name}={data.draw(SET_VALUES)}"]
    rc, err = serq_without_repeat_notes(["check", f, *sets], work)
    check_located(rc, err, names=(str(f),))
    if rc != 0:
        return
    rc, err = serq_without_repeat_notes(["run", f, "--horizon", "3", *sets], work)
    check_located(rc, err, names=(str(f),))
    if rc == 2 and not err.startswith("serq: error: "):
        assert LOCATED.match(err), err
    out = work / "k.sessions.json"
    rc, err = serq_without_repeat_notes(["sample", f, "--seed", "1", "--sessions", "3", "--max-steps", "400", "-o", out, *sets], work)
    check_located(rc, err, names=(str(f),))
    if rc == 0:
        rc, err = serq_without_repeat_notes(["spec", f, "--sessions", out, "--max-steps", "400", *sets], work)
        check_located(rc, err, names=(str(f), str(out)))
    elif not err.startswith("serq: error: "):
        assert LOCATED.match(err), err


# what a sessions file edited by hand may say: a draw list cut short or grown, an acceptance count
# or draw that is negative, fractional, huge or no wire value, a recorded input missing, of
# another type or value (a huge alpha), an input the program does not have
HAND_VALUES = ["-1", "1/2", "1000000", "999999", "0", "1" + "0" * 400, "99", "abc", "1.5", "inf", "-inf", 3, None, [], {}]


@st.composite
def hand_edited(draw, data: dict) -> dict:
    """DATA (a sessions file) edited as by hand, 1 to 3 edits of the kinds of HAND_VALUES."""
    data = copy.deepcopy(data)
    for _ in range(draw(st.integers(1, 3))):
        lists = [(s, "turns", k) for s in data.get("sessions", []) if isinstance(s, dict)
                 for k in range(len(s.get("turns") or []))]
        inputs = data.get("inputs") if isinstance(data.get("inputs"), dict) else {}
        kind = draw(st.sampled_from(["cut", "grow", "value", "value", "input", "input", "drop input", "new input"]))
        if kind in ("cut", "grow", "value") and lists:
            session, _, k = draw(st.sampled_from(lists))
            values = session["turns"][k]
            if kind == "cut" and values:
                del values[draw(st.integers(0, len(values) - 1)):]
            elif kind == "grow":
                values.append(draw(st.sampled_from(["0", "1", "2"])))
            elif values:
                values[draw(st.integers(0, len(values) - 1))] = draw(st.sampled_from(HAND_VALUES))
        elif kind == "input" and inputs:
            inputs[draw(st.sampled_from(sorted(inputs)))] = draw(st.sampled_from(HAND_VALUES))
        elif kind == "drop input" and inputs:
            del inputs[draw(st.sampled_from(sorted(inputs)))]
        elif kind == "new input":
            data["inputs"] = {**inputs, "nosuch": "1"}
    return data


def _draw_sets(data, names: list[str]) -> list[str]:
    """0 to 2 `--set NAME=VALUE` for the program's inputs NAMES (or an input it does not have)."""
    sets = []
    for _ in range(data.draw(st.integers(0, 2))):
        name = "nosuch" if not names or not data.draw(st.integers(0, 7)) else data.draw(st.sampled_from(names))
        sets += ["--set", f"{name}={data.draw(SET_VALUES)}"]
    return sets


@PROFILE
@given(construct_programs(faulty=False), st.data())
def test_construct_sessions(work, text, data):
    """A drawn program's (one meant to be accepted) own sessions file (flows, forks, transfers, engines and their arrays),
    as sampled, mutated or edited as by hand (`hand_edited`), replayed on both engines, each time with hostile
    `--set` values for its inputs half of the time (a replay refuses one the sampled workload
    reads, docs/sessions.md "Inputs of a replay"): the file, the option or the program's place is
    named."""
    f = work / "m.sq"
    f.write_text(text)
    base = work / "m.base.json"
    base.unlink(missing_ok=True)
    rc, err = serq(["sample", f, "--seed", "1", "--sessions", "3", "--max-steps", "400", "-o", base], work)
    check_located(rc, err, names=(str(f),))
    if rc != 0 or not base.exists():   # (tools/fuzz_campaign.py past its CPU share runs no command)
        return
    sampled = json.loads(base.read_text())
    # a quarter as sampled (so that the replay's own checks of `--set` are reached: a file check
    # comes first), the rest edited as by hand or mutated
    how = data.draw(st.integers(0, 7))
    mutant = sampled if how < 2 else data.draw(hand_edited(sampled) if how < 5 else mutated(sampled))
    m = work / "m.json"
    m.write_text(_text(mutant))
    sets = _draw_sets(data, knobs(text)) if data.draw(st.booleans()) else []
    for argv in (["run", f, "--replay", m], ["spec", f, "--sessions", m, "--max-steps", "400"]):
        rc, err = serq_without_repeat_notes(argv + sets, work)
        check_located(rc, err, names=(str(m), str(f)))
        if rc == 2 and not err.startswith(("serq: error: ", f"{m}: error: ")):
            assert LOCATED.match(err), err

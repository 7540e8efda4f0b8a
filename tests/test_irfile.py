"""An IR file given to an engine (`serq spec|run|lockstep FILE.json`) is checked once, in
serq.irfile, for both engines: a hand-edited IR that breaks what the linker guarantees is a clear
error naming the JSON path, exit 2, never a traceback nor a later invariant violation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serq.cli import main
from serq.frontend import load_program
from serq.irfile import check_ir

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(str(p.relative_to(REPO)) for p in (REPO / "examples").rglob("*.sq"))
MMC = str(REPO / "examples/single-turn/mmc.sq")
VLLM = str(REPO / "examples/multi-turn/vllm.sq")


@pytest.mark.parametrize("program", EXAMPLES)
def test_every_example_ir_passes_the_check(program):
    check_ir(load_program(str(REPO / program), {}))


def _edit(tmp_path, program, fn, name="edited.json"):
    ir = load_program(program, {})
    fn(ir)
    path = tmp_path / name
    path.write_text(json.dumps(ir))
    return str(path)


def _sessions(tmp_path, capsys, program):
    out = tmp_path / "s.json"
    assert main(["sample", program, "--seed", "1", "--sessions", "3", "-o", str(out)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return str(out)


def _set(path, value):
    def fn(ir):
        obj = ir
        for k in path[:-1]:
            obj = obj[k]
        if value is _DELETE:
            del obj[path[-1]]
        else:
            obj[path[-1]] = value
    return fn


_DELETE = object()

BAD = [
    # (program, edit, the message's JSON path and problem)
    (MMC, _set(["pools", 0, "cap"], "-3"), "pools[0].cap: a capacity cannot be negative, got -3"),
    (MMC, _set(["pools", 0, "cap"], "abc"), "pools[0].cap: not a rational in lowest terms"),
    (MMC, _set(["pools", 0, "cap"], 3), "pools[0].cap: a value is a JSON string"),
    (MMC, _set(["pools", 0, "evict"], _DELETE), "pools[0].evict: kind must be one of lru, by"),
    (MMC, _set(["pools", 0, "block"], "0"), "pools[0].block: must be positive and finite or null"),
    (MMC, _set(["stages", 0, "kind"], "weird"), "stages[0].kind: must be one of fifo, ps, delay, step"),
    (MMC, _set(["format"], "serq-ir/0"), "format: expected 'serq-ir/1'"),
    (MMC, _set(["workload", "server"], 99), "workload.server: must be a block index"),
    (VLLM, _set(["stages", 0, "memory"], 7), "stages[0].memory: must be a pool index below"),
    (VLLM, _set(["stages", 0, "lag"], 2), "stages[0].lag: must be 0 or 1"),
    (VLLM, _set(["pools", 1, "admitted_by"], 5), "pools[1].admitted_by: must be a stage index"),
]


@pytest.mark.parametrize("program,edit,needle", BAD, ids=[b[2].split(":")[0] + "-" + str(i) for i, b in enumerate(BAD)])
def test_a_malformed_declaration_is_named_by_every_engine(tmp_path, capsys, program, edit, needle):
    sessions = _sessions(tmp_path, capsys, program)
    bad = _edit(tmp_path, program, edit)
    for argv in (["spec", bad, "--sessions", sessions, "--max-steps", "50"],
                 ["run", bad, "--horizon", "10"],
                 ["lockstep", bad, "--seed", "1", "--sessions", "2"],
                 ["sample", bad, "--seed", "1", "--sessions", "2"]):
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2, (argv, err)
        assert needle in err and "malformed IR" in err, (argv, err)
        assert "Traceback" not in err and "invariant" not in err, (argv, err)


def test_a_malformed_statement_is_a_clear_error_on_both_engines(tmp_path, capsys):
    # Statements are checked by the engines as they run them; from an IR file a broken one is
    # reported as malformed IR, not as a crash.
    sessions = _sessions(tmp_path, capsys, MMC)

    def drop_units(ir):
        for block in ir["blocks"]:
            for s in block:
                if s["op"] == "hold":
                    del s["pools"][0]["units"]
                    return
        raise AssertionError("mmc.sq has a hold")
    bad = _edit(tmp_path, MMC, drop_units)
    for argv in (["spec", bad, "--sessions", sessions],
                 ["run", bad, "--horizon", "10"],
                 ["lockstep", bad, "--seed", "1", "--sessions", "2"]):
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2 and "malformed IR" in err and "KeyError: 'units'" in err, (argv, err)


def test_an_ir_file_round_trips_through_both_engines(tmp_path, capsys):
    # `serq ir` output is a valid input: the same run as the program itself.
    ir_path = tmp_path / "mmc.json"
    capsys.readouterr()
    assert main(["ir", MMC]) == 0
    ir_path.write_text(capsys.readouterr().out)
    assert main(["run", str(ir_path), "--horizon", "50", "--json"]) == 0
    from_ir = json.loads(capsys.readouterr().out)
    assert main(["run", MMC, "--horizon", "50", "--json"]) == 0
    from_sq = json.loads(capsys.readouterr().out)
    assert from_ir["run"] == from_sq["run"] and from_ir["client"] == from_sq["client"]
    assert main(["run", str(ir_path), "--set", "x=1"]) == 2
    assert "--set applies to a .sq program" in capsys.readouterr().err


def test_an_unreadable_ir_file(tmp_path, capsys):
    missing = str(tmp_path / "missing.json")
    assert main(["run", missing]) == 2
    assert "cannot read the IR file" in capsys.readouterr().err
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    assert main(["spec", str(garbage), "--sessions", str(garbage)]) == 2
    assert "not JSON" in capsys.readouterr().err

"""The IR (docs/ir.md): canonical and deterministic across runs and processes, exact numbers,
`--set` changes only what it should, and the lowering of docs/language.md §7.2."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, SHARED, compile_ok
from serq.frontend import load_program
from serq.wire import canonical_json
from test_parser import write_all

LANGUAGE = SHARED / "reference" / "language.md"


def serq(*args: str, seed: str = "0", cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), PYTHONHASHSEED=seed)
    return subprocess.run([sys.executable, "-m", "serq.cli", *args], capture_output=True, env=env, cwd=cwd)


def test_ir_is_the_same_bytes_across_processes(seed_tree, tmp_path):
    prog = write_all(tmp_path)
    for path in (str(seed_tree), str(prog)):
        a = serq("ir", path, seed="1")
        b = serq("ir", path, seed="4242")
        assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
        assert a.stdout == b.stdout
        ir = load_program(path, {})
        assert a.stdout.decode("utf-8") == canonical_json(ir) + "\n"
        assert canonical_json(load_program(path, {})) == canonical_json(ir)  # and across runs


def test_ir_has_no_floats_and_no_absolute_paths(seed_tree):
    text = serq("ir", str(seed_tree)).stdout.decode()
    doc = json.loads(text, parse_float=lambda s: pytest.fail(f"a JSON float {s}"))
    assert str(seed_tree.parent) not in text and doc["format"] == "serq-ir/1"
    pretty = serq("ir", str(seed_tree), "--pretty").stdout.decode()
    assert json.loads(pretty) == doc and "\n  " in pretty


def test_decimal_literals_are_exact():
    ir = compile_ok("let a = 2e-5; let b = 0.9; let c = 1e9; let d = 2e-9 * 3;\n"
                    "fn main() { stage s : delay; workload { arrive poisson(0.3); } gauge g = a; gauge h = b; "
                    "gauge i = c; gauge j = d; gauge k = 1 / 3 + 1 / 6; gauge l = -inf; gauge m = sqrt(2); }")
    vals = [g["expr"] for g in ir["gauges"]]
    assert [v.get("v") for v in vals[:7]] == ["1/50000", "9/10", "1000000000", "3/500000000", "1/2", "-inf", None]
    assert vals[6] == {"k": "fn", "f": "sqrt", "args": [{"k": "num", "v": "2"}]}  # irrational: kept unfolded
    assert ir["workload"]["arrival"]["rate"] == "3/10"


def _diff(a, b, path=""):
    if type(a) is not type(b):
        return [path]
    if isinstance(a, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _diff(a.get(k), b.get(k), f"{path}/{k}")
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [path]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += _diff(x, y, f"{path}/{i}")
        return out
    return [] if a == b else [path]


def test_set_changes_only_what_it_should(seed_tree):
    base = load_program(str(seed_tree), {})
    lam = load_program(str(seed_tree), {"Lambda": "0.5"})
    assert _diff(base, lam) == ["/inputs/Lambda", "/workload/arrival/rate"]
    assert lam["inputs"]["Lambda"] == "1/2" and lam["workload"]["arrival"]["rate"] == "1/2"
    blocks = load_program(str(seed_tree), {"blocks": "100"})
    assert _diff(base, blocks) == ["/inputs/blocks", "/pools/0/cap"] and blocks["pools"][0]["cap"] == "1600"
    cap = load_program(str(seed_tree), {"chunk_cap": "48"})
    assert _diff(base, cap) == ["/inputs/chunk_cap", "/stages/0/lets/0/expr/a/v"]
    out = serq("ir", str(seed_tree), "--set", "Lambda=0.5").stdout.decode()
    assert out == canonical_json(lam) + "\n"


def _small_program() -> str:
    if not LANGUAGE.is_file():
        pytest.skip(f"the reference is absent ({LANGUAGE})")
    text = LANGUAGE.read_text(encoding="utf-8")
    m = re.search(r"```\n(use \"std/args\";\nlet bsz = 16;.*?)```", text, re.S)
    assert m, "the small example program of the shared reference (its §7.1)"
    return m.group(1)


def attr(ir, name):
    return {"k": "attr", "slot": ir["attrs"].index(name)}


def strip_at(x):
    if isinstance(x, dict):
        return {k: strip_at(v) for k, v in x.items() if k != "at"}
    if isinstance(x, list):
        return [strip_at(v) for v in x]
    return x


def test_lowering_of_the_reference_example():
    """docs/language.md §7.2 on the reference's §7.1 example: `eng (a, b);` is set p, set q, then one hold."""
    src = _small_program()
    ir = compile_ok(src, filename="small.sq")
    assert ir["attrs"][9:11] == ["p", "q"]  # request parameters come right after the built-ins
    server = ir["blocks"][ir["workload"]["server"]]
    call_line = src.splitlines().index("  server { eng (a, b); }") + 1
    assert all(s["at"] == [0, call_line, 12] for s in server)
    p, q, need, a, b = (attr(ir, n) for n in ("p", "q", "need", "a", "b"))
    kv, reqs, eng = 0, 1, 0
    ref = lambda i: {"base": i, "count": 1, "index": None}  # noqa: E731
    assert strip_at(server) == [
        {"op": "set", "slot": p["slot"], "expr": a},
        {"op": "set", "slot": q["slot"], "expr": b},
        {"op": "hold",
         "pools": [{"pool": ref(reqs), "units": {"k": "num", "v": "1"}, "reserve": None,
                    "content": None},
                   {"pool": ref(kv), "units": {"k": "fn", "f": "min", "args": [
                       need, {"k": "obs", "f": "budget_left", "stage": ref(eng)}]}, "reserve": need,
                    "content": None}],
         "reuse": None,
         "bindings": [{"slot": need["slot"], "expr": {"k": "fn", "f": "max", "args": [
             p, {"k": "bin", "op": "+", "a": attr(ir, "computed"), "b": {"k": "num", "v": "1"}}]}}],
         "body": server[2]["body"], "cache": None, "eos": None,
         "request": {"engine": eng, "prompt": p, "output": q}},
    ]
    body = strip_at(ir["blocks"][server[2]["body"]])
    minus = lambda x, y: {"k": "bin", "op": "-", "a": x, "b": y}  # noqa: E731
    assert body == [
        {"op": "run", "stage": ref(eng), "mode": "prefill", "work": need, "growing": kv},
        {"op": "run", "stage": ref(eng), "mode": "decode",
         "work": minus(minus(q, {"k": "num", "v": "1"}), minus(need, p)), "growing": kv},
    ]
    assert ir["pools"][reqs]["admitted_by"] == eng and ir["pools"][kv]["cap"] == str(64 * 16)
    assert ir["stages"][eng]["memory"] == kv and ir["stages"][eng]["budget"] == {"k": "num", "v": "256"}
    assert ir["hidden"] == [ir["attrs"].index("b")]


def test_lowering_of_the_seed_request_block(seed_tree):
    """The seed's nine items: one `set` before the hold, bindings, body in order, cache clause."""
    ir = load_program(str(seed_tree), {})
    server = ir["blocks"][ir["workload"]["server"]]
    assert [s["op"] for s in server] == ["set", "set", "set", "set", "hold"]
    kept, known, reused = attr(ir, "kept"), attr(ir, "known"), attr(ir, "reused")
    assert server[3] == {"op": "set", "slot": kept["slot"], "expr": attr(ir, "prompt"), "at": server[3]["at"]}
    hold = server[4]
    assert [b["slot"] for b in hold["bindings"]] == [known["slot"], reused["slot"]]
    assert hold["cache"] == {"k": "bin", "op": "+", "a": attr(ir, "prompt"), "b": attr(ir, "output")}
    assert hold["pools"][0]["pool"]["base"] == 1 and hold["pools"][1]["reserve"] == known
    body = ir["blocks"][hold["body"]]
    assert [(s["op"], s.get("mode")) for s in body] == [("set", None), ("set", None), ("observe", None),
                                                        ("observe", None), ("run", "prefill"), ("run", "decode")]
    assert [ir["observes"][s["name"]] for s in body if s["op"] == "observe"] == ["hit", "prefill_tokens"]
    assert hold["request"] == {"engine": 0, "prompt": attr(ir, "prompt"), "output": attr(ir, "output")}


def test_cli_help_and_unreadable_inputs(tmp_path):
    r = serq("--help")
    assert r.returncode == 0 and re.search(rb"^ +check +parse and link", r.stdout, re.M) \
        and re.search(rb"^ +ir +print the canonical IR", r.stdout, re.M), r.stdout
    (tmp_path / "bad.sq").write_bytes(b"let x = 1;\nlet y = \xff;\n")
    cases = {str(tmp_path): "it is a directory", str(tmp_path / "none.sq"): "no such file",
             str(tmp_path / "bad.sq"): "not valid UTF-8"}
    for path, msg in cases.items():
        r = serq("check", path)
        err = r.stderr.decode()
        assert r.returncode == 2 and msg in err and "Traceback" not in err and r.stdout == b""
    assert serq("check", str(tmp_path / "bad.sq")).stderr.decode().startswith(f"{tmp_path / 'bad.sq'}:2:9: error: ")
    r = serq("check", str(tmp_path / "bad.sq"), "--set", "novalue")
    assert r.returncode == 2 and "NAME=VALUE" in r.stderr.decode()


def test_readme_command_table_lists_every_subcommand():
    """README.md's command table has a row for each subcommand `serq --help` shows."""
    import argparse

    from serq.cli import build_parser

    def commands(parser: argparse.ArgumentParser, prefix: str) -> set[str]:
        out = set()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    nested = commands(sub, f"{prefix} {name}")
                    out |= nested or {f"{prefix} {name}"}
        return out

    installed = commands(build_parser(), "serq")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Commands"):]
    table = table[:table.index("\n## ")]
    rows = set()
    for m in re.finditer(r"^\| `(serq(?: [a-z]+)+)", table, re.M):
        words = m.group(1).split()
        rows.add(" ".join(w for w in words if w.islower() and w.isalpha()))
    assert installed <= rows, f"subcommands without a row in README.md: {sorted(installed - rows)}"


def _ir_rows(doc: str) -> dict[str, str]:
    """The rows of docs/ir.md tables whose first cell is `` `name` `` (or `` `a` / `b` ``): name ->
    the rest of its rows (`set` and `branch` have a row as a statement and as a schedule statement)."""
    rows: dict[str, str] = {}
    for m in re.finditer(r"^\| `([a-z_ /`]+)` \|(.*)$", doc, re.M):
        for name in re.findall(r"[a-z_]+", m.group(1)):
            rows[name] = rows.get(name, "") + m.group(2)
    return rows


def test_docs_ir_names_every_field_the_front_end_writes(tmp_path):
    """Every statement `op`, expression `k` and field in the IR of the examples (and of the
    all-constructs program) is named in docs/ir.md, in the row of its op or kind."""
    doc = (ROOT / "docs" / "ir.md").read_text(encoding="utf-8")
    rows = _ir_rows(doc)
    programs = sorted((ROOT / "examples").rglob("*.sq")) + [write_all(tmp_path)]
    missing = set()
    for path in programs:
        ir = load_program(str(path), {})
        top = set(re.findall(r"^\| `([a-z_]+)` \|", doc[doc.index("## Top level"):doc.index("### Slots")], re.M))
        # `claims` only in a program that declares one, `share` in one with a flow or a `share` item
        assert set(ir) | {"claims", "share"} == top
        stack = [ir["blocks"], [s.get("schedule", []) for s in ir["stages"]], ir["stages"], ir["pools"], ir["gauges"],
                 ir.get("claims", [])]
        while stack:
            x = stack.pop()
            if isinstance(x, list):
                stack.extend(x)
                continue
            if not isinstance(x, dict):
                continue
            stack.extend(x.values())
            tag = x.get("op") if "op" in x and "k" not in x else x.get("k")
            if tag is None:
                continue
            if tag not in rows:
                missing.add(f"{tag} (no row)")
                continue
            for field in set(x) - {"op", "k", "at"}:
                if f"`{field}`" not in rows[tag]:
                    missing.add(f"{tag}.{field}")
    assert not missing, sorted(missing)

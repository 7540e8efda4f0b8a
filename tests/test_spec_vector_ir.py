"""Every spec vector carries `ir.json` for the Lean replay (`lake exe serq-vectors`, docs/lean.md),
and it is exactly what the front-end produces now: `serq ir program.sq` with no settings, as
tests/test_spec_vectors.py loads the vector. A stale file fails here; regenerate them all with
`python3 tools/refresh_vector_ir.py`."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from serq.cli import main
from serq.frontend import load_program
from serq.wire import canonical_json

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "vectors" / "spec"
VECTORS = sorted(p.name for p in ROOT.iterdir() if (p / "program.sq").exists())


def tool():
    spec = importlib.util.spec_from_file_location("refresh_vector_ir", REPO / "tools" / "refresh_vector_ir.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", VECTORS)
def test_ir_json_is_current(name):
    d = ROOT / name
    assert (d / "ir.json").exists(), f"{name}/ir.json missing: run python3 tools/refresh_vector_ir.py"
    want = canonical_json(load_program(str(d / "program.sq"), {})) + "\n"
    assert (d / "ir.json").read_text(encoding="utf-8") == want, \
        f"{name}/ir.json is stale: run python3 tools/refresh_vector_ir.py"


@pytest.mark.parametrize("name", VECTORS[:3])
def test_ir_json_is_what_serq_ir_prints(name, capsys, monkeypatch):
    monkeypatch.chdir(ROOT / name)
    assert main(["ir", "program.sq"]) == 0
    assert capsys.readouterr().out == (ROOT / name / "ir.json").read_text(encoding="utf-8")


def test_ir_json_is_a_program_the_spec_runs():
    from serq_spec.program import Program
    for name in VECTORS:
        Program(json.loads((ROOT / name / "ir.json").read_text()), "program.sq")


def test_tool_check_passes_on_the_repository():
    assert tool().main(["--check"]) == 0


def test_tool_detects_and_repairs_stale_and_missing(tmp_path, capsys):
    root = tmp_path / "spec"
    for name in VECTORS[:2]:
        shutil.copytree(ROOT / name, root / name)
    t = tool()
    stale = root / VECTORS[0] / "ir.json"
    stale.write_text(stale.read_text().replace('"format":"serq-ir/1"', '"format":"serq-ir/0"'))
    (root / VECTORS[1] / "ir.json").unlink()
    assert t.main(["--check", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert VECTORS[0] in out and VECTORS[1] in out
    assert t.main(["--root", str(root)]) == 0
    assert "0 ir.json file(s) up to date, 2 rewritten" in capsys.readouterr().out
    assert t.main(["--check", "--root", str(root)]) == 0
    assert capsys.readouterr().out == "2 ir.json file(s) up to date\n"
    for name in VECTORS[:2]:
        assert (root / name / "ir.json").read_text() == (ROOT / name / "ir.json").read_text()

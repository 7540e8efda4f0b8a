"""serq_vllm as an installed package: the programs `serq oracle run` compiles are package data,
found beside the package's modules, so the command needs no source tree.

- every program, and every file it names (`use`, `trace`), lies inside python/serq_vllm/programs/;
- pyproject.toml's package-data declares every file there (a wheel carries them);
- the package's copies of lib/vllm.sq and examples/oracle/data/preempt.csv are byte-identical;
- `serq oracle run` works from a copy of python/ that holds only what an install carries (the
  modules and the declared package data), run with the working directory elsewhere.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = ROOT / "python"
sys.path.insert(0, str(PY))

from serq import frontend  # noqa: E402
from serq_vllm import encode  # noqa: E402
from serq_vllm.compare import compare_traces, load_trace, vector_trace_path  # noqa: E402

PACKAGE = PY / "serq_vllm"
PROGRAMS = PACKAGE / "programs"
#: the package's copy -> the repository file it must equal
COPIES = {PROGRAMS / "vllm.sq": ROOT / "lib" / "vllm.sq",
          PROGRAMS / "data" / "preempt.csv": ROOT / "examples" / "oracle" / "data" / "preempt.csv"}


def package_data() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]


@pytest.mark.parametrize("priority,hold", [(False, False), (False, True), (True, False)])
def test_programs_resolve_inside_the_package(priority, hold):
    path = encode.program_path(priority, hold)
    assert path.is_file() and path.parent == PROGRAMS, path
    ir = frontend.load_program(str(path))
    # the files the program is made of, relative to it: none outside the programs folder
    named = [(path.parent / f).resolve() for f in ir["files"]]
    assert len(named) >= 2, ir["files"]  # the program and the library it uses
    for f in named:
        assert f.is_file() and f.is_relative_to(PROGRAMS), f
    # the example trace the programs declare (replaced by the model's) is in the package too
    assert (PROGRAMS / "data" / "preempt.csv").is_file()


def test_package_data_declares_every_program_file():
    globs = package_data()["serq_vllm"]
    files = [p.relative_to(PACKAGE).as_posix() for p in PROGRAMS.rglob("*") if p.is_file()
             and "__pycache__" not in p.parts]
    assert files
    undeclared = [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert not undeclared, f"pyproject.toml [tool.setuptools.package-data] serq_vllm misses {undeclared}"


@pytest.mark.parametrize("copy", sorted(COPIES), ids=lambda p: p.name)
def test_package_copies_are_byte_identical(copy):
    assert copy.read_bytes() == COPIES[copy].read_bytes(), (
        f"{copy.relative_to(ROOT)} differs from {COPIES[copy].relative_to(ROOT)}: copy the one "
        "you changed over the other")


def installed_copy(dest: Path) -> Path:
    """python/ as an install lays it out: each package's modules and its declared package data,
    nothing else (no examples/, lib/, tools/ or vectors/ around it)."""
    data = package_data()
    for pkg in sorted(p.parent for p in PY.glob("*/__init__.py")):
        globs = data.get(pkg.name, [])
        for f in pkg.rglob("*"):
            rel = f.relative_to(pkg).as_posix()
            if f.is_file() and "__pycache__" not in f.parts and (
                    f.suffix == ".py" or any(fnmatch.fnmatch(rel, g) for g in globs)):
                (dest / pkg.name / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, dest / pkg.name / rel)
    return dest


def test_oracle_run_from_an_installed_layout(tmp_path):
    site = installed_copy(tmp_path / "site")
    work = tmp_path / "elsewhere"
    work.mkdir()
    scenario = ROOT / "vectors" / "vllm" / "caps.scenario.json"
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-m", "serq.cli", "oracle", "run", str(scenario),
                           "-o", "caps.json"], cwd=work, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    ours = json.loads((work / "caps.json").read_text())
    assert compare_traces(ours, load_trace(vector_trace_path(ROOT / "vectors" / "vllm", "caps"))) == []

"""Every example program links, and examples/README.md indexes every one of them.

The programs are discovered by glob, so a new `.sq` file under `examples/` is covered without
touching this file. `serq check FILE` is run in a subprocess (`python -m serq.cli check FILE`,
with `python/` on the path), which exercises the real command line; the contract is exit code 0.
These tests fail until the front-end (`serq.frontend_cli`) is in place.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
README = EXAMPLES / "README.md"

PROGRAMS = sorted(EXAMPLES.rglob("*.sq"))


def _rel(path: Path) -> str:
    return path.relative_to(EXAMPLES).as_posix()


def _serq_check(path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO / "python"), env.get("PYTHONPATH", "")] if p)
    return subprocess.run(
        [sys.executable, "-m", "serq.cli", "check", str(path)],
        cwd=path.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_there_are_examples():
    assert PROGRAMS, "no .sq files found under examples/"


@pytest.mark.parametrize("path", PROGRAMS, ids=[_rel(p) for p in PROGRAMS])
def test_example_checks(path: Path):
    result = _serq_check(path)
    assert result.returncode == 0, (
        f"serq check {_rel(path)} exited {result.returncode}\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )


def test_readme_lists_every_example():
    text = README.read_text()
    # Rows of the README table name each program by its path under examples/, in backquotes.
    listed = set(re.findall(r"`([A-Za-z0-9_./-]+\.sq)`", text))
    missing = [_rel(p) for p in PROGRAMS if _rel(p) not in listed]
    assert not missing, f"examples/README.md does not list: {missing}"
    stale = sorted(name for name in listed if name.count("/") and not (EXAMPLES / name).exists())
    assert not stale, f"examples/README.md lists programs that do not exist: {stale}"


def test_lib_is_a_library():
    """lib/*.sq hold definitions only: no `fn main`."""
    for lib in sorted((REPO / "lib").glob("*.sq")):
        code = re.sub(r"//[^\n]*|/\*.*?\*/", "", lib.read_text(), flags=re.S)
        assert not re.search(r"\bfn\s+main\b", code), f"{lib} declares main"


def test_synthetic_trace_is_reproducible():
    """examples/replay/data/synthetic.csv is exactly what tools/gen_trace.py writes."""
    result = subprocess.run(
        [sys.executable, str(REPO / "tools" / "gen_trace.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr

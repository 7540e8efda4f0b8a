"""The repository passes its own linter configuration (pyproject.toml [tool.ruff]): pyflakes'
errors (unused imports and variables, undefined names), pycodestyle's statement errors, and no
`# noqa` that silences nothing. serq_spec passes mypy with [tool.mypy] (every function annotated,
0 errors), which only `.ci/lint` ran before issue 14: a cold run (no cache) takes about 8 s on the
shared 2-core machine (2.3 s of CPU), so the test run includes it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ruff() -> list[str]:
    exe = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    return [exe]


def test_ruff_passes_on_the_repository():
    proc = subprocess.run([*ruff(), "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_would_catch_an_unused_import(tmp_path):
    """The check is not vacuous: the repository's configuration flags a seeded unused import."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    proc = subprocess.run([*ruff(), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "F401" in proc.stdout


def mypy(cache: Path, *args: str) -> subprocess.CompletedProcess:
    """mypy with the repository's [tool.mypy], its cache in CACHE (a fresh folder: a cache
    left by another checkout could hide an error)."""
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args],
                          cwd=ROOT, capture_output=True, text=True)


def test_mypy_passes_on_serq_spec(tmp_path):
    proc = mypy(tmp_path / "cache")
    assert proc.returncode == 0 and "Success" in proc.stdout, proc.stdout + proc.stderr


def test_mypy_would_catch_a_type_error(tmp_path):
    """The check is not vacuous: with the repository's configuration, a seeded str-for-int
    argument and an unannotated function in a copy of a serq_spec module are both errors."""
    pkg = tmp_path / "serq_spec"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "seeded.py").write_text("def whole(n: int) -> int:\n    return n\n\n\n"
                                   "def bad():\n    return whole(\"3\")\n")
    proc = mypy(tmp_path / "cache", "--config-file", str(ROOT / "pyproject.toml"), str(pkg / "seeded.py"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "[arg-type]" in proc.stdout and "[no-untyped-def]" in proc.stdout, proc.stdout

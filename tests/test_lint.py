"""The repository passes its own linter configuration (pyproject.toml [tool.ruff]): pyflakes'
errors (unused imports and variables, undefined names), pycodestyle's statement errors, and no
`# noqa` that silences nothing."""

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

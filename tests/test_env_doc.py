"""docs/env.md lists exactly the `SERQ_*` environment variables the code reads.

The code is every Python and shell file under python/, tools/, tests/, benchmarks/ and .ci/; a name
used only as a prefix filter (`k.startswith("SERQ_…")`) is not a variable."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "env.md"
NAME = re.compile(r"\bSERQ_[A-Z0-9_]*[A-Z0-9]\b")
PREFIX_FILTER = re.compile(r"startswith\(\s*[\"']SERQ_[A-Z0-9_]*[\"']\s*\)")


def code_files() -> list[Path]:
    out = []
    for top in ("python", "tools", "tests", "benchmarks", ".ci"):
        for p in sorted((ROOT / top).rglob("*")):
            rel = p.relative_to(ROOT).parts[1:]
            if not p.is_file() or any(s.startswith(".") or s == "__pycache__" for s in rel):
                continue
            if p.suffix in (".py", ".sh") or (top == ".ci" and p.suffix == ""):
                out.append(p)
    return out


def names_in_code(files: list[Path]) -> dict[str, str]:
    """{variable: the first file that names it}."""
    me = Path(__file__).resolve()
    found: dict[str, str] = {}
    for p in files:
        if p.resolve() == me:
            continue
        text = PREFIX_FILTER.sub("", p.read_text(encoding="utf-8", errors="replace"))
        for n in NAME.findall(text):
            found.setdefault(n, str(p.relative_to(ROOT)))
    return found


def names_in_doc(text: str) -> set[str]:
    """The variables the page documents: the first cell of each table row."""
    return {m.group(1) for m in re.finditer(r"^\|\s*`(SERQ_[A-Z0-9_]+)`\s*\|", text, re.M)}


def undocumented(code: dict[str, str], doc: set[str]) -> list[str]:
    return sorted(f"{n} (read in {f})" for n, f in code.items() if n not in doc)


def test_every_variable_the_code_reads_is_documented():
    code = names_in_code(code_files())
    doc = names_in_doc(DOC.read_text(encoding="utf-8"))
    missing = undocumented(code, doc)
    assert not missing, "not in docs/env.md: " + ", ".join(missing)
    stale = sorted(doc - set(code))
    assert not stale, "docs/env.md lists variables no code reads: " + ", ".join(stale)


def test_the_check_sees_a_new_variable():
    """Seeded: a variable read in code but missing from the page is reported; the known ones are."""
    code = names_in_code(code_files())
    assert {"SERQ_TRACE_ITER", "SERQ_LEAN_LIB", "SERQ_VLLM_VENV", "SERQ_CI_VENV", "SERQ_LONG"} <= set(code)
    assert "SERQ_LEAN" not in code and "SERQ_VLLM" not in code   # prefix filters only
    doc = names_in_doc(DOC.read_text(encoding="utf-8"))
    seeded = dict(code, SERQ_NEW_KNOB="python/serq/cli.py")
    new = set(undocumented(seeded, doc)) - set(undocumented(code, doc))
    assert new == {"SERQ_NEW_KNOB (read in python/serq/cli.py)"}

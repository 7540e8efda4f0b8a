"""The drift guard between serq_spec and SerqLang: docs/spec-map.md lists pairs
(Python function of serq_spec, its Lean counterpart); both sides must still define every name.

Python names are `module.attr[.attr]` relative to `serq_spec` and are imported; Lean names are
`Namespace.name` and must be declared (`def`, `theorem`, `structure`, `inductive`, `abbrev`,
`instance`, `class`) in some SerqLang/**/*.lean file, each namespace component existing as a
`namespace`, `structure` or `inductive`.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPEC_MAP = REPO / "docs" / "spec-map.md"
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|")
DECL = re.compile(r"^\s*(?:@\[[^\]]*\]\s*)?(?:(?:private|protected|partial|noncomputable|unsafe)\s+)*"
                  r"(?:def|theorem|structure|inductive|abbrev|instance|class)\s+([\w.'!?]+)", re.M)
NAMESPACE = re.compile(r"^\s*namespace\s+([\w.]+)", re.M)


def rows(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for line in text.splitlines() if (m := ROW.match(line))]


def lean_declarations() -> tuple[set[str], set[str]]:
    """(declared names, last components), (namespace-like names) over SerqLang/**/*.lean."""
    decls, spaces = set(), set()
    for path in list((REPO / "SerqLang").rglob("*.lean")) + [REPO / "SerqLang.lean"]:
        text = path.read_text()
        for name in DECL.findall(text):
            decls.add(name)
            decls.add(name.split(".")[-1])
            spaces.update(name.split(".")[:-1])
        for ns in NAMESPACE.findall(text):
            spaces.update(ns.split("."))
        for kind_name in re.findall(r"^\s*(?:structure|inductive|class)\s+([\w.]+)", text, re.M):
            spaces.update(kind_name.split("."))
    return decls, spaces


def python_defined(name: str) -> bool:
    module, _, attrs = name.partition(".")
    try:
        obj = importlib.import_module(f"serq_spec.{module}")
    except ImportError:
        return False
    for a in attrs.split(".") if attrs else []:
        if not hasattr(obj, a):
            return False
        obj = getattr(obj, a)
    return True


def check(text: str) -> list[str]:
    """Every problem of a spec map: a Python or a Lean name that is not defined."""
    problems = []
    decls, spaces = lean_declarations()
    pairs = rows(text)
    if not pairs:
        problems.append("no rows")
    for py, lean in pairs:
        if not python_defined(py):
            problems.append(f"serq_spec has no {py}")
        parts = lean.split(".")
        if parts[-1] not in decls and lean not in decls:
            problems.append(f"SerqLang declares no {lean}")
        for ns in parts[:-1]:
            if ns not in spaces:
                problems.append(f"SerqLang has no namespace {ns} (in {lean})")
    return problems


def test_spec_map_both_sides_exist():
    problems = check(SPEC_MAP.read_text())
    assert not problems, "docs/spec-map.md drifted:\n" + "\n".join(problems)


def test_spec_map_is_substantial():
    pairs = rows(SPEC_MAP.read_text())
    assert len(pairs) >= 20
    modules = {py.split(".")[0] for py, _ in pairs}
    assert {"values", "pools"} <= modules


def test_seeded_faults_are_caught():
    text = SPEC_MAP.read_text()
    py, lean = rows(text)[0]
    bad_py = text.replace(f"`{py}`", f"`{py}_misspelt`", 1)
    assert any("serq_spec has no" in p for p in check(bad_py))
    bad_lean = text.replace(f"`{lean}`", f"`{lean}Misspelt`", 1)
    assert any("SerqLang declares no" in p for p in check(bad_lean))
    bad_ns = text.replace(f"`{lean}`", f"`NoSuchSpace.{lean.split('.')[-1]}`", 1)
    assert any("no namespace NoSuchSpace" in p for p in check(bad_ns))

"""The drift guard between serq_spec and SerqLang: docs/spec-map.md lists pairs
(Python function of serq_spec, its Lean counterpart); both sides must still define every name.

Python names are `module.attr[.attr]` relative to `serq_spec` and are imported; Lean names are
`Namespace.name` and must be declared (`def`, `theorem`, `structure`, `inductive`, `abbrev`,
`instance`, `class`) in some SerqLang/**/*.lean file *inside that namespace*: the declaration's
full name (the `namespace … end` blocks around it, then its own dotted name) must be the map's
name or end with `.` + it, so `Pool.admit` is not satisfied by an `admit` of another namespace.
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


DECL_LINE = re.compile(r"^\s*(?:@\[[^\]]*\]\s*)?(?:(?:private|protected|partial|noncomputable|unsafe)\s+)*"
                       r"(?:def|theorem|structure|inductive|abbrev|instance|class)\s+([\w.'!?]+)")


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


def lean_qualified() -> set[str]:
    """The full names of the declarations of SerqLang/**/*.lean (`namespace A.B` … `end A.B` and
    `section` … `end` blocks followed line by line)."""
    names = set()
    for path in list((REPO / "SerqLang").rglob("*.lean")) + [REPO / "SerqLang.lean"]:
        stack: list[tuple[str, str]] = []
        for line in path.read_text().splitlines():
            if m := re.match(r"^\s*namespace\s+([\w.]+)", line):
                stack.append(("namespace", m.group(1)))
            elif re.match(r"^\s*section\b", line):
                stack.append(("section", ""))
            elif re.match(r"^end\b\s*[\w.]*\s*$", line) and stack:
                stack.pop()
            elif m := DECL_LINE.match(line):
                prefix = ".".join(name for kind, name in stack if kind == "namespace")
                names.add(f"{prefix}.{m.group(1)}" if prefix else m.group(1))
    return names


def lean_defined(name: str, qualified: set[str]) -> bool:
    return any(q == name or q.endswith("." + name) for q in qualified)


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
    qualified = lean_qualified()
    pairs = rows(text)
    if not pairs:
        problems.append("no rows")
    for py, lean in pairs:
        if not python_defined(py):
            problems.append(f"serq_spec has no {py}")
        parts = lean.split(".")
        found = []
        if parts[-1] not in decls and lean not in decls:
            found.append(f"SerqLang declares no {lean}")
        found += [f"SerqLang has no namespace {ns} (in {lean})" for ns in parts[:-1] if ns not in spaces]
        if not found and not lean_defined(lean, qualified):
            found.append(f"SerqLang declares no {lean} in that namespace")
        problems += found
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
    # a name moved to another namespace that exists but does not declare it
    qualified = lean_qualified()
    spaces = sorted({q.rsplit(".", 1)[0] for q in qualified if "." in q})
    for py, lean in rows(text):
        last = lean.split(".")[-1]
        other = next((ns for ns in spaces if not lean_defined(f"{ns}.{last}", qualified)), None)
        if "." in lean and other is not None:
            moved = text.replace(f"`{lean}`", f"`{other}.{last}`", 1)
            assert any(f"declares no {other}.{last} in that namespace" in p for p in check(moved)), (lean, other)
            break
    else:
        raise AssertionError("no row to move to another namespace")

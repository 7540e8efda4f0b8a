"""The drift guard between serq_spec, serq_fast and SerqLang: docs/spec-map.md lists rows
(serq_spec name | serq_fast name(s) or `—` | Lean name | note); every side must still define
every name it lists.

Python names are `module.attr[.attr]` relative to `serq_spec` (first column) or `serq_fast`
(second column: one or more backticked names, or `—` with a `fast:` reason in the note) and are
imported and resolved attribute by attribute; Lean names are
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
ROW_START = re.compile(r"^\|\s*`")
CELL_SPLIT = re.compile(r"(?<!\\)\|")  # `\|` inside a note is no cell boundary
NAME = re.compile(r"`([^`]+)`")
NO_FAST = "—"
DECL = re.compile(r"^\s*(?:@\[[^\]]*\]\s*)?(?:(?:private|protected|partial|noncomputable|unsafe)\s+)*"
                  r"(?:def|theorem|structure|inductive|abbrev|instance|class)\s+([\w.'!?]+)", re.M)
NAMESPACE = re.compile(r"^\s*namespace\s+([\w.]+)", re.M)


DECL_LINE = re.compile(r"^\s*(?:@\[[^\]]*\]\s*)?(?:(?:private|protected|partial|noncomputable|unsafe)\s+)*"
                       r"(?:def|theorem|structure|inductive|abbrev|instance|class)\s+([\w.'!?]+)")


def table(text: str) -> list[list[str]]:
    """The cells of every row of the map (a line that starts with a bar and a backtick), stripped."""
    return [[c.strip() for c in CELL_SPLIT.split(line.strip()[1:-1])]
            for line in text.splitlines() if ROW_START.match(line)]


def rows(text: str) -> list[tuple[str, str]]:
    """(serq_spec name, SerqLang name) of every row with all four cells."""
    return [(NAME.fullmatch(cells[0])[1], NAME.fullmatch(cells[2])[1]) for cells in table(text)
            if len(cells) == 4 and NAME.fullmatch(cells[0]) and NAME.fullmatch(cells[2])]


def fast_cells(text: str) -> list[tuple[str, str, str]]:
    """(serq_spec name, serq_fast cell, note) of every row with all four cells."""
    return [(NAME.fullmatch(cells[0])[1] if NAME.fullmatch(cells[0]) else cells[0], cells[1], cells[3])
            for cells in table(text) if len(cells) == 4]


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


def python_defined(name: str, package: str = "serq_spec") -> bool:
    module, _, attrs = name.partition(".")
    try:
        obj = importlib.import_module(f"{package}.{module}")
    except ImportError:
        return False
    for a in attrs.split(".") if attrs else []:
        if not hasattr(obj, a):
            return False
        obj = getattr(obj, a)
    return True


def check(text: str) -> list[str]:
    """Every problem of a spec map: a row without its four cells, a serq_fast cell that is
    neither names nor `—` with a reason, or a serq_spec, serq_fast or Lean name that is not defined."""
    problems = []
    decls, spaces = lean_declarations()
    qualified = lean_qualified()
    pairs = rows(text)
    if not pairs:
        problems.append("no rows")
    for cells in table(text):
        if len(cells) != 4:
            problems.append(f"row {cells[0]} has {len(cells)} cells, not 4 (serq_spec | serq_fast | SerqLang | note)")
        elif not (NAME.fullmatch(cells[0]) and NAME.fullmatch(cells[2])):
            problems.append(f"row {cells[0]}: the serq_spec and SerqLang cells must be one backticked name each")
    for spec, cell, note in fast_cells(text):
        if cell == NO_FAST:
            if "fast:" not in note:
                problems.append(f"row {spec}: `—` for serq_fast without a `fast:` reason in the note")
            continue
        names = NAME.findall(cell)
        if not names or NAME.sub("", cell).replace(",", "").strip():
            problems.append(f"row {spec}: serq_fast cell {cell!r} is neither backticked names nor `—`")
        problems += [f"serq_fast has no {n} (row {spec})" for n in names if not python_defined(n, "serq_fast")]
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


def test_spec_map_fast_column_is_substantial():
    cells = fast_cells(SPEC_MAP.read_text())
    assert len(cells) == len(table(SPEC_MAP.read_text()))   # every row has its serq_fast cell
    named = [NAME.findall(cell) for _, cell, _ in cells if cell != NO_FAST]
    assert len(named) >= 100
    modules = {n.split(".")[0] for names in named for n in names}
    assert {"step", "engine", "defs", "stages", "pools", "content", "expr", "trace", "growth", "lag", "sources"} <= modules


def test_seeded_fast_faults_are_caught():
    text = SPEC_MAP.read_text()
    assert not check(text)
    first = next(cell for _, cell, _ in fast_cells(text) if cell != NO_FAST)
    name = NAME.findall(first)[0]
    # a misspelled function, a misspelled module, a misspelled method of a class
    bad = text.replace(f"| `{name}`", f"| `{name}_misspelt`", 1)
    assert any(f"serq_fast has no {name}_misspelt" in p for p in check(bad))
    bad = text.replace(f"| `{name}`", f"| `nosuchmodule.{name.split('.')[-1]}`", 1)
    assert any("serq_fast has no nosuchmodule." in p for p in check(bad))
    bad = text.replace("`engine.Engine.present`", "`engine.Engine.presnt`", 1)
    assert bad != text and any("serq_fast has no engine.Engine.presnt" in p for p in check(bad))
    # a row without its serq_fast cell (the pre-issue-14 three-column row)
    line = next(x for x in text.splitlines() if x.startswith("| `pools.make_room`"))
    cells = [c.strip() for c in CELL_SPLIT.split(line.strip()[1:-1])]
    three = "| " + " | ".join([cells[0], cells[2], cells[3]]) + " |"
    assert any("pools.make_room` has 3 cells" in p for p in check(text.replace(line, three)))
    # `—` without a reason, and a cell that is neither names nor `—`
    line = next(x for x in text.splitlines() if f"| {NO_FAST} |" in x)
    assert any("without a `fast:` reason" in p for p in check(text.replace(line, line.replace("fast:", "fast"))))
    assert any("neither backticked names" in p for p in check(text.replace(line, line.replace(f"| {NO_FAST} |", "| n/a |", 1))))

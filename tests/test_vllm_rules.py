"""The drift guard of docs/vllm-rules.md (issue 14): every rule of the vLLM model followed from
vLLM's source to a program line, a serq_spec function, a serq_fast function and vectors.

Each row has six cells: rule | vLLM source | program line | serq_spec | serq_fast | vectors. The
checks: no cell is empty and a `—` carries a reason; the program cell is one or more pairs
`FILE:LINE` `construct` (FILE in python/serq_vllm/programs/), the line exists and contains the
construct; every serq_spec and serq_fast name resolves (import + getattr, as test_spec_map.py
does); every vector exists (`vllm/NAME`: vectors/vllm/NAME.scenario.json and its trace,
`spec/NAME`: vectors/spec/NAME/expected.json). The seeded-fault tests break one cell of each
kind and require the check to name it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_spec_map import CELL_SPLIT, python_defined

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "docs" / "vllm-rules.md"
PROGRAMS = REPO / "python" / "serq_vllm" / "programs"
VECTORS = REPO / "vectors"
COLUMNS = ("rule", "vLLM source", "program line", "serq_spec", "serq_fast", "vectors")
ROW = re.compile(r"^\|\s*\*\*")            # a table row starts with its bold rule name
NAME = re.compile(r"`([^`]+)`")
LOCATION = re.compile(r"^([\w.]+\.sq):(\d+)$")
NO_CELL = "—"


def table(text: str) -> list[list[str]]:
    """The stripped cells of every rule row."""
    return [[c.strip() for c in CELL_SPLIT.split(line.strip()[1:-1])]
            for line in text.splitlines() if ROW.match(line)]


def check_program_cell(rule: str, cell: str) -> list[str]:
    """The cell is `FILE:LINE` `construct` pairs (text between them is free); each line must exist
    and contain its construct."""
    names = NAME.findall(cell)
    problems = []
    if not names:
        return [f"{rule}: program line cell has no `FILE:LINE` `construct`"]
    i = 0
    while i < len(names):
        m = LOCATION.match(names[i])
        if m is None:
            problems.append(f"{rule}: `{names[i]}` in the program cell is no `FILE:LINE` "
                            "(each location is followed by its construct)")
            i += 1
            continue
        if i + 1 >= len(names) or LOCATION.match(names[i + 1]):
            problems.append(f"{rule}: `{names[i]}` has no construct after it")
            i += 1
            continue
        path, line, construct = PROGRAMS / m[1], int(m[2]), names[i + 1]
        if not path.is_file():
            problems.append(f"{rule}: no program {m[1]} in python/serq_vllm/programs")
        else:
            lines = path.read_text().splitlines()
            if not 1 <= line <= len(lines):
                problems.append(f"{rule}: {m[1]} has no line {line} ({len(lines)} lines)")
            elif construct not in lines[line - 1]:
                problems.append(f"{rule}: {m[1]}:{line} does not contain `{construct}`: "
                                f"{lines[line - 1].strip()!r}")
        i += 2
    return problems


def check_names_cell(rule: str, cell: str, package: str) -> list[str]:
    if cell.startswith(NO_CELL):
        return [] if cell[len(NO_CELL):].strip() else [f"{rule}: `—` for {package} without a reason"]
    names = NAME.findall(cell)
    if not names or NAME.sub("", cell).replace(",", "").strip():
        return [f"{rule}: {package} cell {cell!r} is neither backticked names nor `—` with a reason"]
    return [f"{rule}: {package} has no {n}" for n in names if not python_defined(n, package)]


def vector_exists(ref: str) -> bool:
    kind, _, name = ref.partition("/")
    if kind == "vllm":
        base = VECTORS / "vllm" / name
        return (base.with_name(name + ".scenario.json").is_file()
                and any(base.with_name(name + ext).is_file() for ext in (".trace.json", ".trace.json.gz")))
    if kind == "spec":
        return (VECTORS / "spec" / name / "expected.json").is_file()
    return False


def check_vectors_cell(rule: str, cell: str) -> list[str]:
    names = NAME.findall(cell)
    if not names:
        return [f"{rule}: no vector"]
    return [f"{rule}: no committed vector {n} (vllm/NAME or spec/NAME)" for n in names if not vector_exists(n)]


def check(text: str) -> list[str]:
    """Every problem of the rules table."""
    rows = table(text)
    problems = [] if rows else ["no rows"]
    for cells in rows:
        rule = NAME.sub(lambda m: m[1], cells[0]).replace("**", "").strip()[:60]
        if len(cells) != len(COLUMNS):
            problems.append(f"{rule}: {len(cells)} cells, not {len(COLUMNS)} ({' | '.join(COLUMNS)})")
            continue
        for col, cell in zip(COLUMNS, cells):
            if not cell or cell == NO_CELL:
                problems.append(f"{rule}: empty {col} cell (a `—` needs a reason)")
        if cells[1] and not cells[1].startswith(NO_CELL) and not NAME.search(cells[1]):
            problems.append(f"{rule}: vLLM source cell names no file or function in backticks")
        problems += check_program_cell(rule, cells[2])
        problems += check_names_cell(rule, cells[3], "serq_spec")
        problems += check_names_cell(rule, cells[4], "serq_fast")
        problems += check_vectors_cell(rule, cells[5])
    return problems


def test_every_rule_can_be_followed():
    problems = check(RULES.read_text())
    assert not problems, "docs/vllm-rules.md drifted:\n" + "\n".join(problems)


def test_rules_table_is_substantial():
    rows = table(RULES.read_text())
    assert len(rows) >= 30
    programs = {m[1] for cells in rows for m in re.finditer(r"`([\w.]+\.sq):\d+`", cells[2])}
    assert {"vllm.sq", "vllm_scenario.sq", "vllm_scenario_async.sq", "vllm_scenario_priority.sq"} <= programs


def _first(text: str, pattern: str) -> re.Match:
    m = re.search(pattern, text)
    assert m is not None, pattern
    return m


def _seed(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, old
    return text.replace(old, new, 1)


SEEDED = {
    # a wrong line number: the construct is not on the line before it
    "wrong line": (lambda t: _seed(t, "`vllm_scenario.sq:108` `tokens cap budget`",
                                   "`vllm_scenario.sq:107` `tokens cap budget`"),
                   "vllm_scenario.sq:107 does not contain `tokens cap budget`"),
    "line past the end": (lambda t: _seed(t, "`vllm.sq:17`", "`vllm.sq:18`"), "vllm.sq has no line 18"),
    "missing program": (lambda t: _seed(t, "`vllm_scenario.sq:108`", "`vllm_scenari.sq:108`"),
                        "no program vllm_scenari.sq"),
    "location without construct": (lambda t: _seed(t, "`vllm_scenario.sq:108` `tokens cap budget`",
                                                   "`vllm_scenario.sq:108`"),
                                   "`vllm_scenario.sq:108` has no construct"),
    "misspelled serq_spec function": (lambda t: _seed(t, "| `growth.choose_victim`", "| `growth.choose_victin`"),
                                      "serq_spec has no growth.choose_victin"),
    "misspelled serq_fast method": (lambda t: _seed(t, "| `pools.Pool.choose_victim`", "| `pools.Pool.chose_victim`"),
                                    "serq_fast has no pools.Pool.chose_victim"),
    "serq_fast dash without reason": (lambda t: _seed(t, "| `stages.DelayStage._accept` |", "| — |"),
                                      "empty serq_fast cell"),
    "missing vllm vector": (lambda t: _seed(t, "`vllm/caps`", "`vllm/caps_missing`"),
                            "no committed vector vllm/caps_missing"),
    "missing spec vector": (lambda t: _seed(t, "`spec/preempt_head_requeue`", "`spec/preempt_head_requeu`"),
                            "no committed vector spec/preempt_head_requeu"),
    "vector without directory": (lambda t: _seed(t, "`vllm/preempt`", "`preempt`"),
                                 "no committed vector preempt"),
    "empty vLLM source": (lambda t: _seed(t, _first(t, r"\| `core/sched/scheduler\.py` `Scheduler\.schedule` "
                                                    r"\(`token_budget`[^|]*\|")[0], "| |"),
                          "empty vLLM source cell"),
    "a cell dropped": (lambda t: _seed(t, "| `engine.serve`, `expr.budget_moment` |", "|"), "5 cells, not 6"),
}


@pytest.mark.parametrize("fault", sorted(SEEDED))
def test_seeded_fault_is_caught(fault):
    text = RULES.read_text()
    assert not check(text)
    seed, expected = SEEDED[fault]
    bad = seed(text)
    assert bad != text
    problems = check(bad)
    assert any(expected in p for p in problems), (fault, problems)

"""The drift guard of docs/vllm-rules.md (issue 14): every rule of the vLLM model followed from
vLLM's source to a program line, a serq_spec function, a serq_fast function and vectors.

Each row has six cells: rule | vLLM source | program line | serq_spec | serq_fast | vectors. The
checks: no cell is empty and a `—` carries a reason; the program cell is one or more pairs
`FILE:LINE` `construct` (FILE in python/serq_vllm/programs/), the line exists and contains the
construct; every serq_spec and serq_fast name resolves (import + getattr, as test_spec_map.py
does); every vector exists (`vllm/NAME`: vectors/vllm/NAME.scenario.json and its trace,
`spec/NAME`: vectors/spec/NAME/expected.json). The seeded-fault tests break one cell of each
kind and require the check to name it. (The second table of refused rules, speculative decoding
under async scheduling, went when the model learnt those rules: docs/async.md §8.)
"""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path

import pytest

from test_spec_map import CELL_SPLIT, python_defined
from test_vllm_feedback import VECTOR_NAME, cited_vectors, rules

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "docs" / "vllm-rules.md"
PROGRAMS = REPO / "python" / "serq_vllm" / "programs"
VECTORS = REPO / "vectors"
COLUMNS = ("rule", "vLLM source", "program line", "serq_spec", "serq_fast", "vectors")
ROW = re.compile(r"^\|\s*\*\*")            # a table row starts with its bold rule name
NAME = re.compile(r"`([^`]+)`")
LOCATION = re.compile(r"^([\w.]+\.sq):(\d+)$")
NO_CELL = "—"
FEEDBACK = re.compile(r"`feedback\.(\w+)`")
SPAN = re.compile(r"`([^`]*)`")
#: the vLLM package read for the source column: $SERQ_VLLM_SOURCE (the `vllm/` directory), else
#: the testbed's copy when it is installed (tools/vllm_testbed; not part of the clone)
VLLM_SOURCE = ([Path(p) for p in [os.environ["SERQ_VLLM_SOURCE"]]] if os.environ.get("SERQ_VLLM_SOURCE")
               else sorted(REPO.glob("tools/vllm_testbed/.venv/lib/python3*/site-packages/vllm")))



def table(text: str) -> list[list[str]]:
    """The stripped cells of every rule row."""
    return [[c.strip() for c in CELL_SPLIT.split(line.strip()[1:-1])]
            for line in text.splitlines() if ROW.match(line)]


def rule_name(cells: list[str]) -> str:
    """The row's rule, shortened, for the messages."""
    return NAME.sub(lambda m: m[1], cells[0]).replace("**", "").strip()[:60]


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


def vllm_citations(cell: str) -> list[tuple[str, str]]:
    """The (file, name) cited by a vLLM source cell: the backticked spans outside parentheses are
    files (`….py`, relative to vllm/v1/) and the classes and functions of the file before them;
    spans inside parentheses are code fragments. ("", name) for a name before any file."""
    out, depth, pos, file = [], 0, 0, ""
    for m in SPAN.finditer(cell):
        plain = cell[pos:m.start()]
        depth = max(0, depth + plain.count("(") - plain.count(")"))
        pos = m.end()
        if depth == 0:
            if m[1].endswith(".py"):
                file = m[1]
                out.append((file, ""))
            else:
                out.append((file, m[1]))
    return out


def check_vllm_cell(rule: str, cell: str) -> list[str]:
    """A vLLM source cell is `—` with a reason, or files each followed by the functions cited."""
    if cell.startswith(NO_CELL):
        return []
    cites = vllm_citations(cell)
    problems = []
    if not cites or cites[0][1]:
        problems.append(f"{rule}: the vLLM source cell must start with a backticked file (…/….py)")
    for i, (file, name) in enumerate(cites):
        if not name and (i + 1 == len(cites) or not cites[i + 1][1]):
            problems.append(f"{rule}: vLLM file {file} is followed by no function")
    return problems


@functools.lru_cache(maxsize=None)
def vllm_defined(root: Path, file: str) -> frozenset:
    """The classes, their methods and the top-level functions of vllm/v1/FILE (empty: no such file)."""
    path = root / "v1" / file
    if not path.is_file():
        return frozenset()
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            names.update(f"{node.name}.{m.name}" for m in node.body
                         if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return frozenset(names)


def check_vllm_names(text: str, root: Path) -> list[str]:
    """Every file and function of the vLLM source column exists in the vLLM package at root."""
    problems = []
    for cells in table(text):
        rule = rule_name(cells)
        for file, name in vllm_citations(cells[1]) if len(cells) > 1 else []:
            defined = vllm_defined(root, file)
            if not defined:
                problems.append(f"{rule}: vLLM has no file v1/{file}")
            elif name and name not in defined:
                problems.append(f"{rule}: vLLM's v1/{file} defines no {name}")
    return problems


def check_feedback(rows: list[list[str]]) -> list[str]:
    """A rule the model feeds back (`feedback.NAME` in the rule cell) is a rule of
    serq_vllm.feedback, its row carries every vector its docstring names, and every such rule
    has a row."""
    known, problems, named = rules(), [], set()
    for cells in rows:
        if len(cells) != len(COLUMNS):
            continue
        rule = rule_name(cells)
        listed = set(VECTOR_NAME.findall(cells[5]))
        for fb in FEEDBACK.findall(cells[0]):
            named.add(fb)
            if fb not in known:
                problems.append(f"{rule}: serq_vllm.feedback has no rule {fb}")
                continue
            problems += [f"{rule}: vector {v} of feedback.{fb} is not in the row"
                         for v in cited_vectors(known[fb]) if v not in listed]
    problems += [f"feedback rule {fb} has no row" for fb in sorted(set(known) - named)]
    return problems


def cell_problems(rule: str, cells: list[str], columns: tuple[str, ...]) -> list[str]:
    """One cell per column, none empty (a `—` needs a reason)."""
    if len(cells) != len(columns):
        return [f"{rule}: {len(cells)} cells, not {len(columns)} ({' | '.join(columns)})"]
    return [f"{rule}: empty {col} cell (a `—` needs a reason)"
            for col, cell in zip(columns, cells) if not cell or cell == NO_CELL]


def table_problems(rows: list[list[str]], columns: tuple[str, ...], none: str, check_row) -> list[str]:
    """The problems of a table's rows: `none` without rows, the cell count and empty cells of each,
    and `check_row(rule, cells)` for every row of the right width."""
    problems = [] if rows else [none]
    for cells in rows:
        rule = rule_name(cells)
        problems += cell_problems(rule, cells, columns)
        if len(cells) == len(columns):
            problems += check_row(rule, cells)
    return problems


def check_modelled_row(rule: str, cells: list[str]) -> list[str]:
    problems = check_vllm_cell(rule, cells[1]) if cells[1] and cells[1] != NO_CELL else []
    problems += check_program_cell(rule, cells[2])
    problems += check_names_cell(rule, cells[3], "serq_spec")
    problems += check_names_cell(rule, cells[4], "serq_fast")
    return problems + check_vectors_cell(rule, cells[5])


def check(text: str) -> list[str]:
    """Every problem of the rules table."""
    rows = table(text)
    return table_problems(rows, COLUMNS, "no rows", check_modelled_row) + check_feedback(rows)


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
    "wrong line": (lambda t: _seed(t, "`vllm_scenario.sq:114` `tokens cap budget`",
                                   "`vllm_scenario.sq:113` `tokens cap budget`"),
                   "vllm_scenario.sq:113 does not contain `tokens cap budget`"),
    "line past the end": (lambda t: _seed(t, "`vllm.sq:17`", "`vllm.sq:18`"), "vllm.sq has no line 18"),
    "missing program": (lambda t: _seed(t, "`vllm_scenario.sq:114`", "`vllm_scenari.sq:114`"),
                        "no program vllm_scenari.sq"),
    "location without construct": (lambda t: _seed(t, "`vllm_scenario.sq:114` `tokens cap budget`",
                                                   "`vllm_scenario.sq:114`"),
                                   "`vllm_scenario.sq:114` has no construct"),
    "misspelled serq_spec function": (lambda t: _seed(t, "| `growth.choose_victim`", "| `growth.choose_victin`"),
                                      "serq_spec has no growth.choose_victin"),
    "misspelled serq_fast method": (lambda t: _seed(t, "| `engine.Engine._serve`", "| `engine.Engine._serv`"),
                                    "serq_fast has no engine.Engine._serv"),
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
    "vLLM file without function": (lambda t: _seed(t, "`core/sched/utils.py` `check_stop` (", "`core/sched/utils.py` ("),
                                   "vLLM file core/sched/utils.py is followed by no function"),
    "vLLM function before its file": (lambda t: _seed(t, "| `core/block_pool.py` `BlockPool.touch`;", "| `BlockPool.touch`;"),
                                      "must start with a backticked file"),
    "feedback vector dropped": (lambda t: _seed(t, "`vllm/c9000_00108`, ", ""),
                                "vector c9000_00108 of feedback.seconds_add_times is not in the row"),
    "feedback rule misspelled": (lambda t: _seed(t, "`feedback.cache_victims`", "`feedback.cache_victim`"),
                                 "serq_vllm.feedback has no rule cache_victim"),
    "feedback rule without row": (lambda t: _seed(t, "`feedback.engine_instant`", "`feedback`"),
                                  "feedback rule engine_instant has no row"),
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


@pytest.mark.skipif(not VLLM_SOURCE, reason="no vLLM source: set SERQ_VLLM_SOURCE to a vllm/ package "
                                            "directory or install tools/vllm_testbed")
def test_vllm_source_names_exist():
    problems = check_vllm_names(RULES.read_text(), VLLM_SOURCE[0])
    assert not problems, f"docs/vllm-rules.md cites what {VLLM_SOURCE[0]} lacks:\n" + "\n".join(problems)


@pytest.mark.skipif(not VLLM_SOURCE, reason="no vLLM source (see test_vllm_source_names_exist)")
def test_seeded_vllm_source_faults_are_caught():
    text, root = RULES.read_text(), VLLM_SOURCE[0]
    bad = _seed(text, "`Scheduler._preempt_request`", "`Scheduler._preempt_requests`")
    assert any("defines no Scheduler._preempt_requests" in p for p in check_vllm_names(bad, root))
    bad = _seed(text, "`core/block_pool.py`", "`core/block_pools.py`")
    assert any("vLLM has no file v1/core/block_pools.py" in p for p in check_vllm_names(bad, root))

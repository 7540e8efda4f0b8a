"""examples/README.md's "Inputs (defaults)" column against the programs: each `name` value pair
names an `args.number` input of the row's program with that default, and a row that lists its
inputs itself (not "as `other.sq`" / "those of `other.sq`") lists every one. A reader sets
inputs from that column; a renamed input or a changed default left it wrong."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest

from serq.frontend import load_program

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PAIR = re.compile(r"`(\w+)` (inf|[0-9][0-9.e+-]*)(?![\w.])")


def rows(text: str) -> list[tuple[str, str]]:
    """(program path under examples/, its Inputs cell) for each row of the README's table."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) >= 3 and (m := re.fullmatch(r"`([^`]+\.sq)`.*", cells[0])):
            out.append((m.group(1), cells[2]))
    return out


def number(text: str) -> Fraction | float:
    return float("inf") if text == "inf" else Fraction(text)


def input_faults(program: str, cell: str, inputs: dict[str, str]) -> list[str]:
    """What the Inputs cell of `program` gets wrong about `inputs` (external name -> default)."""
    bad = []
    listed = dict(PAIR.findall(cell))
    for name, value in listed.items():
        if name not in inputs:
            bad.append(f"{program}: `{name}` is not an input of the program")
        elif number(value) != number(inputs[name]):
            bad.append(f"{program}: `{name}` defaults to {inputs[name]}, the README says {value}")
    by_reference = re.match(r"(as|those of) `", cell)
    if not by_reference:
        bad += [f"{program}: input `{name}` (default {inputs[name]}) is not listed" for name in inputs
                if name not in listed]
    return bad


ROWS = rows((EXAMPLES / "README.md").read_text(encoding="utf-8"))


def test_the_table_is_read():
    assert len(ROWS) >= 20 and ("single-turn/mm1.sq", "`lambda` 0.8, `service` 1.0") in ROWS, ROWS[:3]


@pytest.mark.parametrize("program,cell", ROWS, ids=[p for p, _ in ROWS])
def test_inputs_column_matches_the_program(program, cell):
    inputs = load_program(str(EXAMPLES / program), {})["inputs"]
    bad = input_faults(program, cell, inputs)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("cell,expect", [
    ("`lambda` 0.8, `service` 1.0, `caching` 0", "`caching` is not an input"),
    ("`lambda` 0.5, `service` 1.0", "`lambda` defaults to 4/5, the README says 0.5"),
    ("`lambda` 0.8", "input `service` (default 1) is not listed"),
])
def test_a_seeded_wrong_inputs_cell_is_caught(cell, expect):
    bad = input_faults("mm1.sq", cell, {"lambda": "4/5", "service": "1"})
    assert len(bad) == 1 and expect in bad[0], bad

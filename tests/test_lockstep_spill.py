"""Offload tiers (`spill`, docs/language.md §11.8.1) in lockstep: the hand-derived vector
`spill_load_back` and a few random `spill_programs` agree step by step, and the seeded faults
`spill_lost` and `load_no_wait` (docs/fast.md "Seeded faults") are caught on both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

strategies = pytest.importorskip("strategies")

from hypothesis import HealthCheck, given, settings  # noqa: E402

from serq.frontend import compile_source, load_program  # noqa: E402
from serq_drt.lockstep import Divergence, compare_runs, lockstep  # noqa: E402

VECTOR = Path(__file__).resolve().parent.parent / "vectors" / "spec" / "spill_load_back"


def run_vector() -> int:
    ir = load_program(str(VECTOR / "program.sq"), {})
    return compare_runs(ir, json.loads((VECTOR / "sessions.json").read_text()), "spill_load_back")


def test_vector_agrees():
    assert run_vector() == 10


@pytest.mark.parametrize("fault", ["spill_lost", "load_no_wait"])
def test_seeded_fault_is_caught_on_the_vector(fault, monkeypatch):
    monkeypatch.setenv("SERQ_FAST_FAULT", fault)
    with pytest.raises(Divergence):
        run_vector()


CAUGHT: dict[str, int] = {"spill_lost": 0, "load_no_wait": 0}


@settings(max_examples=12, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(strategies.spill_programs())
def _count_caught(case):
    ir = compile_source(case.text, case.name, {})
    for fault in CAUGHT:
        with pytest.MonkeyPatch.context() as m:
            m.setenv("SERQ_FAST_FAULT", fault)
            try:
                lockstep(ir, case.seed, case.sessions, case.name)
            except Divergence:
                CAUGHT[fault] += 1


def test_seeded_faults_are_caught_on_random_programs():
    """Each fault makes some of the first random spill programs diverge (not all of them spill or
    load back: a program whose tier never receives a chunk cannot show either fault)."""
    _count_caught()
    assert CAUGHT["spill_lost"] > 0 and CAUGHT["load_no_wait"] > 0, CAUGHT

"""examples/multi-turn/agent_subagent.sq: a sub-agent that makes its own engine request inside an
agent turn (docs/language.md §11.13). Its header check, exact: the sub-agent never reads the
agent's cached context (`sub_hit` 0), the agent's answer reuses every full block of its plan
(`ans_miss` 0), three responses per turn. The seeded fault `branch_key` breaks both. Fast
engine, seed 1, horizon 1000 s."""

from __future__ import annotations

from pathlib import Path

from serq.frontend import load_program
from serq_fast import report
from serq_fast.step import Sim

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "multi-turn" / "agent_subagent.sq"


def run() -> dict:
    return report.build(Sim(load_program(str(EXAMPLE), {}), seed=1, horizon=1000.0, warmup=100.0).run())


def test_the_sub_agents_context_is_its_own(monkeypatch):
    rep = run()
    turns = rep["observe"]["turn_time"]["count"]
    assert turns > 80
    for name in ("sub_hit", "ans_miss"):
        row = rep["observe"][name]
        assert (row["count"], row["mean"], row["p99"]) == (turns, 0.0, 0.0), (name, row)
    assert rep["client"]["response"]["count"] == rep["client"]["ttft"]["count"] == 3 * turns
    monkeypatch.setenv("SERQ_FAST_FAULT", "branch_key")
    broken = run()
    assert broken["observe"]["sub_hit"]["mean"] > 0 and broken["observe"]["ans_miss"]["mean"] != 0

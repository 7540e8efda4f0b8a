"""examples/multi-turn/agent_fork.sq: parallel tool calls (`fork`/`join;`) shorten an agent turn by
the sum of the three tool latencies less their largest, 7/6 T on average at low load (its header
check). Fast engine, seed 1, horizon 4000 s."""

from __future__ import annotations

from pathlib import Path

from serq.frontend import load_program
from serq_fast import report
from serq_fast.step import Sim

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "multi-turn" / "agent_fork.sq"


def run(parallel: int) -> dict:
    ir = load_program(str(EXAMPLE), {"parallel": str(parallel)})
    return report.build(Sim(ir, seed=1, horizon=4000.0, warmup=200.0).run())


def test_parallel_tool_calls_shorten_the_turn():
    par, seq = run(1), run(0)
    for rep, expected in ((par, 11 / 6), (seq, 3.0)):
        phase = rep["observe"]["tool_phase"]
        assert abs(phase["mean"] - expected) <= phase["ci"], (phase, expected)
    # the same turns (common random numbers), the engine unchanged: the turn is shorter by what
    # the tool phase saves, 7/6 on average
    assert par["observe"]["turn_time"]["count"] == seq["observe"]["turn_time"]["count"] > 300
    saved = seq["observe"]["turn_time"]["mean"] - par["observe"]["turn_time"]["mean"]
    phase_saved = seq["observe"]["tool_phase"]["mean"] - par["observe"]["tool_phase"]["mean"]
    assert abs(saved - phase_saved) < 0.02, (saved, phase_saved)
    assert 1.0 < saved < 1.35, saved
    assert abs(par["client"]["response"]["mean"] - seq["client"]["response"]["mean"]) < 0.01

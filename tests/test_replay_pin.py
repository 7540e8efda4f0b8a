"""CHECK 2 of examples/replay/vllm_replay.sq: pinned vs unpinned waiting prefixes (`pin`, the
language's `lease`, docs/language.md §11.4) on the small trace data/pin_check.csv, whose header
derives the per-turn prefill tokens by hand. Both engines must give exactly those numbers."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest

from serq.frontend import compile_source
from serq_fast.step import Sim
from serq_drt.lockstep import sample_sessions
from serq_spec.program import Program
from serq_spec.step import run
from serq_spec.workload import Workload

REPLAY = Path(__file__).resolve().parent.parent / "examples" / "replay" / "vllm_replay.sq"
TRACE = REPLAY.parent / "data" / "pin_check.csv"


def expected() -> tuple[dict, dict]:
    """The header's `--set`s and, per policy, {(session, turn): prefill tokens}."""
    lines = TRACE.read_text().splitlines()
    sets = dict(re.findall(r"--set (\w+)=(\d+)\b(?!\])", next(x for x in lines if "run:" in x)))
    answers = {}
    after = lines[next(i for i, x in enumerate(lines) if x.startswith("# answer")):]
    for policy in ("unpinned", "pinned"):
        row = next(x for x in after if x.startswith(f"#   {policy}:"))
        cells = row.split(":", 1)[1].split("(")[0]
        answers[policy] = {(int(s), int(t)): int(v) for s, t, v in re.findall(r"(\d+) (\d+) (\d+)", cells)}
    return sets, answers


def program(pin: int) -> dict:
    sets, _ = expected()
    text = REPLAY.read_text().replace('"data/synthetic.csv"', '"data/pin_check.csv"')
    return compile_source(text, str(REPLAY), {**sets, "pin": str(pin)})


def spec_prefills(ir: dict) -> dict:
    """{(serial, turn): prefill_tokens} from the exact spec."""
    prog = Program(ir, "vllm_replay.sq", workload=Workload.replay(sample_sessions(ir, 1, int(ir["workload"]["arrival"]["n"]))))
    out = {}

    def collect(cfg, rec, k):
        for name, serial, turn, _t, value in rec["observations"]:
            if name == "prefill_tokens":
                out[(serial, turn)] = value
    run(prog, on_step=collect)
    return out


@pytest.mark.parametrize("pin,policy", [(0, "unpinned"), (1, "pinned")])
def test_pinning_changes_the_hit_exactly(pin, policy):
    _, answers = expected()
    assert answers["unpinned"] != answers["pinned"]   # the trace is one where pinning matters
    ir = program(pin)
    assert any("lease" in s for b in ir["blocks"] for s in b) == bool(pin)   # pin = 0 lowers no lease
    got = spec_prefills(ir)
    assert got == {k: Fraction(v) for k, v in answers[policy].items()}
    sim = Sim(ir, seed=1).run()
    mean = sum(answers[policy].values()) / len(answers[policy])
    stats = sim.obs_stats[sim.observe_names.index("prefill_tokens")]
    assert stats.n == len(answers[policy]) and stats.mean == pytest.approx(mean, rel=1e-12)

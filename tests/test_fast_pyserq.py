"""Agreement in distribution with the original (pyserq 0.1.6, dialect P translation of the seed
program in benchmarks/p/): mean TTFT and mean response over a few seeds, at the default and at
blocks = 2500. Skipped when pyserq is absent; marked slow (about three minutes).

The streams differ (language.md §11.10), so agreement is statistical: the pooled means must be
within 5 % of pyserq's, or within the two runs' combined 95 % half-widths when those are wider
(blocks = 2500 is heavy-tailed: one seed's half-width is 20–40 % of its mean).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

pyserq = pytest.importorskip("pyserq")

from serq.frontend import load_program  # noqa: E402
from serq_fast.engine import Sim  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HORIZON = 20_000.0
SEEDS = (1, 2, 3)


def _pooled(pairs):
    means = [m for m, _ in pairs]
    cis = [c for _, c in pairs]
    return sum(means) / len(means), math.sqrt(sum(c * c for c in cis)) / len(cis)


@pytest.mark.slow
@pytest.mark.parametrize("sets", [{}, {"blocks": "2500"}], ids=["default", "blocks=2500"])
def test_mean_ttft_and_response_agree_with_pyserq(sets, request):
    if "slow" not in (request.config.getoption("-m") or "") and not os.environ.get("SERQ_SLOW"):
        pytest.skip("slow (about three minutes): select with -m slow or SERQ_SLOW=1")
    ir = load_program(str(ROOT / "examples" / "multi-turn" / "vllm.sq"), sets)
    fast = {"ttft": [], "response": []}
    orig = {"ttft": [], "response": []}
    for seed in SEEDS:
        sim = Sim(ir, seed=seed, horizon=HORIZON, warmup=HORIZON / 10).run()
        for k in fast:
            fast[k].append((sim.client[k].mean, sim.client[k].ci()))
        prog = pyserq.compile(str(ROOT / "benchmarks" / "p" / "vllm.sq"),
                              workload=str(ROOT / "benchmarks" / "p" / "vllm_workload.sq"),
                              sets=sets, seed=seed, horizon=HORIZON, warmup=HORIZON / 10)
        client = json.loads(pyserq.run(prog).json())["client"]
        for k in orig:
            orig[k].append((client[k]["mean"], client[k]["ci"]))
    for k in fast:
        mf, cf = _pooled(fast[k])
        mo, co = _pooled(orig[k])
        tol = max(0.05 * mo, math.hypot(cf, co))
        assert abs(mf - mo) <= tol, f"{k}: serq_fast {mf:.5f} ± {cf:.5f} vs pyserq {mo:.5f} ± {co:.5f}"

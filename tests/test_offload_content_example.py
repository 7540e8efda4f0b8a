"""examples/multi-turn/offload_content.sq's header check: a `share content` host tier behind the
content-addressed KV cache of a vLLM engine (`spill` between two content pools, docs/content.md
§6) raises the prefix hit and lowers the TTFT of multi-turn sessions whose histories do not fit
the GPU, the load-back included. Fast engine, horizon 300, seed 1 (the header's numbers are for
2000)."""

from __future__ import annotations

import math
from pathlib import Path

from serq import api

PROGRAM = Path(__file__).resolve().parent.parent / "examples" / "multi-turn" / "offload_content.sq"


def observed(tier: int) -> tuple[dict, dict, dict]:
    r = api.load(str(PROGRAM), tier=tier).run(seed=1, horizon=300, records=False)
    return r.report["observe"], r.report["client"], {p["name"]: p for p in r.report["pools"]}


def test_the_content_tier_raises_the_hit_and_lowers_the_ttft():
    obs0, client0, pools0 = observed(0)
    obs1, client1, pools1 = observed(1)
    assert pools0["kv"]["spills"] == 0 and pools0["kv"]["tier_hits"] == 0
    assert pools1["kv"]["spills"] > 1000 and pools1["kv"]["tier_hits"] > 1000, pools1["kv"]
    for name in ("hit_tokens",):   # the 95 % CIs apart
        assert obs0[name]["mean"] + obs0[name]["ci"] < obs1[name]["mean"] - obs1[name]["ci"], (name, obs0[name], obs1[name])
    p0, p1 = obs0["prefill_tokens"], obs1["prefill_tokens"]
    assert p1["mean"] + p1["ci"] < p0["mean"] - p0["ci"], (p0, p1)
    # lower by more than the 95 % CI of the difference of two independent means
    t0, t1 = client0["ttft"], client1["ttft"]
    assert t0["mean"] - t1["mean"] > math.hypot(t0["ci"], t1["ci"]), (t0, t1)

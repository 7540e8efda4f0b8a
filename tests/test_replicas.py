"""examples/multi-turn/replicas.sq: the check its header states, at a small horizon. Four vLLM
replicas (an engine array, docs/language.md §6.1) serve the same multi-turn sessions under three
routers; the prefix-aware router, which keeps a session where its prefix is cached, hits the cache
on more turns and prefills fewer tokens than least-loaded routing, and least-loaded more than the
rotation, which moves every later turn to another replica."""

from __future__ import annotations

from pathlib import Path

import pytest

from serq import api

PROGRAM = Path(__file__).resolve().parent.parent / "examples" / "multi-turn" / "replicas.sq"


@pytest.fixture(scope="module")
def by_policy():
    """The `observe` summaries of one small run per policy, same seed and load."""
    out = {}
    for policy in (0, 1, 2):
        r = api.load(str(PROGRAM), policy=policy, Lambda=0.6).run(seed=1, horizon=20, records=False)
        out[policy] = r.report["observe"]
    return out


def test_prefix_aware_routing_hits_more_than_least_loaded_and_rotation(by_policy):
    hit = {p: by_policy[p]["hit"]["mean"] for p in by_policy}
    assert min(by_policy[p]["hit"]["count"] for p in by_policy) >= 40   # enough turns to compare
    assert hit[2] > hit[1] + 0.1 and hit[1] > hit[0] + 0.1, hit
    assert hit[2] > 0.75, hit    # near vllm.sq's p = 0.9 on one replica


def test_prefix_aware_routing_prefills_less(by_policy):
    pre = {p: by_policy[p]["prefill_tokens"]["mean"] for p in by_policy}
    assert pre[2] < pre[1] < pre[0], pre
    assert pre[2] < 0.5 * pre[0], pre

"""Offload tiers (`spill`, docs/language.md §11.8.1) in lockstep: the hand-derived vectors
`spill_load_back`, `spill_engine_load` (a spilling pool in an engine's `taking`), `spill_two_pools`
(a hold of two spilling pools), `spill_flow_link` (a link that flows cross) and `spill_content_tier`
(a content tier, docs/content.md §6), and a few random programs of each kind (plain, a vLLM
engine, its replicas with pool arrays, two spilling pools, flow-crossed links, content tiers under
an engine's `taking` and under holds) agree step by step; the seeded faults `spill_lost`,
`load_no_wait`, `engine_load_no_wait`, `loads_reversed` and `tier_touch_forward` (docs/fast.md
"Seeded faults") are caught on them. SERQ_SPILL_ENGINE_EXAMPLES sets how many random programs of each kind run (default 5)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

strategies = pytest.importorskip("strategies")

from hypothesis import HealthCheck, given, settings  # noqa: E402

from serq.frontend import compile_source, load_program  # noqa: E402
from serq_drt.lockstep import Divergence, compare_runs, lockstep  # noqa: E402

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "spec"
VECTOR = VECTORS / "spill_load_back"


def run_vector(d: Path = VECTOR) -> int:
    ir = load_program(str(d / "program.sq"), {})
    return compare_runs(ir, json.loads((d / "sessions.json").read_text()), d.name)


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


ENGINE_VECTOR = VECTORS / "spill_engine_load"


def test_engine_vector_agrees():
    assert run_vector(ENGINE_VECTOR) == 10


@pytest.mark.parametrize("fault", ["spill_lost", "load_no_wait", "engine_load_no_wait"])
def test_seeded_fault_is_caught_on_the_engine_vector(fault, monkeypatch):
    """`engine_load_no_wait` serves the request in the iteration that admitted it, as if its tier
    part were on kv already (docs/language.md §11.8.1 "Inside an engine's admission")."""
    monkeypatch.setenv("SERQ_FAST_FAULT", fault)
    with pytest.raises(Divergence):
        run_vector(ENGINE_VECTOR)


SPILL_ENGINE_EXAMPLES = int(os.environ.get("SERQ_SPILL_ENGINE_EXAMPLES", 5))


@settings(max_examples=SPILL_ENGINE_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.vllm_programs(spill=True))
def test_random_engine_spill_programs_agree(case):
    """vLLM-like engines (`taking reqs (1), kv (…) reserve (…)`, preemption, chunked prefill) whose
    KV pool spills to a host tier over a fifo, ps or delay link; every step compared."""
    ir = compile_source(case.text, case.name, {})
    assert ir["pools"][0]["spill"]["pool"] == 1
    lockstep(ir, case.seed, case.sessions, case.name)


@settings(max_examples=SPILL_ENGINE_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.vllm_programs(spill=True, replicas=True))
def test_random_replica_spill_programs_agree(case):
    """The same on 2 or 3 replicas behind a router: `pool kv[r]` spills member-wise to `host[r]`
    over one link they share or a link array (docs/language.md §11.8.1 on pool arrays)."""
    ir = compile_source(case.text, case.name, {})
    spills = [p["spill"] for p in ir["pools"] if "spill" in p]
    assert len(spills) >= 2 and len({s["pool"] for s in spills}) == len(spills)
    lockstep(ir, case.seed, case.sessions, case.name)


TWO_POOLS = VECTORS / "spill_two_pools"


def test_two_pool_vector_agrees():
    assert run_vector(TWO_POOLS) > 0


def test_seeded_fault_is_caught_on_the_two_pool_vector(monkeypatch):
    """`loads_reversed` loads emb's prefix back before kv's: the body starts at 10, not 11."""
    monkeypatch.setenv("SERQ_FAST_FAULT", "loads_reversed")
    with pytest.raises(Divergence):
        run_vector(TWO_POOLS)


@settings(max_examples=SPILL_ENGINE_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.two_spill_programs())
def test_random_two_pool_spill_programs_agree(case):
    """Holds of two spilling pools (kv over `link`, emb over `link2`, either first): their
    load-backs one after another in the hold's order (docs/language.md §11.8.1)."""
    ir = compile_source(case.text, case.name, {})
    assert "spill" in ir["pools"][0] and any(p["name"] == "emb" and "spill" in p for p in ir["pools"])
    lockstep(ir, case.seed, case.sessions, case.name)


def test_flow_link_vector_agrees():
    """vectors/spec/spill_flow_link: copies on a ps link beside a flow crossing it."""
    assert run_vector(VECTORS / "spill_flow_link") > 0


def test_seeded_fault_is_caught_on_the_flow_link_vector(monkeypatch):
    """`copy_unshared` leaves the copies off the flow-crossed link: the flow ends at 4, not 6."""
    monkeypatch.setenv("SERQ_FAST_FAULT", "copy_unshared")
    with pytest.raises(Divergence):
        run_vector(VECTORS / "spill_flow_link")


@settings(max_examples=SPILL_ENGINE_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.flow_spill_programs())
def test_random_flow_link_spill_programs_agree(case):
    """Spill links that runs over several stages cross (`share maxmin` or `bottleneck`): copies and
    load-backs divide the link with the flows (docs/language.md §11.8.1, §11.14)."""
    ir = compile_source(case.text, case.name, {})
    link = ir["pools"][0]["spill"]["stage"]
    assert any(ref["base"] == link for b in ir["blocks"] for st in b for ref in st.get("stages") or [])
    lockstep(ir, case.seed, case.sessions, case.name)


SPILL_KINDS = {"engine": lambda: strategies.vllm_programs(spill=True),
               "replicas": lambda: strategies.vllm_programs(spill=True, replicas=True),
               "two pools": strategies.two_spill_programs, "flow link": strategies.flow_spill_programs,
               # content tiers (docs/content.md §6), their default-run tests below
               "content engine": lambda: strategies.vllm_programs(content=True, spill=True),
               "content holds": lambda: strategies.content_spill_programs()}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SPILL_KINDS))
def test_many_random_spill_programs_agree(kind):
    """The larger run of each random kind above (100 programs; the counts measured once are in
    docs/fast.md's test table): opt in with -m slow."""
    @settings(max_examples=100, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(SPILL_KINDS[kind]())
    def agree(case):
        lockstep(compile_source(case.text, case.name, {}), case.seed, case.sessions, case.name)
    agree()


CONTENT_TIER = VECTORS / "spill_content_tier"


def test_content_tier_vector_agrees():
    """vectors/spec/spill_content_tier: `spill` between two `share content` pools (docs/content.md §6)."""
    assert run_vector(CONTENT_TIER) > 0


def test_seeded_fault_is_caught_on_the_content_tier_vector(monkeypatch):
    """`tier_touch_forward` refreshes the loaded blocks on the tier first block first: the tier
    would then evict a prefix's head before its tail (host's free queue at t = 5 differs)."""
    monkeypatch.setenv("SERQ_FAST_FAULT", "tier_touch_forward")
    with pytest.raises(Divergence):
        run_vector(CONTENT_TIER)


@settings(max_examples=SPILL_ENGINE_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.vllm_programs(content=True, spill=True))
def test_random_content_spill_programs_agree(case):
    """vLLM-like engines on a `share content` KV pool (a prefix tree, `reuse`) spilling to a
    content tier over a fifo, ps or delay link: evicted blocks move there, a lookup goes on into
    it and the request loads the tier's blocks back before it becomes a resident."""
    ir = compile_source(case.text, case.name, {})
    tier = ir["pools"][ir["pools"][0]["spill"]["pool"]]
    assert ir["pools"][0]["share"] == "content" and tier["share"] == "content"
    lockstep(ir, case.seed, case.sessions, case.name)



@settings(max_examples=SPILL_ENGINE_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.content_spill_programs())
def test_random_content_spill_hold_programs_agree(case):
    """Multi-turn holds on a `share content` KV pool grown by an engine's runs, whose prompts share
    a system prompt of a two-level prefix tree, spilling to a content tier (docs/content.md §6)."""
    ir = compile_source(case.text, case.name, {})
    assert ir["pools"][0]["share"] == "content" and ir["pools"][1]["share"] == "content"
    lockstep(ir, case.seed, case.sessions, case.name)


# A lockstep campaign's finding, minimised (docs/env.md, docs/fast.md "Float time"): `when (age <
# 3)` on a chunk released at 2/10 + 9/10 and evicted at 41/10. Its age is exactly 3, so serq_spec
# drops the chunk; the fast engine's times are 1.1000000000000001 and 4.1, their difference
# 2.9999999999999996, and it spills the chunk. A tie of a time difference with a constant is
# below the fast engine's float resolution: the generator's condition is `age < 29/10`.
AGE_TIE = """\
fn main() {
  pool kv { cap 2; block 2; evict lru; spill host via link (1) when (age < 3); }
  pool host { cap 2; block 2; }
  stage link : fifo;
  stage work : delay;
  workload { arrive batch(2); session { turn; } }
  server {
    branch (serial == 0) { run work (2/10); hold kv (2) { run work (9/10); } cache (2); }
    branch (serial == 1) { tool (41/10); hold kv (2) { run work (1); } }
  }
}
"""
AGE_TIE_SESSIONS = {"arrivals": [], "format": "serq-sessions/1", "inputs": {}, "machine": [], "program": "age_tie.sq",
                    "seed": 0, "sessions": [{"init": [], "serial": k, "session": [], "turns": [[]]} for k in (0, 1)],
                    "trace_picks": []}


def test_age_tie_is_not_below_in_the_spec():
    """The exact rule: at t = 41/10 the chunk's age is 41/10 - 11/10 = 3, not below 3: evicted and
    dropped (no spill, nothing on host)."""
    from serq_drt.lockstep import spec_lines
    lines = [json.loads(t) for t in spec_lines(compile_source(AGE_TIE, "age_tie.sq", {}), AGE_TIE_SESSIONS)]
    at = next(d for d in lines if d["now"] == "41/10" and d["records"]["evicted"])
    assert at["records"]["evicted"] == [[0, "kv", 2]]
    assert at["pools"][0]["spills"] == 0 and at["pools"][1]["entries"] == []


@pytest.mark.xfail(strict=True, raises=Divergence, reason="docs/fast.md 'Float time': an age that ties the "
                   "`when` constant exactly is decided by the fast engine's float rounding")
def test_age_tie_agrees():
    compare_runs(compile_source(AGE_TIE, "age_tie.sq", {}), AGE_TIE_SESSIONS, "age_tie.sq")

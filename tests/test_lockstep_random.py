"""Lockstep of serq_spec and serq_fast on random small programs (tests/strategies.py).

Default profile: 200 derandomised programs (+20 every step, +50 of `scope_programs`, +50 `share content`,
+20 speculating (docs/language.md §7.3), +10 speculating with drawn acceptance counts, +50 `lag 1`, +50 under poisson, renewal and closed arrivals, +20 with claims, +50 with fork/join, +50 on
engine arrays, +50 with runs over several stages, +50 reading the online estimates of stages, +50 of engines, +8 with estimates in times, +25 `share content` pools leased or `reserve held`, +50 with `transfer`, +20 with queues,
+20 of K's step stage with an `iteration { … }` block, alone or as an array, +25 speculating `lag 1` engines).
Long profile (documented in docs/fast.md):
`SERQ_LOCKSTEP_PROFILE=long python -m pytest tests/test_lockstep_random.py` runs 10,000 programs
(set SERQ_LOCKSTEP_EXAMPLES to choose another count).
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("serq_spec.step")
strategies = pytest.importorskip("strategies")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from serq.frontend import compile_source  # noqa: E402
from serq_drt.lockstep import lockstep  # noqa: E402

LONG = os.environ.get("SERQ_LOCKSTEP_PROFILE") == "long"
EXAMPLES = int(os.environ.get("SERQ_LOCKSTEP_EXAMPLES", 10_000 if LONG else 200))

PROGRAMS = st.one_of(*[getattr(strategies, name)() for name in
                       ("vllm_programs", "queue_programs", "routing_programs") if hasattr(strategies, name)])


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(PROGRAMS)
def test_random_programs_agree(case):
    ir = compile_source(case.text, case.name, {})
    lockstep(ir, case.seed, case.sessions, case.name)


@settings(max_examples=max(20, EXAMPLES // 10), deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.vllm_programs())
def test_random_programs_agree_every_step(case):
    """The same without the decode fast-forward: every step compared."""
    os.environ["SERQ_FAST_NO_FF"] = "1"
    try:
        ir = compile_source(case.text, case.name, {})
        lockstep(ir, case.seed, case.sessions, case.name)
    finally:
        del os.environ["SERQ_FAST_NO_FF"]


@settings(max_examples=max(20, EXAMPLES // 4), deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.scope_programs())
def test_random_scope_programs_agree(case):
    """Plain runs on engines, two engines sharing a memory pool, non-whole pool amounts, victims in
    fifo / ps stages, a consumed prefix above the units (docs/spec.md "Ambiguities resolved"); a
    separate strategy, so the draws of the others stay as they were."""
    ir = compile_source(case.text, case.name, {})
    lockstep(ir, case.seed, case.sessions, case.name)


CONTENT_EXAMPLES = max(20, EXAMPLES // 4)


@settings(max_examples=CONTENT_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.vllm_programs(content=True), st.booleans())
def test_random_content_programs_agree(case, every_step):
    """`share content` pools (docs/content.md) with a two-level prefix tree, with and without the
    decode fast-forward."""
    if every_step:
        os.environ["SERQ_FAST_NO_FF"] = "1"
    try:
        ir = compile_source(case.text, case.name, {})
        lockstep(ir, case.seed, case.sessions, case.name)
    finally:
        os.environ.pop("SERQ_FAST_NO_FF", None)


SPECULATE_EXAMPLES = max(20, EXAMPLES // 10)


@settings(max_examples=SPECULATE_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.booleans().flatmap(lambda content: strategies.vllm_programs(content=content, speculate=True)))
def test_random_speculating_programs_agree(case):
    """Speculating engines (docs/language.md §7.3: drafting slots, lookahead, a limit, decode
    drafts, a prefill's placeholder drafts), with and without `share content`. Such an engine is
    never fast-forwarded, so every step is compared."""
    ir = compile_source(case.text, case.name, {})
    lockstep(ir, case.seed, case.sessions, case.name)


ACCEPT_EXAMPLES = max(10, EXAMPLES // 20)


@settings(max_examples=ACCEPT_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.tuples(st.booleans(), st.booleans()).flatmap(
    lambda c_l: strategies.vllm_programs(content=c_l[0], lag=c_l[1], speculate=True, accept=True)))
def test_random_accepting_programs_agree(case):
    """Speculating engines whose turns draw their acceptance counts (`accept (n, alpha);`,
    docs/language.md §7.3), so decodes keep drafts, under `lag 0` and `lag 1` (a pending step
    that ended its run through accepted drafts), with and without `share content`. Seeded: the
    fast engine's counts reversed (`_draw_accept`) fails."""
    ir = compile_source(case.text, case.name, {})
    lockstep(ir, case.seed, case.sessions, case.name)


LAG_EXAMPLES = max(20, EXAMPLES // 4)


@settings(max_examples=LAG_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.booleans().flatmap(lambda content: strategies.vllm_programs(content=content, lag=True)))
def test_random_lag_programs_agree(case):
    """`lag 1` engines (docs/async.md), with and without `share content`, their requests ending by
    length or by EOS (`eos (…)`: always, never, by the output length, by a draw). A lag engine is
    never fast-forwarded, so every step is compared."""
    ir = compile_source(case.text, case.name, {})
    lockstep(ir, case.seed, case.sessions, case.name)


ARRIVAL_EXAMPLES = max(20, EXAMPLES // 4)


@settings(max_examples=ARRIVAL_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.one_of(strategies.vllm_programs(arrivals=True),
                 st.booleans().flatmap(lambda content: strategies.vllm_programs(content=content, lag=True,
                                                                                arrivals=True)),
                 strategies.queue_programs(arrivals=True)))
def test_random_arrival_processes_agree(case):
    """The programs above under `poisson`, `renewal` and `closed(n)` arrivals (a new session at each end) instead of `batch`; a separate strategy
    option, so the draws of the others stay as they were."""
    ir = compile_source(case.text, case.name, {})
    lockstep(ir, case.seed, case.sessions, case.name)


LEASE_EXAMPLES = max(20, EXAMPLES // 4)


@settings(max_examples=LEASE_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.booleans(), st.booleans().flatmap(lambda arrivals: strategies.vllm_programs(arrivals=arrivals, lease=True)))
def test_random_lease_programs_agree(every_step, case):
    """`lease kv (t)` on the request (docs/language.md §11.4), released before the session's next call
    or right after the call, with and without the decode fast-forward, under batch and open or
    closed arrivals."""
    if every_step:
        os.environ["SERQ_FAST_NO_FF"] = "1"
    try:
        ir = compile_source(case.text, case.name, {})
        lockstep(ir, case.seed, case.sessions, case.name)
    finally:
        os.environ.pop("SERQ_FAST_NO_FF", None)


CLAIM_EXAMPLES = max(20, EXAMPLES // 10)


@settings(max_examples=CLAIM_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.booleans().flatmap(lambda content: strategies.vllm_programs(content=content, claims=True)))
def test_random_claim_programs_agree(case):
    """Iteration and `at end` claims (docs/language.md §11.9): their tallies are in every state line
    (docs/state.md), so both engines must count the same iterations, checked and held points."""
    ir = compile_source(case.text, case.name, {})
    lockstep(ir, case.seed, case.sessions, case.name)


FORK_EXAMPLES = max(20, EXAMPLES // 4)


@settings(max_examples=FORK_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.fork_programs())
def test_random_fork_programs_agree(case):
    """Agent turns with `fork`/`join;` (docs/language.md §11.13): branches with tool calls, fifo and
    ps runs, draws, shared attributes, loops and nested forks, the parent's own work before the
    join, an engine request after it or not, under batch, open and closed arrivals."""
    ir = compile_source(case.text, case.name, {})
    lockstep(ir, case.seed, case.sessions, case.name)


@settings(max_examples=max(20, EXAMPLES // 4), deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.tuples(st.sampled_from(["", "content", "lease"]), st.booleans()).flatmap(
    lambda f: strategies.vllm_programs(content=f[0] == "content", lag=f[1], lease=f[0] == "lease", replicas=True)))
def test_random_replica_programs_agree(case):
    """2 or 3 replicas of the vLLM fragment (`device acc[R]`, `engine eng[R] on acc[j]`, pools on
    the members, docs/language.md §6.1) behind a round-robin, least-loaded, prefix-aware or random
    router, with `share content` or a lease (one at a time; `test_random_content_pin_programs_agree`
    leases content pools), with or without `lag 1`."""
    ir = compile_source(case.text, case.name, {})
    assert len([s for s in ir["stages"] if s["kind"] == "step"]) in (2, 3)
    lockstep(ir, case.seed, case.sessions, case.name)


@settings(max_examples=max(20, EXAMPLES // 8), deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.content_pin_programs())
def test_random_content_pin_programs_agree(case):
    """A `share content` KV pool whose requests lease their blocks past the request, or whose
    pool is `reserve held`, or both (docs/content.md §3): the blocks' reference counts, the free
    queue and the admissions the reservations hold back agree at every step."""
    ir = compile_source(case.text, case.name, {})
    lockstep(ir, case.seed, case.sessions, case.name)


ESTIMATE_EXAMPLES = max(20, EXAMPLES // 4)


@settings(max_examples=ESTIMATE_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.estimator_programs())
def test_random_estimator_programs_agree(case):
    """The online estimators (docs/language.md §4.4) on fifo, ps and delay stages, read in keys,
    a hold header, gauges and branches: the state line's `est` (docs/state.md)
    and everything they steer agree at every step."""
    ir = compile_source(case.text, case.name, {})
    lockstep(ir, case.seed, case.sessions, case.name)


@settings(max_examples=ESTIMATE_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.engine_estimator_programs())
def test_random_engine_estimator_programs_agree(case):
    """The online estimates of an engine (docs/language.md §4.4) read in the server, gauges, the
    admission guard and a queue key: the engine's `est` (docs/state.md) and everything it
    steers agree at every step; the engine is never fast-forwarded (docs/fast.md)."""
    ir = compile_source(case.text, case.name, {})
    assert any(s["kind"] == "step" and s.get("estimates") for s in ir["stages"])
    lockstep(ir, case.seed, case.sessions, case.name)


@settings(max_examples=max(8, EXAMPLES // 25), deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.feedback_estimator_programs())
def test_random_feedback_estimator_programs_agree(case):
    """Estimates read in times (a run's work, a ps capacity, an engine's `execute`): on the grid of
    2^-32 the exact engine's numbers stay bounded and the two engines agree at every step
    (docs/spec.md "Online estimates")."""
    ir = compile_source(case.text, case.name, {})
    lockstep(ir, case.seed, case.sessions, case.name)


FLOW_EXAMPLES = max(20, EXAMPLES // 4)


@settings(max_examples=FLOW_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.flow_programs())
def test_random_flow_programs_agree(case):
    """Runs over several ps stages (docs/language.md §11.14) among one-stage runs, under `share
    maxmin`, `share bottleneck` or the default, in a fork's branch, with holders preempted inside a
    flow: the rates and remaining work of the state line (docs/state.md) agree at every step."""
    ir = compile_source(case.text, case.name, {})
    lockstep(ir, case.seed, case.sessions, case.name)


TRANSFER_EXAMPLES = max(20, EXAMPLES // 4)


@settings(max_examples=TRANSFER_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.transfer_programs())
def test_random_transfer_programs_agree(case):
    """Prefill/decode disaggregation with `transfer` (docs/language.md §11.15): a lease or a hold of
    the source, 1 or 2 prefill and decode engines, links of every kind, a copy over two ps links at
    once (a flow), n = p or less."""
    ir = compile_source(case.text, case.name, {})
    assert any(st["op"] == "transfer" for b in ir["blocks"] for st in b)
    lockstep(ir, case.seed, case.sessions, case.name)


SPILL_EXAMPLES = max(20, EXAMPLES // 4)


@settings(max_examples=SPILL_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.booleans().flatmap(lambda arrivals: strategies.spill_programs(arrivals=arrivals)))
def test_random_spill_programs_agree(case):
    """Offload tiers (`spill`, docs/language.md §11.8.1): evicted KV blocks spilled to a host tier
    (and on to a disk tier), copies queued on fifo, ps or delay links, hits loaded back before the
    body, under batch, open and closed arrivals; every step compared (a program with `spill` is
    never fast-forwarded)."""
    ir = compile_source(case.text, case.name, {})
    lockstep(ir, case.seed, case.sessions, case.name)


LAG_SPECULATE_EXAMPLES = max(10, EXAMPLES // 8)


@settings(max_examples=LAG_SPECULATE_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.booleans().flatmap(lambda content: strategies.vllm_programs(content=content, lag=True,
                                                                       speculate=True)))
def test_random_lag_speculating_programs_agree(case):
    """Speculating `lag 1` engines (docs/async.md §8): each step's rejected drafts are given back,
    and its verified blocks identified, only after the next schedule; an empty schedule that
    settled such outcomes is tried again at once. With no trace every draft is rejected (the
    wasted step after accepted drafts is checked on vLLM scenarios, tests/test_oracle_model.py)."""
    ir = compile_source(case.text, case.name, {})
    lockstep(ir, case.seed, case.sessions, case.name)


K_STEP_EXAMPLES = max(20, EXAMPLES // 10)


@settings(max_examples=K_STEP_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.k_step_programs())
def test_random_k_step_programs_agree(case):
    """K's step stage (docs/language.md §16) with an `iteration { … }` block whose registers the
    cost, the serve keys and the budget read, alone or as an array behind `choose`: read as its S
    engine, it agrees at every compared step (the registers are in the state line, docs/state.md)."""
    ir = compile_source(case.text, case.name, {})
    assert all(s["kind"] == "step" and s["registers"] for s in ir["stages"] if s["name"].startswith("eng"))
    lockstep(ir, case.seed, case.sessions, case.name)


QUEUE_EXAMPLES = max(10, EXAMPLES // 10)


@settings(max_examples=QUEUE_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
          suppress_health_check=list(HealthCheck))
@given(strategies.pd_queue_programs())
def test_random_pd_queue_programs_agree(case):
    """Prefill/decode disaggregation written with queues (docs/language.md §11.16): prefill, decode or
    agg and link queue arrays, entries called with `from`, directly or through a second entry; the
    lowered program runs in lockstep like any other."""
    ir = compile_source(case.text, case.name, {})
    assert any(st["op"] == "transfer" for b in ir["blocks"] for st in b)
    lockstep(ir, case.seed, case.sessions, case.name)

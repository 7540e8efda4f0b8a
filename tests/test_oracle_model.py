"""serQ's vLLM model (`serq oracle run`, python/serq_vllm/) against the committed vLLM
traces under the oracle comparison rule (docs/oracle.md; docs/vllm-model.md).

No vLLM needed: the reference traces are committed in vectors/vllm/. Every committed vector is
run on the default engine (serq_fast; serq_spec for async scheduling, `lag 1`): a
vector the model supports must agree exactly; one it does not support must be refused with `Unsupported` naming a known feature. The five shipped
scenarios are also run on the exact spec. A seeded fault (the seed's admission allocation, which
leaves the threshold out) must make `caps` diverge.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

from serq_vllm.compare import compare_traces, load_trace, vector_trace_path  # noqa: E402
from serq_vllm.encode import program_path  # noqa: E402
from serq_vllm.model import run_scenario  # noqa: E402
from serq_vllm.plan import FEATURES, Unsupported, plan_scenario  # noqa: E402
from serq_vllm.scenario import load_scenario  # noqa: E402

VECTORS = REPO / "vectors" / "vllm"
SHIPPED = ["caps", "longchunk", "multiturn", "preempt", "reserve"]
ALL = sorted(p.name[: -len(".scenario.json")] for p in VECTORS.glob("*.scenario.json"))

#: The vectors the model supports today and that agree exactly (measured: docs/vllm-model.md).
#: A change that makes one of them unsupported or divergent fails `test_vector`; this floor
#: catches a change that silently refuses more of them.
MIN_AGREE = 603


def _run(name: str, engine: str = "auto", **kw) -> dict:
    return run_scenario(load_scenario(VECTORS / f"{name}.scenario.json"), engine, **kw)


def _diffs(name: str, trace: dict) -> list:
    return compare_traces(trace, load_trace(vector_trace_path(VECTORS, name)), limit=3)


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("engine", ["auto", "spec"])
def test_shipped_scenarios_agree(name, engine):
    diffs = _diffs(name, _run(name, engine))
    assert not diffs, f"{name} ({engine}): " + "; ".join(d.describe("serQ", "vLLM") for d in diffs)


_results: dict[str, str] = {}


@pytest.mark.parametrize("name", ALL)
def test_vector(name):
    """Supported -> agrees exactly; unsupported -> refused naming a known feature."""
    try:
        trace = _run(name)
    except Unsupported as exc:
        assert exc.needs and all(f in FEATURES for f, _ in exc.needs), exc
        assert FEATURES[exc.feature] in str(exc)
        _results[name] = "refused"
        return
    diffs = _diffs(name, trace)
    _results[name] = "diverge" if diffs else "agree"
    assert not diffs, f"{name}: " + "; ".join(d.describe("serQ", "vLLM") for d in diffs)


def test_agreement_floor():
    if len(_results) < len(ALL):  # run alone (-k): fill in
        for name in ALL:
            if name not in _results:
                try:
                    test_vector(name)
                except AssertionError:
                    _results[name] = "diverge"
    agree = sum(1 for v in _results.values() if v == "agree")
    assert agree >= MIN_AGREE, f"only {agree} vectors agree (expected >= {MIN_AGREE})"


#: speculative decoding (docs/vllm-model.md §5.6): modelled on synchronous scenarios, refused
#: under async scheduling (`spec-async`)
SPECULATIVE = [n for n in ALL if load_scenario(VECTORS / f"{n}.scenario.json").speculative]
ASYNC_SPECULATIVE = [n for n in SPECULATIVE
                     if load_scenario(VECTORS / f"{n}.scenario.json").config["async_scheduling"]]


def test_async_speculative_vectors_are_refused():
    """Every async speculative vector is refused naming `spec-async`; no synchronous one is
    refused before a run (test_vector runs them: each agrees)."""
    assert len(SPECULATIVE) >= 56 and len(ASYNC_SPECULATIVE) >= 16
    for name in SPECULATIVE:
        sc = load_scenario(VECTORS / f"{name}.scenario.json")
        if name in ASYNC_SPECULATIVE:
            with pytest.raises(Unsupported) as info:
                plan_scenario(sc)
            assert info.value.feature == "spec-async", name
        else:
            assert plan_scenario(sc).speculative, name


def test_forced_async_speculative_vector_diverges():
    """What the refusal guards: forced, `h_spec_async` runs synchronously with its drafts ignored
    (one token per decode step), and diverges from vLLM's trace."""
    assert _diffs("h_spec_async", _run("h_spec_async", force=True))


#: Seeded faults of the speculative rules (docs/vllm-model.md §5.6), one program edit each (in
#: every program that has the text): the vector named diverges at that step.
SPEC_FAULTS = [
    # rule 1: a decode step of 1 + k tokens
    ("drafts-off", "h_spec_reject", "speculate (drafts);", "speculate (0);", 1),
    # rule 1: the chunk keeps max_model_len - 1 - computed room
    ("no-limit", "h_spec_finish_mid", "speculate (draft_slots, lookahead, max_len);",
     "speculate (draft_slots, lookahead, inf);", 3),
    # rule 2: lookahead units on every growth, and in the admission's allocation
    ("no-lookahead-growth", "h_spec_lookahead_preempt", "speculate (draft_slots, lookahead, max_len);",
     "speculate (draft_slots, 0, max_len);", 1),
    ("no-lookahead-admission", "h_spec_lookahead_wait", ") + lookahead, max_len)", ") + 0, max_len)", 1),
    # rule 3: a draft model's slot per scheduled request
    ("no-draft-slot", "c50000_00014", "speculate (draft_slots, lookahead, max_len);",
     "speculate (0, lookahead, max_len);", 1),
    # rule 5: padding at admission, and its three conditions
    ("no-padding", "h_spec_prefix", "speculate (padding);", "speculate (0);", 3),
    ("pad-budget-ignored", "h_spec_pad_budget", "|| 1 + pad > budget_left(vllm)", "|| 0 > 1", 4),
    ("pad-without-running-request", "h_spec_pad_alone", "(running_served(vllm) > 0 ||", "(1 > 0 ||", 0),
    ("pad-beside-prefill-chunk", "c50000_00047", "running_chunks(vllm) == 0", "1 > 0", 66),
]


@pytest.mark.parametrize("name, good, bad, step", [f[1:] for f in SPEC_FAULTS], ids=[f[0] for f in SPEC_FAULTS])
def test_seeded_speculative_faults_diverge(name, good, bad, step):
    sources = {}
    for priority, hold in ((False, False), (False, True), (True, True)):
        text = program_path(priority, hold).read_text()
        if good in text:
            sources[program_path(priority, hold).name] = text.replace(good, bad)
    assert sources, good
    diffs = _diffs(name, _run(name, sources=sources))
    assert diffs and diffs[0].step == step, diffs


def _no_give_back(cfg, job, a):
    """serq_spec.engine.verified without the give-back: the rejected drafts keep their positions."""
    from serq_spec.engine import thread
    if job.mode != "decode":
        return min(a.tokens, job.left)
    counts = thread(cfg, job.serial).accept or []
    k = len(counts) - job.left
    return min(1 + (min(counts[k], a.tokens - 1) if 0 <= k < len(counts) else 0), job.left)


@pytest.mark.parametrize("fault, name, step", [("no-give-back", "h_spec_budget_trim", 3),
                                               ("drafts-cached", "h_spec_prefix", 7),
                                               ("nothing-accepted", "h_spec_reject", 5)])
def test_seeded_speculative_engine_faults_diverge(fault, name, step, monkeypatch):
    """Rule 4 (rejected drafts give their positions back; the acceptance counts decide), and
    only verified tokens identify blocks: each broken in serq_spec makes its vector diverge."""
    import serq_spec.engine as spec_engine
    import serq_vllm.encode as encode
    if fault == "no-give-back":
        monkeypatch.setattr(spec_engine, "verified", _no_give_back)
    elif fault == "drafts-cached":
        monkeypatch.setattr(spec_engine, "verified_upto", lambda job, pos_before, tokens: pos_before + tokens)
    else:
        monkeypatch.setattr(encode, "acceptance", lambda plan, turn: [0] * turn.out)
    diffs = _diffs(name, _run(name, "spec"))
    assert diffs and diffs[0].step == step, diffs


@pytest.mark.skipif(not os.environ.get("SERQ_ORACLE_MODEL_SPEC_ALL"),
                    reason="set SERQ_ORACLE_MODEL_SPEC_ALL=1 to run every supported vector on serq_spec")
@pytest.mark.parametrize("name", ALL)
def test_vector_spec(name):
    try:
        trace = _run(name, "spec")
    except Unsupported:
        return
    assert not _diffs(name, trace)


def test_forked_conversation_is_shared_by_content():
    """Two requests continuing one conversation (h_fork_two_continuations: b and c both continue
    a) cannot be one history, whose blocks would get one identity for two contents. Each request
    of the conversation takes part in the prefix tree with its prompt and output and has a
    history of its own: a's whole sequence (9 + 3 tokens) is a node that b and c extend, and a's
    own output blocks lie inside it (docs/vllm-model.md §2). A linear conversation keeps one
    history. The traces of the three h_fork_* vectors agree with vLLM (test_vector)."""
    from serq_vllm.plan import content_plan, request_tokens

    sc = load_scenario(VECTORS / "h_fork_two_continuations.scenario.json")
    plan = content_plan(sc, request_tokens(sc))
    (pa, na, ha), (pb, nb, hb), (pc, nc, hc) = (plan.content[r] for r in "abc")
    assert len({ha, hb, hc}) == 3
    assert na == 12 and pb == pc == pa and nb == nc == 12
    assert [(tot) for _k, _ln, _after, tot in plan.prefixes] == [12]
    linear = load_scenario(VECTORS / "multiturn.scenario.json")
    lplan = content_plan(linear, request_tokens(linear))
    by_root = {}
    for r in linear.requests:
        root = r.id
        while linear.request(root).prompt_from is not None:
            root = linear.request(root).prompt_from
        by_root.setdefault(root, set()).add(lplan.content[r.id])
    assert all(len(v) == 1 for v in by_root.values())


def test_prompt_of_max_model_len_is_a_bad_scenario():
    """vLLM's input processor rejects a prompt of max_model_len tokens or more (no room for one
    output token), so such a scenario is no vLLM workload: it is refused when it is read, naming
    the request, by the model and the driver alike; a prompt + output above max_model_len only
    ends the output there (the c20000 vectors)."""
    from serq_vllm.scenario import ScenarioError, resolve_scenario

    sc = {"name": "mml", "config": {"block_size": 4, "num_gpu_blocks": 64, "max_model_len": 40},
          "requests": [{"id": "a", "prompt_len": 30, "max_tokens": 20},
                       {"id": "b", "prompt_len": 40, "max_tokens": 2}]}
    with pytest.raises(ScenarioError) as exc:
        resolve_scenario(sc)
    assert exc.value.path == "requests[1].prompt_len" and "max_model_len (40)" in str(exc.value)
    sc["requests"][1]["prompt_len"] = 39  # one token of room: accepted
    resolve_scenario(sc)
    # a continuation reaches it through its source's prompt and (capped) output: 30 + 10 + 1
    sc["requests"][1] = {"id": "b", "after": "a", "prompt_from": "a", "append_len": 1}
    with pytest.raises(ScenarioError) as exc:
        resolve_scenario(sc)
    assert exc.value.path == "requests[1].prompt_len" and "'a'" in str(exc.value)
    sc["requests"].pop()
    trace = run_scenario(resolve_scenario(sc))
    assert trace["requests"]["a"]["output_len"] == 10
    assert trace["requests"]["a"]["finish_reason"] == "length"


def test_fanout_history_in_another_session_is_shared_by_content():
    """b continues g's conversation but is placed in a session of its own (its sibling a
    continues p in p's session): the conversation cannot be one session's history, so it is
    shared through tree nodes (agreement with vLLM: h_fork_across_sessions in test_vector; b hits
    8 tokens of g's). Caching off, histories do not matter."""
    trace = _run("h_fork_across_sessions")
    assert trace["requests"]["b"]["cached_tokens_at_admission"] == 8
    assert not _diffs("h_fork_across_sessions", trace)
    sc = json.loads((VECTORS / "h_fork_across_sessions.scenario.json").read_text())
    sc["config"]["enable_prefix_caching"] = False
    from serq_vllm.scenario import resolve_scenario

    trace = run_scenario(resolve_scenario(sc))
    assert trace["requests"]["b"]["arrival_step"] == trace["requests"]["a"]["arrival_step"]


def test_async_idle_request_sits_out_only_the_empty_call():
    """Async: p's end is applied by an empty schedule() at step 3, and vLLM adds both children
    after it (h_async_idle_fanout). Only the session's own child waits for that call by itself;
    the other carries the idle flag, which keeps it out of that call only: when the budget leaves
    it waiting it is admitted at step 4 beside a (vLLM, measured: +a:16 at step 3, +b:15 at step
    4), not once nothing runs (the flag's old rule, seeded below: step 7). Budget 32: both at
    step 3 in vLLM and in the model (measured: the traces agree)."""
    from serq_vllm.scenario import resolve_scenario

    sc = json.loads((VECTORS / "h_async_idle_fanout.scenario.json").read_text())
    trace = run_scenario(resolve_scenario(sc))
    assert [(s["step"], [(a["id"], a["tokens"]) for a in s["scheduled"]])
            for s in trace["steps"] if s["step"] in (3, 4)] == [(3, [("a", 16)]),
                                                                 (4, [("a", 1), ("b", 15)])]
    assert not _diffs("h_async_idle_fanout", trace)
    text = _async_program()
    old = text.replace("|| sched_at > added_at", "")
    assert old != text
    trace = run_scenario(resolve_scenario(sc), sources={program_path(False, hold=True).name: old})
    assert trace["requests"]["b"]["first_scheduled_step"] == 7
    sc["config"]["max_num_batched_tokens"] = 32  # both fit the step they are added in
    trace = run_scenario(resolve_scenario(sc))
    assert trace["requests"]["b"]["first_scheduled_step"] == trace["requests"]["a"]["arrival_step"]


@pytest.mark.parametrize("name", ["h_mixed_priority", "c30000_00238", "c31000_00221"])
def test_priority_key_of_a_request_added_after_its_arrival_time(name):
    """Mixed arrivals under priority: a request with arrival_time that its arrival_step adds
    later is keyed by vLLM with that arrival_time, not its add time; the program takes it from
    the trace row (tk). h_mixed_priority: `e` (arrival_time 0.05, arrival_step 9) is added at
    step 9 with `b.2` and vLLM schedules it first; c30000_00238 (r7 at step 94) and c31000_00221
    (r2 at step 159) diverge with the key `now` (measured: docs/vllm-model.md §2)."""
    assert not _diffs(name, _run(name))
    assert not _diffs(name, _run(name, "spec"))
    src = program_path(True).read_text(encoding="utf-8")
    bad = src.replace("set t0 = tk > 0 ? (tk - 1) / tscale : now;", "set t0 = now;")
    assert bad != src
    assert _diffs(name, _run(name, sources={"vllm_scenario_priority.sq": bad}))


def test_mixed_arrivals_key_beyond_binary64_is_refused():
    """The packed trace key must stay an exact binary64 integer (< 2^53) for serq_fast to unpack
    it: an arrival_time with 11 decimals beside 100 priorities is refused, naming the request; FCFS
    does not pack it and runs."""
    from serq_vllm.scenario import resolve_scenario

    sc = {"name": "fine", "config": {"block_size": 8, "num_gpu_blocks": 40, "max_num_seqs": 4,
                                     "max_num_batched_tokens": 32, "policy": "priority"},
          "requests": [{"id": "a", "prompt_len": 40, "max_tokens": 6, "arrival_time": 0.0},
                       {"id": "b", "prompt_len": 20, "max_tokens": 5, "arrival_time": 0.01,
                        "priority": 99},
                       {"id": "e", "prompt_len": 25, "max_tokens": 8,
                        "arrival_time": 1234.56789012345, "arrival_step": 3}]}
    with pytest.raises(Unsupported) as exc:
        run_scenario(resolve_scenario(sc))
    assert exc.value.feature == "mixed-arrivals" and "'e'" in exc.value.detail
    sc["config"]["policy"] = "fcfs"
    assert run_scenario(resolve_scenario(sc))["requests"]["e"]["finish_step"] is not None


@pytest.mark.parametrize("name", ["h_async_multiturn", "h_async_reserve", "r0084", "r0012",
                                  "r0024", "r0050", "r0053", "r0147"])
def test_async_vectors_are_supported(name):
    """Async scheduling (`lag 1`, the EOS token; r0012 under the priority policy; r0053, r0147 on
    a seconds clock) and the watermark (r0024, r0050, r0147)."""
    assert not _diffs(name, _run(name))


def test_priority_vectors_are_supported():
    """The priority policy is expressed with queue by / preempt by (docs/language.md §12.1 rule 4)."""
    trace = _run("h_priority_ties")
    assert not _diffs("h_priority_ties", trace)


# ------------------------------------------------------------------ seeded fault


def test_seeded_fault_seed_allocation_diverges_on_caps():
    """The seed's admission amount `min(known, reused + budget_left)` (docs/language.md §7.1)
    over-allocates when the threshold binds: caps diverges in free_blocks_after_schedule."""
    text = program_path(False).read_text()
    good = "kv (min(min(known + pad, avail + min(lim, budget_left(vllm)))"
    assert good in text
    faulty = text.replace(good, "kv (min(min(known + pad, avail + budget_left(vllm))")
    trace = _run("caps", sources={"vllm_scenario.sq": faulty})
    diffs = _diffs("caps", trace)
    assert diffs, "the seeded fault went unnoticed"
    d = diffs[0]
    assert d.kind == "step" and d.step == 0 and d.field == "free_blocks_after_schedule"
    assert (d.a, d.b) == (242, 249)  # docs/language.md §7.1: the seed takes 8 + 5 blocks, vLLM 3 + 3


def _tail_requeue_program() -> str:
    # FCFS victims re-entering the waiting queue by their keys (tail) instead of at its head
    return program_path(False).read_text().replace(
        "preempt lifo;", "preempt by (-admission) requeue tail;")


@pytest.mark.parametrize(
    "name, good, bad, step",
    [
        # the threshold binds only while running + waiting > 1 (a lone request takes the budget)
        ("r0014", "let lim = running.count + waiting.count > 1\n        ? max(threshold,",
         "let lim = 1 > 0\n        ? max(threshold,", 0),
        # the adaptive threshold's floor, budget // (running + waiting)
        ("h_adaptive_threshold", "adaptive * floor(budget / (running.count + waiting.count))",
         "adaptive * 0", 0),
        # requests of different conversations share the blocks of their common prompt prefix
        ("h_prefix_groups", "content (pk, pn, hist)", "content (0, 0, hist)", 1),
        ("h_explicit_ids", "content (pk, pn, hist)", "content (0, 0, hist)", 1),
    ],
    ids=["threshold-always", "adaptive-floor-off", "no-shared-prefix-groups",
         "no-shared-explicit-ids"],
)
def test_more_seeded_faults_diverge(name, good, bad, step):
    text = program_path(False).read_text()
    assert good in text
    diffs = _diffs(name, _run(name, sources={"vllm_scenario.sq": text.replace(good, bad)}))
    assert diffs and diffs[0].step == step, diffs


def test_fast_agrees_with_spec_on_tail_requeue():
    """Found by this model: serq_fast admitted a tail-requeued hold twice under `queue by`
    (fixed in b2600b2; docs/vllm-model.md §6)."""
    ours = _run("preempt", "fast", sources={"vllm_scenario.sq": _tail_requeue_program()})
    spec = _run("preempt", "spec", sources={"vllm_scenario.sq": _tail_requeue_program()})
    assert not compare_traces(ours, spec, limit=1)


# ------------------------------------------------------------------ differential campaign findings
# Scenarios of tools/vllm_oracle/campaign.py (seeds 2000, 3000) on which the model diverged or
# failed before the fix named in docs/vllm-model.md §4.1; each also runs on the exact spec here.

CAMPAIGN_FINDINGS = {
    # async: the call after a finish preempted while the finished request still held its blocks
    "c2000_00009": "preempt-only call after an async finish",
    # async, seconds clock: the engine idled after a finish (vLLM's next call was empty)
    "c2000_00124": "idle after an async finish on a seconds clock",
    # async: a preemption in decode keeps one token less cached (the last one is in flight)
    "c2000_00140": "async cache at a preemption in decode",
    # async: a finish caches new + out - 1 (its output is processed while still running)
    "c2000_00441": "async cache at a finish",
    # async, seconds clock: once a lag decided on a run whose add times had not settled
    "c3000_00259": "async add times on a seconds clock",
    # serq_fast: an observation stamped one binary64 rounding away from its iteration's end
    "c3000_00241": "fast engine float end times (priority)",
    "c3000_00301": "fast engine float end times (fcfs)",
    # async, seconds clock: idle steps (no clock move) after a finish: vLLM's next call was empty
    "c4000_00130": "idle steps after an async finish on a seconds clock",
    # async: an EOS stop's discarded extra token that fills a block leaves it uncached (seed 6000)
    "c6000_00075": "async EOS extra token filling a block",
    # async: vLLM preempts a finished request whose output is not processed yet (FCFS, priority);
    # refused (`async-linger-victim`) before `lag 1`
    "c4000_00016": "a finished request as the victim (FCFS)",
    "c4000_00405": "a finished request as the victim (priority)",
    "c6000_00493": "a finished request as the victim (seed 6000)",
    # async: two same-step finishes released in the order of the batch that produced them
    "c5000_00329": "same-step ends in batch order",
    # async, seconds clock, found with `lag 1` (async scenarios of seeds 5000 and 7000): an EOS
    # finish is processed after its EOS token's call, so vLLM's scheduler is not empty before it
    "c5000_00063": "the EOS token's call before idle steps",
    # ... and requests vLLM adds together after idle steps or a clock jump
    "c7000_00068": "several requests added after idle steps (priority)",
    "c7000_00362": "several requests added after idle steps (priority)",
    "c7000_00400": "two requests added after a clock jump",
}


@pytest.mark.parametrize("name", sorted(CAMPAIGN_FINDINGS))
def test_campaign_findings_agree_on_spec(name):
    diffs = _diffs(name, _run(name, "spec"))
    assert not diffs, f"{name} ({CAMPAIGN_FINDINGS[name]}): " + diffs[0].describe("serQ", "vLLM")


def test_seeded_async_reuse_fault_diverges():
    """After an async preemption in decode the hit stops before the block whose last token was in
    flight (AsyncScheduler caches on output processing); hitting it too diverges."""
    text = program_path(False, hold=True).read_text()
    good = "max(have, computed - 1)"
    assert text.count(good) == 2  # in `avail` and in `reuse`
    trace = _run("c2000_00140", "spec", sources={"vllm_scenario_async.sq": text.replace(good, "inf")})
    diffs = _diffs("c2000_00140", trace)
    assert diffs and diffs[0].step == 42, diffs


@pytest.mark.parametrize("name, step", [("c6000_00075", 37), ("h_async_eos_block", 29)])
def test_seeded_eos_block_fault_diverges(name, step, monkeypatch):
    """An async EOS stop's discarded token that completes a block must not identify it (vLLM
    caches only tokens whose output it processed; docs/async.md §3 item 2): let serq_spec
    identify it, as the other decode tokens, and the continuation hits one block more."""
    import serq_spec.engine as engine   # the step engine asks serq_spec.lag.identifies

    assert not _diffs(name, _run(name, "spec"))
    monkeypatch.setattr(engine, "identifies", lambda job: True)
    diffs = _diffs(name, _run(name, "spec"))
    assert diffs and diffs[0].step == step and diffs[0].field == "scheduled", diffs


def _async_program(priority: bool = False) -> str:
    return program_path(priority, hold=not priority).read_text()


@pytest.mark.parametrize(
    "name, priority, good, bad",
    [
        # without the engine option the finished request is released at once: it is no victim
        ("c4000_00016", False, "lag async_on;", "lag 0;"),
        ("c4000_00405", True, "lag async_on;", "lag 0;"),
        # without the EOS token (`eos`) the iteration after an EOS finish lacks its token
        ("c5000_00329", False, "eos (extra)", "eos (0)"),
        # the child of a parent whose end came after a call with tokens is added a step later
        ("c5000_00060", False, "run gate (max(0, think - late_gate * late));", "run gate (think);"),
        # a request vLLM adds after idle steps sits out the empty call that applied the last end
        ("c4000_00130", False, "only (idle == 0 ||", "only (1 ||"),
        # ... unless one was admitted in this schedule (several added after the idle steps)
        ("c7000_00400", False, "|| waiting.admitted > 0", ""),
        ("c7000_00362", True, "|| waiting.admitted > 0", ""),
        # the async hit cap in `avail` not rounded to whole blocks: the readmission after a
        # preemption in decode allocates a block more than vLLM's hit + chunk (step 20)
        ("c8000_00427", True, "reusable(max(have, computed - 1 + cv) + 1, blocksize(kv))",
         "max(have, computed - 1 + cv)"),
    ],
    ids=["no-lag-fcfs", "no-lag-priority", "no-eos-token", "no-late-gate", "no-idle-wait",
         "idle-wait-blocks-fcfs", "idle-wait-blocks-priority", "avail-whole-blocks-priority"],
)
def test_seeded_async_faults_diverge(name, priority, good, bad):
    """Each fault gives a trace that differs from vLLM's, or no trace at all (the seconds
    clock's derived add times then never settle: a ModelError, never a wrong trace)."""
    from serq_vllm.engine import ModelError
    text = _async_program(priority)
    assert good in text
    file = program_path(priority, hold=not priority).name
    try:
        trace = _run(name, sources={file: text.replace(good, bad)})
    except ModelError as exc:
        assert "did not settle" in str(exc)
        return
    assert _diffs(name, trace)


@pytest.mark.parametrize(
    "name, priority, step",
    [
        # the step of the first difference under the old rule (measured): the idle request is
        # left out of a schedule that vLLM admits it in
        ("c24000_00368", False, 142),  # unit clock, fan-out child preempted, readmitted at 142
        ("c21000_00013", False, 55),   # seconds clock, after idle steps, not admitted at once
        ("c32000_00003", True, 69),    # priority, seconds clock, fan-out child preempted
        ("c32000_00181", False, 25),   # seconds clock, fan-out child preempted
        ("c32000_00487", True, 31),    # priority, seconds clock, not admitted at once
        ("c41000_00095", True, 7),     # priority, seconds clock, added at step 0, preempted
        ("h_async_idle_priority", True, 4),  # priority, unit clock, fan-out child, preempted
    ],
)
def test_idle_request_held_out_of_every_schedule_diverges(name, priority, step):
    """The idle flag's old rule (a request added to an idle scheduler waits while any resident
    is left, not just through the empty call before its add): each vector diverges there, where
    it agrees with the rule of docs/vllm-model.md §1 async (4) (test_vector)."""
    text = _async_program(priority)
    assert "|| sched_at > added_at" in text
    file = program_path(priority, hold=not priority).name
    diffs = _diffs(name, _run(name, sources={file: text.replace("|| sched_at > added_at", "")}))
    assert diffs and diffs[0].step == step and diffs[0].field == "scheduled", diffs


def test_seeded_ends_order_fault_diverges(monkeypatch):
    """serq_spec applying two same-step ends in reverse batch order: c5000_00329 diverges
    (docs/vllm-model.md §7 described that divergence before `lag 1`)."""
    import serq_spec.step as step   # the `ends` event runs serq_spec.sessions.apply_ends

    good = step.apply_ends

    def reversed_ends(cfg, e):
        cfg.stages[e].due.reverse()
        good(cfg, e)

    monkeypatch.setattr(step, "apply_ends", reversed_ends)
    assert _diffs("c5000_00329", _run("c5000_00329", "spec"))


@pytest.mark.parametrize("name", ["c5000_00329", "h_async_multiturn"])
def test_async_on_the_fast_engine(name, monkeypatch):
    """`auto` runs async scenarios on serq_fast (`lag 1`, docs/fast.md): they agree, and its own
    seeded fault `lag_end_order` (two same-step ends applied in reverse batch order) diverges."""
    assert not _diffs(name, _run(name, "fast"))
    if name == "c5000_00329":
        monkeypatch.setenv("SERQ_FAST_FAULT", "lag_end_order")
        assert _diffs(name, _run(name, "fast"))


# ------------------------------------------------------------------ CLI


def _cli(*args, cwd=REPO) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO / "python"), env.get("PYTHONPATH", "")] if p)
    return subprocess.run([sys.executable, "-m", "serq.cli", "oracle", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_cli_run_then_compare(tmp_path):
    out = tmp_path / "caps.json"
    r = _cli("run", str(VECTORS / "caps.scenario.json"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    t = json.loads(out.read_text())
    assert t["steps"][0]["scheduled"][0] == {"id": "a", "tokens": 48, "computed_before": 0, "kind": "new"}
    r = _cli("compare", str(out), str(VECTORS / "caps.trace.json"))
    assert r.returncode == 0 and r.stdout.startswith("agree"), r.stdout + r.stderr


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda s: s.pop("requests"), "requests: missing required field"),
        (lambda s: s["config"].update(foo=1), "config.foo: unknown knob"),
        (lambda s: s["requests"][2].update(prompt_len=-5), "requests[2].prompt_len"),
        (lambda s: s["requests"][0].update(max_tokens=0), "requests[0].max_tokens"),
    ],
    ids=["missing-field", "unknown-knob", "negative-length", "zero-output"],
)
def test_cli_malformed_scenario(tmp_path, mutate, field):
    sc = json.loads((VECTORS / "caps.scenario.json").read_text())
    mutate(sc)
    p = tmp_path / "bad.scenario.json"
    p.write_text(json.dumps(sc))
    r = _cli("run", str(p))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert field in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_cli_unsupported_feature(tmp_path):
    sc = json.loads((VECTORS / "caps.scenario.json").read_text())
    sc["config"]["scheduler_config_extra"] = {"max_num_active_seqs": 0}
    p = tmp_path / "active.scenario.json"
    p.write_text(json.dumps(sc))
    r = _cli("run", str(p))
    assert r.returncode == 2 and "max_num_active_seqs: vLLM takes an integer from 1" in r.stderr
    assert r.stdout == "" and "unsupported: " in r.stderr and "Traceback" not in r.stderr


def test_async_victim_scheduled_earlier_in_the_call_keeps_its_block_cached():
    """c44000_00368 (async, priority): at step 29 vLLM scheduled r2 (36 tokens computed, its
    step-28 token in flight) and only then preempted it for r1.2, admitted later; that allocation
    cached block 8 (tokens 32-35), so r2 is readmitted with 36 cached tokens at step 33. The
    readmission cap is therefore `computed` for such a victim (the priority program's `cv` bit,
    derived from a run), `computed - 1` otherwise; with the bit always 0 serQ says 32 and the
    trace diverges at step 33."""
    trace = _run("c44000_00368")
    assert trace["requests"]["r2"]["num_preemptions"] == 1 and not _diffs("c44000_00368", trace)
    prog = program_path(True).read_text()
    bad = prog.replace("max(have, computed - 1 + cv)", "max(have, computed - 1)")
    assert bad != prog
    diffs = _diffs("c44000_00368",
                   _run("c44000_00368", sources={"vllm_scenario_priority.sq": bad}))
    assert diffs and diffs[0].step == 33


def test_lean_state_lines_list_every_ending_session():
    """The model runs serq_fast with lean state lines (serq_fast.trace.LEAN): on an async
    vector, whose requests end one step late (docs/async.md §6), a lean line lists exactly the
    full line's ending sessions and has the same pools' `used` and engine stage."""
    from serq_vllm.encode import ir_for
    from serq_vllm.plan import plan_scenario
    from serq_fast.step import Sim

    plan = plan_scenario(load_scenario(VECTORS / "c20000_00008.scenario.json"))
    full, lean = [], []
    Sim(ir_for(plan), seed=1, states=full.append).run()
    Sim(ir_for(plan), seed=1, states=lean.append, lean_states=True).run()
    assert len(full) == len(lean)
    ending = [[x for x in f["sessions"] if x[1].startswith("ending:")] for f in full]
    assert sum(map(len, ending)) > 0
    assert [s["sessions"] for s in lean] == ending
    step = [i for i, st in enumerate(full[0]["stages"]) if st["kind"] == "step"]
    for f, s in zip(full, lean):
        assert [p["used"] for p in f["pools"]] == [p["used"] for p in s["pools"]]
        assert [f["stages"][i] for i in step] == [s["stages"][i] for i in step]

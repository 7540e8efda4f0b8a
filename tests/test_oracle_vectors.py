"""Every committed vLLM vector: the scenario validates, the trace has the documented shape.

Also: our regenerations of the five shipped scenarios agree with the shipped reference traces
(when ../shared/oracle is present next to the repository).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from serq_vllm.compare import check_trace_shape, compare_traces, load_trace, vector_trace_path  # noqa: E402
from serq_vllm.scenario import CONFIG_KEYS, load_scenario  # noqa: E402

VECTORS = ROOT / "vectors" / "vllm"
SHIPPED_NAMES = ("caps", "longchunk", "multiturn", "preempt", "reserve")
SCENARIOS = sorted(VECTORS.glob("*.scenario.json"))
NAMES = [p.name[: -len(".scenario.json")] for p in SCENARIOS]

TOP_KEYS = ["scenario", "vllm_version", "config", "num_usable_blocks", "steps", "requests",
            "unfinished", "stalled", "timing"]
STEP_KEYS = ["step", "time", "arrived", "scheduled", "total_tokens", "preempted",
             "free_blocks_after_schedule", "cached_blocks", "num_running", "num_waiting",
             "finished", "free_blocks_after_update"]
ENTRY_KEYS = ["id", "tokens", "computed_before", "kind", "samples", "blocks"]
REQUEST_KEYS = ["prompt_len", "max_tokens", "priority", "arrival_step", "arrival_time",
                "first_scheduled_step", "first_token_step", "finish_step", "finish_reason",
                "num_preemptions", "cached_tokens_at_admission", "output_len"]
TIMING_KEYS = ["build_s", "loop_s", "schedule_s", "update_s", "num_steps", "empty_schedule_calls",
               "steps_per_s"]


def shared_oracle() -> Path | None:
    """The shipped oracle files, an optional extra next to the clone (../shared/oracle); the tests
    that need them skip, saying so, when they are absent. Never an absolute path."""
    cand = ROOT.parent / "shared" / "oracle"
    if (cand / "traces").is_dir() and (cand / "scenarios").is_dir():
        return cand
    return None


def test_the_vector_set_is_complete():
    random_ones = [n for n in NAMES if n.startswith("r") and n[1:].isdigit()]
    assert len(random_ones) >= 120
    assert set(SHIPPED_NAMES) <= set(NAMES)
    for n in NAMES:
        assert vector_trace_path(VECTORS, n).is_file(), f"{n} has no trace"
    traces = [p.name[: -len(".trace.json")] for p in VECTORS.glob("*.trace.json")]
    traces += [p.name[: -len(".trace.json.gz")] for p in VECTORS.glob("*.trace.json.gz")]
    assert sorted(traces) == sorted(NAMES), "every trace has a scenario, and only one trace"
    total = sum(p.stat().st_size for p in VECTORS.iterdir())
    assert total < 15 * 2**20


@pytest.mark.parametrize("name", NAMES)
def test_vector_pair(name):
    sc = load_scenario(VECTORS / f"{name}.scenario.json")
    t = load_trace(vector_trace_path(VECTORS, name))
    check_trace_shape(t)

    # top level, in the documented order (a speculative scenario's object after the config)
    spec = sc.speculative
    if spec is None:
        assert list(t) == TOP_KEYS
    else:
        assert list(t) == TOP_KEYS[:3] + ["speculative"] + TOP_KEYS[3:]
        assert t["speculative"] == spec.as_json()
    assert t["scenario"] == sc.name
    assert t["vllm_version"] == "0.31.0"
    assert t["config"] == sc.config and list(t["config"])[: len(CONFIG_KEYS)] == list(CONFIG_KEYS)
    assert t["num_usable_blocks"] == sc.config["num_gpu_blocks"] - 1
    assert list(t["timing"]) == TIMING_KEYS and t["timing"]["num_steps"] == len(t["steps"])
    assert isinstance(t["stalled"], bool)

    # requests: one record per scenario request, in scenario order
    ids = [r.id for r in sc.requests]
    assert list(t["requests"]) == ids
    unfinished = sorted(i for i, r in t["requests"].items() if r["finish_reason"] is None)
    assert t["unfinished"] == unfinished
    for r in sc.requests:
        rec = t["requests"][r.id]
        assert list(rec) == REQUEST_KEYS
        assert rec["max_tokens"] == r.max_tokens and rec["priority"] == r.priority
        assert rec["finish_reason"] in (None, "length", "stop")
        assert 0 <= rec["output_len"] <= r.max_tokens
        if rec["finish_reason"] is not None:
            # max_tokens, EOS or max_model_len, whichever comes first
            assert rec["finish_reason"] == sc.finish_reason(r.id)
            assert rec["output_len"] == sc.output_len(r.id)
        if rec["finish_reason"] == "stop":
            assert r.eos_at is not None and rec["output_len"] == r.eos_at + 1
        if rec["finish_step"] is not None:
            assert rec["first_scheduled_step"] <= rec["first_token_step"] <= rec["finish_step"]
        if rec["prompt_len"] is not None and not any(s.kind == "parent" for s in r.prompt):
            assert rec["prompt_len"] == sc.static_prompt_len(r.id)
        if r.after is not None and rec["arrival_step"] is not None:
            parent = t["requests"][r.after]
            assert rec["arrival_step"] >= parent["finish_step"] + max(1, r.delay_steps)

    # steps
    usable = t["num_usable_blocks"]
    last = -1
    preemptions: dict[str, int] = {}
    for s in t["steps"]:
        assert list(s)[: len(STEP_KEYS)] == STEP_KEYS
        assert set(s) - set(STEP_KEYS) <= {"prefix_cache"}
        # numbers never decrease; a preempt-only record shares its number with the next step
        assert s["step"] >= last
        last = s["step"]
        entries = s["scheduled"]
        assert s["total_tokens"] == sum(e["tokens"] for e in entries)
        assert s["total_tokens"] > 0 or s["preempted"]
        assert s["total_tokens"] <= sc.config["max_num_batched_tokens"]
        assert len({e["id"] for e in entries}) == len(entries)
        for e in entries:
            keys = ENTRY_KEYS if spec is None else ENTRY_KEYS + ["drafts"] + (
                ["accepted"] if "accepted" in e else [])
            assert list(e) == keys and e["tokens"] > 0 and e["kind"] in ("new", "resumed", "running")
            if spec is not None:
                # drafts ride behind the one token a step must compute, at most k of them, and
                # only a step that samples verifies (accepts some of) them
                assert 0 <= e["drafts"] <= min(spec.num_speculative_tokens, e["tokens"] - 1)
                assert "accepted" not in e or (e["samples"] and 0 <= e["accepted"] <= e["drafts"])
        assert s["preempted"] == sorted(s["preempted"])
        for rid in s["preempted"]:
            preemptions[rid] = preemptions.get(rid, 0) + 1
        assert 0 <= s["free_blocks_after_schedule"] <= usable
        assert 0 <= s["free_blocks_after_update"] <= usable
        for f in s["finished"]:
            assert list(f) == ["id", "reason", "output_len"]
        if "prefix_cache" in s:
            assert list(s["prefix_cache"]) == ["requests", "queries", "hits"]
    for rid, rec in t["requests"].items():
        assert rec["num_preemptions"] == preemptions.get(rid, 0)


def test_shipped_scenarios_are_verbatim_copies():
    shared = shared_oracle()
    if shared is None:
        pytest.skip("the shipped oracle files (../shared/oracle) are not next to the repository")
    for n in SHIPPED_NAMES:
        assert (VECTORS / f"{n}.scenario.json").read_bytes() == (shared / "scenarios" / f"{n}.json").read_bytes()


@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_regenerated_shipped_trace_agrees_with_the_reference(name):
    shared = shared_oracle()
    if shared is None:
        pytest.skip("the shipped oracle traces (../shared/oracle) are not next to the repository")
    ref = json.loads((shared / "traces" / f"{name}.json").read_text())
    ours = json.loads((VECTORS / f"{name}.trace.json").read_text())
    assert compare_traces(ref, ours) == []
    # stronger than the rule: every field except the wall-clock timing is identical
    strip = lambda t: {k: v for k, v in t.items() if k != "timing"}  # noqa: E731
    assert strip(ref) == strip(ours)


def test_random_vectors_are_reproduced_by_the_generator():
    """r0001.. are exactly `gen_scenarios.py --seed 1`, c2000_00001.. the differential campaign's
    scenarios of seed 2000 (tools/vllm_oracle/campaign.py); each fits alone in the KV cache."""
    import math

    sys.path.insert(0, str(ROOT / "tools" / "vllm_oracle"))
    import gen_scenarios

    random_ones = [(1, int(n[1:]), n) for n in NAMES if n.startswith("r") and n[1:].isdigit()]
    # campaign vectors c<seed>_<k>: scenario k of `campaign.py --seed <seed>`
    campaign = [(int(n[1:].split("_")[0]), int(n.split("_")[1]), n) for n in NAMES
                if re.fullmatch(r"c\d+_\d{5}", n)]
    assert len(campaign) >= 100
    for seed, k, n in random_ones + campaign:
        text = json.dumps(gen_scenarios.generate(seed, k, n), indent=1) + "\n"
        assert (VECTORS / f"{n}.scenario.json").read_text() == text, n
        sc = load_scenario(VECTORS / f"{n}.scenario.json")
        longest = max(sc.static_prompt_len(r.id) + r.max_tokens for r in sc.requests)
        assert sc.config["num_gpu_blocks"] >= math.ceil(longest / sc.block_size) + 2
        if seed < gen_scenarios.EXTENDED_FROM_SEED:
            assert sc.config["max_model_len"] >= longest
        else:  # it may cap an output, never a prompt (gen_scenarios._cap_model_len)
            assert all(sc.static_prompt_len(r.id) < sc.config["max_model_len"] for r in sc.requests)


def test_generator_is_deterministic_and_valid():
    sys.path.insert(0, str(ROOT / "tools" / "vllm_oracle"))
    import gen_scenarios
    from serq_vllm.scenario import resolve_scenario

    for k in range(1, 40):
        a = gen_scenarios.generate(77, k, f"x{k}")
        assert a == gen_scenarios.generate(77, k, f"x{k}")
        resolve_scenario(a)
        arrivals = {("time" if "arrival_time" in r else "step") for r in a["requests"] if "after" not in r}
        assert len(arrivals) <= 1  # never mixes time- and step-based arrivals

"""Scenario loading for the vLLM oracle: defaults, prompt structure, and field-named errors."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from serq_vllm.scenario import (  # noqa: E402
    CONFIG_KEYS,
    DEFAULT_CONFIG,
    EOS_TOKEN_ID,
    PromptSegment,
    ScenarioError,
    fake_output_token,
    fresh_token_ids,
    load_scenario,
    resolve_scenario,
    tokens_for_segment,
)


def base() -> dict:
    return {
        "name": "t",
        "config": {"block_size": 16, "num_gpu_blocks": 64, "max_num_batched_tokens": 256, "max_num_seqs": 8},
        "prefix_groups": {"sys": {"length": 64}},
        "requests": [
            {"id": "a", "prompt_len": 100, "max_tokens": 4},
            {"id": "b", "prompt_len": 50, "max_tokens": 2, "arrival_step": 3},
            {"id": "c", "after": "a", "prompt_from": "a", "append_len": 7, "max_tokens": 3},
            {"id": "d", "prefix_group": "sys", "prompt_len": 80, "max_tokens": 1},
        ],
    }


# --------------------------------------------------------------------------------------------
# valid input


def test_minimal_scenario_gets_every_default():
    sc = resolve_scenario({"requests": [{"prompt_len": 5}]})
    assert list(sc.config) == list(CONFIG_KEYS)
    expected = dict(DEFAULT_CONFIG)
    expected["max_model_len"] = min(32768, 1024 * 16)
    assert sc.config == expected
    assert sc.name == "scenario" and sc.max_steps == 100000
    (r,) = sc.requests
    assert (r.id, r.max_tokens, r.priority, r.arrival_step, r.arrival_time, r.eos_at) == ("0", 16, 0, 0, None, None)
    assert r.prompt == [PromptSegment("fresh", source="req:0", length=5)]
    assert sc.num_usable_blocks == 1023
    assert sc.step_base_s == 0.01 and sc.step_per_token_s == 0.0001
    from fractions import Fraction

    assert sc.step_base_exact == Fraction(1, 100) and sc.step_per_token_exact == Fraction(1, 10000)
    assert sc.warnings == []


def test_config_merge_is_shallow_and_step_time_replaced_whole():
    sc = resolve_scenario({"config": {"step_time": {"base_s": 0.5}}, "requests": [{"prompt_len": 1}]})
    assert sc.config["step_time"] == {"base_s": 0.5}
    assert sc.step_base_s == 0.5 and sc.step_per_token_s == 0.0  # missing per_token_s means 0
    sc = resolve_scenario({"config": {"step_time": {"per_token_s": 0.001}}, "requests": [{"prompt_len": 1}]})
    assert sc.step_base_s == 0.01
    sc = resolve_scenario({"config": {"num_gpu_blocks": 10, "block_size": 8}, "requests": [{"prompt_len": 1}]})
    assert sc.config["max_model_len"] == 80


def test_base_scenario_resolves_prompt_structure():
    sc = resolve_scenario(base())
    a, b, c, d = sc.requests
    assert a.prompt == [PromptSegment("fresh", "req:a", 100)]
    assert b.arrival_step == 3 and b.arrival_kind == "step"
    assert c.arrival_kind == "after" and c.arrival_step is None and c.after == "a"
    assert c.prompt == [PromptSegment("parent", "a"), PromptSegment("fresh", "req:c", 7)]
    assert d.prefix_group == "sys" and d.prefix_len == 64
    assert d.prompt == [PromptSegment("group", "sys", 64), PromptSegment("fresh", "req:d", 16)]
    assert sc.static_prompt_len("c") == 100 + 4 + 7
    assert sc.longest_sequence() == max(104, 52, 111 + 3, 81)


def test_prefix_rules():
    s = base()
    s["requests"] = [
        {"id": "short", "prefix_group": "sys", "prompt_len": 20},
        {"id": "partial", "prefix_group": "sys", "prefix_len": 40, "prompt_len": 90},
        {"id": "only", "prefix_group": "sys"},
    ]
    short, partial, only = resolve_scenario(s).requests
    assert short.prompt == [PromptSegment("group", "sys", 20)] and short.prefix_len == 20
    assert partial.prompt == [PromptSegment("group", "sys", 40), PromptSegment("fresh", "req:partial", 50)]
    assert only.prompt == [PromptSegment("group", "sys", 64)]


def test_eos_shortens_expected_output_and_chained_prompts():
    s = base()
    s["requests"][0]["eos_at"] = 1
    sc = resolve_scenario(s)
    assert sc.requests[0].expected_output_len == 2
    assert sc.static_prompt_len("c") == 100 + 2 + 7


def test_max_model_len_ends_the_output():
    """vLLM 0.31.0's stop check, measured with the driver (max_model_len 40): EOS first, then
    max_tokens or prompt + output reaching max_model_len (`length`). A prompt of 40 tokens or
    more (a continuation's counted with its source's output) is refused when read, as vLLM's
    input processor refuses it."""
    reqs = [
        {"id": "x", "prompt_len": 30, "max_tokens": 20},
        {"id": "y", "prompt_len": 39, "max_tokens": 3},
        {"id": "u", "prompt_len": 12, "max_tokens": 40, "eos_at": 27},
        {"id": "u2", "prompt_len": 12, "max_tokens": 40, "eos_at": 28},
        {"id": "e", "prompt_len": 12, "max_tokens": 5, "eos_at": 4},
        {"id": "e.2", "after": "e", "prompt_from": "e", "max_tokens": 30}]
    sc = resolve_scenario({"config": {"max_model_len": 40}, "requests": reqs})
    got = {r.id: (sc.output_len(r.id), sc.finish_reason(r.id)) for r in sc.requests}
    assert got == {"x": (10, "length"), "y": (1, "length"), "u": (28, "stop"),
                   "u2": (28, "length"), "e": (5, "stop"), "e.2": (23, "length")}
    assert sc.static_prompt_len("e.2") == 17
    for extra, where in (({"id": "z", "prompt_len": 40, "max_tokens": 3}, "requests[6]"),
                         ({"id": "x.2", "after": "u2", "prompt_from": "u2", "max_tokens": 2},
                          "requests[6]")):
        with pytest.raises(ScenarioError, match=r"reaches max_model_len \(40\)") as exc:
            resolve_scenario({"config": {"max_model_len": 40}, "requests": reqs + [extra]})
        assert exc.value.path == f"{where}.prompt_len"


def test_time_arrival_and_exact_decimal():
    sc = resolve_scenario({"requests": [{"prompt_len": 3, "arrival_time": 0.1}]})
    r = sc.requests[0]
    assert r.arrival_kind == "time" and r.arrival_step is None and r.arrival_time == 0.1
    from fractions import Fraction

    assert r.arrival_time_exact == Fraction(1, 10)


def test_output_len_alias_and_explicit_ids():
    sc = resolve_scenario({"requests": [{"prompt_token_ids": [11, 12, 13], "output_len": 5}]})
    r = sc.requests[0]
    assert r.max_tokens == 5 and r.prompt == [PromptSegment("ids", ids=(11, 12, 13))]


def test_unknown_knob_allowed_on_request_and_kept_last():
    sc = resolve_scenario(
        {"config": {"my_knob": 3}, "requests": [{"prompt_len": 1}]}, allow_unknown_config=True
    )
    assert list(sc.config)[-1] == "my_knob" and sc.config["my_knob"] == 3
    assert any("my_knob" in w for w in sc.warnings)


def test_capacity_warnings():
    sc = resolve_scenario(
        {"config": {"num_gpu_blocks": 4, "block_size": 16, "max_model_len": 100}, "requests": [{"prompt_len": 70}]}
    )
    assert any("exceeds the usable KV cache" in w for w in sc.warnings)
    assert any("max_model_len" in w for w in sc.warnings)


def test_token_ids_are_deterministic_and_in_range():
    a = fresh_token_ids("group:sys", 50)
    assert a == fresh_token_ids("group:sys", 50)
    assert a[:10] == fresh_token_ids("group:sys", 10)
    assert a != fresh_token_ids("req:x", 50)
    assert all(10 <= t < 32000 for t in a)
    assert tokens_for_segment(PromptSegment("group", "sys", 5)) == a[:5]
    assert tokens_for_segment(PromptSegment("parent", "p"), [1, 2]) == [1, 2]
    assert fake_output_token("r", 3, eos_at=3) == EOS_TOKEN_ID
    outs = [fake_output_token("r", i) for i in range(100)]
    assert EOS_TOKEN_ID not in outs and all(10 <= t < 32000 for t in outs)


def test_load_scenario_file(tmp_path):
    p = tmp_path / "foo.scenario.json"
    s = base()
    del s["name"]
    p.write_text(json.dumps(s))
    assert load_scenario(p).name == "foo"
    p.write_text("{not json")
    with pytest.raises(ScenarioError, match="not valid JSON"):
        load_scenario(p)
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.json")


# --------------------------------------------------------------------------------------------
# errors name their field


def _set(path):
    """A mutation that sets a nested key: _set(("requests", 1, "x"))(value)."""

    def apply(value):
        def f(s):
            obj = s
            for k in path[:-1]:
                obj = obj[k]
            obj[path[-1]] = value

        return f

    return apply


def _del(*path):
    def f(s):
        obj = s
        for k in path[:-1]:
            obj = obj[k]
        del obj[path[-1]]

    return f


def _append(req):
    return lambda s: s["requests"].append(req)


BAD = [
    (_append({"id": "e", "prompt_len": -5}), "requests[4].prompt_len: must be a non-negative integer, got -5"),
    (_set(("config", "foo"))(1), "config.foo: unknown knob (known: block_size, num_gpu_blocks"),
    (_del("requests"), "requests: missing required field"),
    (_set(("requests",))({}), "requests: must be a list"),
    (_append({"id": "e"}), "requests[4].prompt_len: missing required field"),
    (_append({"id": "a", "prompt_len": 3}), "requests[4].id: duplicate id 'a' (first used by requests[0])"),
    (_append({"id": "e", "after": "zz", "prompt_len": 3}), "requests[4].after: names an unknown request id 'zz'"),
    (_append({"id": "e", "after": "a", "prompt_from": "zz"}), "requests[4].prompt_from: names an unknown request id 'zz'"),
    (_append({"id": "e", "prompt_from": "a"}), "requests[4].prompt_from: the parent 'a' must finish"),
    (_append({"id": "e", "after": "e", "prompt_len": 1}), "requests[4].after: a request cannot name itself"),
    (_set(("requests", 0, "after"))("c"), "requests[0].after: forms a cycle"),
    (_set(("requests", 0, "id"))(7), "requests[0].id: must be a non-empty string, got 7"),
    (_set(("requests", 0, "max_tokens"))(0), "requests[0].max_tokens: must be a positive integer, got 0"),
    (_set(("requests", 0, "max_tokens"))(True), "requests[0].max_tokens: must be a positive integer, got true"),
    (_set(("requests", 0, "output_len"))(9), "requests[0].output_len: is an alias of max_tokens"),
    (_set(("requests", 0, "priority"))(1.5), "requests[0].priority: must be an integer, got 1.5"),
    (_set(("requests", 0, "eos_at"))(-1), "requests[0].eos_at: must be a non-negative integer, got -1"),
    (_set(("requests", 0, "arrival_step"))("3"), 'requests[0].arrival_step: must be a non-negative integer, got "3"'),
    (_set(("requests", 0, "arrival_time"))(-0.5), "requests[0].arrival_time: must be a non-negative number"),
    (_set(("requests", 1, "delay_steps"))(-2), "requests[1].delay_steps: must be a non-negative integer"),
    (_set(("requests", 0, "promt_len"))(3), "requests[0].promt_len: unknown field (known: id, max_tokens"),
    (_set(("requests", 0, "prompt_len"))(0), "requests[0].prompt_len: the prompt must have at least one token"),
    (_set(("requests", 3, "prefix_group"))("nope"), "requests[3].prefix_group: unknown group 'nope' (known: sys)"),
    (_set(("requests", 0, "prefix_len"))(3), "requests[0].prefix_len: only allowed together with prefix_group"),
    (_set(("requests", 0, "append_len"))(3), "requests[0].append_len: only allowed together with prompt_from"),
    (_set(("requests", 2, "prompt_len"))(3), "requests[2].prompt_len: conflicts with prompt_from"),
    (_set(("requests", 0, "prompt_token_ids"))([11, 12, 40000]), "requests[0].prompt_token_ids[2]: must be a token id in [0, 32000), got 40000"),
    (_set(("requests", 0, "prompt_token_ids"))("abc"), "requests[0].prompt_token_ids: must be a list of token ids"),
    (_set(("requests", 1))(5), "requests[1]: must be an object, got 5"),
    (_set(("config", "block_size"))(0), "config.block_size: must be a positive integer, got 0"),
    (_set(("config", "num_gpu_blocks"))(1), "config.num_gpu_blocks: must be an integer >= 2, got 1"),
    (_set(("config", "policy"))("lifo"), 'config.policy: must be "fcfs" or "priority", got "lifo"'),
    (_set(("config", "enable_prefix_caching"))("yes"), 'config.enable_prefix_caching: must be true or false, got "yes"'),
    (_set(("config", "async_scheduling"))(1), "config.async_scheduling: must be true or false, got 1"),
    (_set(("config", "max_model_len"))(-1), "config.max_model_len: must be a positive integer, got -1"),
    (_set(("config", "step_time"))({"base": 1}), "config.step_time.base: unknown key (known: base_s, per_token_s)"),
    (_set(("config", "step_time"))({"base_s": -1}), "config.step_time.base_s: must be a non-negative number, got -1"),
    (_set(("config", "scheduler_config_extra"))([]), "config.scheduler_config_extra: must be an object"),
    (_set(("config", "max_num_seqs"))(300), "config.max_num_batched_tokens: must be >= max_num_seqs (300), got 256"),
    (_set(("config", "long_prefill_token_threshold"))(5000), "config.long_prefill_token_threshold: must be <= max_model_len (1024), got 5000"),
    (_set(("config",))([1]), "config: must be an object, got [1]"),
    (_set(("prefix_groups", "sys"))({"len": 3}), "prefix_groups.sys.len: unknown key (known: length)"),
    (_set(("prefix_groups", "sys"))({}), "prefix_groups.sys.length: missing required field"),
    (_set(("prefix_groups", "sys"))({"length": -1}), "prefix_groups.sys.length: must be a non-negative integer, got -1"),
    (_set(("name",))(""), "name: must be a non-empty string"),
    (_set(("max_steps",))(-1), "max_steps: must be a non-negative integer, got -1"),
    (_set(("speculative",))(3), "speculative: must be an object"),
    (_set(("speculative",))({}), "speculative.num_speculative_tokens: missing required field"),
    (_set(("speculative",))({"num_speculative_tokens": 0}), "speculative.num_speculative_tokens: must be a positive integer, got 0"),
    (_set(("speculative",))({"num_speculative_tokens": 65}), "speculative.num_speculative_tokens: must be at most 64, got 65"),
    (_set(("speculative",))({"num_speculative_tokens": 2, "method": "eagle"}), 'speculative.method: must be one of "ngram", "draft_model", got "eagle"'),
    (_set(("speculative",))({"num_speculative_tokens": 2, "accept_percent": 101}), "speculative.accept_percent: must be at most 100, got 101"),
    (_set(("speculative",))({"num_speculative_tokens": 2, "seed": "x"}), 'speculative.seed: must be an integer, got "x"'),
    (_set(("speculative",))({"num_speculative_tokens": 2, "k": 1}), "speculative.k: unknown key (known: num_speculative_tokens, method"),
    (lambda s: (s["config"].update(async_scheduling=True),
                s.update(speculative={"num_speculative_tokens": 2})),
     "speculative.method: vLLM runs async scheduling only with a model-based proposer"),
    (lambda s: (s["config"].update(max_num_batched_tokens=1, max_num_seqs=1),
                s.update(speculative={"num_speculative_tokens": 2, "method": "draft_model"})),
     "config.max_num_batched_tokens: must exceed the proposer's 1 draft slot(s) per request, got 1"),
]


@pytest.mark.parametrize("mutate, message", BAD, ids=[m for _, m in BAD])
def test_error_names_the_field(mutate, message):
    s = copy.deepcopy(base())
    mutate(s)
    with pytest.raises(ScenarioError) as info:
        resolve_scenario(s)
    assert str(info.value).startswith(message), str(info.value)
    assert info.value.path and str(info.value).startswith(info.value.path)


def test_speculative_defaults_and_proposer_numbers():
    s = base()
    assert resolve_scenario(s).speculative is None
    s["speculative"] = {"num_speculative_tokens": 3}
    spec = resolve_scenario(s).speculative
    assert spec.as_json() == {"num_speculative_tokens": 3, "method": "ngram", "accept_percent": 70,
                              "seed": 0}
    # vLLM 0.31.0: ngram reserves no lookahead and no draft slot; a draft model k lookahead
    # slots and one input slot per scheduled request (the driver checks both against vLLM)
    assert (spec.lookahead_tokens, spec.draft_slots) == (0, 0)
    s["speculative"]["method"] = "draft_model"
    spec = resolve_scenario(s).speculative
    assert (spec.lookahead_tokens, spec.draft_slots) == (3, 1)


def test_accepted_drafts_rule():
    """Seeded per (request, output position): deterministic, a prefix of the drafts, and the
    acceptance rate near accept_percent over many positions."""
    from serq_vllm.scenario import SpecDecode, accepted_drafts

    spec = SpecDecode(num_speculative_tokens=4, accept_percent=70, seed=5)
    got = [accepted_drafts(spec, "r1", i, 4) for i in range(2000)]
    assert got == [accepted_drafts(spec, "r1", i, 4) for i in range(2000)]
    assert all(0 <= a <= 4 for a in got)
    # fewer drafts verified (trimmed by the budget): the same coins, cut at the count
    assert [accepted_drafts(spec, "r1", i, 2) for i in range(2000)] == [min(a, 2) for a in got]
    # first-draft acceptance rate close to 70 %
    first = sum(1 for a in got if a >= 1) / len(got)
    assert 0.66 < first < 0.74
    assert got != [accepted_drafts(SpecDecode(4, accept_percent=70, seed=6), "r1", i, 4)
                   for i in range(2000)]
    assert got != [accepted_drafts(spec, "r2", i, 4) for i in range(2000)]
    assert all(accepted_drafts(SpecDecode(4, accept_percent=0), "a", i, 4) == 0 for i in range(2000))
    assert all(accepted_drafts(SpecDecode(4, accept_percent=100), "a", i, 4) == 4 for i in range(50))
    assert accepted_drafts(spec, "r1", 3, 0) == 0


def test_non_object_scenario():
    with pytest.raises(ScenarioError, match="a scenario must be a JSON object"):
        resolve_scenario([1, 2])


def test_scenario_error_is_a_value_error():
    assert issubclass(ScenarioError, ValueError)


def test_a_chain_longer_than_the_recursion_limit_resolves():
    """Prompt lengths along a `prompt_from` chain are computed once each, without recursion: a
    1,500-turn chain resolves, and turn k's prompt is the first prompt plus k × (output + append)."""
    n = 1500
    reqs = [{"id": "t0", "prompt_len": 5, "max_tokens": 1}]
    reqs += [{"id": f"t{k}", "after": f"t{k - 1}", "prompt_from": f"t{k - 1}", "append_len": 1,
              "max_tokens": 1} for k in range(1, n)]
    sc = resolve_scenario({"config": {"num_gpu_blocks": 4096}, "requests": reqs})
    assert [sc.static_prompt_len(f"t{k}") for k in range(n)] == [5 + 2 * k for k in range(n)]
    assert sc.output_len(f"t{n - 1}") == 1 and sc.request("t7").index == 7


def test_prompt_from_must_be_an_after_ancestor_at_any_depth():
    chain = [{"id": "a", "prompt_len": 4}, {"id": "b", "after": "a", "prompt_len": 4},
             {"id": "c", "after": "b", "prompt_len": 4},
             {"id": "x", "prompt_len": 4}, {"id": "y", "after": "x", "prompt_len": 4}]
    ok = resolve_scenario({"requests": chain + [
        {"id": "d", "after": "c", "prompt_from": "a"}]})  # a grandparent of its parent
    assert ok.static_prompt_len("d") == 4 + 16
    for src, after in (("b", "y"), ("y", "c"), ("c", "b")):  # another chain; a later turn
        with pytest.raises(ScenarioError, match=r"requests\[5\].prompt_from: the parent"):
            resolve_scenario({"requests": chain + [{"id": "d", "after": after, "prompt_from": src}]})

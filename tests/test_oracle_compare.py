"""The trace comparison rule: each kind of seeded fault is reported; uncompared fields are not."""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from serq_vllm import cli as oracle_cli  # noqa: E402
from serq_vllm.compare import (  # noqa: E402
    Difference,
    TraceError,
    compare_traces,
    first_difference,
    load_trace,
    parse_compact_schedule,
    render_step,
    render_trace,
    step_schedule,
)

VECTORS = ROOT / "vectors" / "vllm"


@pytest.fixture(scope="module")
def preempt() -> dict:
    return load_trace(VECTORS / "preempt.trace.json")


@pytest.fixture(scope="module")
def multiturn() -> dict:
    return load_trace(VECTORS / "multiturn.trace.json")


def _step(t: dict, n: int) -> dict:
    return [s for s in t["steps"] if s["step"] == n][-1]


def test_trace_equals_itself(preempt, multiturn):
    assert compare_traces(preempt, copy.deepcopy(preempt)) == []
    assert first_difference(multiturn, multiturn) is None


def test_different_scenarios_diverge_at_step_0(preempt, multiturn):
    d = first_difference(preempt, multiturn)
    assert d.kind == "step" and d.step == 0 and d.field == "scheduled"


# --------------------------------------------------------------------------------------------
# seeded faults, one per compared quantity


def _fault(trace, mutate):
    b = copy.deepcopy(trace)
    mutate(b)
    return compare_traces(trace, b)


def test_changed_token_count_is_reported(preempt):
    def m(t):
        _step(t, 64)["scheduled"][2]["tokens"] = 61

    (d,) = _fault(preempt, m)
    assert (d.kind, d.step, d.field) == ("step", 64, "scheduled")
    assert d.a[2] == ("r4", 62) and d.b[2] == ("r4", 61)
    assert d.describe() == 'step 64: scheduled differs: A "r2:113 r3:81 r4:62" vs B "r2:113 r3:81 r4:61"'


def test_changed_order_is_reported(preempt):
    def m(t):
        s = _step(t, 64)["scheduled"]
        s[0], s[1] = s[1], s[0]

    (d,) = _fault(preempt, m)
    assert (d.step, d.field) == (64, "scheduled")


def test_missing_and_extra_scheduled_request(preempt):
    def m(t):
        _step(t, 0)["scheduled"].pop()

    assert _fault(preempt, m)[0].step == 0

    def m2(t):
        _step(t, 5)["scheduled"].append({"id": "ghost", "tokens": 1})

    assert _fault(preempt, m2)[0].field == "scheduled"


def test_preempted_is_compared(preempt):
    def m(t):
        _step(t, 17)["preempted"] = []

    (d,) = _fault(preempt, m)
    assert (d.step, d.field, d.a, d.b) == (17, "preempted", ["r3"], [])


def test_finished_is_compared_as_sorted_ids(preempt):
    # the order inside `finished` does not matter ...
    def swap(t):
        f = _step(t, 63)["finished"]
        assert len(f) == 2
        f.reverse()

    assert _fault(preempt, swap) == []

    # ... but the ids do
    def drop(t):
        _step(t, 63)["finished"].pop()

    (d,) = _fault(preempt, drop)
    assert (d.step, d.field) == (63, "finished")


def test_free_blocks_after_schedule_is_compared(preempt):
    def m(t):
        _step(t, 1)["free_blocks_after_schedule"] += 1

    (d,) = _fault(preempt, m)
    assert (d.step, d.field) == (1, "free_blocks_after_schedule")


def test_missing_step_is_a_difference(preempt):
    def m(t):
        t["steps"] = [s for s in t["steps"] if s["step"] != 100]

    (d,) = _fault(preempt, m)
    assert (d.kind, d.step) == ("missing-step", 100)
    assert "present in A only" in d.describe()


def test_extra_step_is_a_difference(preempt):
    def m(t):
        extra = copy.deepcopy(t["steps"][-1])
        extra["step"] += 5
        t["steps"].append(extra)

    (d,) = _fault(preempt, m)
    assert d.kind == "missing-step" and "present in B only" in d.describe()


@pytest.mark.parametrize(
    "field, value",
    [
        ("cached_tokens_at_admission", 16),
        ("first_token_step", 3),
        ("finish_step", 190),
        ("num_preemptions", 2),
        ("output_len", 63),
    ],
)
def test_each_request_field_is_compared(preempt, field, value):
    def m(t):
        t["requests"]["r5"][field] = value

    (d,) = _fault(preempt, m)
    assert (d.kind, d.request, d.field, d.b) == ("request", "r5", field, value)
    assert d.describe().startswith(f"request 'r5': {field} differs")


def test_missing_request_is_a_difference(preempt):
    def m(t):
        del t["requests"]["r7"]

    (d,) = _fault(preempt, m)
    assert (d.kind, d.request) == ("missing-request", "r7")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda t: t.update(timing={"build_s": 99}),
        lambda t: t.update(vllm_version="9.9.9"),
        lambda t: _step(t, 3).update(time=123.0),
        lambda t: _step(t, 3)["scheduled"][0].update(kind="resumed", blocks=99, computed_before=7, samples=False),
        lambda t: _step(t, 3).update(cached_blocks=5, num_running=0, num_waiting=9, free_blocks_after_update=0),
        lambda t: _step(t, 3).update(prefix_cache={"requests": 1, "queries": 2, "hits": 3}, arrived=["x"]),
        lambda t: t["requests"]["r0"].update(prompt_len=1, arrival_time=5.0, finish_reason="stop", priority=3),
    ],
)
def test_uncompared_fields_do_not_matter(preempt, mutate):
    assert _fault(preempt, mutate) == []


def test_preempt_only_record_shares_step_number_and_later_record_wins():
    t = load_trace(VECTORS / "h_preempt_only.trace.json")
    numbers = [s["step"] for s in t["steps"]]
    dup = sorted({n for n in numbers if numbers.count(n) > 1})
    assert dup, "h_preempt_only should contain a preempt-only record"
    n = dup[0]
    first, later = [s for s in t["steps"] if s["step"] == n]
    assert first["total_tokens"] == 0 and first["preempted"] and later["total_tokens"] > 0
    # dropping the preempt-only record changes nothing under the rule ...
    b = copy.deepcopy(t)
    b["steps"] = [s for s in b["steps"] if s is not None and not (s["step"] == n and s["total_tokens"] == 0)]
    assert compare_traces(t, b) == []
    # ... while the later record is compared
    b = copy.deepcopy(t)
    [s for s in b["steps"] if s["step"] == n][-1]["scheduled"].pop()
    assert first_difference(t, b).step == n


def test_limit_and_all_differences(preempt):
    b = copy.deepcopy(preempt)
    for s in b["steps"][:10]:
        s["free_blocks_after_schedule"] += 1
    b["requests"]["r1"]["finish_step"] = 1
    diffs = compare_traces(preempt, b)
    assert len(diffs) == 11 and [d.step for d in diffs[:10]] == list(range(10))
    assert diffs[-1].kind == "request"
    assert len(compare_traces(preempt, b, limit=3)) == 3


# --------------------------------------------------------------------------------------------
# compact form, gzip, shapes


def compact(t: dict) -> dict:
    c = copy.deepcopy(t)
    for s in c["steps"]:
        s["sched"] = " ".join(f"{e['id']}:{e['tokens']}" for e in s.pop("scheduled"))
        s["finished"] = [f["id"] for f in s["finished"]]
    return c


def test_compact_form_parses():
    assert parse_compact_schedule("a:64 b:1") == [("a", 64), ("b", 1)]
    assert parse_compact_schedule("") == []
    assert parse_compact_schedule("r0.2:5  x:y:3") == [("r0.2", 5), ("x:y", 3)]
    for bad in ("a64", "a:", ":5", "a:x", 5):
        with pytest.raises(TraceError):
            parse_compact_schedule(bad)
    assert step_schedule({"sched": "a:2"}) == [("a", 2)]


def test_compact_trace_agrees_with_full_trace(multiturn, tmp_path):
    c = compact(multiturn)
    assert compare_traces(multiturn, c) == []
    assert compare_traces(c, multiturn) == []
    c["steps"][21]["sched"] = c["steps"][21]["sched"].replace("t2:38", "t2:37")
    d = first_difference(multiturn, c)
    assert (d.step, d.field) == (21, "scheduled")
    # stored gzipped
    p = tmp_path / "multiturn.compact.json.gz"
    p.write_bytes(gzip.compress(json.dumps(compact(multiturn)).encode()))
    assert compare_traces(load_trace(p), multiturn) == []


@pytest.mark.parametrize(
    "obj, message",
    [
        ([], "a trace must be a JSON object"),
        ({"steps": []}, "missing key 'requests'"),
        ({"steps": {}, "requests": {}}, "'steps' must be a list"),
        ({"steps": [{"step": "0"}], "requests": {}}, "steps[0].step: must be an integer"),
        ({"steps": [{"step": 0}], "requests": {}}, "steps[0]: needs 'scheduled' or the compact 'sched'"),
        ({"steps": [{"step": 0, "sched": "a"}], "requests": {}}, "steps[0].sched: bad compact schedule entry"),
        ({"steps": [{"step": 0, "scheduled": [{"id": 1}]}], "requests": {}}, "steps[0].scheduled[0]"),
        ({"steps": [{"step": 0, "scheduled": []}], "requests": {}}, "missing free_blocks_after_schedule"),
        ({"steps": [{"step": 0, "scheduled": [], "preempted": [1]}], "requests": {}}, "steps[0].preempted: must be a list of ids"),
        ({"steps": [], "requests": {"a": 1}}, "requests.a: must be an object"),
        # fields `serq oracle render` shows: a wrong type is a TraceError, not a TypeError there
        ({"steps": [{"step": 0, "scheduled": [], "arrived": [1.5]}], "requests": {}}, "steps[0].arrived: must be a list of ids"),
        ({"steps": [{"step": 0, "scheduled": [], "time": "0.1"}], "requests": {}}, "steps[0].time: must be a number"),
        ({"steps": [{"step": 0, "scheduled": [{"id": "a", "tokens": 1, "kind": []}]}], "requests": {}},
         "kind must be a string"),
        ({"steps": [{"step": 0, "scheduled": [{"id": "a", "tokens": 1, "computed_before": "3"}]}], "requests": {}},
         "computed_before an integer"),
    ],
)
def test_bad_traces_are_rejected_with_a_message(tmp_path, obj, message):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(obj))
    with pytest.raises(TraceError) as info:
        load_trace(p)
    assert message in str(info.value)


# --------------------------------------------------------------------------------------------
# rendering


def test_render_step(multiturn):
    line = render_step(_step(multiturn, 21))
    assert line.startswith("  21 t=0.2289 tok=39 run=2 wait=0 free=112/112 | bg:1 +t2:38(c112) arr=t2")
    line = render_step(_step(multiturn, 19))
    assert line.endswith("fin=t1(length,20)")
    pre = load_trace(VECTORS / "preempt.trace.json")
    assert "^r2:113 ^r3:81 +r4:62" in render_step(_step(pre, 64))
    assert "PREEMPT=r3" in render_step(_step(pre, 17))
    assert render_step(compact(multiturn)["steps"][21]).endswith("| bg:1 t2:38 arr=t2")
    assert len(render_trace(multiturn).splitlines()) == len(multiturn["steps"])
    assert len(render_trace(multiturn, range(0, 5)).splitlines()) == 5


# --------------------------------------------------------------------------------------------
# the command line (registered on a private parser so only this package is involved)


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="serq")
    sub = parser.add_subparsers(dest="command")
    oracle_cli.register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_compare_exit_codes(tmp_path, capsys, preempt):
    a = str(VECTORS / "preempt.trace.json")
    assert run_cli(["oracle", "compare", a, a]) == 0
    assert "agree" in capsys.readouterr().out
    b = copy.deepcopy(preempt)
    b["requests"]["r4"]["finish_step"] = 1
    _step(b, 64)["scheduled"][2]["tokens"] = 60
    bp = tmp_path / "b.json"
    bp.write_text(json.dumps(b))
    assert run_cli(["oracle", "compare", a, str(bp)]) == 1
    out = capsys.readouterr().out
    assert "first difference: step 64: scheduled differs" in out
    assert "^r2:113 ^r3:81 +r4:60" in out  # the context rendering of B
    assert run_cli(["oracle", "compare", "--all", a, str(bp)]) == 1
    assert "request 'r4': finish_step differs" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert run_cli(["oracle", "compare", a, str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not valid JSON" in err and "Traceback" not in err
    assert run_cli(["oracle", "compare", a, str(tmp_path / "nope.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_cli_vllm_without_env_says_how_to_build_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SERQ_VLLM_VENV", str(tmp_path / "no-venv"))
    assert run_cli(["oracle", "vllm", str(VECTORS / "caps.scenario.json")]) == 2
    err = capsys.readouterr().err
    assert "tools/vllm_oracle/setup.sh" in err and "Traceback" not in err


def test_cli_vllm_rejects_a_bad_scenario_first(tmp_path, capsys):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"requests": [{"prompt_len": -5}]}))
    assert run_cli(["oracle", "vllm", str(p)]) == 2
    assert "requests[0].prompt_len: must be a non-negative integer, got -5" in capsys.readouterr().err


def test_cli_render_and_bare_oracle(capsys):
    assert run_cli(["oracle", "render", str(VECTORS / "caps.trace.json"), "--steps", "8:8"]) == 0
    assert capsys.readouterr().out.strip().startswith("8 t=0.1206 tok=60")
    assert run_cli(["oracle"]) == 2


def test_difference_str():
    d = Difference("request", request="x", field="finish_step", a=1, b=2)
    assert str(d) == "request 'x': finish_step differs: A 1 vs B 2"

"""The spec against exact answers it was not written from: the seven vLLM oracle scenarios
(docs/language.md §11.11 item 4, via examples/oracle/vllm_request.sq) and the step function's contract."""

from __future__ import annotations

import copy
import json
import re
from fractions import Fraction
from pathlib import Path

import pytest

from serq.frontend import compile_source, load_program
from serq_spec import backends
from serq_spec.program import Program
from serq_spec.step import initial, run, step
from serq_spec.workload import Workload

REPO = Path(__file__).resolve().parent.parent
ORACLE = REPO / "examples" / "oracle" / "vllm_request.sq"
SCENARIOS = sorted(p.name for p in (REPO / "examples" / "oracle" / "data").glob("*.csv"))


def empty_sessions(n: int) -> Workload:
    return Workload.replay({"format": "serq-sessions/1", "seed": 0,
                            "sessions": [{"serial": i, "init": [], "turns": [[]], "session": []} for i in range(n)]})


def header(csv: Path):
    lines = csv.read_text().splitlines()
    sets = dict(re.findall(r"--set (\w+)=(\S+)", next(x for x in lines if "run:" in x)))
    answer = next(x for x in lines if "answer" in x)
    def nums(key):
        return [int(x) for x in re.search(key + r" ([\d, ]+)", answer).group(1).replace(",", " ").split()]

    return sets, nums("first"), nums("done"), nums("preemptions")[0]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_vllm_oracle_scenario(scenario):
    """first/done steps and preemptions equal the real vLLM scheduler's (docs/language.md §11.11 item 4)."""
    csv = ORACLE.parent / "data" / scenario
    sets, first, done, preemptions = header(csv)
    text = ORACLE.read_text().replace('"data/preempt.csv"', f'"data/{scenario}"')
    prog = Program(compile_source(text, str(ORACLE), sets), "vllm_request.sq")
    n = int(sets["requests"])
    prog.workload_data = empty_sessions(n)
    obs: dict = {}

    def collect(cfg, rec, k):
        for name, serial, _t, _time, value in rec["observations"]:
            obs.setdefault(name, {}).setdefault(serial, []).append(value)
    cfg = run(prog, on_step=collect)
    assert [int(obs["first_step"][i][0]) for i in range(n)] == first
    assert [int(obs["last_step"][i][0]) for i in range(n)] == done
    assert cfg.pools[0].preemptions == preemptions


def small_program():
    prog = Program(load_program(str(REPO / "vectors" / "spec" / "s1111_preemption" / "program.sq"), {}), workload=empty_sessions(2))
    return prog


def test_step_is_a_function():
    """step(config) returns a new Config and leaves its argument untouched; final configs are fixed points."""
    cfg, _ = initial(small_program())
    before = cfg.canonical()
    nxt, rec = step(cfg)
    assert cfg.canonical() == before
    assert nxt.canonical() != before and rec["event"].kind == "iter_end"
    again, _ = step(cfg)
    assert again.canonical() == nxt.canonical()
    while True:
        nxt2, rec = step(nxt)
        if rec is None:
            assert nxt2 is nxt
            break
        nxt = nxt2
    assert not nxt.events


def test_config_is_canonical_exact_json():
    """No float anywhere; times are "p/q" strings, tokens and counters ints."""
    cfg = run(small_program(), max_steps=20)
    text = cfg.canonical()
    data = json.loads(text)
    assert "." not in "".join(x for x in re.findall(r'"[^"]*"', text) if "/" in x)
    assert isinstance(data["counters"]["next_seq"], int)
    assert isinstance(data["pools"][0]["used"], int)
    assert isinstance(data["now"], str)
    assert copy.deepcopy(cfg).canonical() == text


def test_backends():
    assert backends() == ["python"]


def test_transcendental_rounding_is_exact_and_deterministic():
    from serq_spec import values as V
    assert V.sqrt_v(Fraction(9, 4)) == Fraction(3, 2)
    assert V.pow_v(Fraction(2), Fraction(10)) == 1024
    r = V.sqrt_v(Fraction(2))
    assert isinstance(r, Fraction) and abs(r * r - 2) < Fraction(1, 10 ** 38)
    assert V.ln_v(V.exp_v(Fraction(1))) - 1 < Fraction(1, 10 ** 38)
    assert V.exp_v(Fraction(1)) == V.exp_v(Fraction(1))


# docs/language.md §11.11 item 6: further exact facts (unit cost), through the same oracle program.
FACTS = [
    # (name, sets, requests [(prompt, out)], first, done, preemptions, prefilled per request or None)
    ("growth_preempts_last", {"budget": "100", "blocks": "10"}, [(80, 20), (80, 3)],
     [1, 21], [20, 23], 1, None),
    ("resumes_from_outputs", {"budget": "1000", "blocks": "10"}, [(64, 20), (48, 40)],
     [1, 1], [20, 43], 1, [["64"], ["48", "65"]]),
    ("resumes_from_outputs_cached", {"budget": "1000", "blocks": "10", "caching": "1"}, [(64, 20), (48, 40)],
     [1, 1], [20, 43], 1, [["64"], ["48", "1"]]),
    ("request_cap", {"budget": "1024", "blocks": "999", "max_seqs": "2"}, [(16, 5)] * 4,
     [1, 1, 6, 6], [5, 5, 10, 10], 0, None),
    ("chunked_alone", {"budget": "1024", "blocks": "999"}, [(3000, 2)], [3], [4], 0, None),
]


@pytest.mark.parametrize("name, sets, requests, first, done, preemptions, prefilled", FACTS, ids=[f[0] for f in FACTS])
def test_vllm_fact(tmp_path, name, sets, requests, first, done, preemptions, prefilled):
    csv = tmp_path / "t.csv"
    csv.write_text("session,turn,new,out,think\n" + "".join(f"{i},1,{p},{o},0\n" for i, (p, o) in enumerate(requests)))
    text = ORACLE.read_text().replace('"data/preempt.csv"', json.dumps(str(csv)))
    prog = Program(compile_source(text, str(ORACLE), dict(sets, requests=str(len(requests)))), "vllm_request.sq", workload=empty_sessions(len(requests)))
    obs: dict = {}

    def collect(cfg, rec, k):
        for n, serial, _t, _time, value in rec["observations"]:
            obs.setdefault(n, {}).setdefault(serial, []).append(str(value))
    cfg = run(prog, on_step=collect)
    n = len(requests)
    assert [int(obs["first_step"][i][0]) for i in range(n)] == first
    assert [int(obs["last_step"][i][0]) for i in range(n)] == done
    assert cfg.pools[0].preemptions == preemptions
    if prefilled is not None:
        assert [obs["prefilled"][i] for i in range(n)] == prefilled

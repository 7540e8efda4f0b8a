"""serq_fast engine: the exact vectors of docs/language.md §11.11 and reproducibility (hand-built IR)."""

from __future__ import annotations

import json

import pytest

from serq_fast import report
from serq_fast.step import Sim
from serq_fast.irbuild import N, Bin, Cond, Program, seed_vllm_ir, vllm_engine


def _vector_program(turns, *, budget, blocks, max_seqs=4, n=1, tool=None):
    """batch(n) sessions; turn k (1-based) has prompt/output `turns[k-1]`; unit iteration cost."""
    p = Program()
    call, kv, reqs, eng = vllm_engine(p, budget=budget, blocks=blocks, max_seqs=max_seqs, cost=N(1))
    A = p.A
    tool_stage = p.stage({"name": "tool", "kind": "delay"})
    server = p.block(call(A("pp"), A("oo")))

    def pick(i):
        # nested conditionals on turn_no
        e_p, e_o = N(turns[-1][0]), N(turns[-1][1])
        for k in range(len(turns) - 2, -1, -1):
            c = Bin("==", A("turn_no"), N(k + 1))
            e_p, e_o = Cond(c, N(turns[k][0]), e_p), Cond(c, N(turns[k][1]), e_o)
        return e_p, e_o

    e_p, e_o = pick(0)
    turn = p.block([p.set("pp", e_p), p.set("oo", e_o)])
    stmts = [{"op": "turn"}]
    for _ in turns[1:]:
        stmts += [p.run(tool_stage, N(tool)), {"op": "turn"}]
    session = p.block(stmts + [{"op": "end"}])
    return p.ir({"kind": "batch", "n": n}, session, server=server, turn=turn)


def _obs(sim, name):
    st = sim.obs_stats[sim.observe_names.index(name)]
    return st.exact


def test_vector_one_request():
    sim = Sim(_vector_program([(8, 3)], budget=8, blocks=100)).run()
    assert sim.client["ttft"].exact == [1.0]
    assert sim.client["response"].exact == [3.0]
    assert sim.client["tpot"].exact == [1.0]
    assert _obs(sim, "prefill_tokens") == [8.0]


def test_vector_two_turns_prefix_cache():
    sim = Sim(_vector_program([(100, 10), (160, 10)], budget=64, blocks=100, tool=5)).run()
    assert sim.client["ttft"].exact == [2.0, 1.0]
    assert sim.client["response"].exact == [11.0, 10.0]
    assert _obs(sim, "prefill_tokens") == [100.0, 64.0]


def test_vector_preemption():
    sim = Sim(_vector_program([(16, 30)], budget=64, blocks=4, n=2)).run()
    assert sim.client["ttft"].exact == [1.0, 1.0]
    assert sorted(sim.client["response"].exact) == [30.0, 43.0]
    assert sorted(sim.client["tpot"].exact) == [1.0, pytest.approx(42 / 29)]
    assert sorted(_obs(sim, "prefill_tokens")) == [16.0, 16.0, 17.0]
    kv = sim.pools[0]
    assert kv.preemptions == 1 and kv.stuck == 0


def test_same_seed_same_json():
    ir = seed_vllm_ir()
    a = report.to_json(report.build(Sim(ir, seed=3, horizon=60, warmup=6).run()))
    b = report.to_json(report.build(Sim(ir, seed=3, horizon=60, warmup=6).run()))
    c = report.to_json(report.build(Sim(ir, seed=4, horizon=60, warmup=6).run()))
    assert a == b and a != c
    json.loads(a)


def _close_reports(a, b, path=""):
    """The first difference of two report trees beyond 1e-9 relative in a float (else None)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return path, sorted(a), sorted(b)
        return next((d for k in sorted(a) if (d := _close_reports(a[k], b[k], f"{path}.{k}"))), None)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return path, len(a), len(b)
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := _close_reports(x, y, f"{path}[{i}]"))), None)
    if isinstance(a, float) and isinstance(b, float) and a != b:
        return None if abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b)) else (path, a, b)
    return None if a == b else (path, a, b)


FF_SETTINGS = [{}, {"blocks": 2500}, {"blocks": 400, "Lambda": 1.0, "chunk": 64}]


def _seed_report(settings):
    kw = {"blocks": settings.get("blocks", 10000), "Lambda": settings.get("Lambda", 0.3),
          "chunk": settings.get("chunk", float("inf"))}
    return report.build(Sim(seed_vllm_ir(**kw), seed=2, horizon=120, warmup=12).run())


@pytest.mark.parametrize("settings", FF_SETTINGS)
def test_fast_forward_is_exact(monkeypatch, settings):
    """The step-by-step decode fast-forward (docs/fast.md, `SERQ_FAST_NO_ADVANCE`) changes nothing
    in the report, byte for byte."""
    monkeypatch.setenv("SERQ_FAST_NO_ADVANCE", "1")
    a = report.to_json(_seed_report(settings))
    monkeypatch.setenv("SERQ_FAST_NO_FF", "1")
    b = report.to_json(_seed_report(settings))
    assert a == b


@pytest.mark.parametrize("settings", FF_SETTINGS)
def test_advance_agrees_with_every_step(monkeypatch, settings):
    """The advance across block boundaries (serq_fast/advance.py) sums each stair of the cost in
    closed form, so the report moves by rounding only: every float within 1e-9 relative of the
    step-by-step run, everything else equal (docs/fast.md "Advance across block boundaries")."""
    a = _seed_report(settings)
    monkeypatch.setenv("SERQ_FAST_NO_FF", "1")
    b = _seed_report(settings)
    assert _close_reports(json.loads(report.to_json(a)), json.loads(report.to_json(b))) is None


def _live_and_replay(k: int = 12):
    """The seed program (exp, uniform and bernoulli draws) run live and replaying its sample."""
    sample = pytest.importorskip("serq_spec.sample")
    from pathlib import Path

    from serq.frontend import load_program

    ir = load_program(str(Path(__file__).resolve().parents[1] / "examples" / "multi-turn" / "vllm.sq"),
                      {"blocks": "2500", "Lambda": "2"})
    data = sample.sample(ir, 7, k, "vllm.sq")
    live = Sim(ir, seed=7, horizon=float("inf"), warmup=0.0, arrivals=k).run()
    replay = Sim(ir, seed=7, horizon=float("inf"), warmup=0.0, replay=data).run()
    return live, replay


def test_live_run_equals_replay_of_its_sample():
    """docs/sessions.md: a live fast run and the replay of the sample of the same seed agree
    (the same streams, the same 12-digit values); the live draws go through the fast path of
    `sources.LiveSource`, the sample through `serq.draws.draw_float`."""
    k = 12
    live, replay = _live_and_replay(k)
    for name in ("ttft", "response", "tpot"):
        a, b = live.client[name].exact, replay.client[name].exact
        assert len(a) == len(b) > 0
        assert a == pytest.approx(b, rel=1e-9)
    assert live.narrivals == replay.narrivals == k


def test_draws_fast_path_fault_is_caught(monkeypatch):
    """The seeded fault `draw_fast_uniform` (a uniform draw of the fast path mirrored, hi − (hi − lo)·U)
    makes the live run differ from the replay of its sample."""
    monkeypatch.setenv("SERQ_FAST_FAULT", "draw_fast_uniform")
    live, replay = _live_and_replay()
    monkeypatch.delenv("SERQ_FAST_FAULT")
    assert live.client["response"].exact != pytest.approx(replay.client["response"].exact, rel=1e-9)


def test_reuse_inf_keeps_the_whole_entry():
    """`reuse (inf)` keeps all of the own prefix (docs/language.md §11.4); it once crashed."""
    ir = _vector_program([(100, 10), (160, 10)], budget=64, blocks=100, tool=5)
    for blk in ir["blocks"]:
        for st in blk:
            if st["op"] == "hold":
                st["reuse"] = N(float("inf"))
    sim = Sim(ir).run()
    assert _obs(sim, "prefill_tokens") == [100.0, 64.0]

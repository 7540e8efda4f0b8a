"""Queueing theory checks of serq_fast (docs/language.md §13): each run's mean must lie within
K_CI batch-means half-widths of the closed form. Programs are built as IR directly
(serq_fast.irbuild) so these checks do not depend on the front-end; fixed seeds make them
deterministic. Total time well under two minutes.
"""

from __future__ import annotations

import math

import pytest

from serq_fast.step import Sim
from serq_fast.irbuild import N, Bin, Ctx, Draw, Fn, Program, vllm_engine

K_CI = 2.5  # tolerance in half-widths of the run's own 95 % CI


def _single_turn(stage: dict, service, lam, *, hold_pool=None):
    p = Program()
    st = p.stage(stage)
    A = p.A
    body = [p.set("t_in", Ctx("now")), p.set("need", service)]
    if hold_pool is not None:
        pool = p.pool("slots", hold_pool)
        inner = p.block([p.observe("wait", Bin("-", Ctx("now"), A("t_in"))), p.run(st, A("need"))])
        body.append({"op": "hold", "pools": [{"pool": {"base": pool, "count": 1, "index": None},
                                               "units": N(1), "reserve": None}],
                     "reuse": None, "bindings": [], "body": inner, "cache": None, "request": None})
    else:
        body.append(p.run(st, A("need")))
    body.append(p.observe("sojourn", Bin("-", Ctx("now"), A("t_in"))))
    server = p.block(body)
    session = p.block([{"op": "turn"}, {"op": "end"}])
    return p.ir({"kind": "poisson", "rate": str(lam)}, session, server=server)


def _check(sim, name, theory):
    st = sim.obs_stats[sim.observe_names.index(name)]
    ci = st.ci()
    assert ci is not None
    assert abs(st.mean - theory) <= K_CI * ci, f"{name}: {st.mean:.4f} ± {ci:.4f} vs theory {theory:.4f}"
    return st.mean, ci


def test_mm1():
    ir = _single_turn({"name": "desk", "kind": "fifo", "servers": 1}, Draw("exp", N(1)), "4/5")
    sim = Sim(ir, seed=1, horizon=100_000, warmup=10_000).run()
    _check(sim, "sojourn", 1 / (1 - 0.8))


@pytest.mark.parametrize("law,es2", [
    ("det", 1.0),
    ("erlang4", 1.25),
    ("h2", 5.0),  # cv² = 4
])
def test_mg1_pollaczek_khinchine(law, es2):
    lam = 0.7
    service = {"det": Draw("det", N(1)), "erlang4": Draw("erlang", N(4), N(1)),
               "h2": Draw("h2", N(1), N(4))}[law]
    ir = _single_turn({"name": "desk", "kind": "fifo", "servers": 1}, service, "7/10")
    horizon = 400_000 if law == "h2" else 100_000
    sim = Sim(ir, seed=2, horizon=horizon, warmup=horizon / 10).run()
    _check(sim, "sojourn", 1.0 + lam * es2 / (2 * (1 - lam)))


@pytest.mark.parametrize("law", ["det", "exp", "h2", "h2_cv9"])
def test_mg1_ps_insensitivity(law):
    # cv² 0, 1, 4 and 9: the mean sojourn 1 / (1 - rho) does not depend on the service law
    service = {"det": Draw("det", N(1)), "exp": Draw("exp", N(1)), "h2": Draw("h2", N(1), N(4)),
               "h2_cv9": Draw("h2", N(1), N(9))}[law]
    ir = _single_turn({"name": "cpu", "kind": "ps", "capacity": N(1)}, service, "7/10")
    sim = Sim(ir, seed=3, horizon=150_000, warmup=15_000).run()
    _check(sim, "sojourn", 1.0 / (1 - 0.7))


def _erlang_c(c: int, a: float) -> float:
    s = sum(a ** k / math.factorial(k) for k in range(c))
    last = a ** c / math.factorial(c) * c / (c - a)
    return last / (s + last)


def test_mmc_pool_of_slots():
    c, lam = 3, 2.4
    ir = _single_turn({"name": "work", "kind": "delay"}, Draw("exp", N(1)), "12/5", hold_pool=c)
    sim = Sim(ir, seed=4, horizon=30_000, warmup=3_000).run()
    wq = _erlang_c(c, lam) / (c - lam)
    _check(sim, "wait", wq)
    _check(sim, "sojourn", wq + 1.0)


def _mva(n_users: int, s: float, z: float) -> float:
    q = 0.0
    r = s
    for n in range(1, n_users + 1):
        r = s * (1 + q)
        x = n / (r + z)
        q = x * r
    return r


def test_machine_repairman_mva():
    n_users, s, z = 10, 1.0, 8.0
    p = Program()
    cpu = p.stage({"name": "cpu", "kind": "fifo", "servers": 1})
    tool = p.stage({"name": "tool", "kind": "delay"})
    A = p.A
    server = p.block([p.set("t_in", Ctx("now")), p.run(cpu, Draw("exp", N(s))),
                      p.observe("response_time", Bin("-", Ctx("now"), A("t_in")))])
    body = p.block([p.run(tool, Draw("exp", N(z))), {"op": "turn"}])
    session = p.block([{"op": "loop", "body": body}, {"op": "end"}])
    ir = p.ir({"kind": "closed", "n": n_users}, session, server=server)
    sim = Sim(ir, seed=5, horizon=150_000, warmup=15_000).run()
    _check(sim, "response_time", _mva(n_users, s, z))


def test_vllm_batch_one_equals_fifo():
    """An engine with one request slot, no cache, cost a·tokens serves each request for
    a·(prompt + output − 1) seconds: exactly a FIFO server with those service times. With the
    stream separation of §11.10 both programs see the same arrivals and the same marks."""
    a, lam = 1e-3, 2.0

    def workload(p):
        A = p.A
        turn = p.block([p.set("p_in", Fn("ceil", Draw("uniform", N(100), N(500)))),
                        p.set("q_out", Bin("+", Fn("floor", Draw("exp", N(100))), N(1)))])
        session = p.block([{"op": "turn"}, {"op": "end"}])
        return A, turn, session

    p = Program()
    call, kv, reqs, eng = vllm_engine(p, budget=8192, blocks=4096, max_seqs=1,
                                      cost=Bin("*", N(a), {"k": "eng", "name": "batch.tokens"}),
                                      preempt="none", cache=False)
    A, turn, session = workload(p)
    server = p.block([p.set("t_in", Ctx("now"))] + call(A("p_in"), A("q_out"))
                     + [p.observe("sojourn", Bin("-", Ctx("now"), A("t_in")))])
    ir_eng = p.ir({"kind": "poisson", "rate": "2"}, session, server=server, turn=turn)

    q = Program()
    desk = q.stage({"name": "desk", "kind": "fifo", "servers": 1})
    A, turn, session = workload(q)
    server = q.block([q.set("t_in", Ctx("now")),
                      q.run(desk, Bin("*", N(a), Bin("-", Bin("+", A("p_in"), A("q_out")), N(1)))),
                      q.observe("sojourn", Bin("-", Ctx("now"), A("t_in")))])
    ir_fifo = q.ir({"kind": "poisson", "rate": "2"}, session, server=server, turn=turn)

    e = Sim(ir_eng, seed=6, horizon=3_000, warmup=300).run()
    f = Sim(ir_fifo, seed=6, horizon=3_000, warmup=300).run()
    se = e.obs_stats[e.observe_names.index("sojourn")]
    sf = f.obs_stats[f.observe_names.index("sojourn")]
    assert se.n == sf.n
    assert se.mean == pytest.approx(sf.mean, rel=1e-9)
    # and both agree with Pollaczek–Khinchine for S = a·(p + q − 1)
    ps = [math.ceil(100 + 400 * (i + 0.5) / 4000) for i in range(4000)]
    ep = sum(ps) / len(ps)
    ep2 = sum(x * x for x in ps) / len(ps)
    # q = floor(exp(100)) + 1 is geometric on 1, 2, …: mean 1/(1 − r), r = e^(−1/100)
    r = math.exp(-1 / 100)
    eq = 1 / (1 - r)
    eq2 = (1 + r) / (1 - r) ** 2
    es = a * (ep + eq - 1)
    es2 = a * a * (ep2 + eq2 + 1 + 2 * ep * eq - 2 * ep - 2 * eq)
    rho = lam * es
    _check(f, "sojourn", es + lam * es2 / (2 * (1 - rho)))


# ------------------------------------------------------------------ the shipped example programs

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("path,sets,name,theory,horizon", [
    ("single-turn/mm1.sq", {}, "sojourn", 5.0, 60_000),
    ("single-turn/ps.sq", {"lambda": "0.7"}, "sojourn", 1 / 0.3, 60_000),   # insensitive to cv² = 4
    ("single-turn/mmc.sq", {}, "wait", _erlang_c(3, 2.4) / (3 - 2.4), 15_000),
    ("multi-turn/closed.sq", {}, "response_time", _mva(10, 1.0, 8.0), 60_000),
])
def test_example_programs_match_theory(path, sets, name, theory, horizon):
    from serq.frontend import load_program

    ir = load_program(str(EXAMPLES / path), sets)
    sim = Sim(ir, seed=11, horizon=horizon, warmup=horizon / 10).run()
    _check(sim, name, theory)

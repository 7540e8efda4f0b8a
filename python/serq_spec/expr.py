"""Evaluation of IR expressions (docs/ir.md "Expressions") over exact values (docs/language.md §3–§5).

An `Env` says in which moment an expression is read: the session whose attributes it sees, the
engine and iteration for engine values, the resident for per-request keys, the context
variables of that moment, and the draw stream a draw comes from.

What an expression reads of the machine is here too, because it is mutually recursive with
`evaluate` (as in SerqLang/Eval.lean): the engine values and the budget moment (§4.5, §11.6;
`budget_left(E)` evaluates E's `tokens cap` and `let`s), and the stage observables with the ps
virtual clock (§4.4, §11.5; `work(s)` of a ps stage advances its clock, which evaluates the
stage's capacity). engine.py and stages.py, above this module, use them.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable, Iterator, Optional, cast

from serq.errors import number_text
from serq.exact import index_not_in_range, speculate_not_whole
from serq.irfile import field_at
from serq.wire import Value

from . import values as V
from .config import Config, EngineEstimates, Estimates, IterCtx, Job, Session, hold_of, thread
from .errors import At, SpecError
from .program import Program
from .values import ZERO, ONE


class Env:
    __slots__ = ("cfg", "session", "stream", "at", "engine", "ictx", "job", "ctx", "admit_left", "what")

    def __init__(self, cfg: Config, session: Optional[Session] = None, stream: tuple = ("session",), at: At = None,
                 engine: Optional[int] = None, ictx: Optional[IterCtx] = None, job: Optional[Job] = None,
                 ctx: Optional[dict[str, Value]] = None, admit_left: Optional[tuple[int, Value]] = None,
                 what: Optional[str] = None) -> None:
        self.cfg = cfg
        self.session = session
        self.stream = stream
        self.at = at
        self.engine = engine
        self.ictx = ictx
        self.job = job
        self.ctx = ctx or {}
        self.admit_left = admit_left      # (engine, tokens left) inside that engine's admission
        self.what = what                  # names the expression in errors when there is no `at`


def b(x: bool) -> Fraction:
    return ONE if x else ZERO


def resolve_ref(env: Env, ref: dict) -> int:
    """`{base, count, index}` → an index; an index out of range is a run-time error (§11.9)."""
    if ref.get("index") is None:
        return ref["base"]
    i = evaluate(ref["index"], env)
    if V.is_inf(i) or i.denominator != 1 or not 0 <= i < ref["count"]:
        raise SpecError(index_not_in_range(i, ref["count"]), env.at, env.cfg.program.files)
    return ref["base"] + int(i)


_BIN: dict[str, Callable[[Value, Value], Value]] = {
    "+": V.add, "-": V.sub, "*": V.mul, "/": V.div, "^": V.pow_v,
    "<": lambda a, c: b(a < c), "<=": lambda a, c: b(a <= c), ">": lambda a, c: b(a > c),
    ">=": lambda a, c: b(a >= c), "==": lambda a, c: b(a == c), "!=": lambda a, c: b(a != c),
}

_FN1: dict[str, Callable[[Any], Value]] = {"abs": abs, "floor": V.floor_v, "ceil": V.ceil_v, "sqrt": V.sqrt_v, "exp": V.exp_v, "ln": V.ln_v}


def evaluate(e: dict, env: Env) -> Value:
    """The value of expression `e` in `env` (exact; errors instead of NaN).

    An arithmetic error (values.py raises it without a location) gets the location of the
    statement or declaration the expression belongs to (`env.at`; docs/ir.md "Positions") and,
    for an expression outside a statement (engine items, keys, capacities, gauges), the name of
    what was being evaluated."""
    try:
        return _evaluate(e, env)
    except SpecError as exc:
        if type(exc) is SpecError and not getattr(exc, "named", False) and (exc.at is None or env.what):
            if env.what:
                exc.message = f"{env.what}: {exc.message}"
                exc.named = True
            if exc.at is None and env.at:
                exc.at, exc.files = env.at, env.cfg.program.files
            exc.args = (exc.render(),)
        raise


def _evaluate(e: dict, env: Env) -> Value:
    k = e["k"]
    if k == "num":
        return V.value_from_wire(e["v"])
    if k == "attr":
        s = env.session
        return s.attrs[e["slot"]] if s is not None else ZERO
    if k == "bin":
        op = e["op"]
        if op == "&&":
            return b(V.nz(evaluate(e["a"], env)) and V.nz(evaluate(e["b"], env)))
        if op == "||":
            return b(V.nz(evaluate(e["a"], env)) or V.nz(evaluate(e["b"], env)))
        return _BIN[op](evaluate(e["a"], env), evaluate(e["b"], env))
    if k == "un":
        a = evaluate(e["a"], env)
        return V.neg(a) if e["op"] == "neg" else b(not V.nz(a))
    if k == "cond":
        return evaluate(e["a"], env) if V.nz(evaluate(e["c"], env)) else evaluate(e["b"], env)
    if k == "fn":
        f = e["f"]
        args = [evaluate(a, env) for a in e["args"]]
        if f == "min":
            return V.min_v(*args)
        if f == "max":
            return V.max_v(*args)
        if f == "pow":
            return V.pow_v(*args)
        return _FN1[f](args[0])
    if k == "ctx":
        name = e["name"]
        if name == "now":
            return env.cfg.now
        if name not in env.ctx:
            raise SpecError(f"context variable `{name}` read outside its moment", env.at, env.cfg.program.files)
        return env.ctx[name]
    if k == "draw":
        args = [evaluate(a, env) for a in e["args"]]
        return env.cfg.program.workload_data.take(env.cfg, env.session, env.stream, e["dist"], args, env.at)
    if k == "local":
        if env.ictx is None:
            raise SpecError("a schedule `let` read outside its schedule", env.at, env.cfg.program.files)
        return env.ictx.locals[e["index"]]
    if k == "reg":
        return env.cfg.stages[e["stage"]].registers[e["index"]]
    if k == "eng":
        return engine_value(env, e["name"])
    if k == "job":
        return job_value(env, e["name"])
    if k == "obs":
        return observable(e, env)
    raise SpecError(f"unknown expression kind {k!r}", env.at, env.cfg.program.files)


def observable(e: dict, env: Env) -> Value:
    """The observables of docs/language.md §4.4."""
    cfg = env.cfg
    f = e["f"]
    if "pool" in e and e.get("pool") is not None:
        p = resolve_ref(env, e["pool"])
        st = cfg.pools[p]
        if f == "used":
            return Fraction(st.used)
        if f == "free":
            return V.sub(cfg.program.caps[p], Fraction(st.used))
        if f == "cachedin":
            if env.session is None:
                return ZERO
            if st.content is not None:   # the hit of this session's attempt, else 0 (docs/content.md §3)
                att = cfg.attempt
                if att is None or att[0] != env.session.tid:
                    return ZERO
                return Fraction(att[1].get(p, 0))
            # the session's prefix on p and, contiguous with it, the rest on p's `spill` tiers (§11.8.1)
            return Fraction(sum(x.size for q in [p] + cfg.program.tiers_below(p) for x in cfg.pools[q].entries
                                if x.owner == env.session.tid))
        if f == "holders":
            return Fraction(len(st.holders))
        if f == "queued":
            return Fraction(len(st.queue))
    s = resolve_ref(env, e["stage"])
    if f == "queue":
        return Fraction(present(cfg, s))
    if f == "busy":
        return Fraction(busy(cfg, s))
    if f == "work":
        return work(cfg, s)
    if f in ("est_lambda", "est_rho", "est_wait", "price"):
        est = cfg.stages[s].est
        if est is None:   # the linker marks every stage an estimator reads
            raise SpecError(f"{f}({cfg.program.stages[s]['name']}): the stage keeps no estimates", env.at,
                            cfg.program.files)
        if f == "est_lambda":
            return est_lambda(est)
        if f == "est_rho":
            return est_rho(est)
        if f == "est_wait":
            return est_wait(est)
        return price(est, evaluate(e["args"][0], env), evaluate(e["args"][1], env))
    if f == "budget_left":
        if env.admit_left is not None and env.admit_left[0] == s:
            left = env.admit_left[1]
            return left if V.is_inf(left) else Fraction(left)   # `tokens cap inf`: inf
        if budget_draws(cfg.program, s):
            raise SpecError(f"budget_left({cfg.program.stages[s]['name']}) outside its admission re-reads the "
                            "engine's `tokens cap` and `let`s, which draw: draws are forbidden where the "
                            "machine re-reads an expression (docs/language.md §4.3)", env.at, cfg.program.files)
        return budget_left_outside(cfg, s)
    if f in ("running_served", "running_chunks"):
        return running_served(env, s, f == "running_chunks")
    raise SpecError(f"observable {f}() is not supported", env.at, cfg.program.files)


def running_served(env: Env, e: int, chunks: bool) -> Value:
    """`running_served(E)` / `running_chunks(E)` (docs/language.md §7.3): the batch entries of E's
    iteration being formed whose request it did not admit (its running requests served so far),
    or of those the ones serving a prefill (plain) run; 0 outside E's schedule (its admissions and
    the statements the admitted sessions run then included)."""
    ictx = env.cfg.stages[e].forming
    if ictx is None:
        return Fraction(0)
    return Fraction(sum(1 for a in ictx.assign
                        if a.serial not in ictx.fresh and (not chunks or a.mode != "decode")))


RHO_CAP = Fraction(99, 100)
#: Every estimate is read on this grid (docs/spec.md "Online estimates"): rounded to the nearest
#: multiple of 1/ESTIMATE_GRID, ties to even.
ESTIMATE_GRID = 2 ** 32


def on_grid(x: Fraction) -> Fraction:
    """x rounded to the nearest multiple of 2^-32, ties to even (`Fraction.__round__`). An
    estimator is a measurement: read at a fixed precision, an estimate that feeds back into the
    times it measures keeps the exact arithmetic bounded (docs/spec.md "Online estimates")."""
    return Fraction(round(x * ESTIMATE_GRID), ESTIMATE_GRID)


def unrounded_lambda(est: Estimates | EngineEstimates) -> Fraction:
    """λ̂ unrounded: 1 / the mean gap between starts (of an engine: admissions); 0 before a
    positive mean gap (no second start yet, or every start so far at one instant)."""
    return ZERO if est.gap is None or est.gap == 0 else V.finite(V.div(ONE, est.gap), "est_lambda")


def unrounded_rho(est: Estimates | EngineEstimates) -> Fraction:
    """ρ̂ unrounded and uncapped: λ̂ · Ŝ, Ŝ the mean work of a started job (0 before the first
    start); of an engine, mean busy / mean cycle, the fraction of time its iterations run (0
    before a second iteration, or while the mean cycle is 0)."""
    if isinstance(est, EngineEstimates):
        if est.cycle is None or est.cycle == 0 or est.busy is None:
            return ZERO
        return V.finite(V.div(est.busy, est.cycle), "est_rho")
    return V.finite(V.mul(unrounded_lambda(est), est.service if est.service is not None else ZERO), "est_rho")


def est_lambda(est: Estimates | EngineEstimates) -> Fraction:
    """The reading of λ̂: `unrounded_lambda` on the grid."""
    return on_grid(unrounded_lambda(est))


def est_rho(est: Estimates | EngineEstimates) -> Fraction:
    """The reading of ρ̂: `unrounded_rho` on the grid, then capped at 0.99 — so a saturated ρ̂
    reads 99/100 exactly; a cap on the grid would sit 9.3e-12 below it and turn exact ties (an
    iteration of `0.01 + est_rho(E)` against a work of 1) into near-ties (docs/spec.md)."""
    return cast(Fraction, V.min_v(on_grid(unrounded_rho(est)), RHO_CAP))


def est_wait(est: Estimates | EngineEstimates) -> Fraction:
    """The reading of Ŵ, the mean wait before service (of an engine: in the queue before
    admission; 0 before the first job enters service), on the grid."""
    return on_grid(V.finite(est.wait, "est_wait")) if est.wait is not None else ZERO


def price(est: Estimates | EngineEstimates, s_hit: Value, ds: Value) -> Value:
    """The cost of a miss that adds ds to a service of s_hit (docs/language.md §4.4), from the
    readings (on the grid) of λ̂, ρ̂ and Ŵ:
    ds + λ̂(s_m² − s_hit²)/(2(1 − ρ̂)) + λ̂·Ŵ·ds/(1 − ρ̂), s_m = s_hit + ds."""
    lam, idle = est_lambda(est), V.sub(ONE, est_rho(est))
    s_miss = V.add(s_hit, ds)
    queueing = V.div(V.mul(lam, V.sub(V.mul(s_miss, s_miss), V.mul(s_hit, s_hit))), V.mul(Fraction(2), idle))
    waiting = V.div(V.mul(V.mul(lam, est_wait(est)), ds), idle)
    return V.add(V.add(ds, queueing), waiting)


def has_draw(e: Any) -> bool:
    """Does IR expression (or list of them) `e` contain a draw?"""
    if isinstance(e, dict):
        return e.get("k") == "draw" or any(has_draw(x) for x in e.values())
    if isinstance(e, list):
        return any(has_draw(x) for x in e)
    return False


def budget_draws(prog: Program, s: int) -> bool:
    """Do engine s's Budget-moment expressions (`tokens cap`, `let`s, `each at most`) draw?"""
    cache = prog.__dict__.setdefault("_budget_draws", {})
    if s not in cache:
        st = prog.stages[s]
        cache[s] = has_draw([st.get("budget"), [x["expr"] for x in st.get("lets", [])], st.get("schedule", [])])
    return cache[s]


# -- engine values and the budget moment (§4.5, §11.6) -------------------------------------------

def memory_alloc(cfg: Config, e: int, job: Job) -> V.Amount:
    """Units the job's owner holds in the engine's memory pool (0 without one)."""
    mem = cfg.program.memory_of[e]
    if mem is None:
        return 0
    h = hold_of(thread(cfg, job.serial), mem)
    return 0 if h is None else h.alloc[h.pools.index(mem)]


def engine_value(env: Env, name: str) -> Value:
    """`running.*`, `waiting.*`, `batch.*` of the engine being scheduled (§4.5)."""
    cfg, e, ictx = env.cfg, env.engine, env.ictx
    if e is None:
        raise SpecError(f"engine value {name} read outside an engine", env.at, cfg.program.files)
    jobs = cfg.stages[e].jobs
    assign = ictx.assign if ictx is not None else []
    modes = {a.serial: a.mode for a in assign}
    byserial = {j.serial: j for j in jobs}
    if name == "running.count":
        return Fraction(len(jobs))
    if name == "running.decoding":
        return Fraction(sum(1 for j in jobs if j.mode == "decode"))
    if name == "running.kv_decode":
        return Fraction(sum(memory_alloc(cfg, e, j) for j in jobs if j.mode == "decode"))
    if name == "running.kv_prefill":   # a plain run counts as a prefill (docs/spec.md)
        return Fraction(sum(memory_alloc(cfg, e, j) for j in jobs if j.mode != "decode"))
    if name == "running.preempted":
        return Fraction(ictx.preempted if ictx else 0)
    if name == "waiting.count":
        return Fraction(sum(len(cfg.pools[p].queue) for p in cfg.program.admitted_pools.get(e, [])))
    if name == "waiting.admitted":
        return Fraction(ictx.admitted if ictx else 0)
    if name == "batch.tokens":
        return Fraction(sum(a.tokens for a in assign))
    if name == "batch.prefilled":
        return Fraction(sum(a.tokens for a in assign if a.mode != "decode"))
    if name == "batch.decoding":
        return Fraction(sum(1 for a in assign if a.mode == "decode"))
    if name == "batch.prefilling":   # prefill chunks: one per scheduled non-decode (a plain run too)
        return Fraction(sum(1 for a in assign if a.mode != "decode"))
    if name in ("batch.kv_decode", "batch.kv_prefill"):
        decode = name == "batch.kv_decode"
        return Fraction(sum(memory_alloc(cfg, e, byserial[s]) for s, m in modes.items()
                            if (m == "decode") == decode and s in byserial))
    if name == "batch.attention":
        total = Fraction(0)
        for a in assign:
            if a.mode != "decode":
                k = a.pos_before if a.pos_before is not None else 0
                total += a.tokens * (k + Fraction(a.tokens, 2))
        return total
    raise SpecError(f"unknown engine value {name}", env.at, cfg.program.files)


def job_value(env: Env, name: str) -> Value:
    """Per-request keys `decoding`, `admission`, `remaining` (§4.5)."""
    j = env.job
    if j is None:
        raise SpecError(f"per-request key `{name}` read outside a resident", env.at, env.cfg.program.files)
    if name == "decoding":
        return Fraction(1 if j.mode == "decode" else 0)
    if name == "admission":
        return Fraction(j.admission)
    if name == "remaining":
        return Fraction(j.left)
    raise SpecError(f"unknown per-request key {name}", env.at, env.cfg.program.files)


def budget_left_outside(cfg: Config, e: int) -> Value:
    """`budget_left(E)` outside E's admission: B − Σ want over residents, floored at 0 (§11.6)."""
    ictx = IterCtx(e)
    budget_moment(cfg, ictx)
    cap: Value = V.INF
    for st in flat_schedule(cfg.program.stages[e]["schedule"]):
        if st["op"] == "advance":
            cap = ictx.each.get(id(st), V.INF)
            break
    want = 0
    for j in cfg.stages[e].jobs:
        want += min(1, j.left) if j.mode == "decode" else (j.left if V.is_inf(cap) else min(j.left, cap))
    if V.is_inf(ictx.left):
        return ictx.left
    return Fraction(max(Fraction(0), ictx.left - want))


def flat_schedule(stmts: list) -> Iterator[dict]:
    """Every schedule statement, branches included, in order."""
    for s in stmts:
        yield s
        if s["op"] == "branch":
            yield from flat_schedule(s["then"])
            yield from flat_schedule(s.get("else") or [])


def whole_or_inf(v: Value, what: str, cfg: Config, at: At = None) -> Value:
    """A token amount: a whole number or +inf."""
    if V.is_inf(v):
        if v < 0:
            raise SpecError(f"{what} is -inf", at, cfg.program.files)
        return v
    if v.denominator != 1:
        raise SpecError(f"{what} must be a whole number of tokens, got {V.wire(v)}", at, cfg.program.files)
    return int(v)


def budget_moment(cfg: Config, ictx: IterCtx) -> None:
    """`tokens cap`, the schedule's `let`s and `each at most` values, read once as the iteration starts."""
    spec = cfg.program.stages[ictx.engine]
    name = spec["name"]
    at = field_at(spec, "budget")
    env = Env(cfg, engine=ictx.engine, ictx=ictx, at=at, what=f"engine {name}: tokens cap")
    b = whole_or_inf(evaluate(spec["budget"], env), f"engine {name}: tokens cap", cfg, at)
    if not V.is_inf(b) and b < 0:
        raise SpecError(f"engine {name}: tokens cap is negative ({V.wire(b)})", at, cfg.program.files)
    ictx.left = b
    sp = spec.get("speculate")
    if sp is not None:
        env.at = sp.get("at")
        for key in ("slots", "lookahead", "limit"):
            env.what = f"engine {name}: speculate {key}"
            v = evaluate(sp[key], env)
            if v < 0 or (key != "limit" if V.is_inf(v) else v.denominator != 1):   # serq_fast's words (serq.exact)
                raise SpecError(speculate_not_whole(name, key, v), env.at, cfg.program.files)
            setattr(ictx, key, v if V.is_inf(v) else int(v))
        env.what = f"engine {name}: tokens cap"
    for let in spec.get("lets", []):
        env.at, env.what = let.get("at"), f"engine {name}: schedule `let {let.get('name')}`"
        ictx.locals.append(evaluate(let["expr"], env))
    env.what = f"engine {name}: each at most"
    for st in flat_schedule(spec["schedule"]):
        if st.get("each") is not None:
            env.at = st.get("at")
            c = whole_or_inf(evaluate(st["each"], env), f"engine {name}: each at most", cfg, st.get("at"))
            if c <= 0:
                raise SpecError(f"engine {name}: each at most must be positive, got {V.wire(c)}",
                                st.get("at"), cfg.program.files)
            ictx.each[id(st)] = c
    if spec.get("granule") is not None:
        env.at, env.what = field_at(spec, "granule"), f"engine {name}: granule"
        g = whole_or_inf(evaluate(spec["granule"], env), f"engine {name}: granule", cfg, env.at)
        if g <= 0:
            # a run-time guard (§11.9): a granule is a positive number of tokens (inf: none)
            raise SpecError(f"engine {name}: granule must be positive, got {V.wire(g)}",
                            env.at, cfg.program.files)
        ictx.granule = None if V.is_inf(g) else g


# -- stages: queue, busy, work and the ps virtual clock (§4.4, §11.5) ----------------------------

def present(cfg: Config, s: int) -> int:
    """queue(s): jobs present (waiting + in service; a step engine's residents)."""
    st = cfg.stages[s]
    return len(st.jobs) + len(st.waiting)


def busy(cfg: Config, s: int) -> int:
    """busy(s): jobs in service (fifo: busy servers; step: jobs in the current iteration)."""
    st = cfg.stages[s]
    if st.kind == "step":
        return len(st.iteration["assign"]) if st.iteration else 0
    return len(st.jobs)


def work(cfg: Config, s: int) -> Value:
    """work(s): unfinished work at s."""
    st = cfg.stages[s]
    if st.kind == "step":
        return Fraction(sum(j.left for j in st.jobs))
    if s in cfg.program.shared_stages:   # a stage a flow crosses: remaining work per job (§11.14)
        return sum((remaining(cfg, j) for j in st.jobs), Fraction(0))
    if st.kind == "ps":
        advance_virtual_clock(cfg, s)
        return sum((st.tags[j.serial] - st.v for j in st.jobs), Fraction(0))
    total = sum((j.left for j in st.waiting), Fraction(0))
    return total + sum((st.finish[j.serial] - cfg.now for j in st.jobs), Fraction(0))


def ps_rate(cfg: Config, s: int, n: int) -> Fraction:
    """Each of n present jobs gets φ(n)/n (Ps moment: φ may read `present`)."""
    return ps_capacity(cfg, s, n) / n


def ps_capacity(cfg: Config, s: int, n: int) -> Fraction:
    """φ(n), the total rate of ps stage s with n jobs present (Ps moment: φ may read `present`)."""
    at = field_at(cfg.program.stages[s], "capacity")
    phi = evaluate(cfg.program.stages[s]["capacity"], Env(cfg, ctx={"present": Fraction(n)}, at=at,
                                                                   what=f"ps stage {cfg.program.stages[s]['name']}: capacity"))
    if V.is_inf(phi) or phi <= 0:
        raise SpecError(f"ps stage {cfg.program.stages[s]['name']}: capacity must be positive and finite, got {number_text(phi)}",
                        at, cfg.program.files)
    return phi


def remaining(cfg: Config, job: Job) -> Value:
    """The work a job on a stage a flow crosses has left now: served at its rate since `since`."""
    return job.left - job.rate * (cfg.now - job.since)


def current_rate(cfg: Config, s: int) -> Fraction:
    """The per-job rate in effect since t_last: the one the pending departure was scheduled with
    (§11.5: the rate changes only when the job set does, at the reschedule that ends a settle),
    recovered exactly from that `finish` event as (tag − v)/(time − t_last). The capacity is not
    evaluated again: evaluating it could draw a machine-stream value, and one that reads live
    state could give another rate than the one the departure time was computed with."""
    st = cfg.stages[s]
    for ev in cfg.events:
        if ev.kind == "finish" and ev.arg[0] == s and ev.time > st.t_last:
            return (st.tags[ev.arg[1]] - st.v) / (ev.time - st.t_last)
    return ps_rate(cfg, s, len(st.jobs))   # not reached in a run: a present job has its departure


def advance_virtual_clock(cfg: Config, s: int) -> None:
    """v += rate·(now − t_last) with the rate of the jobs present since t_last."""
    st = cfg.stages[s]
    if st.jobs and cfg.now > st.t_last:
        st.v += current_rate(cfg, s) * (cfg.now - st.t_last)
    st.t_last = cfg.now

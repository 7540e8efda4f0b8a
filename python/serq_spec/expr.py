"""Evaluation of IR expressions (docs/ir.md "Expressions") over exact values (docs/language.md §3–§5).

An `Env` says in which moment an expression is read: the session whose attributes it sees, the
engine and iteration for engine values, the resident for per-request keys, the context
variables of that moment, and the draw stream a draw comes from.
"""

from __future__ import annotations

from fractions import Fraction

from . import values as V
from .errors import SpecError
from .values import ZERO, ONE


class Env:
    __slots__ = ("cfg", "session", "stream", "at", "engine", "ictx", "job", "ctx", "admit_left", "what")

    def __init__(self, cfg, session=None, stream=("session",), at=None, engine=None, ictx=None,
                 job=None, ctx=None, admit_left=None, what=None):
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
        raise SpecError(f"index {V.wire(i)} out of range 0..{ref['count'] - 1}", env.at, env.cfg.program.files)
    return ref["base"] + int(i)


_BIN = {
    "+": V.add, "-": V.sub, "*": V.mul, "/": V.div, "^": V.pow_v,
    "<": lambda a, c: b(a < c), "<=": lambda a, c: b(a <= c), ">": lambda a, c: b(a > c),
    ">=": lambda a, c: b(a >= c), "==": lambda a, c: b(a == c), "!=": lambda a, c: b(a != c),
}

_FN1 = {"abs": abs, "floor": V.floor_v, "ceil": V.ceil_v, "sqrt": V.sqrt_v, "exp": V.exp_v, "ln": V.ln_v}


def evaluate(e: dict, env: Env):
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


def _evaluate(e: dict, env: Env):
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
        from .engine import engine_value
        return engine_value(env, e["name"])
    if k == "job":
        from .engine import job_value
        return job_value(env, e["name"])
    if k == "obs":
        return observable(e, env)
    raise SpecError(f"unknown expression kind {k!r}", env.at, env.cfg.program.files)


def observable(e: dict, env: Env):
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
                if att is None or att[0] != env.session.serial:
                    return ZERO
                return Fraction(att[1].get(p, 0))
            return Fraction(sum(x.size for x in st.entries if x.owner == env.session.serial))
        if f == "holders":
            return Fraction(len(st.holders))
        if f == "queued":
            return Fraction(len(st.queue))
    s = resolve_ref(env, e["stage"])
    from . import stages as S
    if f == "queue":
        return Fraction(S.present(cfg, s))
    if f == "busy":
        return Fraction(S.busy(cfg, s))
    if f == "work":
        return S.work(cfg, s)
    if f == "budget_left":
        if env.admit_left is not None and env.admit_left[0] == s:
            left = env.admit_left[1]
            return left if V.is_inf(left) else Fraction(left)   # `tokens cap inf`: inf
        if budget_draws(cfg.program, s):
            raise SpecError(f"budget_left({cfg.program.stages[s]['name']}) outside its admission re-reads the "
                            "engine's `tokens cap` and `let`s, which draw: draws are forbidden where the "
                            "machine re-reads an expression (docs/language.md §4.3)", env.at, cfg.program.files)
        from .engine import budget_left_outside
        return budget_left_outside(cfg, s)
    raise SpecError(f"observable {f}() is not supported", env.at, cfg.program.files)


def has_draw(e) -> bool:
    """Does IR expression (or list of them) `e` contain a draw?"""
    if isinstance(e, dict):
        return e.get("k") == "draw" or any(has_draw(x) for x in e.values())
    if isinstance(e, list):
        return any(has_draw(x) for x in e)
    return False


def budget_draws(prog, s: int) -> bool:
    """Do engine s's Budget-moment expressions (`tokens cap`, `let`s, `each at most`) draw?"""
    cache = prog.__dict__.setdefault("_budget_draws", {})
    if s not in cache:
        st = prog.stages[s]
        cache[s] = has_draw([st.get("budget"), [x["expr"] for x in st.get("lets", [])], st.get("schedule", [])])
    return cache[s]

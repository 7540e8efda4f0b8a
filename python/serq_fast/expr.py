"""Expressions of the IR (docs/ir.md "Expressions") compiled to Python closures over float values.

Each expression becomes `f(cx)` where `cx` is the simulator's evaluation context (`Ctx`): the
session whose attributes are read, the engine being scheduled, the job whose keys are read, the
context variables of the current moment and the draw source of the current stream.

Speed trick (labelled): compiling once to closures instead of walking the JSON tree on every
evaluation; constants are pre-converted to floats.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable

INF = math.inf


class RunError(Exception):
    """A run-time error of language.md §11.9 (a guard, a bad amount, an index out of range)."""


def num(text: str) -> float:
    """An IR value string as a float (`"inf"`, `"-inf"`, `"p"`, `"p/q"`)."""
    if text == "inf":
        return INF
    if text == "-inf":
        return -INF
    return float(Fraction(text))


def _check(x: float) -> float:
    if x != x:
        raise RunError("an expression produced NaN")
    return x


def _div(a: float, b: float) -> float:
    if b == 0:
        raise RunError("division by zero")
    return _check(a / b)


def _pow(a: float, b: float) -> float:
    try:
        return _check(math.pow(a, b))
    except (ValueError, OverflowError) as exc:
        raise RunError(f"pow({a}, {b}): {exc}") from None


def _fn(name: str, args: list) -> float:
    if name == "min":
        return min(args[0], args[1])
    if name == "max":
        return max(args[0], args[1])
    if name == "abs":
        return abs(args[0])
    if name == "floor":
        x = args[0]
        return x if math.isinf(x) else float(math.floor(x))
    if name == "ceil":
        x = args[0]
        return x if math.isinf(x) else float(math.ceil(x))
    if name == "sqrt":
        if args[0] < 0:
            raise RunError(f"sqrt of a negative value {args[0]}")
        return math.sqrt(args[0])
    if name == "exp":
        try:
            return math.exp(args[0])
        except OverflowError:
            return INF
    if name == "ln":
        if args[0] < 0:
            raise RunError(f"ln of a negative value {args[0]}")
        return -INF if args[0] == 0 else math.log(args[0])
    if name == "pow":
        return _pow(args[0], args[1])
    raise RunError(f"unknown function {name}")


class Ctx:
    """What an expression may read; the simulator mutates one instance as moments change."""

    __slots__ = ("attrs", "sess", "eng", "job", "var", "draw", "sim", "admit_left", "at")

    def __init__(self, sim: Any) -> None:
        self.sim = sim
        self.attrs: list = []
        self.sess = None  # the Session whose attributes are read (None outside a session)
        self.eng = None  # the Engine whose schedule / cost is being read
        self.job = None  # the job whose per-request keys are read
        self.var: dict = {}  # context variables of the current moment (§4.6)
        self.draw = None  # callable(dist, args, at) -> float: the current stream
        self.admit_left = None  # (engine index, budget left) inside an engine admission
        self.at = None


Fn = Callable[[Ctx], float]


def compile_expr(e: dict, sim: Any) -> Fn:
    """Compile one IR expression to a closure."""
    k = e["k"]
    if k == "num":
        v = num(e["v"])
        return lambda cx: v
    if k == "attr":
        slot = e["slot"]
        return lambda cx: cx.attrs[slot] if slot < len(cx.attrs) else 0.0
    if k == "local":
        i = e["index"]
        return lambda cx: cx.eng.locals[i]
    if k == "reg":
        st, i = e["stage"], e["index"]
        return lambda cx: sim.stages[st].registers[i]
    if k == "ctx":
        name = e["name"]

        def ctxvar(cx: Ctx) -> float:
            if name == "now":
                return sim.now
            try:
                return cx.var[name]
            except KeyError:
                raise RunError(f"context variable `{name}` read outside its moment") from None

        return ctxvar
    if k == "un":
        a = compile_expr(e["a"], sim)
        if e["op"] == "neg":
            return lambda cx: -a(cx)
        return lambda cx: 1.0 if a(cx) == 0 else 0.0
    if k == "bin":
        return _compile_bin(e["op"], compile_expr(e["a"], sim), compile_expr(e["b"], sim))
    if k == "cond":
        c, a, b = (compile_expr(e[x], sim) for x in ("c", "a", "b"))
        return lambda cx: a(cx) if c(cx) != 0 else b(cx)
    if k == "fn":
        f = e["f"]
        args = [compile_expr(x, sim) for x in e["args"]]
        if f == "min" and len(args) == 2:
            a0, a1 = args
            return lambda cx: min(a0(cx), a1(cx))
        if f == "max" and len(args) == 2:
            a0, a1 = args
            return lambda cx: max(a0(cx), a1(cx))
        return lambda cx: _fn(f, [a(cx) for a in args])
    if k == "draw":
        dist = e["dist"]
        args = [compile_expr(x, sim) for x in e["args"]]
        at = e.get("at")
        return lambda cx: cx.draw(dist, [a(cx) for a in args], at)
    if k == "obs":
        return _compile_obs(e, sim)
    if k == "eng":
        name = e["name"]
        return lambda cx: cx.eng.value(name)
    if k == "job":
        name = e["name"]
        return lambda cx: cx.job.key(name)
    raise RunError(f"unknown expression kind {k!r}")


def _compile_bin(op: str, a: Fn, b: Fn) -> Fn:
    if op == "+":
        return lambda cx: _check(a(cx) + b(cx))
    if op == "-":
        return lambda cx: _check(a(cx) - b(cx))
    if op == "*":
        return lambda cx: _check(a(cx) * b(cx))
    if op == "/":
        return lambda cx: _div(a(cx), b(cx))
    if op == "^":
        return lambda cx: _pow(a(cx), b(cx))
    if op == "<":
        return lambda cx: 1.0 if a(cx) < b(cx) else 0.0
    if op == "<=":
        return lambda cx: 1.0 if a(cx) <= b(cx) else 0.0
    if op == ">":
        return lambda cx: 1.0 if a(cx) > b(cx) else 0.0
    if op == ">=":
        return lambda cx: 1.0 if a(cx) >= b(cx) else 0.0
    if op == "==":
        return lambda cx: 1.0 if a(cx) == b(cx) else 0.0
    if op == "!=":
        return lambda cx: 1.0 if a(cx) != b(cx) else 0.0
    if op == "&&":
        return lambda cx: 1.0 if (a(cx) != 0 and b(cx) != 0) else 0.0
    if op == "||":
        return lambda cx: 1.0 if (a(cx) != 0 or b(cx) != 0) else 0.0
    raise RunError(f"unknown operator {op!r}")


def _compile_obs(e: dict, sim: Any) -> Fn:
    f = e["f"]
    if "stage" in e and e["stage"] is not None:
        ref = compile_ref(e["stage"], sim, "stage")
        return lambda cx: sim.stages[ref(cx)].observe(f, cx)
    if "pool" in e and e["pool"] is not None:
        ref = compile_ref(e["pool"], sim, "pool")
        return lambda cx: sim.pools[ref(cx)].observe(f, cx)
    raise RunError(f"observable {f} without a stage or pool")


def compile_ref(ref: dict, sim: Any, what: str) -> Callable[[Ctx], int]:
    """A pool or stage reference `{"base", "count", "index"}` as a closure giving the index."""
    base, count = ref["base"], ref["count"]
    if ref.get("index") is None:
        return lambda cx: base
    idx = compile_expr(ref["index"], sim)

    def resolve(cx: Ctx) -> int:
        x = idx(cx)
        if x != int(x) if not math.isinf(x) else True:
            raise RunError(f"{what} index {x} is not an integer")
        i = int(x)
        if not 0 <= i < count:
            raise RunError(f"{what} index {i} out of range 0..{count - 1}")
        return base + i

    return resolve


def is_static(e: dict, binding_slots: dict | None = None) -> bool:
    """True if `e` reads only numbers and attributes (the §11.4 rejection test).

    An attribute bound `at admission` counts as static iff its binding expression is.
    """
    k = e["k"]
    if k == "num":
        return True
    if k == "attr":
        if binding_slots and e["slot"] in binding_slots:
            return is_static(binding_slots[e["slot"]], None)
        return True
    if k == "un":
        return is_static(e["a"], binding_slots)
    if k == "bin":
        return is_static(e["a"], binding_slots) and is_static(e["b"], binding_slots)
    if k == "cond":
        return all(is_static(e[x], binding_slots) for x in ("c", "a", "b"))
    if k == "fn":
        return all(is_static(x, binding_slots) for x in e["args"])
    return False

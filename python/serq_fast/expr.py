"""Expressions of the IR (docs/ir.md "Expressions") compiled to Python functions over float values.

Each expression becomes `f(cx)` where `cx` is the simulator's evaluation context (`Ctx`): the
session whose attributes are read, the engine being scheduled, the job whose keys are read, the
context variables of the current moment and the draw source of the current stream.

Speed trick (labelled): each tree is compiled once to the source of one Python function
(`compile_expr`) instead of walking the JSON tree, or a closure per node, on every evaluation;
constants are pre-converted to float literals.

serq_spec counterpart: `serq_spec/expr.py` (`evaluate`, exact), with `serq_spec/values.py`.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any, Callable

from serq.exact import (beyond_doubles, constant_beyond_doubles, function_beyond_doubles, index_not_in_range,
                        negative_to_fraction)

INF = math.inf


class RunError(Exception):
    """A run-time error of docs/language.md §11.9 (a guard, a bad amount, an index out of range):
    `message` and the IR position `at` of the statement or declaration where it happened.

    A message may carry its position as `… at F:L:C` (`at_text`, F the index into the IR's
    `files`); the first such position is taken out of the text into `at`, so that the commands
    print `FILE:LINE:COLUMN: error: message` as serq_spec's errors (serq.errors)."""

    def __init__(self, message: str, at=None) -> None:
        if at is None:
            m = _POSITION.search(message)
            if m is not None:
                message = message[:m.start()] + message[m.end():]
                at = [int(m[1]), int(m[2]), int(m[3])] if m[1] is not None else None
        super().__init__(message)
        self.message = message
        self.at = at

    def located(self, files: list):
        """This error as every command prints it: a `serq.errors.SerqError` at its position,
        the file named through FILES (the IR's `files`)."""
        from serq.errors import SerqError

        return SerqError.at_ir(self.message, self.at, files)


#: The position of a RunError that has none by nature (it is about the sessions file, not a
#: statement): `located` keeps it, and the commands print `serq: error: …`, as serq_spec does.
NOWHERE: tuple = ()

_POSITION = re.compile(r" at (?:(\d+):(\d+):(\d+)\b|\?$)")  # `at ?`: at_text of no position


def at_text(at) -> str:
    """An IR position [FILE_INDEX, LINE, COLUMN] as `F:L:C` in a RunError message, which takes
    it out again as its `at`."""
    if not at:
        return "?"
    return f"{at[0]}:{at[1]}:{at[2]}"


def located(exc: "RunError", at, what: str | None = None) -> "RunError":
    """EXC itself when it has a position already (or AT is unknown); else the same error at AT,
    the statement or declaration whose expression raised it, and named `what` it was (an
    expression outside a statement: `engine vllm: execute`), as serq_spec names it."""
    if exc.at is not None:
        return exc
    named = f"{what}: {exc.message}" if what else exc.message
    if not at:
        return RunError(named) if what else exc
    return RunError(named, at)


def num(text: str) -> float:
    """An IR value string as a float (`"inf"`, `"-inf"`, `"p"`, `"p/q"`). The front-end's exact
    constants reach 10^±1000 (a `--set` value too); this simulator computes in floats, so one
    beyond their range is an error here rather than an OverflowError or a silent 0."""
    if text == "inf":
        return INF
    if text == "-inf":
        return -INF
    return to_float(Fraction(text), "a constant")


def to_float(q, what: str) -> float:
    """An exact value (a Fraction, or ±inf) as a float; a RunError naming `what` it is when it
    is beyond the doubles' range (float() raises OverflowError, or rounds a tiny one to 0),
    worded by serq.exact."""
    if isinstance(q, float):
        return q
    if beyond_doubles(q):
        raise RunError(constant_beyond_doubles(q, what))
    return float(q)


def _div(a: float, b: float) -> float:
    """a / b by the rule of serq_spec (values.div), SerqLang's `Value.div` and the front-end's
    constants: x / 0 = ±inf by the sign of x (a zero's own sign is ignored: exact zeros have
    none), 0 / 0 and inf / inf are errors."""
    if b == 0:
        if a == 0:
            raise RunError("0 / 0 is undefined")
        return INF if a > 0 else -INF
    x = a / b
    return x if x == x else _nan("/")


def _pow(a: float, b: float) -> float:
    """a ^ b by the rule of serq_spec (values.pow_v) and SerqLang's `Value.pow`: IEEE 754 `pow`,
    except that `0 ^ b` for b < 0 is inf (as `1 / 0`; a zero's own sign is ignored), and that a
    negative number to a non-integer power and a result above the largest double are errors,
    worded by serq.exact as serq_spec words them (math.pow raised `math domain error` or `math
    range error` there)."""
    if a == 0 and b < 0:
        return INF
    if a < 0 and math.isfinite(a) and math.isfinite(b) and b != math.floor(b):
        raise RunError(negative_to_fraction(f"pow({a!r}, {b!r})"))
    try:
        return math.pow(a, b)
    except OverflowError:
        raise RunError(function_beyond_doubles(f"pow({a!r}, {b!r})")) from None


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
        except OverflowError:   # above the largest double: an error, as in serq_spec
            raise RunError(function_beyond_doubles(f"exp({args[0]!r})")) from None
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


def compile_expr(e: dict, sim: Any, at=None, what: str | None = None) -> Fn:
    """Compile one IR expression to a Python function of `cx`.

    AT (with WHAT it is) is the position of an expression outside a statement (docs/ir.md
    "Positions"): its errors, at compile time (a constant beyond the floats' range) or when it is
    evaluated, name it. Labelled speed trick: the whole tree becomes the body of one generated
    function, evaluated left to right like the tree (so draws and errors happen in the same
    order), with the NaN check of every arithmetic result inlined: no Python call per node; the
    `try` that locates an error costs nothing until one is raised."""
    g = _Gen(sim)
    try:
        body = g.expr(e, 0)
    except RunError as exc:
        raise located(exc, at, what) from None
    if at:
        g.ns.update(_RunError=RunError, _located=located, _AT=list(at), _WHAT=what)
        src = ("def _f(cx):\n    try:\n        return " + body + "\n    except _RunError as exc:\n"
               "        raise _located(exc, _AT, _WHAT) from None\n")
    else:
        src = "def _f(cx):\n    return " + body + "\n"
    exec(compile(src, "<serq expr>", "exec"), g.ns)
    return g.ns["_f"]


# The only ways + − · / of non-NaN floats make NaN, worded as serq.exact (and so serq_spec) words
# them: the operator alone tells which, so the inlined check passes nothing but it.
_UNDEFINED = {"+": "inf - inf is undefined", "-": "inf - inf is undefined",
              "*": "0 * inf is undefined", "/": "inf / inf is undefined"}


def _nan(op: str = "") -> float:
    raise RunError(_UNDEFINED.get(op, "an expression produced NaN"))


def _ctx_missing(name: str) -> float:
    raise RunError(f"context variable `{name}` read outside its moment")


def _no_job(name: str) -> float:
    raise RunError(f"per-request key `{name}` read outside a resident")


# Beyond this nesting depth a subtree becomes a function of its own (the parser bounds how
# deeply one Python expression may nest).
_MAX_DEPTH = 40

_CMP = ("<", "<=", ">", ">=", "==", "!=")


class _Gen:
    """The Python source of one expression tree; its constants and helpers live in `ns`."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim
        self.ns: dict = {"_nan": _nan, "_div": _div, "_pow": _pow, "_fn": _fn, "_sim": sim,
                         "_ctx_missing": _ctx_missing, "_no_job": _no_job, "_INF": INF}
        self.n = 0
        self.attrs_local = False  # True: attributes read from the local `attrs` (a session block)

    def name(self, value: Any) -> str:
        self.n += 1
        k = f"_k{self.n}"
        self.ns[k] = value
        return k

    def tmp(self) -> str:
        self.n += 1
        return f"_t{self.n}"

    def expr(self, e: dict, depth: int) -> str:
        if depth > _MAX_DEPTH:
            return self.name(compile_expr(e, self.sim)) + "(cx)"
        d = depth + 1
        k = e["k"]
        if k == "num":
            v = num(e["v"])
            return repr(v) if math.isfinite(v) else ("_INF" if v > 0 else "(-_INF)")
        if k == "attr":
            slot = int(e["slot"])
            if self.attrs_local and 0 <= slot < self.sim.nattrs:
                # a session block (specialise.py): `attrs` is the running session's list, the one
                # cx.attrs names, of the program's full length
                return f"attrs[{slot}]"
            a = self.tmp()
            # engine moments read attributes from an empty list: 0
            return f"({a}[{slot}] if {slot} < len({a} := cx.attrs) else 0.0)"
        if k == "local":
            return f"cx.eng.locals[{int(e['index'])}]"
        if k == "reg":
            return f"_sim.stages[{int(e['stage'])}].registers[{int(e['index'])}]"
        if k == "ctx":
            name = e["name"]
            if name == "now":
                return "_sim.now"
            v, kn = self.tmp(), self.name(name)
            return f"({v}[{kn}] if {kn} in ({v} := cx.var) else _ctx_missing({kn}))"
        if k == "un":
            a = self.expr(e["a"], d)
            if e["op"] == "neg":
                return f"(-{a})"
            return f"(1.0 if {a} == 0 else 0.0)"
        if k == "bin":
            op = e["op"]
            a, b = self.expr(e["a"], d), self.expr(e["b"], d)
            if op in ("+", "-", "*"):
                t = self.tmp()
                return f"({t} if ({t} := {a} {op} {b}) == {t} else _nan({op!r}))"
            if op == "/":
                return f"_div({a}, {b})"
            if op == "^":
                return f"_pow({a}, {b})"
            if op in _CMP:
                return f"(1.0 if {a} {op} {b} else 0.0)"
            if op == "&&":
                return f"(1.0 if ({a} != 0 and {b} != 0) else 0.0)"
            if op == "||":
                return f"(1.0 if ({a} != 0 or {b} != 0) else 0.0)"
            raise RunError(f"unknown operator {op!r}")
        if k == "cond":
            c, a, b = (self.expr(e[x], d) for x in ("c", "a", "b"))
            return f"({a} if {c} != 0 else {b})"
        if k == "fn":
            f = e["f"]
            args = [self.expr(x, d) for x in e["args"]]
            if f in ("min", "max") and len(args) == 2:
                return f"{f}({args[0]}, {args[1]})"
            return f"_fn({self.name(f)}, [{', '.join(args)}])"
        if k == "draw":
            args = [self.expr(x, d) for x in e["args"]]
            return f"cx.draw({self.name(e['dist'])}, [{', '.join(args)}], {self.name(e.get('at'))})"
        if k == "obs":
            return self.name(_compile_obs(e, self.sim)) + "(cx)"
        if k == "eng":
            return f"cx.eng.value({self.name(e['name'])})"
        if k == "job":
            # outside a resident (a `preempt by` key of a ready or fifo/ps victim) it is an error,
            # as in serq_spec, not an AttributeError
            n = self.name(e["name"])
            return f"(cx.job.key({n}) if cx.job is not None else _no_job({n}))"
        raise RunError(f"unknown expression kind {k!r}")


def _compile_obs(e: dict, sim: Any) -> Fn:
    f = e["f"]
    if "stage" in e and e["stage"] is not None:
        ref = compile_ref(e["stage"], sim, "stage")
        if f == "price":   # price(s, s_hit, ds): the stage's estimates (serq_fast/estimates.py)
            s_hit, ds = (compile_expr(a, sim) for a in e["args"])
            return lambda cx: sim.stages[ref(cx)].est.price(s_hit(cx), ds(cx))
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
        if math.isinf(x) or x != int(x) or not 0 <= x < count:   # serq_spec's words (serq.exact)
            raise RunError(index_not_in_range(x, count))
        return base + int(x)

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

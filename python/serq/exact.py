"""Exact constant arithmetic for the linker: Fractions and ±inf, never NaN, never a float.

Each operation returns a value, or raises `NaNError` (0/0, inf - inf, 0 * inf, sqrt(-1), …) or
`Inexact` (the result is irrational, e.g. sqrt(2), or too large to keep exactly); the linker turns
the first into a located error and keeps the second as an unfolded expression.

Both engines use it too: serq_spec for the ±inf rules of `+ − · /`, both for the doubles' range
(the end of this module: the one rule and the one wording of a value neither can keep alike).
"""

from __future__ import annotations

import math
from fractions import Fraction

from .errors import number_text
from .wire import INF, Value, is_decimal, is_inf, parse_decimal

MAX_BITS = 4096  # larger numerators/denominators are not folded


class NaNError(ArithmeticError):
    """The result is NaN (0/0, inf - inf, 0 * inf, sqrt(-1)): a link error at the expression."""


class Inexact(ArithmeticError):
    """The result is not a rational kept exactly (sqrt(2), 2^100000): the expression stays unfolded."""


def whole_in(v: Value, lo: int, hi: int) -> bool:
    """Is v a whole number with lo <= v <= hi? (sizes, counts, indices, numbers of servers)"""
    return not is_inf(v) and v.denominator == 1 and lo <= v <= hi


def sign(v: Value) -> int:
    return (v > 0) - (v < 0)


def _check(v: Value) -> Value:
    if isinstance(v, float):
        if math.isnan(v):
            raise NaNError()
        if not math.isinf(v):
            return Fraction(v)  # cannot happen for results below, kept for safety
        return v
    if isinstance(v, int):
        v = Fraction(v)
    if v.numerator.bit_length() > MAX_BITS or v.denominator.bit_length() > MAX_BITS:
        raise Inexact()
    return v


def parse_number(text: str) -> Fraction:
    """A decimal literal's exact value (`2e-5` -> 1/50000).

    ValueError unless `text` is spelled as `wire.parse_decimal` wants (an optional sign, ASCII
    digits, an optional fraction and exponent: `Fraction` alone would also take `1_000`, `1/2`,
    inner spaces and other scripts' digits); Inexact if it is absurdly long or large (1e100000),
    checked before the value is built.
    """
    if not is_decimal(text):
        raise ValueError(f"not a decimal number: {text!r}")
    mant, _, exp = text.lower().partition("e")
    if len(mant) > 400 or len(exp) > 8 or (exp and abs(int(exp)) > 1000):
        raise Inexact()
    return _check(parse_decimal(text))


# The extended rationals (Fractions and ±inf) without bounds: one definition of +, −, ·, / with
# infinities for the front-end (bounded by `_check` below) and for the spec's run-time arithmetic
# (serq_spec.values, which turns NaNError into its SpecError with the same message).

def ext_add(a: Value, b: Value) -> Value:
    """a + b; inf − inf is NaN."""
    if is_inf(a) and is_inf(b) and a != b:
        raise NaNError("inf - inf is undefined")
    if is_inf(a):
        return a
    if is_inf(b):
        return b
    return a + b


def neg(a: Value) -> Value:
    """−a."""
    return -a


def ext_sub(a: Value, b: Value) -> Value:
    """a − b."""
    return ext_add(a, neg(b))


def ext_mul(a: Value, b: Value) -> Value:
    """a · b; 0 · ±inf is NaN."""
    if is_inf(a) or is_inf(b):
        if a == 0 or b == 0:
            raise NaNError("0 * inf is undefined")
        return INF if (a > 0) == (b > 0) else -INF
    return a * b


def ext_div(a: Value, b: Value) -> Value:
    """a / b; x / ±inf = 0 and x / 0 = ±inf (by the sign of x) for x ≠ 0; 0/0 and inf/inf are NaN."""
    if is_inf(b):
        if is_inf(a):
            raise NaNError("inf / inf is undefined")
        return Fraction(0)
    if b == 0:
        if a == 0:
            raise NaNError("0 / 0 is undefined")
        return INF if a > 0 else -INF
    if is_inf(a):
        return INF if (a > 0) == (b > 0) else -INF
    return Fraction(a) / Fraction(b)


# The linker's folding: the same operations, with results too large to keep exactly unfolded.

def add(a: Value, b: Value) -> Value:
    return _check(ext_add(a, b))


def sub(a: Value, b: Value) -> Value:
    return _check(ext_sub(a, b))


def mul(a: Value, b: Value) -> Value:
    return _check(ext_mul(a, b))


def div(a: Value, b: Value) -> Value:
    return _check(ext_div(a, b))


def _iroot(n: int, k: int) -> int | None:
    """The exact integer k-th root of n >= 0, or None."""
    if n < 0:
        return None
    if n < 2:
        return n
    r = int(round(n ** (1.0 / k))) if n.bit_length() < 1000 else None
    if r is None:
        lo, hi = 0, 1 << (n.bit_length() // k + 1)
        while lo < hi:
            mid = (lo + hi) // 2
            if mid ** k < n:
                lo = mid + 1
            else:
                hi = mid
        r = lo
    for c in (r - 1, r, r + 1):
        if c >= 0 and c ** k == n:
            return c
    return None


def sqrt(a: Value) -> Value:
    if a < 0:
        raise NaNError()
    if is_inf(a):
        return INF
    a = Fraction(a)
    n, d = _iroot(a.numerator, 2), _iroot(a.denominator, 2)
    if n is None or d is None:
        raise Inexact()
    return Fraction(n, d)


def power(a: Value, b: Value) -> Value:
    if is_inf(b) or is_inf(a):
        if is_inf(b):
            if a == 1:
                return Fraction(1)
            if a < 0:
                raise Inexact()
            big = a > 1
            if b > 0:
                return INF if big else Fraction(0)
            return Fraction(0) if big else INF
        # a infinite, b finite
        if b == 0:
            return Fraction(1)
        if a > 0:
            return INF if b > 0 else Fraction(0)
        raise Inexact()
    a, b = Fraction(a), Fraction(b)
    if b.denominator == 1:
        e = b.numerator
        if a == 0:
            if e == 0:
                return Fraction(1)
            return Fraction(0) if e > 0 else INF
        if abs(e) * max(a.numerator.bit_length(), a.denominator.bit_length(), 1) > MAX_BITS:
            raise Inexact()
        return _check(a ** e)
    if a < 0:
        raise NaNError()
    # rational exponent p/q: exact only when a is a perfect q-th power
    q = b.denominator
    if q > 64:
        raise Inexact()
    n, d = _iroot(a.numerator, q), _iroot(a.denominator, q)
    if n is None or d is None:
        raise Inexact()
    return power(Fraction(n, d), Fraction(b.numerator))


def floor(a: Value) -> Value:
    return a if is_inf(a) else Fraction(math.floor(a))


def ceil(a: Value) -> Value:
    return a if is_inf(a) else Fraction(math.ceil(a))


def exp(a: Value) -> Value:
    if is_inf(a):
        return INF if a > 0 else Fraction(0)
    if a == 0:
        return Fraction(1)
    raise Inexact()


def ln(a: Value) -> Value:
    if a < 0:
        raise NaNError()
    if a == 0:
        return -INF
    if is_inf(a):
        return INF
    if a == 1:
        return Fraction(0)
    raise Inexact()


def truth(a: Value) -> bool:
    return a != 0


def b2v(x: bool) -> Fraction:
    return Fraction(1 if x else 0)


FUNCS1 = {"abs": abs, "floor": floor, "ceil": ceil, "sqrt": sqrt, "exp": exp, "ln": ln}
BINOPS = {
    "+": add, "-": sub, "*": mul, "/": div, "^": power,
    "<": lambda a, b: b2v(a < b), "<=": lambda a, b: b2v(a <= b), ">": lambda a, b: b2v(a > b),
    ">=": lambda a, b: b2v(a >= b), "==": lambda a, b: b2v(a == b), "!=": lambda a, b: b2v(a != b),
}


# ---- the doubles' range: one rule for both engines (docs/language.md §4.1) --------------------
#
# serq_spec computes exactly and serq_fast in doubles (IEEE 754 binary64). Where a program's value
# would leave the doubles' range the engines cannot agree, so both refuse it with the same words:
# a constant beyond the range (a `--set` of 1e400) where the program is loaded, an `exp` or `pow`
# beyond it where it is evaluated. These functions give the words.


def beyond_doubles(v: Value) -> bool:
    """Is V (exact) a finite value that a double cannot hold: above the largest double in
    magnitude (it would round to ±inf), or not 0 and rounding to 0?"""
    if is_inf(v):
        return False
    try:
        x = float(v)
    except OverflowError:
        return True
    return math.isinf(x) or (x == 0 and v != 0)


def constant_beyond_doubles(v: Fraction, what: str = "a constant", todo: bool = True) -> str:
    """The error for WHAT (an exact value beyond the doubles' range, `beyond_doubles`), with what
    to do unless TODO is False (a caller that says it itself). A `--set` value is folded into the
    program as a constant, so the error may stand at a statement that reads an input."""
    digits = len(str(abs(v.numerator))) - len(str(v.denominator))
    return (f"{what} of about {'-' if v < 0 else ''}1e{digits} is beyond the range of doubles "
            "(about 1e-308 to 1e308), where both engines keep a program's values"
            + ("; write it, or the `--set` value of the input it reads, within that range (or as 0)" if todo else ""))


def function_beyond_doubles(call: str) -> str:
    """The error for an `exp` or `pow` (CALL, its arguments as `number_text` shows them) whose
    result is above the largest double (about 1.8e308) in magnitude."""
    return (f"{call} is beyond the range of doubles (magnitudes up to about 1.8e308), where both "
            "engines keep a program's values")


def negative_to_fraction(call: str) -> str:
    """The error for `pow` of a negative number to a non-integer power (CALL as above)."""
    return f"{call}: a negative number to a non-integer power"


def index_not_in_range(index: Value, count: int) -> str:
    """The error for an array index (of a stage or pool array of COUNT) that is not a whole number
    from 0 to COUNT − 1, in both engines' words (the index as `number_text` shows it), with what
    to do about it: an index names a member, so it must land on one."""
    return (f"index {number_text(index)} is not a whole number in 0..{count - 1}: an array's member is "
            f"named by a whole number from 0 to {count - 1}; round the index (floor(…)) and keep it in range "
            f"(e.g. min(floor(…), {count - 1}))")


# The run-time errors of a run's work (docs/language.md §11.5, §11.14) and of a transfer's amount
# (§11.15), in both engines' words: the value (as `number_text` shows it), the rule, and what to do.

def negative_work(work: Value) -> str:
    """`run S (w);` or `run a, b (w);` with w < 0."""
    return (f"negative work {number_text(work)}: a run's work is an amount of service >= 0; keep the "
            "expression from going below 0 (e.g. max(0, …))")


def work_not_finite(work: Value) -> str:
    """`run S (w);` or `run a, b (w);` with w infinite."""
    return (f"work {number_text(work)} is not finite: a run's work must be a finite amount of service; bound "
            "the expression (e.g. min(…, LIMIT)) or look for a division by 0 in it")


def iteration_cost_out_of_range(cost: Value) -> str:
    """An engine's `execute` (or K `cost`) read as a negative or infinite time, in both engines'
    words (each prefixes `engine E: execute: `)."""
    return (f"iteration cost {number_text(cost)} is not a finite value >= 0; it is the iteration's time: "
            "keep the expression (or the inputs it reads) finite and >= 0 (e.g. max(0, …))")


def speculate_not_whole(engine: str, key: str, value: Value) -> str:
    """An engine's `speculate (slots, lookahead, limit)` (docs/language.md §7.3) read as anything
    but a whole number >= 0 (the limit may be inf), in both engines' words."""
    return (f"engine {engine}: speculate {key} must be a whole number >= 0{' or inf' if key == 'limit' else ''}, "
            f"got {number_text(value)}; it counts tokens: round it (floor(…)) and keep it >= 0")


def content_prefix_not_declared(pool: str, key: Value) -> str:
    """`content (p, n, h)` on POOL read p as a key no `prefix` declares (docs/content.md §1), in
    both engines' words."""
    return (f"pool {pool}: `content`: prefix {number_text(key)} is not declared: the first of `content (p, n, h)` "
            "is a key a `prefix KEY (LENGTH);` declares, or 0 for none")


def content_length_out_of_prefix(pool: str, length: Value, key: Value, total: Value) -> str:
    """`content (p, n, h)` on POOL read n as anything but a whole number from 0 to TOTAL, the
    tokens of prefix KEY (0 when KEY is 0, no prefix), in both engines' words."""
    return (f"pool {pool}: `content`: {number_text(length)} shared tokens is not a whole number from 0 to "
            f"{number_text(total)} (the tokens of prefix {number_text(key)}; 0 for none): keep n within the prefix")


def negative_transfer_amount(amount: Value, pool: str) -> str:
    """`transfer S (w) from P to Q (n);` with n < 0 (POOL is Q)."""
    return (f"negative transfer amount {number_text(amount)}: n is the tokens the copy lands in pool {pool}, "
            "a number >= 0; keep the expression from going below 0 (e.g. max(0, …))")


def first_constant_beyond_doubles(ir: dict) -> tuple[str, object] | None:
    """The first `num` constant of IR (docs/ir.md) beyond the doubles' range, as (the error, the
    IR position of the statement or declaration holding it), else the first such pool `cap` or
    `block` or arrival `rate` (without a position), or None. Both engines call it where
    they load a program, so a `--set service=1e400` is refused there, at the same place."""
    def walk(node: object, at: object) -> tuple[str, object] | None:
        if isinstance(node, dict):
            if node.get("k") == "num" and isinstance(node.get("v"), str) and node["v"] not in ("inf", "-inf"):
                v = Fraction(node["v"])
                return (constant_beyond_doubles(v), at) if beyond_doubles(v) else None
            here = node.get("at")
            fields = here if isinstance(here, dict) else None   # a stage: {FIELD: position}
            if isinstance(here, list):
                at = here
            for key, sub in node.items():
                found = walk(sub, fields[key] if fields and key in fields else at)
                if found:
                    return found
        elif isinstance(node, list):
            for sub in node:
                found = walk(sub, at)
                if found:
                    return found
        return None

    found = walk(ir, None)
    if found:
        return found
    # the declarations' plain values: pool sizes (no position), the arrival rate (at the
    # arrival's position when the IR gives one), in serq_fast's words for the rate
    named = [(p.get(f), f"the {f} of pool {p.get('name')}", None) for p in ir.get("pools", []) for f in ("cap", "block")]
    arrival = (ir.get("workload") or {}).get("arrival") or {}
    named.append((arrival.get("rate"), None, arrival.get("at")))
    for text, what, at in named:
        if isinstance(text, str) and text not in ("inf", "-inf") and beyond_doubles(Fraction(text)):
            if what is None:
                return f"`arrive {arrival.get('kind')}(…)`: the rate: " + constant_beyond_doubles(Fraction(text)), at
            return constant_beyond_doubles(Fraction(text), what), at
    return None

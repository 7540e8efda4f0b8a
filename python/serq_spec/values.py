"""Exact values: rationals and ±inf, the arithmetic of docs/language.md §3 without NaN, block rounding.

A value is a `Fraction` or one of the floats `INF` / `-INF` (serq.wire). No other float ever
appears: every operation here either returns an exact result or raises `SpecError`. `is_inf`,
`neg` and the ±inf rules of `+ − · /` are serq.exact's, the front-end's constant folding: a
constant means the same folded or not.

Transcendental functions (`sqrt`, `exp`, `ln`, `pow` with a non-integer exponent) have no exact
rational value in general. The spec computes them with Python's `decimal` module at 40
significant digits, rounding half-even, and takes the resulting decimal as an exact rational
(`Fraction(Decimal)`). This is deterministic on every machine and within 1e-39 relative of the
real value; a perfect square's `sqrt` and `pow` with an integer exponent up to 4096 are exact.
An `exp` or `pow` above the largest double is an error, as in serq_fast (docs/language.md §4.1).
"""

from __future__ import annotations

import decimal
import math
import sys
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Callable, Union, cast

from serq.exact import function_beyond_doubles, negative_to_fraction
from serq.exact import NaNError, ext_add, ext_div, ext_mul, ext_sub, neg  # noqa: F401  (neg re-exported)
from serq.errors import number_text
from serq.wire import INF, Value, value_from_wire, value_to_wire

from .errors import At, SpecError

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    def is_inf(v: Value) -> TypeIs[float]:
        """serq.exact's `is_inf`, declared so that mypy narrows a Value to Fraction after it."""
else:
    from serq.exact import is_inf  # re-exported

#: A pool amount (units, allocations, positions, cache sizes): an int when whole, else a Fraction.
Amount = Union[int, Fraction]

ZERO = Fraction(0)
ONE = Fraction(1)
DIGITS = 40
#: `pow` with an integer exponent up to this magnitude is exact; beyond it, 40 digits as a
#: non-integer exponent (an exact x ** 10**10 would not fit in memory).
EXACT_EXPONENT = 4096
_CTX = decimal.Context(prec=DIGITS, rounding=decimal.ROUND_HALF_EVEN, Emax=999999, Emin=-999999)


def finite(v: Value, what: str = "value") -> Fraction:
    """`v` as a Fraction; infinity is an error here."""
    if isinstance(v, float):
        raise SpecError(f"{what} is infinite")
    return v


def as_int(v: Value, what: str, at: At = None) -> int:
    """`v` as an int: tokens, units, counts must be whole numbers."""
    if isinstance(v, float) or v.denominator != 1:
        raise SpecError(f"{what} must be a whole number, got {value_to_wire(v)}", at)
    return int(v)


def truth(v: Value, what: str = "guard", at: At = None) -> bool:
    """A guard must be 0 or 1 (docs/language.md §10, §11.9 run-time guard)."""
    if v == 0:
        return False
    if v == 1:
        return True
    raise SpecError(f"{what} must be 0 or 1, got {number_text(v)}", at)


def nz(v: Value) -> bool:
    """C-like truth: any non-zero value is true (for `!`, `&&`, `||`, `?:`)."""
    return v != 0


def _exact(op: Callable[[Value, Value], Value], a: Value, b: Value) -> Value:
    """One operation of serq.exact's extended rationals (the front-end's constant folding uses the
    same ones), its NaN an error here."""
    try:
        return op(a, b)
    except NaNError as e:
        raise SpecError(str(e)) from None


def add(a: Value, b: Value) -> Value:
    """a + b; inf − inf is an error."""
    return _exact(ext_add, a, b)


def sub(a: Value, b: Value) -> Value:
    """a − b."""
    return _exact(ext_sub, a, b)


def mul(a: Value, b: Value) -> Value:
    """a · b; 0 · inf is an error."""
    return _exact(ext_mul, a, b)


def div(a: Value, b: Value) -> Value:
    """a / b; x/0 = ±inf for x ≠ 0, 0/0 and inf/inf are errors."""
    return _exact(ext_div, a, b)


def floor_v(a: Value) -> Value:
    """floor; ±inf unchanged."""
    return a if is_inf(a) else Fraction(math.floor(a))


def ceil_v(a: Value) -> Value:
    """ceil; ±inf unchanged."""
    return a if is_inf(a) else Fraction(math.ceil(a))


def _dec(a: Fraction) -> decimal.Decimal:
    return _CTX.divide(decimal.Decimal(a.numerator), decimal.Decimal(a.denominator))


def _frac(d: decimal.Decimal) -> Fraction:
    return Fraction(d)


def _within_doubles(call: Callable[[], str], compute: Callable[[], Fraction]) -> Fraction:
    """compute() (an `exp` or `pow`), refused with serq.exact's words when it is above the largest
    double in magnitude, as serq_fast refuses its overflow (docs/language.md §4.1). CALL names the
    call, made only for the message. A result past the 40-digit context's exponent range
    (decimal.Overflow, e.g. exp(1e10): found by tools/fuzz_campaign.py) is beyond it too; one
    below the doubles' range is kept (exactly, or 0 below the context's range)."""
    try:
        r = compute()
        float(r)   # OverflowError above the largest double
    except (decimal.Overflow, OverflowError):
        raise SpecError(function_beyond_doubles(call())) from None
    return r


def sqrt_v(a: Value) -> Value:
    """sqrt: exact for perfect squares, else 40 digits (module docstring)."""
    if a < 0:
        raise SpecError(f"sqrt of a negative value {number_text(a)}")   # as serq_fast
    if is_inf(a):
        return a
    n, d = a.numerator, a.denominator
    rn, rd = math.isqrt(n), math.isqrt(d)
    if rn * rn == n and rd * rd == d:
        return Fraction(rn, rd)
    return _frac(_CTX.sqrt(_dec(a)))


def exp_v(a: Value) -> Value:
    """exp at 40 digits (module docstring)."""
    if is_inf(a):
        return INF if a > 0 else ZERO
    if a == 0:
        return ONE
    if a < -100000:
        return ZERO  # below 40 digits of anything representable: documented underflow
    return _within_doubles(lambda: f"exp({number_text(a)})", lambda: _frac(_CTX.exp(_dec(a))))


def ln_v(a: Value) -> Value:
    """ln at 40 digits (module docstring); ln 0 = −inf."""
    if a < 0:
        raise SpecError(f"ln of a negative value {number_text(a)}")   # as serq_fast
    if a == 0:
        return -INF
    if is_inf(a):
        return INF
    if a == 1:
        return ZERO
    return _frac(_CTX.ln(_dec(a)))


def pow_v(x: Value, y: Value) -> Value:
    """x ^ y: exact for an integer exponent up to EXACT_EXPONENT, else at 40 digits; a result
    above the largest double is an error, as in serq_fast (`_within_doubles`); `0 ^ k` for k < 0
    is inf, as `1 / 0`.

    With an infinite operand, the value of IEEE 754 `pow` (Python's float `**`): `x ^ 0 = 1` and
    `1 ^ y = 1` for every x, y (also ±inf); `x ^ ±inf` by whether |x| is above 1 (`(-1) ^ ±inf = 1`,
    `0 ^ -inf = inf`); `(±inf) ^ y` is inf for y > 0 (−inf for −inf and an odd integer y) and 0
    for y < 0.
    """
    if y == 0 or x == 1:
        return ONE
    if is_inf(y):
        if x == -1:
            return ONE
        big = x > 1 or x < -1   # |x| > 1
        return (INF if big else ZERO) if y > 0 else (ZERO if big else INF)
    if is_inf(x):
        if y < 0:
            return ZERO
        odd = y.denominator == 1 and y.numerator % 2 == 1
        return -INF if x < 0 and odd else INF
    base, exponent = x, y   # both finite here

    def call() -> str:
        return f"pow({number_text(base)}, {number_text(exponent)})"

    if exponent.denominator == 1:
        k = int(exponent)
        if k < 0 and base == 0:
            return INF   # as x / 0
        if abs(k) <= EXACT_EXPONENT:
            return _within_doubles(call, lambda: base ** k if k > 0 else Fraction(1) / (base ** -k))
    elif base < 0:
        raise SpecError(negative_to_fraction(call()))
    elif base == 0:
        return ZERO if exponent > 0 else INF
    return _within_doubles(call, lambda: _frac(_CTX.power(_dec(base), _dec(exponent))))


def min_v(a: Value, b: Value) -> Value:
    """min of two values."""
    return a if a <= b else b


def max_v(a: Value, b: Value) -> Value:
    """max of two values."""
    return a if a >= b else b


def amount(v: Amount) -> Amount:
    """A pool amount (units, allocations, positions, cache sizes): exact, an int when whole and
    the Fraction otherwise, so whole amounts keep their int type (docs/state.md: ints when whole,
    "p/q" otherwise)."""
    if isinstance(v, int):
        return v
    return int(v) if v.denominator == 1 else v


def amount_wire(v: Amount) -> int | str:
    """The state-line form of a pool amount: a JSON int when whole, else its wire text."""
    v = amount(v)
    return v if isinstance(v, int) else wire(v)


def amount_from_wire(x: Any) -> Amount:
    """The inverse of `amount_wire`."""
    return x if isinstance(x, int) else amount(cast(Fraction, value_from_wire(x)))   # "p/q": never inf


def roundup_block(units: Amount, block: Amount | None) -> Amount:
    """A request is rounded up to a whole block (docs/language.md §6); exact for any rational block."""
    if block is None:
        return amount(units)
    return amount(-(-units // block) * block)


def rounddown_block(units: Amount, block: Amount | None) -> Amount:
    """A cache entry is rounded down to a whole block (docs/language.md §6, §11.4)."""
    if block is None:
        return amount(units)
    return amount((units // block) * block)


def wire(v: Any) -> str:
    """The wire text of a value ("p/q", "inf"), whatever its size: an exact value may have more
    digits than Python's default limit for int-to-text conversion (4300; `exp(10000)` has 4343),
    which is lifted for this conversion only."""
    try:
        return value_to_wire(v)
    except ValueError:
        if not hasattr(sys, "set_int_max_str_digits"):
            raise
        old = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(0)
        try:
            return value_to_wire(v)
        finally:
            sys.set_int_max_str_digits(old)

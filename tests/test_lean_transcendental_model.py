"""SerqLang/Transcendental.lean, transliterated to Python step for step, against serq_spec.

No Lean toolchain could be installed where SerqLang was written, so the Lean file has never been
compiled or run. The best evidence available here that its algorithm is right is this: every
Lean function of that file has a Python twin below with the same name and the same integer steps
(the same fuel, the same floor/ceiling divisions, the same order of checks), and the twins
reproduce `serq_spec.values.sqrt_v` / `exp_v` / `ln_v` / `pow_v` exactly — the same rational —
on a few thousand inputs, including rounding ties of the argument, arguments next to 1, and the
ends of the domain. What this does not show: that the Lean text means what its twin does (a
transliteration slip would go unseen until `lake build` and a run), nor agreement on inputs
not drawn here (the correctness argument for exp/ln — directed bounds, irrational values never
on a rounding boundary — is in the Lean file's header and docs/lean.md).

`None`-free results: each `*V` twin returns ("ok", value) or ("error", message), as `Res Value`.
"""

from __future__ import annotations

import math
import random
import re
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from serq_spec import values as V
from serq_spec.errors import SpecError

REPO = Path(__file__).resolve().parents[1]
LEAN = REPO / "SerqLang" / "Transcendental.lean"

DIGITS = 40
POW_DIGITS = 63
EXP_MAX = 2000000
ADJ_MAX = 999999
FUEL = 12
INF = float("inf")


# ---- Value.lean ------------------------------------------------------------------------------

DOUBLE_OVERFLOW = Fraction(2 ** 1024 - 2 ** 970)   # Value.doubleOverflow


def withinDoubles(r):
    """Value.withinDoubles on a result R = ("ok", v) (any other result passes through): a value
    at or above the doubles' overflow in magnitude is the error of docs/language.md §4.1."""
    if r[0] == "ok" and abs(r[1]) >= DOUBLE_OVERFLOW:
        return ("beyond", None)
    return r


def log2(n: int) -> int:
    """Nat.log2: ⌊log2 n⌋, 0 for 0."""
    return n.bit_length() - 1 if n > 0 else 0


def isqrt(n: int) -> int:
    """SerqLang.isqrt: Newton's iteration from n, stopping when the iterate stops decreasing."""
    if n < 2:
        return n
    x = n
    for _ in range(n + 1):
        y = (x + n // x) // 2
        if y < x:
            x = y
        else:
            break
    return x


def nsub(a: int, b: int) -> int:
    """Nat subtraction (truncated at 0)."""
    return a - b if a >= b else 0


# ---- Transcendental.lean ---------------------------------------------------------------------

def ceilDiv(a, b):
    return (a + b - 1) // b


def gePow10(n, d, k):
    return d * 10 ** k <= n if k >= 0 else d <= n * 10 ** (-k)


def log10Guess(n, d):
    a, b = log2(n), log2(d)
    return (a - b) * 30103 // 100000 if b <= a else -((b - a) * 30103 // 100000)


def adjDown(n, d, fuel, a):
    for _ in range(fuel):
        if gePow10(n, d, a):
            return a
        a -= 1
    return a


def adjUp(n, d, fuel, a):
    for _ in range(fuel):
        if gePow10(n, d, a + 1):
            a += 1
        else:
            return a
    return a


def adjExp(n, d):
    return adjUp(n, d, 8, adjDown(n, d, 8, log10Guess(n, d)))


def roundDiv(n, d, prec):
    e = adjExp(n, d) - prec + 1
    num = n * 10 ** (-e) if e <= 0 else n
    den = d if e <= 0 else d * 10 ** e
    q, r = num // den, num % den
    if den < 2 * r or (2 * r == den and q % 2 == 1):
        q += 1
    return (10 ** (prec - 1), e + 1) if q == 10 ** prec else (q, e)


def decRat(c, e):
    return (c * 10 ** e, 1) if e >= 0 else (c, 10 ** (-e))


def ofDec(neg, c, e):
    n, d = decRat(c, e)
    return Fraction(-n if neg else n, d)


def decOf(q: Fraction):
    c, e = roundDiv(abs(q.numerator), q.denominator, DIGITS)
    return None if ADJ_MAX < abs(e + DIGITS - 1) else (c, e)


def sqrtDec(c0, e0):
    c = c0 if e0 % 2 == 0 else c0 * 10
    e = e0 if e0 % 2 == 0 else e0 - 1
    q40 = isqrt(c * 10 ** 40)
    t = 38 if 10 ** DIGITS <= q40 else 40
    m = c * 10 ** t
    q = isqrt(m) if t == 38 else q40
    if q < nsub(m, q * q):
        q += 1
    return q, (e - t) // 2          # e - t is even: Int division is exact


def expSeriesGo(p, q, fuel, i, tlo, thi, slo, shi):
    for _ in range(fuel):
        if thi <= 1:
            return slo, shi + thi
        tlo = tlo * p // (q * i)
        thi = ceilDiv(thi * p, q * i)
        i, slo, shi = i + 1, slo + tlo, shi + thi
    return None


def expSeries(p, q, b):
    s = 2 ** b
    return expSeriesGo(p, q, b + 8, 1, s, s, s, s)


def squareGo(b, k, mlo, mhi, s):
    for _ in range(k):
        lo2, hi2 = mlo * mlo, mhi * mhi
        sh = nsub(log2(hi2) + 1, b)
        mlo, mhi, s = lo2 // 2 ** sh, ceilDiv(hi2, 2 ** sh), 2 * s - sh
    return mlo, mhi, s


def frac2(m, s):
    return (m, 2 ** s) if s >= 0 else (m * 2 ** (-s), 1)


def expHalvings(n, d):
    return nsub(log2(n) + 2, log2(d))


def expDecGo(neg, n, d, prec, j, fuel, b):
    for _ in range(fuel):
        r = expSeries(n, d * 2 ** j, b)
        if r is None:
            return None
        slo, shi = r
        mlo, mhi, s = squareGo(b, j, slo, shi, b)
        lon, lod = frac2(mlo, s)
        hin, hid = frac2(mhi, s)
        r1 = roundDiv(hid, hin, prec) if neg else roundDiv(lon, lod, prec)
        r2 = roundDiv(lod, lon, prec) if neg else roundDiv(hin, hid, prec)
        if r1 == r2:
            return r1
        b = 2 * b
    return None


def expDec(neg, n, d, prec):
    j = expHalvings(n, d)
    return expDecGo(neg, n, d, prec, j, FUEL, 2 * j + 4 * prec + 64)


def atanhGo(p2, q2, fuel, i, wlo, whi, slo, shi):
    for _ in range(fuel):
        if whi <= 1:
            return slo, shi + whi
        wlo = wlo * p2 // q2
        whi = ceilDiv(whi * p2, q2)
        slo, shi = slo + wlo // (2 * i + 1), shi + ceilDiv(whi, 2 * i + 1)
        i += 1
    return None


def atanhSeries(p, q, w):
    s = 2 ** w
    wlo, whi = s * p // q, ceilDiv(s * p, q)
    return atanhGo(p * p, q * q, w + 8, 1, wlo, whi, wlo, whi)


def lnReduce(n, d):
    k = log2(n) - log2(d)
    mn = n if k >= 0 else n * 2 ** (-k)
    md = d * 2 ** k if k >= 0 else d
    if 2 * (md * md) <= mn * mn:
        return k + 1, mn, md * 2
    if 2 * (mn * mn) < md * md:
        return k - 1, mn * 2, md
    return k, mn, md


def lnDecGo(k, zneg, zp, zq, prec, fuel, w):
    for _ in range(fuel):
        a, b = atanhSeries(1, 3, w), atanhSeries(zp, zq, w)
        if a is None or b is None:
            return None
        (l2lo, l2hi), (alo, ahi) = a, b
        l2lo, l2hi = 2 * l2lo, 2 * l2hi
        zlo = -(2 * ahi) if zneg else 2 * alo
        zhi = -(2 * alo) if zneg else 2 * ahi
        lo = k * l2lo + zlo if k >= 0 else k * l2hi + zlo
        hi = k * l2hi + zhi if k >= 0 else k * l2lo + zhi
        den = 2 ** w
        if 0 < lo:
            r1, r2 = roundDiv(lo, den, prec), roundDiv(hi, den, prec)
            if r1 == r2:
                return (False,) + r1
        elif hi < 0:
            r1, r2 = roundDiv(-hi, den, prec), roundDiv(-lo, den, prec)
            if r1 == r2:
                return (True,) + r1
        w = 2 * w
    return None


def lnDec(n, d, prec):
    k, mn, md = lnReduce(n, d)
    zp = md - mn if mn < md else mn - md
    return lnDecGo(k, mn < md, zp, mn + md, prec, FUEL, 4 * prec + 64 + log2(abs(k) + 1))


def powReal(x: Fraction, y: Fraction):
    bx, by = decOf(x), decOf(y)
    if bx is None or by is None:
        return ("error", "range")
    (cx, ex), (cy, ey) = bx, by
    n, d = decRat(cx, ex)
    yn, yd = decRat(cy, ey)
    if n == d:
        return ("ok", Fraction(1))
    if yn % yd == 0:
        return ("error", "range")
    lr = lnDec(n, d, POW_DIGITS)
    if lr is None:
        return ("error", "precision")
    lneg, cl, el = lr
    pc, pe = roundDiv(cl * cy, 1, POW_DIGITS)
    pneg = lneg != (y < 0)
    pn, pd = decRat(pc, pe + el + ey)
    if EXP_MAX * pd < pn:
        return ("error", "range")
    er = expDec(pneg, pn, pd, POW_DIGITS)
    if er is None:
        return ("error", "precision")
    n2, d2 = decRat(*er)
    return ("ok", ofDec(False, *roundDiv(n2, d2, DIGITS)))


def sqrtV(q: Fraction):
    """The finite positive non-square branch of SerqLang.sqrtV (the rest is Value.sqrtV)."""
    b = decOf(q)
    if b is None:
        return ("error", "range")
    r, e2 = sqrtDec(*b)
    return ("ok", ofDec(False, r, e2))


def expV(q: Fraction):
    """SerqLang.expV on a finite q ≠ 0 with q ≥ -100000."""
    if q > 710:
        return ("beyond", None)
    b = decOf(q)
    if b is None:
        return ("error", "range")
    n, d = decRat(*b)
    if EXP_MAX * d < n:
        return ("error", "range")
    r = expDec(q < 0, n, d, DIGITS)
    return ("error", "precision") if r is None else withinDoubles(("ok", ofDec(False, *r)))


def lnV(q: Fraction):
    """SerqLang.lnV on a finite q > 0, q ≠ 1."""
    b = decOf(q)
    if b is None:
        return ("error", "range")
    n, d = decRat(*b)
    if n == d:
        return ("ok", Fraction(0))
    r = lnDec(n, d, DIGITS)
    return ("error", "precision") if r is None else ("ok", ofDec(*r))


# ---- the comparison --------------------------------------------------------------------------

def spec(f, *args):
    try:
        return ("ok", f(*args))
    except SpecError as exc:
        return ("spec-error", str(exc))
    except ArithmeticError as exc:          # decimal.Overflow etc.: values.py has no value either
        return ("spec-error", type(exc).__name__)


def is_square(q: Fraction) -> bool:
    return math.isqrt(q.numerator) ** 2 == q.numerator and math.isqrt(q.denominator) ** 2 == q.denominator


def rand_rat(rnd: random.Random) -> Fraction:
    n = rnd.randint(1, 10 ** rnd.choice([1, 2, 3, 5, 10, 20, 40, 41, 60]))
    d = rnd.randint(1, 10 ** rnd.choice([0, 0, 1, 2, 5, 20, 39, 45]))
    if rnd.random() < 0.15:
        d = rnd.choice([2, 5, 10, 16, 25, 125, 1024]) ** rnd.randint(1, 30)
    return Fraction(n, d)


def edge_args() -> list[Fraction]:
    out = []
    for k in range(1, 45):
        out += [1 + Fraction(1, 10 ** k), 1 - Fraction(1, 10 ** k), Fraction(1, 10 ** k), Fraction(10 ** k),
                Fraction(3, 10 ** k) + 1, Fraction(7, 2 ** k)]
    for k in range(1, 20):   # half-way cases of the 40-digit argument rounding
        out += [Fraction(10 ** 40 + 10 * k + 5), Fraction(10 ** 40 + 10 * k + 5, 10 ** k),
                Fraction(2 * 10 ** 40 + 10 * k + 5, 2 ** k), Fraction(10 ** 41 + 50 + 100 * k, 10 ** 3)]
    return out


def agree(got, want) -> bool:
    if got[0] == "error":
        return False
    if got[0] == "beyond":   # both refuse a result above the largest double
        return want[0] == "spec-error" and "is beyond the range of doubles" in want[1]
    return want == got


@pytest.fixture(scope="module", autouse=True)
def _digits():
    old = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else None
    if old is not None:
        sys.set_int_max_str_digits(0)
    yield
    if old is not None:
        sys.set_int_max_str_digits(old)


def test_sqrt_agrees_with_serq_spec():
    rnd = random.Random(20261130)
    args = [rand_rat(rnd) for _ in range(2500)] + edge_args()
    checked = 0
    for q in args:
        if q <= 0 or is_square(q):
            continue
        got, want = sqrtV(q), spec(V.sqrt_v, q)
        assert agree(got, want), (q, got, want)
        checked += 1
    assert checked >= 2000


def test_exp_agrees_with_serq_spec():
    rnd = random.Random(7)
    args = []
    for _ in range(2000):
        q = rand_rat(rnd)
        if q > 3000:
            q = Fraction(q.numerator % 3000 + 1, q.denominator)
        args.append(q if rnd.random() < 0.5 else -q)
    for q in edge_args():
        if q <= 3000:
            args += [q, -q]
    args += [Fraction(-100000), Fraction(-99999) - Fraction(1, 7), Fraction(2 * 10 ** 6), Fraction(10 ** 6, 3)]
    checked = 0
    for q in args:
        if q == 0 or q < -100000:
            continue
        got, want = expV(q), spec(V.exp_v, q)
        assert agree(got, want), (q, got, want)
        checked += 1
    assert checked >= 2000


def test_ln_agrees_with_serq_spec():
    rnd = random.Random(11)
    args = [rand_rat(rnd) for _ in range(2000)] + edge_args() + [1 + Fraction(1, 10 ** 41), 1 - Fraction(1, 10 ** 41)]
    checked = 0
    for q in args:
        if q <= 0 or q == 1:
            continue
        got, want = lnV(q), spec(V.ln_v, q)
        assert agree(got, want), (q, got, want)
        checked += 1
    assert checked >= 2000


def test_pow_agrees_with_serq_spec():
    rnd = random.Random(13)
    pairs = []
    for _ in range(1200):
        x, y = rand_rat(rnd), rand_rat(rnd)
        if y.denominator == 1:
            y += Fraction(1, 2)
        if abs(float(y)) * (abs(math.log(float(x))) + 1) > 1e5:
            y = Fraction(y.numerator % 97 + 1, y.denominator) if y.denominator > 1 else Fraction(1, 3)
        pairs.append((x, y if rnd.random() < 0.6 else -y))
    for x in [Fraction(4), Fraction(9, 4), Fraction(2), Fraction(10) ** 30, Fraction(1, 10 ** 30),
              1 + Fraction(1, 10 ** 39), 1 - Fraction(1, 10 ** 40), 1 + Fraction(1, 10 ** 60)]:
        for y in [Fraction(1, 2), Fraction(-1, 2), Fraction(1, 3), Fraction(-5, 2), Fraction(1, 10 ** 30),
                  Fraction(7, 10 ** 45), Fraction(45327, 2)]:
            pairs.append((x, y))
    checked = skipped = 0
    for x, y in pairs:
        if y.denominator == 1 or x == 1:
            continue
        got, want = withinDoubles(powReal(x, y)), spec(V.pow_v, x, y)
        if got[0] == "error":
            # outside the Lean domain: only where |y · ln x| is beyond EXP_MAX
            assert abs(float(y) * math.log(float(x))) > EXP_MAX * 0.99, (x, y, got, want)
            skipped += 1
            continue
        assert agree(got, want), (x, y, got, want)
        checked += 1
    assert checked >= 1000 and skipped <= 10


def test_out_of_domain_is_an_error_not_a_value():
    assert expV(Fraction(2 * 10 ** 6 + 1)) == ("beyond", None)   # above the doubles before any series
    assert decOf(Fraction(10) ** 1000000) is None          # adjusted exponent 1000000 > Emax
    assert decOf(Fraction(1, 10 ** 1000000)) is None
    # an exponent whose 40-digit decimal is an integer: libmpdec's integer power, not modelled
    assert powReal(Fraction(3, 2), Fraction(3 * 10 ** 40 + 1, 2)) == ("error", "range")
    # a base whose 40-digit decimal is 1 gives 1 whatever the exponent (libmpdec _qcheck_pow_one)
    assert powReal(1 + Fraction(1, 10 ** 60), Fraction(3 * 10 ** 40 + 1, 2)) == ("ok", 1)
    assert spec(V.pow_v, 1 + Fraction(1, 10 ** 60), Fraction(3 * 10 ** 40 + 1, 2)) == ("ok", 1)


LEAN_NAMES = ["ceilDiv", "gePow10", "log10Guess", "adjDown", "adjUp", "adjExp", "roundDiv", "decRat",
              "ofDec", "decOf", "sqrtDec", "expSeriesGo", "expSeries", "squareGo", "frac2", "expHalvings",
              "expDecGo", "expDec", "atanhGo", "atanhSeries", "lnReduce", "lnDecGo", "lnDec", "powReal",
              "sqrtV", "expV", "lnV", "powV"]


def test_the_lean_file_has_every_twin_and_the_same_constants():
    text = LEAN.read_text()
    for name in LEAN_NAMES:
        assert re.search(rf"^def {name}\b", text, re.M), f"Transcendental.lean declares no {name}"
        if name not in ("powV",):
            assert name in globals(), name
    for const, value in [("DIGITS", DIGITS), ("POW_DIGITS", POW_DIGITS), ("EXP_MAX", EXP_MAX),
                         ("ADJ_MAX", ADJ_MAX), ("FUEL", FUEL)]:
        assert re.search(rf"^def {const} : Nat := {value}$", text, re.M), const
    assert V.DIGITS == DIGITS
    assert V._CTX.prec == DIGITS and V._CTX.Emax == ADJ_MAX and V._CTX.Emin == -ADJ_MAX
    # the expression layer calls the new functions, not the exact-only ones of Value.lean
    expr = (REPO / "SerqLang" / "Expr.lean").read_text()
    assert "then sqrtV a" in expr and "then expV a" in expr and "then lnV a" in expr
    assert "Value.powV" not in expr and expr.count("powV x y") == 2

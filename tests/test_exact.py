"""The front-end's constant folding (serq.exact) against the spec's run-time arithmetic
(serq_spec.values): a constant must mean what the same expression means when the spec evaluates
it, so wherever the front-end folds (neither Inexact nor irrational) both give the same value or
both refuse it."""

from __future__ import annotations

import itertools
import math
import sys
from fractions import Fraction as F
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from serq import exact  # noqa: E402

values = pytest.importorskip("serq_spec.values")
from serq_spec.errors import SpecError  # noqa: E402

INF = math.inf
GRID = [F(0), F(1), F(-1), F(2), F(-2), F(1, 2), F(-1, 2), F(4), F(-8), F(3), INF, -INF]
BINARY = {"+": (exact.add, values.add), "-": (exact.sub, values.sub), "*": (exact.mul, values.mul),
          "/": (exact.div, values.div), "^": (exact.power, values.pow_v),
          "min": (min, values.min_v), "max": (max, values.max_v)}
UNARY = {"sqrt": (exact.sqrt, values.sqrt_v), "exp": (exact.exp, values.exp_v), "ln": (exact.ln, values.ln_v),
         "floor": (exact.floor, values.floor_v), "ceil": (exact.ceil, values.ceil_v)}

def outcome(f, *args):
    try:
        return "value", f(*args)
    except exact.Inexact:
        return "unfolded", None
    except (exact.NaNError, SpecError):
        return "refused", None


def test_folding_agrees_with_the_spec():
    for op, (fold, spec) in BINARY.items():
        for a, b in itertools.product(GRID, GRID):
            got = outcome(fold, a, b)
            if got[0] == "unfolded":
                continue
            assert got == outcome(spec, a, b), (op, a, b)
    for op, (fold, spec) in UNARY.items():
        for a in GRID:
            got = outcome(fold, a)
            if got[0] != "unfolded":
                assert got == outcome(spec, a), (op, a)


def test_numbers_are_ascii_decimals():
    assert exact.parse_number("2e-5") == F(1, 50000) and exact.parse_number(".5") == F(1, 2)
    for bad in ("1_000", "1/2", "\u0663", " 1", "1 ", "inf", "0x10", "1e", ""):
        with pytest.raises(ValueError):
            exact.parse_number(bad)
    with pytest.raises(exact.Inexact):
        exact.parse_number("1e100000")


def test_whole_in():
    assert exact.whole_in(F(3), 1, 4096) and exact.whole_in(F(0), 0, 0) and exact.whole_in(F(10 ** 9), 1, INF)
    assert not any(exact.whole_in(v, 1, 4096) for v in (F(1, 2), F(0), F(4097), INF, -INF))


def test_spec_pow_with_an_infinite_operand_is_ieee_pow():
    """Every case with ±inf as base or exponent has the value of IEEE 754 pow (Python's float **)."""
    for a, b in itertools.product(GRID + [F(5, 2), F(-5, 2)], GRID + [F(5, 2), F(-5, 2)]):
        if not (values.is_inf(a) or values.is_inf(b)):
            continue
        want = float(a) ** float(b)
        got = values.pow_v(a, b)
        assert float(got) == want, (a, b, got, want)
        assert values.is_inf(got) or isinstance(got, F)

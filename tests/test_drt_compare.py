"""The differential harness's one comparison (python/serq_drt/compare.py): each rule accepts what
the pairs must agree on and refuses a seeded difference, with the path where it is."""

from __future__ import annotations

import math

import pytest

from serq_drt.compare import EXACT, EXACT_IN_ORDER, WIRE_VS_FLOAT, first_difference, first_divergence


@pytest.mark.parametrize("a,b", [
    ("1/3", 1 / 3), ("1/3", 0.33333333333333), ("inf", math.inf), ("-inf", -math.inf), (3, 3.0),
    ("10", 10.0000000001), ("1", 1.0000000005), ("name", "name"), (None, None), (True, True), ("0", 0.0),
])
def test_wire_vs_float_agrees(a, b):
    assert first_difference({"x": [a]}, {"x": [b]}, WIRE_VS_FLOAT) is None


@pytest.mark.parametrize("a,b", [
    ("1/3", 0.3334), ("inf", 1e308), (3, 3.0000001), (3, "3"), ("name", "other"), (None, 0),
    ("1e400", 1e308), ("x", 1.0), (1, [1]), ("1", 1.000000002), ("1000", 1000.000002),
])
def test_wire_vs_float_refuses(a, b):
    d = first_difference({"x": [a]}, {"x": [b]}, WIRE_VS_FLOAT)
    assert d is not None and d.path == ".x[0]" and d.field == "x"


def test_beyond_binary64_is_infinite_on_the_float_side():
    assert first_difference("1e400", math.inf, WIRE_VS_FLOAT) is None


def test_a_value_of_many_digits_is_compared():
    """An exact mean of the online estimates (docs/spec.md "Online estimates") has about 2 digits
    per sample: beyond Python's 4300-digit text limit it is still a number, not a mismatch."""
    digits = "1" + "0" * 4999 + "1"          # 10^5000 + 1
    text = f"{digits}/3{'0' * 4999}"          # (10^5000 + 1) / (3·10^4999) = 10/3 + a tail below 1e-9
    assert first_difference(text, 10 / 3, WIRE_VS_FLOAT) is None
    assert first_difference(text, 3.4, WIRE_VS_FLOAT) is not None


def test_exact_is_exact():
    assert first_difference({"a": [1, "p/q"]}, {"a": [1, "p/q"]}) is None
    assert first_difference({"a": [1, 2]}, {"a": [1, 2.0000000001]}).path == ".a[1]"
    assert first_difference({"a": True}, {"a": 1}).path == ".a"   # a boolean is not a number
    assert first_difference({"a": 1}, {"a": 1, "b": 2}).path == " keys"
    assert first_difference([1, 2], [1, 2, 3]).path == ""


def test_key_order_is_the_rules():
    a, b = {"z": 1, "a": 1}, {"z": 2, "a": 2}
    assert first_difference(a, b, EXACT).field == "a"           # sorted: stable paths
    assert first_difference(a, b, EXACT_IN_ORDER).field == "z"  # the left side's order


def test_first_divergence_of_two_runs():
    run = [{"t": "0"}, {"t": "1"}, {"t": "2"}]
    assert first_divergence(run, [dict(x) for x in run]) is None
    assert first_divergence(run, run[:2])[0] == 2
    k, d = first_divergence(run, [{"t": "0"}, {"t": "5"}, {"t": "2"}])
    assert (k, d.path, d.a, d.b) == (1, ".t", "1", "5")

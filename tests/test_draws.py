"""The draw streams and laws shared by both engines (python/serq/draws.py, docs/sessions.md)."""

from __future__ import annotations

import hashlib
import math
import sys
from fractions import Fraction
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from serq import draws


def test_stream_seed_is_the_documented_hash():
    want = int.from_bytes(hashlib.sha256(b"serq/1:turn:7:12:3").digest()[:8], "big")
    assert draws.stream_seed("turn", 7, 12, 3) == want


def test_stream_is_the_seeded_mersenne_twister():
    # make_stream uses the C base class of random.Random directly: the values must be exactly
    # random.Random's, for every kind and key (the stream contract of docs/sessions.md), and the
    # cached hash prefix must not leak between kinds or keys
    import random

    for kind, key in [("session", (1, 0)), ("turn", (7, 12, 3)), ("turn", (7, 12, 4)), ("arrival", (1,)),
                      ("machine", (2 ** 40,)), ("trace", (0,)), ("session", (1, 0))]:
        want = int.from_bytes(hashlib.sha256(("serq/1:" + kind + ":" + ":".join(map(str, key))).encode()).digest()[:8], "big")
        assert draws.stream_seed(kind, *key) == want
        ref = random.Random(want)
        rng = draws.make_stream(kind, *key)
        assert [rng.random() for _ in range(50)] == [ref.random() for _ in range(50)]


def test_exact_values():
    rng = draws.make_stream("session", 1, 0)
    assert draws.draw_exact("det", [Fraction(1, 3)], rng) == Fraction(1, 3)
    assert draws.draw_exact("bernoulli", [Fraction(1)], rng) == 1
    x = draws.draw_exact("exp", [Fraction(2)], draws.make_stream("session", 1, 0))
    assert x == Fraction(format(draws.draw_float("exp", [2.0], draws.make_stream("session", 1, 0)), ".12g"))


@pytest.mark.parametrize("dist, args", [
    ("erlang", [math.inf, 1.0]),        # int(inf) raised OverflowError inside a run
    ("erlang", [1e12, 1.0]),            # a trillion exponentials: the run hung
    ("erlang", [2.0, -1.0]), ("h2", [-1.0, 4.0]), ("exp", [-1.0]),  # negative means
    ("h2", [1.0, math.inf]), ("exp", [math.inf]), ("uniform", [0.0, math.inf]),
    ("uniform", [math.nan, 1.0]),
])
def test_arguments_outside_the_law_are_a_draw_error(dist, args):
    with pytest.raises(draws.DrawError):
        draws.draw_float(dist, args, draws.make_stream("machine", 1))

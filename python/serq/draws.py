"""Random draws: the streams of docs/sessions.md and the laws of docs/language.md §4.3.

Both engines draw through this module (the spec only while sampling a sessions file, the fast
simulator in live runs), so a (session, turn) sees the same values in both and under any
deployment with the same seed.
"""

from __future__ import annotations

import _random
import hashlib
import math
from fractions import Fraction
from typing import Sequence

from serq.wire import Value

# The laws of docs/language.md §4.3 and how many arguments each takes (the linker checks calls with it).
ARITY = {"exp": 1, "det": 1, "uniform": 2, "erlang": 2, "h2": 2, "bernoulli": 1}
# An Erlang draw sums k exponentials, one `U` each: a bound keeps a huge k from hanging a run.
MAX_ERLANG_PHASES = 10 ** 6


class DrawError(ValueError):
    """A draw whose arguments are outside its law's domain (e.g. a negative mean)."""


# The hash state after "serq/1:<kind>:" for each stream kind: a stream's seed hashes only its key
# parts on a copy (speed: a session and each of its turns open a stream).
_PREFIX: dict = {}


def stream_seed(kind: str, *key: int) -> int:
    """The integer seed of the stream `kind` with key parts `key` (docs/sessions.md): the first
    8 bytes, big-endian, of SHA-256("serq/1:" + kind + ":" + the key parts joined by ":")."""
    h = _PREFIX.get(kind)
    if h is None:
        h = _PREFIX[kind] = hashlib.sha256(("serq/1:" + kind + ":").encode("ascii"))
    h = h.copy()
    h.update(":".join(str(int(k)) for k in key).encode("ascii"))
    return int.from_bytes(h.digest()[:8], "big")


def make_stream(kind: str, *key: int) -> _random.Random:
    """The stream's generator: Python's Mersenne Twister seeded with `stream_seed`. The C base
    class of `random.Random` is used directly (speed): seeded with the same integer it yields
    the same `random()` values, the only method the draws use (tests/test_draws.py)."""
    return _random.Random(stream_seed(kind, *key))


def exact(x: float) -> Fraction:
    """The exact value of a drawn float: 12 significant digits (docs/sessions.md)."""
    if not math.isfinite(x):
        raise DrawError(f"a draw produced {x!r}")
    return Fraction(format(x, ".12g"))


def _outside(dist: str, args: Sequence[float], reason: str) -> DrawError:
    shown = ", ".join(format(a, "g") for a in args)
    return DrawError(f"~{dist}({shown}): arguments outside what the draw can sample ({reason})")


def _exp(mean: float, u: float) -> float:
    return -mean * math.log1p(-u)  # = -m·ln(1 − U); log1p keeps precision for small U


def draw_float(dist: str, args: Sequence[float], rng: _random.Random) -> float:
    """One draw of law `dist` with float arguments, consuming `U`s from `rng` (docs/language.md §4.3)."""
    if dist != "det" and not all(math.isfinite(a) for a in args):
        raise _outside(dist, args, "the arguments must be finite")
    if dist in ("exp", "erlang", "h2"):
        mean = args[1] if dist == "erlang" else args[0]
        if mean < 0:
            raise DrawError(f"~{dist} needs a mean >= 0, got {mean}")
    if dist == "exp":
        (m,) = args
        return _exp(m, rng.random())
    if dist == "det":
        (x,) = args
        return x
    if dist == "uniform":
        lo, hi = args
        return lo + (hi - lo) * rng.random()
    if dist == "erlang":
        k, m = args
        if k > MAX_ERLANG_PHASES:
            raise _outside(dist, args, f"at most {MAX_ERLANG_PHASES} phases")
        n = max(int(k), 1)
        return sum(_exp(m / n, rng.random()) for _ in range(n))
    if dist == "h2":
        m, cv2 = args
        cv2 = max(cv2, 1.0)  # cv² below 1 is clamped to 1 (an exponential)
        p = 0.5 * (1.0 + math.sqrt((cv2 - 1.0) / (cv2 + 1.0)))
        if rng.random() < p:
            return _exp(m / (2.0 * p), rng.random())
        return _exp(m / (2.0 * (1.0 - p)), rng.random())
    if dist == "bernoulli":
        (p,) = args
        return 1.0 if rng.random() < p else 0.0
    raise DrawError(f"unknown distribution ~{dist}")


def draw_exact(dist: str, args: Sequence[Value], rng: _random.Random) -> Fraction:
    """One draw as an exact value: `det` is exact, `bernoulli` is 0 or 1, the rest are rounded."""
    if dist == "det":
        (x,) = args
        if not isinstance(x, Fraction):
            raise DrawError(f"~det needs a finite value, got {x}")
        return x
    try:
        fargs = [float(a) for a in args]
    except OverflowError:
        raise DrawError(f"~{dist}: an argument beyond the range of floats (about 1e308), which "
                        "the draws compute with") from None
    if any(math.isnan(a) for a in fargs):
        raise DrawError(f"~{dist} with a NaN argument")
    x = draw_float(dist, fargs, rng)
    if dist == "bernoulli":
        return Fraction(int(x))
    return exact(x)

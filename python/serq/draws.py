"""Random draws: the streams of docs/sessions.md and the laws of docs/language.md §4.3.

Both engines draw through this module (the spec only while sampling a sessions file, the fast
simulator in live runs), so a (session, turn) sees the same values in both and under any
deployment with the same seed.

Stream v2 (docs/sessions.md) is counter-based: the i-th `U` of a stream is a pure function of the
stream's key and i (SplitMix64), so opening a stream costs a hash of its key parts, with no
generator to seed, and the `U`s of many streams or many draws can be made in one numpy call
(`stream_keys`, `uniforms`, `Stream.uniforms`) with exactly the scalar path's values.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Iterable, Sequence

from serq.wire import Value

if TYPE_CHECKING:  # numpy is imported where the vectorised path runs (a run that never uses it
    import numpy as np  # does not pay numpy's import time)

# The laws of docs/language.md §4.3 and how many arguments each takes (the linker checks calls with it).
ARITY = {"exp": 1, "det": 1, "uniform": 2, "erlang": 2, "h2": 2, "bernoulli": 1}
# An Erlang draw sums k exponentials, one `U` each: a bound keeps a huge k from hanging a run.
MAX_ERLANG_PHASES = 10 ** 6

# Speculative decoding's acceptance counts (docs/language.md §7.3): `accept (n, alpha);` draws n
# counts with the internal law "accept", one `U` each; a count is capped like a trace's accept field.
ACCEPT_LAW = "accept"
MAX_ACCEPT_COUNT = 999_999
# At most this many counts per turn (one per output number), so a huge n cannot hang a run.
MAX_ACCEPT_OUTPUTS = 10 ** 6

# The version of the streams below (docs/sessions.md "Stream versions").
STREAM_VERSION = 2


class DrawError(ValueError):
    """A draw whose arguments are outside its law's domain (e.g. a negative mean)."""


# ---- stream v2: SplitMix64 (docs/sessions.md) -------------------------------------------------
MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15          # SplitMix64's increment (the golden ratio, odd)
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_UNIT = 2.0 ** -53                  # a U is the top 53 bits of a 64-bit output, times 2^-53

# How many key parts each kind of stream takes after the seed (docs/sessions.md, Streams).
KEY_PARTS = {"arrival": 0, "trace": 0, "turn": 2, "session": 1, "machine": 0}


def mix64(z: int) -> int:
    """SplitMix64's output function: a bijection of 64-bit words."""
    z = ((z ^ (z >> 30)) * _MIX1) & MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & MASK64
    return z ^ (z >> 31)


# (kind, seed) -> the key state after the kind's tag and the seed: a session or turn stream then
# hashes only its own parts (speed: every session and each of its turns opens a stream). Bounded,
# since a sweep runs many seeds in one process.
_PREFIX: dict = {}
_PREFIX_MAX = 4096


def _prefix(kind: str, seed: int) -> int:
    h = _PREFIX.get((kind, seed))
    if h is None:
        if kind not in KEY_PARTS:
            raise ValueError(f"unknown stream kind {kind!r}")
        seed = int(seed)
        if seed < 0:
            raise ValueError(f"a stream's seed must be a non-negative integer, got {seed}")
        h = int.from_bytes(kind.encode("ascii"), "big")  # the kind's tag
        rest = seed
        while True:  # the seed's 64-bit limbs, least significant first (one for a seed below 2^64)
            h = mix64(h ^ (rest & MASK64))
            rest >>= 64
            if not rest:
                break
        if len(_PREFIX) >= _PREFIX_MAX:
            _PREFIX.clear()
        _PREFIX[(kind, seed)] = h
    return h


def _part(p) -> int:
    p = int(p)
    if not 0 <= p <= MASK64:
        raise ValueError(f"a stream key part must be an integer in [0, 2^64), got {p}")
    return p


def stream_key(kind: str, seed: int, *parts: int) -> int:
    """The 64-bit key of the stream `kind` of `seed` with key parts `parts` (docs/sessions.md):
    the kind's tag, then the seed's limbs, then each part, each absorbed as h = mix64(h ^ word)."""
    h = _prefix(kind, seed)
    if len(parts) != KEY_PARTS[kind]:
        raise ValueError(f"the {kind} stream takes {KEY_PARTS[kind]} key part(s) after the seed, got {len(parts)}")
    for p in parts:
        h = mix64(h ^ _part(p))
    return h


class Stream:
    """One stream: `random()` is its next `U`; `uniforms(n)` its next n `U`s in one numpy call,
    the same values (`U` number i, from 0, is mix64(key + (i + 1)·GAMMA mod 2^64) >> 11, times 2^-53)."""

    __slots__ = ("state",)

    def __init__(self, key: int) -> None:
        self.state = key  # key + (draws made)·GAMMA, mod 2^64

    def random(self, _g=GAMMA, _m=MASK64, _a=_MIX1, _b=_MIX2, _u=_UNIT) -> float:
        # the constants as defaults: locals, not global look-ups (speed: one call per draw)
        z = self.state = (self.state + _g) & _m
        z = ((z ^ (z >> 30)) * _a) & _m
        z = ((z ^ (z >> 27)) * _b) & _m
        return ((z ^ (z >> 31)) >> 11) * _u

    def uniforms(self, n: int) -> np.ndarray:
        """The next n `U`s (float64), as n calls of `random()` would give them."""
        import numpy as np

        steps = np.arange(1, n + 1, dtype=np.uint64)
        out = _mix64_array(np.uint64(self.state) + steps * np.uint64(GAMMA))
        self.state = (self.state + n * GAMMA) & MASK64
        return _to_unit(out)


class BufferedStream:
    """A stream for many draws (the arrival, trace and machine streams of a run): the same values
    as `Stream`, made in chunks. The first `SCALAR_FIRST` `U`s are made by the scalar path, the
    rest `NUMPY_CHUNK` at a time in numpy: importing numpy costs about 0.25 s (measured), which
    a run pays only once its streams have handed out enough draws to win it back."""

    __slots__ = ("stream", "buf", "i", "made", "scalar_first", "chunk")

    SCALAR_FIRST = 8192
    NUMPY_CHUNK = 4096

    def __init__(self, key: int, scalar_first: int = SCALAR_FIRST, chunk: int = NUMPY_CHUNK) -> None:
        self.stream = Stream(key)
        self.buf: list = []
        self.i = 0
        self.made = 0
        self.scalar_first = scalar_first
        self.chunk = chunk

    def random(self) -> float:
        i = self.i
        buf = self.buf
        if i == len(buf):
            buf = self._refill()
            i = 0
        self.i = i + 1
        return buf[i]

    def _refill(self) -> list:
        if self.made < self.scalar_first:
            r = self.stream.random
            buf = [r() for _ in range(min(256, self.scalar_first - self.made))]
        else:
            buf = self.stream.uniforms(self.chunk).tolist()
        self.made += len(buf)
        self.buf = buf
        return buf


def make_stream(kind: str, seed: int, *parts: int) -> Stream:
    """The stream `kind` of `seed` with key parts `parts` (docs/sessions.md): `stream_key`,
    inlined (speed: every session and each of its turns opens one)."""
    h = _PREFIX.get((kind, seed))
    if h is None:
        h = _prefix(kind, seed)
    if len(parts) != KEY_PARTS[kind]:
        return Stream(stream_key(kind, seed, *parts))  # raises the error
    for p in parts:
        if p.__class__ is not int or not 0 <= p <= MASK64:
            p = _part(p)
        z = h ^ p
        z = ((z ^ (z >> 30)) * _MIX1) & MASK64
        z = ((z ^ (z >> 27)) * _MIX2) & MASK64
        h = z ^ (z >> 31)
    return Stream(h)


def buffered_stream(kind: str, seed: int, *parts: int, scalar_first: int = BufferedStream.SCALAR_FIRST,
                    chunk: int = BufferedStream.NUMPY_CHUNK) -> BufferedStream:
    """`make_stream`'s values, made in chunks (for streams that hand out many draws)."""
    return BufferedStream(stream_key(kind, seed, *parts), scalar_first, chunk)


# ---- the vectorised path ---------------------------------------------------------------------


def _mix64_array(z: np.ndarray) -> np.ndarray:
    """`mix64` of every element of a uint64 array (array arithmetic wraps mod 2^64 silently, as
    the scalar path masks; only numpy scalars warn, so callers pass arrays)."""
    import numpy as np

    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    return z ^ (z >> np.uint64(31))


def _to_unit(z: np.ndarray) -> np.ndarray:
    import numpy as np

    return (z >> np.uint64(11)).astype(np.float64) * _UNIT  # exact: 53 bits times a power of two


def _parts_array(parts: Iterable[int] | np.ndarray) -> np.ndarray:
    import numpy as np

    if isinstance(parts, np.ndarray) and parts.dtype == np.uint64:
        return parts
    a = np.asarray(parts if isinstance(parts, np.ndarray) else list(parts))
    if a.size and (a.dtype.kind not in "iu" or a.min() < 0):
        raise ValueError("stream key parts must be non-negative integers below 2^64")
    return a.astype(np.uint64)


def stream_keys(kind: str, seed: int, serials, turns=None) -> np.ndarray:
    """The keys (uint64) of the `session` streams of `serials`, or of the `turn` streams of
    (serials, turns) (broadcast), in one numpy call: element for element `stream_key`'s values."""
    import numpy as np

    h = np.uint64(_prefix(kind, seed))
    want = 1 if turns is None else 2
    if KEY_PARTS[kind] != want:
        raise ValueError(f"the {kind} stream takes {KEY_PARTS[kind]} key part(s) after the seed, got {want}")
    keys = _mix64_array(h ^ _parts_array(serials))
    if turns is not None:
        keys = _mix64_array(keys ^ _parts_array(turns))
    return keys


def uniforms(keys, index) -> np.ndarray:
    """`U` number `index` (from 0; an array broadcasts against `keys`) of the streams with these
    keys, in one numpy call: exactly what `Stream(key)` gives at its (index + 1)-th `random()`."""
    import numpy as np

    keys = np.asarray(keys, dtype=np.uint64)
    shape = np.broadcast_shapes(keys.shape, np.shape(index))
    steps = _parts_array(np.atleast_1d(index).ravel()).reshape(np.shape(index) or (1,)) + np.uint64(1)
    z = np.atleast_1d(keys) + steps * np.uint64(GAMMA)  # arrays: uint64 wraps mod 2^64, silently
    return _to_unit(_mix64_array(z)).reshape(shape)


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


def accept_count(alpha: float, u: float) -> int:
    """One acceptance count of per-draft acceptance rate alpha from one `U` (docs/language.md
    §7.3): the number of leading successes of independent Bernoulli(alpha) drafts, drawn by
    inversion, so P(A >= a) = alpha^a and every count consumes exactly one `U` whatever its
    value (a turn's later draws do not move with alpha): A = floor(ln(1 − U) / ln(alpha)),
    at most MAX_ACCEPT_COUNT; alpha = 0 accepts nothing, alpha = 1 every draft."""
    if alpha <= 0.0:
        return 0
    if alpha >= 1.0:
        return MAX_ACCEPT_COUNT
    a = math.log1p(-u) / math.log(alpha)   # both logs <= 0: a >= 0
    return MAX_ACCEPT_COUNT if a >= MAX_ACCEPT_COUNT else int(a)


def accept_outputs(n: float) -> int:
    """The n of `accept (n, alpha);` (as a double) as the number of counts to draw: a whole
    number from 0 to MAX_ACCEPT_OUTPUTS, else a DrawError (both engines word it so)."""
    if not (0.0 <= n <= MAX_ACCEPT_OUTPUTS and n == math.floor(n)):   # NaN too
        raise DrawError(f"`accept (n, alpha)` needs n, the turn's output count, a whole number from 0 to "
                        f"{MAX_ACCEPT_OUTPUTS}, got {format(n, 'g')}")
    return int(n)


def accept_value(x: float) -> int:
    """A drawn or replayed acceptance count as a whole number: a sessions file edited to hold
    anything else does not fit the program (a DrawError)."""
    if not (0.0 <= x <= MAX_ACCEPT_COUNT and x == math.floor(x)):
        raise DrawError(f"an acceptance count of `accept (n, alpha)` is a whole number from 0 to {MAX_ACCEPT_COUNT}, "
                        f"got {format(x, 'g')}: the sessions file does not fit the program")
    return int(x)


def check_args(dist: str, args: Sequence[float]) -> None:
    """A DrawError when the arguments (as doubles) are outside the law's domain: infinite, a
    negative mean, too many Erlang phases. Both engines check every draw with it, a live one and
    a replayed one alike (docs/language.md §4.3): a program's fault is the same fault whether its
    values come from a stream or from a sessions file."""
    if dist == "det":
        if not math.isfinite(args[0]):
            raise DrawError(f"~det needs a finite value, got {args[0]}")
        return
    if dist == ACCEPT_LAW:
        if not 0.0 <= args[0] <= 1.0:   # NaN too
            raise DrawError(f"`accept (n, alpha)` needs a per-draft acceptance rate alpha in [0, 1], got "
                            f"{format(args[0], 'g')}: alpha is the chance that a draft is accepted")
        return
    if not all(math.isfinite(a) for a in args):
        raise _outside(dist, args, "the arguments must be finite")
    if dist in ("exp", "erlang", "h2"):
        mean = args[1] if dist == "erlang" else args[0]
        if mean < 0:
            raise DrawError(f"~{dist} needs a mean >= 0, got {mean}; a mean is a time or an amount: keep the "
                            "expression (or the input it reads) from going below 0")
    if dist == "erlang" and args[0] > MAX_ERLANG_PHASES:
        raise _outside(dist, args, f"at most {MAX_ERLANG_PHASES} phases")


def as_doubles(args: Sequence[Value]) -> list[float]:
    """Exact arguments as the doubles the draws compute with; one above the largest double is
    ±inf, which `check_args` refuses as serq_fast's own inf."""
    out = []
    for a in args:
        try:
            out.append(float(a))
        except OverflowError:
            out.append(math.inf if a > 0 else -math.inf)
    return out


def draw_float(dist: str, args: Sequence[float], rng: Stream | BufferedStream) -> float:
    """One draw of law `dist` with float arguments, consuming `U`s from `rng` (docs/language.md §4.3)."""
    check_args(dist, args)
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
    if dist == ACCEPT_LAW:
        (alpha,) = args
        return float(accept_count(alpha, rng.random()))
    raise DrawError(f"unknown distribution ~{dist}")


def draw_exact(dist: str, args: Sequence[Value], rng: Stream | BufferedStream) -> Fraction:
    """One draw as an exact value: `det` is exact, `bernoulli` is 0 or 1, the rest are rounded."""
    if dist == "det":
        (x,) = args
        if not isinstance(x, Fraction):
            raise DrawError(f"~det needs a finite value, got {x}")
        return x
    fargs = as_doubles(args)
    x = draw_float(dist, fargs, rng)
    if dist in ("bernoulli", ACCEPT_LAW):
        return Fraction(int(x))
    return exact(x)

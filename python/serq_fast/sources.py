"""Where draws come from: live streams (docs/sessions.md) or the lists of a sessions file.

A source is a callable `(dist, args, at) -> float`. Live sources draw through `serq.draws`
and round to 12 significant digits exactly as the sessions file does, so a live run and the
replay of its sample see the same values (up to float conversion of the same rational).

serq_spec counterpart: `serq_spec/workload.py` and `serq_spec/sample.py` (the pre-drawn
values, from the same streams).
"""

from __future__ import annotations

import math
from fractions import Fraction

from serq import draws
from serq.wire import value_from_wire

from serq.sessionsfile import missing_draw
from serq_fast.expr import RunError, to_float


_INF = math.inf
_log1p = math.log1p


class _Faults:
    """The seeded fault of the draws' fast path (docs/fast.md "Seeded faults"), set by each
    `step.Sim` from SERQ_FAST_FAULT (`plant_faults`), so that a session's source need not read
    the environment when it opens."""

    uniform_mirror = False


_FAULTS = _Faults()


def plant_faults(faults: set) -> None:
    _FAULTS.uniform_mirror = "draw_fast_uniform" in faults


def _round12(x: float) -> float:
    if not math.isfinite(x):
        raise RunError(f"a draw produced {x!r}")
    return float(format(x, ".12g"))


# The streams of a run (not of one session or turn): they hand out many draws, so their `U`s are
# made in numpy chunks (the same values, docs/sessions.md).
_RUN_STREAMS = ("arrival", "trace", "machine")


class LiveSource:
    """One stream of docs/sessions.md; optionally records the exact values it hands out."""

    __slots__ = ("rng", "log")

    def __init__(self, kind: str, *key: int, log: list | None = None) -> None:
        self.rng = draws.buffered_stream(kind, *key) if kind in _RUN_STREAMS else draws.make_stream(kind, *key)
        self.log = log

    def __call__(self, dist: str, args: list, at=None) -> float:
        if self.log is None:
            # labelled speed trick (docs/fast.md "Per-session work"): the three laws of the common
            # workloads drawn here, with `draws.check_args`'s tests and `draws.draw_float`'s
            # formulas inline (three calls fewer per draw); anything else, or an argument outside
            # the law's domain, takes the general path below, which raises its error
            if dist == "exp":
                m = args[0]
                if 0.0 <= m < _INF:
                    return _round12(-m * _log1p(-self.rng.random()))
            elif dist == "uniform":
                lo, hi = args
                if -_INF < lo < _INF and -_INF < hi < _INF:
                    if _FAULTS.uniform_mirror:  # seeded fault `draw_fast_uniform` (docs/fast.md)
                        return _round12(hi - (hi - lo) * self.rng.random())
                    return _round12(lo + (hi - lo) * self.rng.random())
            elif dist == "bernoulli":
                p = args[0]
                if -_INF < p < _INF:
                    return 1.0 if self.rng.random() < p else 0.0
        if dist == "det":
            v = args[0]
            if not math.isfinite(v):
                raise RunError(f"~det needs a finite value, got {v}")   # as draws.check_args
            if self.log is not None:
                self.log.append(_exact_det(v))
            return v
        try:
            x = draws.draw_float(dist, args, self.rng)
        except draws.DrawError as exc:
            raise RunError(str(exc)) from None
        whole = dist == "bernoulli" or dist == draws.ACCEPT_LAW   # exact as drawn (serq.draws.draw_exact)
        v = x if whole else _round12(x)
        if self.log is not None:
            self.log.append(str(Fraction(int(x)) if whole else Fraction(format(x, ".12g"))))
        return v


def _exact_det(v: float) -> str:
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return str(Fraction(v).limit_denominator(10**12))


class ListSource:
    """The next value of one list of a sessions file per draw (replay mode)."""

    __slots__ = ("values", "i", "what")

    def __init__(self, values: list, what: str) -> None:
        """VALUES of the stream WHAT (serq.sessionsfile.stream_name)."""
        self.values = [to_float(value_from_wire(v), f"the sessions file's draw of {what}") for v in values]
        self.i = 0
        self.what = what

    def __call__(self, dist: str, args: list, at=None) -> float:
        try:   # the arguments are checked as a live draw checks them (docs/language.md §4.3)
            draws.check_args(dist, args)
        except draws.DrawError as exc:
            raise RunError(str(exc)) from None
        if self.i >= len(self.values):
            raise RunError(missing_draw(self.what, self.i + 1, dist, len(self.values)), at)
        v = self.values[self.i]
        self.i += 1
        return v

    def leftover(self) -> int:
        return len(self.values) - self.i


def no_draw(dist: str, args: list, at=None) -> float:
    raise RunError(f"a draw ~{dist} where no stream applies")

"""Streaming statistics with bounded memory (docs/language.md §11.9; the method is in docs/report.md).

`Sample` keeps count, Welford mean and variance, a batch-means CI and p50/p90/p99:
- up to `EXACT_LIMIT` samples it stores them and everything is the exact §11.9 definition
  (20 batches of ⌊n/20⌋ in recording order, tail dropped, half-width 2.093·sqrt(s²/20);
  quantile = the ⌈q·n⌉-th smallest);
- beyond, it keeps 40 running batches (merged pairwise, doubling the batch size, when all 40
  are full) and a log-bucket quantile sketch of relative accuracy 0.5 %.
`TimeAverage` integrates a piecewise-constant value over [warm-up, end].

serq_spec counterpart: none — the spec keeps no statistics (docs/report.md is the fast
engine's).
"""

from __future__ import annotations

import math
from array import array

T_20 = 2.093  # Student t, 19 degrees of freedom, 95 % two-sided
N_BATCHES = 20
MIN_CI_SAMPLES = 40
EXACT_LIMIT = 1 << 16
SKETCH_ALPHA = 0.005  # relative accuracy of a quantile once past EXACT_LIMIT
_LOG_GAMMA = math.log((1 + SKETCH_ALPHA) / (1 - SKETCH_ALPHA))


def _rank(q: float, n: int) -> int:
    return min(max(math.ceil(q * n - 1e-12), 1), n)


def _ci_of_means(means: list) -> float:
    m = sum(means) / len(means)
    s2 = sum((x - m) ** 2 for x in means) / (len(means) - 1)
    return T_20 * math.sqrt(s2 / len(means))


class Sample:
    __slots__ = ("n", "mean", "m2", "xs", "bsum", "bsize", "bfill", "sketch", "zero", "neg")

    def __init__(self) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0
        # the exact samples as C doubles (8 bytes each, where a list of floats takes 32): up to
        # 65 536 of them per statistic, a few per request, so a run below the limit holds 4× less
        # and the peak before streaming is 0.5 MiB per statistic, not 2 (docs/fast.md "Memory")
        self.xs: array | None = array("d")
        self.bsum: list = []  # closed batch sums (streaming mode)
        self.bsize = 0
        self.bfill = [0, 0.0]  # samples and sum of the open batch
        self.sketch: dict = {}
        self.zero = 0
        self.neg: dict = {}

    def add(self, x: float) -> None:
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)
        xs = self.xs
        if xs is not None:
            xs.append(x)
            if len(xs) > EXACT_LIMIT:
                self._go_streaming()
        else:
            self._stream(x)

    @property
    def exact(self) -> list | None:
        """The exact samples in recording order (a list), or None once streaming."""
        return self.xs.tolist() if self.xs is not None else None

    def _go_streaming(self) -> None:
        xs, self.xs = self.xs, None
        self.bsize = max(1, len(xs) // 40)
        self.bsum = []
        self.bfill = [0, 0.0]
        for x in xs:
            self._stream(x)

    def _stream(self, x: float) -> None:
        f = self.bfill
        f[0] += 1
        f[1] += x
        if f[0] == self.bsize:
            self.bsum.append(f[1])
            self.bfill = [0, 0.0]
            if len(self.bsum) == 40:  # merge pairwise: 20 batches of twice the size
                self.bsum = [self.bsum[i] + self.bsum[i + 1] for i in range(0, 40, 2)]
                self.bsize *= 2
        if x > 0:
            i = math.ceil(math.log(x) / _LOG_GAMMA)
            self.sketch[i] = self.sketch.get(i, 0) + 1
        elif x == 0:
            self.zero += 1
        else:
            i = math.ceil(math.log(-x) / _LOG_GAMMA)
            self.neg[i] = self.neg.get(i, 0) + 1

    def cv2(self) -> float | None:
        if self.n < 2 or self.mean == 0:
            return None
        # divided by the mean twice: its square underflows to 0 for a mean below 1e-154 (a
        # ZeroDivisionError traceback, found by tools/fuzz_campaign.py)
        x = (self.m2 / (self.n - 1)) / self.mean / self.mean
        return x if math.isfinite(x) else None

    def ci(self) -> float | None:
        if self.n < MIN_CI_SAMPLES:
            return None
        if self.xs is not None:
            b = self.n // N_BATCHES
            xs = self.xs
            means = [sum(xs[i * b:(i + 1) * b]) / b for i in range(N_BATCHES)]
        else:
            k = len(self.bsum)  # 20 <= k < 40 closed batches of bsize samples
            g = k // N_BATCHES
            means = [sum(self.bsum[i * g:(i + 1) * g]) / (g * self.bsize) for i in range(N_BATCHES)]
        return _ci_of_means(means)

    def quantile(self, q: float) -> float | None:
        if self.n == 0:
            return None
        r = _rank(q, self.n)
        if self.xs is not None:
            return sorted(self.xs)[r - 1]
        # walk the sketch: negatives (largest magnitude first), zeros, positives
        seen = 0
        for i in sorted(self.neg, reverse=True):
            seen += self.neg[i]
            if seen >= r:
                return -2 * math.exp(i * _LOG_GAMMA) / (1 + math.exp(_LOG_GAMMA))
        seen += self.zero
        if seen >= r:
            return 0.0
        for i in sorted(self.sketch):
            seen += self.sketch[i]
            if seen >= r:
                return 2 * math.exp(i * _LOG_GAMMA) / (1 + math.exp(_LOG_GAMMA))
        return self.mean

    def summary(self, with_cv2: bool = False) -> dict:
        out = {
            "count": self.n,
            "mean": self.mean if self.n else None,
            "ci": self.ci(),
            "p50": self.quantile(0.5),
            "p90": self.quantile(0.9),
            "p99": self.quantile(0.99),
        }
        if with_cv2:
            out["cv2"] = self.cv2()
        return out


class TimeAverage:
    """∫ value dt over [start, now] for a piecewise-constant value."""

    __slots__ = ("area", "t", "v", "start")

    def __init__(self, start: float = 0.0) -> None:
        self.area = 0.0
        self.t = start
        self.v = 0.0
        self.start = start

    def set(self, now: float, v: float) -> None:
        if v != self.v:
            self.area += self.v * (now - self.t)
            self.t = now
            self.v = v

    def reset(self, now: float, v: float | None = None) -> None:
        self.area = 0.0
        self.t = now
        self.start = now
        if v is not None:
            self.v = v

    def mean(self, end: float) -> float | None:
        span = end - self.start
        if span <= 0:
            return None
        return (self.area + self.v * (end - self.t)) / span


class Gauge:
    """A gauge (docs/language.md §11.9): the time average over [warm-up, end] of a piecewise-constant
    value, a 95 % CI from 20 equal time windows (batch means over time: the window averages, the
    same t formula as `Sample`), min and max over the values held for a positive time.

    With the end known in advance (a finite horizon) the 20 windows are exactly [start, end] / 20.
    Otherwise (--arrivals, --replay) the windows start at `WINDOW0` seconds and double: 40 windows,
    merged pairwise when time passes the last; at the end the k full windows (20 ≤ k ≤ 40 once any
    merge happened) are grouped into 20 consecutive groups of ⌊k/20⌋, later ones and the partial
    window dropped from the CI (not from the mean); fewer than 20 full windows → CI null."""

    __slots__ = ("start", "t", "v", "area", "win", "w", "fixed", "lo", "hi")

    WINDOW0 = 1e-3

    def __init__(self, start: float = 0.0, end: float | None = None) -> None:
        self.reset(start, 0.0, end)

    def reset(self, now: float, v: float, end: float | None = None) -> None:
        self.start = now
        self.t = now
        self.v = v
        self.area = 0.0
        self.fixed = end is not None and math.isfinite(end) and end > now
        self.w = (end - now) / N_BATCHES if self.fixed else self.WINDOW0
        self.win = [0.0] * (N_BATCHES if self.fixed else 2 * N_BATCHES)
        self.lo = None
        self.hi = None

    def _hold(self, t0: float, t1: float, v: float) -> None:
        """Value v held over [t0, t1] (t1 > t0): area, windows, min / max."""
        self.area += v * (t1 - t0)
        if self.lo is None or v < self.lo:
            self.lo = v
        if self.hi is None or v > self.hi:
            self.hi = v
        if not self.fixed:
            while t1 - self.start > len(self.win) * self.w:  # merge pairwise, double the width
                self.win = [self.win[i] + self.win[i + 1] for i in range(0, len(self.win), 2)] + [0.0] * N_BATCHES
                self.w *= 2
        n, w, s0 = len(self.win), self.w, self.start
        a = t0
        while a < t1:
            i = int((a - s0) / w)
            b = s0 + (i + 1) * w
            if b <= a:  # a sits on a boundary that rounding put below it
                i += 1
                b = s0 + (i + 1) * w
            if i >= n - 1:  # the last window takes the rest (exactly [.., end] when fixed)
                self.win[n - 1] += v * (t1 - a)
                return
            b = min(b, t1)
            self.win[i] += v * (b - a)
            a = b

    def set(self, now: float, v: float) -> None:
        if v != self.v:
            if now > self.t:
                self._hold(self.t, now, self.v)
            self.t = now
            self.v = v

    def summary(self, end: float) -> dict:
        span = end - self.start
        if span <= 0:
            return {"mean": None, "ci": None, "min": None, "max": None}
        lo, hi, area, win = self.lo, self.hi, self.area, list(self.win)
        if end > self.t:  # the value held at the end, without changing the state
            v = self.v
            area += v * (end - self.t)
            lo = v if lo is None else min(lo, v)
            hi = v if hi is None else max(hi, v)
            saved = (self.area, self.lo, self.hi, self.win, self.w)
            self.win = list(self.win)
            self._hold(self.t, end, v)
            win = self.win
            w = self.w
            self.area, self.lo, self.hi, self.win, self.w = saved
        else:
            w = self.w
        if self.fixed:
            means = [x / w for x in win]
        else:
            k = min(int(span / w + 1e-9), len(win))
            g = k // N_BATCHES
            means = [sum(win[i * g:(i + 1) * g]) / (g * w) for i in range(N_BATCHES)] if g else None
        return {"mean": area / span, "ci": _ci_of_means(means) if means else None, "min": lo, "max": hi}

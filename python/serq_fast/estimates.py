"""The online estimates of a stage or engine (docs/language.md §4.4), in floats: the same rules as
serq_spec's `stages.estimate_start` / `estimate_service` / `estimate_admission` /
`estimate_iteration` and `expr.on_grid`, `unrounded_lambda`, `unrounded_rho`, `est_lambda` … `price`
(docs/spec.md "Online estimates"), held to them by lockstep through the state line's `est`.

Only a stage the program reads them of (IR `"estimates": true`) keeps them. A float mean of this
kind forgets an old rounding error by 1 − 1/100 per sample, so its error stays near 100 ulp
however long the run (docs/fast.md).

serq_spec counterpart: `serq_spec/config.py` (`Estimates`, `EngineEstimates`),
`serq_spec/stages.py` (`ewma`, `estimate_start`, `estimate_service`, `estimate_admission`,
`estimate_iteration`) and `serq_spec/expr.py` (`on_grid`, `unrounded_lambda`, `unrounded_rho`, `est_lambda` … `price`).
"""

from __future__ import annotations

EWMA_WEIGHT = 0.01
RHO_CAP = 0.99
ESTIMATE_GRID = 2.0 ** 32
#: From this magnitude on a double's spacing is at least 2^-32: every such float is on the grid.
GRID_EXACT_FROM = 2.0 ** 20


def on_grid(x: float) -> float:
    """x rounded to the nearest multiple of 2^-32, ties to even, as serq_spec's `expr.on_grid` rounds
    the exact estimate (docs/spec.md "Online estimates"). Below 2^20, x · 2^32 is exact and `round`
    of a float is half-even, so this rounds x itself exactly; only an x within a few ulp of a
    midpoint can round the other way from the spec's, one grid step apart."""
    if not abs(x) < GRID_EXACT_FROM:
        return x
    return round(x * ESTIMATE_GRID) / ESTIMATE_GRID


def ewma(mean, x: float) -> float:
    """The mean after sample x: x itself for the first sample, else mean + (x − mean)/100."""
    return x if mean is None else mean + EWMA_WEIGHT * (x - mean)


class Estimates:
    __slots__ = ("last", "gap", "service", "wait")

    def __init__(self):
        self.last = None      # the time of the latest start
        self.gap = None       # mean gap between starts
        self.service = None   # mean work of a started job
        self.wait = None      # mean wait before service

    def estimate_start(self, now: float, work: float) -> None:
        """A job joins the stage: a gap sample (from the latest start, if any) and its work."""
        if self.last is not None:
            self.gap = ewma(self.gap, now - self.last)
        self.last = now
        self.service = ewma(self.service, work)

    def estimate_service(self, joined: float, now: float) -> None:
        """A job enters service: a wait sample."""
        self.wait = ewma(self.wait, now - joined)

    def unrounded_lambda(self) -> float:
        """λ̂ unrounded (serq_spec's `expr.unrounded_lambda`)."""
        return 0.0 if self.gap is None or self.gap == 0 else 1.0 / self.gap

    def unrounded_rho(self) -> float:
        """ρ̂ unrounded and uncapped (serq_spec's `expr.unrounded_rho`)."""
        return self.unrounded_lambda() * (self.service if self.service is not None else 0.0)

    def est_lambda(self) -> float:
        return on_grid(self.unrounded_lambda())

    def est_rho(self) -> float:
        """On the grid, then capped at 0.99 (serq_spec's `expr.est_rho`)."""
        return min(on_grid(self.unrounded_rho()), RHO_CAP)

    def est_wait(self) -> float:
        return on_grid(self.wait) if self.wait is not None else 0.0

    def price(self, s_hit: float, ds: float) -> float:
        """From the readings (on the grid) of λ̂, ρ̂ and Ŵ, as serq_spec's `expr.price`."""
        lam, idle = self.est_lambda(), 1.0 - self.est_rho()
        s_miss = s_hit + ds
        return ds + lam * (s_miss * s_miss - s_hit * s_hit) / (2.0 * idle) + lam * self.est_wait() * ds / idle

    def state(self) -> list:
        """The state line's `est` (docs/state.md STAGE)."""
        return [self.last, self.gap, self.service, self.wait]


class EngineEstimates(Estimates):
    """An engine's estimates: λ̂ and Ŵ over its admissions (the gap since the previous one; the
    wait since the request last joined the queue), ρ̂ the fraction of time its iterations run,
    from the cycles between successive iteration starts (serq_spec's `EngineEstimates`)."""
    __slots__ = ("started", "cost", "cycle", "busy")

    def __init__(self):
        super().__init__()
        self.started = None   # the start of the latest iteration
        self.cost = None      # its duration
        self.cycle = None     # mean time from an iteration's start to the next one's
        self.busy = None      # mean duration of the iteration that opens a cycle

    def estimate_admission(self, joined: float, now: float) -> None:
        """The engine admits a request: a gap sample (from the latest admission) and its wait."""
        if self.last is not None:
            self.gap = ewma(self.gap, now - self.last)
        self.last = now
        self.wait = ewma(self.wait, now - joined)

    def estimate_iteration(self, now: float, cost: float) -> None:
        """An iteration of duration `cost` starts: the previous one's cycle is complete (its length,
        idle time included, and the previous iteration's duration)."""
        if self.started is not None:
            self.cycle = ewma(self.cycle, now - self.started)
            self.busy = ewma(self.busy, self.cost)
        self.started = now
        self.cost = cost

    def unrounded_rho(self) -> float:
        if self.cycle is None or self.cycle == 0:
            return 0.0
        return self.busy / self.cycle

    def state(self) -> list:
        """The state line's `est` of an engine (docs/state.md STAGE)."""
        return [self.last, self.gap, self.wait, self.started, self.cost, self.cycle, self.busy]

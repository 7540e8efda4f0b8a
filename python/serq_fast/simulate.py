"""One simulation from start to report: the part `serq run`, the Python API (serq.api) and the
sweeps (serq.sweep) share, so that the three check the same options, build the same Sim and turn
the same failures into the same messages.

Every failure is a `serq.errors.SerqError`: a front-end error and a run-time error at a program
position render as `FILE:LINE:COLUMN: error: …`, an option or an error without a position as
`serq: error: …` (what `serq run` prints before exiting 2).

serq_spec counterpart: the `run` of `serq_spec/cli.py`, which checks the same options.
"""

from __future__ import annotations

import math
import operator
import os
from dataclasses import dataclass
from typing import Any, Callable

from serq.errors import SerqError, source_names

DEFAULT_HORIZON = 600.0  # seconds of simulated time (docs/report.md)
DEFAULT_WARMUP_FRACTION = 0.1  # of the horizon


def default_warmup(ir: dict, horizon: float) -> float:
    """10 % of a finite horizon, so that statistics describe the steady state an open or closed
    workload settles into; but 0 for a `batch(n)` workload (and an infinite horizon): its sessions
    all start at time 0 and there is no steady state to wait for, so a warm-up would only discard
    the run (the replay and oracle examples finished before 10 % of 600 s and reported 0 turns)."""
    kind = (ir.get("workload", {}).get("arrival") or {}).get("kind")
    if not math.isfinite(horizon) or kind == "batch":
        return 0.0
    return DEFAULT_WARMUP_FRACTION * horizon


def whole(x) -> int | None:
    """X as a Python int when it is an integer (numpy's too, e.g. a seed read from a table), else None."""
    if isinstance(x, bool):
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


@dataclass(frozen=True)
class RunOptions:
    """The options of one run as the user gave them (None = the default of docs/report.md)."""
    seed: int = 1
    horizon: float | None = None
    warmup: float | None = None
    arrivals: int | None = None
    replay: bool = False  # a sessions file is replayed (its path is not needed to check options)

    def checked_horizon(self) -> float:
        """The horizon to run to, after checking every option that does not need the program."""
        if whole(self.seed) is None or self.seed < 0:
            raise SerqError("--seed must be a non-negative integer")
        horizon = DEFAULT_HORIZON if self.horizon is None else float(self.horizon)
        if self.replay and self.horizon is None:
            horizon = math.inf
        if not (horizon > 0):
            raise SerqError(f"--horizon must be positive, got {float(self.horizon)}")
        if math.isinf(horizon) and not self.replay and self.arrivals is None:
            raise SerqError("--horizon inf needs --arrivals N or --replay (the run would never end)")
        w = self.warmup
        if w is not None and (w < 0 or not math.isfinite(w) or w >= horizon):
            raise SerqError(f"--warmup must be in [0, horizon), got {w:g}")
        if self.arrivals is not None and self.arrivals < 1:
            raise SerqError("--arrivals must be a positive integer")
        if self.arrivals is not None and self.replay:
            # the engine would stop the replay once N sessions had arrived and none was live
            raise SerqError("--arrivals does not combine with --replay: the sessions file holds the "
                            "arrivals (sample N sessions with `serq sample FILE --seed S --sessions N`)")
        return horizon


def simulate(ir: dict, opts: RunOptions, *, file: str = "program", replay: dict | None = None,
             replay_path: str | None = None, states: Callable | None = None,
             records: list | None = None, progress: Callable | None = None,
             series: Any = None):
    """Run IR to its end with OPTS and return the finished `serq_fast.step.Sim` (report.build
    makes the report). FILE names the program in messages; REPLAY is a read sessions file."""
    from serq_fast.step import Sim
    from serq_fast.expr import RunError

    opts = RunOptions(opts.seed, opts.horizon, opts.warmup, opts.arrivals, replay is not None)
    horizon = opts.checked_horizon()
    warmup = default_warmup(ir, horizon) if opts.warmup is None else opts.warmup
    seed = whole(opts.seed) if replay is None else int(replay.get("seed", opts.seed))
    try:
        sim = Sim(ir, seed=seed, horizon=horizon, warmup=warmup, arrivals=opts.arrivals,
                  replay=replay, states=states, records=records, progress=progress)
        if series is not None:
            sim.series = series
        return sim.run()
    except RunError as exc:
        hint = ""
        if replay is not None:
            from serq.sessionsfile import fit_hint

            hint = fit_hint(exc.message, replay, ir, os.path.basename(file))
        err = exc.located(source_names(ir.get("files"), file))
        err.message += hint
        raise err from None
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        if not file.endswith(".json"):
            raise      # the front-end's IR: a bug of ours, not bad input
        # an IR file made by hand: its declarations passed serq.irfile, a statement did not
        raise SerqError(f"malformed IR in {file} ({type(exc).__name__}: {exc}); produce IR with "
                        "`serq ir FILE` (docs/ir.md gives the format)") from None

"""Capacity search (docs/api.md §Capacity): the largest value of one setting at which every SLO
holds, for instance the highest arrival rate whose p99 TTFT stays under 2 s.

Each replication r (seed `serq.sweep.rep_seed(base, r)`, the same at every value: common random
numbers) is searched on its own, by bracketing then bisection, to a relative resolution; the
answer is the mean of the R capacities with its 95 % CI across replications (Student t). The
search assumes the SLO metric worsens as the setting grows (a load); it stops with an error when
the SLO already fails at the lowest value tried or still holds at the highest. The runs of one
round (one value per unfinished replication) go to the executor together.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from .errors import SerqError
from .metrics import Slo
from .sweep import RunSpec, Task, finished_runs, make_executor, mean_ci, rep_seed

MAX_BRACKET_STEPS = 30  # doublings or halvings from the start value before giving up


@dataclass
class Search:
    """One replication's search: LO the largest value seen to meet the SLO, HI the smallest
    seen to fail."""
    rep: int
    seed: int
    lo: float | None = None
    hi: float | None = None
    steps: int = 0
    done: bool = False


@dataclass
class CapacityResult:
    name: str
    slos: list
    capacity: float | None  # mean over replications
    ci: float | None  # 95 % half-width across replications
    per_rep: list  # each replication's capacity (largest value seen to meet the SLOs)
    brackets: list  # (lo, hi) per replication
    evaluations: list = field(default_factory=list)  # (value, rep, seed, met, {metric: value})

    def text(self) -> str:
        ci = "" if self.ci is None else f" ± {self.ci:.4g}"
        slos = " and ".join(s.text for s in self.slos)
        reps = ", ".join(f"{c:.4g}" for c in self.per_rep)
        return (f"capacity: {self.name} = {self.capacity:.4g}{ci} (95% CI over {len(self.per_rep)} "
                f"replication(s)) meets {slos}\nper replication: {reps}\n")


def _next_value(s: Search, start: float, integer: bool, rel_tol: float,
                lower: float | None, upper: float | None) -> float | None:
    """The value to run next in search S, or None when it has converged."""
    if s.lo is None and s.hi is None:
        return start
    if s.hi is None:  # every value so far met the SLO: go up
        if upper is not None and s.lo >= upper:
            raise SerqError(f"the SLO still holds at the largest value allowed ({upper:g}): raise --hi")
        x = s.lo * 2 if s.lo > 0 else 1.0
        return min(x, upper) if upper is not None else x
    if s.lo is None:  # every value so far failed: go down
        if lower is not None and s.hi <= lower:
            raise SerqError(f"the SLO fails already at the smallest value allowed ({lower:g}): lower --lo")
        x = s.hi / 2
        if integer:
            x = math.floor(x)
            if x < 1:
                raise SerqError("the SLO fails already at 1")
        return max(x, lower) if lower is not None else x
    if integer:
        if s.hi - s.lo <= 1:
            return None
        return float((int(s.lo) + int(s.hi)) // 2)
    if s.hi - s.lo <= rel_tol * s.lo:
        return None
    return (s.lo + s.hi) / 2


def search_capacity(spec: RunSpec, name: str, slos: list, reps: int = 3, *, start: float = 1.0,
                    lo: float | None = None, hi: float | None = None, rel_tol: float = 0.02,
                    integer: bool = False, executor=None, progress: bool = True) -> CapacityResult:
    from serq.irfile import load_ir

    from .api import setting_text
    from .progress import CountProgress
    from .replayinputs import check_replay_inputs
    from .sweep import check_spec

    check_spec(spec, {name: []}, reps)
    if not slos:
        raise SerqError("a capacity search needs at least one --slo, e.g. 'ttft.p99<2'")
    if lo is not None and hi is not None and not lo < hi:
        raise SerqError(f"--lo must be below --hi, got {lo:g} >= {hi:g}")
    if not (rel_tol > 0):
        raise SerqError("--tol must be positive")
    if lo is not None:
        start = lo
    elif hi is not None:
        start = hi
    if integer:
        start = float(round(start))
    irs: dict = {}
    replay = spec.replay_data()

    def ir_at(x: float) -> tuple:
        text = setting_text(name, int(x) if integer else x)
        if text not in irs:
            irs[text] = load_ir(spec.path, {**spec.settings, name: text}, spec.profile)
            if replay is not None:   # varying an input the sessions file fixed would change nothing
                check_replay_inputs(replay, irs[text], spec.path, spec.replay)
        return text, irs[text]

    searches = [Search(r, rep_seed(spec.seed, r)) for r in range(reps)]
    executor = executor or make_executor()
    evaluations = []
    bar = CountProgress(None, "capacity") if progress else None
    try:
        while True:
            round_tasks = []
            for s in searches:
                if s.done:
                    continue
                x = _next_value(s, start, integer, rel_tol, lo, hi)
                if x is None:
                    s.done = True
                    continue
                if s.steps >= MAX_BRACKET_STEPS and (s.lo is None or s.hi is None):
                    raise SerqError(f"{name}: no value where the SLO changes within {s.steps} doublings "
                                    f"or halvings of {start:g} (give --lo and --hi)")
                text, ir = ir_at(x)
                round_tasks.append((s, x, Task(0, ((name, text),), s.rep, s.seed, ir,
                                               spec.horizon, spec.warmup, spec.arrivals, replay)))
            if not round_tasks:
                break
            by_task = {id(t): (s, x) for s, x, t in round_tasks}
            for task, row in finished_runs(executor, [t for _, _, t in round_tasks], bar):
                s, x = by_task[id(task)]  # every executor hands back the task it was given
                metrics = row["metrics"]
                for slo in slos:
                    if slo.metric not in metrics:
                        raise SerqError(f"--slo {slo.text!r}: no metric {slo.metric!r}; the metrics are "
                                        + ", ".join(metrics))
                met = all(slo.met(metrics[slo.metric]) for slo in slos)
                evaluations.append((x, s.rep, s.seed, met, {slo.metric: metrics[slo.metric] for slo in slos}))
                s.steps += 1
                if met:
                    s.lo = x if s.lo is None else max(s.lo, x)
                else:
                    s.hi = x if s.hi is None else min(s.hi, x)
    finally:
        if bar:
            bar.close()
        executor.close()
    caps = [s.lo for s in searches]
    mean, ci, _n = mean_ci(caps)
    return CapacityResult(name, slos, mean, ci, caps, [(s.lo, s.hi) for s in searches], evaluations)


def capacity(path: str, vary: str, slo: str | Iterable[str], reps: int = 3, *, seed: int = 1,
             horizon: float | None = None, warmup: float | None = None, start: float = 1.0,
             lo: float | None = None, hi: float | None = None, rel_tol: float = 0.02,
             integer: bool = False, jobs: int | None = None, executor: str = "local",
             address: str | None = None, progress: bool = True, profile: str | None = None,
             replay: str | None = None, **settings: Any) -> CapacityResult:
    """Python form of `serq capacity`."""
    from .api import settings_args
    from .irfile import parse_settings

    slos = [Slo(slo)] if isinstance(slo, str) else [Slo(s) for s in slo]
    spec = RunSpec(os.fspath(path), parse_settings(settings_args(settings)), seed, horizon, warmup, None,
                   None if replay is None else os.fspath(replay), profile)
    return search_capacity(spec, vary, slos, reps, start=start, lo=lo, hi=hi, rel_tol=rel_tol,
                           integer=integer, executor=make_executor(executor, jobs, address),
                           progress=progress)

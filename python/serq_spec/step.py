"""One event per step (docs/state.md "What a step is"): `step(config) -> (config, record)`, `initial`, `run`.

    step = pop the least (time, seq) event; now := its time; handle it; settle;
           if no other event is pending at now: start iterations of idle engines;
           reschedule the departures of ps stages whose job set changed.

`step` is a function: it copies the Config and returns the copy with the step's record. The
loop helpers (`run`) use `step_in_place`, which does the same on the Config it is given.
"""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any, Callable, Optional

from serq.wire import Value

from .claims import check_end
from .config import Config, Event, new_records, thread
from .engine import iteration_end, start_iteration
from .errors import SessionsFileError, SpecError
from .events import pending_at_now, schedule_event
from .expr import Env, evaluate
from .invariants import check_or_raise
from .pools import end_lease
from .program import Program
from .sessions import apply_ends, settle, spawn
from .stages import finish_job, reschedule_ps, reschedule_shared

SETTLE_ROUNDS = 100_000


def initial(program: Program) -> tuple[Config, dict]:
    """Step 0 (§11.2 item 1): warm-up event, first arrival or the closed/batch sessions, settle."""
    cfg = Config(program)
    cfg.records = new_records()
    for i, st in enumerate(program.stages):
        if st["kind"] == "step":
            cfg.stages[i].registers = [evaluate(r["init"], Env(cfg, engine=i, at=r.get("at"), what=f"engine {st['name']}: a register's initial value")) for r in st.get("registers", [])]
    if program.warmup > 0:
        schedule_event(cfg, program.warmup, "warmup_end", None)
    else:
        cfg.warm = True
    w = program.workload_data
    arrival = program.workload["arrival"]
    kind = arrival["kind"]
    if kind in ("poisson", "renewal"):
        if len(w.arrivals) != w.count:
            raise SessionsFileError(f"the sessions file has {w.count} sessions but {len(w.arrivals)} arrival times")
        if w.count > 0:
            schedule_event(cfg, w.arrivals[0], "arrive", 0)
    elif kind in ("closed", "batch"):
        n = arrival["n"]
        if kind == "batch" and w.count != n:
            raise SessionsFileError(f"the program spawns batch({n}) sessions but the sessions file has {w.count}")
        if w.arrivals:
            raise SessionsFileError(f"a {kind} workload takes no arrival times, the sessions file has {len(w.arrivals)}")
        for _ in range(min(n, w.count)):
            spawn(cfg)
    elif kind == "none":
        if w.count != 0:
            raise SessionsFileError(f"the program has no arrivals but the sessions file has {w.count} sessions")
    after_event(cfg)
    sample_gauges(cfg)
    return cfg, cfg.records


def after_event(cfg: Config) -> None:
    """Settle; start iterations when nothing else is pending now; reschedule ps departures (§11.2)."""
    for _ in range(SETTLE_ROUNDS):
        settle(cfg)
        if not pending_at_now(cfg):
            for e in cfg.program.engines:
                start_iteration(cfg, e)
        if not cfg.ready:
            break
    else:
        raise SpecError("settle did not reach a fixed point")
    for i, st in enumerate(cfg.stages):
        if st.kind == "ps" and st.dirty and i not in cfg.program.shared_stages:
            reschedule_ps(cfg, i)
    reschedule_shared(cfg)   # the stages flows cross, after the others (docs/language.md §11.14)


def sample_gauges(cfg: Config) -> None:
    """With `serq spec --gauges`: every gauge's value at the end of the step (Gauge moment, §5)."""
    if cfg.program.emit_gauges:
        cfg.records["gauges"] = [[g["name"], evaluate(g["expr"], Env(cfg, at=g.get("at"), what=f"gauge {g['name']}"))] for g in cfg.program.gauges]


def handle(cfg: Config, ev: Event) -> None:
    """Apply one event (docs/spec.md "The event loop and the tie order")."""
    if ev.kind == "arrive":
        w = cfg.program.workload_data
        if ev.arg + 1 < w.count:
            schedule_event(cfg, w.arrivals[ev.arg + 1], "arrive", ev.arg + 1)   # the next, then spawn
        spawn(cfg)
    elif ev.kind == "finish":
        finish_job(cfg, ev.arg[0], ev.arg[1])
    elif ev.kind == "iter_end":
        iteration_end(cfg, ev.arg)
    elif ev.kind == "ends":
        apply_ends(cfg, ev.arg)
    elif ev.kind == "lease_end":
        end_lease(cfg, thread(cfg, ev.arg[1]), ev.arg[0])
    elif ev.kind == "warmup_end":
        cfg.warm = True
    else:
        raise SpecError(f"unknown event kind {ev.kind}")


def step_in_place(cfg: Config) -> dict | None:
    """Handle the next event on `cfg` itself; None if there is none (or it is past the horizon)."""
    if not cfg.events or cfg.events[0].time > cfg.program.horizon:
        return None
    ev = cfg.events.pop(0)
    cfg.records = new_records()
    cfg.now = ev.time
    handle(cfg, ev)
    after_event(cfg)
    sample_gauges(cfg)
    cfg.steps += 1
    rec = cfg.records
    rec["event"] = ev
    return rec


def step(config: Config) -> tuple[Config, Optional[dict]]:
    """step : Config → Config × record (a final configuration maps to itself and None)."""
    nxt = copy.deepcopy(config)
    rec = step_in_place(nxt)
    if rec is None:
        return config, None
    return nxt, rec


def run(program: Program, max_steps: int | None = None, on_step: Optional[Callable[[Config, dict, int], Any]] = None,
        check: bool = True) -> Config:
    """Run from step 0 until no event is left (or max_steps); call on_step(cfg, record, k) after each."""
    rec: Optional[dict]
    cfg, rec = initial(program)
    rec["event"] = None
    prev: Value = Fraction(0)
    if check:
        check_or_raise(cfg, 0, prev)
    if on_step:
        on_step(cfg, rec, 0)
    k = 0
    while max_steps is None or k < max_steps:
        prev = cfg.now
        rec = step_in_place(cfg)
        if rec is None:
            if not cfg.events:   # no event left: not cut by the horizon, so every draw was used
                program.workload_data.check_machine_consumed(cfg)
            check_end(cfg)   # the run is over: `at end` claims read the final state
            break
        k += 1
        if check:
            check_or_raise(cfg, k, prev)
        if on_step:
            on_step(cfg, rec, k)
    return cfg

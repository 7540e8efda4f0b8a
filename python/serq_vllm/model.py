"""serQ's model of the vLLM scheduler on an oracle scenario: `run_scenario`, the code behind
`serq oracle run` (docs/vllm-model.md).

A scenario (docs/oracle.md §3) becomes one serQ program run: `plan` maps it to sessions and
inputs (or refuses it), `encode` writes them into the IR of a program of `programs/`, `engine`
runs that IR on serq_fast (the default) or serq_spec, and `collect` turns the state lines into a
trace of the oracle format (docs/oracle.md §4), which `serq oracle compare` compares with
vLLM's. Facts about vLLM's run the language cannot derive (step-counted `after` delays and
same-call arrival order on a seconds clock, async add rounds, the readmission cache bit) are
read off a run by the rules of `feedback` and fed back until the run reproduces them. Async
scheduling itself is the engine option `lag 1` (docs/async.md).
"""

from __future__ import annotations

import time
from fractions import Fraction

from serq_vllm import feedback
from serq_vllm.collect import Collector, build_trace
from serq_vllm.encode import ir_for, program_path
from serq_vllm.engine import ModelError, run_engine
from serq_vllm.plan import Plan, plan_scenario, refuse_mixed_cache_victims, refuse_unplaced_fanout
from serq_vllm.scenario import ResolvedScenario, load_scenario

__all__ = ["run_scenario", "run_scenario_file"]


def _run(plan: Plan, engine: str, order: dict[str, int] | None, source: str | None,
         thinks: dict[str, Fraction]) -> tuple[Collector, dict]:
    """One run of the plan's program with the derived inputs so far: its collector and trace."""
    col = Collector(plan)
    run_engine(ir_for(plan, order, source, thinks), engine, col.feed)
    trace, _ = build_trace(plan, col)
    return col, trace


def run_scenario(sc: ResolvedScenario, engine: str = "auto",
                 sources: dict[str, str] | None = None, force: bool = False) -> dict:
    """The serQ trace of a resolved scenario (raises Unsupported / ModelError).

    `sources` optionally replaces a program's text ({file name: text}, e.g.
    {"vllm_scenario.sq": …}; the tests seed faults with it). With `force`, the features of
    plan.FORCEABLE are approximated instead of refused (the trace then says `model_forced`).

    The derived inputs (gate delays, FCFS ranks, the idle and cache-victim bits) start empty;
    after each run the feedback rules give the next run's, until a run reproduces them (at most
    40 + 4 per request runs, else a ModelError, never a trace)."""
    t0 = time.perf_counter()
    plan = plan_scenario(sc, force)
    if engine == "auto":
        # serq_fast implements `lag 1` (docs/async.md, docs/fast.md) and agrees on every
        # committed vector, async ones on both clocks included (docs/vllm-model.md §4)
        engine = "fast"
    source = (sources or {}).get(program_path(plan.priority, plan.use_hold).name)
    order = None
    thinks: dict[str, Fraction] = {}
    col, trace = _run(plan, engine, order, source, thinks)
    limit = 40 + 4 * len(sc.requests)
    # async fan-out: first without fanout_idle's flags (a child the empty call could not admit
    # anyway needs none); if the derived inputs then cycle, the child's own gate made that call
    # carry tokens, and the flags are switched on
    fan_idle = False
    seen: set = set()
    for _ in range(limit):
        state = (tuple(sorted(thinks.items())), tuple(sorted((order or {}).items())),
                 tuple(sorted(plan.idle_added)))
        if state in seen and plan.fanout and plan.asynchronous and not fan_idle:
            fan_idle = True
        seen.add(state)
        changed = False
        if not plan.unit_clock:
            new_thinks = feedback.seconds_add_times(plan, col, thinks)
            new_order = order
            if not plan.priority:
                plan.settings["key_time"] = "0"
                new_order = feedback.fcfs_order(plan, col)
            idle = feedback.seconds_idle_added(plan, col, new_thinks, fan_idle)
            if plan.asynchronous and idle != plan.idle_added:
                # added while vLLM's scheduler was empty: the program keeps it out of the schedule
                # at its own instant that still has residents (vLLM's empty call before the add)
                plan.idle_added = idle
                changed = True
            if new_order != order or new_thinks != thinks:
                order, thinks = new_order, new_thinks
                changed = True
        elif plan.fanout:
            new_thinks = feedback.unit_fanout_add_times(plan, col, trace["requests"], thinks)
            idle = feedback.fanout_idle(plan, col, new_thinks) if fan_idle else set()
            if new_thinks != thinks or idle != plan.idle_added:
                thinks, plan.idle_added = new_thinks, idle
                changed = True
        if plan.unit_clock and plan.asynchronous and not plan.priority:
            # async on the unit clock: FCFS by (call at joining, list index) as on a seconds
            # clock, not by (step, list index)
            plan.settings["key_time"] = "0"
            new_order = feedback.fcfs_order(plan, col)
            if new_order != order:
                order = new_order
                changed = True
        if plan.asynchronous and plan.priority and plan.content is not None:
            cv = feedback.cache_victims(col)
            if cv != plan.cache_victims:
                plan.cache_victims = cv
                changed = True
        if not changed:
            break
        col, trace = _run(plan, engine, order, source, thinks)
    else:
        raise ModelError(f"the derived inputs (arrival order, add times) did not "
                         f"settle after {limit} runs")
    refuse_unplaced_fanout(plan, trace["requests"])
    refuse_mixed_cache_victims(plan, col.decode_preemptions, force)
    if plan.forced:
        trace["model_forced"] = plan.forced
    trace["timing"] = {"model_s": round(time.perf_counter() - t0, 4), "engine": engine,
                       "num_steps": len(trace["steps"])}
    return trace


def run_scenario_file(path: str, engine: str = "auto", **kwargs) -> dict:
    """`run_scenario` of a scenario file (`load_scenario`'s keyword arguments)."""
    return run_scenario(load_scenario(path, **kwargs), engine)

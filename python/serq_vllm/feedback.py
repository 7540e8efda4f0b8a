"""The feedback rules: facts of vLLM's run that the language cannot derive, read off one run of the
program and fed to the next (docs/vllm-model.md §2).

Each rule is one function: it reads the collector of the last run (and the plan) and returns the
input the next run takes, a gate delay per request, an FCFS rank per request, or a set of
requests whose trace key carries a bit. `model.run_scenario` applies them until a run reproduces
its own inputs. Each docstring names the vLLM source rule (vLLM 0.31.0, or the oracle driver's
loop, tools/vllm_oracle/driver.py, for the step counter that paces a seconds-clock scenario) and
the committed vectors under vectors/vllm that need the rule (tests/test_vllm_feedback.py checks
that each named vector exists and, behind `-m slow`, that it diverges without its rule).
"""

from __future__ import annotations

from fractions import Fraction

from serq_vllm.collect import Collector
from serq_vllm.plan import ADD_UNKNOWN, Plan
from serq_vllm.scenario import ResolvedScenario


def engine_instant(col: Collector, t: Fraction) -> Fraction:
    """An iteration end as the engine holds it (serq_fast: the binary64 number itself, not the
    time as read), so that a gate delay set to it fires at that very instant; `t` itself if no
    iteration ends there.

    Source rule: vLLM's priority queue (vllm/v1/core/sched/request_queue.py,
    `PriorityRequestQueue`) orders by (priority, arrival_time), and the driver's `_Run.add_ready`
    gives a request it adds the clock as its arrival_time, so two requests added before one
    `schedule()` tie on it; serQ's `t0 = now` ties only if the
    gate fires at the iteration's own instant. c21000_00232 diverges at step 133 with the gate
    one rounding earlier; c30000_00257's derived add times then never settle (a request added
    to an idle scheduler sits out the schedule at that instant, and one rounding early lets it
    in)."""
    return col.raw_end.get(t, t)


def seconds_add_times(plan: Plan, col: Collector, thinks: dict[str, Fraction]) -> dict[str, Fraction]:
    """Seconds clock: the gate delay of every request that vLLM's step counter adds.

    Source rule: the oracle driver (tools/vllm_oracle/driver.py, `_Run._ready` and
    `_Run.add_ready`) adds an `after` request before the first `schedule()` whose step number is at
    least its parent's finish step + max(1, delay_steps) (async: + max(1 + late, …), the finish
    processed one call later), and an `arrival_step` request beside `arrival_time` ones once the
    counter reaches that step; `_Run.advance_idle` counts idle steps without moving the clock. Such
    an add time is not a fixed number of seconds: `collect.seconds_steps` walks the last run with
    the driver's rule and gives each request's add time (`col.vllm_added`).

    A chained `after` child gets the delay from its parent's release to that time; a fan-out
    child or a step-counted request, in a session of its own, the time itself (counted from 0).
    Both are the engine's own instants (`engine_instant`). Without the rule c30000_00257
    diverges, and c9000_00108, whose child's target lies beyond the run's last iteration (it is
    added after vLLM's idle steps there)."""
    sc = plan.scenario
    rel = {rid: o["release_end"][0][1] for rid, o in col.obs.items() if o.get("release_end")}
    if not rel:
        rel = {rid: o["last_end"][0][1] for rid, o in col.obs.items() if o.get("last_end")}
    new = dict(thinks)
    for r in sc.requests:
        if r.id in plan.fanout or r.id in plan.stepped:
            new[r.id] = engine_instant(col, col.vllm_added.get(r.id, ADD_UNKNOWN))
        elif r.after is not None and r.id in col.vllm_added and r.after in rel:
            start, target = rel[r.after], col.vllm_added[r.id]
            new[r.id] = max(Fraction(0), engine_instant(col, target) - engine_instant(col, start))
    return new


def unit_fanout_add_times(plan: Plan, col: Collector, requests: dict[str, dict],
                          thinks: dict[str, Fraction]) -> dict[str, Fraction]:
    """Unit clock: the gate delay (from time 0, the step is the time) of every fan-out child, a
    child of a parent whose session goes on with another child (plan.Plan.fanout).

    Source rule: the oracle driver's `_Run._ready` adds an `after` request at its parent's
    finish step + max(1, delay_steps); async (`AsyncScheduler`, vLLM processes a finish one
    `schedule()` later) + max(1 + late, delay_steps), late = 1 when the parent's end was applied
    after a call with tokens (`col.late`). A parent that has not finished in the run leaves its
    child at ADD_UNKNOWN. Without it c20000_00015, c20000_00195 and h_async_idle_fanout diverge."""
    sc = plan.scenario
    new = dict(thinks)
    for cid, pid in plan.fanout.items():
        fin = requests[pid]["finish_step"]
        new[cid] = ADD_UNKNOWN if fin is None else Fraction(
            fin + max(1 + col.late.get(pid, 0), sc.request(cid).delay_steps))
    return new


def call_order(sc: ResolvedScenario, join_call: dict[str, int]) -> dict[str, int]:
    """Every request's rank in vLLM's FCFS order: by the schedule() call before which it was
    added, then list index (requests never added last).

    Source rule: vLLM's FCFS waiting queue (vllm/v1/core/sched/request_queue.py,
    `FCFSRequestQueue`, a deque) keeps requests in the order `Scheduler.add_request` appended
    them, and the oracle driver's `_Run.add_ready` adds the ready requests before each `schedule()` in
    scenario list order. serQ's events at one instant come in scheduling order instead, and on a
    seconds clock requests added before one call arrive at different times, so the rank is fed
    back: with list order instead, c41000_00035 and c21000_00498 diverge."""
    new = sorted(join_call, key=lambda rid: (join_call[rid], sc.request(rid).index))
    order = {rid: i for i, rid in enumerate(new)}
    for r in sc.requests:
        order.setdefault(r.id, len(order))
    return order


def async_call_keys(plan: Plan, col: Collector) -> dict[str, int]:
    """Async: each request's schedule() call at joining, counting the empty calls that applied a
    finished request's end (then `fanout_joins_siblings`).

    Source rule: `AsyncScheduler` (vllm/v1/core/sched/async_scheduler.py) processes a step's
    output after the next `schedule()`; an empty call processes it at once, and the driver adds
    the requests that became ready with it (a finished parent's children) only after that call,
    so the requests of one step come in two rounds. With the iterations before each join counted
    instead, c21000_00498 (unit clock, step 28: vLLM admits r0.2.3 before r1.2) and c41000_00035
    (seconds clock) diverge."""
    return fanout_joins_siblings(plan, col, idle_joins_after_ends(col, dict(col.join_key)))


def idle_joins_after_ends(col: Collector, keys: dict[str, int]) -> dict[str, int]:
    """Async, seconds clock: a request vLLM adds to an idle scheduler (`col.idle_added`) joins
    after every end applied up to its add instant: its call at joining is at least each of those
    ends' calls (an end applied at that very instant by an empty call included).

    Source rule: the driver's loop (`_Run.run`) counts idle steps or jumps the clock only once
    `AsyncScheduler` has processed every output (the empty `schedule()` that applies the last
    ends), and adds the requests that became ready after that, in scenario list order
    (`_Run.add_ready`); serQ's gate of a request added then may fire before that empty call at
    the same instant. Without it c51000_00051 diverges (step 23: vLLM admits `r3.2`, added with
    `r0` after idle steps 21-22, before `r0`)."""
    for rid in col.idle_added:
        t = col.join_time.get(rid)
        if rid not in keys or t is None:
            continue
        # the same instant up to serq_fast's binary64 rounding (steps are >= base_s apart)
        ends = [c for x, c in col.end_call.items() if col.end_time[x] <= t + Fraction(1, 10**9)]
        keys[rid] = max([keys[rid], *ends])
    return keys


def fanout_joins_siblings(plan: Plan, col: Collector, keys: dict[str, int]) -> dict[str, int]:
    """Async: a fan-out child's call at joining is its parent's end call at the earliest (its own
    gate may fire before the empty call that applies that end).

    Source rule: the driver's `_Run._ready` releases every child of a parent at once, when
    `AsyncScheduler` has processed the parent's finish, so vLLM adds a fan-out child with its
    siblings. Without it c20000_00015 (step 69) and c20000_00195 (step 106) diverge."""
    return {rid: max(k, col.end_call.get(plan.fanout.get(rid), k)) for rid, k in keys.items()}


def fcfs_order(plan: Plan, col: Collector) -> dict[str, int]:
    """The FCFS rank the next run keys its waiting queue by (the program's `tie`, with
    `key_time` 0): `call_order` of the calls at joining, vLLM's calls when async
    (`async_call_keys`), else the collector's count of iterations before each join."""
    return call_order(plan.scenario, async_call_keys(plan, col) if plan.asynchronous else col.join_call)


def fanout_idle(plan: Plan, col: Collector, thinks: dict[str, Fraction]) -> set:
    """Async: the fan-out children added at the very instant their parent's end is applied by an
    empty schedule() call (late 0): they sit out that call, as requests added to an idle
    scheduler do (docs/vllm-model.md §1 async (4)).

    Source rule: `AsyncScheduler`'s empty `schedule()` processes the parent's output (its
    finish), and the driver adds the children after that call; but a gate of their own fires
    before it and would make it carry tokens. Without it h_async_idle_fanout, c24000_00368,
    c32000_00003 and c32000_00181 diverge."""
    if not plan.asynchronous:
        return set()
    out = set()
    for cid, pid in plan.fanout.items():
        rel = col.obs.get(pid, {}).get("release_end")
        # the same instant (serq_fast: up to binary64 rounding; steps are >= base_s apart)
        t = thinks.get(cid)
        if rel and not col.late.get(pid, 0) and t is not None \
                and abs(t - rel[0][1]) <= Fraction(1, 10**9):
            out.add(cid)
    return out


def seconds_idle_added(plan: Plan, col: Collector, thinks: dict[str, Fraction],
                       with_fanout: bool) -> set:
    """Seconds clock, async: the requests vLLM adds to an idle scheduler (after idle steps or a
    clock jump, every output processed: `collect.seconds_steps`), and with `with_fanout` the
    fan-out children of `fanout_idle`; each sits out the empty call at its own instant
    (docs/vllm-model.md §1 async (4)).

    Source rule: the driver's loop (`_Run.run`) counts idle steps or jumps the clock
    (`_Run.advance_idle`) only while `Scheduler.has_requests()` is false and no batch is in
    flight, i.e. after the empty call that processed the last output; a request added then sits
    out no call of vLLM's, but serQ's gate adds it before the schedule that is that empty call.
    Without it c4000_00130 and c21000_00013 diverge."""
    return set(col.idle_added) | (fanout_idle(plan, col, thinks) if with_fanout else set())


def cache_victims(col: Collector) -> set:
    """Async, priority, caching: the requests whose decode preemptions came after vLLM had
    scheduled them in the same call (the priority program's `cv` bit: the readmission's cache
    cap is `computed`, not `computed - 1`).

    Source rule: `AsyncScheduler._update_request_with_output` caches a request's blocks up to
    `num_computed_tokens - num_output_placeholders` only while it is RUNNING, so the block the
    in-flight token completes is not cached once the request is preempted, unless the preempting
    call had scheduled the victim earlier (`Scheduler.schedule`'s running loop allocates in order,
    and that allocation cached every block whose token ids are known). Without it c44000_00368
    diverges (vLLM readmits r2 with 36 cached tokens at step 33; without the bit 32)."""
    return {rid for _, rid, earlier, _ in col.decode_preemptions if earlier}

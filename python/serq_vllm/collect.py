"""The oracle trace (docs/oracle.md §4) from an engine's per-step state lines (docs/state.md;
docs/vllm-model.md §3).

`Collector.feed` takes the state lines one at a time and keeps what the trace needs: each
`schedule()` (an iteration record: who got how many tokens, who was preempted, the KV blocks in
use, the queue lengths), each request's joining, observations and ends. `build_trace` numbers
the steps as vLLM's step counter does (`seconds_steps` on a seconds clock: the oracle driver's
loop) and writes the trace, with vLLM's virtual clock recomputed.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from fractions import Fraction

from serq_vllm.engine import ModelError, StopRun
from serq_vllm.plan import Plan

#: The `vllm_version` of the model's traces.
MODEL_VERSION = "serq-model/1"


def _t(x) -> Fraction:
    """A state-line time (wire string from the spec, float from the fast engine) as a Fraction."""
    if isinstance(x, str):
        return Fraction(x)
    return Fraction(x).limit_denominator(10**12) if isinstance(x, float) else Fraction(x)


# --------------------------------------------------------------------------------------------
# state lines -> trace


@dataclass
class _Iter:
    start: Fraction
    end: Fraction
    assign: list  # [(rid, tokens, computed_before, kind)]
    preempted: list
    used_units: int
    running: int
    waiting: int
    call: int
    step: int = -1
    arrived: list = field(default_factory=list)


def verified_reach(mode: str, tokens: int, pos: int) -> int:
    """The position a step surely computed, for the outputs of a request that never finishes
    (its `output_len`): a speculative decode step's drafts are not verified when it is scheduled,
    only its own token; its accepted drafts show in the position a later step or a preemption
    records (`c52000_00079`: a request stalled after speculative steps had 29 outputs in vLLM, the
    scheduled positions with drafts said 35)."""
    return pos - tokens + 1 if mode == "decode" and tokens > 1 else pos


class Collector:
    """Consumes state lines one by one (docs/state.md) and keeps what the trace needs."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.names = None
        self.turn_of: dict[int, int] = {}  # serial -> current turn index (0-based)
        self.join_call: dict[str, int] = {}
        self.join_key: dict[str, int] = {}  # rid -> schedule() calls before it joined
        self.end_call: dict[str, int] = {}  # async: rid -> schedule() calls before its end
        self.end_time: dict[str, Fraction] = {}  # async: rid -> the instant its end was applied
        self.calls = 0
        self.join_time: dict[str, Fraction] = {}
        self.assigned: dict[str, list[int]] = {}  # rid -> steps (unit clock) it got tokens in
        self.iters: list[_Iter] = []
        self.end_to_iter: dict[Fraction, _Iter] = {}
        # an iteration's end as read (_t) -> the engine's own value, exactly (serq_fast: the
        # binary64 number itself), so that a gate delay set to it fires at that very instant
        self.raw_end: dict[Fraction, Fraction] = {}
        self.preempt_count: dict[str, int] = {}
        self.seen: set[str] = set()
        self.resume: set[str] = set()
        self.obs: dict[str, dict[str, list]] = {}
        self.maxpos: dict[str, int] = {}
        self.pending_arrivals: list[str] = []
        self.ntoken = 0
        self.idle_calls = 0
        self.truncated = False
        self.admitted: dict[str, int] = {}  # rid -> admission number of its latest (re)admission
        self.admissions = 0
        # (iteration start, victim, the victim's admission number then)
        self.preemptions: list[tuple[Fraction, str, int]] = []
        # (step, victim, scheduled earlier in that call, at a block boundary) of every
        # preemption in decode (async: Plan.cache_victims, run_scenario)
        self.decode_preemptions: list[tuple[int, str, bool, bool]] = []
        # async (docs/async.md): rid -> 1 if its end was applied after a schedule() that had
        # tokens (vLLM's step counter moved before the output was processed), else 0
        self.late: dict[str, int] = {}
        self.due: list[int] = []  # the engine's `due` list on the previous line
        # seconds clock, set by build_trace (seconds_steps): rid -> the clock at which vLLM adds
        # it, and the requests it adds to an idle scheduler
        self.vllm_added: dict[str, Fraction] = {}
        self.idle_added: set = set()

    def iter_ending(self, t: Fraction) -> "_Iter | None":
        """The token iteration that ends at time t (an observation's `now`). serq_fast's times are
        binary64, and an observation may be stamped with a value one rounding away from the
        iteration's own end: within 1e-9 s the nearest end is taken (iterations are at least
        base_s apart)."""
        it = self.end_to_iter.get(t)
        if it is None and self.end_to_iter:
            near = min(self.end_to_iter, key=lambda e: abs(e - t))
            if abs(near - t) <= Fraction(1, 10**9):
                it = self.end_to_iter[near]
        return it

    def feed(self, line: dict) -> None:
        plan = self.plan
        if self.names is None:
            self.names = [p["name"] for p in line["pools"]]
            self.kv_i, self.reqs_i = self.names.index("kv"), self.names.index("reqs")
            snames = [s["name"] for s in line["stages"]]
            self.eng_i = snames.index("vllm")
        rec = line["records"]
        ev = line.get("event")
        if ev is not None and ev["kind"] == "ends":
            for serial, late in self.due:
                rid = plan.sessions[serial][self.turn_of[serial]].rid
                self.late[rid] = late
                self.end_call[rid] = self.calls
                self.end_time[rid] = _t(line["now"])
            self.due = []
        # the ends a schedule() made due, and whether that call had tokens (then vLLM's step
        # counter moved on before it processed them)
        due = line["stages"][self.eng_i].get("due", [])
        empty_call = False
        if len(due) > len(self.due):
            tokens = any(it["assign"] for it in rec["iterations"])
            empty_call = not rec["iterations"]
            self.due += [(serial, int(tokens)) for serial in due[len(self.due):]]
        for st, serial in rec["finished"]:
            if st == "gate":
                k = self.turn_of.get(serial, -1) + 1
                self.turn_of[serial] = k
                rid = plan.sessions[serial][k].rid
                self.join_call[rid] = len(self.iters)
                self.join_key[rid] = self.calls
                self.join_time[rid] = _t(line["now"])
                self.pending_arrivals.append(rid)
        # the schedule() calls so far, an empty one that made ends due included (it has no
        # iteration record), and after this line's joins, which came before it
        self.calls += len(rec["iterations"]) + int(empty_call)
        for name, serial, turn_no, t, value in rec["observations"]:
            rid = plan.sessions[serial][turn_no - 1].rid
            self.obs.setdefault(rid, {}).setdefault(name, []).append((_t(t), _t(value)))
        for it in rec["iterations"]:
            start = _t(it["start"])
            if plan.unit_clock:
                if start.denominator != 1:
                    raise ModelError(f"an iteration starts at {start} on the unit clock")
                step = int(start)
            else:
                step = self.ntoken
            if step >= plan.scenario.max_steps:  # vLLM's loop stops before this schedule()
                self.truncated = True
                raise StopRun()
            stage = line["stages"][self.eng_i]
            residents = {r["serial"]: r for r in stage["residents"]}
            assign = []
            for serial, mode, tokens in it["assign"]:
                rid = plan.sessions[serial][self.turn_of[serial]].rid
                pos = residents[serial]["position"]
                if rid not in self.seen:
                    kind = "new"
                elif rid in self.resume:
                    kind = "resumed"
                else:
                    kind = "running"
                if kind != "running":
                    self.admitted[rid] = self.admissions
                    self.admissions += 1
                self.resume.discard(rid)
                self.seen.add(rid)
                self.maxpos[rid] = max(self.maxpos.get(rid, 0), verified_reach(mode, tokens, pos))
                self.assigned.setdefault(rid, []).append(step)
                assign.append((rid, tokens, pos - tokens, kind))
            pre = []
            for serial, pool, position in rec["preempted"]:
                if (self.names[pool] if isinstance(pool, int) else pool) == "kv":
                    rid = plan.sessions[serial][self.turn_of[serial]].rid
                    pre.append(rid)
                    self.maxpos[rid] = max(self.maxpos.get(rid, 0), position)
                    self.preemptions.append((_t(it["start"]), rid, self.admitted.get(rid, -1)))
                    turn = plan.sessions[serial][self.turn_of[serial]]
                    if position > turn.prompt:
                        # a preemption in decode. If a request behind the victim in running
                        # order (admitted later) was scheduled in this call, vLLM scheduled the
                        # victim first (its running loop visits them in order), and that
                        # allocation cached the block its in-flight token completed: async, the
                        # readmission's cap is then `computed`, else `computed - 1`
                        earlier = any(self.admitted.get(a[0], -1) > self.admitted.get(rid, -1)
                                      for a in assign)
                        bs = int(plan.settings["block"])
                        self.decode_preemptions.append((step, rid, earlier, position % bs == 0))
                    self.preempt_count[rid] = self.preempt_count.get(rid, 0) + 1
                    self.resume.add(rid)
            kv = line["pools"][self.kv_i]
            # a finished request preempted before its output was processed is in vLLM's waiting
            # queue until that update (docs/async.md §6)
            gone = sum(1 for serial, status in line["sessions"]
                       if status == "ending:vllm" and serial not in residents)
            itr = _Iter(_t(it["start"]), _t(it["end"]), assign, sorted(pre), kv["used"],
                        len(stage["residents"]), len(line["pools"][self.reqs_i]["queue"]) + gone,
                        len(self.iters))
            itr.arrived = self.pending_arrivals
            self.pending_arrivals = []
            itr.step = step
            if assign:
                self.ntoken += 1
                self.idle_calls = 0
                self.end_to_iter[itr.end] = itr
                self.raw_end[itr.end] = Fraction(it["end"])
            else:
                self.idle_calls += 1
                if self.idle_calls > 10000:
                    raise ModelError("more than 10000 preempt-only iterations in a row (livelock)")
            self.iters.append(itr)


def seconds_steps(plan: Plan, col: Collector) -> tuple[list[int], dict[str, Fraction], set]:
    """vLLM's step numbers of the token iterations of a seconds-clock run, and the clock at which
    vLLM adds each `after` request (docs/oracle.md §2.3, the driver's loop).

    The oracle driver counts a step per token-carrying `schedule()`, and, while the scheduler is
    empty and no `arrival_time` request lies in the future, one idle step per round without moving
    the clock; an `after` request is added before the first call whose step number is at least its
    parent's finish step + max(1, delay_steps). Walking serQ's token iterations in order with that
    rule gives the numbering and each child's vLLM add time; run_scenario feeds the add times back
    as gate delays until they reproduce themselves. Also returned: the requests vLLM adds after
    idle steps or a clock jump, i.e. while its scheduler had no request at all (async: every
    finished request's output had been processed)."""
    sc = plan.scenario
    toks = [it for it in col.iters if it.assign]
    index = {id(it): k for k, it in enumerate(toks)}
    fin_k: dict[str, int] = {}
    for rid, o in col.obs.items():
        if o.get("last_end"):
            it = col.iter_ending(o["last_end"][0][1])
            if it is not None:
                fin_k[rid] = index[id(it)]
    by_fin: dict[int, list[str]] = {}
    for rid, k in fin_k.items():
        by_fin.setdefault(k, []).append(rid)
    children: dict[str, list] = {}
    for r in sc.requests:
        if r.after is not None:
            children.setdefault(r.after, []).append(r)
    timed = {r.id: r.arrival_time_exact for r in sc.requests if r.arrival_kind == "time"}
    # arrival_step beside arrival_time requests: the step counter must reach it (and the clock the
    # request's arrival_time, if it has one)
    target: dict[str, int] = {r.id: r.arrival_step for r in sc.requests
                              if r.after is None and r.arrival_step}
    added: dict[str, Fraction] = {}
    bound: dict[str, Fraction] = {}
    finished: set[str] = set()
    steps: list[int] = []
    idle_added: set = set()
    S = 0
    # A request is ready once the clock reaches its arrival_time (if it has one) and the step
    # counter its step (arrival_step, or an `after` child's target once its parent finished).
    # Waiting requests sit in two heaps by (threshold, list index), so each is looked at when
    # its threshold is reached instead of once per iteration: `by_clock` (an arrival_time not
    # reached yet) and `by_step` (only the step counter left). The step counter only grows; the
    # clock may go back (the next serQ iteration can end before a jump's arrival_time), and then
    # an arrival_time request in `by_step` goes back to `by_clock` (its entry there is skipped).
    by_clock = [(timed[r.id], r.index, r.id) for r in sc.requests if r.arrival_kind == "time"]
    heapq.heapify(by_clock)
    by_step = [(r.arrival_step or 0, r.index, r.id) for r in sc.requests
               if r.arrival_kind == "step"]
    heapq.heapify(by_step)
    timed_on_step: set[str] = set()  # arrival_time requests whose time came (in by_step)
    unadded_target = dict(target)  # the requests of `target` not added yet
    live = 0  # added and not finished

    def finish(rid: str) -> None:
        nonlocal live
        if rid not in finished:
            finished.add(rid)
            if rid in added:
                live -= 1

    # one pass more than serQ's token iterations: a child whose target step lies beyond serQ's
    # last iteration (serQ ran it too early) is added after vLLM's idle steps at the last
    # iteration's end, so the fixpoint learns its add time (c9000_00108)
    for k in range(len(toks) + 1):
        clock = toks[k - 1].end if k else Fraction(0)
        for rid in [rid for rid in timed_on_step if timed[rid] > clock]:
            timed_on_step.discard(rid)
            heapq.heappush(by_clock, (timed[rid], sc.request(rid).index, rid))
        if k:
            for rid in by_fin.get(k - 1, ()):
                # async: the finish is processed after the next schedule() call, and the counter
                # has moved on if that call had tokens (col.late); until then vLLM still has the
                # request (it is scheduled an EOS token, or lingers in its running list), so the
                # engine is not empty before this iteration
                late = col.late.get(rid, 0)
                if not late:
                    finish(rid)
                for c in children.get(rid, ()):
                    target[c.id] = unadded_target[c.id] = t = \
                        steps[k - 1] + max(1 + late, c.delay_steps)
                    heapq.heappush(by_step, (t, c.index, c.id))
            for rid in by_fin.get(k - 2, ()) if k >= 2 else ():
                if col.late.get(rid, 0):
                    finish(rid)

        idled = False
        while True:
            while by_clock and by_clock[0][0] <= clock:
                _, i, rid = heapq.heappop(by_clock)
                heapq.heappush(by_step, (sc.requests[i].arrival_step or 0, i, rid))
                timed_on_step.add(rid)
            while by_step and by_step[0][0] <= S:
                _, i, rid = heapq.heappop(by_step)
                if rid in added or (rid in timed and rid not in timed_on_step):
                    continue  # added already, or its entry is stale (back in by_clock)
                added[rid] = clock
                unadded_target.pop(rid, None)
                timed_on_step.discard(rid)
                live += rid not in finished
                if idled:
                    idle_added.add(rid)
            if live:
                break
            idled = True
            # the driver jumps to the earliest pending arrival_time if it lies ahead, and counts
            # a step otherwise (also when that request waits for its arrival_step)
            if by_clock and not timed_on_step:
                clock = by_clock[0][0]
                # a request waiting for the step counter cannot be added before this jump
                for rid, t in unadded_target.items():
                    if t > S:
                        bound[rid] = max(bound.get(rid, clock), clock)
                continue
            waiting = [t for t in unadded_target.values() if t > S]
            if not waiting:
                break
            S = min(waiting)
        if k == len(toks):
            break
        steps.append(S)
        S += 1
    for rid, b in bound.items():
        if rid in added and added[rid] < b:
            added[rid] = b
    return steps, added, idle_added


def build_trace(plan: Plan, col: Collector) -> tuple[dict, dict[str, int]]:
    """The oracle trace from the collected state; also each request's schedule() call at joining."""
    sc = plan.scenario
    bs = sc.block_size
    usable = sc.num_usable_blocks
    iters, obs, join_call = col.iters, col.obs, col.join_call
    preempt_count, maxpos = col.preempt_count, col.maxpos
    token_iters = [it for it in iters if it.assign]
    if not plan.unit_clock:
        numbers, col.vllm_added, col.idle_added = seconds_steps(plan, col)
        for it, n in zip(token_iters, numbers):
            it.step = n
        nxt = None
        for it in reversed(iters):  # a preempt-only record takes the next step's number
            if it.assign:
                nxt = it.step
            else:
                it.step = nxt if nxt is not None else (numbers[-1] + 1 if numbers else 0)
    # vLLM's virtual clock at each step
    base, per = sc.step_base_s, sc.step_per_token_s
    clock = 0.0
    step_time: dict[int, float] = {}
    if plan.unit_clock:
        for it in token_iters:
            step_time[it.step] = clock
            clock += base + per * sum(a[1] for a in it.assign)
    else:
        for it in token_iters:
            step_time[it.step] = float(it.start)

    def step_of_end(t: Fraction) -> int:
        it = col.iter_ending(t)
        if it is None:
            raise ModelError(f"no iteration ends at {t}")
        return it.step

    # requests
    requests: dict[str, dict] = {}
    finished_at: dict[int, list] = {}
    # each request's first token iteration's step, and for each record the step of the first
    # token iteration at or after it: one pass each, not one per request
    first_sched_of: dict[str, int] = {}
    for it in token_iters:
        for a in it.assign:
            first_sched_of.setdefault(a[0], it.step)
    next_token_step: list = [None] * (len(iters) + 1)
    for k in range(len(iters) - 1, -1, -1):
        next_token_step[k] = iters[k].step if iters[k].assign else next_token_step[k + 1]
    for r in sc.requests:
        o = obs.get(r.id, {})
        added = r.id in join_call
        first_step = None
        fin_step = None
        firsts = [v for _, v in o.get("first_end", []) if v >= 0]
        if firsts:
            first_step = step_of_end(firsts[0])
        if o.get("last_end"):
            fin_step = step_of_end(o["last_end"][0][1])
        first_sched = first_sched_of.get(r.id)
        out_len = sc.output_len(r.id) if fin_step is not None else max(
            0, maxpos.get(r.id, 0) - sc.static_prompt_len(r.id) + 1) if added else 0
        reason = None
        if fin_step is not None:
            reason = sc.finish_reason(r.id)
            finished_at.setdefault(fin_step, []).append({"id": r.id, "reason": reason,
                                                          "output_len": out_len})
        hits = o.get("hit", [])
        arr_step = None
        if added:
            arr_step = next_token_step[join_call[r.id]]
        requests[r.id] = {
            "prompt_len": sc.static_prompt_len(r.id) if added else None,
            "max_tokens": r.max_tokens,
            "priority": r.priority,
            "arrival_step": arr_step,
            "arrival_time": (r.arrival_time if r.arrival_time is not None
                             else step_time.get(arr_step)) if added else None,
            "first_scheduled_step": first_sched,
            "first_token_step": first_step,
            "finish_step": fin_step,
            "finish_reason": reason,
            "num_preemptions": preempt_count.get(r.id, 0),
            "cached_tokens_at_admission": int(hits[0][1]) if hits else None,
            "output_len": out_len,
        }
    steps = []
    carried: list = []
    for it in iters:
        if not it.assign and not it.preempted:
            carried += it.arrived
            continue
        tokens = sum(a[1] for a in it.assign)
        steps.append({
            "step": it.step,
            "time": round(step_time.get(it.step, clock), 9),
            "arrived": carried + it.arrived,
            "scheduled": [{"id": a[0], "tokens": a[1], "computed_before": a[2], "kind": a[3]}
                          for a in it.assign],
            "total_tokens": tokens,
            "preempted": it.preempted,
            "free_blocks_after_schedule": usable - it.used_units // bs,
            "num_running": it.running,
            "num_waiting": it.waiting,
            "finished": finished_at.get(it.step, []) if it.assign else [],
        })
        carried = []
    unfinished = sorted(rid for rid, rr in requests.items() if rr["finish_step"] is None)
    steps = [s for s in steps if s["step"] < sc.max_steps]
    trace = {
        "scenario": sc.name,
        "vllm_version": MODEL_VERSION,
        "config": sc.config,
        "num_usable_blocks": usable,
        "steps": steps,
        "requests": requests,
        "unfinished": unfinished,
        "stalled": bool(unfinished) and not col.truncated,
    }
    return trace, join_call


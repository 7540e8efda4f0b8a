"""Non-step stages (docs/language.md §11.5): fifo(c), delay, and ps(φ) with an exact virtual clock.

A `ps` stage keeps a virtual clock v: every present job receives rate φ(n)/n, so v advances by
that rate; a job's finish tag is v at its start plus its work. The next departure is the least
tag (ties in start order) at now + (tag − v)/rate. At a departure v is advanced to now *before*
the job is removed (docs/language.md §11.12 item 1), then v = max(v, tag).

Jobs join and leave their stages here, and a step engine's residents keep their order
(`add_resident`, used by sessions.py and the engine alike). The clock itself (`ps_rate`,
`advance_virtual_clock`) and `queue`/`busy`/`work` are read by expressions, so they are in expr.py.

A run over several stages (a flow, docs/language.md §11.14) is one Job present at all its stages.
The ps stages some flow can cross (`Program.shared_stages`) keep no virtual clock: each job there
keeps its remaining work `left` at time `since` and its `rate`; at the end of a step that changed
one of them, the rates of the connected stages are divided again (`share_rates`, by the program's
`share` policy) and one `finish` event names the next departure among all of them. `start_flow`
is the entry of any statement that runs a job over several stages (the engines treat as such
every stage a statement's `stages` list can name); `finish_job` and `withdraw_job` take a flow
off all its stages.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Optional

from serq.wire import Value

from . import values as V
from .config import COPY_PREFIX, READY, Config, EngineEstimates, Estimates, Job, Session, Tid, is_copy, thread
from .errors import SpecError
from .events import schedule_event, withdraw_event
from .expr import advance_virtual_clock, ps_capacity, ps_rate, remaining


def add_resident(cfg: Config, e: int, job: Job) -> None:
    """Residents are ordered by their owner's latest admission number (§11.2; no keep-your-place rule)."""
    jobs = cfg.stages[e].jobs
    i = len(jobs)
    while i > 0 and jobs[i - 1].admission > job.admission:
        i -= 1
    jobs.insert(i, job)


def start_job(cfg: Config, job: Job) -> None:
    """A job with positive work joins stage `job.stage` (§11.5), or a flow all its stages (§11.14)."""
    if job.stages is not None or job.stage in cfg.program.shared_stages:
        start_shared(cfg, job)
        return
    s = job.stage
    st = cfg.stages[s]
    spec = cfg.program.stages[s]
    est = st.stage_est()
    job.start_order = st.next_start
    st.next_start += 1
    if est is not None:
        estimate_start(est, cfg.now, job)
    if st.kind == "delay":
        if est is not None:
            estimate_service(est, cfg.now, cfg.now)
        st.jobs.append(job)
        st.finish[job.serial] = cfg.now + job.left
        schedule_event(cfg, st.finish[job.serial], "finish", (s, job.serial))
    elif st.kind == "fifo":
        if est is not None:
            est.joined[job.serial] = cfg.now
        if len(st.jobs) < spec["servers"]:
            begin_fifo_service(cfg, s, job)
        else:
            st.waiting.append(job)
    elif st.kind == "ps":
        if est is not None:
            estimate_service(est, cfg.now, cfg.now)
        advance_virtual_clock(cfg, s)
        st.jobs.append(job)
        st.tags[job.serial] = st.v + job.left
        st.dirty = True
    else:
        raise SpecError(f"start_job on a {st.kind} stage")


def start_copies(cfg: Config, copies: list[tuple[int, Value]]) -> None:
    """The copies of spilled chunks (`pools.make_room`), in order: each with positive work is a job
    of no session on its link, named "spill.n" (docs/language.md §11.8.1); zero work takes no time."""
    for stage, w in copies:
        if w == 0:
            continue
        name = f"{COPY_PREFIX}{cfg.counters.next_copy}"
        cfg.counters.next_copy += 1
        start_job(cfg, Job(serial=name, stage=stage, mode="plain", left=w, growing=None, admission=-1))


# The online estimates (docs/language.md §4.4, docs/spec.md "Online estimates"): each mean takes
# 1/100 of a new sample (the first sample whole). Exact: a mean's denominator grows about 100-fold
# per sample, which bounds the runs the spec can take (docs/spec.md measures it); never rounded.
EWMA_WEIGHT = Fraction(1, 100)


def ewma(mean: Optional[Value], x: Value) -> Value:
    """The mean after sample x: x itself for the first sample, else mean + (x − mean)/100."""
    return x if mean is None else V.add(mean, V.mul(EWMA_WEIGHT, V.sub(x, mean)))


def estimate_start(est: Estimates, now: Value, job: Job) -> None:
    """A job joins the stage: a gap sample (from the latest start, if any) and a service sample
    (its work, the time it needs at rate 1)."""
    if est.last is not None:
        est.gap = ewma(est.gap, V.sub(now, est.last))
    est.last = now
    est.service = ewma(est.service, job.left)


def estimate_service(est: Estimates, joined: Value, now: Value) -> None:
    """A job enters service (fifo: a server takes it; delay, ps: at once): a wait sample."""
    est.wait = ewma(est.wait, V.sub(now, joined))


def estimate_admission(est: EngineEstimates, joined: Value, now: Value) -> None:
    """An engine admits a request (§11.6 admit_one): a gap sample (from the latest admission, if
    any) and a wait sample, the time since the request last joined the queue."""
    if est.last is not None:
        est.gap = ewma(est.gap, V.sub(now, est.last))
    est.last = now
    est.wait = ewma(est.wait, V.sub(now, joined))


def estimate_iteration(est: EngineEstimates, now: Value, cost: Value) -> None:
    """An engine starts an iteration of duration `cost`: the previous iteration's cycle (from its
    start to now) is complete, so a cycle sample (its length, idle time included) and a busy
    sample (the previous iteration's duration). The first iteration opens the first cycle."""
    if est.started is not None and est.cost is not None:
        est.cycle = ewma(est.cycle, V.sub(now, est.started))
        est.busy = ewma(est.busy, est.cost)
    est.started = now
    est.cost = cost


def begin_fifo_service(cfg: Config, s: int, job: Job) -> None:
    """A fifo job enters service: its `finish` event is at now + work."""
    st = cfg.stages[s]
    est = st.stage_est()
    if est is not None:
        estimate_service(est, est.joined.pop(job.serial), cfg.now)
    st.jobs.append(job)
    st.finish[job.serial] = cfg.now + job.left
    schedule_event(cfg, st.finish[job.serial], "finish", (s, job.serial))


def finish_job(cfg: Config, s: int, serial: Tid) -> None:
    """A `finish` event: the job leaves its stage (a flow: all its stages) and its thread
    (session or branch, §11.13) becomes ready (§11.5, oracle §12.1)."""
    st = cfg.stages[s]
    job = next((j for j in st.jobs if j.serial == serial), None)
    if job is None:
        raise SpecError(f"finish of a job that is not on stage {cfg.program.stages[s]['name']}")
    if s in cfg.program.shared_stages:
        leave_shared(cfg, job)
        for x in job.stages_of():
            cfg.records["finished"].append([cfg.program.stages[x]["name"], serial])
        if is_copy(serial):
            return   # a spill copy on a link that flows cross: no thread waits for it (§11.8.1)
        session = thread(cfg, serial)
        session.job = None
        if session.status == ("stage", job.stage):
            session.status = READY
            cfg.ready.append(serial)
        return
    if st.kind == "ps":
        # advance v to now before removing the job (defect 1): the departure was scheduled for
        # the moment v reaches the job's tag, so v is that tag now (exactly what v + rate·(now −
        # t_last) gives with the rate it was scheduled with; its event has just been taken)
        tag = st.tags.pop(serial)
        if st.jobs and cfg.now > st.t_last:
            st.v = tag
        st.t_last = cfg.now
        st.jobs.remove(job)
        st.v = max(st.v, tag)
        st.dirty = True
    else:
        st.jobs.remove(job)
        del st.finish[serial]
        if st.kind == "fifo" and st.waiting:
            begin_fifo_service(cfg, s, st.waiting.pop(0))
    cfg.records["finished"].append([cfg.program.stages[s]["name"], serial])
    if is_copy(serial):
        return   # a spill copy: no thread waits for it
    session = thread(cfg, serial)
    session.job = None
    if session.status == ("stage", s):
        session.status = READY
        cfg.ready.append(serial)


def withdraw_job(cfg: Config, job: Job) -> None:
    """A preempted holder leaves its fifo or ps stage (§11.7: "detach it from the stage"); its work
    is dropped (its hold statement runs again). fifo: a waiting job leaves the queue; a job in
    service leaves it, its `finish` is withdrawn and the server takes the next waiting job. ps:
    the clock is advanced to now with the rate in effect, the job and its tag go, and the stage
    reschedules its departure at the end of the step, as after any change of its job set."""
    s = job.stage
    st = cfg.stages[s]
    if s in cfg.program.shared_stages:   # a flow leaves every stage it crosses (§11.14)
        leave_shared(cfg, job)
        return
    if st.kind == "fifo":
        if job in st.waiting:
            st.waiting.remove(job)
            est = st.stage_est()
            if est is not None:   # it never entered service: no wait sample
                del est.joined[job.serial]
            return
        st.jobs.remove(job)
        del st.finish[job.serial]
        withdraw_event(cfg, "finish", (s, job.serial))
        if st.waiting:
            begin_fifo_service(cfg, s, st.waiting.pop(0))
    elif st.kind == "ps":
        advance_virtual_clock(cfg, s)
        st.jobs.remove(job)
        del st.tags[job.serial]
        st.dirty = True
    else:
        raise SpecError(f"withdraw_job on a {st.kind} stage")


def reschedule_ps(cfg: Config, s: int) -> None:
    """Withdraw the stage's pending departure and schedule the next one (end of settle, §11.2)."""
    st = cfg.stages[s]
    cfg.events = [e for e in cfg.events if not (e.kind == "finish" and e.arg[0] == s)]
    st.dirty = False
    if not st.jobs:
        return
    advance_virtual_clock(cfg, s)
    rate = ps_rate(cfg, s, len(st.jobs))
    nxt = min(st.jobs, key=lambda j: (st.tags[j.serial], j.start_order))
    delta = st.tags[nxt.serial] - st.v
    schedule_event(cfg, cfg.now + max(delta, Fraction(0)) / rate, "finish", (s, nxt.serial))


# -- stages a flow crosses (docs/language.md §11.14) ---------------------------------------------

def start_flow(cfg: Config, s: Session, stages: list, w: Value) -> bool:
    """Thread `s` runs one job of work w ≥ 0 over the distinct ps stages `stages` (§11.14): the
    entry of every statement that runs a job over several stages. Zero work completes at once at
    every stage and the thread is ready again at the back (True); otherwise the thread waits on
    the flow (False) until its `finish` makes it ready."""
    check_flow_stages(cfg, stages)   # before zero work completes: the rule holds for any work (§11.14)
    if w == 0:
        for x in stages:
            cfg.records["finished"].append([cfg.program.stages[x]["name"], s.tid])
        cfg.ready.append(s.tid)
        return True
    job = Job(serial=s.tid, stage=stages[0], mode="plain", left=w, growing=None,
              admission=s.adm_seq if s.adm_seq is not None else -1, stages=list(stages))
    start_job(cfg, job)
    s.job = job
    s.status = ("stage", stages[0])
    return False


def check_flow_stages(cfg: Config, stages: list) -> None:
    """The stages of a run over several stages, chosen at run time, are distinct ps stages a flow
    may cross (§11.14), whatever its work."""
    prog = cfg.program
    if len(set(stages)) != len(stages):
        names = ", ".join(prog.stages[x]["name"] for x in stages)
        raise SpecError(f"a run over several stages names one stage twice ({names}); a flow crosses distinct stages")
    for x in stages:
        if x not in prog.shared_stages:
            raise SpecError(f"stage {prog.stages[x]['name']} is not a ps stage a flow may cross")


def start_shared(cfg: Config, job: Job) -> None:
    """A job joins each of its stages with its whole work and no rate yet: rates are divided at
    the end of the step (`reschedule_shared`), before any time passes. Each stage counts a start
    and takes the estimates' samples, as for a job on it alone (wait 0)."""
    stages = job.stages_of()
    check_flow_stages(cfg, stages)
    job.shared, job.rate, job.since = True, Fraction(0), cfg.now
    for i, x in enumerate(stages):
        st = cfg.stages[x]
        if i == 0:
            job.start_order = st.next_start   # a flow's place in ties: its first stage's
        st.next_start += 1
        est = st.stage_est()
        if est is not None:
            estimate_start(est, cfg.now, job)
            estimate_service(est, cfg.now, cfg.now)
        st.jobs.append(job)
        st.dirty = True


def leave_shared(cfg: Config, job: Job) -> None:
    """The job leaves every stage it is present at; the others keep their remaining work and rate
    until the rates are divided again at the end of the step."""
    for x in job.stages_of():
        st = cfg.stages[x]
        st.jobs.remove(job)
        st.dirty = True


def connected_stages(cfg: Config, start: set) -> list:
    """The stages linked to `start` through the flows present, in index order."""
    seen = set(start)
    todo = list(start)
    while todo:
        x = todo.pop()
        for j in cfg.stages[x].jobs:
            for y in j.stages_of():
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
    return sorted(seen)


def share_rates(policy: str, members: dict, capacity: dict) -> dict:
    """The rate of every job present at the stages of `members` (stage -> its jobs, in stage
    order; each job's stages all among them), given each stage's capacity C_s = φ_s(n_s).

    bottleneck: a job gets C_s/n_s at each stage it crosses and runs at the least of these.
    maxmin: progressive filling. All unfixed jobs run at one level, raised until some stage is
    full (its fixed rates plus level × its unfixed jobs reach C_s); the jobs crossing a full stage
    keep that level; repeat with the rest. A stage no flow crosses gets C_s/n_s either way."""
    rates: dict = {}
    if policy == "bottleneck":
        for x, jobs in members.items():
            share = capacity[x] / len(jobs)
            for j in jobs:
                rates[j.serial] = min(rates.get(j.serial, share), share)
        return rates
    free = dict(capacity)                                   # capacity not taken by fixed jobs
    unfixed = {x: list(jobs) for x, jobs in members.items()}
    while any(unfixed.values()):
        level = min(free[x] / len(js) for x, js in unfixed.items() if js)
        full = [x for x, js in unfixed.items() if js and free[x] / len(js) == level]
        for x in full:
            for j in list(unfixed[x]):
                rates[j.serial] = level
                for y in j.stages_of():
                    free[y] -= level
                    unfixed[y].remove(j)
    return rates


def reschedule_shared(cfg: Config) -> None:
    """End of a step that changed the job set of a stage a flow crosses (§11.14): the jobs of the
    connected stages are brought to now at their old rates, the capacities are evaluated in stage
    order and the rates divided again; then the one pending departure among all such stages is
    withdrawn and the next scheduled: the least finish time, ties to the job whose first stage
    comes first, then to the earlier start there."""
    prog = cfg.program
    dirty = {x for x in prog.shared_stages if cfg.stages[x].dirty}
    if not dirty:
        return
    component = connected_stages(cfg, dirty)
    members: dict = {}
    for x in component:
        cfg.stages[x].dirty = False
        jobs = cfg.stages[x].jobs
        if jobs:
            members[x] = jobs
            for j in jobs:
                if j.since != cfg.now:
                    j.left = remaining(cfg, j)
                    j.since = cfg.now
    capacity = {x: ps_capacity(cfg, x, len(jobs)) for x, jobs in members.items()}
    rates = share_rates(prog.share, members, capacity)
    for jobs in members.values():
        for j in jobs:
            j.rate = rates[j.serial]
    cfg.events = [e for e in cfg.events if not (e.kind == "finish" and e.arg[0] in prog.shared_stages)]
    best = None
    for x in sorted(prog.shared_stages):
        for j in cfg.stages[x].jobs:
            if j.stage == x:   # a flow once, at its first stage
                key = (j.since + max(j.left, Fraction(0)) / j.rate, j.stage, j.start_order)
                if best is None or key < best[0]:
                    best = (key, j)
    if best is not None:
        schedule_event(cfg, best[0][0], "finish", (best[1].stage, best[1].serial))

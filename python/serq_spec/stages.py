"""Non-step stages (docs/language.md §11.5): fifo(c), delay, and ps(φ) with an exact virtual clock.

A `ps` stage keeps a virtual clock v: every present job receives rate φ(n)/n, so v advances by
that rate; a job's finish tag is v at its start plus its work. The next departure is the least
tag (ties in start order) at now + (tag − v)/rate. At a departure v is advanced to now *before*
the job is removed (docs/language.md §11.12 item 1), then v = max(v, tag).

Jobs join and leave their stages here, and a step engine's residents keep their order
(`add_resident`, used by sessions.py and the engine alike). The clock itself (`ps_rate`,
`advance_virtual_clock`) and `queue`/`busy`/`work` are read by expressions, so they are in expr.py.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Optional

from serq.wire import Value

from . import values as V
from .config import COPY_PREFIX, READY, Config, Estimates, Job, Tid, is_copy, thread
from .errors import SpecError
from .events import schedule_event, withdraw_event
from .expr import advance_virtual_clock, ps_rate


def add_resident(cfg: Config, e: int, job: Job) -> None:
    """Residents are ordered by their owner's latest admission number (§11.2; no keep-your-place rule)."""
    jobs = cfg.stages[e].jobs
    i = len(jobs)
    while i > 0 and jobs[i - 1].admission > job.admission:
        i -= 1
    jobs.insert(i, job)


def start_job(cfg: Config, job: Job) -> None:
    """A job with positive work joins stage `job.stage` (§11.5)."""
    s = job.stage
    st = cfg.stages[s]
    spec = cfg.program.stages[s]
    job.start_order = st.next_start
    st.next_start += 1
    if st.est is not None:
        estimate_start(st.est, cfg.now, job)
    if st.kind == "delay":
        if st.est is not None:
            estimate_service(st.est, cfg.now, cfg.now)
        st.jobs.append(job)
        st.finish[job.serial] = cfg.now + job.left
        schedule_event(cfg, st.finish[job.serial], "finish", (s, job.serial))
    elif st.kind == "fifo":
        if st.est is not None:
            st.est.joined[job.serial] = cfg.now
        if len(st.jobs) < spec["servers"]:
            begin_fifo_service(cfg, s, job)
        else:
            st.waiting.append(job)
    elif st.kind == "ps":
        if st.est is not None:
            estimate_service(st.est, cfg.now, cfg.now)
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


def begin_fifo_service(cfg: Config, s: int, job: Job) -> None:
    """A fifo job enters service: its `finish` event is at now + work."""
    st = cfg.stages[s]
    if st.est is not None:
        estimate_service(st.est, st.est.joined.pop(job.serial), cfg.now)
    st.jobs.append(job)
    st.finish[job.serial] = cfg.now + job.left
    schedule_event(cfg, st.finish[job.serial], "finish", (s, job.serial))


def finish_job(cfg: Config, s: int, serial: Tid) -> None:
    """A `finish` event: the job leaves its stage and its thread (session or branch, §11.13)
    becomes ready (§11.5, oracle §12.1)."""
    st = cfg.stages[s]
    job = next((j for j in st.jobs if j.serial == serial), None)
    if job is None:
        raise SpecError(f"finish of a job that is not on stage {cfg.program.stages[s]['name']}")
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
    if st.kind == "fifo":
        if job in st.waiting:
            st.waiting.remove(job)
            if st.est is not None:   # it never entered service: no wait sample
                del st.est.joined[job.serial]
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

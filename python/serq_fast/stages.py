"""Plain stages: fifo(c), delay, ps(φ) (docs/language.md §11.5), the jobs on them and the base
class every stage shares (the step engine, §11.6, is `engine.Engine`).

serq_spec counterpart: `serq_spec/stages.py` (jobs on stages, the residents' order, the ps
virtual clock, the stages a flow crosses).

A run over several stages (a flow, docs/language.md §11.14) is one Job present at all its stages
(`job.stages`). The ps stages some flow can cross are `SharedPsStage`s: no virtual clock, each
job keeps its remaining work `left` at time `since` and its `rate`; one `Sharing` per simulator
divides the rates of the connected stages again at the end of a step that changed one of them
(`share_rates`) and keeps the one pending departure among all of them. `submit_flow` starts a job
over several stages: any statement that runs a job over several stages calls it.
"""

from __future__ import annotations

import math
from collections import deque

from serq.irfile import field_at
from serq_fast.defs import (EV_FINISH, FAULTS, STAGE)
from serq_fast.estimates import Estimates
from serq_fast.expr import RunError, at_text, compile_expr, located
from serq_fast.stats import TimeAverage



def speculate_drafts(k: float, at) -> int:
    """A decode's `speculate (k)` (a prefill's too): a whole number >= 0 of drafts per step (docs/language.md §7.3)."""
    if k != k or k < 0 or math.isinf(k) or k != math.floor(k):
        raise RunError(f"speculate: the drafts per step must be a whole number >= 0, got {k!r} at {at_text(at)}")
    return int(k)


class Job:
    __slots__ = ("sess", "stage", "left", "mode", "growpart", "hold", "enq", "start", "stalled",
                 "resident", "fin_t", "tag", "dead", "work", "ps_order", "stages", "rate", "since", "drafts")

    def __init__(self, sess, stage, work, mode):
        self.sess = sess
        self.stage = stage
        self.left = work
        self.work = work
        self.mode = mode
        self.growpart = None
        self.hold = None
        self.enq = stage.sim.now
        self.start = None
        self.stalled = False
        self.resident = False
        self.fin_t = None
        self.tag = 0.0
        self.dead = False
        self.ps_order = 0
        self.stages = None   # a flow's stages (§11.14); None: its one stage
        self.rate = 0.0      # on a SharedPsStage: served at `rate` since `since`
        self.since = 0.0
        self.drafts = 0  # a speculative decode's k (docs/language.md §7.3)

    lagged = False  # a pending resident (PendingJob, docs/async.md §3)

    @property
    def adm(self) -> int:
        """The owner's admission number when the run started (its place among the residents)."""
        return self.sess.adm_seq

    def key(self, name: str) -> float:
        if name == "decoding":
            return 1.0 if self.mode == "decode" else 0.0
        if name == "admission":
            return float(self.adm)
        if name == "remaining":
            return self.left
        raise RunError(f"unknown per-request key {name}")


class Copier:
    """The owner of a spilled chunk's copy job (docs/language.md §11.8.1): no session; named
    "spill.n", the n-th copy of the run, as serq_spec names it."""
    __slots__ = ("tid",)
    adm_seq = -1
    copy = True

    def __init__(self, n: int):
        self.tid = f"spill.{n}"


def _request_hold(s):
    for h in reversed(s.holds):
        if h.request is not None:
            return h
    return None


class Stage:
    kind = "?"
    memory = None
    shared = False   # a ps stage a flow can cross (SharedPsStage)

    def __init__(self, idx, st, sim):
        self.idx = idx
        self.name = st["name"]
        self.spec = st
        self.sim = sim
        self.completed = 0
        self.wait_sum = 0.0
        self.wait_n = 0
        self.service_sum = 0.0
        self.service_n = 0
        self.iterations = 0
        self.ta_number = TimeAverage()
        self.ta_util = TimeAverage()
        self.changed = False
        # the online estimates (serq_fast/estimates.py), on a stage the program reads them of
        self.est = Estimates() if st.get("estimates") else None

    def link(self, sim) -> None:
        pass

    def reset_averages(self, t):
        n = self.present()
        self.ta_number.reset(t, n)
        self.ta_util.reset(t, 1.0 if n > 0 else 0.0)

    def present(self) -> int:
        raise NotImplementedError

    def sample(self, now):
        # TimeAverage.set changes nothing for an unchanged value: test before the call
        n = self.present()
        ta = self.ta_number
        if ta.v != n:
            ta.set(now, n)
        u = 1.0 if n > 0 else 0.0
        ta = self.ta_util
        if ta.v != u:
            ta.set(now, u)

    def event_valid(self, ev) -> bool:
        return not ev[4].dead

    def _new_job(self, s, w, mode):
        return Job(s, self, w, mode)

    def submit(self, s, w, mode, growing):

        job = self._new_job(s, w, mode)
        if w <= 0:
            self._zero(job)
            return
        s.status = STAGE
        s.where = self
        s.job = job
        if self.est is not None:
            self.est.estimate_start(self.sim.now, w)
        self._accept(job)

    def submit_copy(self, w: float) -> None:
        """A copy job of positive work w, owned by no session, joins the stage."""
        sim = self.sim
        job = self._new_job(Copier(sim.next_copy), w, "plain")
        sim.next_copy += 1
        if self.shared and "copy_unshared" in FAULTS():
            return   # seeded fault (docs/fast.md): a copy takes no part of a link that flows cross
        if self.est is not None:
            self.est.estimate_start(sim.now, w)
        self._accept(job)

    def _zero(self, job):
        """A zero-work run completes at once (§11.5): no event, the session stays ready."""
        sim = self.sim
        job.start = sim.now
        self._stats(job)
        if sim.rec is not None:
            sim.rec["finished"].append([self.name, job.sess.tid])

    def _stats(self, job):
        sim = self.sim
        if sim.measuring:
            self.completed += 1
            self.wait_sum += job.start - job.enq
            self.wait_n += 1
            self.service_sum += sim.now - job.start
            self.service_n += 1

    def complete(self, job):
        sim = self.sim
        s = job.sess
        self._stats(job)
        if sim.rec is not None:
            sim.rec["finished"].append([self.name, s.tid])
        if s.copy:
            return   # a spill copy: nobody waits for it
        s.job = None
        sim.make_ready(s)

    def observe(self, f, cx):
        if f == "queue":
            return float(self.present())
        if f == "busy":
            return float(self.busy())
        if f == "work":
            return self.work_left()
        if f in ("est_lambda", "est_rho", "est_wait") and self.est is not None:
            return getattr(self.est, f)()
        raise RunError(f"observable {f} of stage {self.name}")

    def summary_extra(self):
        return {}


class FifoStage(Stage):
    kind = "fifo"

    def __init__(self, idx, st, sim):
        super().__init__(idx, st, sim)
        self.servers = int(st.get("servers", 1))
        self.waiting = deque()
        self.active: list = []

    def present(self):
        return len(self.waiting) + len(self.active)

    def busy(self):
        return len(self.active)

    def work_left(self):
        now = self.sim.now
        return sum(j.left for j in self.waiting) + sum(j.fin_t - now for j in self.active)

    def _accept(self, job):
        if len(self.active) < self.servers:
            self._start(job)
        else:
            self.waiting.append(job)

    def _start(self, job):

        sim = self.sim
        job.start = sim.now
        if self.est is not None:
            self.est.estimate_service(job.enq, sim.now)
        job.fin_t = sim.now + job.left
        self.active.append(job)
        sim.push(job.fin_t, EV_FINISH, self, job)

    def finish_event(self, ev):
        job = ev[4]
        self.active.remove(job)
        job.dead = True
        self.complete(job)
        if self.waiting and len(self.active) < self.servers:
            self._start(self.waiting.popleft())

    def detach(self, job):
        job.dead = True
        if job in self.active:
            self.active.remove(job)
            if self.waiting and len(self.active) < self.servers:
                self._start(self.waiting.popleft())
        else:
            self.waiting.remove(job)


class DelayStage(Stage):
    kind = "delay"

    def __init__(self, idx, st, sim):
        super().__init__(idx, st, sim)
        self.active: dict = {}  # job -> None, in start order

    def present(self):
        return len(self.active)

    busy = present

    def work_left(self):
        now = self.sim.now
        return sum(j.fin_t - now for j in self.active)

    def _accept(self, job):

        sim = self.sim
        job.start = sim.now
        if self.est is not None:
            self.est.estimate_service(sim.now, sim.now)
        job.fin_t = sim.now + job.left
        self.active[job] = None
        sim.push(job.fin_t, EV_FINISH, self, job)

    def finish_event(self, ev):
        job = ev[4]
        del self.active[job]
        job.dead = True
        self.complete(job)

    def detach(self, job):
        job.dead = True
        self.active.pop(job, None)


TAG_TIE = 1e-10  # relative, as defs.TIE_EPS for event times: finish tags this close are equal


def next_departure(jobs: list):
    """The ps job that leaves next: the least finish tag, equal tags in start order (docs/language.md
    §11.2). Float sums split exact ties (1/3 + 1 + 1 against 7/3), so tags within TAG_TIE (relative)
    of the least one count as equal, as serq_spec's exact tags are."""
    least = min(j.tag for j in jobs)
    lim = least + TAG_TIE * max(1.0, abs(least))
    return min((j for j in jobs if j.tag <= lim), key=lambda x: x.ps_order)


class PsStage(Stage):
    """Processor sharing with a virtual clock (§11.5); at most one pending finish event."""

    kind = "ps"

    def __init__(self, idx, st, sim):
        super().__init__(idx, st, sim)
        self.jobs: list = []
        self.v = 0.0
        self.t_last = 0.0
        self.rate = 0.0
        self.pending = None  # seq of the pending finish event
        self.order = 0

    def link(self, sim):
        self.cap_fn = compile_expr(self.spec["capacity"], sim, field_at(self.spec, "capacity"),
                                   f"ps stage {self.name}: capacity")

    def present(self):
        return len(self.jobs)

    busy = present

    def work_left(self):
        v = self.v + self.rate * (self.sim.now - self.t_last)
        return sum(j.tag - v for j in self.jobs)

    def _advance(self):
        now = self.sim.now
        self.v += self.rate * (now - self.t_last)
        self.t_last = now

    def _accept(self, job):
        self._advance()
        job.start = self.sim.now
        if self.est is not None:
            self.est.estimate_service(job.start, job.start)
        job.tag = self.v + job.left
        self.order += 1
        job.ps_order = self.order
        self.jobs.append(job)
        self.changed = True

    def event_valid(self, ev):
        return ev[1] == self.pending

    def reschedule(self):

        sim = self.sim
        self.changed = False
        self._advance()
        n = len(self.jobs)
        if n == 0:
            self.pending = None
            self.rate = 0.0
            return
        self.rate = self.capacity(n) / n
        j = next_departure(self.jobs)
        t = sim.now + max(0.0, j.tag - self.v) / self.rate
        self.pending = sim.push(t, EV_FINISH, self, j)

    def capacity(self, n: int) -> float:
        """φ(n) (serq_spec expr.ps_capacity): the capacity read with `present` = n."""
        cx = self.sim.cx
        saved = (cx.attrs, cx.sess, cx.var, cx.draw)
        cx.attrs, cx.sess, cx.var, cx.draw = [], None, {"present": float(n)}, self.sim.machine_src
        try:
            phi = self.cap_fn(cx)
        finally:
            cx.attrs, cx.sess, cx.var, cx.draw = saved
        if not 0 < phi < math.inf:   # serq_spec's rule and words (expr.ps_rate)
            raise located(RunError(f"capacity must be positive and finite, got {phi!r}"), field_at(self.spec, "capacity"),
                          f"ps stage {self.name}")
        return phi

    def finish_event(self, ev):
        self._advance()
        job = next_departure(self.jobs)
        self.v = max(self.v, job.tag)
        self.jobs.remove(job)
        job.dead = True
        self.pending = None
        self.changed = True
        self.complete(job)

    def detach(self, job):
        self._advance()
        job.dead = True
        if job in self.jobs:
            self.jobs.remove(job)
        self.changed = True


def shared_stage_indices(ir: dict) -> frozenset:
    """The ps stages some run over several stages can name (serq_spec `Program.shared_stages`)."""
    return frozenset(i for b in ir["blocks"] for st in b for ref in st.get("stages") or []
                     for i in range(ref["base"], ref["base"] + ref.get("count", 1)))


class SharedPsStage(PsStage):
    """A ps stage a flow can cross (§11.14): each job's remaining work and rate; departures and
    rates are the simulator's `Sharing`'s."""

    shared = True

    def work_left(self):
        now = self.sim.now
        return sum(j.left - j.rate * (now - j.since) for j in self.jobs)

    def _accept(self, job):
        self.sim.sharing.join(job, [self])

    def reschedule(self):   # pragma: no cover - never in ps_stages; Sharing reschedules
        raise RunError(f"internal: stage {self.name} is rescheduled by its flows")

    def detach(self, job):
        self.sim.sharing.leave(job)


TIE_LEVEL = 1e-12   # relative: maxmin levels this close are one level (exact in serq_spec)


def share_rates(policy: str, members: dict, capacity: dict) -> dict:
    """The rate of every job present at the stages of `members` (stage index -> its jobs), given
    each stage's capacity; serq_spec.stages.share_rates, in floats: bottleneck gives a job the
    least of C_s/n_s over its stages; maxmin fills progressively, a stage being full when its level
    is within TIE_LEVEL of the least one. Keyed by id(job)."""
    rates: dict = {}
    if policy == "bottleneck":
        for x, jobs in members.items():
            share = capacity[x] / len(jobs)
            for j in jobs:
                k = id(j)
                r = rates.get(k)
                rates[k] = share if r is None or share < r else r
        return rates
    free = dict(capacity)
    unfixed = {x: list(jobs) for x, jobs in members.items()}
    while any(unfixed.values()):
        level = min(free[x] / len(js) for x, js in unfixed.items() if js)
        lim = level + TIE_LEVEL * abs(level)
        full = [x for x, js in unfixed.items() if js and free[x] / len(js) <= lim]
        for x in full:
            for j in list(unfixed[x]):
                rates[id(j)] = level
                for y in (j.stages or (j.stage,)):
                    free[y.idx] -= level
                    unfixed[y.idx].remove(j)
    return rates


class Sharing:
    """The stages flows cross, together (serq_spec.stages: start_shared, leave_shared,
    reschedule_shared): the rates and the one pending departure (at most one `finish` event)."""

    def __init__(self, ir: dict, sim):
        self.sim = sim
        self.indices = shared_stage_indices(ir)
        self.policy = ir.get("share") or "maxmin"
        self.stages: list = []   # SharedPsStage, in index order (link)
        self.pending = None      # seq of the pending departure
        self.changed = False
        faults = FAULTS()
        if "flow_as_maxmin" in faults:   # seeded fault (docs/fast.md): bottleneck divided as maxmin
            self.policy = "maxmin"
        self.fault_one_stage = "flow_one_stage" in faults   # seeded fault: a flow leaves its first stage only

    def link(self, stages: list) -> None:
        self.stages = [st for st in stages if st.idx in self.indices]
        for st in self.stages:
            if st.kind != "ps":
                raise RunError(f"a run over several stages needs ps stages, not stage {st.name}")

    def join(self, job, stages: list) -> None:
        """The job joins each stage with its whole work and no rate yet (rates are divided at the
        end of the step); each stage counts a start and takes its estimates' samples (wait 0)."""
        sim = self.sim
        now = sim.now
        job.start = now
        job.rate = 0.0
        job.since = now
        for i, st in enumerate(stages):
            st.order += 1
            if i == 0:
                job.ps_order = st.order
            if st.est is not None:
                st.est.estimate_service(now, now)
            st.jobs.append(job)
            st.changed = True
        self.changed = True

    def leave(self, job) -> None:
        job.dead = True
        for st in (job.stages or (job.stage,))[:1 if self.fault_one_stage else None]:
            if job in st.jobs:
                st.jobs.remove(job)
            st.changed = True
        self.changed = True

    def event_valid(self, ev) -> bool:
        return ev[1] == self.pending

    def finish_event(self, ev) -> None:
        """The departure: the job leaves all its stages, each recording its end (service = end −
        start, wait 0), and its thread becomes ready."""
        job = ev[4]
        self.pending = None
        self.leave(job)
        sim = self.sim
        s = job.sess
        for st in (job.stages or (job.stage,)):
            st._stats(job)
            if sim.rec is not None:
                sim.rec["finished"].append([st.name, s.tid])
        if s.copy:
            return   # a spill copy on a link that flows cross: nobody waits for it (§11.8.1)
        s.job = None
        sim.make_ready(s)

    def reschedule(self) -> None:
        sim = self.sim
        now = sim.now
        self.changed = False
        dirty = [st for st in self.stages if st.changed]
        seen = {st.idx: st for st in dirty}
        todo = list(dirty)
        while todo:
            st = todo.pop()
            for j in st.jobs:
                for y in (j.stages or (j.stage,)):
                    if y.idx not in seen:
                        seen[y.idx] = y
                        todo.append(y)
        members = {}
        for x in sorted(seen):
            st = seen[x]
            st.changed = False
            if st.jobs:
                members[x] = st.jobs
                for j in st.jobs:
                    if j.since != now:
                        j.left -= j.rate * (now - j.since)
                        j.since = now
        capacity = {x: seen[x].capacity(len(jobs)) for x, jobs in members.items()}
        rates = share_rates(self.policy, members, capacity)
        for jobs in members.values():
            for j in jobs:
                j.rate = rates[id(j)]
        best = None
        for st in self.stages:
            for j in st.jobs:
                if j.stage is st:
                    t = j.since + max(j.left, 0.0) / j.rate
                    if best is None or t < best[0] - TAG_TIE * max(1.0, abs(best[0])):
                        best = (t, j)
        self.pending = None if best is None else sim.push(best[0], EV_FINISH, self, best[1])


def submit_flow(sim, s, stages: list, w: float) -> None:
    """A job of work w over several distinct shared ps stages (§11.14); zero work completes at once
    at every stage (the session stays ready), as `Stage.submit`."""
    if len(set(stages)) != len(stages):
        names = ", ".join(st.name for st in stages)
        raise RunError(f"a run over several stages names one stage twice ({names}); a flow crosses distinct stages")
    for st in stages:
        if not getattr(st, "shared", False):
            raise RunError(f"stage {st.name} is not a ps stage a flow may cross")
    job = Job(s, stages[0], w, "plain")
    job.stages = stages
    if w <= 0:
        job.start = sim.now
        for st in stages:
            st._stats(job)
            if sim.rec is not None:
                sim.rec["finished"].append([st.name, s.tid])
        return
    s.status = STAGE
    s.where = stages[0]
    s.job = job
    for st in stages:
        if st.est is not None:
            st.est.estimate_start(sim.now, w)
    sim.sharing.join(job, stages)


class Iteration:
    __slots__ = ("assign", "left", "budget", "pre0", "admitted", "served", "end", "seq", "no_admit",
                 "start", "stopped", "grew", "cost", "template", "ev0", "slots", "look", "limit", "fresh")

    def __init__(self, pre0):
        self.assign: list = []  # [job, tokens, attention, position before]
        # speculative decoding (docs/language.md §7.3): drafting slots per served request, the
        # lookahead units past every growth, the positions' limit
        self.slots = 0.0
        self.fresh: set = set()  # the sessions admitted in this iteration (running_served)
        self.look = 0.0
        self.limit = math.inf
        self.left = 0.0
        self.budget = 0.0
        self.pre0 = pre0
        self.admitted = 0
        self.served: set = set()
        self.end = None
        self.seq = None
        self.no_admit = False
        self.start = 0.0
        self.stopped = False
        self.grew = False
        self.cost = 0.0
        self.template = False

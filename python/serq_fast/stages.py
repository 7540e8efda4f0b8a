"""Plain stages: fifo(c), delay, ps(φ) (docs/language.md §11.5), the jobs on them and the base
class every stage shares (the step engine, §11.6, is `engine.Engine`).

serq_spec counterpart: `serq_spec/stages.py` (jobs on stages, the residents' order, the ps
virtual clock).
"""

from __future__ import annotations

import math
from collections import deque

from serq.irfile import field_at
from serq_fast.defs import (EV_FINISH, STAGE)
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
                 "resident", "fin_t", "tag", "dead", "work", "ps_order", "drafts")

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


def _request_hold(s):
    for h in reversed(s.holds):
        if h.request is not None:
            return h
    return None


class Stage:
    kind = "?"
    memory = None

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
        s.job = None
        self._stats(job)
        if sim.rec is not None:
            sim.rec["finished"].append([self.name, s.tid])
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
        cx = sim.cx
        saved = (cx.attrs, cx.sess, cx.var, cx.draw)
        cx.attrs, cx.sess, cx.var, cx.draw = [], None, {"present": float(n)}, sim.machine_src
        try:
            phi = self.cap_fn(cx)
        finally:
            cx.attrs, cx.sess, cx.var, cx.draw = saved
        if not 0 < phi < math.inf:   # serq_spec's rule and words (expr.ps_rate)
            raise located(RunError(f"capacity must be positive and finite, got {phi!r}"), field_at(self.spec, "capacity"),
                          f"ps stage {self.name}")
        self.rate = phi / n
        j = next_departure(self.jobs)
        t = sim.now + max(0.0, j.tag - self.v) / self.rate
        self.pending = sim.push(t, EV_FINISH, self, j)

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

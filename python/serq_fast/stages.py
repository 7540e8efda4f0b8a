"""Stages: fifo(c), delay, ps(φ) (docs/language.md §11.5) and the step engine (§11.6).

The step engine's iteration (`Engine.start_iteration`) follows the §11.6 pseudo-code: the
budget and the schedule's `let`s are read once from the residents before the iteration; the
`advance` statement serves residents in the serving order as it stands now (each at most once;
decodes one token, prefills up to the per-run cap); `admit` admits the head of a pool the engine
admits only with budget left and no preemption in this iteration, runs the admitted session at
once and serves it in the same iteration; growth that fails preempts (§11.7) or stalls.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque

from serq.irfile import field_at
from serq_fast import advance
from serq_fast.expr import RunError, compile_expr, located
from serq_fast.stats import TimeAverage

EPS = 1e-9
INF = math.inf


class Job:
    __slots__ = ("sess", "stage", "left", "mode", "growpart", "hold", "enq", "start", "stalled",
                 "resident", "fin_t", "tag", "dead", "work", "ps_order")

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


class PendingJob(Job):
    """A pending resident (docs/async.md §3 item 1): the end of a lagged engine request waiting
    for the engine's next schedule. A decode that wants `left` = 0 or 1 (an `eos` token) and whose
    `left` never changes; it takes the place of its request (`adm`: the hold's admission number,
    which differs from the session's when a hold nested in the request was admitted later)."""

    __slots__ = ("adm",)
    lagged = True


def inferred_memory(ir: dict, idx: int):
    """An engine without a `request` block has `memory: null` in the IR; its memory is the pool
    its growing runs grow (docs/ir.md): the first such run in block order, as serq_spec does
    (program.infer_memory)."""
    for blk in ir["blocks"]:
        for st in blk:
            if st["op"] == "run" and st.get("growing") is not None:
                ref = st["stage"]
                if ref["base"] <= idx < ref["base"] + ref.get("count", 1):
                    return st["growing"]
    return None


def make_stage(idx: int, st: dict, sim):
    kind = st["kind"]
    if kind == "fifo":
        return FifoStage(idx, st, sim)
    if kind == "delay":
        return DelayStage(idx, st, sim)
    if kind == "ps":
        return PsStage(idx, st, sim)
    if kind == "step":
        return Engine(idx, st, sim)
    raise RunError(f"unknown stage kind {kind}")


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

    def link(self, sim) -> None:
        pass

    def reset_averages(self, t):
        n = self.present()
        self.ta_number.reset(t, n)
        self.ta_util.reset(t, 1.0 if n > 0 else 0.0)

    def present(self) -> int:
        raise NotImplementedError

    def sample(self, now):
        n = self.present()
        self.ta_number.set(now, n)
        self.ta_util.set(now, 1.0 if n > 0 else 0.0)

    def event_valid(self, ev) -> bool:
        return not ev[4].dead

    def _new_job(self, s, w, mode):
        return Job(s, self, w, mode)

    def submit(self, s, w, mode, growing):
        from serq_fast.engine import STAGE

        job = self._new_job(s, w, mode)
        if w <= 0:
            self._zero(job)
            return
        s.status = STAGE
        s.where = self
        s.job = job
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
        from serq_fast.engine import EV_FINISH

        sim = self.sim
        job.start = sim.now
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
        from serq_fast.engine import EV_FINISH

        sim = self.sim
        job.start = sim.now
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


TAG_TIE = 1e-10  # relative, as engine.TIE_EPS for event times: finish tags this close are equal


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
        job.tag = self.v + job.left
        self.order += 1
        job.ps_order = self.order
        self.jobs.append(job)
        self.changed = True

    def event_valid(self, ev):
        return ev[1] == self.pending

    def reschedule(self):
        from serq_fast.engine import EV_FINISH

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
        if not phi > 0:
            raise located(RunError(f"capacity {phi} is not positive"), field_at(self.spec, "capacity"),
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
                 "start", "stopped", "grew", "cost", "template", "ev0")

    def __init__(self, pre0):
        self.assign: list = []  # [job, tokens, attention, position before]
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


class Engine(Stage):
    """A step stage: continuous batching under a per-iteration token budget (§11.6)."""

    kind = "step"

    def __init__(self, idx, st, sim):
        super().__init__(idx, st, sim)
        self.memory = st.get("memory")
        if self.memory is None:
            self.memory = inferred_memory(sim.ir, idx)
        self.residents: list = []
        self.adm_keys: list = []
        self.iter = None  # the iteration in flight
        self.cur = None  # the iteration being formed, then in flight (engine values)
        self.registers: list = []
        self.locals: list = []
        self._ff_vals = None  # engine values fixed during a fast-forward growth step
        # `lag 1` (docs/async.md §3): sessions whose lagged end waits for the next schedule
        # (pending), and those that schedule made due (applied by the `ends` event)
        self.lag = int(st.get("lag", 0) or 0)
        self.pending: list = []
        self.due: list = []

    def link(self, sim):
        st = self.spec
        def c(e, at=None, what=None):
            return compile_expr(e, sim, at, what) if e is not None else None

        name = self.name
        self.budget_fn = c(st["budget"], field_at(st, "budget"), f"engine {name}: tokens cap")
        self.granule_fn = c(st.get("granule"), field_at(st, "granule"), f"engine {name}: granule")
        self.cost_fn = c(st["cost"], field_at(st, "cost"), f"engine {name}: execute")
        self.cost_at = field_at(st, "cost")
        self.let_fns = [c(x["expr"], x.get("at"), f"engine {name}: schedule `let {x.get('name')}`")
                        for x in st.get("lets", [])]
        self.reg_inits = [c(x["init"], x.get("at"), f"engine {name}: a register's initial value")
                          for x in st.get("registers", [])]
        self._vf = self._value_table()
        # the engine values the cost reads, when it reads nothing else (for the fast-forward memo)
        self._cost_memo: dict = {}
        self._stair_memo: dict = {}  # the same by fixed values, then KV held (serq_fast/advance.py)
        self._ff_fixed_key = None
        self._cost_names = _pure_eng_names(st["cost"])
        self.schedule = [self._compile_s(x, sim) for x in st["schedule"]]
        # a lag engine's iterations are formed one by one (pending residents, `ends` events)
        self.ff_ok = not self.lag and _fast_forward_eligible(st, sim, self.idx)
        # the fast-forward as one advance across block boundaries (serq_fast/advance.py)
        self.advance_ok = self.ff_ok and advance.enabled()
        # growth inside a fast-forward needs a budget that the growth cannot change
        constant_names = {"running.count", "running.decoding", "waiting.count", "running.preempted",
                          "waiting.admitted"}
        self.ff_grow = self.ff_ok and self.memory is not None and not _reads_any(
            [st["budget"], st.get("lets", []), st["schedule"]],
            lambda e: e.get("k") == "obs" or (e.get("k") == "eng" and e.get("name") not in constant_names))
        self.admits = [p for p in sim.pools if p.admitted_by == self.idx]
        # where the admissions start in a fast-forward's schedule (advances come first)
        self._ff_admit_at = next((i for i, x in enumerate(st["schedule"]) if x["op"] != "advance"),
                                 len(st["schedule"]))
        self._ff_resumed = False
        self._ff_ev_seq = -1
        self._head_pure: dict = {}
        from serq_fast.pools import FAULTS

        # seeded fault (docs/fast.md): a fast-forward ignores evictions from a waiting head's entry
        self.fault_no_watch = "ff_no_watch" in FAULTS()
        # seeded faults of the advance across block boundaries (docs/fast.md)
        self.advance_faults = advance.faults()
        # seeded fault: a lag engine's due ends are applied in reverse order
        self.fault_end_order = "lag_end_order" in FAULTS()
        cx = sim.cx
        cx.eng = self
        cx.attrs = []
        cx.draw = sim.machine_src
        self.registers = [f(cx) for f in self.reg_inits]
        cx.eng = None

    def _compile_s(self, x, sim):
        op = x["op"]
        at = x.get("at")
        what = {"advance": "`advance running`", "admit": "`admit waiting`", "exclusive_prefill": "`exclusive prefill`",
                "branch": "a schedule branch", "set": "a register update"}.get(op)

        def c(e):
            return compile_expr(e, sim, at, f"engine {self.name}: {what}") if e is not None else None

        if op == "advance":
            order = x.get("order") or {"kind": "admission"}
            keys = None
            if order["kind"] == "decode_first":
                keys = [lambda cx: 0.0 if cx.job.mode == "decode" else 1.0]
            elif order["kind"] == "by":
                keys = [c(k) for k in order["keys"]]
            return ("advance", c(x.get("only")), keys, c(x.get("each")))
        if op == "admit":
            if x.get("only") is not None and _reads_any(x["only"], lambda e: e.get("k") == "job"):
                # docs/language.md §4.5: the per-request keys are a resident's (as serq_spec.program)
                raise RunError(f"a per-request key (`decoding`, `admission`, `remaining`) in `admit waiting "
                               f"only (…)` of engine {self.name}: a waiting head has no run")
            return ("admit", c(x.get("only")), c(x.get("while")), c(x.get("each")))
        if op == "exclusive_prefill":
            return ("exclusive", c(x.get("each")))
        if op == "branch":
            return ("branch", c(x["cond"]), [self._compile_s(y, sim) for y in x.get("then", [])],
                    [self._compile_s(y, sim) for y in (x.get("else") or [])])
        if op == "set":
            return ("set", x["register"], c(x["expr"]))
        raise RunError(f"unknown schedule statement {op}")

    # ------------------------------------------------------------ observables / values

    def present(self):
        return len(self.residents)

    def busy(self):
        return len(self.iter.assign) if self.iter is not None else 0

    def work_left(self):
        return sum(j.left for j in self.residents)

    def observe(self, f, cx):
        if f == "budget_left":
            al = cx.admit_left
            if al is not None and al[0] == self.idx:
                return al[1]
            return self._budget_left_outside(cx)
        return super().observe(f, cx)

    def _budget_left_outside(self, cx):
        """B − Σ want over the residents, floored at 0 (§11.6); a prefill wants at most the first
        `advance` statement's `each at most`, read like the Budget moment (with the lets)."""
        saved = (cx.eng, cx.attrs, cx.sess, self.locals)
        cx.eng = self
        try:
            b = self.budget_fn(cx)
            self.locals = [f(cx) for f in self.let_fns]
            adv = _first_advance(self.schedule)
            cap = self._each(adv[3]) if adv is not None else INF
        finally:
            cx.eng, cx.attrs, cx.sess, self.locals = saved
        want = sum((min(1.0, j.left) if j.mode == "decode" else min(j.left, cap)) for j in self.residents)
        return max(0.0, b - want)

    def has_work(self):
        if self.residents:
            return True
        return any(p.qlen() > 0 for p in self.admits)

    def _kv(self, jobs, decode):
        """KV units held by decoding (or prefilling) jobs in the engine's memory pool; with no
        declared memory (`memory: null`), the pool each growing run grows (docs/ir.md)."""
        tot = 0.0
        mem = self.memory
        for j in jobs:
            gp = j.growpart
            if (j.mode == "decode") == decode and gp is not None and (mem is None or gp.pool.idx == mem):
                tot += gp.alloc
        return tot

    def value(self, name):
        """An engine value of docs/language.md §4.5 (dispatch table built once: speed)."""
        ff = self._ff_vals
        if ff is not None and name in ff:
            return ff[name]
        try:
            return self._vf[name]()
        except KeyError:
            raise RunError(f"unknown engine value {name}") from None

    def _value_table(self):
        def cur_assign():
            it = self.cur
            return it.assign if it is not None else ()

        def kv_assigned(decode):
            return self._kv([a[0] for a in cur_assign()], decode)

        sim = self.sim
        return {
            "running.count": lambda: float(len(self.residents)),
            "running.decoding": lambda: float(sum(1 for j in self.residents if j.mode == "decode")),
            "running.kv_decode": lambda: self._kv(self.residents, True),
            "running.kv_prefill": lambda: self._kv(self.residents, False),
            "running.preempted": lambda: float(sim.npreempt - self.cur.pre0) if self.cur is not None else 0.0,
            "waiting.count": lambda: float(sum(p.qlen() for p in self.admits)),
            "waiting.admitted": lambda: float(self.cur.admitted) if self.cur is not None else 0.0,
            "batch.tokens": lambda: float(sum(a[1] for a in cur_assign())),
            "batch.prefilled": lambda: float(sum(a[1] for a in cur_assign() if a[0].mode != "decode")),
            "batch.decoding": lambda: float(sum(1 for a in cur_assign() if a[0].mode == "decode")),
            "batch.prefilling": lambda: float(sum(1 for a in cur_assign() if a[0].mode != "decode")),
            "batch.kv_decode": lambda: kv_assigned(True),
            "batch.kv_prefill": lambda: kv_assigned(False),
            "batch.attention": lambda: float(sum(a[2] for a in cur_assign())),
        }

    # ------------------------------------------------------------ jobs

    def submit(self, s, w, mode, growing):
        from serq_fast.engine import STAGE
        from serq_fast.pools import find_part

        sim = self.sim
        job = Job(s, self, w, mode)
        job.hold = _request_hold(s)
        if growing is not None:
            pool = sim.pools[growing]
            job.growpart = find_part(s, pool)
            if job.growpart is None:
                raise RunError(f"run {self.name} growing {pool.name}: the session holds no {pool.name}")
            # a hold grown by a run caches up to its position (what was computed), even before
            # the run is first served: its allocation beyond the position holds nothing yet
            job.growpart.advanced = True
        if w <= 0:
            self._zero(job)
            if mode == "prefill":
                self._first_token(job)
            return
        s.status = STAGE
        s.where = self
        s.job = job
        job.resident = True
        k = s.adm_seq
        i = bisect.bisect_right(self.adm_keys, k)
        self.adm_keys.insert(i, k)
        self.residents.insert(i, job)

    def _first_token(self, job):
        h = job.hold
        if h is None:
            return
        req = h.request
        if req.first is None:
            req.first = self.sim.now
            self.sim.client_record("ttft", req.first - req.submit, job.sess)

    def _remove_resident(self, job):
        i = self.residents.index(job)
        del self.residents[i]
        del self.adm_keys[i]
        job.resident = False

    def detach(self, job):
        job.dead = True
        if job.resident:
            self.unassign(job)
            self._remove_resident(job)

    def unassign(self, job):
        """A victim already served this iteration leaves the batch; its tokens return (§11.6)."""
        it = self.cur
        if it is None:
            return
        for i, a in enumerate(it.assign):
            if a[0] is job:
                del it.assign[i]
                it.left += a[1]
                if job.growpart is not None:
                    job.growpart.pos = a[3]
                return

    def iter_end(self):
        it = self.iter
        self.iter = None
        self.cur = None
        done = []
        for a in it.assign:
            job = a[0]
            if not job.resident:
                continue  # an EOS token whose end was applied meanwhile (docs/async.md §3 item 6)
            job.left -= a[1]
            if job.left <= EPS:
                done.append(job)
        for job in done:
            self._remove_resident(job)
            job.dead = True
            if job.mode == "prefill":
                self._first_token(job)
            self.complete(job)

    # ------------------------------------------------------------ lag 1 (docs/async.md)

    def lag_end(self, s, h):
        """The session reached the end of its lagged request `h` (§3 item 1): `eos` is read in the
        session moment, a pending resident takes the request's place, the session is ending."""
        from serq_fast.engine import ENDING

        x = 0.0
        if h.stmt.eos is not None:
            v = h.stmt.eos(self.sim.cx)
            x = 1.0 if v != 0 else 0.0
        job = PendingJob(s, self, x, "decode")
        job.hold = h
        job.adm = h.adm
        mem = self.memory
        if mem is not None:
            for part in h.parts:
                if part.pool.idx == mem:
                    job.growpart = part
                    break
        job.resident = True
        i = bisect.bisect_right(self.adm_keys, h.adm)
        self.adm_keys.insert(i, h.adm)
        self.residents.insert(i, job)
        s.job = job
        s.status = ENDING
        s.where = self
        self.pending.append(s)

    def _make_due(self, t):
        """The schedule makes the pending ends due (docs/async.md §3 item 4): the `ends` event at
        `t`, the end of the iteration it started (or `now` when it started none)."""
        from serq_fast.engine import EV_ENDS

        self.due.extend(self.pending)
        self.pending = []
        self.sim.push(t, EV_ENDS, self)

    def apply_ends(self):
        """The `ends` event (§3 item 5): each due end in order: the pending resident (unless
        preempted) leaves, the hold frame is popped and the hold's scope ends as without lag,
        the session is ready."""
        from serq_fast.pools import scope_end

        sim = self.sim
        due = self.due
        self.due = []
        if self.fault_end_order:
            due.reverse()  # seeded fault (docs/fast.md): not in the batch's order
        for s in due:
            job = s.job
            if job is not None:
                if job.resident:
                    self._remove_resident(job)
                job.dead = True
                s.job = None
            fr = s.frames.pop()
            scope_end(sim, s, fr[3])
            s.frames[-1][1] += 1
            sim.make_ready(s)

    # ------------------------------------------------------------ the iteration

    def _next(self, keys, it):
        """The first resident in the serving order as it stands now, not yet served."""
        if keys is None:
            for j in self.residents:
                if j not in it.served:
                    return j
            return None
        cx = self.sim.cx
        best, bestk = None, None
        for j in self.residents:
            if j in it.served:
                continue
            cx.job, cx.attrs, cx.sess = j, j.sess.attrs, j.sess
            k = tuple(f(cx) for f in keys) + (j.adm,)
            if bestk is None or k < bestk:
                best, bestk = j, k
        cx.job, cx.attrs, cx.sess = None, [], None
        return best

    def _serve(self, job, cap, only):
        """Serve one resident (§11.6 loop body): 'ok', 'skip' or 'self' (it preempted itself)."""
        sim = self.sim
        it = self.cur
        it.served.add(job)
        cx = sim.cx
        if only is not None:
            cx.job, cx.attrs, cx.sess = job, job.sess.attrs, job.sess
            v = only(cx)
            cx.job, cx.attrs, cx.sess = None, [], None
            if v == 0:
                return "skip"
        if job.mode == "decode":
            want = min(1.0, job.left)
        else:
            want = min(job.left, cap)
        tokens = min(want, it.left)
        if self.granule_fn is not None and job.mode != "decode" and tokens < job.left:
            g = self.granule_fn(cx)
            if g > 0:
                tokens = math.floor(tokens / g + EPS) * g
                if tokens <= 0:
                    it.no_admit = True
                    return "skip"
        if tokens <= 0:
            return "skip"
        att = 0.0
        part = job.growpart
        pos0 = None
        if part is not None:
            if job.stalled:
                return "skip"
            need = part.pos + tokens - part.alloc
            if need > EPS:
                it.grew = True
                res = part.pool.grow(part, need, job)
                if res == "preempted":
                    return "self"
                if res == "stalled":
                    return "skip"
            pos0 = part.pos
            if job.mode != "decode":  # a plain run is served as a prefill (docs/spec.md)
                att = tokens * (part.pos + tokens / 2.0)
            part.pos += tokens
            part.advanced = True
            if part.content is not None and not job.lagged:
                # blocks full once scheduled (docs/content.md §3); an EOS token's output is never
                # processed, so it identifies none (docs/async.md §3 item 2)
                part.pool.identify(part, part.pos)
        elif job.mode != "decode":
            att = tokens * tokens / 2.0
        it.assign.append([job, tokens, att, pos0])
        it.left -= tokens
        if job.start is None:
            job.start = sim.now
        return "ok"

    def _each(self, f):
        if f is None:
            return INF
        v = f(self.sim.cx)
        if v <= 0:
            return INF  # the kernel's 0 means "no cap"
        return v

    def _run_schedule(self, stmts):
        sim = self.sim
        cx = sim.cx
        it = self.cur
        for st in stmts:
            if it.stopped:
                return
            op = st[0]
            if op == "advance":
                _, only, keys, each = st
                cap = self._each(each)
                while True:
                    if it.left <= 0:
                        it.stopped = True
                        return
                    job = self._next(keys, it)
                    if job is None:
                        break
                    if self._serve(job, cap, only) == "self":
                        it.stopped = True  # a grower that preempts itself ends the running loop
                        return
                    if it.left <= 0:
                        it.stopped = True
                        return
            elif op == "admit":
                _, only, guard, each = st
                cap = self._each(each)
                while True:
                    if it.left <= 0 or sim.npreempt != it.pre0 or it.no_admit:
                        break
                    if guard is not None and guard(cx) == 0:
                        break
                    if not self._admit_one(only):
                        break
                    while True:
                        job = self._next(None, it)
                        if job is None:
                            break
                        r = self._serve(job, cap, None)
                        if r == "self":
                            it.stopped = True
                            return
                        if it.left <= 0:
                            it.stopped = True
                            return
            elif op == "exclusive":
                self._exclusive(self._each(st[1]))
                it.stopped = True
                return
            elif op == "branch":
                v = st[1](cx)
                if v != 0 and v != 1:
                    raise RunError(f"engine {self.name}: a schedule guard must be 0 or 1, got {v}")
                self._run_schedule(st[2] if v == 1 else st[3])
            elif op == "set":
                self.registers[st[1]] = st[2](cx)

    def _exclusive(self, cap):
        it = self.cur
        pre = [j for j in self.residents if j.mode != "decode" and j not in it.served]
        if pre:
            for j in self.residents:
                if j is not pre[0]:
                    it.served.add(j)
            self._serve(pre[0], cap, None)
            return
        if self.sim.npreempt == it.pre0 and not it.no_admit:
            saved = it.left
            it.left = it.budget  # `budget_left` = the full budget during these admissions
            s = self._admit_one(None)
            if s:
                new = s.job if (s.job is not None and s.job.resident and s.job.stage is self) else None
                if new is not None and new.mode != "decode" and new not in it.served:
                    # the fitting prefill replaces the tentative decodes and takes the budget
                    for j in self.residents:
                        if j is not new:
                            it.served.add(j)
                    self._serve(new, cap, None)
                    return
            it.left = saved
        while True:
            j = self._next(None, it)
            if j is None or it.left <= 0:
                return
            if self._serve(j, cap, None) == "self":
                return

    def _trace_line(self, it) -> None:
        """The `SERQ_TRACE_ITER` debug line of docs/language.md §14 (one per iteration, stderr)."""
        import sys

        from serq_fast.engine import TURN_NO

        parts = [f"{a[0].sess.serial}:{int(a[0].sess.attrs[TURN_NO])}:{'d' if a[0].mode == 'decode' else 'p'}{a[1]:g}"
                 for a in it.assign]
        tail = ""
        if self.memory is not None:
            pool = self.sim.pools[self.memory]
            b = pool.block or 1
            tail = f" | used {pool.used / b:g} cached {pool.cached / b:g}"
        sys.stderr.write(f"ITER {self.sim.now:.4f} {' '.join(parts)}{tail}\n")

    def _admit_one(self, only):
        sim = self.sim
        cx = sim.cx
        it = self.cur
        from serq_fast.pools import REJECTED, WAIT

        for pool in self.admits:
            while True:
                h = pool.head()
                if h is None:
                    break
                if only is not None:
                    # `admit waiting only (e)`: an excluded head is not tried; admission stops
                    saved_only = (cx.attrs, cx.sess)
                    cx.attrs, cx.sess = h.sess.attrs, h.sess
                    try:
                        v = only(cx)
                    finally:
                        cx.attrs, cx.sess = saved_only
                    if v == 0:
                        return None
                cx.admit_left = (self.idx, it.left)
                try:
                    res = pool.try_admit(h)
                finally:
                    cx.admit_left = None
                if res != REJECTED:
                    break
                # a rejected head: the next one, as if it had not been there (docs/spec.md)
            if h is None:
                continue
            if res == WAIT:
                return None
            it.admitted += 1
            s = h.sess
            if sim.ready and sim.ready[-1] is s:
                sim.ready.pop()
            saved = (cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job, cx.at)
            try:
                sim.exec_session(s)
            finally:
                cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job, cx.at = saved
            return s  # the admitted session (truthy)
        return None

    def start_iteration(self):
        sim = self.sim
        it = Iteration(sim.npreempt)
        it.start = sim.now
        self.cur = it
        self._form(it, None)

    def _form(self, it, resume_at):
        """Form the iteration `it` (§11.6) and start it: run the schedule, read the cost, push its
        end. With `resume_at`, the budget, the lets and the statements before that index are
        already done (a fast-forward served the decodes; `bulk`), and the schedule goes on
        from there."""
        from serq_fast.engine import EV_ITER_END

        sim = self.sim
        cx = sim.cx
        saved = (cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job)
        cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job = [], None, sim.machine_src, self, {}, None
        regs = list(self.registers)
        try:
            if resume_at is None:
                b = self.budget_fn(cx)
                self.locals = []
                for f in self.let_fns:
                    self.locals.append(f(cx))
                it.budget = b
                it.left = b
                self._run_schedule(self.schedule)
            else:
                self._run_schedule(self.schedule[resume_at:])
            preempted = sim.npreempt - it.pre0
            if not it.assign and preempted == 0:
                self.registers = regs
                self.cur = None
                if self.pending:
                    self._make_due(sim.now)  # an empty schedule: the ends are applied at once
                return
            cost = self.cost_fn(cx)
            sim.claims.iteration(self.idx, cx, sim.now)   # iteration claims read what `execute` reads
        finally:
            cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job = saved
        tokens = sum(a[1] for a in it.assign)
        if cost != cost or cost < 0 or math.isinf(cost):
            raise located(RunError(f"iteration cost {cost} is not a finite value >= 0"), self.cost_at,
                          f"engine {self.name}: execute")
        if tokens > 0 and cost <= 0:
            raise located(RunError(f"an iteration with {tokens:g} tokens costs 0"), self.cost_at,
                          f"engine {self.name}: execute")
        it.cost = cost
        it.end = sim.now + cost
        if self.pending:
            self._make_due(it.end)  # scheduled before `iter_end`, so handled first
        it.seq = sim.push(it.end, EV_ITER_END, self)
        if self.ff_ok and not it.grew and preempted == 0 and it.admitted == 0 \
                and len(it.assign) == len(self.residents):
            it.ev0 = sim.events  # valid only if no other event is handled before its end
            it.template = all(a[0].mode == "decode" and a[1] == 1 and not a[0].stalled
                              and a[0].growpart is not None for a in it.assign)
        self.iter = it
        self.iterations += 1
        if sim.trace_iter:
            self._trace_line(it)
        if sim.rec is not None:
            sim.rec["iterations"].append({
                "stage": self.name, "start": sim.now, "end": it.end,
                "assign": [[a[0].sess.serial, a[0].mode, a[1]] for a in it.assign],
                "preempted": preempted, "admitted": it.admitted})


# ---------------------------------------------------------------- fast-forward (speed trick)
#
# Labelled speed trick (docs/fast.md "Decode fast-forward"): while an engine's batch is all
# decodes, every resident is served one token, no growth, admission or preemption happens and no
# other event falls in between, consecutive iterations are identical except for `now`,
# `remaining` and `position`. `Engine.bulk` applies j such steps at once — the same float
# additions in the same order, the same event sequence numbers and counters — so a run's cost
# grows with batch-changing events, not with tokens. It applies only to engines whose schedule
# and cost read nothing that changes with time alone (no `now`, draws or registers).


def _first_advance(stmts):
    """The first `advance` of a compiled schedule, branches included, in order (as serq_spec's
    `flat_schedule`): its `each at most` caps a prefill's want in `budget_left` outside admission."""
    for st in stmts:
        if st[0] == "advance":
            return st
        if st[0] == "branch":
            a = _first_advance(st[2]) or _first_advance(st[3])
            if a is not None:
                return a
    return None


def _reads(e, bad) -> bool:
    """True if the expression reads something in `bad` (kinds, or ("ctx", name) pairs)."""
    if isinstance(e, dict):
        k = e.get("k")
        if k in bad or (k == "ctx" and ("ctx", e.get("name")) in bad):
            return True
        if k == "obs" and e.get("f") in ("work", "est_lambda", "est_rho", "est_wait", "price"):
            return True
        return any(_reads(v, bad) for v in e.values() if isinstance(v, (dict, list)))
    if isinstance(e, list):
        return any(_reads(v, bad) for v in e)
    return False


def _pure_eng_names(e):
    """The sorted engine-value names `e` reads, or None if it reads anything but numbers,
    engine values and pure operators."""
    names: set = set()

    def walk(x) -> bool:
        k = x.get("k")
        if k == "num":
            return True
        if k == "eng":
            names.add(x["name"])
            return True
        if k == "un":
            return walk(x["a"])
        if k == "bin":
            return walk(x["a"]) and walk(x["b"])
        if k == "cond":
            return walk(x["c"]) and walk(x["a"]) and walk(x["b"])
        if k == "fn":
            return all(walk(a) for a in x["args"])
        return False

    return tuple(sorted(names)) if walk(e) else None


def _reads_any(e, pred) -> bool:
    if isinstance(e, dict):
        if "k" in e and pred(e):
            return True
        return any(_reads_any(v, pred) for v in e.values() if isinstance(v, (dict, list)))
    if isinstance(e, list):
        return any(_reads_any(v, pred) for v in e)
    return False


def _fast_forward_eligible(st: dict, sim, idx: int) -> bool:
    import os

    if os.environ.get("SERQ_FAST_NO_FF") or os.environ.get("SERQ_TRACE_ITER"):
        return False
    bad = {"draw", "reg", ("ctx", "now"), "job"}
    sched = st["schedule"]
    seen_admit = False
    for x in sched:
        op = x["op"]
        if op == "advance":
            if seen_admit or x.get("only") is not None:
                return False
            if (x.get("order") or {"kind": "admission"})["kind"] not in ("admission", "decode_first"):
                return False
        elif op == "admit":
            seen_admit = True
        else:
            return False
    if st.get("registers"):
        return False
    if _reads([st["budget"], st["cost"], st.get("lets", []), sched], bad):
        return False
    # the heads the engine would try to admit: their header must not change with time alone
    admitted = {i for i, p in enumerate(sim.ir["pools"]) if p.get("admitted_by") == idx}
    for blk in sim.ir["blocks"]:
        for s in blk:
            if s.get("op") == "hold" and s["pools"] and s["pools"][0]["pool"]["base"] in admitted:
                if _reads([s["pools"], s.get("bindings"), s.get("reuse")], {"draw", ("ctx", "now")}):
                    return False
    for i in admitted:
        q = sim.ir["pools"][i].get("queue") or {"kind": "fifo"}
        if q["kind"] != "fifo":
            return False
    return True


def bulk(self, t1: float, t_next: float, horizon: float, max_j: int) -> int:
    """Handle the end of the in-flight template iteration (popped at `t1`) and the identical
    iterations after it, as long as nothing else can happen; returns the steps handled (0: none,
    use the normal path).

    Runs of steps without growth are applied in O(1) each (time advances step by step with the
    same additions; `left` and `position` advance together at the end). A step at a block
    boundary grows the residents whose position reaches their allocation, exactly as the
    iteration would (serving order, eviction of cached blocks by make_room), when the pool has
    room without preemption and no request waits, then re-reads the cost on the grown batch.
    The steps at which each resident grows are known in advance (its position advances one
    token a step), so they sit in a heap instead of being searched for."""
    from serq_fast.engine import TIE_EPS
    from serq_fast.pools import EPS as POOL_EPS, roundup

    sim = self.sim
    it = self.iter
    if it.ev0 != sim.events - 1:
        return 0  # another event was handled while the template was in flight
    for other in sim.engines:
        if other is not self and other.iter is None and other.has_work():
            return 0
    jobs = [a[0] for a in it.assign]
    parts = [j.growpart for j in jobs]
    cap_steps = min(min(int(j.left) for j in jobs) - 1, max_j)  # no resident finishes
    if cap_steps < 2:
        return 0
    if sim.has_content and any(p.pool.content for p in parts):
        # a `share content` pool allocates, evicts and identifies physical blocks at each step
        # (docs/content.md): not fast-forwarded (docs/fast.md "Content pools")
        return 0
    pool = parts[0].pool
    block = pool.block
    # growth needs the engine's memory pool for every resident and whole token counts (so the
    # step of each resident's next growth is an integer and positions can advance in one sum)
    grow_ok = (self.ff_grow and pool.idx == self.memory
               and all(p.pool is pool and p.pos == int(p.pos) and p.alloc == int(p.alloc) for p in parts)
               and (block is None or block == int(block)))
    watch = None
    if grow_ok:
        head = next((h for h in (q.head() for q in self.admits) if h is not None), None)
        if head is not None:
            # the head tried at every formation waited at the template's; growth only adds to
            # `used` and evicts cached blocks, so it keeps waiting, with the same bindings, while
            # its header reads nothing but attributes, this engine's budget_left and cachedin,
            # and its own cache entry in this pool is untouched (else: `_ff_resume`)
            if self._pure_head(head.stmt):
                we = pool.entries.get(head.sess.serial)
                watch = (head.sess.serial, we, we.size if we is not None else None)
            else:
                grow_ok = False
    # strictly before the next instant (with nothing pending, no bound: inf - inf would be NaN)
    t_stop = t_next - TIE_EPS * max(1.0, abs(t_next)) if t_next < INF else INF
    if self.advance_ok and advance.applies(self, pool, grow_ok):
        # labelled speed trick: the whole fast-forward at once (serq_fast/advance.py)
        return advance.run(self, it, jobs, parts, pool, grow_ok, watch, cap_steps, t1, t_stop, horizon)
    pos0 = [p.pos for p in parts]
    # heap of (step index of the formation at which the resident grows, serving index)
    nxt = [(int(p.alloc - p0), i) for i, (p, p0) in enumerate(zip(parts, pos0))]
    heapq.heapify(nxt)
    bound = min(t_stop, horizon)
    c = it.cost
    t = t1
    last = t1
    total = 0
    last_growth = False
    grew = False
    kvd = 0.0
    fixed = None
    left0 = [j.left for j in jobs]
    cap = pool.cap + POOL_EPS
    ta_used, ta_cached = pool.ta_used, pool.ta_cached
    while total < cap_steps:
        lim = min(nxt[0][0], cap_steps) - total
        n = 0
        # most of a run of plain steps cannot reach the next instant: add without the checks (the
        # same additions in the same order), then finish the run step by step
        if c > 0 and bound > t:
            safe = lim if bound == INF else min(lim, int((bound - t) / c) - 2)
            if safe > 0:
                for _ in range(safe - 1):
                    t = t + c
                last = t
                t = t + c
                n = safe
        while n < lim and t < t_stop and t <= horizon:
            n += 1
            last = t
            t = t + c
        if n:
            total += n
            last_growth = False
        if n < lim or total >= cap_steps or not grow_ok or not (t < t_stop and t <= horizon):
            break
        # the formation at step `total` crosses a block boundary: grow in serving order if it fits
        grows = []
        need_total = 0.0
        while nxt and nxt[0][0] == total:
            i = heapq.heappop(nxt)[1]
            p = parts[i]
            tgt = roundup(pos0[i] + total + 1, block)
            grows.append((i, p, tgt))
            need_total += tgt - p.alloc
        if pool.used + need_total > cap:
            break  # the iteration would preempt or stall: the normal path handles it
        if not grew:
            grew = True
            kvd = sum(p.alloc for p in parts)
            fixed = self._ff_begin(it, len(jobs))
        sim.now = t
        if sim.rec is not None:
            sim.rec = sim._new_rec()
        # Pool.grow's success path, in serving order: make room (evicting cached blocks), allocate
        for i, p, tgt in grows:
            need = tgt - p.alloc
            if pool.used + pool.cached + need > cap:
                pool.make_room(need)
            pool.used += need
            p.alloc = tgt
            kvd += need  # whole numbers: the same sum as adding the allocations in serving order
            heapq.heappush(nxt, (int(tgt - pos0[i]), i))
        total += 1
        last_growth = True
        if watch is not None and not self.fault_no_watch:
            we = pool.entries.get(watch[0])
            if we is not watch[1] or (we is not None and we.size != watch[2]):
                # the eviction touched the waiting head's cached prefix: its admission attempt
                # may differ, so this formation's admissions run as the schedule says
                _ff_sync(jobs, left0, pos0, total)
                return self._ff_resume(it, total, t)
        c = self._ff_cost(fixed, kvd, jobs, left0, pos0, total)
        if not (c > 0) or math.isinf(c):
            raise located(RunError(f"an iteration with {len(jobs)} tokens costs {c}"), self.cost_at,
                          f"engine {self.name}: execute")
        if sim.measuring:
            # only the pool changed at this step (Pool.sample's used and cached)
            if ta_used.v != pool.used:
                ta_used.set(t, pool.used)
            if ta_cached.v != pool.cached:
                ta_cached.set(t, pool.cached)
        last = t
        t = t + c
    if total == 0:
        return 0
    _ff_sync(jobs, left0, pos0, total)
    return self._ff_finish(it, total, last, c, last_growth)


def _ff_finish(self, it, total: int, last: float, c: float, last_growth: bool) -> int:
    """End a fast-forward of `total` steps whose last iteration started at `last` and costs `c`
    (positions already brought up to date): it is the iteration in flight, its end pushed with the
    sequence numbers and counters the skipped steps would have consumed."""
    from serq_fast.engine import EV_ITER_END

    sim = self.sim
    if not last_growth and sim.rec is not None:
        sim.rec = sim._new_rec()
    for a in it.assign:
        a[3] = a[0].growpart.pos - 1
    sim.now = last
    it.start = last
    it.cost = c
    it.end = last + c
    sim.seq += total - 1
    self._ff_ev_seq = sim.seq - 1  # the last iteration end handled
    it.seq = sim.push(it.end, EV_ITER_END, self)
    self.iterations += total
    sim.events += total - 1  # the caller counts the popped event
    return total


def _ff_resume(self, it, total: int, t: float) -> int:
    """End a fast-forward at a formation (time `t`, the `total`-th step) whose decodes were served
    and grown but whose admissions may differ from the template's: form the rest of the
    iteration with the schedule's admit statements, as `start_iteration` would after the
    advances. The caller then settles from the engines on (`Sim.settle(started=True)`)."""
    sim = self.sim
    sim.now = t
    sim.seq += total - 1
    self._ff_ev_seq = sim.seq - 1
    sim.events += total - 1  # the caller counts the popped event
    self.iterations += total - 1  # `_form` counts the resumed one
    self.iter = None
    it2 = Iteration(sim.npreempt)
    it2.start = t
    it2.budget = it.budget
    left = it.budget
    for a in it.assign:
        job = a[0]
        it2.assign.append([job, a[1], a[2], job.growpart.pos - a[1]])
        it2.served.add(job)
        left -= a[1]
    it2.left = left
    it2.grew = True
    if left <= 0:
        it2.stopped = True  # the advance loop ends the schedule when the budget is spent
    self.cur = it2
    self._ff_resumed = True
    self._form(it2, self._ff_admit_at)
    return total


def _pure_head(self, stmt) -> bool:
    """True if the hold statement's bindings, amounts and reuse read only numbers, attributes,
    pure operators, `cachedin` of a fixed pool and this engine's `budget_left`."""
    r = self._head_pure.get(id(stmt))
    if r is None:
        idx = self.idx

        def pure(e) -> bool:
            if isinstance(e, list):
                return all(pure(x) for x in e)
            if not isinstance(e, dict):
                return True
            k = e.get("k")
            if k is None:  # a pool entry or a binding: its expressions
                return all(pure(v) for key, v in e.items() if key not in ("pool",) and isinstance(v, (dict, list)))
            if k in ("num", "attr"):
                return True
            if k in ("un", "bin", "cond", "fn"):
                return all(pure(v) for v in e.values() if isinstance(v, (dict, list)))
            if k == "obs":
                if e["f"] == "cachedin":
                    return e.get("pool") is not None and e["pool"].get("index") is None
                if e["f"] == "budget_left":
                    ref = e.get("stage")
                    return ref is not None and ref.get("index") is None and ref["base"] == idx
            return False

        r = self._head_pure[id(stmt)] = pure(stmt.header_ir)
    return r


def _ff_begin(self, it, nres: int):
    """The engine values fixed for a whole fast-forward (every resident is an assigned decode of
    one token); only the KV held changes, by growth. Returns the memo key part of the cost's
    other values, or a marker that the cost is evaluated afresh each time."""
    n = float(nres)
    self._ff_fixed = {"batch.tokens": n, "batch.decoding": n, "batch.prefilled": 0.0, "batch.prefilling": 0.0,
                      "batch.kv_prefill": 0.0, "batch.attention": 0.0, "running.count": n,
                      "running.decoding": n, "running.kv_prefill": 0.0}
    names = self._cost_names
    if names is None:
        return None
    self.cur = it
    kv = ("batch.kv_decode", "running.kv_decode")
    return tuple((x, -1.0) if x in kv else (x, self._ff_fixed[x] if x in self._ff_fixed else self._vf[x]())
                 for x in names)


def _ff_sync(jobs, left0, pos0, total: int) -> None:
    """Bring `left` and `position` of every resident to `total` steps past the fast-forward's
    start (whole numbers: one addition is the same as `total` additions of 1)."""
    for j, l0, p0 in zip(jobs, left0, pos0):
        j.left = l0 - total
        j.growpart.pos = p0 + total


def _ff_cost(self, fixed, kvd: float, jobs, left0, pos0, total: int) -> float:
    """The cost of a fast-forward step whose batch holds `kvd` KV units in decodes: memoised when
    the cost reads only engine values (bounded), else evaluated with `left` and positions brought
    up to date."""
    key = (fixed, kvd) if fixed is not None else None
    if key is not None:
        c = self._cost_memo.get(key)
        if c is not None:
            return c
    else:
        _ff_sync(jobs, left0, pos0, total)  # the cost may read what the steps advanced
    sim = self.sim
    cx = sim.cx
    ff_vals = dict(self._ff_fixed)
    ff_vals["batch.kv_decode"] = ff_vals["running.kv_decode"] = kvd
    saved = (cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job)
    cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job = [], None, sim.machine_src, self, {}, None
    self.cur = self.iter
    self._ff_vals = ff_vals
    try:
        c = self.cost_fn(cx)
    finally:
        self._ff_vals = None
        cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job = saved
    if key is not None:
        if len(self._cost_memo) > 65536:
            self._cost_memo.clear()
        self._cost_memo[key] = c
    else:
        _ff_sync(jobs, left0, pos0, 0)  # the caller advances them once, at the end
    return c


Engine.bulk = bulk
Engine._ff_finish = _ff_finish
Engine._ff_resume = _ff_resume
Engine._pure_head = _pure_head
Engine._ff_begin = _ff_begin
Engine._ff_cost = _ff_cost

"""The step engine (docs/language.md §11.6): an engine's iteration, its schedule and cost.

The iteration (`Engine.start_iteration`) follows the §11.6 pseudo-code: the budget and the
schedule's `let`s are read once from the residents before the iteration; the `advance`
statement serves residents in the serving order as it stands now (each at most once; decodes
one token, prefills up to the per-run cap); `admit` admits the head of a pool the engine admits
only with budget left and no preemption in this iteration, runs the admitted session at once and
serves it in the same iteration; growth that fails preempts (§11.7) or stalls.

serq_spec counterpart: `serq_spec/engine.py` (the step engine, whose admission runs sessions).
"""

from __future__ import annotations

import bisect
import math
import os
import sys

from serq.exact import iteration_cost_out_of_range, speculate_not_whole
from serq.irfile import field_at
from serq.wire import value_from_wire
from serq_fast import advance
from serq_fast.defs import (EPS, EV_ITER_END, FAULTS, INF, STAGE, TURN_NO)
from serq_fast.estimates import EngineEstimates
from serq_fast.expr import RunError, compile_expr, located
from serq_fast.growth import grow
from serq_fast.pools import REJECTED, WAIT, find_part
from serq_fast.lag import make_due
from serq_fast.stages import DelayStage, FifoStage, Iteration, Job, PsStage, SharedPsStage, Stage, _request_hold


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
        return SharedPsStage(idx, st, sim) if idx in sim.sharing.indices else PsStage(idx, st, sim)
    if kind == "step":
        return Engine(idx, st, sim)
    raise RunError(f"unknown stage kind {kind}")


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
        self.forming = False  # the schedule of `cur` is running (running_served reads it)
        self.cur = None  # the iteration being formed, then in flight (engine values)
        self.registers: list = []
        self.locals: list = []
        self._ff_vals = None  # engine values fixed during a fast-forward growth step
        # `lag 1` (docs/async.md §3): sessions whose lagged end waits for the next schedule
        # (pending), and those that schedule made due (applied by the `ends` event)
        self.lag = int(st.get("lag", 0) or 0)
        self.pending: list = []
        self.due: list = []
        # the online estimates of an engine (serq_fast/estimates.py), when the program reads them
        self.est = EngineEstimates() if st.get("estimates") else None

    def link(self, sim):
        st = self.spec
        def c(e, at=None, what=None):
            return compile_expr(e, sim, at, what) if e is not None else None

        name = self.name
        self.budget_fn = c(st["budget"], field_at(st, "budget"), f"engine {name}: tokens cap")
        self.granule_fn = c(st.get("granule"), field_at(st, "granule"), f"engine {name}: granule")
        sp = st.get("speculate")
        # speculative decoding (docs/language.md §7.3): (slots, lookahead, limit), read with the budget
        self.spec_fns = None if sp is None else tuple(
            c(sp[k], sp.get("at"), f"engine {name}: speculate {k}") for k in ("slots", "lookahead", "limit"))
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
        # an engine whose estimates are read: each iteration is a cycle sample of ρ̂ (docs/fast.md)
        self.ff_ok = not self.lag and self.est is None and _fast_forward_eligible(st, sim, self.idx) \
            and not _speculates(sim.ir, self.idx)
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
        if f in ("running_served", "running_chunks"):
            # docs/language.md §7.3 (serq_spec.expr.running_served): 0 outside the schedule
            it = self.cur
            if it is None or not self.forming:
                return 0.0
            chunks = f == "running_chunks"
            return float(sum(1 for a in it.assign
                             if a[0].sess not in it.fresh and (not chunks or a[0].mode != "decode")))
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

    def _speculate_value(self, f, key):
        """One of `speculate (slots, lookahead, limit)`: a whole number >= 0 (the limit may be inf)."""
        v = f(self.sim.cx)
        if v != v or v < 0 or (v != math.floor(v) if not math.isinf(v) else key != "limit"):
            # at the `speculate` item, in serq_spec's words (serq.exact)
            raise RunError(speculate_not_whole(self.name, key, v), self.spec.get("speculate", {}).get("at"))
        return v

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

    def submit(self, s, w, mode, growing, drafts=0):

        sim = self.sim
        job = Job(s, self, w, mode)
        job.drafts = drafts
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
                it.left += a[1] + it.slots
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
            job.left -= self._verified(job, a) if job.drafts else a[1]
            if job.left <= EPS:
                done.append(job)
        for job in done:
            self._remove_resident(job)
            job.dead = True
            if job.mode == "prefill":
                self._first_token(job)
            self.complete(job)

    @staticmethod
    def _verified(job, a):
        """After a step of a run with drafts (§7.3, serq_spec.engine.verified): the work it did; the
        rejected drafts give their positions back. A decode accepts the turn's count at its output
        number, capped by the drafts scheduled; a prefill's drafts are placeholders, none accepted."""
        if job.mode == "decode":
            drafts = a[1] - 1
            counts = job.sess.accept or ()
            k = len(counts) - int(job.left)
            accepted = min(counts[k], drafts) if 0 <= k < len(counts) else 0
            done = min(1 + accepted, job.left)
        else:
            done = min(a[1], job.left)
            drafts, accepted = a[1] - done, 0
        if drafts > accepted and job.growpart is not None:
            job.growpart.pos -= drafts - accepted
        return done

    # ------------------------------------------------------------ lag 1 (docs/async.md)

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
        if job.mode != "decode":
            # a prefill's placeholder drafts ride on its last step (§7.3)
            want = min(job.left + job.drafts, cap)
        elif job.drafts and job.left > 0:
            want = min(1.0 + job.drafts, cap)   # a speculative step: 1 + k tokens (§7.3)
        else:
            want = min(1.0, job.left)
        if job.drafts and job.growpart is not None and it.limit < INF:
            want = min(want, it.limit - 1 - job.growpart.pos)   # room for the sampled token
        tokens = min(want, it.left - it.slots)
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
            # the lookahead units past the chunk, never past the limit (§7.3)
            need = min(part.pos + tokens + it.look, max(it.limit, part.pos + tokens)) - part.alloc
            if need > EPS:
                it.grew = True
                res = grow(part.pool, part, need, job)
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
                # processed, so it identifies none (docs/async.md §3 item 2); a speculative step's
                # drafts are not verified yet: only its first token counts (§7.3)
                part.pool.identify(part, part.pos if not job.drafts else
                                   pos0 + min(tokens, 1.0 if job.mode == "decode" else job.left))
        elif job.mode != "decode":
            att = tokens * tokens / 2.0
        it.assign.append([job, tokens, att, pos0])
        it.left -= tokens + it.slots
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
                    if it.left <= it.slots:
                        it.stopped = True
                        return
                    job = self._next(keys, it)
                    if job is None:
                        break
                    if self._serve(job, cap, only) == "self":
                        it.stopped = True  # a grower that preempts itself ends the running loop
                        return
                    if it.left <= it.slots:
                        it.stopped = True
                        return
            elif op == "admit":
                _, only, guard, each = st
                cap = self._each(each)
                while True:
                    if it.left <= it.slots or sim.npreempt != it.pre0 or it.no_admit:
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
                        if it.left <= it.slots:
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
        parts = [f"{a[0].sess.tid}:{int(a[0].sess.attrs[TURN_NO])}:{'d' if a[0].mode == 'decode' else 'p'}{a[1]:g}"
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
                cx.admit_left = (self.idx, it.left - it.slots)
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
            if self.est is not None:   # before the session runs on, as serq_spec's admit_one
                self.est.estimate_admission(h.queued_t, sim.now)
            s = h.sess
            it.fresh.add(s)
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

        sim = self.sim
        cx = sim.cx
        saved = (cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job)
        cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job = [], None, sim.machine_src, self, {}, None
        regs = list(self.registers)
        self.forming = True
        try:
            if resume_at is None:
                b = self.budget_fn(cx)
                self.locals = []
                for f in self.let_fns:
                    self.locals.append(f(cx))
                it.budget = b
                it.left = b
                if self.spec_fns is not None:
                    it.slots, it.look, it.limit = (self._speculate_value(f, k) for f, k in
                                                   zip(self.spec_fns, ("slots", "lookahead", "limit")))
                self._run_schedule(self.schedule)
            else:
                self._run_schedule(self.schedule[resume_at:])
            preempted = sim.npreempt - it.pre0
            if not it.assign and preempted == 0:
                self.registers = regs
                self.cur = None
                if self.pending:
                    make_due(self, sim.now)  # an empty schedule: the ends are applied at once
                return
            cost = self.cost_fn(cx)
            sim.claims.iteration(self.idx, cx, sim.now)   # iteration claims read what `execute` reads
        finally:
            cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job = saved
            self.forming = False
        tokens = sum(a[1] for a in it.assign)
        if cost != cost or cost < 0 or math.isinf(cost):
            raise located(RunError(iteration_cost_out_of_range(cost)), self.cost_at,
                          f"engine {self.name}: execute")
        if tokens > 0 and cost <= 0:
            raise located(RunError(f"an iteration with {tokens:g} tokens costs 0"), self.cost_at,
                          f"engine {self.name}: execute")
        it.cost = cost
        it.end = sim.now + cost
        if self.est is not None:   # the iteration is formed: its cycle opens
            self.est.estimate_iteration(sim.now, cost)
        if self.pending:
            make_due(self, it.end)  # scheduled before `iter_end`, so handled first
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
                "assign": [[a[0].sess.tid, a[0].mode, a[1]] for a in it.assign],
                "preempted": preempted, "admitted": it.admitted})


def _speculates(ir: dict, idx: int) -> bool:
    """Does the engine speculate (docs/language.md §7.3): drafting slots or lookahead that are not
    the constant 0, or a decode run with drafts that are not? Such an engine's iterations are formed
    one by one (no decode fast-forward: a step's tokens and positions depend on drafts). A prefill's
    placeholder drafts need no such care: a batch with a prefill is never fast-forwarded."""
    def zero(e) -> bool:   # a constant's wire text may be a ratio (`3/2`) or `inf`
        return e.get("k") == "num" and value_from_wire(e.get("v")) == 0
    sp = ir["stages"][idx].get("speculate")
    if sp is not None and not (zero(sp["slots"]) and zero(sp["lookahead"])):
        return True
    for block in ir["blocks"]:
        for st in block:
            if st.get("op") == "run" and st.get("mode") == "decode" and st.get("speculate") is not None \
                    and not zero(st["speculate"]["drafts"]):
                return True
    return False


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
    if any(p.get("spill") is not None for p in sim.ir["pools"]):
        return False   # a spilled chunk's copy is a job on its link, an event inside the forwarded span
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

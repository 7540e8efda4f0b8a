"""The fast simulator's event loop: the operational semantics of docs/language.md §11 over the
IR, in float time.

Design principle (docs/language.md §11.2): one event heap keyed by `(time, seq)` with a global
insertion counter; every handled event is followed by *settle* (`sessions.py`: ready sessions
run in FIFO order, non-engine pools admit their heads, repeat), and an engine starts an
iteration only when no other event is pending at `now`, so one scheduler step sees every
same-instant arrival and finish. `Sim` holds the state, pops and handles the events (arrivals,
stage finishes, iteration ends with the decode fast-forward, the warm-up, the async ends, lease
ends), samples the time averages and emits the state line after each step.

serq_spec counterpart: `serq_spec/step.py` (`step : Config → Config`, one event per step, and
the run loop).
"""

from __future__ import annotations

import heapq
import math
import os
import time as _time
from typing import Any

from serq.exact import first_constant_beyond_doubles
from serq.sessionsfile import stream_name, unused_machine_draws
from serq_fast import engine as E
from serq_fast import fastforward as FF
from serq_fast import pools as P
from serq_fast.claims import Claims
from serq_fast.content import Prefixes
from serq_fast.defs import EV_ARRIVE, EV_ENDS, EV_FINISH, EV_ITER_END, EV_LEASE_END, EV_WARMUP, FAULTS, TIE_EPS, wire
from serq_fast.expr import Ctx, RunError, compile_expr, located, num
from serq_fast.invariants import check_or_raise
from serq_fast.lag import apply_ends
from serq_fast.sessions import SessionInterpreter
from serq_fast.sources import ListSource, LiveSource, no_draw, plant_faults
from serq_fast.specialise import specialise
from serq_fast.stages import Sharing
from serq_fast.stats import Gauge, Sample, TimeAverage
from serq_fast.trace import state_line


class Sim(SessionInterpreter):
    def __init__(self, ir: dict, *, seed: int = 1, horizon: float = math.inf, warmup: float = 0.0,
                 arrivals: int | None = None, replay: dict | None = None, states: Any = None,
                 records: list | None = None, progress: Any = None, max_steps: int | None = None,
                 lean_states: bool = False, check: bool | None = None) -> None:
        beyond = first_constant_beyond_doubles(ir)   # refused where loaded, as serq_spec does
        if beyond is not None:
            raise RunError(*beyond)
        self.ir = ir
        self.seed = int(seed)
        self.horizon = float(horizon)
        self.warmup = float(warmup)
        self.arrivals_limit = arrivals
        self.replay = replay
        self.states = states  # callable(line dict) or None: lockstep / state output
        # True: lean state lines (trace.LEAN) for a consumer that reads only the schedule (the
        # oracle model), never for lockstep: the full lines cost O(KV blocks + sessions) each
        self.lean_states = lean_states
        self.records = records  # list to append per-turn rows to, or None
        self.progress = progress
        self.series = None  # an optional sampler of the state over time (serq.timeseries)
        self.max_steps = max_steps
        # the invariant checks after every handled event (invariants.py): a debug flag, off by default
        self.check = bool(os.environ.get("SERQ_FAST_CHECK")) if check is None else bool(check)
        self.now = 0.0
        self.seq = 0
        self.heap: list = []
        self.ready: list = []
        self.ready_head = 0
        self.events = 0
        self.narrivals = 0
        self.respawn_t, self.respawn_n = -1.0, 0  # closed(n) replacements in the current instant (§11.9)
        self.turns = 0
        self.ended = 0
        self.next_serial = 0
        self.next_adm = 0
        self.next_rel = 0
        self.next_dead = -1
        self.next_copy = 0   # spill copy jobs started (names them "spill.n", docs/language.md §11.8.1)
        self.measuring = self.warmup <= 0
        self.cx = Ctx(self)
        self.rec = None  # per-step records (lockstep)
        self.sessions: dict = {}  # live sessions by serial (all sessions when states are kept)
        self.branches: dict = {}  # live branches by name "s.k", in the order forked (docs/language.md §11.13)
        self.keep_all = states is not None
        self.statements = 0
        nattrs = len(ir["attrs"])
        self.nattrs = nattrs
        self.observe_names = list(ir["observes"])
        self.obs_stats = [Sample() for _ in self.observe_names]
        self.client = {"ttft": Sample(), "tpot": Sample(), "response": Sample()}
        self.live = 0
        self.ta_live = TimeAverage()
        # draw sources
        if replay is None:
            self.arrival_src = LiveSource("arrival", self.seed)
            self.trace_src = LiveSource("trace", self.seed)
            self.machine_src = LiveSource("machine", self.seed)
        else:
            from serq.sessionsfile import SessionsFileBad, check_sessions

            try:
                check_sessions(replay)  # the shape both engines assume (`serq run --replay` checked it too)
            except SessionsFileBad as bad:
                raise RunError(str(bad)) from None
            self.arrival_src = no_draw
            self.machine_src = ListSource(replay.get("machine", []), stream_name(None))
            self.replay_arrivals = [float(wire(v)) for v in replay.get("arrivals", [])]
            self.replay_picks = list(replay.get("trace_picks", []))
            self.replay_sessions = {s["serial"]: s for s in replay.get("sessions", [])}
            self.replay_k = len(replay.get("sessions", []))
        self.npreempt = 0
        self.trace_iter = bool(os.environ.get("SERQ_TRACE_ITER"))  # docs/language.md §14 debug line
        self.fault_pending = "ignore_pending" in FAULTS()
        plant_faults(FAULTS())  # the draws' fast path (sources.py)
        # static structure
        self.prefixes = Prefixes(ir.get("prefixes") or [])  # docs/content.md
        self.pools = [P.Pool(i, p, self) for i, p in enumerate(ir["pools"])]
        self.has_content = any(p.content for p in self.pools)  # skips the content paths otherwise
        self.sharing = Sharing(ir, self)   # the stages flows cross (docs/language.md §11.14)
        self.stages = [E.make_stage(i, st, self) for i, st in enumerate(ir["stages"])]
        self.sharing.link(self.stages)
        for pool in self.pools:
            pool.link(self)
        for st in self.stages:
            st.link(self)
        self.engines = [st for st in self.stages if st.kind == "step"]
        self.ps_stages = [st for st in self.stages if st.kind == "ps" and not st.shared]  # rescheduled at settle
        self.blocks = [None] * len(ir["blocks"])
        for i, blk in enumerate(ir["blocks"]):
            self.blocks[i] = [self._compile_stmt(x) for x in blk]
        self.block_fns = None  # id(compiled block) -> its generated function (speed trick 5)
        wl = ir["workload"]
        self.wl_init = wl.get("init")
        self.wl_turn = wl.get("turn")
        self.wl_session = wl["session"]
        self.wl_server = wl.get("server")
        self.arrival = wl["arrival"]
        self.trace = wl.get("trace")
        if self.trace is not None:
            self.trace_rows = [[self.trace_row(i, j, row) for j, row in enumerate(sess)]
                               for i, sess in enumerate(self.trace["sessions"])]
        kind = self.arrival["kind"]
        if self.arrival_limit_applies() is False and arrivals is not None:
            raise RunError(f"--arrivals applies to poisson or renewal arrivals, not `{kind}`")
        if kind == "renewal":
            self.gap_fn = compile_expr(self.arrival["gap"], self, self.arrival.get("at"), "`arrive renewal(…)`: the gap")
        # gauges (§11.9), sampled at the end of every settle; the 20 CI windows are exact when the
        # end is known in advance (docs/report.md)
        self.gauge_names = [g["name"] for g in ir.get("gauges", [])]
        self.gauge_fns = [compile_expr(g["expr"], self, g.get("at"), f"gauge {g['name']}") for g in ir.get("gauges", [])]
        self.gauge_end = self.horizon if arrivals is None and math.isfinite(self.horizon) else None
        self.gauges = [Gauge(0.0, self.gauge_end) for _ in self.gauge_fns]
        self.gauge_pairs = list(zip(self.gauges, self.gauge_fns))
        self.claims = Claims(ir, self)   # docs/language.md §11.9 "Claims"
        if kind == "poisson":
            try:
                self.arrival_mean = 1.0 / num(self.arrival["rate"])  # the mean gap, converted once
            except RunError as exc:  # a rate beyond the floats' range (`--set lambda=1e400`): where it is
                raise located(exc, self.arrival.get("at"), "`arrive poisson(…)`: the rate") from None
        if not os.environ.get("SERQ_FAST_NO_SPECIALISE"):
            fns = specialise(self, FAULTS())
            self.block_fns = {id(blk): fn for blk, fn in zip(self.blocks, fns) if fn is not None}

    def trace_row(self, i: int, j: int, row: list) -> list:
        """A trace row's values as floats; one beyond their range (a CSV value of 1e400) is an
        error at the `trace` declaration, naming the row."""
        try:
            # a 5th field: speculative decoding's acceptance counts, whole numbers (§7.3)
            return [num(v) for v in row[:4]] + ([tuple(int(x) for x in row[4])] if len(row) > 4 else [])
        except RunError as exc:
            raise located(exc, self.trace.get("at"), f"the trace's session {i + 1}, row {j + 1}") from None

    # ---------------------------------------------------------------- compile

    def arrival_limit_applies(self):
        return self.arrival["kind"] in ("poisson", "renewal")

    # ---------------------------------------------------------------- events

    def push(self, t: float, kind: int, a: Any = None, b: Any = None) -> int:
        s = self.seq
        self.seq += 1
        heapq.heappush(self.heap, (t, s, kind, a, b))
        return s

    def _valid(self, ev: tuple) -> bool:
        kind = ev[2]
        if kind == EV_FINISH:
            return ev[3].event_valid(ev)
        if kind == EV_LEASE_END:
            return P.lease_valid(ev)
        return True

    def _top(self):
        h = self.heap
        while h and not self._valid(h[0]):
            heapq.heappop(h)
        return h[0] if h else None

    def pending_now(self) -> bool:
        top = self._top()
        return top is not None and top[0] <= self.now + TIE_EPS * max(1.0, abs(self.now))

    def _pop(self) -> tuple:
        """The next event: the least (time, seq), where times within TIE_EPS (relative) count as
        one instant. Float sums can split an exact tie (1/2 + 3·(1/2) vs 2); treating near-equal
        times as equal restores the exact order, by sequence number (docs/fast.md "Float time")."""
        h = self.heap
        ev = heapq.heappop(h)
        if h and h[0][0] <= ev[0] + TIE_EPS * max(1.0, abs(ev[0])):
            lim = ev[0] + TIE_EPS * max(1.0, abs(ev[0]))
            group = [ev]
            while h and h[0][0] <= lim:
                group.append(heapq.heappop(h))
            group = [e for e in group if self._valid(e)]
            best = min(group, key=lambda e: e[1])
            for e in group:
                if e is not best:
                    heapq.heappush(h, e)
            ev = best
        return ev

    # ---------------------------------------------------------------- run

    def run(self) -> "Sim":
        kind = self.arrival["kind"]
        self.rec = self._new_rec() if self.states else None
        if self.warmup > 0:
            self.push(self.warmup, EV_WARMUP)
        if self.replay is None:
            if kind == "poisson":
                self.push(0.0, EV_ARRIVE, self.next_serial)
            elif kind == "renewal":
                self.push(self._renewal_gap(), EV_ARRIVE, self.next_serial)
            elif kind in ("closed", "batch"):
                for _ in range(int(self.arrival["n"])):
                    self.spawn()
        else:
            if kind in ("poisson", "renewal"):
                if self.replay_arrivals:
                    self.push(self.replay_arrivals[0], EV_ARRIVE, self.next_serial)
            elif kind in ("closed", "batch"):
                for _ in range(min(int(self.arrival["n"]), self.replay_k)):
                    self.spawn()
        self.settle()
        self._emit_state(0, None)
        step = 0
        check = self.check
        if check:
            check_or_raise(self, 0, 0.0)
            last_now = self.now
        drain = self.arrivals_limit is not None
        prog = self.progress
        next_prog = _time.monotonic() + 0.5 if prog else None
        emit = self.states is not None
        heap, valid, heappop, heappush = self.heap, self._valid, heapq.heappop, heapq.heappush
        while self.max_steps is None or step < self.max_steps:
            while heap and not valid(heap[0]):  # self._top(), inlined: it runs once per event
                heappop(heap)
            if not heap:
                break
            top = heap[0]
            if top[0] > self.horizon:
                if drain:
                    raise RunError(f"--arrivals {self.arrivals_limit}: not drained by the horizon {self.horizon:g}")
                break
            # self._pop(), its common case inlined: no other event within TIE_EPS of this one
            ev = heappop(heap)
            if heap and heap[0][0] <= ev[0] + TIE_EPS * (ev[0] if ev[0] > 1.0 else -ev[0] if ev[0] < -1.0 else 1.0):
                heappush(heap, ev)
                ev = self._pop()
            if ev[0] > self.now:
                self.now = ev[0]
            self.events += 1
            step += 1
            if self.rec is not None:
                self.rec = self._new_rec()
            if ev[2] == EV_ITER_END and ev[3].iter.template and not self.ready and not self.gauges \
                    and not self.claims.iterations:
                # labelled speed trick: decode fast-forward (fastforward.bulk, docs/fast.md)
                nxt = self._top()
                t_next = nxt[0] if nxt is not None else math.inf
                left = (self.max_steps - step + 1) if self.max_steps is not None else 1 << 62
                j = FF.bulk(ev[3], ev[0], t_next, self.horizon, left)
                if j:
                    step += j - 1
                    eng = ev[3]
                    if eng._ff_resumed:
                        # the last formation ran its admissions (advance.ff_resume): settle on
                        eng._ff_resumed = False
                        self.settle(started=True)
                    else:
                        it = eng.iter
                        if self.rec is not None:
                            self.rec["iterations"].append({
                                "stage": eng.name, "start": it.start, "end": it.end,
                                "assign": [[a[0].sess.tid, a[0].mode, a[1]] for a in it.assign],
                                "preempted": 0, "admitted": 0})
                        self.sample()
                    self._emit_state(step, (self.now, eng._ff_ev_seq, EV_ITER_END, eng, None))
                    if check:
                        check_or_raise(self, step, last_now)
                        last_now = self.now
                    continue
            self._handle(ev)
            self.settle()
            if emit:
                self._emit_state(step, ev)
            if check:
                check_or_raise(self, step, last_now)
                last_now = self.now
            if drain and self.narrivals >= self.arrivals_limit and self.live == 0:
                break
            if prog and (self.events & 1023) == 0 and _time.monotonic() > next_prog:
                prog(self.now, self.horizon)
                next_prog = _time.monotonic() + 0.5
        if self.replay is not None and self._top() is None:
            # the run drained, not cut by the horizon or max_steps: every machine draw was used
            unused = unused_machine_draws(self.machine_src.i, len(self.machine_src.values))
            if unused:
                raise RunError(unused)
        if drain:
            if self.narrivals < self.arrivals_limit or self.live > 0:
                raise RunError(f"--arrivals {self.arrivals_limit}: not drained by the horizon {self.horizon:g}")
            if self.now <= self.warmup:
                raise RunError(f"--arrivals {self.arrivals_limit}: drained at {self.now:g}, at or before the warm-up {self.warmup:g}")
            self.end = self.now
        else:
            self.end = self.horizon if math.isfinite(self.horizon) else self.now
            if self.end < self.now:
                self.end = self.now
        self.claims.end(self)   # on the final state, before `now` moves to the horizon
        if not self.measuring:
            # the run ended before the warm-up: nothing was measured
            self._reset_averages(self.end)
        self.now = self.end
        return self

    def _handle(self, ev: tuple) -> None:
        kind = ev[2]
        if kind == EV_ARRIVE:
            self._arrive()
        elif kind == EV_FINISH:
            ev[3].finish_event(ev)
        elif kind == EV_ITER_END:
            ev[3].iter_end()
        elif kind == EV_WARMUP:
            self.measuring = True
            self._reset_averages(self.now)
        elif kind == EV_ENDS:
            apply_ends(ev[3])
        elif kind == EV_LEASE_END:
            P.end_lease(self, ev[4].hold.sess, ev[3])

    def _reset_averages(self, t: float) -> None:
        self.ta_live.reset(t)
        self.ta_live.v = self.live
        for p in self.pools:
            p.reset_averages(t)
        for st in self.stages:
            st.reset_averages(t)
        if self.gauges:
            for g, v in zip(self.gauges, self.gauge_values()):
                g.reset(t, v, self.gauge_end)

    def _renewal_gap(self) -> float:
        cx = self.cx
        saved = (cx.attrs, cx.sess, cx.draw)
        cx.attrs, cx.sess, cx.draw = [], None, self.arrival_src
        try:
            g = self.gap_fn(cx)
        finally:
            cx.attrs, cx.sess, cx.draw = saved
        if not (g > 0 and math.isfinite(g)):
            raise located(RunError(f"a renewal gap must be positive and finite, got {g}"), self.arrival.get("at"),
                          "`arrive renewal(…)`")
        return g

    def _arrive(self) -> None:
        kind = self.arrival["kind"]
        n = self.narrivals + 1  # arrivals after this one
        more = self.arrivals_limit is None or n < self.arrivals_limit
        if self.replay is not None:
            if n < len(self.replay_arrivals):
                self.push(self.replay_arrivals[n], EV_ARRIVE, self.next_serial + 1)
        elif more:
            if kind == "poisson":
                gap = self.arrival_src("exp", [self.arrival_mean], None)
            else:
                gap = self._renewal_gap()
            self.push(self.now + gap, EV_ARRIVE, self.next_serial + 1)
        self.spawn()

    # ---------------------------------------------------------------- sessions

    def sample(self) -> None:
        if self.series is not None:
            self.series.observe(self)
        # time averages are reset at the warm-up, so nothing before it needs sampling
        if not self.measuring:
            return
        now = self.now
        ta = self.ta_live
        if ta.v != self.live:
            ta.set(now, self.live)
        for p in self.pools:
            p.sample(now)
        for st in self.stages:
            st.sample(now)
        if self.gauges:
            # gauge_values inlined (it runs after every event): each value set as it is read
            cx = self.cx
            saved = (cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job)
            cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job = [], None, no_draw, None, {}, None
            try:
                for g, f in self.gauge_pairs:
                    v = f(cx)
                    if v != g.v:
                        g.set(now, v)
            finally:
                cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job = saved

    def gauge_values(self) -> list:
        """Every gauge's value now (Gauge moment, §5: no session, no engine, no draw)."""
        cx = self.cx
        saved = (cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job)
        cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job = [], None, no_draw, None, {}, None
        try:
            return [f(cx) for f in self.gauge_fns]
        finally:
            cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job = saved

    # ---------------------------------------------------------------- interpreter

    # ---------------------------------------------------------------- lockstep state

    def _new_rec(self) -> dict:
        return {"admitted": [], "preempted": [], "released": [], "evicted": [], "iterations": [],
                "observations": [], "finished": []}

    def _emit_state(self, step: int, ev) -> None:
        if self.states is None:
            return

        self.states(state_line(self, step, ev))


"""The fast simulator: the operational semantics of docs/language.md §11 over the IR, float time.

Design principle (docs/language.md §11.2): one event heap keyed by `(time, seq)` with a global
insertion counter; every handled event is followed by *settle* (ready sessions run in FIFO
order, non-engine pools admit their heads, repeat), and an engine starts an iteration only when
no other event is pending at `now`, so one scheduler step sees every same-instant arrival and
finish. Sessions are interpreted from the IR's statement blocks; pools, holds, the prefix cache,
growth and preemption follow §11.4, §11.7 and §11.8; the step engine follows §11.6.

Module map: `expr` (expressions → closures), `sources` (draw streams), `pools` (pools, holds,
cache), `stages` (fifo/ps/delay/step), this file (sessions, events, settle), `report`.
"""

from __future__ import annotations

import heapq
import math
import time as _time
from typing import Any

from serq_fast.expr import Ctx, RunError, at_text, compile_expr, compile_ref, located, num
from serq_fast.sources import ListSource, LiveSource, no_draw
from serq_fast.claims import Claims
from serq_fast.stats import Gauge, Sample, TimeAverage
from serq_fast import pools as P
from serq_fast import stages as S

# Built-in attribute slots (docs/ir.md "Slots").
SERIAL, TURN_NO, CACHED, COMPUTED, NEW, OUT, THINK, MORE, FORCED = range(9)

# Session status. ENDING: the end of a lagged engine request is pending or due on `where`
# (docs/async.md §3).
READY, QUEUED, STAGE, GROWING, ENDED, ENDING = range(6)

# Event kinds.
EV_ARRIVE, EV_FINISH, EV_ITER_END, EV_WARMUP, EV_ENDS, EV_LEASE_END = range(6)
EVENT_NAMES = ("arrive", "finish", "iter_end", "warmup_end", "ends", "lease_end")

TIE_EPS = 1e-10  # relative: event times closer than this are one instant (float time)
MAX_STATEMENTS = 1_000_000  # §11.9 guard: statements without blocking
MAX_READY_PER_INSTANT = 1000  # §11.9 guard


class Session:
    __slots__ = ("serial", "attrs", "frames", "status", "where", "holds", "pending", "adm_seq",
                 "prepos", "stuck", "trace", "tcursor", "src", "job", "ready_t", "ready_n",
                 "growth", "turn_src", "turn_t", "turn_warm", "turn_called")

    def __init__(self, serial: int, nattrs: int) -> None:
        self.serial = serial
        self.attrs = [0.0] * nattrs
        self.attrs[SERIAL] = float(serial)
        self.frames: list = []  # [block, pc, kind, hold]
        self.status = READY
        self.where = None  # the Pool / Stage named by the status
        self.holds: list = []  # active holds, outermost first
        self.pending = None  # the Hold waiting in a queue
        self.adm_seq = -1
        self.prepos: dict = {}  # pool index -> position at its last preemption
        self.stuck = False
        self.trace = None
        self.tcursor = 0
        self.src = None  # the session stream
        self.job = None
        self.ready_t = -1.0
        self.ready_n = 0
        self.growth = None  # (part, need, job or None) while stalled
        # the current turn (docs/report.md "client"): when `turn;` ran, whether that was after the
        # warm-up (the turn counts in `turns`, and so do its client metrics), whether its server
        # made an engine call (else the turn's own response is recorded when the server ends)
        self.turn_t = 0.0
        self.turn_warm = False
        self.turn_called = False

    def status_text(self) -> str:
        if self.status == READY:
            return "ready"
        if self.status == QUEUED:
            return "queued:" + self.where.name
        if self.status == STAGE:
            return "stage:" + self.where.name
        if self.status == GROWING:
            return "growing:" + self.where.name
        if self.status == ENDING:
            return "ending:" + self.where.name
        return "ended"


class Request:
    """The client-metric mark of a lowered engine call (docs/ir.md `request`), or of a turn whose
    server made no engine call (prompt, output, hit and first stay None)."""

    __slots__ = ("serial", "turn", "prompt", "output", "submit", "first", "done", "hit")

    def __init__(self, serial, turn, prompt, output, submit):
        self.serial, self.turn, self.prompt, self.output, self.submit = serial, turn, prompt, output, submit
        self.first = None
        self.done = None
        self.hit = None


class Sim:
    def __init__(self, ir: dict, *, seed: int = 1, horizon: float = math.inf, warmup: float = 0.0,
                 arrivals: int | None = None, replay: dict | None = None, states: Any = None,
                 records: list | None = None, progress: Any = None, max_steps: int | None = None,
                 lean_states: bool = False) -> None:
        self.ir = ir
        self.seed = int(seed)
        self.horizon = float(horizon)
        self.warmup = float(warmup)
        self.arrivals_limit = arrivals
        self.replay = replay
        self.states = states  # callable(line dict) or None: lockstep / state output
        # True: lean state lines (state.LEAN) for a consumer that reads only the schedule (the
        # oracle model), never for lockstep: the full lines cost O(KV blocks + sessions) each
        self.lean_states = lean_states
        self.records = records  # list to append per-turn rows to, or None
        self.progress = progress
        self.series = None  # an optional sampler of the state over time (serq.timeseries)
        self.max_steps = max_steps
        self.now = 0.0
        self.seq = 0
        self.heap: list = []
        self.ready: list = []
        self.ready_head = 0
        self.events = 0
        self.narrivals = 0
        self.turns = 0
        self.ended = 0
        self.next_serial = 0
        self.next_adm = 0
        self.next_rel = 0
        self.next_dead = -1
        self.measuring = self.warmup <= 0
        self.cx = Ctx(self)
        self.rec = None  # per-step records (lockstep)
        self.sessions: dict = {}  # live sessions by serial (all sessions when states are kept)
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
            self.machine_src = ListSource(replay.get("machine", []), "the machine stream")
            self.replay_arrivals = [float(P.wire(v)) for v in replay.get("arrivals", [])]
            self.replay_picks = list(replay.get("trace_picks", []))
            self.replay_sessions = {s["serial"]: s for s in replay.get("sessions", [])}
            self.replay_k = len(replay.get("sessions", []))
        self.npreempt = 0
        import os

        self.trace_iter = bool(os.environ.get("SERQ_TRACE_ITER"))  # docs/language.md §14 debug line
        self.fault_pending = "ignore_pending" in P.FAULTS()
        # static structure
        from serq_fast.content import Prefixes

        self.prefixes = Prefixes(ir.get("prefixes") or [])  # docs/content.md
        self.pools = [P.Pool(i, p, self) for i, p in enumerate(ir["pools"])]
        self.has_content = any(p.content for p in self.pools)  # skips the content paths otherwise
        self.stages = [S.make_stage(i, st, self) for i, st in enumerate(ir["stages"])]
        for pool in self.pools:
            pool.link(self)
        for st in self.stages:
            st.link(self)
        self.engines = [st for st in self.stages if st.kind == "step"]
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
        self.claims = Claims(ir, self)   # docs/language.md §11.9 "Claims"
        if kind == "poisson":
            try:
                self.arrival_mean = 1.0 / num(self.arrival["rate"])  # the mean gap, converted once
            except RunError as exc:  # a rate beyond the floats' range (`--set lambda=1e400`): where it is
                raise located(exc, self.arrival.get("at"), "`arrive poisson(…)`: the rate") from None
        if not os.environ.get("SERQ_FAST_NO_SPECIALISE"):
            from serq_fast.specialise import specialise

            fns = specialise(self, P.FAULTS())
            self.block_fns = {id(blk): fn for blk, fn in zip(self.blocks, fns) if fn is not None}

    def trace_row(self, i: int, j: int, row: list) -> list:
        """A trace row's values as floats; one beyond their range (a CSV value of 1e400) is an
        error at the `trace` declaration, naming the row."""
        try:
            return [num(v) for v in row]
        except RunError as exc:
            raise located(exc, self.trace.get("at"), f"the trace's session {i + 1}, row {j + 1}") from None

    # ---------------------------------------------------------------- compile

    def arrival_limit_applies(self):
        return self.arrival["kind"] in ("poisson", "renewal")

    def _compile_stmt(self, st: dict) -> tuple:
        try:
            return self._compile_stmt_at(st)
        except RunError as exc:  # a constant beyond the floats' range (`--set x=1e400`): where it is
            raise located(exc, st.get("at")) from None

    def _compile_stmt_at(self, st: dict) -> tuple:
        op = st["op"]
        at = st.get("at")
        c = lambda e: compile_expr(e, self) if e is not None else None  # noqa: E731
        if op == "set":
            return ("set", st["slot"], c(st["expr"]), at)
        if op == "observe":
            return ("observe", st["name"], c(st["expr"]), at)
        if op in ("turn", "end"):
            return (op, at)
        if op == "branch":
            return ("branch", c(st["cond"]), st["then"], st.get("else"), at)
        if op == "while":
            return ("while", c(st["cond"]), st["body"], at)
        if op == "loop":
            return ("loop", st["body"], at)
        if op == "choose":
            return ("choose", st["slot"], c(st["count"]), [c(k) for k in st["keys"]], at)
        if op == "hold":
            return ("hold", P.HoldStmt(st, self), at)
        if op == "run":
            ref = st["stage"]
            if st.get("growing") is not None and any(
                    self.stages[i].kind != "step" for i in range(ref["base"], ref["base"] + ref.get("count", 1))):
                # a growing run advances a position by the tokens an engine serves (§11.6): a
                # non-step stage has none (docs/spec.md, as serq_spec.program)
                raise RunError(f"`growing` needs an engine (a step stage), not stage "
                               f"{self.stages[ref['base']].name} at {at_text(at)}")
            return ("run", compile_ref(st["stage"], self, "stage"), st["mode"], c(st["work"]),
                    st.get("growing"), at)
        if op in ("drop", "load"):
            ref = st["pool"]
            for pool in self.pools[ref["base"]:ref["base"] + ref.get("count", 1)]:
                if pool.content:
                    raise RunError(f"`{op}` on the `share content` pool {pool.name} (docs/content.md §1) at {at_text(at)}")
        if op in ("grow", "load"):
            return (op, compile_ref(st["pool"], self, "pool"), c(st["units"]), at)
        if op in ("drop", "release"):
            return (op, compile_ref(st["pool"], self, "pool"), at)
        raise RunError(f"unknown statement {op!r}")

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
        drain = self.arrivals_limit is not None
        prog = self.progress
        next_prog = _time.monotonic() + 0.5 if prog else None
        while self.max_steps is None or step < self.max_steps:
            top = self._top()
            if top is None:
                break
            if top[0] > self.horizon:
                if drain:
                    raise RunError(f"--arrivals {self.arrivals_limit}: not drained by the horizon {self.horizon:g}")
                break
            ev = self._pop()
            if ev[0] > self.now:
                self.now = ev[0]
            self.events += 1
            step += 1
            if self.rec is not None:
                self.rec = self._new_rec()
            if ev[2] == EV_ITER_END and ev[3].iter.template and not self.ready and not self.gauges \
                    and not self.claims.iterations:
                # labelled speed trick: decode fast-forward (stages.bulk, docs/fast.md)
                nxt = self._top()
                t_next = nxt[0] if nxt is not None else math.inf
                left = (self.max_steps - step + 1) if self.max_steps is not None else 1 << 62
                j = ev[3].bulk(ev[0], t_next, self.horizon, left)
                if j:
                    step += j - 1
                    eng = ev[3]
                    if eng._ff_resumed:
                        # the last formation ran its admissions (stages._ff_resume): settle on
                        eng._ff_resumed = False
                        self.settle(started=True)
                    else:
                        it = eng.iter
                        if self.rec is not None:
                            self.rec["iterations"].append({
                                "stage": eng.name, "start": it.start, "end": it.end,
                                "assign": [[a[0].sess.serial, a[0].mode, a[1]] for a in it.assign],
                                "preempted": 0, "admitted": 0})
                        self.sample()
                    self._emit_state(step, (self.now, eng._ff_ev_seq, EV_ITER_END, eng, None))
                    continue
            self._handle(ev)
            self.settle()
            self._emit_state(step, ev)
            if drain and self.narrivals >= self.arrivals_limit and self.live == 0:
                break
            if prog and (self.events & 1023) == 0 and _time.monotonic() > next_prog:
                prog(self.now, self.horizon)
                next_prog = _time.monotonic() + 0.5
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
            ev[3].apply_ends()
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

    def spawn(self) -> Session:
        serial = self.next_serial
        self.next_serial += 1
        self.narrivals += 1
        s = Session(serial, self.nattrs)
        self.sessions[serial] = s
        self.live += 1
        if self.replay is None:
            s.src = LiveSource("session", self.seed, serial)
        else:
            rs = self.replay_sessions.get(serial)
            if rs is None:
                raise RunError(f"replay: the sessions file has no session {serial}")
            s.src = ListSource(rs.get("session", []), f"session {serial} (session stream)")
        if self.trace is not None:
            rows = self.trace_rows
            if self.trace["ordered"]:
                pick = serial % len(rows)
            elif self.replay is not None:
                pick = int(self.replay_picks[serial])
            else:
                pick = min(int(self.trace_src.rng.random() * len(rows)), len(rows) - 1)
            s.trace = rows[pick]
        if self.wl_init is not None:
            self._run_wblock(s, self.wl_init, 0)
        s.frames.append([self.blocks[self.wl_session], 0, "plain", None])
        self.make_ready(s)
        return s

    def _turn_source(self, s: Session, turn_no: int):
        if self.replay is None:
            return LiveSource("turn", self.seed, s.serial, turn_no)
        rs = self.replay_sessions[s.serial]
        if turn_no == 0:
            vals = rs.get("init", [])
        else:
            turns = rs.get("turns", [])
            vals = turns[turn_no - 1] if turn_no - 1 < len(turns) else []
        return ListSource(vals, f"session {s.serial} (turn stream {turn_no})")

    def _run_wblock(self, s: Session, block: int, turn_no: int) -> None:
        """An `init` or `turn` block: `set` and `observe` only, drawn from the turn stream."""
        src = self._turn_source(s, turn_no)
        cx = self.cx
        saved = cx.draw
        cx.attrs, cx.sess, cx.draw = s.attrs, s, src
        try:
            for st in self.blocks[block]:
                if st[0] == "set":
                    s.attrs[st[1]] = st[2](cx)
                elif st[0] == "observe":
                    self.observe(st[1], st[2](cx), s)
                else:
                    raise RunError(f"`{st[0]}` in a workload init/turn block")
        finally:
            cx.draw = saved
        if self.replay is not None and src.leftover():
            raise RunError(f"replay: {src.what} leaves {src.leftover()} unused draw(s)")

    def make_ready(self, s: Session) -> None:
        if s.ready_t == self.now:
            s.ready_n += 1
            if s.ready_n > MAX_READY_PER_INSTANT:
                raise RunError(f"session {s.serial} became ready {MAX_READY_PER_INSTANT} times at t = {self.now:g}")
        else:
            s.ready_t = self.now
            s.ready_n = 1
        s.status = READY
        s.where = None
        self.ready.append(s)

    def observe(self, name: int, value: float, s: Session | None) -> None:
        if not self.measuring:
            return
        self.obs_stats[name].add(value)
        if self.rec is not None:
            self.rec["observations"].append([self.observe_names[name], s.serial if s else None,
                                             int(s.attrs[TURN_NO]) if s else 0, self.now, value])

    def client_record(self, name: str, value: float, s: Session) -> None:
        """A client metric of the session's current turn: kept iff the turn counts in `turns`
        (its `turn;` ran after the warm-up), whenever the value becomes known."""
        if not s.turn_warm:
            return
        self.client[name].add(value)
        if self.rec is not None:
            self.rec["observations"].append([name, s.serial, int(s.attrs[TURN_NO]), self.now, value])

    def settle(self, started: bool = False) -> None:
        """Run ready sessions and pool admissions until nothing is ready, then start idle engines
        (docs/language.md §11.2). `started`: an engine has just started an iteration in this settle's
        place (a fast-forward that resumed a formation), so it goes on after the engine step."""
        while True:
            if not started:
                ready = self.ready
                while self.ready_head < len(ready):
                    s = ready[self.ready_head]
                    self.ready_head += 1
                    if s.status == READY:
                        self.exec_session(s)
                self.ready = []
                self.ready_head = 0
                for pool in self.pools:
                    pool.retry_growers()
                    if pool.admitted_by is None:
                        pool.admit_heads()
                if self.ready:
                    continue
                if self.fault_pending or not self.pending_now():
                    for eng in self.engines:
                        if eng.iter is None and eng.has_work():
                            eng.start_iteration()
            started = False
            if not self.ready:
                break
        for st in self.stages:
            if st.kind == "ps" and st.changed:
                st.reschedule()
        self.sample()

    def sample(self) -> None:
        if self.series is not None:
            self.series.observe(self)
        # time averages are reset at the warm-up, so nothing before it needs sampling
        if not self.measuring:
            return
        now = self.now
        self.ta_live.set(now, self.live)
        for p in self.pools:
            p.sample(now)
        for st in self.stages:
            st.sample(now)
        if self.gauges:
            for g, v in zip(self.gauges, self.gauge_values()):
                g.set(now, v)

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

    def exec_session(self, s: Session) -> None:
        try:
            self._exec_session(s)
        except RunError as exc:  # an error of an expression (x/0, pow(10, 1e10)): its statement
            raise located(exc, self.cx.at) from None

    def _exec_session(self, s: Session) -> None:
        cx = self.cx
        cx.attrs, cx.sess, cx.draw = s.attrs, s, s.src
        cx.eng = None
        cx.var = {}
        fns = self.block_fns
        if fns is None:
            self._interpret(s, MAX_STATEMENTS)
            return
        # labelled speed trick 5 (serq_fast.specialise): a covered block runs as one generated
        # function from its program counter to the statement after which the session leaves
        # the block; the rest (uncovered blocks, the last statements of the budget) is interpreted
        attrs = s.attrs
        frames = s.frames
        budget = MAX_STATEMENTS
        while s.status == READY:
            fr = frames[-1]
            blk = fr[0]
            if fr[1] >= len(blk):
                budget -= 1
                if budget < 0:
                    raise RunError(f"session {s.serial} executed {MAX_STATEMENTS} statements without blocking")
                if self._block_end(s, fr):
                    return
                continue
            fn = fns.get(id(blk))
            if fn is None or budget < len(blk):
                self._interpret(s, budget)
                return
            r = fn(self, s, fr, cx, attrs, frames)
            budget -= r >> 1
            if r & 1:
                return

    def _block_end(self, s: Session, fr: list) -> bool:
        """The top frame's block has ended: pop it (a hold's scope ends, a server turn is done,
        the session ends with its last frame). True: the session's execution stops here."""
        frames = s.frames
        if fr[2] == "hold":
            h = fr[3]
            eng = h.pools[0].lag_eng
            if eng is not None:
                # the end of a lagged engine request waits for the engine's next
                # schedule (docs/async.md §3): the frame stays until `ends` applies it
                eng.lag_end(s, h)
                return True
            frames.pop()
            P.scope_end(self, s, h)
            frames[-1][1] += 1
            return False
        frames.pop()
        if fr[2] == "server":
            self._server_done(s)
        # while / loop: the parent's pc stays on the statement, re-read next
        if not frames:
            self.end_session(s)
            return True
        return False

    def _interpret(self, s: Session, budget: int) -> None:
        """The session's statements one at a time until it blocks; `budget`: statements it may
        still run without blocking (§11.9)."""
        cx = self.cx
        attrs = s.attrs
        frames = s.frames
        while s.status == READY:
            budget -= 1
            if budget < 0:
                raise RunError(f"session {s.serial} executed {MAX_STATEMENTS} statements without blocking")
            fr = frames[-1]
            blk = fr[0]
            pc = fr[1]
            if pc >= len(blk):
                if self._block_end(s, fr):
                    return
                continue
            st = blk[pc]
            op = st[0]
            cx.at = st[-1]
            if op == "set":
                attrs[st[1]] = st[2](cx)
                fr[1] = pc + 1
            elif op == "observe":
                self.observe(st[1], st[2](cx), s)
                fr[1] = pc + 1
            elif op == "branch":
                v = st[1](cx)
                if v != 0 and v != 1:
                    raise RunError(f"a branch guard must be 0 or 1, got {v} at {at_text(st[-1])}")
                fr[1] = pc + 1
                target = st[2] if v == 1 else st[3]
                if target is not None:
                    frames.append([self.blocks[target], 0, "branch", None])
            elif op == "while":
                v = st[1](cx)
                if v != 0 and v != 1:
                    raise RunError(f"a while guard must be 0 or 1, got {v} at {at_text(st[-1])}")
                if v == 1:
                    frames.append([self.blocks[st[2]], 0, "while", None])
                else:
                    fr[1] = pc + 1
            elif op == "loop":
                frames.append([self.blocks[st[1]], 0, "loop", None])
            elif op == "run":
                self._exec_run(s, st)
                if s.status == READY:  # zero work: completes at once, yields
                    fr[1] = pc + 1
                    self.make_ready(s)
                    return
                fr[1] = pc + 1
                return
            elif op == "hold":
                st[1].execute(s)  # leaves pc on the hold until its scope ends
                if s.status == ENDED:
                    return
            elif op == "turn":
                fr[1] = pc + 1
                self._exec_turn(s)
            elif op == "end":
                self.end_session(s)
                return
            elif op == "choose":
                n = st[2](cx)
                best, bestk = None, None
                saved = attrs[st[1]]
                for j in range(int(n)):
                    attrs[st[1]] = float(j)
                    k = tuple(f(cx) for f in st[3])
                    if bestk is None or k < bestk:
                        best, bestk = j, k
                if best is None:
                    attrs[st[1]] = saved
                    raise RunError(f"choose over an empty range at {at_text(st[-1])}")
                attrs[st[1]] = float(best)
                fr[1] = pc + 1
            elif op == "grow":
                pool = self.pools[st[1](cx)]
                d = st[2](cx)
                if d < 0:
                    raise RunError(f"negative growth {d} at {at_text(st[-1])}")
                fr[1] = pc + 1
                part = P.find_part(s, pool)
                if part is None:
                    raise RunError(f"grow {pool.name}: the session holds no {pool.name} at {at_text(st[-1])}")
                res = pool.grow(part, d, None)
                if res == "stalled":
                    return
                if res == "preempted":
                    return
            elif op == "load":
                pool = self.pools[st[1](cx)]
                n = st[2](cx)
                if n < 0:
                    raise RunError(f"negative load {n} at {at_text(st[-1])}")
                part = P.find_part(s, pool)
                if part is None and s.serial in pool.leases:
                    part = pool.leases[s.serial].part  # a leased allocation keeps its position
                if part is None:
                    raise RunError(f"load {pool.name}: the session holds no {pool.name}")
                if part.pos + n > part.alloc + 1e-9:
                    raise RunError(f"load {pool.name}: position {part.pos + n} beyond the allocation {part.alloc}")
                part.pos += n
                part.advanced = True
                fr[1] = pc + 1
            elif op == "drop":
                pool = self.pools[st[1](cx)]
                pool.drop_entry(s.serial)
                fr[1] = pc + 1
            elif op == "release":
                pool = self.pools[st[1](cx)]
                fr[1] = pc + 1
                P.release_early(self, s, pool)
            else:
                raise RunError(f"unknown statement {op}")

    def _server_done(self, s: Session) -> None:
        """The server block of a turn ended: a turn that made no engine call records its response
        (completion − the time `turn;` ran) and, with --records, its row."""
        if s.turn_called:
            return
        self.client_record("response", self.now - s.turn_t, s)
        if self.records is not None and s.turn_warm:
            r = Request(s.serial, int(s.attrs[TURN_NO]), None, None, s.turn_t)
            r.done = self.now
            self.records.append(r)

    def _exec_turn(self, s: Session) -> None:
        attrs = s.attrs
        attrs[TURN_NO] += 1
        s.turn_t = self.now
        s.turn_warm = self.measuring
        s.turn_called = False
        if self.measuring:
            self.turns += 1
        if s.trace is not None:
            k = s.tcursor
            if k < len(s.trace):
                new, out, think, forced = s.trace[k]
                attrs[NEW], attrs[OUT], attrs[THINK], attrs[FORCED] = new, out, think, forced
                attrs[MORE] = 1.0 if k + 1 < len(s.trace) else 0.0
            else:
                attrs[MORE] = 0.0
            s.tcursor = k + 1
        if self.wl_turn is not None:
            self._run_wblock(s, self.wl_turn, int(attrs[TURN_NO]))
            cx = self.cx
            cx.attrs, cx.sess, cx.draw = s.attrs, s, s.src
        if self.wl_server is not None:
            s.frames.append([self.blocks[self.wl_server], 0, "server", None])

    def _exec_run(self, s: Session, st: tuple) -> None:
        cx = self.cx
        stage = self.stages[st[1](cx)]
        mode = st[2]
        w = st[3](cx)
        if w < 0:
            raise RunError(f"negative work {w} at {at_text(st[-1])}")
        if w != w or math.isinf(w):
            raise RunError(f"work {w} is not finite at {at_text(st[-1])}")
        if stage.kind == "step" and w != math.floor(w):
            raise RunError(f"engine {stage.name}: run work must be a whole number of tokens, got {w:g} "
                           f"at {at_text(st[-1])}")
        growing = st[4]
        stage.submit(s, w, mode, growing)

    def end_session(self, s: Session) -> None:
        """`end` (§11.3): release every hold with its cache clause, leave queues and stages."""
        P.detach(self, s)
        while s.holds:
            h = s.holds.pop()
            P.release_hold(self, h, cache=True)
        for pool in self.pools:  # then its leases, in pool order (§11.3 `end`)
            if s.serial in pool.leases:
                P.end_lease(self, s, pool)
        s.frames.clear()
        s.status = ENDED
        s.where = None
        self.live -= 1
        if self.measuring:
            self.ended += 1
        if self.replay is not None:
            if s.src.leftover():
                raise RunError(f"replay: {s.src.what} leaves {s.src.leftover()} unused draw(s)")
            # one turn list per turn the session ran (docs/sessions.md), as serq_spec checks: a
            # list left over means the file was sampled from another program
            lists, ran = len(self.replay_sessions[s.serial].get("turns", [])), int(s.attrs[TURN_NO])
            if lists != ran:
                raise RunError(f"replay: session {s.serial} ended after {ran} turn(s), the sessions file has "
                               f"{lists} turn list(s) for it: the file does not fit the program")
        if not self.keep_all:
            self.sessions.pop(s.serial, None)
        if self.arrival["kind"] == "closed":
            if self.replay is None or self.next_serial < self.replay_k:
                self.spawn()

    # ---------------------------------------------------------------- lockstep state

    def _new_rec(self) -> dict:
        return {"admitted": [], "preempted": [], "released": [], "evicted": [], "iterations": [],
                "observations": [], "finished": []}

    def _emit_state(self, step: int, ev) -> None:
        if self.states is None:
            return
        from serq_fast.state import state_line

        self.states(state_line(self, step, ev))


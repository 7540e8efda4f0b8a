"""The session interpreter (docs/language.md §11.3): statements compiled from the IR's blocks,
a session's frame stack run until it blocks, spawn, `turn;`, runs on stages, `fork` and `join;`
(a branch is a `Session` object of its session, §11.13), the end of a session, and settle (ready
sessions run in FIFO order, pools retry their growers and admit their heads, then idle engines
start an iteration, docs/language.md §11.2).

`SessionInterpreter` is a base class of `step.Sim`: these are hot methods (every statement of
every session goes through `_interpret` or its generated block, `specialise.py`), and a method
inherited from a base class costs no more to call than the Sim's own.

serq_spec counterpart: `serq_spec/sessions.py` (spawn, run_session, exec_stmt, exec_turn,
exec_run, exec_fork, branch_left, end_session, settle); the hold statement's admission and the
scope end are in `pools.py`, growth and preemption in `growth.py`, the async ends in `lag.py`.
"""

from __future__ import annotations

import math

from serq import draws
from serq.exact import negative_transfer_amount, negative_work, work_not_finite
from serq.sessionsfile import stream_name, unused_session_draws
from serq_fast import pools as P
from serq_fast.defs import (ENDED, ENDING, FAULTS, FORCED, GROWING, JOINING, MAX_CLOSED_RESPAWNS_PER_INSTANT,
                            MAX_READY_PER_INSTANT, MAX_STATEMENTS, MORE,
                            NEW, OUT, QUEUED, READY, SERIAL, STAGE, THINK, TURN_NO, Request)
from serq_fast.expr import NOWHERE, RunError, at_text, compile_expr, compile_ref, located
from serq_fast.growth import detach, grow, retry_growers
from serq_fast.lag import lag_end
from serq_fast.sources import ListSource, LiveSource
from serq_fast.stages import speculate_drafts, submit_flow


class Session:
    __slots__ = ("serial", "attrs", "frames", "status", "where", "holds", "pending", "adm_seq",
                 "prepos", "stuck", "trace", "tcursor", "src", "job", "ready_t", "ready_n",
                 "growth", "turn_used", "turn_t", "turn_warm", "turn_called",
                 "tid", "parent", "live_branches", "forks", "accept", "unseen", "spec_drafts", "loads")
    copy = False   # a thread, not a spill copy's owner (stages.Copier)

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
        self.accept = None  # the turn's acceptance counts by output number (docs/language.md §7.3)
        # lag 1 (docs/async.md §8): the last step's outcome the next schedule has not seen (part,
        # rejected drafts, verified position, position known at schedule, whether it ended the
        # run through accepted drafts); the drafts of its last run with `speculate`
        self.unseen = None
        self.spec_drafts = 0
        # the load-backs of its newest hold still to run, in the hold's pool order: [(Pool, units)]
        # (docs/language.md §11.8.1, a hold of two pools with `spill`)
        self.loads: list = []
        self.src = None  # the session stream
        self.job = None
        self.ready_t = -1.0
        self.ready_n = 0
        self.growth = None  # (part, need, job or None) while stalled
        self.turn_used: dict = {}  # replaying: turn number (0: init) -> draws its block used
        # the current turn (docs/report.md "client"): when `turn;` ran, whether that was after the
        # warm-up (the turn counts in `turns`, and so do its client metrics), whether its server
        # made an engine call (else the turn's own response is recorded when the server ends)
        self.turn_t = 0.0
        self.turn_warm = False
        self.turn_called = False
        # docs/language.md §11.13: a thread's name (the serial, or "s.k" for the k-th branch of
        # session s), a branch's parent thread, the branches this thread forked that still run,
        # and (on the session) how many branches it has forked
        self.tid = serial
        self.parent = None
        self.live_branches = 0
        self.forks = 0

    def status_text(self) -> str:
        if self.status == READY:
            return "ready"
        if self.status == QUEUED:
            return "queued:" + self.where.name
        if self.status == STAGE:
            if self.job is not None and self.job.stages is not None:   # a flow: all its stages (§11.14)
                return "stage:" + ",".join(st.name for st in self.job.stages)
            return "stage:" + self.where.name
        if self.status == GROWING:
            return "growing:" + self.where.name
        if self.status == ENDING:
            return "ending:" + self.where.name
        if self.status == JOINING:
            return "joining"
        return "ended"


class SessionInterpreter:
    """The session half of `step.Sim` (its state is the Sim's: see `step.Sim.__init__`)."""

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
        if op == "accept":
            return ("accept", c(st["count"]), c(st["rate"]), at)
        if op in ("turn", "end", "join"):
            return (op, at)
        if op == "fork":
            self._check_branch_block(st["body"])
            return ("fork", st["body"], bool(st.get("own")), at)
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
        if op == "flow":
            for ref in st["stages"]:
                for i in range(ref["base"], ref["base"] + ref.get("count", 1)):
                    if not self.stages[i].shared:   # serq_spec.program's words
                        raise RunError(f"a run over several stages needs ps stages, not stage {self.stages[i].name}", at)
            return ("flow", [compile_ref(ref, self, "stage") for ref in st["stages"]], c(st["work"]), at)
        if op == "run":
            ref = st["stage"]
            if st.get("growing") is not None and any(
                    self.stages[i].kind != "step" for i in range(ref["base"], ref["base"] + ref.get("count", 1))):
                # a growing run advances a position by the tokens an engine serves (§11.6): a
                # non-step stage has none (docs/spec.md, as serq_spec.program)
                raise RunError(f"`growing` needs an engine (a step stage), not stage "
                               f"{self.stages[ref['base']].name} at {at_text(at)}")
            sp = st.get("speculate")
            # the drafts and where a bad value is reported: the `speculate (k)` clause (serq_spec's place)
            return ("run", compile_ref(st["stage"], self, "stage"), st["mode"], c(st["work"]),
                    st.get("growing"), None if sp is None else (c(sp["drafts"]), sp.get("at") or at), at)
        if op == "transfer":
            if "stages" in st:   # over several links: compiled as a flow (a list of stage references)
                link = self._compile_stmt_at({"op": "flow", "stages": st["stages"], "work": st["work"], "at": at})[1]
            else:
                ref = st["stage"]
                if any(self.stages[i].kind == "step" for i in range(ref["base"], ref["base"] + ref.get("count", 1))):
                    raise RunError(f"`transfer` over the engine {self.stages[ref['base']].name}: a transfer copies "
                                   f"over a link (a fifo, ps or delay stage) at {at_text(at)}")
                link = compile_ref(ref, self, "stage")
            return ("transfer", link, c(st["work"]), compile_ref(st["from"], self, "pool"),
                    compile_ref(st["to"], self, "pool"), at)
        if op in ("drop", "load", "transfer_end"):
            ref = st["pool"] if op != "transfer_end" else st["to"]
            for pool in self.pools[ref["base"]:ref["base"] + ref.get("count", 1)]:
                if pool.content:
                    what = "transfer … to" if op == "transfer_end" else op
                    raise RunError(f"`{what}` on the `share content` pool {pool.name} (docs/content.md §1) at {at_text(at)}")
        if op == "transfer_end":
            return ("transfer_end", compile_ref(st["from"], self, "pool"), compile_ref(st["to"], self, "pool"),
                    c(st["units"]), at)
        if op in ("grow", "load"):
            return (op, compile_ref(st["pool"], self, "pool"), c(st["units"]), at)
        if op in ("drop", "release"):
            return (op, compile_ref(st["pool"], self, "pool"), at)
        raise RunError(f"unknown statement {op!r}")

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
            s.src = ListSource(rs.get("session", []), stream_name(serial))
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
        return ListSource(vals, stream_name(s.serial, turn_no))

    def _run_wblock(self, s: Session, block: int, turn_no: int) -> None:
        """An `init` or `turn` block: `set` and `observe` only, drawn from the turn stream."""
        src = self._turn_source(s, turn_no)
        cx = self.cx
        saved = cx.draw
        cx.attrs, cx.sess, cx.draw = s.attrs, s, src
        try:
            for st in self.blocks[block]:
                try:   # an error names the block's statement, as serq_spec's
                    if st[0] == "set":
                        s.attrs[st[1]] = st[2](cx)
                    elif st[0] == "observe":
                        self.observe(st[1], st[2](cx), s)
                    elif st[0] == "accept":
                        s.accept = self._draw_accept(st, src)
                    else:
                        raise RunError(f"`{st[0]}` in a workload init/turn block")
                except RunError as exc:
                    raise located(exc, st[-1]) from None
        finally:
            cx.draw = saved
        if self.replay is not None:   # checked when the session ends (end_session), as serq_spec
            s.turn_used[turn_no] = src.i

    def _draw_accept(self, st: tuple, src) -> list:
        """`accept (n, alpha);` (docs/language.md §7.3, serq_spec.sessions.exec_accept): the turn's
        acceptance counts, n values of the acceptance law from the turn's stream `src`."""
        cx = self.cx
        try:
            n = draws.accept_outputs(st[1](cx))
            alpha = st[2](cx)
            draws.check_args(draws.ACCEPT_LAW, [alpha])   # also when n = 0
            return [draws.accept_value(src(draws.ACCEPT_LAW, [alpha], st[-1])) for _ in range(n)]
        except draws.DrawError as exc:
            raise RunError(str(exc)) from None

    def _count_respawn(self) -> None:
        """§11.9: a live `closed(n)` run whose sessions end at the instant they start replaces
        them at that instant forever and time never advances. Up to n sessions may end (and be
        replaced) in one instant; n + 10⁵ is taken for that loop and stops the run, at the first
        statement of the session's script, where something that takes time belongs."""
        if self.respawn_t != self.now:
            self.respawn_t, self.respawn_n = self.now, 0
        self.respawn_n += 1
        n = int(self.arrival["n"])
        if self.respawn_n > n + MAX_CLOSED_RESPAWNS_PER_INSTANT:
            wl = self.ir["workload"]
            first = next((b[0] for b in (self.ir["blocks"][wl["session"]], self.ir["blocks"][wl["server"]]
                                         if wl.get("server") is not None else []) if b), {})
            raise RunError(f"`arrive closed({n})`: {self.respawn_n} sessions ended at t = {self.now:g} and were "
                           "replaced in that instant, so time never advances: every session must take time "
                           "(a `run`, `hold` or `tool` it always reaches)", first.get("at") or NOWHERE)

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
        # every event ends here: the tests below skip the calls that would find nothing to do
        # (no grower, an empty queue, no ps stage) rather than make them
        pools = self.pools
        while True:
            if not started:
                ready = self.ready
                if ready:
                    while self.ready_head < len(ready):
                        s = ready[self.ready_head]
                        self.ready_head += 1
                        if s.status == READY:
                            self.exec_session(s)
                    self.ready = []
                    self.ready_head = 0
                for pool in pools:
                    if pool.growers:
                        retry_growers(pool)
                    if pool.admitted_by is None and (pool.front or pool.queue_head < len(pool.queue)):
                        pool.admit_heads()
                if self.ready:
                    continue
                if self.engines and (self.fault_pending or not self.pending_now()):
                    for eng in self.engines:
                        if eng.iter is None and eng.has_work():
                            eng.start_iteration()
            started = False
            if not self.ready:
                break
        for st in self.ps_stages:
            if st.changed:
                st.reschedule()
        if self.sharing.changed:
            self.sharing.reschedule()
        self.sample()

    def exec_session(self, s: Session) -> None:
        try:
            self._exec_session(s)
        except RunError as exc:  # an error of an expression (x/0, pow(10, 1e10)): its statement
            raise located(exc, self.cx.at) from None

    def next_load(self, s: Session) -> bool:
        """Start the session's next load-back (serq_spec sessions.next_load): one job at a time in
        the hold's pool order, zero work skipped. True when a job started."""
        while s.loads:
            pool, loaded = s.loads.pop(0)
            if pool.load_back(s, loaded):
                return True
        return False

    def _exec_session(self, s: Session) -> None:
        if s.loads and self.next_load(s):
            return   # back from one load-back, on to the next (docs/language.md §11.8.1)
        cx = self.cx
        cx.attrs, cx.sess, cx.draw = s.attrs, s, s.src
        cx.eng = None
        if cx.var:  # no context variable in a session's moment; an empty dict is reused (nothing writes into one)
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
                lag_end(eng, s, h)
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
            self.end_session(s)   # a branch's end too (§11.13)
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
            elif op == "flow" or op == "transfer":   # a transfer's copy is a run or a flow on its link
                (self._exec_flow if op == "flow" else self._exec_transfer)(s, st)
                fr[1] = pc + 1
                if s.status == READY:  # zero work: completes at once, yields
                    self.make_ready(s)
                return
            elif op == "transfer_end":
                fr[1] = pc + 1
                self._exec_transfer_end(s, st)
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
            elif op == "fork":
                fr[1] = pc + 1
                self._exec_fork(s, st)
            elif op == "join":
                fr[1] = pc + 1
                if s.live_branches:
                    s.status = JOINING  # made ready by its last branch's end (_branch_left)
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
                res = grow(pool, part, d, None)
                if res == "stalled":
                    return
                if res == "preempted":
                    return
            elif op == "load":
                pool = self.pools[st[1](cx)]
                n = st[2](cx)
                if n < 0:
                    raise RunError(f"negative load {n} at {at_text(st[-1])}")
                part = self._held_part(s, pool)
                if part is None:
                    raise RunError(f"load {pool.name}: the session holds no {pool.name}")
                if part.pos + n > part.alloc + 1e-9:
                    raise RunError(f"load {pool.name}: position {part.pos + n} beyond the allocation {part.alloc}")
                part.pos += n
                part.advanced = True
                fr[1] = pc + 1
            elif op == "drop":
                pool = self.pools[st[1](cx)]
                pool.drop_entry(s.tid)
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
                row = s.trace[k]
                attrs[NEW], attrs[OUT], attrs[THINK], attrs[FORCED] = row[0], row[1], row[2], row[3]
                # speculative decoding's acceptance counts, when the row has them (§7.3)
                s.accept = row[4] if len(row) > 4 else None
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
            raise RunError(negative_work(w), st[-1])
        if w != w or math.isinf(w):
            raise RunError(work_not_finite(w), st[-1])
        if stage.kind == "step" and w != math.floor(w):
            raise RunError(f"engine {stage.name}: run work must be a whole number of tokens, got {w!r} "
                           f"at {at_text(st[-1])}")
        growing = st[4]
        if st[5] is None:
            stage.submit(s, w, mode, growing)
        else:
            drafts, drafts_at = st[5]
            stage.submit(s, w, mode, growing, speculate_drafts(drafts(cx), drafts_at))

    def _exec_flow(self, s: Session, st: tuple) -> None:
        """`run a, b, … (w)` (docs/language.md §11.14), as serq_spec.sessions.exec_flow."""
        cx = self.cx
        stages = [self.stages[f(cx)] for f in st[1]]
        w = st[2](cx)
        if w < 0:
            raise RunError(negative_work(w), st[-1])
        if w != w or math.isinf(w):
            raise RunError(work_not_finite(w), st[-1])
        try:
            submit_flow(self, s, stages, w)
        except RunError as exc:
            raise RunError(exc.message, st[-1]) from None

    @staticmethod
    def _held_part(s: Session, pool):
        """The session's allocation of the pool that `load` advances: its innermost hold's part,
        else its lease's (a leased allocation keeps its position, §11.4), else None."""
        part = P.find_part(s, pool)
        if part is None and s.tid in pool.leases:
            part = pool.leases[s.tid].part
        return part

    def _exec_transfer(self, s: Session, st: tuple) -> None:
        """`transfer S (w) from P to Q (n);` (docs/language.md §11.15), the copy: P and Q held (a
        hold or a lease of each), then a run of w on the link S, or a flow over several links
        (serq_spec `exec_transfer`)."""
        cx = self.cx
        p, q = st[3](cx), st[4](cx)
        if p == q:
            raise RunError(f"transfer from pool {self.pools[p].name} to itself: the two pool indices name one pool; "
                           "name the KV's pool and another", st[-1])
        for i, role in ((p, "from"), (q, "to")):
            if self._held_part(s, self.pools[i]) is None:
                raise RunError(f"transfer {role} pool {self.pools[i].name}: the session holds no allocation of it (a "
                               "hold or a lease); take it in a `hold` around the transfer, or keep it with `lease`",
                               st[-1])
        if "transfer_early_release" in FAULTS():
            # seeded fault (docs/fast.md): P is released as the copy starts, not when it ends
            P.release_early(self, s, self.pools[p])
        if isinstance(st[1], list):   # over several links at once: a flow (§11.14)
            self._exec_flow(s, ("flow", st[1], st[2], st[-1]))
        else:
            self._exec_run(s, ("run", st[1], "plain", st[2], None, None, st[-1]))

    def _exec_transfer_end(self, s: Session, st: tuple) -> None:
        """The landing, when the copy's job completed: `load Q (n);` then `release P;` (serq_spec
        `exec_transfer_end`)."""
        cx = self.cx
        p, q = self.pools[st[1](cx)], self.pools[st[2](cx)]
        n = st[3](cx)
        if n < 0:
            raise RunError(negative_transfer_amount(n, q.name), st[-1])
        if math.isinf(n):
            raise RunError("transfer amount is infinite", st[-1])
        part = self._held_part(s, q)
        if part is None:
            raise RunError(f"transfer to pool {q.name}: the session no longer holds it when the copy ends (its lease "
                           "ran out during the copy); lease it for longer", st[-1])
        if part.pos + n > part.alloc + 1e-9:
            raise RunError(f"transfer to pool {q.name}: position {part.pos + n} beyond the allocation {part.alloc}; "
                           "hold at least the position plus n", st[-1])
        part.pos += n
        part.advanced = True
        if "transfer_early_release" not in FAULTS():
            P.release_early(self, s, p)

    # ---------------------------------------------------------------- branches (§11.13)

    def _exec_fork(self, s: Session, st: tuple) -> None:
        """`fork { … }`: a new branch, ready behind the threads already ready; the forking thread
        goes on. The branch shares its session's draw source, and the forking thread's attributes
        unless the fork's block holds a pool (`st[2]`, IR `"own"`): then a copy of them, its own
        (a sub-agent's context, §11.13). Its holds, queue places, entries and leases are its own."""
        root = self.sessions[s.serial]
        root.forks += 1
        b = Session.__new__(Session)
        for name in Session.__slots__:
            if hasattr(root, name):
                setattr(b, name, getattr(root, name))
        # the very object unless a sub-agent's (§11.13); seeded fault `fork_shared_attrs`: shared always
        b.attrs = list(s.attrs) if st[2] and "fork_shared_attrs" not in FAULTS() else s.attrs
        b.src = root.src  # the very object: a branch's draws are the session's
        b.frames = [[self.blocks[st[1]], 0, "fork", None]]
        b.status, b.where, b.holds, b.pending, b.job, b.growth = READY, None, [], None, None, None
        b.prepos, b.ready_t, b.ready_n, b.adm_seq, b.stuck = {}, -1.0, 0, -1, False   # not admitted yet
        b.tid, b.parent, b.live_branches, b.forks = f"{s.serial}.{root.forks}", s, 0, 0
        s.live_branches += 1
        self.branches[b.tid] = b
        self.make_ready(b)
        if "fork_first" in FAULTS():
            # seeded fault (docs/fast.md): the branch runs before the threads already ready
            self.ready.insert(self.ready_head, self.ready.pop())

    def _branch_left(self, b: Session) -> None:
        """A branch has ended (`end_session`: its block ended, or a hold of it was rejected): it
        leaves, and a joining parent whose last branch it was becomes ready. Its cache entries stay
        under its name, as a session's do."""
        del self.branches[b.tid]
        parent = b.parent
        parent.live_branches -= 1
        if parent.live_branches == 0 and parent.status == JOINING:
            self.make_ready(parent)

    def _unjoined(self, s: Session) -> None:
        """A thread ends with branches running (the linker refuses it: a hand-written IR), located
        at the `fork` of its first running branch, as serq_spec's `unjoined`."""
        kind = "branch" if s.parent is not None else "session"
        b = next((b for b in self.branches.values() if b.parent is s), None)
        body = b.frames[0][0] if b is not None and b.frames else None   # a branch's bottom frame: its fork's body
        at = next((st[-1] for blk in self.blocks for st in blk if st[0] == "fork" and self.blocks[st[1]] is body), None)
        raise RunError(f"{kind} {s.tid} ended with {s.live_branches} branch(es) still running: every `fork` "
                       "needs a `join;` later in its block (docs/language.md §11.13)", at)

    def _check_branch_block(self, block: int) -> None:
        """A fork's block may not hold `turn;` or `end;` at any depth (docs/language.md §11.13): the
        linker refuses them; a hand-written IR is refused here, when the program is loaded."""
        for st in self.ir["blocks"][block]:
            op = st["op"]
            at = st.get("at")
            # the message is serq_spec's, which refuses the same statements when they run
            if op in ("turn", "end"):
                raise RunError(f"`{op}` in a branch, or before the `join;` of a fork: the linker refuses this "
                               "(docs/language.md §11.13)", at)
            for key in ("then", "else", "body"):
                if st.get(key) is not None:
                    self._check_branch_block(st[key])

    def end_session(self, s: Session) -> None:
        """`end` (§11.3): release every hold with its cache clause, leave queues and stages. A branch
        ends the same way when its block ends or a hold of it is rejected, then leaves (§11.13)."""
        if s.live_branches:
            self._unjoined(s)
        detach(self, s)
        while s.holds:
            h = s.holds.pop()
            P.release_hold(self, h, cache=True)
        for pool in self.pools:  # then its leases, in pool order (§11.3 `end`)
            if s.tid in pool.leases:
                P.end_lease(self, s, pool)
        s.frames.clear()
        s.status = ENDED
        s.where = None
        if s.parent is not None:   # a branch: its block ended, or a hold of it was rejected (§11.13)
            self._branch_left(s)
            return
        self.live -= 1
        if self.measuring:
            self.ended += 1
        if self.replay is not None:
            # every value of its lists used, one turn list per turn it ran (docs/sessions.md
            # "Unused values"): checked here, at the session's end, in serq_spec's words
            rs, used, ran = self.replay_sessions[s.serial], s.turn_used, int(s.attrs[TURN_NO])
            lists = rs.get("turns", [])
            turns = [(k, used.get(k, 0), len(t)) for k, t in enumerate(lists, start=1) if k <= ran]
            unused = unused_session_draws(s.serial, (used.get(0, 0), len(rs.get("init", []))), ran, len(lists),
                                          turns, (s.src.i, len(s.src.values)))
            if unused:
                raise RunError(unused, NOWHERE)
        if not self.keep_all:
            self.sessions.pop(s.serial, None)
        if self.arrival["kind"] == "closed":
            if self.replay is None:
                self._count_respawn()
                self.spawn()
            elif self.next_serial < self.replay_k:   # a replay ends with its file's sessions
                self.spawn()

"""Sessions (docs/language.md §11.3–§11.4): spawn, statement execution, holds, `turn`, `end`, settle.

A session runs its statements in zero time until it blocks (queued in a pool, a job on a stage,
a stalled growth) or ends. Frames form a stack; a frame's `kind` says what its end does: a
`while` re-reads its condition, a `loop` restarts, a `hold` ends the hold's scope (release).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Optional

from serq import draws
from serq.errors import number_text
from serq.exact import negative_transfer_amount, negative_work, work_not_finite
from serq.wire import Value

from . import content
from . import values as V
from .config import (ENDED, JOINING, READY, Config, Frame, HoldState, IterCtx, Job, Request, Session, hold_of, hold_on,
                     thread)
from .errors import At, SessionsFileError, SpecError
from .expr import Env, evaluate, resolve_ref
from .growth import grow
from .lag import lag_engine, pending_want
from .pools import (add_units, allocate_blocks, caches_in, consume_own_prefix, drop_entry, end_lease, enqueue, held_reservations,
                    lease_of, leave_queue, link_work, make_room, release_hold, release_pool_early, select_head,
                    start_lease, units_int)
from .program import CACHED, COMPUTED, FORCED, MORE, NEW, OUT, SERIAL, THINK, TURN_NO, static_expr, zero_attrs
from .stages import add_resident, start_copies, start_flow, start_job

STATEMENT_LIMIT = 1_000_000   # §11.9: a session that runs this many statements without blocking
READY_LIMIT = 1000            # §11.9: a session made ready this many times in one instant


def eval_in_session(cfg: Config, s: Session, e: dict, stream: tuple, at: At, **kw: Any) -> Value:
    """Evaluate `e` in the Session moment of session `s` (§5)."""
    return evaluate(e, Env(cfg, s, stream, at, **kw))


def record_observation(cfg: Config, name: str, s: Optional[Session], value: Value) -> None:
    """`observe`: (name, serial, turn_no, time, value), only after warm-up (§11.9)."""
    if cfg.warm:
        turn = s.attrs[TURN_NO] if s is not None else Fraction(0)
        cfg.records["observations"].append([name, s.serial if s else None, int(turn), cfg.now, value])


# -- spawn and end -------------------------------------------------------------------------------

def spawn(cfg: Config) -> Session:
    """A new session (§11.3 Spawn): serial, zero attributes, trace pick, `init`, then its session block."""
    prog = cfg.program
    serial = cfg.counters.next_serial
    cfg.counters.next_serial += 1
    s = Session(serial=serial, attrs=zero_attrs(prog.nslots), frames=[], status=READY)
    s.attrs[SERIAL] = Fraction(serial)
    trace = prog.workload.get("trace")
    if trace is not None:
        n = len(trace["sessions"])
        if trace["ordered"]:
            pick = serial % n
        else:
            picks = prog.workload_data.trace_picks
            if serial >= len(picks) or not 0 <= picks[serial] < n:
                raise SessionsFileError(f"the sessions file has no valid trace pick for session {serial}")
            pick = picks[serial]
        s.trace = [pick, 0]
    cfg.sessions.append(s)
    s.frames.append(Frame(prog.workload["session"], 0, "plain", None, ("session",)))
    if prog.workload.get("init") is not None:
        s.frames.append(Frame(prog.workload["init"], 0, "plain", None, ("init",)))
    cfg.ready.append(serial)
    return s


def end_session(cfg: Config, s: Session) -> None:
    """`end` (§11.3): release every hold (caching per its clause); cache entries stay; closed respawns.
    A branch ends the same way when its block ends or a hold of it is rejected, then leaves (§11.13)."""
    if s.live_branches:
        unjoined(cfg, s)
    for h in reversed(s.holds):
        release_hold(cfg, s, h, preempted=False)
    s.holds = []
    for p in range(len(cfg.pools)):   # then its leases, in pool order (§11.3 `end`)
        if lease_of(cfg, p, s.tid) is not None:
            end_lease(cfg, s, p)
    s.frames = []
    s.request = None
    s.status = ENDED
    if s.branch is not None:
        branch_left(cfg, s)
        return
    cfg.program.workload_data.check_consumed(cfg, s)
    arrival = cfg.program.workload["arrival"]
    if arrival["kind"] == "closed" and cfg.counters.next_serial < cfg.program.workload_data.count:
        spawn(cfg)


# -- branches: `fork` and `join` (§11.13) ---------------------------------------------------------

def exec_fork(cfg: Config, s: Session, st: dict, stream: tuple) -> None:
    """`fork { … }`: a new branch of the session, at the back of the ready queue; the forking
    thread goes on at once. The branch shares the session's draw cursors, and the forking thread's
    attributes — unless the fork's block holds a pool (`"own"` in the IR): a sub-agent's
    attributes are its own, a copy of the forking thread's taken now (§11.13)."""
    root = cfg.sessions[s.serial]
    root.forks += 1
    bid = f"{s.serial}.{root.forks}"
    own = bool(st.get("own"))
    b = Session(serial=s.serial, attrs=list(s.attrs) if own else s.attrs,
                frames=[Frame(st["body"], 0, "plain", None, stream)],
                status=READY, cursors=root.cursors, branch=bid, parent=s.tid, own=own)
    s.live_branches += 1
    cfg.branches[bid] = b
    cfg.ready.append(bid)


def exec_join(s: Session) -> None:
    """`join;`: wait while a branch this thread forked is running (status joining)."""
    if s.live_branches:
        s.status = JOINING


def branch_left(cfg: Config, b: Session) -> None:
    """A branch has ended (`end_session`: its block ended, or a hold of it was rejected): it
    leaves, and a joining parent whose last branch it was becomes ready (at the back of the ready
    queue). Its cache entries stay under its name, as a session's do (§11.13)."""
    cfg.branches.pop(f"{b.tid}")
    if b.parent is None:
        raise SpecError(f"internal: branch {b.tid} has no parent")
    parent = thread(cfg, b.parent)
    parent.live_branches -= 1
    if parent.live_branches == 0 and parent.status == JOINING:
        parent.status = READY
        cfg.ready.append(parent.tid)


def unjoined(cfg: Config, s: Session) -> None:
    """A thread ends with branches still running: the linker refuses such a program, so only a
    hand-edited IR gets here. The error is located at the `fork` of its first running branch."""
    raise SpecError(f"{'branch' if s.branch else 'session'} {s.tid} ended with {s.live_branches} branch(es) "
                    "still running: every `fork` needs a `join;` later in its block (docs/language.md §11.13)",
                    unjoined_at(cfg, s), cfg.program.files)


def unjoined_at(cfg: Config, s: Session) -> At:
    """The position of the `fork` statement whose body is the bottom frame of the first live
    branch `s` forked (a branch's bottom frame is its fork's body until the branch ends)."""
    b = next((b for b in cfg.branches.values() if b.parent == s.tid), None)
    if b is None or not b.frames:
        return None
    body = b.frames[0].block
    return next((st.get("at") for blk in cfg.program.blocks for st in blk
                 if st["op"] == "fork" and st["body"] == body), None)


# -- holds ---------------------------------------------------------------------------------------

def record_client(cfg: Config, name: str, s: Session, value: Value) -> None:
    """A client metric (ttft, tpot, response) of the session's current turn, recorded when known
    iff the turn counts in `turns` (its `turn;` ran after the warm-up; docs/report.md "client").
    A branch's request is its session's turn's (§11.13)."""
    if cfg.sessions[s.serial].turn_warm:
        cfg.records["observations"].append([name, s.serial, int(s.attrs[TURN_NO]), cfg.now, value])


def server_done(cfg: Config, s: Session) -> None:
    """A turn's server block ended: a turn that made no engine call records its response."""
    if not s.turn_called:
        record_client(cfg, "response", s, cfg.now - s.turn_start)


def exec_hold(cfg: Config, s: Session, st: dict, ref: tuple, stream: tuple) -> None:
    """Executing a hold statement (§11.4 Hold request): reject what can never fit, else queue."""
    at = st.get("at")
    req = st.get("request")
    if req is not None:
        cfg.sessions[s.serial].turn_called = True   # a branch's request is its session's turn's (§11.13)
        # no second request parameter: no output length, so no `tpot` (docs/ir.md `request`)
        out = None if req["output"] is None else eval_in_session(cfg, s, req["output"], stream, at)
        s.request = Request(stmt=tuple(ref), engine=req["engine"], submit=cfg.now, output=out)
    if hold_rejected(cfg, s, st, stream):
        return
    first = resolve_ref(Env(cfg, s, stream, at), st["pools"][0]["pool"])
    s.pending = (ref[0], ref[1], stream)
    enqueue(cfg, first, s)


def reject(cfg: Config, s: Session, p: int) -> None:
    """A hold that can never fit in pool p is rejected: p's `rejected` count, the record, `end`."""
    cfg.pools[p].rejected += 1
    cfg.records["rejected"].append([s.tid, cfg.program.pools[p]["name"]])
    end_session(cfg, s)


def hold_rejected(cfg: Config, s: Session, st: dict, stream: tuple) -> bool:
    """A unit or reserve reading only attributes and numbers above its pool's cap → rejected, session ends."""
    at = st.get("at")
    static = set(range(cfg.program.nslots))
    saved = list(s.attrs)
    try:
        for bnd in st.get("bindings", []):
            if static_expr(bnd["expr"], static):
                s.attrs[bnd["slot"]] = eval_in_session(cfg, s, bnd["expr"], stream, at)
            else:
                static.discard(bnd["slot"])
        for hp in st["pools"]:
            p = resolve_ref(Env(cfg, s, stream, at), hp["pool"])
            cap = cfg.program.caps[p]
            for e in (hp["units"], hp.get("reserve")):
                if e is not None and static_expr(e, static):
                    x = eval_in_session(cfg, s, e, stream, at)
                    if not V.is_inf(x) and x >= 0:
                        x = V.roundup_block(x, cfg.program.block[p])
                    if x > cap:
                        s.attrs[:] = saved
                        reject(cfg, s, p)
                        return True
    finally:
        if s.status != ENDED:
            s.attrs[:] = saved
    return False


ADMITTED, BLOCKED, REJECTED = "admitted", "blocked", "rejected"   # the outcomes of an admission attempt


def try_admit(cfg: Config, s: Session, ictx: Optional[IterCtx] = None) -> str:
    """Admission attempt of the queued hold (§11.4): bindings, units, reserves read now; ADMITTED
    if every pool fits, else BLOCKED (it waits at the head) — or REJECTED when some pool's need
    exceeds the pool's cap and the exceeding amount reads only attributes, bindings and numbers:
    it can never fit (docs/spec.md "A hold that can never fit"; the test of `hold_rejected`).

    Inside engine E's admission (`ictx`, §11.6 admit_one) `budget_left(E)` is the budget the
    iteration has left and the schedule's `let`s are visible."""
    prog = cfg.program
    if s.pending is None:
        raise SpecError(f"internal: session {s.tid} has no queued hold to admit")
    bi, pc, stream = s.pending
    st = prog.blocks[bi][pc]
    at = st.get("at")
    if ictx is not None:
        env = Env(cfg, s, stream, at, engine=ictx.engine, ictx=ictx, admit_left=(ictx.engine, ictx.left if V.is_inf(ictx.left) else ictx.left - ictx.slots))
    else:
        env = Env(cfg, s, stream, at)
    cfg.attempt = (s.tid, {})
    try:
        return attempt(cfg, s, st, (bi, pc), stream, env)
    finally:
        cfg.attempt = None


def content_hits(cfg: Config, st: dict, env: Env) -> list:
    """Per pool item of the hold: (content, k, t) — its `content (p, n, h)` read now, before the
    bindings, its hit k on the pool and the t blocks after it that the pool's content tier holds
    (docs/content.md §6; 0 without one); `cachedin` reads (k + t)·b during the attempt
    (docs/content.md §3); (None, 0, 0) for an item without a `content` clause."""
    if cfg.attempt is None:
        raise SpecError("internal: content hits read outside an admission attempt")
    cached_in = cfg.attempt[1]
    out: list[tuple[Optional[tuple], int, int]] = []
    for hp in st["pools"]:
        if hp.get("content") is None:
            out.append((None, 0, 0))
            continue
        p = resolve_ref(env, hp["pool"])
        c = tuple(evaluate(hp["content"][x], env) for x in ("prefix", "length", "history"))
        content.check_content(cfg, p, c, st.get("at"))
        k = content.hit(cfg, p, c)
        spill = cfg.program.pools[p].get("spill")
        t = content.tier_hit(cfg, spill["pool"], c, k) if spill is not None else 0
        cached_in[p] = (k + t) * cfg.program.content_block(p)
        out.append((c, k, t))
    return out


def reused_blocks(k: int, reuse: Any, b: int) -> int:
    """R = min(k, floor(ρ / b)); ρ absent or +inf: k; ρ below one block: 0 (docs/content.md §3)."""
    if reuse is None or (V.is_inf(reuse) and reuse > 0):
        return k
    if V.is_inf(reuse):
        return 0
    return max(0, min(k, int(V.floor_v(reuse / b))))


def attempt(cfg: Config, s: Session, st: dict, ref: tuple, stream: tuple, env: Env) -> str:
    """The body of `try_admit`, with `cfg.attempt` set for `cachedin` on content pools."""
    prog = cfg.program
    at = st.get("at")
    hits = content_hits(cfg, st, env)
    saved = list(s.attrs)
    static = set(range(prog.nslots))   # the slots a static amount may read: attributes, static bindings
    for bnd in st.get("bindings", []):
        s.attrs[bnd["slot"]] = evaluate(bnd["expr"], env)
        if not static_expr(bnd["expr"], static):
            static.discard(bnd["slot"])
    pools, units, amounts, reserved = [], [], [], []
    for hp in st["pools"]:
        p = resolve_ref(env, hp["pool"])
        negative = f"a negative amount for pool {prog.pools[p]['name']}"
        u = units_int(evaluate(hp["units"], env), f"units of pool {prog.pools[p]['name']}", cfg, at, negative)
        mine = [(hp["units"], u)]
        r: V.Amount = 0
        if hp.get("reserve") is not None:
            r = units_int(evaluate(hp["reserve"], env), f"reserve of pool {prog.pools[p]['name']}", cfg, at,
                          negative)
            mine.append((hp["reserve"], r))
        pools.append(p)
        units.append(u)
        amounts.append(mine)
        reserved.append(V.roundup_block(r, prog.block[p]) if prog.pools[p].get("reserve_held") and r > 0 else 0)
    for p, mine in zip(pools, amounts):
        if any(V.roundup_block(x, prog.block[p]) > prog.caps[p] and static_expr(e, static) for e, x in mine):
            s.attrs[:] = saved
            leave_queue(cfg, pools[0], s.tid)
            s.pending = None
            reject(cfg, s, p)
            return REJECTED
    reuse = NOT_READ
    plan: list[Optional[tuple]] = []   # per pool item on a content pool: (content, R); None elsewhere
    if any(prog.is_content(p) for p in pools):
        reuse = evaluate(st["reuse"], env) if st.get("reuse") is not None else None
    for p, mine, (c, k, t) in zip(pools, amounts, hits):
        need = max(x for _, x in mine)
        if prog.is_content(p):
            # vLLM's get_num_blocks_to_allocate against get_num_free_blocks: the R reused blocks
            # that nobody references (E) leave the free queue too; with `reserve held`, the blocks
            # the holders reserved and have not allocated yet are not free (docs/content.md §3).
            # Of the R reused blocks, the first min(k, R) are on the pool, the rest (loaded back
            # from its content tier) take new blocks (docs/content.md §6)
            b = prog.content_block(p)
            r = reused_blocks(k + t, reuse, b)
            on_pool = min(k, r)
            e = content.unreferenced_hits(cfg, p, c, on_pool)
            n = max(0, V.roundup_block(need, b) // b - r) + (r - on_pool)
            reserved_blocks = held_reservations(cfg, p) // b if prog.pools[p].get("reserve_held") else 0
            plan.append((c, on_pool, r - on_pool))
            if n + e + reserved_blocks > content.free_blocks(cfg, p):
                return BLOCKED
            continue
        plan.append(None)
        held = held_reservations(cfg, p) if prog.pools[p].get("reserve_held") else 0
        if cfg.pools[p].used + held + V.roundup_block(need, prog.block[p]) > prog.caps[p]:
            return BLOCKED   # cached units never block (§11.4)
    admit(cfg, s, st, ref, stream, pools, units, env, reserved, plan, reuse)
    return ADMITTED


NOT_READ = object()   # `reuse` not evaluated yet (it is read once per admission)


def admit(cfg: Config, s: Session, st: dict, ref: tuple, stream: tuple, pools: list[int], units: list[V.Amount],
          env: Env, reserved: Optional[list[V.Amount]] = None, plan: Optional[list] = None, reuse: Any = NOT_READ) -> None:
    """Admit (§11.4): consume the own prefix, make room, allocate, number the admission, enter the
    body. On a `share content` pool (`plan` gives its content and R): touch the R hit blocks,
    allocate the rest from the free queue, identify the blocks of the first u tokens (docs/content.md §3)."""
    prog = cfg.program
    has_cache = st.get("cache") is not None
    if reuse is NOT_READ:
        reuse = evaluate(st["reuse"], env) if st.get("reuse") is not None else None
    leave_queue(cfg, pools[0], s.tid)
    hold = HoldState(stmt=tuple(ref), pools=[], alloc=[], position=[], advanced=[], admission=0,
                     depth=len(s.frames), stream=stream)
    largest: V.Amount = 0
    loads: list[tuple[int, V.Amount]] = []   # (pool, units) of each prefix loaded back from a tier
    for j, (p, u) in enumerate(zip(pools, units)):
        if plan is not None and plan[j] is not None:
            c, on_pool, from_tier = plan[j]
            r = on_pool + from_tier
            blocks = hold.blocks_of(j)
            b = prog.content_block(p)
            content.touch(cfg, p, c, on_pool, blocks)
            if from_tier:
                # the tier's blocks are loaded back (docs/content.md §6): refreshed on the tier
                # before the pool's allocation may spill onto it, then held as new blocks of the
                # pool, identified at once (their content is known), and loaded over the link
                content.tier_touch(cfg, prog.pools[p]["spill"]["pool"], c, on_pool, from_tier)
                cfg.pools[p].tier_hits += from_tier
                loads.append((p, from_tier * b))
            start_copies(cfg, allocate_blocks(cfg, p, from_tier + max(0, V.roundup_block(u, b) // b - r), blocks))
            content.identify(cfg, p, c, blocks, r * b)
            # an engine that speculates counts its lookahead (and a pad's placeholder drafts) in
            # u: the run's first step identifies its verified tokens instead (docs/language.md §7.3)
            if env.ictx is None or not (env.ictx.slots or env.ictx.lookahead):
                content.identify(cfg, p, c, blocks, u)
            while len(hold.content) < j:
                hold.content.append(None)
            hold.content.append(c)
            consumed: V.Amount = r * b
            alloc: V.Amount = len(blocks) * b
        else:
            consumed, loaded = consume_own_prefix(cfg, p, s, reuse) if has_cache and caches_in(cfg, p) else (0, 0)
            if loaded > 0:
                loads.append((p, loaded))
            alloc = V.roundup_block(u, prog.block[p])
            start_copies(cfg, make_room(cfg, p, alloc))
            cfg.pools[p].used += alloc
        largest = max(largest, consumed)
        cfg.pools[p].holders.append(s.tid)
        cfg.pools[p].admissions += 1
        hold.pools.append(p)
        hold.alloc.append(alloc)
        hold.position.append(consumed)
        hold.advanced.append(False)
        hold.reserved.append(reserved[len(hold.reserved)] if reserved else 0)
        cfg.records["admitted"].append([s.tid, prog.pools[p]["name"], alloc, consumed])
    s.attrs[CACHED] = Fraction(largest)   # the largest consumed prefix (or R·b reused blocks) among the hold's pools (defect 2)
    hold.admission = cfg.counters.next_adm
    s.adm_seq = cfg.counters.next_adm
    cfg.counters.next_adm += 1
    s.holds.append(hold)
    s.pending = None
    s.frames.append(Frame(st["body"], 0, "hold", tuple(ref), stream))
    s.status = READY
    s.loads = loads
    next_load(cfg, s)


def next_load(cfg: Config, s: Session) -> bool:
    """Start the session's next load-back (§11.8.1): the hold's pools in their order, one job at a
    time, each read when it starts; zero work takes no time and the next one follows at once.
    True when a job started (the session waits on a link), False when none is left."""
    while s.loads:
        p, loaded = s.loads.pop(0)
        if load_back(cfg, s, p, loaded):
            return True
    return False


def load_back(cfg: Config, s: Session, p: int, loaded: V.Amount) -> bool:
    """The part of the admitted prefix that came from p's `spill` tiers is copied back over p's
    link before the body starts (§11.8.1): the session's own job on the link, of p's `spill` work
    read with `size` = the units loaded back, `last` = now, `age` = 0, `waiting` = 0. Zero work
    takes no time (False: no job)."""
    spill = cfg.program.pools[p]["spill"]
    env = Env(cfg, s, at=spill.get("at"), what=f"pool {cfg.program.pools[p]['name']}: `spill`",
              ctx={"size": Fraction(loaded), "last": cfg.now, "age": Fraction(0), "waiting": Fraction(0)})
    w = link_work(cfg, p, env)
    if w == 0:
        return False
    job = Job(serial=s.tid, stage=spill["stage"], mode="plain", left=w, growing=None,
              admission=s.adm_seq if s.adm_seq is not None else -1)
    s.job = job
    s.status = ("stage", spill["stage"])
    start_job(cfg, job)
    return True


def scope_end(cfg: Config, s: Session) -> None:
    """The end of a hold's body: release, reset `computed`, clear preemption memory, client records."""
    hold = s.holds.pop()
    pools = list(hold.pools)
    lease = lease_clause(cfg, s, hold)
    if lease is not None:
        start_lease(cfg, s, hold, *lease, at=cfg.program.stmt(hold.stmt).get("at"))
    release_hold(cfg, s, hold, preempted=False)
    end_scope(cfg, s, hold.stmt, pools)


def lease_clause(cfg: Config, s: Session, hold: HoldState) -> Optional[tuple[int, Optional[Value]]]:
    """The hold's `lease P (t)` read at its scope end (Session moment, §11.4): (p, ends_at), ends_at
    = now + t or None for t = inf; None without a clause, with t = 0, or when the hold no longer
    holds P (the hold then ends as without the clause; docs/spec.md "Leases")."""
    stmt = cfg.program.stmt(hold.stmt)
    lease = stmt.get("lease")
    if lease is None:
        return None
    at = stmt.get("at")
    env = Env(cfg, s, hold.stream, at)
    t = evaluate(lease["time"], env)
    if t < 0:
        raise SpecError(f"a lease time must be >= 0 seconds, got {V.wire(t)}", at, cfg.program.files)
    p = resolve_ref(env, lease["pool"])
    if t == 0 or p not in hold.pools:
        return None   # nothing to lease: P was released early (`release P;`), or is not the hold's
    return p, (None if V.is_inf(t) else cfg.now + t)


def end_scope(cfg: Config, s: Session, stmt: tuple, pools: list[int]) -> None:
    """What a scope end does besides the release: `computed` := 0, the preemption memory of the
    hold's pools is cleared, the request's client records (an async end whose hold a preemption
    released already comes here directly, docs/async.md §3 item 5)."""
    s.attrs[COMPUTED] = Fraction(0)
    for p in pools:
        s.preempt_pos.pop(p, None)
    r = s.request
    if r is not None and r.stmt == stmt:
        response = cfg.now - r.submit
        record_client(cfg, "response", s, response)
        if r.first is not None and r.output is not None and not V.is_inf(r.output) and r.output > 1:
            ttft = r.first - r.submit
            record_client(cfg, "tpot", s, (response - ttft) / (r.output - 1))
        s.request = None


# -- async ends (docs/async.md §3) ----------------------------------------------------------------

def make_pending(cfg: Config, s: Session, e: int) -> None:
    """The end of a lagged hold's body (docs/async.md §3 item 1): a pending resident, no release."""
    prog = cfg.program
    hold = s.holds[-1]
    st = prog.stmt(hold.stmt)
    eos = 0
    if st.get("eos") is not None:
        eos = 1 if V.nz(eval_in_session(cfg, s, st["eos"], hold.stream, st.get("at"))) else 0
    mem = prog.memory_of[e]
    left, drafts = pending_want(s, eos)
    job = Job(serial=s.tid, stage=e, mode="decode", left=left,
              growing=mem if mem is not None and mem in hold.pools else None,
              admission=hold.admission, pending=True, drafts=drafts)
    s.job = job
    s.status = ("ending", e)
    add_resident(cfg, e, job)
    cfg.stages[e].pending.append(s.tid)


def apply_ends(cfg: Config, e: int) -> None:
    """The `ends` event (docs/async.md §3 item 5): each due end, in order, ends its hold's scope."""
    st = cfg.stages[e]
    due, st.due = st.due, []
    for serial in due:
        s = thread(cfg, serial)
        f = s.frames.pop()
        if s.job is not None:
            st.jobs.remove(s.job)
            s.job = None
            scope_end(cfg, s)
        else:
            # its pending resident was preempted: the hold is released already
            end_scope(cfg, s, f.stmt, [])
        s.status = READY
        cfg.ready.append(serial)


def first_token(cfg: Config, s: Session) -> None:
    """The first completion of a prefill run inside the request's hold records `ttft` (once)."""
    r = s.request
    if r is not None and r.first is None and any(h.stmt == r.stmt for h in s.holds):
        r.first = cfg.now
        record_client(cfg, "ttft", s, cfg.now - r.submit)


# -- statements ----------------------------------------------------------------------------------

def run_session(cfg: Config, s: Session) -> None:
    """Execute the session's statements in zero time until it blocks, yields or ends. A session
    back from a load-back with another one pending starts that first (§11.8.1)."""
    if s.loads and next_load(cfg, s):
        return
    count = 0
    while s.status == READY:
        if not s.frames:
            end_session(cfg, s)   # a branch's end too (§11.13)
            return
        f = s.frames[-1]
        block = cfg.program.blocks[f.block]
        if f.pc >= len(block):
            end_frame(cfg, s, f)
            continue
        st = block[f.pc]
        ref = (f.block, f.pc)
        f.pc += 1
        count += 1
        if count > STATEMENT_LIMIT:
            raise SpecError(f"session {s.tid} ran {STATEMENT_LIMIT} statements without blocking",
                            st.get("at"), cfg.program.files)
        if exec_stmt(cfg, s, st, ref, f.stream) == "yield":
            return


def end_frame(cfg: Config, s: Session, f: Frame) -> None:
    """The end of a frame: a `while` re-reads its guard, a `loop` restarts, a hold's scope ends."""
    if f.kind == "while":
        if f.stmt is None:
            raise SpecError("internal: a while frame without its statement")
        st = cfg.program.stmt(f.stmt)
        if V.truth(eval_in_session(cfg, s, st["cond"], f.stream, st.get("at")), "a while guard", st.get("at")):
            f.pc = 0
            return
        s.frames.pop()
    elif f.kind == "loop":
        f.pc = 0
    elif f.kind == "hold":
        e = lag_engine(cfg, s.holds[-1])
        if e is not None:
            make_pending(cfg, s, e)   # the frame stays until the `ends` event (docs/async.md)
            return
        s.frames.pop()
        scope_end(cfg, s)
    elif f.kind == "server":
        s.frames.pop()
        server_done(cfg, s)
    else:
        s.frames.pop()


def exec_stmt(cfg: Config, s: Session, st: dict, ref: tuple, stream: tuple) -> Optional[str]:
    """Execute one statement (docs/ir.md statements); "yield" when the session must give way."""
    prog = cfg.program
    op = st["op"]
    at = st.get("at")
    env = Env(cfg, s, stream, at)
    if (s.live_branches and op not in BRANCH_OPS) or (s.branch is not None and op in ("turn", "end")):
        raise SpecError(f"`{op}` in a branch, or before the `join;` of a fork: the linker refuses this "
                        "(docs/language.md §11.13)", at, prog.files)
    if op == "set":
        s.attrs[st["slot"]] = evaluate(st["expr"], env)
    elif op == "observe":
        record_observation(cfg, prog.observes[st["name"]], s, evaluate(st["expr"], env))
    elif op == "accept":
        exec_accept(cfg, s, st, env)
    elif op == "branch":
        if V.truth(evaluate(st["cond"], env), "a branch guard", at):
            s.frames.append(Frame(st["then"], 0, "plain", None, stream))
        elif st.get("else") is not None:
            s.frames.append(Frame(st["else"], 0, "plain", None, stream))
    elif op == "while":
        if V.truth(evaluate(st["cond"], env), "a while guard", at):
            s.frames.append(Frame(st["body"], 0, "while", ref, stream))
    elif op == "loop":
        s.frames.append(Frame(st["body"], 0, "loop", ref, stream))
    elif op == "choose":
        exec_choose(cfg, s, st, env)
    elif op == "turn":
        exec_turn(cfg, s)
    elif op == "end":
        end_session(cfg, s)
    elif op == "hold":
        exec_hold(cfg, s, st, ref, stream)
    elif op == "run":
        return exec_run(cfg, s, st, env)
    elif op == "flow":
        return exec_flow(cfg, s, st, env)
    elif op == "grow":
        p = resolve_ref(env, st["pool"])
        d = units_int(evaluate(st["units"], env), "grow amount", cfg, at, "negative growth {}")
        if hold_of(s, p) is None:
            raise SpecError(f"grow of pool {prog.pools[p]['name']} outside a hold of it", at, prog.files)
        grow(cfg, s, p, d, None)
    elif op == "load":
        p = resolve_ref(env, st["pool"])
        n = units_int(evaluate(st["units"], env), "load amount", cfg, at, "negative load {}")
        h = held_part(cfg, s, p)
        if h is None:
            raise SpecError(f"load of pool {prog.pools[p]['name']} outside a hold or lease of it", at, prog.files)
        i = h.pools.index(p)
        if h.position[i] + n > h.alloc[i]:
            raise SpecError("load beyond the allocation", at, prog.files)
        h.position[i] += n
        h.advanced[i] = True
    elif op == "drop":
        drop_entry(cfg, resolve_ref(env, st["pool"]), s.tid)
    elif op == "release":
        release_pool_early(cfg, s, resolve_ref(env, st["pool"]), at)
    elif op == "transfer":
        return exec_transfer(cfg, s, st, env)
    elif op == "transfer_end":
        exec_transfer_end(cfg, s, st, env)
    elif op == "fork":
        exec_fork(cfg, s, st, stream)
    elif op == "join":
        exec_join(s)
    else:
        raise prog.unsupported(f"statement {op}", at)
    return None


# What a thread may execute between a `fork` and its `join;` (docs/language.md §11.13); a branch
# itself may execute everything but `turn;` and `end;`.
BRANCH_OPS = frozenset({"set", "observe", "branch", "while", "loop", "choose", "run", "fork", "join", "flow"})


def exec_choose(cfg: Config, s: Session, st: dict, env: Env) -> None:
    """`choose x in n by (k…)`: the index with the least keys, ties to the smallest (§9)."""
    n = V.as_int(evaluate(st["count"], env), "choose count", st.get("at"))
    if n < 1:
        raise SpecError("choose over an empty range", st.get("at"), cfg.program.files)
    best = 0
    best_key: Optional[tuple] = None
    for j in range(n):
        s.attrs[st["slot"]] = Fraction(j)
        key = tuple(evaluate(k, env) for k in st["keys"])
        if best_key is None or key < best_key:
            best, best_key = j, key
    s.attrs[st["slot"]] = Fraction(best)


def exec_accept(cfg: Config, s: Session, st: dict, env: Env) -> None:
    """`accept (n, alpha);` (§7.3), the `turn` block's last statement: the turn's acceptance
    counts, n values of the acceptance law (serq.draws.accept_count) from the turn's stream, one
    per output number, in place of a trace row's counts."""
    prog = cfg.program
    at = st.get("at")
    try:
        n = draws.accept_outputs(draws.as_doubles([evaluate(st["count"], env)])[0])
        alpha = evaluate(st["rate"], env)
        draws.check_args(draws.ACCEPT_LAW, draws.as_doubles([alpha]))   # also when n = 0
        counts = [draws.accept_value(float(prog.workload_data.take(cfg, s, env.stream, draws.ACCEPT_LAW, [alpha], at)))
                  for _ in range(n)]
    except draws.DrawError as exc:
        raise SpecError(str(exc), at, prog.files) from None
    s.accept = counts


def exec_turn(cfg: Config, s: Session) -> None:
    """`turn;` (§11.3): turn_no += 1, load the next trace turn, run `turn` then the spliced server."""
    prog = cfg.program
    s.attrs[TURN_NO] = s.attrs[TURN_NO] + 1
    s.turns += 1
    s.turn_start, s.turn_warm, s.turn_called = cfg.now, cfg.warm, False
    prog.workload_data.note_turn(s)
    trace = prog.workload.get("trace")
    if trace is not None:
        if s.trace is None:
            raise SpecError(f"internal: session {s.serial} has no trace pick")
        rows = trace["sessions"][s.trace[0]]
        k = s.trace[1]
        if k < len(rows):
            new, out, think, forced = (V.value_from_wire(x) for x in rows[k][:4])
            # speculative decoding's acceptance counts by output number, when the row has them (§7.3)
            s.accept = list(rows[k][4]) if len(rows[k]) > 4 else None
            s.attrs[NEW], s.attrs[OUT], s.attrs[THINK], s.attrs[FORCED] = new, out, think, forced
            s.attrs[MORE] = Fraction(1 if k + 1 < len(rows) else 0)
            s.trace[1] = k + 1
        else:
            s.attrs[MORE] = Fraction(0)
    if prog.workload.get("server") is not None:
        s.frames.append(Frame(prog.workload["server"], 0, "server", None, ("session",)))
    if prog.workload.get("turn") is not None:
        s.frames.append(Frame(prog.workload["turn"], 0, "plain", None, ("turn", s.turns)))


def exec_run(cfg: Config, s: Session, st: dict, env: Env) -> Optional[str]:
    """`run s (w)` (§11.5, §11.6): a job on the stage; zero work completes at once and yields."""
    prog = cfg.program
    at = st.get("at")
    stage = resolve_ref(env, st["stage"])
    kind = prog.stages[stage]["kind"]
    w = evaluate(st["work"], env)
    if w < 0:   # worded as serq_fast words them (serq.exact)
        raise SpecError(negative_work(w), at, prog.files)
    if V.is_inf(w):
        raise SpecError(work_not_finite(w), at, prog.files)
    mode = st["mode"]
    growing = st.get("growing")
    if kind == "step" and s.live_branches:
        raise SpecError(f"a run on engine {prog.stages[stage]['name']} before the `join;` of a "
                        "fork: the linker refuses this (docs/language.md §11.13)", at, prog.files)
    if kind == "step":
        if w.denominator != 1:
            # tokens are whole, like `tokens cap` and `each at most` (docs/spec.md)
            raise SpecError(f"engine {prog.stages[stage]['name']}: run work must be a whole number of "
                            f"tokens, got {number_text(w)}", at, prog.files)
        w = int(w)
        if growing is not None and hold_of(s, growing) is None:
            raise SpecError(f"a run growing pool {prog.pools[growing]['name']} outside a hold of it", at, prog.files)
    drafts = 0
    if st.get("speculate") is not None:
        sat = st["speculate"].get("at") or at
        k = evaluate(st["speculate"]["drafts"], Env(cfg, s, env.stream, sat))
        if V.is_inf(k) or k < 0 or k.denominator != 1:
            raise SpecError(f"speculate: the drafts per step must be a whole number >= 0, got {number_text(k)}",
                            sat, prog.files)
        drafts = int(k)
        if kind == "step" and prog.stages[stage].get("lag", 0) == 1:
            s.spec_drafts = drafts   # a pending resident's wasted step has them (docs/async.md §8)
    if w == 0:
        # zero work completes at once: no event, the session is ready again at the back (defect 4)
        cfg.records["finished"].append([prog.stages[stage]["name"], s.tid])
        if mode == "prefill":
            first_token(cfg, s)
        cfg.ready.append(s.tid)
        return "yield"
    job = Job(serial=s.tid, stage=stage, mode=mode, left=w, growing=growing,
              admission=s.adm_seq if s.adm_seq is not None else -1, drafts=drafts)
    s.job = job
    s.status = ("stage", stage)
    if kind == "step":
        add_resident(cfg, stage, job)
    else:
        start_job(cfg, job)
    return None


def exec_flow(cfg: Config, s: Session, st: dict, env: Env) -> Optional[str]:
    """`run a, b, … (w)` (§11.14): one job present at all the stages at once; zero work completes
    at once at every stage and yields, as `run` does."""
    prog = cfg.program
    at = st.get("at")
    stages = [resolve_ref(env, ref) for ref in st["stages"]]
    w = evaluate(st["work"], env)
    if w < 0: 
        raise SpecError(negative_work(w), at, prog.files)
    if V.is_inf(w):
        raise SpecError(work_not_finite(w), at, prog.files)
    try:
        done = start_flow(cfg, s, stages, w)
    except SpecError as exc:
        raise SpecError(exc.message, at, prog.files) from None
    return "yield" if done else None


def held_part(cfg: Config, s: Session, p: int) -> Optional[HoldState]:
    """The session's allocation of pool p that `load` advances: its innermost hold of p, else its
    lease of p (a leased allocation keeps its position, §11.4), else None."""
    h = hold_of(s, p)
    if h is None:
        lease = lease_of(cfg, p, s.tid)
        if lease is not None:
            h = lease.part
    return h


def exec_transfer(cfg: Config, s: Session, st: dict, env: Env) -> Optional[str]:
    """`transfer S (w) from P to Q (n);` (§11.15), the copy: the session holds P (the KV being
    copied) and Q (where it lands), each by a hold or a lease, and runs w on the link S as
    `run S (w);` does (on links a, b, … as `run a, b, … (w);`). The landing (`exec_transfer_end`) is the next statement, run when the
    session resumes after the job, so a transfer is `run S (w); load Q (n); release P;`."""
    prog = cfg.program
    at = st.get("at")
    p, q = resolve_ref(env, st["from"]), resolve_ref(env, st["to"])
    if p == q:
        raise SpecError(f"transfer from pool {prog.pools[p]['name']} to itself: the two pool indices name one "
                        "pool; name the KV's pool and another", at, prog.files)
    for pool, role in ((p, "from"), (q, "to")):
        if held_part(cfg, s, pool) is None:
            raise SpecError(f"transfer {role} pool {prog.pools[pool]['name']}: the session holds no allocation of it "
                            "(a hold or a lease); take it in a `hold` around the transfer, or keep it with "
                            "`lease`", at, prog.files)
    if "stages" in st:   # over several links at once: a flow (§11.14), the sender's and the receiver's
        return exec_flow(cfg, s, {"stages": st["stages"], "work": st["work"], "at": at}, env)
    return exec_run(cfg, s, {"stage": st["stage"], "mode": "plain", "work": st["work"], "growing": None, "at": at},
                    env)


def exec_transfer_end(cfg: Config, s: Session, st: dict, env: Env) -> None:
    """The landing of a transfer, when its copy's job has completed: Q's position advances by n
    exactly as `load Q (n);`, then P is released exactly as `release P;` (the lease of P ends, or
    the hold's allocation of P goes, its `cache` clause read now)."""
    prog = cfg.program
    at = st.get("at")
    p, q = resolve_ref(env, st["from"]), resolve_ref(env, st["to"])
    n = evaluate(st["units"], env)
    if n < 0:   # worded as serq_fast words it (serq.exact)
        raise SpecError(negative_transfer_amount(n, prog.pools[q]["name"]), at, prog.files)
    n = units_int(n, "transfer amount", cfg, at)
    h = held_part(cfg, s, q)
    if h is None:
        raise SpecError(f"transfer to pool {prog.pools[q]['name']}: the session no longer holds it when the copy "
                        "ends (its lease ran out during the copy); lease it for longer", at, prog.files)
    i = h.pools.index(q)
    if h.position[i] + n > h.alloc[i]:
        raise SpecError(f"transfer to pool {prog.pools[q]['name']}: position {number_text(h.position[i] + n)} beyond "
                        f"the allocation {number_text(h.alloc[i])}; hold at least the position plus n", at,
                        prog.files)
    h.position[i] += n
    h.advanced[i] = True
    release_pool_early(cfg, s, p, at)


# -- settle --------------------------------------------------------------------------------------

def retry_growers(cfg: Config, p: int) -> None:
    """Stalled growths in FIFO order; the head blocks the rest (§11.2, §11.7)."""
    prog = cfg.program
    st = cfg.pools[p]
    while st.growers:
        s = thread(cfg, st.growers[0])
        if s.growth is None:
            raise SpecError(f"internal: grower {s.tid} of pool {prog.pools[p]['name']} has no growth")
        _, target = s.growth
        h = hold_on(s, p)
        i = h.pools.index(p)
        need = target - h.alloc[i]
        if st.used + need > prog.caps[p]:
            return
        start_copies(cfg, add_units(cfg, p, h, i, need))
        st.growers.pop(0)
        s.growth = None
        if s.job is not None:
            s.status = ("stage", s.job.stage)
        else:
            s.status = READY
            cfg.ready.append(s.tid)


def settle(cfg: Config) -> None:
    """Run ready sessions in FIFO order; retry growers and admit heads of non-engine pools; repeat (§11.2)."""
    prog = cfg.program
    readied: dict = {}
    while True:
        while cfg.ready:
            serial = cfg.ready.pop(0)
            s = thread(cfg, serial)
            if s.status == READY:
                readied[serial] = readied.get(serial, 0) + 1
                if readied[serial] > READY_LIMIT:
                    raise SpecError(f"session {serial} became ready {READY_LIMIT} times in one instant")
                run_session(cfg, s)
        for p in range(len(prog.pools)):
            retry_growers(cfg, p)
            if prog.pools[p].get("admitted_by") is None:
                while True:
                    head = select_head(cfg, p)
                    if head is None:
                        break
                    s = thread(cfg, head.serial)
                    outcome = try_admit(cfg, s)
                    if outcome == BLOCKED:
                        break
                    if outcome == ADMITTED:
                        cfg.ready.append(s.tid)
        if not cfg.ready:
            return

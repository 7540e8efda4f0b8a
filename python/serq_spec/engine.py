"""The step engine (docs/language.md §11.6): one iteration, its admission, its end.

Design principle (as in vLLM's scheduler): there is no prefill or decode phase. An iteration
hands one token budget to the residents in serving order — a decode takes one token, a prefill
up to the per-run cap — then to waiting requests admitted with the budget that is left. Growth
happens block by block as positions advance; a growth that cannot be had preempts (§11.7).

The engine values and the budget moment (§4.5) are read by expressions, so they are in expr.py;
the residents' order (`add_resident`) is in stages.py, which sessions.py uses too.
"""

from __future__ import annotations

from typing import Optional

from serq.exact import iteration_cost_out_of_range
from serq.irfile import field_at
from serq.wire import Value

from . import values as V
from .claims import check_iteration
from .config import Assign, Config, IterCtx, Job, hold_on, thread
from .content import identify
from .errors import At, SpecError
from .events import schedule_event
from .expr import Env, budget_moment, evaluate
from .growth import grow
from .lag import identifies, make_due
from .pools import select_head
from .sessions import BLOCKED, REJECTED, first_token, run_session, try_admit
from .stages import estimate_admission, estimate_iteration


# -- the iteration -------------------------------------------------------------------------------

def has_work(cfg: Config, e: int) -> bool:
    """Residents, or a waiting head in a pool the engine admits."""
    return bool(cfg.stages[e].jobs) or any(cfg.pools[p].queue for p in cfg.program.admitted_pools.get(e, []))


def start_iteration(cfg: Config, e: int) -> bool:
    """start_iteration(E) of §11.6: form the batch; start it if it has tokens or preempted."""
    st = cfg.stages[e]
    spec = cfg.program.stages[e]
    if st.iteration is not None or not has_work(cfg, e):
        return False
    registers_before = list(st.registers)
    ictx = IterCtx(e)
    budget_moment(cfg, ictx)
    st.forming = ictx
    try:
        run_schedule(cfg, ictx, spec["schedule"])
    finally:
        st.forming = None
    lagged = spec.get("lag", 0) == 1
    if not ictx.assign and ictx.preempted == 0:
        st.registers = registers_before   # no iteration: this attempt's register updates are undone
        if lagged:
            make_due(cfg, e, cfg.now)   # vLLM's empty call processes the output at once
        return False
    at = field_at(spec, "cost")
    env = Env(cfg, engine=e, ictx=ictx, at=at, what=f"engine {spec['name']}: execute")
    cost = evaluate(spec["cost"], env)
    check_iteration(cfg, e, env)   # the batch is formed: iteration claims read what `execute` reads
    tokens = sum(a.tokens for a in ictx.assign)
    if V.is_inf(cost) or cost < 0:
        raise SpecError(f"engine {spec['name']}: execute: {iteration_cost_out_of_range(cost)}", at, cfg.program.files)
    if tokens > 0 and cost == 0:
        raise SpecError(f"engine {spec['name']}: execute: an iteration with {tokens} tokens costs 0", at,
                        cfg.program.files)
    est = st.engine_est()
    if est is not None:   # the iteration is formed: its cycle opens (docs/spec.md "Online estimates")
        estimate_iteration(est, cfg.now, cost)
    if lagged:
        make_due(cfg, e, cfg.now + cost)   # scheduled before iter_end: it is handled first
    ev = schedule_event(cfg, cfg.now + cost, "iter_end", e)
    st.iteration = {"end": ev.time, "seq": ev.seq, "assign": ictx.assign}
    cfg.records["iterations"].append({
        "stage": spec["name"], "start": cfg.now, "end": ev.time,
        "assign": [[a.serial, a.mode, a.tokens] for a in ictx.assign],
        "preempted": ictx.preempted, "admitted": ictx.admitted})
    return True


def run_schedule(cfg: Config, ictx: IterCtx, stmts: list) -> None:
    """Run the schedule's statements in order (§11.6); stop when the iteration is stopped."""
    e = ictx.engine
    for s in stmts:
        if ictx.stopped:
            return
        op = s["op"]
        if op == "advance":
            serve_running(cfg, ictx, s)
        elif op == "admit":
            admit_waiting(cfg, ictx, s)
        elif op == "exclusive_prefill":
            exclusive_prefill(cfg, ictx, s)
        elif op == "set":
            cfg.stages[e].registers[s["register"]] = evaluate(s["expr"], Env(cfg, engine=e, ictx=ictx, at=s.get("at")))
        elif op == "branch":
            c = evaluate(s["cond"], Env(cfg, engine=e, ictx=ictx, at=s.get("at")))
            if V.truth(c, "a schedule branch guard", s.get("at")):
                run_schedule(cfg, ictx, s["then"])
            else:
                run_schedule(cfg, ictx, s.get("else") or [])
        else:
            raise cfg.program.unsupported(f"schedule statement {op}", s.get("at"))


def next_unserved(cfg: Config, ictx: IterCtx, order: Optional[dict], stmt_at: At = None) -> Optional[Job]:
    """The first resident, in the serving order as it stands now, not yet served."""
    e = ictx.engine
    cands = [(i, j) for i, j in enumerate(cfg.stages[e].jobs) if j.serial not in ictx.served]
    if not cands:
        return None
    kind = order["kind"] if order else "admission"
    if kind == "admission":
        return cands[0][1]
    if kind == "decode_first":
        return min(cands, key=lambda c: (0 if c[1].mode == "decode" else 1, c[0]))[1]
    keys = order["keys"] if order else []

    def key(c: tuple[int, Job]) -> tuple:
        env = Env(cfg, thread(cfg, c[1].serial), engine=e, ictx=ictx, job=c[1], at=stmt_at,
                  what=f"engine {cfg.program.stages[e]['name']}: a serving-order key")
        return tuple(evaluate(k, env) for k in keys) + (c[0],)
    return min(cands, key=key)[1]


def serve_running(cfg: Config, ictx: IterCtx, stmt: dict) -> None:
    """`advance running`: serve every resident once, in serving order, while budget is left."""
    while not ictx.stopped:
        job = next_unserved(cfg, ictx, stmt.get("order"), stmt.get("at"))
        if job is None:
            return
        serve(cfg, ictx, job, stmt.get("only"), ictx.each.get(id(stmt), V.INF), stmt.get("at"))


def serve(cfg: Config, ictx: IterCtx, job: Job, only: Optional[dict], cap: Value, at: At = None) -> None:
    """One resident's turn: want, tokens = min(want, left), growth, position, budget (§11.6)."""
    ictx.served.add(job.serial)
    s = thread(cfg, job.serial)
    if only is not None:
        env = Env(cfg, s, engine=ictx.engine, ictx=ictx, job=job, at=at,
                  what=f"engine {cfg.program.stages[ictx.engine]['name']}: `only`")
        if not V.nz(evaluate(only, env)):
            return
    decoding = job.mode == "decode"
    want = wanted(job, cap)
    if job.drafts and job.growing is not None and not V.is_inf(ictx.limit):
        # a step's positions stay below the limit, room for the token it samples (§7.3)
        gh = hold_on(s, job.growing)
        want = min(want, int(ictx.limit) - 1 - int(gh.position[gh.pools.index(job.growing)]))
    if ictx.slots and not V.is_inf(ictx.left) and ictx.left <= ictx.slots:
        ictx.stopped = True   # no budget left beyond the drafting slots: the iteration is full
        return
    tokens = want if V.is_inf(ictx.left) else min(want, int(ictx.left) - int(ictx.slots))
    if not decoding and ictx.granule and tokens < job.left:
        tokens = int(tokens // ictx.granule) * int(ictx.granule)
        if tokens == 0:
            ictx.no_admit = True
    if tokens <= 0:
        return
    pos_before = None
    if job.growing is not None:
        if s.status[0] == "growing":
            return   # a stalled resident gets no tokens until its growth succeeds
        h = hold_on(s, job.growing)
        i = h.pools.index(job.growing)
        # the lookahead units past the chunk, never past the limit (§7.3)
        reach = h.position[i] + tokens + ictx.lookahead
        need = (reach if V.is_inf(ictx.limit) else min(reach, max(ictx.limit, h.position[i] + tokens))) - h.alloc[i]
        if need > 0 and not grow(cfg, s, job.growing, need, ictx):
            if s.status[0] == "queued" or (job.pending and s.job is not job):
                ictx.stopped = True   # a grower that preempts itself ends the running loop
            return
        pos_before = h.position[i]
        h.position[i] += tokens
        h.advanced[i] = True
        if cfg.pools[job.growing].content is not None and identifies(job):
            # the blocks these tokens fill are identified as they are scheduled (vLLM's
            # cache_blocks(request, num_computed + num_new) at every step; docs/content.md §3);
            # a speculative step's drafts are not verified yet: only its first token counts (§7.3)
            identify(cfg, job.growing, h.content_of(i), h.blocks_of(i), verified_upto(job, pos_before, tokens))
    ictx.assign.append(Assign(job.serial, job.mode, tokens, pos_before, job.pending))
    if not V.is_inf(ictx.left):
        ictx.left -= tokens + ictx.slots
        if ictx.left <= ictx.slots:
            ictx.stopped = True


def verified_upto(job: Job, pos_before: V.Amount, tokens: int) -> V.Amount:
    """The position up to which a step's tokens are verified (§7.3): all of them without drafts;
    a decode's own token; a prefill's work (its placeholder drafts are not)."""
    if not job.drafts:
        return pos_before + tokens
    return pos_before + min(tokens, 1 if job.mode == "decode" else job.left)


def wanted(job: Job, cap: Value) -> int:
    """What a resident asks of one iteration: a decode one token (1 + k with k drafts, §7.3, cut by
    the per-run cap like a chunk), a prefill its work left up to the per-run cap."""
    if job.mode == "decode":
        if job.drafts and job.left > 0:
            return 1 + job.drafts if V.is_inf(cap) else min(1 + job.drafts, int(cap))
        return min(1, job.left)
    want = job.left + job.drafts   # a prefill's placeholder drafts ride on its last step (§7.3)
    return want if V.is_inf(cap) else min(want, int(cap))


def verified(cfg: Config, job: Job, a: Assign) -> int:
    """After a step of a run with drafts (§7.3), the work it did; the rejected drafts give their
    positions back. A decode verifies a.tokens − 1 drafts and accepts the turn's acceptance count
    at its output number (the count's length minus the outputs left), capped by the drafts
    scheduled: it did 1 + accepted outputs. A prefill's drafts past its work are placeholders,
    none accepted."""
    s = thread(cfg, job.serial)
    if job.mode == "decode":
        drafts = a.tokens - 1
        counts = cfg.sessions[s.serial].accept or []   # the turn's, so a branch's request reads its session's (§11.13)
        k = len(counts) - job.left
        accepted = min(counts[k], drafts) if 0 <= k < len(counts) else 0
        done = min(1 + accepted, job.left)
    else:
        done = min(a.tokens, job.left)
        drafts, accepted = a.tokens - done, 0
    if drafts > accepted and job.growing is not None:
        h = hold_on(s, job.growing)
        h.position[h.pools.index(job.growing)] -= drafts - accepted
    return done


def admit_waiting(cfg: Config, ictx: IterCtx, stmt: dict) -> None:
    """`admit waiting`: while budget is left and nothing was preempted, admit one and serve it (§11.6)."""
    cap = ictx.each.get(id(stmt), V.INF)
    only = stmt.get("only")
    while not ictx.stopped:
        if ictx.left <= ictx.slots or ictx.preempted > 0 or ictx.no_admit:
            return
        if stmt.get("while") is not None:
            c = evaluate(stmt["while"], Env(cfg, engine=ictx.engine, ictx=ictx, at=stmt.get("at")))
            if not V.truth(c, "an admit while guard", stmt.get("at")):
                return
        if not admit_one(cfg, ictx, only, stmt.get("at")):
            return
        ictx.admitted += 1
        while not ictx.stopped:
            job = next_unserved(cfg, ictx, None)
            if job is None:
                break
            serve(cfg, ictx, job, None, cap)


def exclusive_prefill(cfg: Config, ictx: IterCtx, stmt: dict) -> None:
    """`exclusive prefill` (§11.6): a resident prefill runs alone (decodes stall); otherwise the
    decodes are chosen tentatively and a waiting request that fits with the full budget replaces
    them and takes the whole budget. After this statement nothing more is admitted."""
    cap = ictx.each.get(id(stmt), V.INF)
    ictx.no_admit = True
    def stalled(j: Job) -> bool:
        return thread(cfg, j.serial).status[0] == "growing"

    prefill = next((j for j in cfg.stages[ictx.engine].jobs
                    if j.mode != "decode" and j.serial not in ictx.served and not stalled(j)), None)
    if prefill is None and ictx.left > 0 and ictx.preempted == 0:
        if admit_one(cfg, ictx):                       # budget_left(E) = the full budget here
            ictx.admitted += 1
            prefill = next((j for j in cfg.stages[ictx.engine].jobs
                            if j.mode != "decode" and j.serial not in ictx.served and not stalled(j)), None)
    if prefill is not None:
        serve(cfg, ictx, prefill, None, cap)
        ictx.stopped = True                            # it runs alone: decodes stall
        return
    # The residents are read as they stand now, not from a snapshot: an earlier decode's growth
    # may preempt a later one, which then is no resident and is not served (§11.6, §11.7).
    while not ictx.stopped:
        j = next((j for j in cfg.stages[ictx.engine].jobs
                  if j.mode == "decode" and j.serial not in ictx.served), None)
        if j is None:
            return
        serve(cfg, ictx, j, None, cap)


def admit_one(cfg: Config, ictx: IterCtx, only: Optional[dict] = None, at: At = None) -> bool:
    """admit_one(E, left): the first admitted pool with a head; admit it if it fits, run it at once.
    A head rejected because it can never fit has left its queue: the next head is tried in its
    place, as if it had not been there (docs/spec.md "A hold that can never fit").
    `only` (from `admit waiting only (e)`): a head for which e is 0 is not tried at all and stops
    admission like a head that does not fit (head of line; docs/spec.md "Ambiguities resolved")."""
    for p in cfg.program.admitted_pools.get(ictx.engine, []):
        while (head := select_head(cfg, p)) is not None:
            s = thread(cfg, head.serial)
            if only is not None:
                env = Env(cfg, s, engine=ictx.engine, ictx=ictx, at=at,
                          what=f"engine {cfg.program.stages[ictx.engine]['name']}: `admit waiting only`")
                if not V.nz(evaluate(only, env)):
                    return False   # excluded head: head-of-line, admission stops
            outcome = try_admit(cfg, s, ictx)
            if outcome == REJECTED:
                continue
            if outcome == BLOCKED:
                return False   # head-of-line: admission stops for this iteration
            ictx.fresh.add(s.tid)   # the thread: a sub-agent's request is its own (§11.13)
            est = cfg.stages[ictx.engine].engine_est()
            if est is not None:   # before the session runs on: what it reads includes this admission
                estimate_admission(est, head.joined, cfg.now)
            run_session(cfg, s)
            return True
    return False


def iteration_end(cfg: Config, e: int) -> None:
    """IterEnd: assigned jobs lose their tokens; finished ones leave in assignment order, ready (§11.6)."""
    st = cfg.stages[e]
    it = st.iteration
    if it is None:
        raise SpecError(f"internal: iter_end of engine {cfg.program.stages[e]['name']} without an iteration")
    st.iteration = None
    byserial = {j.serial: j for j in st.jobs}
    # a pending resident's EOS token is discarded: its end was applied before this IterEnd
    assign = [a for a in it["assign"] if not a.pending]
    for a in assign:
        job = byserial[a.serial]
        job.left -= verified(cfg, job, a) if job.drafts else a.tokens
    for a in assign:
        job = byserial[a.serial]
        if job.left == 0:
            st.jobs.remove(job)
            s = thread(cfg, job.serial)
            s.job = None
            cfg.records["finished"].append([cfg.program.stages[e]["name"], job.serial])
            if job.mode == "prefill":
                first_token(cfg, s)
            if s.status == ("stage", e):
                s.status = ("ready",)
                cfg.ready.append(s.tid)

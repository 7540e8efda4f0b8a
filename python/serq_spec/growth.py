"""Growth and preemption (docs/language.md §11.7).

`grow` adds whole blocks to a hold; when the pool is full it preempts a victim chosen by the
pool's `preempt` rule (the engine resident admitted last for `lifo`), or stalls (`none`, or no
candidate). A preempted hold caches up to its position, records `computed`, and goes back to
the head of its first pool's queue; re-admission re-reads its header.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Optional

from . import values as V
from .config import Assign, Config, IterCtx, Job, Session, admission_of, hold_on, job_of, thread
from .expr import Env, evaluate, resolve_ref
from .lag import drop_outcome, is_candidate
from .pools import add_units, enqueue, leave_queue, release_hold
from .program import COMPUTED
from .stages import start_copies, withdraw_job


def grow(cfg: Config, s: Session, p: int, d: V.Amount, ictx: Optional[IterCtx]) -> bool:
    """Grow s's hold on p by d units, rounded up to the block; True on success (§11.7)."""
    prog = cfg.program
    h = hold_on(s, p)
    i = h.pools.index(p)
    target = V.roundup_block(h.alloc[i] + d, prog.block[p])
    st = cfg.pools[p]
    while True:
        need = target - h.alloc[i]
        if st.used + need <= prog.caps[p]:
            start_copies(cfg, add_units(cfg, p, h, i, need))
            return True
        victim = choose_victim(cfg, p)
        if victim is None:
            if s.status[0] == "ending":
                return False   # an EOS token that would stall is not served (docs/async.md §3 item 2)
            stall(cfg, s, p, target)
            return False
        preempt(cfg, victim, p, ictx)
        if victim is s:
            return False


def stall(cfg: Config, s: Session, p: int, target: V.Amount) -> None:
    """No room and no victim: the session waits in p's growers (retried at every settle)."""
    s.status = ("growing", p)
    s.growth = [p, target]
    cfg.pools[p].growers.append(s.tid)


def preemption_candidates(cfg: Config, p: int) -> list[Session]:
    """Holders of p that are residents of a step engine whose memory is p; for a pool that is no
    engine's memory, every holder holding p in a scope except one sitting in a delay stage (§11.7);
    an ending session only by `lag.is_candidate` (docs/async.md §3 item 3). A thread with branches
    running is none: its hold cannot go back to its statement under them (§11.13)."""
    prog = cfg.program
    engines = [e for e in prog.engines if prog.memory_of[e] == p]
    out = []
    for serial in cfg.pools[p].holders:
        s = thread(cfg, serial)
        if s.live_branches:
            continue
        if s.status[0] == "ending":
            if not is_candidate(s, p):
                continue
        if engines:
            if s.job is not None and s.job.stage in engines:
                out.append(s)
        elif not in_delay(cfg, s):
            out.append(s)
    return out


def in_delay(cfg: Config, s: Session) -> bool:
    """Is the session a job of a delay stage?"""
    return s.status[0] == "stage" and cfg.program.stages[s.status[1]]["kind"] == "delay"


def choose_victim(cfg: Config, p: int) -> Optional[Session]:
    """`lifo`: the latest admitted candidate; `by (k…)`: least keys, ties to the latest admitted."""
    spec = cfg.program.pools[p]["preempt"]
    if spec["kind"] == "none":
        return None
    cands = preemption_candidates(cfg, p)
    if not cands:
        return None
    if spec["kind"] == "lifo":
        return max(cands, key=admission_of)
    best: Optional[Session] = None
    best_key: Optional[tuple] = None
    for s in cands:
        h = hold_on(s, p)
        i = h.pools.index(p)
        resident = s.job if s.job is not None and s.job.stage in cfg.program.engines else None
        env = Env(cfg, s, engine=resident.stage if resident else None, job=resident,
                  what=f"pool {cfg.program.pools[p]['name']}: a preemption key", at=spec.get("at"),
                  ctx={"position": Fraction(h.position[i]), "computed": s.attrs[COMPUTED]})
        key = tuple(evaluate(k, env) for k in spec["keys"]) + (-admission_of(s),)
        if best_key is None or key < best_key:
            best, best_key = s, key
    return best


def preempt(cfg: Config, v: Session, p: int, ictx: Optional[IterCtx]) -> None:
    """Preempt v's hold on p (§11.7): computed, stuck, detach, release caching to the position, requeue."""
    prog = cfg.program
    v.loads = []   # the load-backs of a hold it gives up (§11.8.1); a re-admission reads them again
    if v.job is not None and v.job.pending:
        preempt_pending(cfg, v, p, ictx)
        return
    h = hold_on(v, p)
    i = h.pools.index(p)
    job = v.job
    if job is None or job.stage not in prog.engines:
        detach_free(cfg, v)   # a holder of a pool that is no engine's memory (not in an engine)
    else:
        detach_resident(cfg, v, ictx)
    # lag 1: the drafts an unseen outcome rejected are not computed (docs/async.md §8)
    h.position[i] -= drop_outcome(v, p)
    computed = h.position[i]
    prev = v.preempt_pos.get(p)
    if prev is not None and computed <= prev and not v.stuck:
        v.stuck = True
        cfg.pools[p].stuck += 1
    v.preempt_pos[p] = computed
    v.attrs[COMPUTED] = Fraction(computed)   # set before the release (docs/language.md §11.12)
    if job is not None and job.stage in prog.engines:
        cfg.stages[job.stage].jobs.remove(job)
        v.job = None
    if v.status[0] == "growing":
        q = v.status[1]
        cfg.pools[q].growers.remove(v.tid)
        v.growth = None
    k = v.holds.index(h)
    for inner in reversed(v.holds[k:]):
        release_hold(cfg, v, inner, preempted=True)
    v.holds = v.holds[:k]
    v.frames = v.frames[:h.depth]
    v.pending = (h.stmt[0], h.stmt[1], h.stream)
    requeue = prog.pools[p]["preempt"].get("requeue", "head")
    stmt = prog.stmt(h.stmt)
    first = resolve_ref(Env(cfg, v, h.stream, stmt.get("at")), stmt["pools"][0]["pool"])
    enqueue(cfg, first, v, head=(requeue != "tail"))
    cfg.pools[p].preemptions += 1
    if ictx is not None:
        ictx.preempted += 1
    cfg.records["preempted"].append([v.tid, prog.pools[p]["name"], computed])


def preempt_pending(cfg: Config, v: Session, p: int, ictx: Optional[IterCtx]) -> None:
    """Preempt a pending resident (docs/async.md §3 item 3): released as a preemption, not
    requeued; its end stays pending (or due)."""
    prog = cfg.program
    h = v.holds[-1]
    i = h.pools.index(p)
    job = job_of(v)
    detach_resident(cfg, v, ictx)
    h.position[i] -= drop_outcome(v, p)   # lag 1: its last outcome is never seen (docs/async.md §8)
    computed = h.position[i]
    v.attrs[COMPUTED] = Fraction(computed)
    cfg.stages[job.stage].jobs.remove(job)
    v.job = None
    for q in h.pools:
        v.preempt_pos.pop(q, None)
    v.holds.pop()
    release_hold(cfg, v, h, preempted=True)
    cfg.pools[p].preemptions += 1
    if ictx is not None:
        ictx.preempted += 1
    cfg.records["preempted"].append([v.tid, prog.pools[p]["name"], computed])


def detach_free(cfg: Config, v: Session) -> None:
    """Detach a victim that is no engine resident (a pool that is no engine's memory, §11.7):
    a ready session leaves `ready`; one queued for a nested hold leaves that queue (its pending hold
    is replaced by the preempted one); a stalled growth is undone by `preempt`; the grower itself
    needs nothing. A job of a fifo or ps stage leaves it (`stages.withdraw_job`; a delay job is no
    candidate)."""
    kind = v.status[0]
    if kind == "ready":
        if v.tid in cfg.ready:
            cfg.ready.remove(v.tid)
    elif kind == "queued":
        leave_queue(cfg, v.status[1], v.tid)
        v.pending = None
    elif kind == "stage":
        withdraw_job(cfg, job_of(v))
        v.job = None


def detach_resident(cfg: Config, v: Session, ictx: Optional[IterCtx]) -> None:
    """An engine resident victim leaves the batch it is in (§11.6). A victim already served in the
    iteration being formed returns its tokens to the budget. A resident of an iteration in flight
    (of another engine sharing the pool, or of any engine when an explicit `grow` preempts) leaves
    that batch, whose cost and end stay as they are. Either way its chunk was not computed, so its
    position goes back to before it (docs/spec.md "Ambiguities resolved")."""
    job = job_of(v)
    in_flight = cfg.stages[job.stage].iteration
    if ictx is not None and ictx.engine == job.stage:
        a = leave_batch(v, job, ictx.assign)
        if a is not None:
            ictx.left = ictx.left if V.is_inf(ictx.left) else ictx.left + a.tokens + ictx.slots
    elif in_flight is not None:
        leave_batch(v, job, in_flight["assign"])


def leave_batch(v: Session, job: Job, assign: list[Assign]) -> Optional[Assign]:
    """Remove v's assignment from a batch, its position back to before its chunk; the assignment or None."""
    for a in assign:
        if a.serial == v.tid:
            assign.remove(a)
            if a.pos_before is not None and job.growing is not None:   # a chunk of a growing run
                gh = hold_on(v, job.growing)
                gh.position[gh.pools.index(job.growing)] = a.pos_before
            return a
    return None

"""Growth and preemption (docs/language.md §11.7): a hold grows by whole blocks, evicting
cached blocks first; growth that does not fit preempts a victim chosen by the pool's `preempt`
rule (which caches up to its position, goes back to its hold statement and requeues) or stalls
the grower until a retry at settle fits. A preempted or ended session leaves whatever it waited
in or was served by (`detach`).

serq_spec counterpart: `serq_spec/growth.py` (grow, stall, choose_victim, preempt,
preempt_pending, detach_free / detach_resident).
"""

from __future__ import annotations

from serq_fast.defs import COMPUTED, ENDING, EPS, GROWING, READY, STAGE, roundup
from serq_fast.pools import Hold, Part, Pool, release_hold


def grow(pool: Pool, part: Part, d: float, job) -> str:
    """§11.7: 'ok', 'preempted' (the grower itself was the victim) or 'stalled'."""
    target = roundup(part.alloc + d, pool.block)
    need = target - part.alloc
    s = part.hold.sess
    while True:
        if pool.used + need <= pool.cap + EPS:
            if pool.content:
                pool._take(part.blocks, int(round(need / pool.block)))
                pool._sync()
            else:
                pool.make_room(need)
                pool.used += need
            part.alloc = target
            return "ok"
        victim = choose_victim(pool)
        if victim is None:
            if job is not None and job.lagged:
                return "stalled"  # an EOS token that would stall is not served (docs/async.md §3 item 2)

            s.growth = (part, d, job)
            pool.growers.append(s)
            s.status = GROWING
            s.where = pool
            if job is not None:
                job.stalled = True
            return "stalled"
        preempt(pool.sim, victim, pool)
        if victim is part:
            return "preempted"

def retry_growers(pool: Pool) -> None:
    while pool.growers:
        s = pool.growers[0]
        part, d, job = s.growth
        if pool.used + roundup(part.alloc + d, pool.block) - part.alloc > pool.cap + EPS:
            return  # the head blocks: a retry at settle never preempts (serq_spec retry_growers)
        pool.growers.pop(0)
        s.growth = None
        grow(pool, part, d, job)  # there is room: it succeeds without choosing a victim
        if job is None:
            pool.sim.make_ready(s)
        else:

            job.stalled = False
            s.status = STAGE
            s.where = job.stage

def choose_victim(pool: Pool):
    """The victim Part by this pool's `preempt` rule, or None (§11.7)."""
    if pool.preempt_kind == "none":
        return None

    cands = []
    for part in pool.holders:
        s = part.hold.sess
        if s.live_branches:
            continue   # its hold cannot go back to its statement under running branches (§11.13)
        job = s.job
        if s.status == ENDING and (job is None or part.hold is not job.hold):
            # an ending session is a victim only while its pending resident is resident, and
            # only in its lagged hold's pools (docs/async.md §3 item 3)
            continue
        if pool.engine_memory:
            if job is not None and job.resident and job.stage.memory == pool.idx:
                cands.append(part)
        elif job is None or job.stage.kind != "delay":
            cands.append(part)
    if not cands:
        return None
    if pool.preempt_kind == "lifo":
        if pool.fault_victim:
            return min(cands, key=lambda p: p.hold.sess.adm_seq)
        return max(cands, key=lambda p: p.hold.sess.adm_seq)
    sim = pool.sim
    cx = sim.cx
    saved = (cx.attrs, cx.sess, cx.var, cx.job)
    best, bestk = None, None
    try:
        for part in cands:
            s = part.hold.sess
            # per-request keys are a resident's: a fifo / ps job or a ready session has none
            cx.attrs, cx.sess, cx.job = s.attrs, s, (s.job if s.job is not None and s.job.resident else None)
            cx.var = {"position": part.pos, "computed": part.pos}
            k = tuple(f(cx) for f in pool.preempt_keys) + (-s.adm_seq,)
            if bestk is None or k < bestk:
                best, bestk = part, k
    finally:
        cx.attrs, cx.sess, cx.var, cx.job = saved
    return best


def detach(sim, s) -> None:
    """Take the session out of any queue, stage or growers list it is in; a ready session leaves
    the ready list (a victim in a pool that is no engine's memory, §11.7). A fifo or ps job leaves
    its stage, its work dropped (FifoStage.detach, PsStage.detach; as serq_spec.stages.withdraw_job)."""

    if s.status == READY:
        ready = sim.ready
        for i in range(sim.ready_head, len(ready)):
            if ready[i] is s:
                del ready[i]
                break
    if s.pending is not None:
        h = s.pending
        h.pools[0].remove_from_queue(h)
        s.pending = None
    if s.job is not None:
        s.job.stage.detach(s.job)
        s.job = None
    if s.growth is not None:
        part = s.growth[0]
        if s in part.pool.growers:
            part.pool.growers.remove(s)
        s.growth = None


def drop_outcome(s, part):
    """A preempted session's unseen outcome (docs/async.md §8 item 4, serq_spec.lag.drop_outcome):
    the drafts it rejected (on `part`), which the position recorded at the preemption must not
    count; the outcome itself is dropped."""

    u = s.unseen
    if u is None:
        return 0.0
    s.unseen = None
    return u[1] if u[0] is part else 0.0


def preempt(sim, part: Part, pool: Pool) -> None:
    """§11.7 preempt(victim): cache up to the position, back to the hold statement, requeue."""

    h = part.hold
    s = h.sess
    s.loads = []   # the load-backs of a hold it gives up (§11.8.1); a re-admission reads them again
    job = s.job
    if job is not None and job.lagged:
        _preempt_ending(sim, part, pool)
        return
    if job is not None and job.stage.kind == "step":
        job.stage.unassign(job)  # a victim already served returns its tokens, position restored
    part.pos -= drop_outcome(s, part)  # lag 1: an unseen outcome's rejected drafts (docs/async.md §8)
    computed = part.pos
    prev = s.prepos.get(pool.idx)
    if prev is not None and computed <= prev and not s.stuck:
        s.stuck = True
        pool.stuck += 1
    s.prepos[pool.idx] = computed
    s.attrs[COMPUTED] = computed
    if sim.rec is not None:
        sim.rec["preempted"].append([s.tid, pool.name, computed])
    detach(sim, s)
    _release_inward(sim, s, h)
    del s.frames[h.depth + 1:]
    h.admitted = False
    h.parts = []
    first = h.pools[0]
    first.enqueue(h, front=not pool.requeue_tail)
    pool.preemptions += 1
    sim.npreempt += 1


def _release_inward(sim, s, h: Hold) -> None:
    """A preemption releases the hold and every hold nested inside it, innermost first."""
    while s.holds:
        inner = s.holds.pop()
        for q in inner.parts:
            q.advanced = True  # a preempted hold caches up to its position, advanced or not (§11.7)
        release_hold(sim, inner, cache=True)
        if inner is h:
            break


def _preempt_ending(sim, part: Part, pool: Pool) -> None:
    """A pending resident as the victim (docs/async.md §3 item 3): it leaves the batch and the
    residents, its holds from the preempted one inward are released as in a preemption, but the
    session is not requeued and keeps no preemption memory: it stays ending, and its end is still
    applied by the engine's `ends` event."""

    h = part.hold
    s = h.sess
    s.job.stage.unassign(s.job)  # a served EOS token returns to the budget, its position restored
    part.pos -= drop_outcome(s, part)  # its last outcome is never seen (docs/async.md §8)
    computed = part.pos
    s.attrs[COMPUTED] = computed
    if sim.rec is not None:
        sim.rec["preempted"].append([s.tid, pool.name, computed])
    detach(sim, s)
    for q in h.pools:
        s.prepos.pop(q.idx, None)
    _release_inward(sim, s, h)
    pool.preemptions += 1
    sim.npreempt += 1

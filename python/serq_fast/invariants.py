"""Invariant checks of the fast engine's state, after every handled event, behind a debug flag
(`SERQ_FAST_CHECK=1`, docs/env.md; `Sim(check=True)`): off by default, and then the event loop
pays one test of a local per event.

What is checked is what serq_spec's invariants say and the fast state can express: time never
goes back and no event is pending before `now`; each pool's amounts are not negative, `used +
cached <= cap`, `used` is the holders' and leases' allocations (on a content pool: the block
size times the referenced blocks), `cached` the entries' sizes (on a content pool: the block
size times the identified free blocks), the holders are live sessions' admitted parts in
admission order; a content pool's reference counts are the hold lists holding each block, the
free queue is the blocks with no reference, once each, and the identity map agrees with the
blocks' identities; a queued hold is its session's pending hold and every queued session is in
its pool's queue; a grower is growing on its pool; an engine's residents are in admission
order; no work left is negative; no live session or branch is ready after settle (the ready list
is empty then) or names a stage it is not on; a joining thread is on no stage and waits for a
branch, a thread's count of running branches is the number of live branches it forked, and a live
branch has not ended (docs/language.md §11.13).

serq_spec counterpart: `serq_spec/invariants.py` (`check_invariants`, checked after every step
there, always).
"""

from __future__ import annotations

from serq_fast.defs import EPS, GROWING, JOINING, QUEUED, READY, STAGE, TIE_EPS, ENDED
from serq_fast.expr import RunError


class InvariantViolation(RunError):
    """An invariant of the fast state broke: a bug of the fast engine, never of the program."""


def _close(a: float, b: float) -> bool:
    """Equal up to float sums (pool amounts are sums of whole blocks or of the program's values)."""
    return abs(a - b) <= EPS * max(1.0, abs(a), abs(b))


def _pool_invariants(sim, pool) -> list[str]:
    name = pool.name
    bad = []
    if pool.used < -EPS or pool.cached < -EPS:
        bad.append(f"pool {name}: a negative amount (used {pool.used}, cached {pool.cached})")
    if pool.used + pool.cached > pool.cap + EPS * max(1.0, pool.cap):
        bad.append(f"pool {name}: used {pool.used} + cached {pool.cached} > cap {pool.cap}")
    if any(e.size <= EPS for e in pool.entries.values()):
        bad.append(f"pool {name}: an empty cache entry")
    if any(owner != e.owner for owner, e in pool.entries.items()):
        bad.append(f"pool {name}: a cache entry filed under another owner")
    held = 0.0
    adm = []
    for part in pool.holders:
        s = part.hold.sess
        held += part.alloc
        adm.append(part.hold.adm)
        if part.pool is not pool or s.status == ENDED or part not in part.hold.parts or not part.hold.admitted:
            bad.append(f"pool {name}: holder thread {s.tid} is not a live session's admitted part of this pool")
        if part.alloc < -EPS or part.pos < -EPS:
            bad.append(f"pool {name}: thread {s.tid} has a negative allocation or position")
    if adm != sorted(adm):
        bad.append(f"pool {name}: holders are not in admission order {adm}")
    if len({id(p) for p in pool.holders}) != len(pool.holders):
        bad.append(f"pool {name}: a part is a holder twice")
    leased = sum(x.part.alloc for x in pool.leases.values())
    if pool.content:
        bad += _content_invariants(pool)
    else:
        if not _close(pool.used, held + leased):
            bad.append(f"pool {name}: used {pool.used} != the holders' and leases' allocations {held + leased}")
        entries = sum(e.size for e in pool.entries.values())
        if not _close(pool.cached, entries):
            bad.append(f"pool {name}: cached {pool.cached} != the cache entries' sizes {entries}")
    # queue and hold consistency
    queued = pool.queue_list()
    if len({id(h) for h in queued}) != len(queued):
        bad.append(f"pool {name}: a hold is in the queue twice")
    for h in queued:
        s = h.sess
        if s.pending is not h or s.status != QUEUED or s.where is not pool or h.pools[0] is not pool:
            bad.append(f"pool {name}: queued hold of thread {s.tid} is not its thread's pending hold here")
    for s in pool.growers:
        if s.status != GROWING or s.where is not pool or s.growth is None:
            bad.append(f"pool {name}: grower thread {s.tid} is not growing on it")
    return bad


def _content_invariants(pool) -> list[str]:
    """docs/content.md §3, as `serq_spec.invariants.content_invariants`."""
    bp, b, name = pool.bp, pool.bsize, pool.name
    bad = []
    count = [0] * bp.n
    parts = list(pool.holders) + [x.part for x in pool.leases.values()]
    for part in parts:
        blocks = part.blocks or []
        if not _close(part.alloc, b * len(blocks)):
            bad.append(f"pool {name}: session {part.hold.sess.serial} holds {len(blocks)} blocks but "
                       f"allocation {part.alloc}")
        for x in blocks:
            count[x] += 1
    if count != bp.refs:
        bad.append(f"pool {name}: reference counts != the hold lists containing each block")
    free = bp.free_queue()
    if len(set(free)) != len(free) or len(free) != bp.nfree:
        bad.append(f"pool {name}: the free queue holds a block twice or {len(free)} blocks, not nfree {bp.nfree}")
    if set(free) != {x for x, r in enumerate(bp.refs) if r == 0}:
        bad.append(f"pool {name}: the free queue is not the blocks with no reference (a block both free and held)")
    mapped = {x: k for k, blocks in bp.idmap.items() for x in blocks}
    if (sum(len(v) for v in bp.idmap.values()) != len(mapped) or any(not v for v in bp.idmap.values())
            or mapped != {x: k for x, k in enumerate(bp.ident) if k is not None}):
        bad.append(f"pool {name}: the identity map and the blocks' identities disagree")
    referenced = sum(1 for r in bp.refs if r > 0)
    if not _close(pool.used, b * referenced):
        bad.append(f"pool {name}: used {pool.used} != block × referenced blocks {b * referenced}")
    identified_free = sum(1 for x in free if bp.ident[x] is not None)
    if identified_free != bp.ncached or not _close(pool.cached, b * identified_free):
        bad.append(f"pool {name}: cached {pool.cached} != block × identified free blocks {b * identified_free}")
    return bad


def _stage_jobs(st) -> list:
    if st.kind == "step":
        return list(st.residents)
    if st.kind == "fifo":
        return list(st.waiting) + list(st.active)
    if st.kind == "delay":
        return list(st.active)
    return list(st.jobs)


def check_invariants(sim, previous_now: float) -> list[str]:
    """The violated invariants of `sim` after a handled event and its settle (empty when all hold)."""
    bad = []
    now = sim.now
    if now < previous_now:
        bad.append(f"time went back from {previous_now} to {now}")
    heap = sim.heap
    if heap and heap[0][0] < now - TIE_EPS * max(1.0, abs(now)):
        bad.append(f"an event is pending in the past, at {heap[0][0]}")
    for pool in sim.pools:
        bad += _pool_invariants(sim, pool)
    on_stage: dict = {}
    for st in sim.stages:
        jobs = _stage_jobs(st)
        for j in jobs:
            if getattr(j, "stages", None) is None or j.stage is st:   # a flow: at its first stage
                on_stage[id(j)] = st
            elif not all(any(k is j for k in y.jobs) for y in j.stages):
                bad.append(f"stage {st.name}: the flow of session {j.sess.tid} is missing from one of its stages")
            if j.left < -EPS:
                bad.append(f"stage {st.name}: session {j.sess.serial} has negative work left {j.left}")
        if st.kind == "step":
            adm = [j.adm for j in jobs]
            if adm != sorted(adm) or adm != list(st.adm_keys):
                bad.append(f"engine {st.name}: residents are not in admission order {adm}")
    if sim.ready[sim.ready_head:]:
        bad.append("sessions are still ready after settle")
    for s in list(sim.sessions.values()) + list(sim.branches.values()):
        if s.status == READY:
            bad.append(f"session {s.tid} is ready after settle, outside the ready list")
        elif s.status == STAGE:
            if s.job is None or s.job.stage is not s.where or on_stage.get(id(s.job)) is not s.where:
                bad.append(f"session {s.tid} is on stage {s.where.name} but not among its jobs")
        elif s.status == QUEUED:
            if s.pending is None or not any(h is s.pending for h in s.where.queue_list()):
                bad.append(f"session {s.tid} is queued on {s.where.name} but not in its queue")
    if sim.branches or any(s.status == JOINING for s in sim.sessions.values()):
        bad += _branch_invariants(sim, on_stage)
    return bad


def _branch_invariants(sim, on_stage: dict) -> list[str]:
    """docs/language.md §11.13, as `serq_spec.invariants.branch_invariants`: a joining thread is on
    no stage and in no queue, and waits for a branch; a thread's count of running branches is the number of live
    branches it forked; a live branch has not ended. `on_stage`: id of a job -> its stage."""
    bad = []
    forked: dict = {}
    for b in sim.branches.values():
        forked[id(b.parent)] = forked.get(id(b.parent), 0) + 1
        if b.status == ENDED:
            bad.append(f"branch {b.tid} ended but is still listed")
    for s in list(sim.sessions.values()) + list(sim.branches.values()):
        if s.status == JOINING and ((s.job is not None and id(s.job) in on_stage) or s.pending is not None
                                    or not s.live_branches):
            bad.append(f"session {s.tid} is joining but is on a stage or in a queue, or has {s.live_branches} "
                       "branch(es) running")
        if s.live_branches != forked.get(id(s), 0):
            bad.append(f"session {s.tid} counts {s.live_branches} running branch(es), {forked.get(id(s), 0)} are live")
    return bad


def check_or_raise(sim, step: int, previous_now: float) -> None:
    """Stop the run, naming the broken invariants, the step and the time."""
    bad = check_invariants(sim, previous_now)
    if bad:
        raise InvariantViolation(f"internal: serq_fast invariant broken at step {step}, time {sim.now!r} "
                                 f"(SERQ_FAST_CHECK): " + "; ".join(bad[:5])
                                 + (f"; and {len(bad) - 5} more" if len(bad) > 5 else ""))

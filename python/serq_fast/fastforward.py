"""The decode fast-forward (docs/fast.md, speed trick 3): `bulk` handles the end of an engine's
template iteration and the identical iterations after it at once, step by step or, where
`advance.applies`, as one advance across block boundaries (`advance.run`, speed trick 3b).

Labelled speed trick (docs/fast.md "Decode fast-forward"): while an engine's batch is all
decodes, every resident is served one token, no growth, admission or preemption happens and no
other event falls in between, consecutive iterations are identical except for `now`,
`remaining` and `position`. `bulk` applies j such steps at once — the same float
additions in the same order, the same event sequence numbers and counters — so a run's cost
grows with batch-changing events, not with tokens. It applies only to engines whose schedule
and cost read nothing that changes with time alone (no `now`, draws or registers).

The functions take the engine (`engine.Engine`) whose iteration is fast-forwarded; the pieces
both forms share (`ff_begin`, `ff_cost`, `ff_sync`, `ff_finish`, `ff_resume`) are in `advance`.

serq_spec counterpart: none — the spec takes one event per step; every step a fast-forward skips
is a step of `serq_spec/step.py` (lockstep compares the steps the fast engine emits).
"""

from __future__ import annotations

import heapq
import math

from serq_fast import advance
from serq_fast.defs import EPS, INF, TIE_EPS, roundup
from serq_fast.expr import RunError, located


def bulk(eng, t1: float, t_next: float, horizon: float, max_j: int) -> int:
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

    sim = eng.sim
    it = eng.iter
    if it.ev0 != sim.events - 1:
        return 0  # another event was handled while the template was in flight
    if it.seq != sim.seq - 1:
        # another event was scheduled after the template's end (a ps stage rescheduled in the
        # settle that started it): the skipped ends' sequence numbers would not follow the
        # template's, which the fast-forward's arithmetic assumes
        return 0
    for other in sim.engines:
        if other is not eng and other.iter is None and other.has_work():
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
    grow_ok = (eng.ff_grow and pool.idx == eng.memory
               and all(p.pool is pool and p.pos == int(p.pos) and p.alloc == int(p.alloc) for p in parts)
               and (block is None or block == int(block)))
    watch = None
    if grow_ok:
        head = next((h for h in (q.head() for q in eng.admits) if h is not None), None)
        if head is not None:
            # the head tried at every formation waited at the template's; growth only adds to
            # `used` and evicts cached blocks, so it keeps waiting, with the same bindings, while
            # its header reads nothing but attributes, this engine's budget_left and cachedin,
            # and its own cache entry in this pool is untouched (else: `advance.ff_resume`)
            if _pure_head(eng, head.stmt):
                we = pool.entries.get(head.sess.tid)
                watch = (head.sess.tid, we, we.size if we is not None else None)
            else:
                grow_ok = False
    # strictly before the next instant (with nothing pending, no bound: inf - inf would be NaN)
    t_stop = t_next - TIE_EPS * max(1.0, abs(t_next)) if t_next < INF else INF
    if eng.advance_ok and advance.applies(eng, pool, grow_ok):
        # labelled speed trick: the whole fast-forward at once (serq_fast/advance.py)
        return advance.run(eng, it, jobs, parts, pool, grow_ok, watch, cap_steps, t1, t_stop, horizon)
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
    cap = pool.cap + EPS
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
            fixed = advance.ff_begin(eng, it, len(jobs))
        sim.now = t
        if sim.rec is not None:
            sim.rec = sim._new_rec()
        # growth.grow's success path, in serving order: make room (evicting cached blocks), allocate
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
        if watch is not None and not eng.fault_no_watch:
            we = pool.entries.get(watch[0])
            if we is not watch[1] or (we is not None and we.size != watch[2]):
                # the eviction touched the waiting head's cached prefix: its admission attempt
                # may differ, so this formation's admissions run as the schedule says
                advance.ff_sync(jobs, left0, pos0, total)
                return advance.ff_resume(eng, it, total, t)
        c = advance.ff_cost(eng, fixed, kvd, jobs, left0, pos0, total)
        if not (c > 0) or math.isinf(c):
            raise located(RunError(f"an iteration with {len(jobs)} tokens costs {c}"), eng.cost_at,
                          f"engine {eng.name}: execute")
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
    advance.ff_sync(jobs, left0, pos0, total)
    return advance.ff_finish(eng, it, total, last, c, last_growth)


def _pure_head(eng, stmt) -> bool:
    """True if the hold statement's bindings, amounts and reuse read only numbers, attributes,
    pure operators, `cachedin` of a fixed pool and this engine's `budget_left`."""
    r = eng._head_pure.get(id(stmt))
    if r is None:
        idx = eng.idx

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

        r = eng._head_pure[id(stmt)] = pure(stmt.header_ir)
    return r

"""The multi-iteration advance of a decode fast-forward across block boundaries (docs/fast.md,
speed trick 3, "Advance across block boundaries").

Within a fast-forward (`fastforward.bulk`) every iteration serves one token to each resident decode,
so the cost is a staircase in the iteration index: constant between two block boundaries (the
growth formations) and re-read after each. This module handles a whole fast-forward at once:

- a stair of `n` iterations at cost `c` has its last one start at `t + (n − 1)·c` (one
  multiplication, not `n − 1` additions: the times differ from step by step by rounding only,
  ≈ 1e-12 relative), the number of iterations taken being decided by the step path's own
  comparisons (`start < t_stop and start <= horizon`) on the start times `t + j·c`;
- the growth of each boundary is planned (the resident's next allocation, the cost re-read on the
  grown batch, the pool's time averages at that instant), but the LRU eviction it needs is done
  once, for the whole advance: the block-by-block rule evicts a prefix of the LRU order, and the
  prefix needed after a sequence of growths is the one needed for their sum (every entry of a
  block pool is a whole number of blocks, so `cached` after a cumulative need `N` is
  `cached0 − b·⌈(used0 + cached0 + N − cap)/b⌉⁺` and the trajectory is known without evicting);
- it stops exactly where the step path would: before the first growth that would not fit
  (`used + need > cap`: a preemption or a stall, left to the normal path), after the growth whose
  eviction reaches the waiting head's own cache entry (then the formation's admissions run,
  `advance.ff_resume`), before the next event and after the horizon.

Only LRU eviction on a block pool, with a cost that reads engine values alone (memoised), is
advanced here; `bulk` keeps its step-by-step loop for the rest (and for `SERQ_FAST_NO_ADVANCE`).

serq_spec counterpart: none — a speed trick (3b); each iteration it skips is one
`serq_spec/step.py` step, and lockstep compares the steps the fast engine emits.
"""

from __future__ import annotations

import heapq
import math
import os

from serq_fast.defs import EPS as POOL_EPS, EV_ITER_END, FAULTS
from serq_fast.expr import RunError
from serq_fast.stages import Iteration

INF = math.inf


def enabled() -> bool:
    """False when `SERQ_FAST_NO_ADVANCE` is set (diagnosis: the step-by-step fast-forward)."""
    return not os.environ.get("SERQ_FAST_NO_ADVANCE")


def faults() -> tuple:
    """The seeded faults of docs/fast.md this module plants: (`advance_sum`, `advance_evict`)."""
    f = FAULTS()
    return "advance_sum" in f, "advance_evict" in f


def applies(eng, pool, grow_ok: bool) -> bool:
    """Can `advance` handle this fast-forward? Without growth always; with growth when the pool
    evicts by LRU in whole blocks and the cost reads only engine values (so neither the
    eviction order nor the cost depends on what the deferred eviction has not done yet)."""
    if not grow_ok:
        return True
    return pool.block is not None and pool.evict_keys is None and eng._cost_names is not None


def stair_length(t: float, c: float, lim: int, t_stop: float, horizon: float) -> int:
    """How many of the formations starting at t, t + c, …, t + (lim − 1)·c the step path takes:
    each one whose start is `< t_stop` and `<= horizon` (the starts increase, so a prefix)."""
    if lim <= 0 or not (t < t_stop and t <= horizon):
        return 0
    bound = min(t_stop, horizon)
    if bound == INF or c <= 0:
        return lim
    n = min(lim, int((bound - t) / c) + 1)
    # the estimate may be off by rounding: settle it with the step path's own comparisons
    while n > 1 and not ((s := t + (n - 1) * c) < t_stop and s <= horizon):
        n -= 1
    while n < lim and ((s := t + n * c) < t_stop and s <= horizon):
        n += 1
    return n


def _lru_walk(pool):
    """The valid cache entries of `pool` in eviction order (the order `Pool._victim_entry` pops
    them), without changing the heap: a best-first walk over its array."""
    h = pool.lru
    entries = pool.entries
    if not h:
        return
    frontier = [(h[0], 0)]
    n = len(h)
    while frontier:
        key, i = heapq.heappop(frontier)
        last, rel, owner = key
        e = entries.get(owner)
        if e is not None and abs(e.rel) == abs(rel) and e.last == last:
            yield e
        j = 2 * i + 1
        if j < n:
            heapq.heappush(frontier, (h[j], j))
            if j + 1 < n:
                heapq.heappush(frontier, (h[j + 1], j + 1))


class _Watch:
    """How much can be evicted before the waiting head's own entry is touched, found lazily."""

    __slots__ = ("walk", "ahead", "limit", "_target")

    def __init__(self, pool, entry):
        self.walk = _lru_walk(pool)
        self.ahead = 0.0  # units of the entries walked so far, all ahead of the head's entry
        self.limit = None  # the eviction that reaches the entry: more than `ahead` (once found)
        self._target = entry

    def reached(self, evicted: float) -> bool:
        while self.limit is None and self.ahead + POOL_EPS < evicted:
            e = next(self.walk, None)
            if e is None or e is self._target:
                self.limit = self.ahead
                break
            self.ahead += e.size
        return self.limit is not None and evicted > self.limit + POOL_EPS


def run(eng, it, jobs, parts, pool, grow_ok: bool, watch, cap_steps: int, t1: float, t_stop: float,
        horizon: float) -> int:
    """The fast-forward of `fastforward.bulk` from the end of the template iteration (at `t1`); returns
    the iterations handled (0: none, the normal path handles it)."""
    sim = eng.sim
    fault_sum, fault_evict = eng.advance_faults
    block = pool.block
    pos0 = [p.pos for p in parts]
    left0 = [j.left for j in jobs]
    alloc = [p.alloc for p in parts]  # the allocations as the advance grows them
    # heap of (the formation at which the resident grows, serving index)
    nxt = [(int(a - p0), i) for i, (a, p0) in enumerate(zip(alloc, pos0))]
    heapq.heapify(nxt)
    cap = pool.cap + POOL_EPS
    used0, cached0 = pool.used, pool.cached
    room0 = pool.cap - used0 - cached0  # free units before any growth (may be fractional)
    c = it.cost
    t = t1
    last = t1
    total = 0
    need = 0.0  # units grown so far in this advance
    need_before = 0.0  # ... before the last growth formation (its evictions go to its record)
    last_growth = False
    grew = False
    kvd = 0.0
    costs = None  # the cost by KV held, for this advance's other engine values (_stair_costs)
    watched = None
    if watch is not None and watch[1] is not None and not eng.fault_no_watch:
        watched = _Watch(pool, watch[1])
    measuring = grow_ok and sim.measuring
    # the pool's time averages of used and cached (stats.TimeAverage.set, inlined)
    ta_used, ta_cached = pool.ta_used, pool.ta_cached
    u_area, u_t, u_v = ta_used.area, ta_used.t, ta_used.v
    c_area, c_t, c_v = ta_cached.area, ta_cached.t, ta_cached.v
    heapreplace = heapq.heapreplace
    ceil = math.ceil
    resume = False
    while total < cap_steps:
        lim = min(nxt[0][0], cap_steps) - total
        # the starts increase with j, so when the stair's last start passes the step path's test
        # every start does (the common case: no second look)
        if lim > 0 and (s := t + (lim - 1) * c) < t_stop and s <= horizon and t < t_stop and t <= horizon:
            n = lim
        else:
            n = stair_length(t, c, lim, t_stop, horizon)
        if n:
            # labelled speed trick: a stair of n iterations at one cost, summed in closed form
            last = t + (n if fault_sum else n - 1) * c  # seeded fault `advance_sum`: one cost too many
            t = last + c
            total += n
            last_growth = False
        if n < lim or total >= cap_steps or not grow_ok or not (t < t_stop and t <= horizon):
            break
        # the formation at `total` crosses block boundaries: plan its growth in serving order
        # (roundup of the position, as growth.grow; the heap's next entry for each grower replaces
        # its current one at once, a formation that does not fit ends the advance anyway)
        i = nxt[0][1]
        tgt = ceil((pos0[i] + total + 1) / block - POOL_EPS) * block
        step_need = tgt - alloc[i]
        heapreplace(nxt, (int(tgt - pos0[i]), i))
        grows = None
        if nxt[0][0] == total:
            grows = [(i, tgt)]
            while nxt[0][0] == total:
                i = nxt[0][1]
                tgt = ceil((pos0[i] + total + 1) / block - POOL_EPS) * block
                grows.append((i, tgt))
                step_need += tgt - alloc[i]
                heapreplace(nxt, (int(tgt - pos0[i]), i))
        if used0 + need + step_need > cap:
            break  # the iteration would preempt or stall: the normal path handles it
        if not grew:
            grew = True
            kvd = sum(alloc)
            costs = _stair_costs(eng, it, len(jobs))
        if grows is None:
            kvd += step_need
            alloc[i] = tgt
        else:
            for i, tgt in grows:
                kvd += tgt - alloc[i]  # whole numbers: the same sum as in serving order
                alloc[i] = tgt
        need_before = need
        need += step_need
        total += 1
        last_growth = True
        over = need - room0
        evicted = block * ceil(over / block - POOL_EPS) if over > POOL_EPS else 0.0
        if watched is not None and watched.reached(evicted):
            # the eviction reaches the waiting head's cached prefix: its admission attempt may
            # differ, so this formation's admissions run as the schedule says
            resume = True
            break
        c = costs.get(kvd) if costs is not None else None
        if c is None:
            for p, a in zip(parts, alloc):
                p.alloc = a  # what the cost may read
            c = ff_cost(eng, eng._ff_fixed_key, kvd, jobs, left0, pos0, total)
            if not (c > 0) or math.isinf(c):
                raise RunError(f"engine {eng.name}: an iteration with {len(jobs)} tokens costs {c}")
            if costs is not None:
                costs[kvd] = c
        if measuring:
            if u_v != used0 + need:
                u_area += u_v * (t - u_t)
                u_t, u_v = t, used0 + need
            if c_v != cached0 - evicted:
                c_area += c_v * (t - c_t)
                c_t, c_v = t, cached0 - evicted
        last = t
        t = t + c
    if measuring:
        ta_used.area, ta_used.t, ta_used.v = u_area, u_t, u_v
        ta_cached.area, ta_cached.t, ta_cached.v = c_area, c_t, c_v
    if total == 0:
        return 0
    for p, a in zip(parts, alloc):
        p.alloc = a
    ff_sync(jobs, left0, pos0, total)
    if need:
        if resume or last_growth:
            _apply(sim, pool, used0, need_before, need, fault_evict, block)
        else:
            _apply(sim, pool, used0, need, need, fault_evict, block)
    if resume:
        return ff_resume(eng, it, total, t)
    return ff_finish(eng, it, total, last, c, last_growth)


def _stair_costs(eng, it, nres: int):
    """The memo of the cost by KV held (a dict) for the engine values fixed in this advance
    (`advance.ff_begin`); a second level of `advance.ff_cost`'s memo, so that a lookup hashes
    one float. Bounded like it: 65 536 costs in all, over every fixed-values key (each key's dict
    had its own bound, and there could be 4 096 keys: no bound in practice)."""
    fixed = ff_begin(eng, it, nres)
    eng._ff_fixed_key = fixed
    memo = eng._stair_memo
    if sum(map(len, memo.values())) + len(memo) > 65536:
        memo.clear()
    d = memo.get(fixed)
    if d is None:
        d = memo[fixed] = {}
    return d


def _apply(sim, pool, used0: float, need_before: float, need: float, fault: bool, block: float) -> None:
    """Allocate the advance's growth and evict for it, in one pass over the LRU order; with records
    on, what the last growth formation evicts goes to the record of its step, the rest before."""
    cached_expected = None
    if sim.rec is not None and need_before < need:
        pool.used = used0 + need_before
        pool.make_room(0.0)
        sim.rec = sim._new_rec()
    pool.used = used0 + need
    over = used0 + pool.cached + need - pool.cap
    if over > POOL_EPS:
        cached_expected = pool.cached - block * math.ceil(over / block - POOL_EPS)
    # seeded fault `advance_evict` (docs/fast.md): the batch eviction is one block short
    pool.make_room(-block if fault else 0.0)
    if cached_expected is not None and not fault and abs(pool.cached - cached_expected) > POOL_EPS:
        raise RunError(f"internal: the batch eviction of pool {pool.name} left {pool.cached} cached, "
                       f"the planned trajectory {cached_expected} (an entry that is no whole number of blocks)")


# ---------------------------------------------------------------- what both forms share
#
# Starting a growth run (the engine values fixed for it), costing a step (memoised), bringing
# the residents up to a step, and ending a fast-forward: as the iteration in flight
# (`ff_finish`) or by handing the last formation back to the schedule (`ff_resume`). Used by
# the one-advance form above and by the step-by-step form, `fastforward.bulk`.


def ff_begin(eng, it, nres: int):
    """The engine values fixed for a whole fast-forward (every resident is an assigned decode of
    one token); only the KV held changes, by growth. Returns the memo key part of the cost's
    other values, or a marker that the cost is evaluated afresh each time."""
    n = float(nres)
    eng._ff_fixed = {"batch.tokens": n, "batch.decoding": n, "batch.prefilled": 0.0, "batch.prefilling": 0.0,
                      "batch.kv_prefill": 0.0, "batch.attention": 0.0, "running.count": n,
                      "running.decoding": n, "running.kv_prefill": 0.0}
    names = eng._cost_names
    if names is None:
        return None
    eng.cur = it
    kv = ("batch.kv_decode", "running.kv_decode")
    return tuple((x, -1.0) if x in kv else (x, eng._ff_fixed[x] if x in eng._ff_fixed else eng._vf[x]())
                 for x in names)


def ff_sync(jobs, left0, pos0, total: int) -> None:
    """Bring `left` and `position` of every resident to `total` steps past the fast-forward's
    start (whole numbers: one addition is the same as `total` additions of 1)."""
    for j, l0, p0 in zip(jobs, left0, pos0):
        j.left = l0 - total
        j.growpart.pos = p0 + total


def ff_cost(eng, fixed, kvd: float, jobs, left0, pos0, total: int) -> float:
    """The cost of a fast-forward step whose batch holds `kvd` KV units in decodes: memoised when
    the cost reads only engine values (bounded), else evaluated with `left` and positions brought
    up to date."""
    key = (fixed, kvd) if fixed is not None else None
    if key is not None:
        c = eng._cost_memo.get(key)
        if c is not None:
            return c
    else:
        ff_sync(jobs, left0, pos0, total)  # the cost may read what the steps advanced
    sim = eng.sim
    cx = sim.cx
    ff_vals = dict(eng._ff_fixed)
    ff_vals["batch.kv_decode"] = ff_vals["running.kv_decode"] = kvd
    saved = (cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job)
    cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job = [], None, sim.machine_src, eng, {}, None
    eng.cur = eng.iter
    eng._ff_vals = ff_vals
    try:
        c = eng.cost_fn(cx)
    finally:
        eng._ff_vals = None
        cx.attrs, cx.sess, cx.draw, cx.eng, cx.var, cx.job = saved
    if key is not None:
        if len(eng._cost_memo) > 65536:
            eng._cost_memo.clear()
        eng._cost_memo[key] = c
    else:
        ff_sync(jobs, left0, pos0, 0)  # the caller advances them once, at the end
    return c


def ff_finish(eng, it, total: int, last: float, c: float, last_growth: bool) -> int:
    """End a fast-forward of `total` steps whose last iteration started at `last` and costs `c`
    (positions already brought up to date): it is the iteration in flight, its end pushed with the
    sequence numbers and counters the skipped steps would have consumed."""

    sim = eng.sim
    if not last_growth and sim.rec is not None:
        sim.rec = sim._new_rec()
    for a in it.assign:
        a[3] = a[0].growpart.pos - 1
    sim.now = last
    it.start = last
    it.cost = c
    it.end = last + c
    sim.seq += total - 1
    eng._ff_ev_seq = sim.seq - 1  # the last iteration end handled
    it.seq = sim.push(it.end, EV_ITER_END, eng)
    eng.iterations += total
    sim.events += total - 1  # the caller counts the popped event
    return total


def ff_resume(eng, it, total: int, t: float) -> int:
    """End a fast-forward at a formation (time `t`, the `total`-th step) whose decodes were served
    and grown but whose admissions may differ from the template's: form the rest of the
    iteration with the schedule's admit statements, as `start_iteration` would after the
    advances. The caller then settles from the engines on (`Sim.settle(started=True)`)."""
    sim = eng.sim
    sim.now = t
    sim.seq += total - 1
    eng._ff_ev_seq = sim.seq - 1
    sim.events += total - 1  # the caller counts the popped event
    eng.iterations += total - 1  # `_form` counts the resumed one
    eng.iter = None
    it2 = Iteration(sim.npreempt)
    it2.start = t
    it2.budget = it.budget
    left = it.budget
    for a in it.assign:
        job = a[0]
        it2.assign.append([job, a[1], a[2], job.growpart.pos - a[1]])
        it2.served.add(job)
        left -= a[1]
    it2.left = left
    it2.grew = True
    if left <= 0:
        it2.stopped = True  # the advance loop ends the schedule when the budget is spent
    eng.cur = it2
    eng._ff_resumed = True
    eng._form(it2, eng._ff_admit_at)
    return total

"""Pools, holds and the per-session prefix cache (docs/language.md §11.4, §11.8): the hold
statement (request mark, rejection, queue, admission attempt, admit), queues and their heads,
release with `cache`, leases, and the cache's eviction.

A pool keeps `used` (allocated units) and `cached` (Σ cache-entry sizes) with the invariant
`used + cached <= cap`; cached units never block an admission, they are evicted to make room,
one block from the tail of the first entry in eviction order at a time. Growth and preemption
(§11.7) are `growth.py`; a `share content` pool's physical blocks are `content.BlockPool`.

Speed trick (labelled): for `evict lru` the entries sit in a heap keyed `(last, release)`; since
an entry keeps its key while it shrinks, the block-by-block rule evicts consecutive blocks from
the same entry, so a whole run of blocks is taken from it at once (records, when kept, still
list one eviction per block).

serq_spec counterpart: `serq_spec/pools.py` (queues, eviction, release, leases), with the hold
statement's admission (`serq_spec/sessions.py` `exec_hold`, `try_admit`, `attempt`, `admit`) and
the scope end (`sessions.scope_end`), which the fast engine keeps with the pool they act on.
"""

from __future__ import annotations

import heapq
import math

from serq_fast.defs import (CACHED, COMPUTED, EPS, EV_LEASE_END, QUEUED, TURN_NO,
                            FAULTS, Request, blocks_down, rounddown, roundup, wire)
from serq_fast.content import BlockPool, Content
from serq_fast.expr import RunError, at_text, compile_expr, compile_ref, is_static
from serq_fast.stats import Sample, TimeAverage

ADMITTED, WAIT, REJECTED = "admitted", "wait", "rejected"  # results of an admission attempt


class Entry:
    __slots__ = ("owner", "size", "last", "rel", "attrs")

    def __init__(self, owner, size, last, rel, attrs):
        self.owner, self.size, self.last, self.rel, self.attrs = owner, size, last, rel, attrs


class Part:
    """One pool of an admitted hold: allocation and position (§11.4); on a content pool also its
    physical blocks, its content and how many leading blocks are identified (docs/content.md)."""

    __slots__ = ("pool", "alloc", "pos", "advanced", "reserve", "hold", "blocks", "content", "nid")

    def __init__(self, pool, hold):
        self.pool = pool
        self.hold = hold
        self.alloc = 0.0
        self.pos = 0.0
        self.advanced = False
        self.reserve = 0.0
        self.blocks = None
        self.content = None
        self.nid = 0


class Lease:
    """A Part kept past its hold's scope (docs/language.md §11.4 `lease P (t)`): in the pool's `used`,
    not among its holders (no victim), not an entry (never evicted); `ends_at` is the time of its
    lease-end event (None for t = inf). `hold` keeps the statement whose `cache` clause applies."""

    __slots__ = ("part", "hold", "ends_at")

    def __init__(self, part, hold, until):
        self.part, self.hold, self.ends_at = part, hold, until


class Hold:
    __slots__ = ("stmt", "sess", "depth", "pools", "parts", "request", "join_t", "join_seq",
                 "queued_t", "admitted", "adm")

    def __init__(self, stmt, sess, depth, pools):
        self.stmt = stmt
        self.sess = sess
        self.depth = depth  # index of the frame holding the hold statement
        self.pools = pools  # pool objects, in the statement's order
        self.parts: list = []
        self.request = None
        self.join_t = 0.0
        self.join_seq = 0
        # the latest join, requeues included (serq_spec's QueueItem.joined): an engine's Ŵ reads
        # it; join_t stays the first join, which the report's queue wait reads
        self.queued_t = 0.0
        self.admitted = False
        self.adm = -1  # its admission number (a lagged end's pending resident takes it)


class HoldStmt:
    """A compiled `hold` statement (docs/ir.md)."""

    def __init__(self, st: dict, sim) -> None:
        c = lambda e: compile_expr(e, sim) if e is not None else None  # noqa: E731
        self.sim = sim
        self.refs = [compile_ref(p["pool"], sim, "pool") for p in st["pools"]]
        self.units = [c(p["units"]) for p in st["pools"]]
        self.reserves = [c(p.get("reserve")) for p in st["pools"]]
        # `content (p, n, h)` per pool (docs/content.md §1), read first at each admission attempt
        self.contents = [None if p.get("content") is None else
                         (c(p["content"]["prefix"]), c(p["content"]["length"]), c(p["content"]["history"]))
                         for p in st["pools"]]
        self.has_content = any(x is not None for x in self.contents)
        for p in st["pools"]:
            ref = p["pool"]
            if p.get("content") is not None and not all(
                    q.content for q in sim.pools[ref["base"]:ref["base"] + ref.get("count", 1)]):
                raise RunError(f"`content` on pool {sim.pools[ref['base']].name}, which is not `share content` "
                               f"at {at_text(st.get('at'))}")
        self.reuse = c(st.get("reuse"))
        self.bindings = [(b["slot"], c(b["expr"])) for b in st.get("bindings", [])]
        self.body = st["body"]
        self.cache = c(st.get("cache"))
        lease = st.get("lease")   # `lease P (t)` (docs/language.md §11.4), read at the scope's end
        self.lease = None if lease is None else (compile_ref(lease["pool"], sim, "pool"), c(lease["time"]))
        self.eos = c(st.get("eos"))  # docs/async.md §1: read when a lagged end happens
        req = st.get("request")
        if req is not None:
            self.req_engine = req["engine"]
            # a request block with fewer than two parameters has no prompt or output length
            # (docs/ir.md `request`): null in the records, and no `tpot`
            self.req_prompt = None if req["prompt"] is None else c(req["prompt"])
            self.req_output = None if req["output"] is None else c(req["output"])
        else:
            self.req_engine = None
        binding_exprs = {b["slot"]: b["expr"] for b in st.get("bindings", [])}
        # units / reserves judged at request time (they read only attributes and numbers)
        self.units_static = [is_static(p["units"], binding_exprs) for p in st["pools"]]
        self.reserves_static = [p.get("reserve") is not None and is_static(p["reserve"], binding_exprs)
                                for p in st["pools"]]
        self.static = []
        for p in st["pools"]:
            u = p["units"] if is_static(p["units"], binding_exprs) else None
            r = p.get("reserve")
            r = r if (r is not None and is_static(r, binding_exprs)) else None
            self.static.append((compile_expr(u, sim) if u else None, compile_expr(r, sim) if r else None))
        self.static_bindings = [(b["slot"], compile_expr(b["expr"], sim)) for b in st.get("bindings", [])
                                if is_static(b["expr"], None)]
        self.at = st.get("at")
        # what a decode fast-forward reads to know that a waiting head's attempt cannot change
        self.header_ir = [st["pools"], st.get("bindings", []), st.get("reuse")]

    def execute(self, s) -> None:
        """The hold statement runs: the request mark, the rejection test, then the queue (§11.4)."""
        sim = self.sim
        cx = sim.cx
        pools = [sim.pools[r(cx)] for r in self.refs]
        h = Hold(self, s, len(s.frames) - 1, pools)
        if self.req_engine is not None:

            h.request = Request(s.serial, int(s.attrs[TURN_NO]),
                                None if self.req_prompt is None else self.req_prompt(cx),
                                None if self.req_output is None else self.req_output(cx), sim.now)
            sim.sessions[s.serial].turn_called = True   # a branch's request is its session's turn's (§11.13)
        # rejection: static units (block-rounded) or reserves above the cap
        if any(u is not None or r is not None for u, r in self.static):
            saved = cx.attrs
            tmp = list(s.attrs)
            cx.attrs = tmp
            try:
                for slot, f in self.static_bindings:
                    tmp[slot] = f(cx)
                for pool, (u, r) in zip(pools, self.static):
                    need = 0.0
                    if u is not None:
                        need = roundup(u(cx), pool.block)
                    if r is not None:
                        need = max(need, roundup(r(cx), pool.block))
                    if need > pool.cap + EPS:
                        cx.attrs = saved
                        pool.rejected += 1
                        if sim.rec is not None:
                            sim.rec.setdefault("rejected", []).append([s.tid, pool.name])
                        s.pending = None
                        sim.end_session(s)
                        return
            finally:
                cx.attrs = saved
        pools[0].enqueue(h, front=False)


class Pool:
    def __init__(self, idx: int, p: dict, sim) -> None:
        self.idx = idx
        self.name = p["name"]
        self.cap = wire(p["cap"], f"the cap of pool {self.name}")
        self.block = wire(p["block"], f"the block of pool {self.name}") if p.get("block") is not None else None
        self.sim = sim
        self.spec = p
        self.used = 0.0
        self.cached = 0.0
        self.holders: list = []  # Parts, in admission order
        self.leases: dict = {}  # serial -> Lease, in the order they began
        self.entries: dict = {}
        self.lru: list = []
        self.front: list = []  # head-requeued holds, head first
        self.queue: list = []  # holds in join order
        self.queue_head = 0
        self.growers: list = []
        self.admitted_by = p.get("admitted_by")
        self.reserve_held = bool(p.get("reserve_held"))
        # `share content` (docs/content.md): physical blocks instead of per-session entries
        self.content = p.get("share") == "content"
        self.bp = None
        self.attempt = None  # (session, hit blocks) during an admission attempt on this pool
        if self.content:

            # the program checks of docs/content.md §1, as serq_spec makes them
            if self.block is None or math.isinf(self.cap) or self.cap % self.block != 0:
                raise RunError(f"pool {self.name}: `share content` needs a block and a cap that is a "
                               "whole number of blocks")
            if (p.get("evict") or {"kind": "lru"})["kind"] != "lru":
                raise RunError(f"pool {self.name}: `share content` evicts by LRU only")
            self.bsize = int(self.block)
            self.bp = BlockPool(int(round(self.cap / self.block)), "content_queue_head" in FAULTS())
        self.spill = p.get("spill")   # `spill Q via S (w) when (c)` (docs/language.md §11.8.1), linked below
        self.spills = 0
        self.tier_hits = 0   # blocks a content pool loaded back from its content tier (docs/content.md §6)
        self.admissions = 0
        self.evicted_units = 0.0
        self.evicted_entries = 0
        self.preemptions = 0
        self.rejected = 0
        self.stuck = 0
        self.join_counter = 0

        self.wait = Sample()
        self.ta_used = TimeAverage()
        self.ta_cached = TimeAverage()
        self.ta_queue = TimeAverage()
        self.ta_holders = TimeAverage()

    def link(self, sim) -> None:
        p = self.spec
        name = p["name"]
        ev = p.get("evict") or {"kind": "lru"}
        self.evict_keys = None if ev["kind"] == "lru" else [
            compile_expr(k, sim, ev.get("at"), f"pool {name}: an eviction key") for k in ev["keys"]]
        pr = p.get("preempt") or {"kind": "none"}
        self.preempt_kind = pr["kind"]
        self.preempt_keys = [compile_expr(k, sim, pr.get("at"), f"pool {name}: a preemption key")
                             for k in pr.get("keys", [])] if pr["kind"] == "by" else None
        self.requeue_tail = pr.get("requeue") == "tail"
        q = p.get("queue") or {"kind": "fifo"}
        self.queue_keys = None if q["kind"] == "fifo" else [
            compile_expr(k, sim, q.get("at"), f"pool {name}: a queue key") for k in q["keys"]]
        self.engine_memory = [st for st in sim.stages if st.kind == "step" and st.memory == self.idx]
        # the engine whose requests queue here, when it is declared `lag 1`: a hold whose first
        # pool this is ends lagged (docs/async.md §2)
        eng = sim.stages[self.admitted_by] if self.admitted_by is not None else None
        self.lag_eng = eng if eng is not None and getattr(eng, "lag", 0) else None
        # the tiers under this pool, nearest first (the linker refuses cycles), and the `spill` clause
        self.tiers = []
        q = p.get("spill")
        while q is not None:
            self.tiers.append(sim.pools[q["pool"]])
            q = sim.ir["pools"][q["pool"]].get("spill")
        if self.spill is not None:
            sp = self.spill
            self.tier = sim.pools[sp["pool"]]
            self.link_stage = sim.stages[sp["stage"]]
            self.spill_when = compile_expr(sp["when"], sim, sp.get("at"), f"pool {name}: `spill`")
            self.spill_work = compile_expr(sp["work"], sim, sp.get("at"), f"pool {name}: `spill`")
        # seeded faults, for showing that lockstep catches them (docs/fast.md "Seeded faults")
        self.fault_lru = "lru_tiebreak" in FAULTS()
        self.fault_spill_lost = "spill_lost" in FAULTS()
        self.fault_load_no_wait = "load_no_wait" in FAULTS()
        self.fault_engine_load_no_wait = "engine_load_no_wait" in FAULTS()
        self.fault_loads_reversed = "loads_reversed" in FAULTS()
        self.fault_tier_touch_forward = "tier_touch_forward" in FAULTS()
        self.fault_victim = "victim_first" in FAULTS()
        self.fault_branch_key = "branch_key" in FAULTS()

    # ------------------------------------------------------------ statistics

    def sample(self, now: float) -> None:
        ta = self.ta_used
        if ta.v != self.used:
            ta.set(now, self.used)
        ta = self.ta_cached
        if ta.v != self.cached:
            ta.set(now, self.cached)
        q = len(self.front) + len(self.queue) - self.queue_head
        if self.ta_queue.v != q:
            self.ta_queue.set(now, q)
        if self.ta_holders.v != len(self.holders):
            self.ta_holders.set(now, len(self.holders))

    def reset_averages(self, t: float) -> None:
        # the values held at the warm-up carry on: only the integrals restart
        self.ta_used.reset(t, self.used)
        self.ta_cached.reset(t, self.cached)
        self.ta_queue.reset(t, self.qlen())
        self.ta_holders.reset(t, len(self.holders))

    # ------------------------------------------------------------ observables

    def qlen(self) -> int:
        return len(self.front) + len(self.queue) - self.queue_head

    def observe(self, f: str, cx) -> float:
        if f == "used":
            return self.used
        if f == "free":
            return self.cap - self.used
        if f == "cachedin":
            s = cx.sess
            if s is None:
                return 0.0
            if self.content:
                # the hit of the admission attempt of this session on this pool, else 0
                a = self.attempt
                return a[1] * self.block if a is not None and a[0] is s else 0.0
            e = self.entries.get(self.entry_key(s))
            size = e.size if e is not None else 0.0
            for q in self.tiers:   # the rest of the prefix, on the `spill` tiers (§11.8.1)
                e = q.entries.get(q.entry_key(s))
                if e is not None:
                    size += e.size
            return size
        if f == "holders":
            return float(len(self.holders))
        if f == "queued":
            return float(self.qlen())
        raise RunError(f"observable {f} of a pool")

    # ------------------------------------------------------------ queue

    def enqueue(self, h: Hold, front: bool) -> None:
        s = h.sess

        s.status = QUEUED
        s.where = self
        s.pending = h
        h.queued_t = self.sim.now
        if front:
            self.front.insert(0, h)
        else:
            h.join_t = self.sim.now
            self.join_counter += 1
            h.join_seq = self.join_counter
            self.queue.append(h)

    def queue_list(self) -> list:
        return self.front + self.queue[self.queue_head:]

    def head(self):
        if self.front:
            return self.front[0]
        if self.queue_head >= len(self.queue):
            return None
        if self.queue_keys is None:
            return self.queue[self.queue_head]
        sim = self.sim
        cx = sim.cx
        saved = (cx.attrs, cx.sess, cx.var)
        best, bestk = None, None
        try:
            for h in self.queue[self.queue_head:]:
                cx.attrs, cx.sess = h.sess.attrs, h.sess
                cx.var = {"waited": sim.now - h.join_t}
                k = tuple(f(cx) for f in self.queue_keys)
                if bestk is None or k < bestk:
                    best, bestk = h, k
        finally:
            cx.attrs, cx.sess, cx.var = saved
        return best

    def remove_from_queue(self, h: Hold) -> None:
        if self.front and h in self.front:
            self.front.remove(h)
            return
        q = self.queue
        if self.queue_head < len(q) and q[self.queue_head] is h:
            self.queue_head += 1
            if self.queue_head > 64 and self.queue_head * 2 > len(q):
                del q[:self.queue_head]
                self.queue_head = 0
            return
        # entries below queue_head are already admitted (kept until compaction): search above it,
        # or a re-queued hold (requeue tail) would remove its own stale copy
        del q[q.index(h, self.queue_head)]

    # ------------------------------------------------------------ admission

    def try_admit(self, h: Hold):
        """One admission attempt for the queue head `h` (§11.4): evaluate, test, admit.

        Returns ADMITTED, WAIT (the head does not fit now) or REJECTED: some pool's amount exceeds
        its cap and that amount reads only attributes, bindings and numbers, so the hold can never
        fit (docs/spec.md "A hold that can never fit", a project decision following pyserq): the
        session ends, the pool's `rejected` count goes up, the bindings are restored."""
        sim = self.sim
        cx = sim.cx
        s = h.sess
        st = h.stmt
        saved = (cx.attrs, cx.sess, cx.draw, cx.var)
        cx.attrs, cx.sess, cx.draw, cx.var = s.attrs, s, s.src, {}
        before = [(slot, s.attrs[slot]) for slot, _ in st.bindings]
        contents = None
        try:
            if st.has_content:
                contents = self._contents(h)
            evals = self._amounts(h, cx)
            for i, (pool, u, r) in enumerate(evals):
                ru = roundup(u, pool.block)
                too_big_u = ru > pool.cap + EPS and st.units_static[i]
                too_big_r = r is not None and roundup(r, pool.block) > pool.cap + EPS and st.reserves_static[i]
                if too_big_u or too_big_r:
                    for slot, v in before:
                        s.attrs[slot] = v
                    pool.rejected += 1
                    if sim.rec is not None:
                        sim.rec.setdefault("rejected", []).append([s.tid, pool.name])
                    cx.attrs, cx.sess, cx.draw, cx.var = saved
                    sim.end_session(s)
                    return REJECTED
            amounts = []
            # a content pool's fit depends on how many hit blocks are reused: ρ is read first
            has_cpool = sim.has_content and any(pool.content for pool in h.pools)
            reuse = st.reuse(cx) if (has_cpool and st.reuse is not None) else None
            for i, (pool, u, r) in enumerate(evals):
                ru = roundup(u, pool.block)   # any rational amount (docs/spec.md "Non-whole pool amounts")
                need = max(u, r) if r is not None else u
                rneed = roundup(need, pool.block)
                used = pool.used
                if pool.reserve_held:
                    used += sum(max(0.0, q.reserve - q.alloc) for q in pool.holders)
                if contents is not None and contents[i] is not None:
                    c, k, t = contents[i]
                    nreuse = k + t if reuse is None else min(k + t, blocks_down(reuse, pool.bsize))
                    # of the reused blocks, those past the pool's hit come from its content tier
                    # and take new blocks (docs/content.md §6)
                    from_tier = max(0, nreuse - k)
                    # vLLM: blocks to allocate plus hit blocks taken out of the free queue
                    nnew = max(0, int(rneed // pool.bsize) - nreuse) + from_tier
                    if used + (nnew + pool.bp.evictable(c, nreuse - from_tier)) * pool.block > pool.cap + EPS:
                        return WAIT
                    amounts.append((ru, r if r is not None else 0.0, c, nreuse, u, from_tier))
                    continue
                if used + rneed > pool.cap + EPS:
                    return WAIT
                amounts.append((ru, r if r is not None else 0.0, None, 0, u, 0))
            if not has_cpool:
                reuse = st.reuse(cx) if st.reuse is not None else None
            self._admit(h, amounts, reuse)
            return ADMITTED
        finally:
            cx.attrs, cx.sess, cx.draw, cx.var = saved
            if contents is not None:
                for pool in h.pools:
                    pool.attempt = None

    def _contents(self, h: Hold) -> list:
        """`content (p, n, h)` of each content pool of the hold, read before the bindings, and the
        hit it has now (docs/content.md §3); `cachedin` reads the hit during this attempt."""
        sim = self.sim
        cx = sim.cx
        st = h.stmt
        out = []
        for pool, ex in zip(h.pools, st.contents):
            if ex is None or not pool.content:
                out.append(None)
                continue
            p, n, hist = ex[0](cx), ex[1](cx), ex[2](cx)
            sim.prefixes.check(p, n, pool.name, st.at)

            c = Content(sim.prefixes, p, n, hist, pool.bsize)
            k = pool.bp.hit(c)
            # the lookup goes on into a content tier after the pool's hit (docs/content.md §6)
            t = pool.tier.bp.tier_hit(c, k) if pool.spill is not None else 0
            pool.attempt = (h.sess, k + t)
            out.append((c, k, t))
        return out

    @staticmethod
    def _amounts(h: Hold, cx) -> list:
        """Bind the hold's `at admission` names, then read every pool's units and reserve (Admit
        moment, in cx = the head's session): [(pool, units, reserve or None)]."""
        st = h.stmt
        for slot, f in st.bindings:
            h.sess.attrs[slot] = f(cx)
        evals = []
        for i, pool in enumerate(h.pools):
            u = st.units[i](cx)
            r = st.reserves[i](cx) if st.reserves[i] is not None else None
            if u < 0 or (r is not None and r < 0):
                raise RunError(f"a negative amount for pool {pool.name} at {at_text(st.at)}")
            evals.append((pool, u, r))
        return evals

    def head_over_cap(self) -> list:
        """When the run ends (§11.4 `over_cap`): [(pool, serial, need)] for each pool of the queue
        head's hold whose block-rounded need max(units, reserve), read now, exceeds its cap; the
        head's bindings are restored (the head is not admitted)."""
        h = self.head()
        if h is None:
            return []
        sim = self.sim
        cx = sim.cx
        s = h.sess
        # an engine's `admit` amounts may read its schedule `let`s: read them as the engine's
        # next iteration would, in the end state (no iteration is running when the run ends)
        eng = sim.stages[self.admitted_by] if self.admitted_by is not None else None
        saved = (cx.attrs, cx.sess, cx.draw, cx.var, cx.eng)
        saved_locals = eng.locals if eng is not None else None
        before = [(slot, s.attrs[slot]) for slot, _ in h.stmt.bindings]
        try:
            if eng is not None:
                cx.attrs, cx.sess, cx.draw, cx.var, cx.eng = [], None, sim.machine_src, {}, eng
                eng.locals = [f(cx) for f in eng.let_fns]
            cx.attrs, cx.sess, cx.draw, cx.var = s.attrs, s, s.src, {}
            evals = self._amounts(h, cx)
        finally:
            for slot, v in before:
                s.attrs[slot] = v
            cx.attrs, cx.sess, cx.draw, cx.var, cx.eng = saved
            if eng is not None:
                eng.locals = saved_locals
        out = []
        for pool, u, r in evals:
            need = roundup(max(u, r) if r is not None else u, pool.block)
            if need > pool.cap + EPS:
                out.append((pool, s.tid, need))
        return out

    def _admit(self, h: Hold, amounts: list, reuse) -> None:
        sim = self.sim
        s = h.sess
        self.remove_from_queue(h)
        s.pending = None
        consumed_max = 0.0
        has_cache = h.stmt.cache is not None
        h.parts = []
        loads = []   # (pool, units) of each prefix loaded back from a `spill` tier, in the hold's order
        rec = sim.rec
        for pool, (units, reserve, content, nreuse, u, from_tier) in zip(h.pools, amounts):
            consumed = 0.0
            loaded = 0.0
            if pool.content:
                part = pool._admit_blocks(h, u, content, nreuse, from_tier)
                if from_tier:
                    pool.tier_hits += from_tier
                    loads.append((pool, float(from_tier * pool.bsize)))
                consumed = part.pos
                consumed_max = max(consumed_max, consumed)
                part.reserve = roundup(reserve, pool.block) if pool.reserve_held and reserve > 0 else 0.0
                pool.holders.append(part)
                pool.admissions += 1
                h.parts.append(part)
                if rec is not None:
                    rec["admitted"].append([s.tid, pool.name, part.alloc, consumed])
                continue
            if has_cache and pool.admitted_by is None:
                limit = None if reuse is None else rounddown(max(reuse, 0.0), pool.block)
                consumed = pool.consume_entry(pool.entry_key(s), limit)
                if pool.tiers:
                    # the prefix goes on into the session's entries on the `spill` tiers (§11.8.1)
                    for q in pool.tiers:
                        loaded += q.consume_entry(q.entry_key(s), None if limit is None else limit - consumed - loaded)
                    if loaded > EPS:
                        loads.append((pool, loaded))
                    consumed += loaded
            consumed_max = max(consumed_max, consumed)
            pool.make_room(units)
            pool.used += units
            part = Part(pool, h)
            part.alloc = units
            part.pos = consumed
            # `reserve held`: the block-rounded reserve is kept while the hold lasts (§11.4)
            part.reserve = roundup(reserve, pool.block) if pool.reserve_held and reserve > 0 else 0.0
            pool.holders.append(part)
            pool.admissions += 1
            h.parts.append(part)
            if rec is not None:
                rec["admitted"].append([s.tid, pool.name, units, consumed])

        s.attrs[CACHED] = consumed_max if (has_cache or h.stmt.has_content) else 0.0
        if h.request is not None and h.request.hit is None:
            h.request.hit = s.attrs[CACHED]
        if sim.measuring:
            h.pools[0].wait.add(sim.now - h.join_t)
        s.adm_seq = h.adm = sim.next_adm
        sim.next_adm += 1
        h.admitted = True
        s.holds.append(h)
        s.frames.append([sim.blocks[h.stmt.body], 0, "hold", h])
        if self.fault_engine_load_no_wait and h.pools[0].admitted_by is not None:
            loads = []   # seeded fault (docs/fast.md): an engine's admission skips the load-back
        if self.fault_loads_reversed:
            loads.reverse()   # seeded fault (docs/fast.md): the load-backs against the hold's pool order
        s.loads = loads
        if not (loads and sim.next_load(s)):
            sim.make_ready(s)

    def load_back(self, s, loaded: float) -> bool:
        """The part of the admitted prefix from this pool's tiers comes back over the link before
        the body starts (§11.8.1): the session's job of `spill` work read with `size` = loaded,
        `last` = now, `age` = 0, `waiting` = 0. False when the work is 0 (no time passes)."""
        sim = self.sim
        cx = sim.cx
        saved = (cx.attrs, cx.sess, cx.var)
        cx.attrs, cx.sess = s.attrs, s
        cx.var = {"size": loaded, "last": sim.now, "age": 0.0, "waiting": 0.0}
        try:
            w = self._link_work(cx)
        finally:
            cx.attrs, cx.sess, cx.var = saved
        if w <= 0 or self.fault_load_no_wait:   # seeded fault (docs/fast.md): the body does not wait
            return False
        self.link_stage.submit(s, w, "plain", None)
        return True

    def _link_work(self, cx) -> float:
        w = self.spill_work(cx)
        if not (0.0 <= w < math.inf):
            raise RunError(f"pool {self.name}: the work of `spill` must be finite and >= 0, got {w} at "
                           f"{at_text(self.spill.get('at'))}")
        return w

    def consume_entry(self, serial: int, limit):
        """Remove the session's entry; keep at most `limit` (None: all), the rest a dead entry
        with its age (§11.4 step 1). Returns what was kept."""
        e = self.entries.pop(serial, None)
        if e is None:
            return 0.0
        self.cached -= e.size
        if limit is None or e.size <= limit:
            return e.size
        sim = self.sim
        self._insert(Entry(sim.next_dead, e.size - limit, e.last, e.rel, e.attrs))
        sim.next_dead -= 1
        return limit

    # ------------------------------------------------------------ content blocks (docs/content.md)

    def _admit_blocks(self, h: Hold, units: float, content, nreuse: int, from_tier: int = 0) -> Part:
        """Admit on a content pool: touch the reused hit blocks in block order, allocate the rest
        from the free-queue head (evicting), then identify the blocks full at `units` (unrounded:
        the tokens scheduled). The last `from_tier` reused blocks come from the content tier
        (docs/content.md §6): refreshed there first, then new blocks here, identified at once."""
        bp = self.bp
        b = self.bsize
        part = Part(self, h)
        on_pool = nreuse - from_tier
        blocks = bp.touch_hits(content, on_pool) if content is not None else []
        if from_tier:
            self.tier.bp.tier_touch(content, on_pool, from_tier, self.fault_tier_touch_forward)
        self._take(blocks, from_tier + max(0, math.ceil(units / b - EPS) - nreuse))
        part.blocks = blocks
        part.content = content
        part.nid = on_pool
        if from_tier:
            self.identify(part, nreuse * b)
        part.alloc = float(len(blocks) * b)
        part.pos = float(nreuse * b)
        # an engine that speculates counts its lookahead (and a pad's placeholder drafts) in
        # `units`: the run's first step identifies its verified tokens instead (docs/language.md §7.3)
        eng = self.sim.cx.eng
        it = eng.cur if eng is not None else None
        if it is None or eng.spec_fns is None or not (it.slots or it.look):
            self.identify(part, units)
        self._sync()
        return part

    def _take(self, blocks: list, count: int) -> None:
        """`count` new blocks from the free-queue head; an identified one is evicted."""
        bp = self.bp
        rec = self.sim.rec
        for _ in range(count):
            x, old = bp.pop()
            if old is not None:
                self.evicted_units += self.block
                if rec is not None:
                    rec["evicted"].append([None, self.name, self.bsize])  # a block has no owner
                if self.spill is not None:
                    self._sync()   # the `when` may read this pool, as it is after the pop
                    self._spill_block(old)
            blocks.append(x)

    def _spill_block(self, ident) -> None:
        """An identified block just evicted (docs/content.md §6): with `when` ≠ 0 — read with
        `size` = b, `last` = now, `age` = 0, `waiting` = 0 and no session (attributes 0) — its
        identity moves to the content tier unless the tier has it, and its copy runs on the link."""
        sim = self.sim
        cx = sim.cx
        saved = (cx.attrs, cx.sess, cx.var)
        cx.attrs, cx.sess = [0.0] * sim.nattrs, None
        cx.var = {"size": self.block, "last": sim.now, "age": 0.0, "waiting": 0.0}
        try:
            if self.spill_when(cx) == 0:
                return
            tier = self.tier
            if ident in tier.bp.idmap or tier.bp.n == 0:
                return   # the tier has this content already: nothing is copied; or it has no block
            w = self._link_work(cx)
        finally:
            cx.attrs, cx.sess, cx.var = saved
        if tier.bp.tier_store(ident) is not None:
            tier.evicted_units += tier.block
            if sim.rec is not None:
                sim.rec["evicted"].append([None, tier.name, tier.bsize])
        tier._sync()
        self.spills += 1
        if w > 0:
            self.link_stage.submit_copy(w)

    def identify(self, part: Part, pos: float) -> None:
        """Blocks wholly inside the first `pos` scheduled tokens get their identity, in block
        order (a hold without `content` never identifies: it neither hits nor is hit)."""
        c = part.content
        if c is None:
            return
        full = min(int(pos // self.bsize), len(part.blocks))
        j = part.nid
        if j >= full:
            return
        bp = self.bp
        blocks = part.blocks
        while j < full:
            bp.identify(blocks[j], c.ident(j))
            j += 1
        part.nid = full

    def _sync(self) -> None:
        bp = self.bp
        self.used = float((bp.n - bp.nfree) * self.bsize)
        self.cached = float(bp.ncached * self.bsize)

    def admit_heads(self) -> None:
        while True:
            h = self.head()
            if h is None or self.try_admit(h) == WAIT:
                return

    # ------------------------------------------------------------ cache

    def _insert(self, e: Entry) -> None:
        self.entries[e.owner] = e
        self.cached += e.size
        if self.evict_keys is None:
            heapq.heappush(self.lru, (e.last, -e.rel if self.fault_lru else e.rel, e.owner))
            if len(self.lru) > 2 * len(self.entries) + 64:
                # drop the keys of consumed or replaced entries: memory stays bounded by the cache
                self.lru = [(x.last, -x.rel if self.fault_lru else x.rel, x.owner) for x in self.entries.values()]
                heapq.heapify(self.lru)

    def entry_key(self, s) -> int | str:
        """The key of a thread's cache entry: its name, so a sub-agent's context is its own
        (docs/language.md §11.13). Seeded fault `branch_key`: its session's serial, as if every
        branch were its session."""
        return s.serial if self.fault_branch_key else s.tid

    def put_entry(self, serial: int | str, size: float, attrs) -> None:
        """Replace the session's entry with a fresh one (release with a `cache` clause)."""
        sim = self.sim
        self.drop_entry(serial)   # with the rest on the tiers: it continued the old prefix (§11.8.1)
        e = Entry(serial, size, sim.now, sim.next_rel, list(attrs))
        sim.next_rel += 1
        self._insert(e)

    def drop_entry(self, serial: int | str) -> None:
        """`drop P;`: the session's entry and its rest on P's tiers (§11.8.1)."""
        e = self.entries.pop(serial, None)
        if e is not None:
            self.cached -= e.size
        for q in self.tiers:
            e = q.entries.pop(serial, None)
            if e is not None:
                q.cached -= e.size

    def _victim_entry(self):
        if self.evict_keys is None:
            h = self.lru
            while h:
                last, rel, owner = h[0]
                e = self.entries.get(owner)
                if e is not None and abs(e.rel) == abs(rel) and e.last == last:
                    return e
                heapq.heappop(h)
            return None
        sim = self.sim
        cx = sim.cx
        saved = (cx.attrs, cx.sess, cx.var)
        best, bestk = None, None
        try:
            for e in self.entries.values():
                sess = sim.branches.get(e.owner) if isinstance(e.owner, str) else sim.sessions.get(e.owner)
                waiting = 1.0 if (sess is not None and sess.pending is not None) else 0.0
                # a finished branch's entry is nobody's, read as serq_spec reads a dead entry:
                # attributes 0 (docs/language.md §11.13)
                gone = sess is None and isinstance(e.owner, str)
                cx.attrs, cx.sess = ([0.0] * len(e.attrs) if gone else e.attrs), sess
                cx.var = {"size": e.size, "last": e.last, "age": sim.now - e.last, "waiting": waiting}
                k = tuple(f(cx) for f in self.evict_keys) + (e.rel,)
                if bestk is None or k < bestk:
                    best, bestk = e, k
        finally:
            cx.attrs, cx.sess, cx.var = saved
        return best

    def make_room(self, need: float) -> None:
        """Evict cache entries, tail block first, until `used + cached + need <= cap`."""
        rec = self.sim.rec
        while self.used + self.cached + need > self.cap + EPS:
            e = self._victim_entry()
            if e is None:
                return
            over = self.used + self.cached + need - self.cap
            if self.block is None:
                take = e.size
            else:
                b = self.block
                if self.evict_keys is None and self.spill is None:
                    # labelled speed trick: the LRU entry stays first while it shrinks
                    nblk = math.ceil(over / b - EPS)
                    take = min(e.size, nblk * b)
                else:
                    take = min(b, e.size)
            if rec is not None:
                if self.block is None:
                    rec["evicted"].append([e.owner, self.name, take])
                else:
                    left = take
                    while left > EPS:
                        t = min(self.block, left)
                        rec["evicted"].append([e.owner, self.name, t])
                        left -= t
            e.size -= take
            self.cached -= take
            self.evicted_units += take
            if e.size <= EPS:
                del self.entries[e.owner]
                self.evicted_entries += 1
            # a live entry spills (a session's or a branch's, §11.13); a dead one (negative) does not
            if self.spill is not None and e.owner is not None and (isinstance(e.owner, str) or e.owner >= 0):
                self._spill_chunk(e, take)

    def _spill_chunk(self, e: Entry, take: float) -> None:
        """A chunk just evicted from the tail of a session's entry (§11.8.1): with `when` ≠ 0 and
        room for it on the tier at all, the tier makes room, the chunk joins the front of the
        session's entry there (release time now), and its copy runs on the link as a job of no
        session. Otherwise it is dropped."""
        sim = self.sim
        cx = sim.cx
        sess = sim.sessions.get(e.owner)
        saved = (cx.attrs, cx.sess, cx.var)
        cx.attrs, cx.sess = e.attrs, sess
        cx.var = {"size": take, "last": e.last, "age": sim.now - e.last,
                  "waiting": 1.0 if (sess is not None and sess.pending is not None) else 0.0}
        try:
            if self.spill_when(cx) == 0:
                return
            tier = self.tier
            if take > tier.cap + EPS:
                return
            w = self._link_work(cx)
        finally:
            cx.attrs, cx.sess, cx.var = saved
        tier.make_room(take)
        if self.fault_spill_lost:
            # seeded fault (docs/fast.md): the tier makes room and the copy runs, but the chunk
            # never arrives there
            self.spills += 1
            if w > 0:
                self.link_stage.submit_copy(w)
            return
        old = tier.entries.pop(e.owner, None)
        size = take
        if old is not None:
            tier.cached -= old.size
            size += old.size
        tier._insert(Entry(e.owner, size, sim.now, sim.next_rel, e.attrs))
        sim.next_rel += 1
        self.spills += 1
        if w > 0:
            self.link_stage.submit_copy(w)

def find_part(s, pool: Pool):
    for h in reversed(s.holds):
        for part in h.parts:
            if part.pool is pool:
                return part
    return None


def _lease_clause(sim, s, h: Hold):
    """The hold's `lease P (t)` read as its scope ends: (pool, ends_at), ends_at = now + t or None
    for t = inf; None without the clause, with t = 0, or when the hold no longer holds the pool
    (then it ends as without the clause)."""
    clause = h.stmt.lease
    if clause is None:
        return None
    ref, time = clause
    cx = sim.cx
    saved = (cx.attrs, cx.sess, cx.draw, cx.var)
    cx.attrs, cx.sess, cx.draw, cx.var = s.attrs, s, s.src, {}
    try:
        t = time(cx)
        pool = sim.pools[ref(cx)]
    finally:
        cx.attrs, cx.sess, cx.draw, cx.var = saved
    if not t >= 0:
        raise RunError(f"a lease time must be >= 0 seconds, got {t} at {at_text(h.stmt.at)}")
    if t == 0 or not any(q.pool is pool for q in h.parts):
        return None  # nothing to lease: released early (`release P;`), or not the hold's pool
    return pool, (None if math.isinf(t) else sim.now + t)


def start_lease(sim, s, h: Hold, pool: Pool, until) -> None:
    """The part of `h` on `pool` outlives the scope: it leaves the hold and the holders, its units
    stay in `used`; a finite lease schedules its end event."""

    if s.tid in pool.leases:
        raise RunError(f"session {s.tid} leases pool {pool.name} while its earlier lease of it is held; "
                       f"`release` the first before the second scope ends at {at_text(h.stmt.at)}")
    part = next(q for q in h.parts if q.pool is pool)
    h.parts.remove(part)
    pool.holders.remove(part)
    lease = Lease(part, h, until)
    pool.leases[s.tid] = lease
    if until is not None:
        sim.push(until, EV_LEASE_END, pool, lease)
    if "lease_evictable" in FAULTS():
        # seeded fault (docs/fast.md): the leased units go to the cache at once, where they can be
        # evicted, instead of staying allocated
        pool.used -= part.alloc
        kept = rounddown(part.alloc, pool.block)
        part.alloc = 0.0
        if kept > EPS:
            pool.put_entry(pool.entry_key(s), kept, s.attrs)


def end_lease(sim, s, pool: Pool) -> None:
    """The lease ends (`release P`, its end event, the session's end): the units leave `used`
    and the hold's `cache` clause applies now. A pending end event becomes stale (event_valid)."""
    lease = pool.leases.pop(s.tid)
    release_part(sim, lease.part, _cache_amount(sim, lease.hold), holder=False)


def lease_valid(ev: tuple) -> bool:
    """Is a lease-end event still the end of a lease held? (lazy deletion, as for ps departures)"""
    pool, lease = ev[3], ev[4]
    return pool.leases.get(lease.hold.sess.tid) is lease


def _cache_amount(sim, h: Hold):
    st = h.stmt
    if st.cache is None:
        return None
    cx = sim.cx
    s = h.sess
    saved = (cx.attrs, cx.sess, cx.draw, cx.var)
    cx.attrs, cx.sess, cx.draw, cx.var = s.attrs, s, s.src, {}
    try:
        return st.cache(cx)
    finally:
        cx.attrs, cx.sess, cx.draw, cx.var = saved


def release_part(sim, part: Part, ell, holder: bool = True) -> None:
    pool = part.pool
    s = part.hold.sess
    if holder:   # a leased part is no holder any more
        pool.holders.remove(part)
    kept = 0.0
    if pool.content:
        # the blocks go back last first; their identities stay (the `cache` clause has no effect)
        pool.bp.release(part.blocks)
        pool._sync()
        part.blocks = []
        ell = None
    else:
        pool.used -= part.alloc
    # the cache clause applies to pools counted in tokens, not to engine-admitted request slots
    # (docs/spec.md "Ambiguities resolved"; docs/fast.md)
    if ell is not None and pool.admitted_by is None:
        # capped by the allocation: a consumed prefix above it was never allocated (docs/spec.md
        # "A position above the allocation")
        comp = min(part.pos, part.alloc) if part.advanced else part.alloc
        kept = rounddown(min(ell, comp), pool.block)
        if kept > EPS:
            pool.put_entry(pool.entry_key(s), kept, s.attrs)
        else:
            kept = 0.0
    if s.growth is not None and s.growth[0] is part:
        if s in pool.growers:
            pool.growers.remove(s)
        s.growth = None
    if sim.rec is not None:
        sim.rec["released"].append([s.tid, pool.name, kept])


def release_hold(sim, h: Hold, cache: bool = True) -> None:
    ell = _cache_amount(sim, h) if cache else None
    for part in list(h.parts):
        release_part(sim, part, ell)
    h.parts = []


def release_early(sim, s, pool: Pool) -> None:
    """`release P;`: the session's lease of P ends, if it has one; else the innermost hold's
    allocation of P goes now, caching per its clause; else nothing (a lease may have run out)."""
    if s.tid in pool.leases:
        end_lease(sim, s, pool)
        return
    for h in reversed(s.holds):
        for part in h.parts:
            if part.pool is pool:
                ell = _cache_amount(sim, h)
                release_part(sim, part, ell)
                h.parts.remove(part)
                return


def scope_end(sim, s, h: Hold) -> None:
    """The end of a hold's body: release with caching, reset `computed`, record completion."""

    lease = _lease_clause(sim, s, h)
    if lease is not None:
        start_lease(sim, s, h, *lease)
    release_hold(sim, h, cache=True)
    if s.holds and s.holds[-1] is h:
        s.holds.pop()
    elif h in s.holds:
        s.holds.remove(h)
    s.attrs[COMPUTED] = 0.0
    for pool in h.pools:
        s.prepos.pop(pool.idx, None)
    req = h.request
    if req is not None:
        req.done = sim.now
        resp = sim.now - req.submit
        sim.client_record("response", resp, s)
        if req.output is not None and req.output > 1 and req.first is not None:
            sim.client_record("tpot", (resp - (req.first - req.submit)) / (req.output - 1), s)
        if sim.records is not None and s.turn_warm:
            sim.records.append(req)

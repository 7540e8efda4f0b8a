"""Invariants checked after every step (issue item 4): real checks, never `assert`.

`check_invariants(config, previous_now=None)` returns the list of violated properties (empty
when all hold); `check_or_raise` stops the run with the step and the whole state.
"""

from __future__ import annotations

from typing import Optional

from serq.wire import Value

from .config import Config, Session, Tid, thread
from .content import block_pool
from .errors import InvariantViolation
from .trace import state_text
from .values import wire


def check_invariants(cfg: Config, previous_now: Optional[Value] = None) -> list[str]:
    """The violated invariants of `cfg` (empty when all hold); `previous_now` checks time monotony."""
    prog = cfg.program
    bad: list[str] = []
    # time never decreases; every pending event is at or after now, in (time, seq) order
    if previous_now is not None and cfg.now < previous_now:
        bad.append(f"time went back from {wire(previous_now)} to {wire(cfg.now)}")
    keys = [e.key() for e in cfg.events]
    if keys != sorted(keys):
        bad.append("the event list is not in (time, seq) order")
    if any(e.time < cfg.now for e in cfg.events):
        bad.append("an event is pending in the past")
    if len({e.seq for e in cfg.events}) != len(cfg.events) or any(e.seq >= cfg.counters.next_seq for e in cfg.events):
        bad.append("event sequence numbers are not unique or exceed the counter")
    # pools: used + cached ≤ cap; used = Σ holders' allocations; holders in admission order
    for p, st in enumerate(cfg.pools):
        name = prog.pools[p]["name"]
        cached = st.cached()
        if st.used < 0 or cached < 0 or any(e.size <= 0 for e in st.entries):
            bad.append(f"pool {name}: a negative quantity (used {st.used}, cached {cached}) or an empty entry")
        if st.used + cached > prog.caps[p]:
            bad.append(f"pool {name}: used {st.used} + cached {cached} > cap {wire(prog.caps[p])}")
        held, order = 0, []
        for s in threads(cfg):
            for h in s.holds:
                if p in h.pools:
                    i = h.pools.index(p)
                    held += h.alloc[i]
                    order.append((h.admission, s.tid))
                    if h.alloc[i] < 0 or h.position[i] < 0:
                        bad.append(f"pool {name}: thread {s.tid} has a negative allocation or position")
        leased = 0
        for x in st.leases:   # a lease (§11.4): its units stay in `used`; its session is live, no holder
            leased += x.part.alloc[0]
            if x.part.pools != [p] or thread(cfg, x.serial).status[0] == "ended":
                bad.append(f"pool {name}: the lease of session {x.serial} is not a live session's lease of this pool")
            pending = [e.time for e in cfg.events if e.kind == "lease_end" and e.arg == (p, x.serial)]
            if pending != ([] if x.ends_at is None else [x.ends_at]):
                bad.append(f"pool {name}: the lease of session {x.serial} has the lease_end events {pending}")
        timed = {x.serial for x in st.leases if x.ends_at is not None}
        if any(e.kind == "lease_end" and e.arg[0] == p and e.arg[1] not in timed for e in cfg.events):
            bad.append(f"pool {name}: a pending lease_end event of no timed lease")
        if len({x.serial for x in st.leases}) != len(st.leases):
            bad.append(f"pool {name}: a session holds two leases of it")
        if st.content is not None:
            bad += content_invariants(cfg, p)
        elif held + leased != st.used:
            bad.append(f"pool {name}: used {st.used} != sum of holders' allocations and leases {held + leased}")
        if [x for _, x in sorted(order)] != st.holders:
            bad.append(f"pool {name}: holders {st.holders} are not the holding sessions in admission order")
        owners = [e.owner for e in st.entries]
        if len(set(owners)) != len(owners):
            bad.append(f"pool {name}: two cache entries with one owner")
    # step engines: residents in admission order; work never negative
    for i, stage in enumerate(cfg.stages):
        name = prog.stages[i]["name"]
        if stage.kind == "step":
            adm = [j.admission for j in stage.jobs]
            if adm != sorted(adm):
                bad.append(f"engine {name}: residents are not in admission order {adm}")
            serials = {j.serial for j in stage.jobs}
            if stage.iteration is not None and any(a.serial not in serials and not a.pending
                                                for a in stage.iteration["assign"]):
                bad.append(f"engine {name}: the iteration in flight serves a session that is no resident")
            for j in stage.jobs:
                s = thread(cfg, j.serial)
                if j.growing is None or s.status[0] == "growing":
                    continue
                h = next((h for h in reversed(s.holds) if j.growing in h.pools), None)
                if h is None:
                    bad.append(f"engine {name}: session {j.serial} grows a pool it does not hold")
                elif h.advanced[h.pools.index(j.growing)] and h.position[h.pools.index(j.growing)] > h.alloc[h.pools.index(j.growing)]:
                    bad.append(f"engine {name}: session {j.serial}'s position is beyond its allocation")
        for j in stage.jobs + stage.waiting:
            if j.left < 0:
                bad.append(f"stage {name}: session {j.serial} has negative work left")
    # every session in exactly one place
    places: dict = {}

    def put(serial: Tid, where: tuple) -> None:
        places.setdefault(serial, []).append(where)
    for p, st in enumerate(cfg.pools):
        for q in st.queue:
            put(q.serial, ("queued", p))
        for g in st.growers:
            put(g, ("growing", p))
    for i, stage in enumerate(cfg.stages):
        for j in stage.jobs + stage.waiting:
            if j.stages is None or j.stage == i:   # a flow is placed once, at its first stage
                put(j.serial, ("stage", i))
    bad += shared_invariants(cfg)
    for serial in cfg.ready:
        put(serial, ("ready",))
    for s in cfg.sessions + list(cfg.branches.values()):
        where = places.get(s.tid, [])
        if s.status[0] == "joining":
            continue   # branch_invariants
        if s.status[0] == "ended":
            if where:
                bad.append(f"session {s.serial} ended but is still in {where}")
            if s.holds:
                bad.append(f"session {s.serial} ended holding pools")
            continue
        if s.status[0] == "growing":
            # a stalled engine resident is also listed on its engine
            expect = [("growing", s.status[1])] + ([("stage", s.job.stage)] if s.job else [])
            if sorted(where) != sorted(expect):
                bad.append(f"session {s.serial} is growing but is in {where}")
        elif s.status[0] == "ending":
            # docs/async.md: a pending resident is on its engine; a preempted one is nowhere
            expect = [("stage", s.status[1])] if s.job is not None else []
            if where != expect:
                bad.append(f"session {s.serial} is ending but is in {where}")
        elif where != [s.status]:
            bad.append(f"session {s.serial} has status {s.status} but is in {where}")
    if cfg.branches or any(s.status[0] == "joining" for s in cfg.sessions):
        bad += branch_invariants(cfg, places)
    return bad


def threads(cfg: Config) -> list[Session]:
    """Every session, then the live branches (docs/language.md §11.13): the threads that may hold."""
    return cfg.sessions + list(cfg.branches.values())


def shared_invariants(cfg: Config) -> list[str]:
    """docs/language.md §11.14: a job on a stage a flow crosses is one object present at exactly
    its stages, with its remaining work never negative and, once the step is over, a positive
    rate."""
    bad: list[str] = []
    prog = cfg.program
    for i in sorted(prog.shared_stages):
        for j in cfg.stages[i].jobs:
            name = prog.stages[i]["name"]
            at = [x for x in range(len(cfg.stages)) if any(k is j for k in cfg.stages[x].jobs)]
            if at != sorted(j.stages_of()):
                bad.append(f"stage {name}: the job of {j.serial} is present at stages {at}, not at its stages {j.stages_of()}")
            if not j.shared or j.left - j.rate * (cfg.now - j.since) < 0:
                bad.append(f"stage {name}: the job of {j.serial} has negative work left or no remaining-work form")
            if j.rate <= 0 and not cfg.stages[i].dirty:
                bad.append(f"stage {name}: the job of {j.serial} has no rate")
    return bad


def branch_invariants(cfg: Config, places: dict) -> list[str]:
    """docs/language.md §11.13: a joining thread is listed nowhere and waits for a branch; a
    thread's count of running branches is the number of live branches it forked; a live branch
    has not ended. `places`: thread -> where check_invariants found it."""
    bad: list[str] = []
    forked: dict = {}
    for b in cfg.branches.values():
        forked[b.parent] = forked.get(b.parent, 0) + 1
        if b.status[0] == "ended":
            bad.append(f"branch {b.tid} ended but is still listed")
    for s in cfg.sessions + list(cfg.branches.values()):
        if s.status[0] == "joining" and (places.get(s.tid) or not s.live_branches):
            bad.append(f"session {s.tid} is joining but is in {places.get(s.tid, [])} with {s.live_branches} "
                       "branch(es) running")
        if s.live_branches != forked.get(s.tid, 0):
            bad.append(f"session {s.tid} counts {s.live_branches} running branch(es), {forked.get(s.tid, 0)} are live")
    return bad


def content_invariants(cfg: Config, p: int) -> list[str]:
    """A `share content` pool (docs/content.md §3): refs = the hold and lease lists holding the block; the
    free queue = the blocks with refs 0, each once, every unidentified one before every identified
    one (a release prepends the former, appends the latter; only referenced blocks are identified,
    and allocation pops the head); the identity map and the blocks' identities
    agree; used = b × referenced blocks; a hold's allocation = b × its blocks."""
    cs = block_pool(cfg, p)
    name = cfg.program.pools[p]["name"]
    bad = []
    count = [0] * len(cs.refs)
    for s in threads(cfg):
        for h in s.holds:
            if p in h.pools:
                i = h.pools.index(p)
                blocks = h.blocks_of(i)
                if h.alloc[i] != cs.block * len(blocks):
                    bad.append(f"pool {name}: session {s.serial} holds {len(blocks)} blocks but allocation {h.alloc[i]}")
                for b in blocks:
                    count[b] += 1
    for x in cfg.pools[p].leases:   # a leased part keeps its blocks referenced (docs/content.md §3)
        blocks = x.part.blocks_of(0)
        if x.part.alloc[0] != cs.block * len(blocks):
            bad.append(f"pool {name}: the lease of session {x.serial} holds {len(blocks)} blocks but allocation {x.part.alloc[0]}")
        for b in blocks:
            count[b] += 1
    if count != cs.refs:
        bad.append(f"pool {name}: reference counts {cs.refs} != hold and lease lists containing each block {count}")
    if len(set(cs.free_queue)) != len(cs.free_queue):
        bad.append(f"pool {name}: a block appears twice in the free queue {cs.free_queue}")
    if set(cs.free_queue) != {b for b, r in enumerate(cs.refs) if r == 0}:
        bad.append(f"pool {name}: the free queue {cs.free_queue} is not the blocks with no reference")
    kinds = [cs.ident[b] is not None for b in cs.free_queue]
    if kinds != sorted(kinds):
        bad.append(f"pool {name}: an unidentified block follows an identified one in the free queue {cs.free_queue}")
    mapped = {b: k for k, blocks in cs.idmap.items() for b in blocks}
    if (sum(len(v) for v in cs.idmap.values()) != len(mapped) or any(not v for v in cs.idmap.values())
            or mapped != {b: x for b, x in enumerate(cs.ident) if x is not None}):
        bad.append(f"pool {name}: the identity map and the blocks' identities disagree")
    referenced = sum(1 for r in cs.refs if r > 0)
    if cfg.pools[p].used != cs.block * referenced:
        bad.append(f"pool {name}: used {cfg.pools[p].used} != block × referenced blocks {cs.block * referenced}")
    return bad


def check_or_raise(cfg: Config, step: int, previous_now: Optional[Value] = None) -> None:
    """Stop the run with the step and the whole state if an invariant is violated."""
    bad = check_invariants(cfg, previous_now)
    if bad:
        raise InvariantViolation(step, bad, state_text(cfg, cfg.records, step))

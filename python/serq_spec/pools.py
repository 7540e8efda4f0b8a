"""Pools and holds (docs/language.md §11.4, §11.7, §11.8): queues, admission, make_room, release, eviction."""

from __future__ import annotations

from fractions import Fraction
from typing import Optional, cast

from serq.errors import number_text
from serq.wire import Value

from . import content
from . import values as V
from .config import Config, Entry, HoldState, Lease, QueueItem, Session, Tid, hold_of, thread
from .errors import At, SpecError
from .events import schedule_event, withdraw_event
from .expr import Env, evaluate


def entry_of(cfg: Config, p: int, owner: Tid) -> Optional[Entry]:
    """The cache entry of `owner` in pool p, or None."""
    for e in cfg.pools[p].entries:
        if e.owner == owner:
            return e
    return None


def cached_units(cfg: Config, p: int) -> V.Amount:
    """Units in p's cache entries."""
    return cfg.pools[p].cached()


# -- queues ------------------------------------------------------------------------------------

def enqueue(cfg: Config, p: int, session: Session, head: bool = False) -> None:
    """Join p's admission queue: at the tail, or at the head after a preemption (§11.2 ties)."""
    item = QueueItem(session.tid, cfg.now, head)
    if head:
        cfg.pools[p].queue.insert(0, item)
    else:
        cfg.pools[p].queue.append(item)
    session.status = ("queued", p)


def select_head(cfg: Config, p: int) -> Optional[QueueItem]:
    """The queue head: a head-requeued hold first, else `fifo` join order or the least `queue by` keys."""
    q = cfg.pools[p].queue
    if not q:
        return None
    if q[0].head:
        return q[0]
    spec = cfg.program.pools[p]["queue"]
    if spec["kind"] == "fifo":
        return q[0]
    best: Optional[QueueItem] = None
    best_key: Optional[tuple] = None
    for item in q:
        s = thread(cfg, item.serial)
        env = Env(cfg, s, ctx={"waited": cfg.now - item.joined}, at=spec.get("at"),
                  what=f"pool {cfg.program.pools[p]['name']}: a queue key")
        key = tuple(evaluate(k, env) for k in spec["keys"])
        if best_key is None or key < best_key:
            best, best_key = item, key
    return best


def leave_queue(cfg: Config, p: int, serial: Tid) -> None:
    """Remove the thread from p's admission queue."""
    cfg.pools[p].queue = [q for q in cfg.pools[p].queue if q.serial != serial]


# -- eviction ----------------------------------------------------------------------------------

def is_dead(owner: Tid) -> bool:
    """Is this the owner of a dead entry (nobody's: a negative number)? A branch's name is not."""
    return isinstance(owner, int) and owner < 0


def entry_owner(cfg: Config, owner: Tid) -> Optional[Session]:
    """The thread an entry belongs to: a session (ended ones included), a live branch; None for a
    dead entry (a negative owner) or the entry of a branch that has finished (docs/language.md
    §11.13: its context is nobody's now, as a dead entry's)."""
    if isinstance(owner, str):
        return cfg.branches.get(owner)
    return cfg.sessions[owner] if owner >= 0 else None


def eviction_env(cfg: Config, owner: Tid, size: V.Amount, last: Value, at: At, what: str) -> Env:
    """The eviction-key moment (§4.6) of a chunk of `owner`'s entry: `size`, `last`, `age`,
    `waiting` and the owner's attributes (none for a dead entry). Eviction keys and `spill`
    clauses read it."""
    session = entry_owner(cfg, owner)
    waiting = session is not None and session.status[0] == "queued"
    return Env(cfg, session, at=at, what=what, ctx={"size": Fraction(size), "last": last, "age": cfg.now - last,
                                                    "waiting": Fraction(int(waiting))})


def eviction_victim(cfg: Config, p: int) -> Entry:
    """The entry to evict from: least (last, release) for `lru`; least keys then release for `by`."""
    entries = cfg.pools[p].entries
    spec = cfg.program.pools[p]["evict"]
    if spec["kind"] == "lru":
        return min(entries, key=lambda e: (e.last, e.rel))

    def keys(e: Entry) -> tuple:
        env = eviction_env(cfg, e.owner, e.size, e.last, spec.get("at"),
                           f"pool {cfg.program.pools[p]['name']}: an eviction key")
        return tuple(evaluate(k, env) for k in spec["keys"]) + (e.rel,)
    return min(entries, key=keys)   # each entry's keys read once, in order; ties to the first


# A copy a spilled chunk makes over its link: (the link's stage, its work). `make_room` returns
# them in the order they happen; the caller starts them as jobs (`stages.start_copies`), which
# belong to no session (§11.8.1).
Copy = tuple[int, Value]


def make_room(cfg: Config, p: int, need: V.Amount) -> list[Copy]:
    """Evict until used + cached + need ≤ cap; with a block size, one tail block at a time (§11.4
    step 3). Each evicted chunk of a session's entry may move to p's `spill` tier (§11.8.1)."""
    cap = cfg.program.caps[p]
    block = cfg.program.block[p]
    st = cfg.pools[p]
    copies: list[Copy] = []
    while st.used + st.cached() + need > cap:
        if not st.entries:
            raise SpecError(f"make_room in pool {cfg.program.pools[p]['name']}: no room even with an empty cache")
        e = eviction_victim(cfg, p)
        take = min(block, e.size) if block is not None else e.size
        e.size = V.amount(e.size - take)
        if e.size == 0:
            st.entries.remove(e)
        st.evicted_units += take
        cfg.records["evicted"].append([e.owner, cfg.program.pools[p]["name"], take])
        if cfg.program.pools[p].get("spill") is not None and not is_dead(e.owner):
            copies += spill_chunk(cfg, p, e.owner, take, e.last)
    return copies


def link_work(cfg: Config, p: int, env: Env) -> Value:
    """The work w of p's `spill` clause in `env`: finite and not negative (a run-time error otherwise)."""
    spill = cfg.program.pools[p]["spill"]
    w = evaluate(spill["work"], env)
    if w < 0 or V.is_inf(w):
        raise SpecError(f"pool {cfg.program.pools[p]['name']}: the work of `spill` must be finite and >= 0, "
                        f"got {number_text(w)}", spill.get("at"), cfg.program.files)
    return w


def spill_chunk(cfg: Config, p: int, owner: Tid, take: V.Amount, last: Value) -> list[Copy]:
    """A chunk of `take` units just evicted from the tail of `owner`'s entry on p (§11.8.1): when
    the `when` condition holds and the chunk fits the tier Q at all, Q makes room by its own
    policy (its chunks may spill further), the chunk joins the front of owner's entry on Q (which
    then holds the units just past what p keeps) with release time now, and its copy runs on
    the link. Otherwise the chunk is dropped, as without `spill`."""
    spill = cfg.program.pools[p]["spill"]
    env = eviction_env(cfg, owner, take, last, spill.get("at"), f"pool {cfg.program.pools[p]['name']}: `spill`")
    if not V.nz(evaluate(spill["when"], env)):
        return []
    q = spill["pool"]
    if take > cfg.program.caps[q]:
        return []
    w = link_work(cfg, p, env)
    copies = make_room(cfg, q, take)
    st = cfg.pools[q]
    e = entry_of(cfg, q, owner)
    size = take if e is None else V.amount(e.size + take)
    st.entries = [x for x in st.entries if x.owner != owner]
    st.entries.append(Entry(owner, size, cfg.now, cfg.counters.next_rel))
    cfg.counters.next_rel += 1
    cfg.pools[p].spills += 1
    return copies + [(spill["stage"], w)]


def allocate_blocks(cfg: Config, p: int, count: int, blocks: list) -> list[Copy]:
    """`count` new blocks of the `share content` pool p from its free queue's head, one at a time;
    each identified block so evicted may move to p's content tier (`spill_block`) before the next
    is taken. Returns the copies, for the caller to start."""
    copies: list[Copy] = []
    for _ in range(count):
        for ident in content.allocate(cfg, p, 1, blocks):
            copies += spill_block(cfg, p, ident)
    return copies


def spill_block(cfg: Config, p: int, ident: tuple) -> list[Copy]:
    """A block of identity `ident` just evicted from the `share content` pool p (docs/content.md
    §6): with a `spill` whose `when` holds — read with `size` = b, `last` = now, `age` = 0,
    `waiting` = 0 and no session (a block belongs to nobody: attributes read 0) — the identity
    moves to the content tier Q unless Q holds it already (then nothing is copied), and its copy
    runs on the link. Otherwise (or when Q has no block) it is dropped, as without `spill`."""
    spill = cfg.program.pools[p].get("spill")
    if spill is None:
        return []
    b = cfg.program.content_block(p)
    env = Env(cfg, None, at=spill.get("at"), what=f"pool {cfg.program.pools[p]['name']}: `spill`",
              ctx={"size": Fraction(b), "last": cfg.now, "age": Fraction(0), "waiting": Fraction(0)})
    if not V.nz(evaluate(spill["when"], env)):
        return []
    q = spill["pool"]
    tier = content.block_pool(cfg, q)
    if ident in tier.idmap:
        return []   # the tier has this content already (a block loaded back from it, evicted again)
    if not tier.refs:
        return []   # a tier of no block keeps nothing
    w = link_work(cfg, p, env)
    content.tier_store(cfg, q, ident)
    cfg.pools[p].spills += 1
    return [(spill["stage"], w)]


def add_units(cfg: Config, p: int, hold: HoldState, i: int, need: V.Amount) -> list[Copy]:
    """Grow slot i of `hold` (on pool p) by `need` units that fit (`used + need ≤ cap`): on a
    `share content` pool need / b new blocks from the free queue's head (evicting identified
    ones), elsewhere `make_room` and `used += need` (§11.7, docs/content.md §3 Growth). Returns
    the copies of chunks the room-making spilled, for the caller to start."""
    st = cfg.pools[p]
    copies: list[Copy] = []
    if st.content is not None:
        copies = allocate_blocks(cfg, p, need // st.content.block, hold.blocks_of(i))
    else:
        copies = make_room(cfg, p, need)
        st.used += need
    hold.alloc[i] += need
    return copies


def insert_entry(cfg: Config, p: int, owner: Tid, size: V.Amount) -> None:
    """Replace `owner`'s entry with a fresh one (last = now, next release order). Its entries on
    p's `spill` tiers continued the old prefix, not this one: they go (§11.8.1)."""
    drop_entry(cfg, p, owner)
    cfg.pools[p].entries.append(Entry(owner, size, cfg.now, cfg.counters.next_rel))
    cfg.counters.next_rel += 1


def drop_entry(cfg: Config, p: int, owner: Tid) -> None:
    """`drop P;` removes this session's own entry now (§11.3), and the rest of it on P's tiers."""
    for q in [p] + cfg.program.tiers_below(p):
        st = cfg.pools[q]
        st.entries = [e for e in st.entries if e.owner != owner]


def consume_own_prefix(cfg: Config, p: int, session: Session, reuse_limit: Optional[Value]) -> tuple[V.Amount, V.Amount]:
    """Remove the session's entry; keep at most round_down(ρ) of it, the rest a dead entry (§11.4
    step 1). With `spill` tiers under p, the prefix goes on into the session's entries there, in
    tier order, and ρ limits the whole (§11.8.1). Returns (consumed, the part of it loaded back
    from the tiers)."""
    limit: Optional[V.Amount] = None
    if reuse_limit is not None:
        # keep at most round_down_block(ρ): +inf keeps all; ρ < 0 (−inf included) keeps nothing,
        # like any ρ below one block (docs/spec.md "Ambiguities resolved")
        if V.is_inf(reuse_limit):
            limit = None if reuse_limit > 0 else 0
        else:
            limit = V.rounddown_block(max(Fraction(0), reuse_limit), cfg.program.block[p])
    consumed = consume_entry(cfg, p, session.tid, limit)
    loaded: V.Amount = 0
    for q in cfg.program.tiers_below(p):
        left = None if limit is None else V.amount(limit - consumed - loaded)
        loaded = V.amount(loaded + consume_entry(cfg, q, session.tid, left))
    return V.amount(consumed + loaded), loaded


def consume_entry(cfg: Config, p: int, owner: Tid, limit: Optional[V.Amount]) -> V.Amount:
    """Remove `owner`'s entry from p; keep at most `limit` of it (None: all), the rest becomes a
    dead entry with the entry's age. Returns what was kept."""
    st = cfg.pools[p]
    e = entry_of(cfg, p, owner)
    if e is None:
        return 0
    st.entries.remove(e)
    if limit is None or e.size <= limit:
        return e.size
    rest = V.amount(e.size - limit)
    st.entries.append(Entry(-cfg.counters.next_dead, rest, e.last, e.rel))
    cfg.counters.next_dead += 1
    return limit


# -- units -------------------------------------------------------------------------------------

def caches_in(cfg: Config, p: int) -> bool:
    """A hold's `cache` clause (and its own-prefix consumption) applies to its pools that are not
    admitted by an engine: an engine-admitted pool counts requests (the seed's `reqs` slots), not
    tokens, so a token amount has no meaning there (docs/spec.md, "Ambiguities resolved"). Nor to a
    `share content` pool, whose released blocks keep their content (docs/content.md §3)."""
    return cfg.program.pools[p].get("admitted_by") is None and not cfg.program.is_content(p)


def units_int(v: Value, what: str, cfg: Config, at: At, negative: str = "") -> V.Amount:
    """A pool amount: finite and not negative (a run-time error otherwise, §11.9); exact, an int
    when whole and a Fraction otherwise (docs/spec.md "Non-whole pool amounts"; the name, kept
    for docs/spec-map.md and the Lean mirror, dates from when amounts had to be whole). NEGATIVE
    words a negative amount as serq_fast does (`{}` the value), for the same message in both."""
    if v < 0:
        msg = negative.format(number_text(v)) if negative else f"{what} is negative ({number_text(v)})"
        raise SpecError(msg, at, cfg.program.files)
    if V.is_inf(v):
        raise SpecError(f"{what} is infinite", at, cfg.program.files)
    return V.amount(v)


# -- release -----------------------------------------------------------------------------------

def split_part(hold: HoldState, i: int) -> HoldState:
    """Take pool slot i out of `hold`: a one-pool HoldState with the same statement, stream and
    admission (its `cache` clause still applies to it), and `hold` keeps the other slots."""
    p = hold.pools[i]
    part = type(hold)(stmt=hold.stmt, pools=[p], alloc=[hold.alloc[i]], position=[hold.position[i]],
                      advanced=[hold.advanced[i]], admission=hold.admission, depth=hold.depth, stream=hold.stream,
                      reserved=[hold.held(i)], blocks=[hold.blocks_of(i)], content=[hold.content_of(i)])
    for per_pool in (hold.reserved, hold.blocks, hold.content):
        if i < len(per_pool):
            del per_pool[i]
    for field in (hold.pools, hold.alloc, hold.position, hold.advanced):
        del field[i]
    return part


def release_pool_early(cfg: Config, session: Session, p: int, at: At = None) -> None:
    """`release P;` (§11.4): the session's lease on P ends, if it has one; otherwise the innermost
    hold's allocation on P is released now, caching per the hold's `cache` clause, and the rest of
    the hold stays until its scope ends. With neither it does nothing: a lease of t seconds may
    have ended before the program releases it (docs/spec.md "Leases")."""
    if lease_of(cfg, p, session.tid) is not None:
        end_lease(cfg, session, p)
        return
    hold = hold_of(session, p)
    if hold is None:
        return
    part = split_part(hold, hold.pools.index(p))
    release_hold(cfg, session, part, preempted=False)


# -- leases (§11.4 `lease P (t)`) ---------------------------------------------------------------

def lease_of(cfg: Config, p: int, serial: Tid) -> Optional[Lease]:
    """The session's lease on pool p, or None (a session holds at most one lease per pool)."""
    for x in cfg.pools[p].leases:
        if x.serial == serial:
            return x
    return None


def start_lease(cfg: Config, session: Session, hold: HoldState, p: int, until: Optional[Value], at: At = None) -> None:
    """The scope of `hold` ends with `lease P (t)`, t > 0: its part on p leaves the hold and p's
    holders but stays in p's `used` (not a victim, not evictable); `lease_end` is scheduled at
    `until` (None: t = inf, no event)."""
    if lease_of(cfg, p, session.tid) is not None:
        raise SpecError(f"session {session.tid} leases pool {cfg.program.pools[p]['name']} while its earlier "
                        "lease of it is held; `release` the first before the second scope ends", at, cfg.program.files)
    part = split_part(hold, hold.pools.index(p))
    cfg.pools[p].holders.remove(session.tid)
    cfg.pools[p].leases.append(Lease(session.tid, part, until))
    if until is not None:
        schedule_event(cfg, until, "lease_end", (p, session.tid))


def end_lease(cfg: Config, session: Session, p: int) -> None:
    """The lease on p ends (`release P`, its `lease_end` event, the session's end): the units
    leave `used` and the hold's `cache` clause applies now (ℓ read now, Session moment)."""
    x = lease_of(cfg, p, session.tid)
    if x is None:
        raise SpecError(f"internal: session {session.tid} has no lease of pool {cfg.program.pools[p]['name']} to end")
    cfg.pools[p].leases.remove(x)
    if x.ends_at is not None:
        withdraw_event(cfg, "lease_end", (p, session.tid))   # pending unless this is its event
    release_slots(cfg, session, x.part, cache_amount(cfg, session, x.part), preempted=False)


def held_reservations(cfg: Config, p: int) -> V.Amount:
    """`reserve held` (§11.4): Σ over P's holders of max(0, r_j − alloc_j), r_j the block-rounded
    reserve the holder was admitted with."""
    total = 0
    for serial in cfg.pools[p].holders:
        h = hold_of(thread(cfg, serial), p)
        if h is not None:
            i = h.pools.index(p)
            total += max(0, h.held(i) - h.alloc[i])
    return total


def cache_amount(cfg: Config, session: Session, hold: HoldState) -> Optional[Value]:
    """ℓ of the hold's `cache (ℓ)` clause, read now in the Session moment; None without one."""
    stmt = cfg.program.stmt(hold.stmt)
    if stmt.get("cache") is None:
        return None
    return evaluate(stmt["cache"], Env(cfg, session, hold.stream, stmt.get("at")))


def release_hold(cfg: Config, session: Session, hold: HoldState, preempted: bool) -> None:
    """Release every pool of `hold`, caching per its `cache` clause (§11.4 Release, §11.8)."""
    ell = cache_amount(cfg, session, hold)
    for p in hold.pools:
        cfg.pools[p].holders.remove(session.tid)
    release_slots(cfg, session, hold, ell, preempted)


def release_slots(cfg: Config, session: Session, hold: HoldState, ell: Optional[Value], preempted: bool) -> None:
    """`used` down by each pool's allocation and, with ℓ, a fresh entry of round_down(min(ℓ,
    computed)) (§11.4 Release); the holders lists are the caller's (a lease is no holder)."""
    for i, p in enumerate(hold.pools):
        st = cfg.pools[p]
        if st.content is not None:
            content.release(cfg, p, hold.blocks_of(i))   # `used` drops per block reaching refs 0
        else:
            st.used = V.amount(st.used - hold.alloc[i])
        kept: V.Amount = 0
        if ell is not None and caches_in(cfg, p):
            # the position, capped by the allocation: a consumed prefix the units did not allocate
            # starts the position above the allocation, and what has no units cannot be kept
            # (docs/spec.md "A position above the allocation")
            computed = min(hold.position[i], hold.alloc[i]) if (hold.advanced[i] or preempted) else hold.alloc[i]
            amount = V.min_v(ell, Fraction(computed))   # −inf when ℓ is −inf: nothing kept
            kept = 0 if amount <= 0 else V.rounddown_block(cast(Fraction, amount), cfg.program.block[p])   # ≤ computed
            if kept > 0:
                insert_entry(cfg, p, session.tid, kept)
        cfg.records["released"].append([session.tid, cfg.program.pools[p]["name"], kept])

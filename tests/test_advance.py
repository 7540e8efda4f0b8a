"""The pieces of serq_fast's advance across block boundaries (python/serq_fast/advance.py) against
their step-by-step definitions; the whole advance is checked by lockstep (tests/test_lockstep.py,
tests/test_lockstep_random.py) and against runs without fast-forward (tests/test_fast_engine.py)."""

from __future__ import annotations

import heapq
import math
import random
from types import SimpleNamespace

from serq_fast import advance
from serq_fast.pools import Entry, Pool


def _taken_step_by_step(t, c, lim, t_stop, horizon):
    """The step path's rule on the closed-form start times: take formations while each starts
    before the next instant and at or before the horizon."""
    n = 0
    while n < lim and (s := t + n * c) < t_stop and s <= horizon:
        n += 1
    return n


def test_stair_length_is_the_step_rule():
    rng = random.Random(5)
    for _ in range(3000):
        t = rng.uniform(0, 1e4)
        c = rng.choice([rng.uniform(1e-5, 1e-2), 0.1, 1 / 3])
        lim = rng.randint(0, 400)
        # bounds near a start time, on it, far away or absent
        k = rng.randint(0, 450)
        edge = t + k * c
        t_stop = rng.choice([edge, math.nextafter(edge, math.inf), math.nextafter(edge, -math.inf), math.inf])
        horizon = rng.choice([edge, math.nextafter(edge, -math.inf), math.inf, t + 1e9])
        got = advance.stair_length(t, c, lim, t_stop, horizon)
        assert got == _taken_step_by_step(t, c, lim, t_stop, horizon), (t, c, lim, t_stop, horizon)


def _pool_with_entries(rng):
    """A stand-in for a block pool's LRU state: entries keyed (last, release), stale heap keys of
    replaced entries left in the heap (as Pool._insert leaves them)."""
    p = SimpleNamespace(lru=[], entries={}, evict_keys=None)
    rel = 0
    for owner in range(rng.randint(0, 30)):
        for _ in range(rng.randint(1, 3)):  # later puts replace the earlier entry of the owner
            rel += 1
            e = Entry(owner, 16.0 * rng.randint(1, 5), float(rng.randint(0, 10)), rel, [])
            p.entries[owner] = e
            heapq.heappush(p.lru, (e.last, e.rel, owner))
    return p


def test_lru_walk_is_the_eviction_order():
    """The walk lists the entries in the order Pool._victim_entry evicts them, without changing
    the heap."""
    rng = random.Random(9)
    for _ in range(300):
        p = _pool_with_entries(rng)
        heap_before = list(p.lru)
        walked = list(advance._lru_walk(p))
        assert p.lru == heap_before
        popped = []
        while (e := Pool._victim_entry(p)) is not None:
            popped.append(e)
            del p.entries[e.owner]
        assert [e.owner for e in walked] == [e.owner for e in popped]

"""The physical blocks of a `share content` pool (docs/content.md): vLLM v1's block pool.

A content pool has `B = cap / b` blocks. Each block has a reference count and an identity (or
none); blocks with no reference sit in the **free queue** (LRU order, head evicted first); the
**identity map** lists, per identity, the physical blocks holding it in insertion order (a lookup
takes the first). This module holds only that bookkeeping and the identity of a hold's blocks;
`pools.py` decides when to touch, allocate, identify and release.

Speed: the free queue is a doubly linked list over block ids in two int arrays (`nxt`, `prv`,
sentinel `B`), so touching a cached block removes it in O(1) as vLLM's `FreeKVCacheBlockQueue`
does; the identity map is a dict of short lists; a prefix key's block identities are computed
once per (key, block index) and cached.

serq_spec counterpart: `serq_spec/content.py` (block pool, identities, hit, release).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

from serq.exact import content_length_out_of_prefix, content_prefix_not_declared
from serq.wire import value_from_wire

from serq_fast.expr import RunError, to_float


def wire_key(x: float):
    """A key as the state line writes it: an int when whole, else the float (lockstep compares
    it to the spec's exact "p/q" within its tolerance)."""
    if math.isfinite(x) and x == math.floor(x):
        return int(x)
    return x


def _sort_text(ident: tuple) -> str:
    """The canonical JSON of an identity as the spec writes it (the idmap's sort key): a whole
    key as an int, any other as the decimal the float was read from, in lowest terms."""
    tag, key, j = ident
    if math.isfinite(key) and key == math.floor(key):
        k = int(key)
    elif math.isfinite(key):
        k = str(Fraction(repr(key)))
    else:
        k = "inf" if key > 0 else "-inf"
    return json.dumps([tag, k, j], separators=(",", ":"))


class Prefixes:
    """The declared prefixes (IR `prefixes`) and the identities of blocks inside them (§2)."""

    def __init__(self, decls: list) -> None:
        self.total: dict = {}
        self.parent: dict = {}
        for d in decls or []:
            key = to_float(value_from_wire(d["key"]), "a prefix key")
            after = d.get("after")
            self.parent[key] = to_float(value_from_wire(after), "a prefix key") if after is not None else None
            self.total[key] = to_float(value_from_wire(d["total"]), f"the length of prefix {key:g}")
        # per (block size, key): the identities of the key's whole blocks, block 0 first
        self._ids: dict = {}

    def check(self, p: float, n: float, pool: str, at) -> None:
        """`content (p, n, h)` of POOL (the hold at the IR position AT): p a declared key or 0, n
        whole with 0 <= n <= total(p); serq_spec's words (serq.exact)."""
        tot = 0.0 if p == 0 else self.total.get(p)
        if tot is None:
            raise RunError(content_prefix_not_declared(pool, p), at)
        if not (0 <= n <= tot) or n != math.floor(n):
            raise RunError(content_length_out_of_prefix(pool, n, p, tot), at)

    def block_ids(self, p: float, b: int) -> list:
        """The identities `("p", a, j)` of the whole blocks of prefix p, a the root-most ancestor
        whose sequence contains block j (docs/content.md §2); computed once per key."""
        got = self._ids.get((b, p))
        if got is not None:
            return got
        chain = []  # p, parent(p), …: totals non-increasing towards the root
        k = p
        while k is not None:
            chain.append(k)
            k = self.parent[k]
        out = []
        a = len(chain) - 1  # index of the root-most ancestor long enough for the current block
        for j in range(int(self.total[p] // b)):
            end = (j + 1) * b
            while self.total[chain[a]] < end:
                a -= 1  # the ancestors nearer the root are too short for this block
            out.append(("p", chain[a], j))
        self._ids[(b, p)] = out
        return out


class Content:
    """The identity of each block of one hold with content `(p, n, h)` (docs/content.md §2)."""

    __slots__ = ("shared", "n_shared", "h")

    def __init__(self, prefixes: Prefixes, p: float, n: float, h: float, b: int) -> None:
        self.n_shared = int(n // b)  # blocks wholly inside the shared part
        self.shared = prefixes.block_ids(p, b) if self.n_shared else ()
        self.h = h

    def ident(self, j: int) -> tuple:
        if j < self.n_shared:
            return self.shared[j]
        return ("h", self.h, j)


class BlockPool:
    """Blocks `0 … B−1`: reference counts, identities, the free queue and the identity map."""

    def __init__(self, nblocks: int, fault_forward: bool = False) -> None:
        n = nblocks
        self.n = n
        self.refs = [0] * n
        self.ident: list = [None] * n
        # the free queue as a doubly linked list; index n is the sentinel (nxt[n] = head)
        self.nxt = list(range(1, n + 1)) + [0 if n else n]
        self.prv = [n] + list(range(n))
        self.nfree = n
        self.ncached = 0  # identified blocks with no reference (they are in the free queue)
        self.idmap: dict = {}  # identity -> [block id, …] in insertion order
        self.fault_forward = fault_forward  # seeded fault: release in block order

    # -------------------------------------------------------------- free queue

    def _unlink(self, x: int) -> None:
        nxt, prv = self.nxt, self.prv
        a, c = prv[x], nxt[x]
        nxt[a] = c
        prv[c] = a
        self.nfree -= 1

    def free_queue(self) -> list:
        out = []
        nxt, n = self.nxt, self.n
        x = nxt[n]
        while x != n:
            out.append(x)
            x = nxt[x]
        return out

    # -------------------------------------------------------------- lookups

    def hit(self, c: Content) -> int:
        """The largest k such that the identities of blocks 0 … k−1 are all in the map."""
        m = self.idmap
        k = 0
        shared = c.shared
        ns = c.n_shared
        while k < ns:
            if shared[k] not in m:
                return k
            k += 1
        h = c.h
        while ("h", h, k) in m:
            k += 1
        return k

    def _firsts(self, c: Content, r: int) -> list:
        """The blocks a lookup of the first r identities takes (they are all in the map)."""
        m = self.idmap
        ns = min(r, c.n_shared)
        shared, h = c.shared, c.h
        out = [m[shared[j]][0] for j in range(ns)]
        out += [m[("h", h, j)][0] for j in range(ns, r)]
        return out

    def evictable(self, c: Content, r: int) -> int:
        """E: how many of the first r hit blocks take a block that no one references now."""
        refs = self.refs
        return sum(1 for x in self._firsts(c, r) if refs[x] == 0)

    # -------------------------------------------------------------- changes

    def touch_hits(self, c: Content, r: int) -> list:
        """A hit: the map's first block for each of the first r identities of c, in block order,
        out of the free queue if unreferenced, one more reference (inlined: a long context
        touches hundreds of blocks per admission)."""
        blocks = self._firsts(c, r)
        refs, nxt, prv = self.refs, self.nxt, self.prv
        taken = 0
        for x in blocks:
            if refs[x] == 0:
                a, b = prv[x], nxt[x]
                nxt[a] = b
                prv[b] = a
                taken += 1
            refs[x] += 1
        self.nfree -= taken
        self.ncached -= taken  # a hit block without reference is identified: it was cached
        return blocks

    def pop(self):
        """A new block from the free-queue head: (block, evicted identity or None); None when empty."""
        n = self.n
        x = self.nxt[n]
        if x == n:
            return None
        self._unlink(x)
        old = self._forget(x)
        if old is not None:
            self.ncached -= 1
        self.refs[x] = 1
        return x, old

    def _forget(self, x: int):
        """Block x loses its identity (an eviction): off the map's list for it; returns it or None."""
        old = self.ident[x]
        if old is not None:
            lst = self.idmap[old]
            lst.remove(x)
            if not lst:
                del self.idmap[old]
            self.ident[x] = None
        return old

    def identify(self, x: int, ident) -> None:
        """Block x (referenced) now holds `ident`: appended to the map's list for it."""
        self.ident[x] = ident
        lst = self.idmap.get(ident)
        if lst is None:
            self.idmap[ident] = [x]
        else:
            lst.append(x)

    def release(self, blocks: list) -> None:
        """A hold lets its blocks go, last block first. A block no longer referenced and with an
        identity joins the free-queue tail (it stays findable until popped; a request's tail
        blocks are evicted first); one without an identity goes to the head, the first of them
        becoming the new head (vLLM's `free_blocks`: non-cached blocks are reused first,
        `prepend_n`, cached ones last, `append_n`) — docs/content.md §3 Release."""
        refs, ident, nxt, prv, n = self.refs, self.ident, self.nxt, self.prv, self.n
        freed = cached = 0
        at = n  # the unidentified ones are inserted one after another from the head
        for x in (blocks if self.fault_forward else reversed(blocks)):
            r = refs[x] - 1
            refs[x] = r
            if r == 0:
                freed += 1
                if ident[x] is not None:
                    cached += 1
                    t = prv[n]  # append to the tail
                    nxt[t] = x
                    prv[x] = t
                    nxt[x] = n
                    prv[n] = x
                else:
                    b = nxt[at]  # insert after `at`
                    nxt[at] = x
                    prv[x] = at
                    nxt[x] = b
                    prv[b] = x
                    at = x
        self.nfree += freed
        self.ncached += cached

    # -------------------------------------------------------------- a content tier (§6)
    # A tier's blocks are never referenced: all sit in the free queue, identified ones behind the
    # free ones in LRU order (serq_spec content.tier_hit, tier_touch, tier_store).

    def tier_hit(self, c: Content, k: int) -> int:
        """t: how many consecutive blocks k, k+1, … of c this tier holds."""
        m = self.idmap
        t = 0
        while c.ident(k + t) in m:
            t += 1
        return t

    def _to_tail(self, x: int) -> None:
        nxt, prv, n = self.nxt, self.prv, self.n
        a, b = prv[x], nxt[x]
        nxt[a] = b
        prv[b] = a
        t = prv[n]
        nxt[t] = x
        prv[x] = t
        nxt[x] = n
        prv[n] = x

    def tier_touch(self, c: Content, k: int, t: int, fault_forward: bool = False) -> None:
        """Blocks k … k+t−1 were loaded back: they stay, moved to the tail last block first
        (seeded fault `tier_touch_forward`: first block first)."""
        m = self.idmap
        for j in (range(k, k + t) if fault_forward else range(k + t - 1, k - 1, -1)):
            self._to_tail(m[c.ident(j)][0])

    def tier_store(self, ident):
        """Keep `ident` (not held yet) in the head block, which moves to the tail; returns the
        identity that block held (evicted, dropped) or None."""
        x = self.nxt[self.n]
        old = self._forget(x)
        if old is None:
            self.ncached += 1
        self.identify(x, ident)
        self._to_tail(x)
        return old

    # -------------------------------------------------------------- state line (§5)

    def state(self) -> dict:
        ident = self.ident
        blocks = [[x, self.refs[x], _wire_ident(ident[x])] for x in range(self.n)
                  if self.refs[x] > 0 or ident[x] is not None]
        idmap = sorted(self.idmap.items(), key=lambda kv: _sort_text(kv[0]))
        return {"free_queue": self.free_queue(), "blocks": blocks,
                "idmap": [[_wire_ident(k), list(v)] for k, v in idmap]}


def _wire_ident(ident):
    if ident is None:
        return None
    tag, key, j = ident
    return [tag, wire_key(key), j]

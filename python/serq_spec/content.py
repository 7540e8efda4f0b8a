"""The block pool of a `share content` pool (docs/content.md §2–§3): vLLM v1's BlockPool.

Physical blocks with reference counts and an identity, a free queue (head evicted first, freed
blocks appended at the tail) and a map from identity to the blocks holding it (insertion order; a
lookup takes the first). A hold on such a pool keeps its block list (block 0 first) in
`HoldState.blocks`; `PoolState.used` is b × the blocks with refs > 0.
"""

from __future__ import annotations

from typing import Optional

from serq.exact import content_length_out_of_prefix, content_prefix_not_declared
from serq.wire import Value

from . import values as V
from .config import Config, ContentState
from .errors import At, SpecError
from .program import Program


def block_pool(cfg: Config, p: int) -> ContentState:
    """The block pool of `share content` pool p (its callers are only ever given such a pool)."""
    cs = cfg.pools[p].content
    if cs is None:
        raise SpecError(f"internal: pool {cfg.program.pools[p]['name']} is no `share content` pool")
    return cs


def key_json(v: Value) -> int | str:
    """A prefix or history key as written in an identity: a JSON int when whole, else its wire text."""
    if not V.is_inf(v) and v.denominator == 1:
        return int(v)
    return V.wire(v)


def identity(prog: Program, content: tuple, j: int, b: int) -> tuple:
    """The identity of block j of a hold with content (p, n, h) (docs/content.md §2)."""
    p, n, h = content
    if (j + 1) * b <= n:
        chain = []   # p, parent(p), …: totals decrease towards the root
        k = p
        while k is not None:
            chain.append(k)
            k = prog.prefixes[k][0]
        a = next(x for x in reversed(chain) if prog.prefixes[x][1] >= (j + 1) * b)
        return ("p", key_json(a), j)
    return ("h", key_json(h), j)


def check_content(cfg: Config, p: int, content: tuple, at: At) -> None:
    """p a declared key or 0; n whole, 0 ≤ n ≤ total(p) (docs/content.md §1): a run-time guard."""
    prog = cfg.program
    pk, n, _ = content
    name = prog.pools[p]["name"]
    if pk != 0 and pk not in prog.prefixes:
        raise SpecError(content_prefix_not_declared(name, pk), at, prog.files)
    total = 0 if pk == 0 else prog.prefixes[pk][1]
    if V.is_inf(n) or n.denominator != 1 or not 0 <= n <= total:
        raise SpecError(content_length_out_of_prefix(name, n, pk, total), at, prog.files)


def hit(cfg: Config, p: int, content: Optional[tuple]) -> int:
    """k: the number of leading blocks of `content` whose identities are all in the map."""
    if content is None:
        return 0
    cs = block_pool(cfg, p)
    b = cs.block
    k = 0
    while cs.idmap.get(identity(cfg.program, content, k, b)):
        k += 1
    return k


def unreferenced_hits(cfg: Config, p: int, content: tuple, r: int) -> int:
    """E: of the first r hit blocks, how many have a first physical block with refs = 0."""
    cs = block_pool(cfg, p)
    return sum(1 for j in range(r) if cs.refs[cs.idmap[identity(cfg.program, content, j, cs.block)][0]] == 0)


def free_blocks(cfg: Config, p: int) -> int:
    """B − referenced: blocks a new allocation may take (free, cached ones included)."""
    cs = block_pool(cfg, p)
    return len(cs.refs) - sum(1 for r in cs.refs if r > 0)


def reference(cfg: Config, p: int, block: int) -> None:
    """refs += 1; a block leaving refs = 0 leaves the free queue and counts as used."""
    cs = block_pool(cfg, p)
    if cs.refs[block] == 0:
        cs.free_queue.remove(block)
        cfg.pools[p].used += cs.block
    cs.refs[block] += 1


def touch(cfg: Config, p: int, content: tuple, r: int, blocks: list) -> None:
    """Reference the first r hit blocks, in block order, each the map's first for its identity."""
    cs = block_pool(cfg, p)
    for j in range(r):
        block = cs.idmap[identity(cfg.program, content, j, cs.block)][0]
        reference(cfg, p, block)
        blocks.append(block)


def forget(cs: ContentState, block: int) -> Optional[tuple]:
    """The block loses its identity (an eviction), which leaves the map's list for it (and the map
    when no block is left); returns the identity or None."""
    ident = cs.ident[block]
    if ident is not None:
        holders = cs.idmap[ident]
        holders.remove(block)
        if not holders:
            del cs.idmap[ident]
        cs.ident[block] = None
    return ident


def allocate(cfg: Config, p: int, count: int, blocks: list) -> list[tuple]:
    """Append `count` new blocks, each the free queue's head; an identified head is evicted.
    Returns the evicted identities, in order (a `spill` on p may move them to its tier)."""
    cs = block_pool(cfg, p)
    st = cfg.pools[p]
    evicted: list[tuple] = []
    for _ in range(count):
        if not cs.free_queue:
            raise SpecError(f"pool {cfg.program.pools[p]['name']}: no free block to allocate")
        block = cs.free_queue[0]
        ident = forget(cs, block)
        if ident is not None:   # an eviction: the content is forgotten
            st.evicted_units += cs.block
            cfg.records["evicted"].append([None, cfg.program.pools[p]["name"], cs.block])
            evicted.append(ident)
        reference(cfg, p, block)
        blocks.append(block)
    return evicted


def identify(cfg: Config, p: int, content: Optional[tuple], blocks: list, pos: V.Amount) -> None:
    """Blocks j < floor(pos / b) without an identity get theirs, appended to the map's list."""
    if content is None:
        return
    cs = block_pool(cfg, p)
    for j in range(min(pos // cs.block, len(blocks))):
        block = blocks[j]
        if cs.ident[block] is None:
            ident = identity(cfg.program, content, j, cs.block)
            cs.ident[block] = ident
            cs.idmap.setdefault(ident, []).append(block)


def release(cfg: Config, p: int, blocks: list) -> None:
    """The hold's blocks in reverse order: refs −= 1. Of those reaching 0 (in that order), the
    unidentified go to the free queue's head, the identified to its tail (identity kept): vLLM
    reuses a block that can never be a hit first and keeps cached ones in LRU order."""
    cs = block_pool(cfg, p)
    unidentified: list[int] = []
    identified: list[int] = []
    for block in reversed(blocks):
        cs.refs[block] -= 1
        if cs.refs[block] == 0:
            (unidentified if cs.ident[block] is None else identified).append(block)
            cfg.pools[p].used -= cs.block
    cs.free_queue[:0] = unidentified
    cs.free_queue.extend(identified)
    blocks.clear()


# -- a content tier (docs/content.md §6): a `share content` pool that only keeps identities -------
# Its blocks are never referenced: all of them sit in its free queue, the identified ones in LRU
# order behind the free ones, so `used` stays 0 and `cached` is b × its identities.

def tier_hit(cfg: Config, q: int, content: tuple, k: int) -> int:
    """t: how many consecutive blocks k, k+1, … of `content` the tier q holds (the source's hit
    stopped at block k)."""
    cs = block_pool(cfg, q)
    t = 0
    while identity(cfg.program, content, k + t, cs.block) in cs.idmap:
        t += 1
    return t


def tier_touch(cfg: Config, q: int, content: tuple, k: int, t: int) -> None:
    """Blocks k … k+t−1 are loaded back from the tier: each stays there (as a CPU cache keeps
    what it served) and moves to the free queue's tail, last block first, so the tier evicts
    them after everything else and a prefix's tail before its head (as a release orders them)."""
    cs = block_pool(cfg, q)
    for j in reversed(range(k, k + t)):
        block = cs.idmap[identity(cfg.program, content, j, cs.block)][0]
        cs.free_queue.remove(block)
        cs.free_queue.append(block)


def tier_store(cfg: Config, q: int, ident: tuple) -> None:
    """Keep `ident` on the tier q (it is not there yet): the free queue's head is taken, its old
    identity evicted (dropped: a content tier spills no further), and the block joins the tail."""
    cs = block_pool(cfg, q)
    block = cs.free_queue.pop(0)
    if forget(cs, block) is not None:
        cfg.pools[q].evicted_units += cs.block
        cfg.records["evicted"].append([None, cfg.program.pools[q]["name"], cs.block])
    cs.ident[block] = ident
    cs.idmap.setdefault(ident, []).append(block)
    cs.free_queue.append(block)

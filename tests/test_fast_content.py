"""serq_fast's content block pool (python/serq_fast/content.py, docs/content.md §2–§3) against a
literal list model of the contract, on hand-made and random operation sequences."""

from __future__ import annotations

import random

import pytest

from serq_fast.content import BlockPool, Content, Prefixes
from serq_fast.step import Sim
from serq_fast.irbuild import N, Bin, Program, duplicates_ir, shared_prompt_ir, vllm_engine
from serq_fast.expr import RunError


def _prefixes():
    # 1: 40 tokens; 2 = 1 + 8 (48); 3 = 2 + 30 (78); 4 = 1 + 0 (40); 5: 16 tokens of its own
    return Prefixes([
        {"key": "1", "length": "40", "after": None, "total": "40"},
        {"key": "2", "length": "8", "after": "1", "total": "48"},
        {"key": "3", "length": "30", "after": "2", "total": "78"},
        {"key": "4", "length": "0", "after": "1", "total": "40"},
        {"key": "5", "length": "16", "after": None, "total": "16"},
    ])


def test_identity_is_the_root_most_ancestor_containing_the_block():
    px = _prefixes()
    # block size 16: prefix 3 has 4 whole blocks; blocks 0, 1 (end 16, 32) lie in prefix 1 (40),
    # block 2 (end 48) in prefix 2 (48), block 3 (end 64) only in prefix 3
    assert px.block_ids(3.0, 16) == [("p", 1.0, 0), ("p", 1.0, 1), ("p", 2.0, 2), ("p", 3.0, 3)]
    assert px.block_ids(4.0, 16) == [("p", 1.0, 0), ("p", 1.0, 1)]
    assert px.block_ids(2.0, 8) == [("p", 1.0, j) for j in range(5)] + [("p", 2.0, 5)]
    c = Content(px, 3.0, 50.0, 7.0, 16)  # 50 shared tokens: 3 whole blocks, then the history's
    assert [c.ident(j) for j in range(5)] == [("p", 1.0, 0), ("p", 1.0, 1), ("p", 2.0, 2),
                                              ("h", 7.0, 3), ("h", 7.0, 4)]
    c0 = Content(px, 0.0, 0.0, 7.0, 16)
    assert c0.ident(0) == ("h", 7.0, 0)


@pytest.mark.parametrize("p,n,msg", [(9.0, 0.0, "prefix 9.0 is not declared"), (0.0, 3.0, "from 0 to 0.0"),
                                     (1.0, 41.0, "from 0 to 40.0"), (1.0, 2.5, "2.5 shared tokens is not a whole")])
def test_bad_content_is_a_run_error(p, n, msg):
    with pytest.raises(RunError, match=msg) as e:
        _prefixes().check(p, n, "kv", [0, 1, 1])
    assert e.value.at == [0, 1, 1] and str(e.value).startswith("pool kv: `content`: ")


class ListModel:
    """docs/content.md §3 read literally: a Python list for the free queue."""

    def __init__(self, n):
        self.refs = [0] * n
        self.ident = [None] * n
        self.queue = list(range(n))
        self.map: dict = {}

    def hit(self, idents):
        k = 0
        for i in idents:
            if not self.map.get(i):
                break
            k += 1
        return k

    def touch(self, i):
        x = self.map[i][0]
        if self.refs[x] == 0:
            self.queue.remove(x)
        self.refs[x] += 1
        return x

    def pop(self):
        if not self.queue:
            return None
        x = self.queue.pop(0)
        old = self.ident[x]
        if old is not None:
            self.map[old].remove(x)
            if not self.map[old]:
                del self.map[old]
            self.ident[x] = None
        self.refs[x] = 1
        return x, old

    def identify(self, x, i):
        self.ident[x] = i
        self.map.setdefault(i, []).append(x)

    def release(self, blocks):
        head = []  # unidentified: to the head, the first freed first (docs/content.md §3)
        for x in reversed(blocks):
            self.refs[x] -= 1
            if self.refs[x] == 0:
                if self.ident[x] is None:
                    head.append(x)
                else:
                    self.queue.append(x)
        self.queue[0:0] = head

    def cached(self):
        return sum(1 for x, r in enumerate(self.refs) if r == 0 and self.ident[x] is not None)


def _random_run(seed, fault=False):
    """Holds with a few shared contents admitted, grown and released at random; both sides
    compared after every operation. Returns the first difference or None."""
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    fast, model = BlockPool(n, fault_forward=fault), ListModel(n)
    px = _prefixes()
    holds = []  # (content, blocks, identified count)
    for step in range(300):
        op = rng.random()
        if op < 0.45:
            c = Content(px, rng.choice([0.0, 1.0, 3.0, 5.0]), 0.0, float(rng.randint(0, 2)), 8)
            if c.h == 0.0 and rng.random() < 0.5:
                c = Content(px, 3.0, float(rng.choice([16, 40, 78])), float(rng.randint(0, 2)), 8)
            idents = [c.ident(j) for j in range(20)]
            k = fast.hit(c)
            if k != model.hit(idents):
                return step, "hit"
            want = rng.randint(0, 6)
            r = min(k, rng.randint(0, 6))
            new = max(0, want - r)
            if new + fast.evictable(c, r) > fast.nfree:
                continue
            blocks = fast.touch_hits(c, r)
            if blocks != [model.touch(idents[j]) for j in range(r)]:
                return step, "touch"
            for _ in range(new):
                a, b = fast.pop(), model.pop()
                if a != b:
                    return step, "pop"
                blocks.append(a[0])
            full = rng.randint(0, len(blocks))
            for j in range(r, full):
                fast.identify(blocks[j], idents[j])
                model.identify(blocks[j], idents[j])
            holds.append([c, blocks, max(r, full)])
        elif op < 0.7 and holds:
            h = rng.choice(holds)
            got = fast.pop()
            if got != model.pop():
                return step, "grow"
            if got is not None:
                h[1].append(got[0])
                c, blocks, done = h
                for j in range(done, len(blocks) - 1):
                    fast.identify(blocks[j], c.ident(j))
                    model.identify(blocks[j], c.ident(j))
                h[2] = max(done, len(blocks) - 1)
        elif holds:
            h = holds.pop(rng.randrange(len(holds)))
            fast.release(h[1])
            model.release(h[1])
        if fast.free_queue() != model.queue or fast.refs != model.refs or fast.ident != model.ident:
            return step, "state"
        if {k: v for k, v in fast.idmap.items()} != model.map:
            return step, "map"
        if fast.ncached != model.cached() or fast.nfree != len(model.queue):
            return step, "counts"
    return None


def test_block_pool_follows_the_list_model():
    for seed in range(200):
        assert _random_run(seed) is None, seed


def test_forward_release_fault_is_seen_by_the_model():
    """The seeded fault `content_queue_head` (release in block order) must differ from the model."""
    assert any(_random_run(seed, fault=True) is not None for seed in range(50))


def test_state_lists():
    px = _prefixes()
    bp = BlockPool(4)
    c = Content(px, 5.0, 16.0, 3.0, 8)  # blocks 0, 1 shared (prefix 5), then history 3
    blocks = [bp.pop()[0] for _ in range(3)]
    for j in range(3):
        bp.identify(blocks[j], c.ident(j))
    bp.release(blocks)
    st = bp.state()
    assert st["free_queue"] == [3, 2, 1, 0]
    assert st["blocks"] == [[0, 0, ["p", 5, 0]], [1, 0, ["p", 5, 1]], [2, 0, ["h", 3, 2]]]
    # sorted by canonical JSON: "h" before "p"
    assert st["idmap"] == [[["h", 3, 2], [2]], [["p", 5, 0], [0]], [["p", 5, 1], [1]]]
    assert bp.hit(c) == 3 and bp.evictable(c, 3) == 3
    # a fresh allocation takes block 3, then evicts the tail block 2 (history) first
    assert bp.pop() == (3, None)
    assert bp.pop() == (2, ("h", 3.0, 2))
    assert bp.hit(c) == 2


# ---------------------------------------------------------------- the engine on content pools



def _two_sessions(system=40, prompt=50, out=3, blocks=20):
    """batch(2): both sessions send `prompt` tokens whose first `system` are prefix 1, block 8;
    session 1 starts after session 0 is done (a 100 s delay), so it hits the shared blocks."""
    p = Program()
    p.prefix(1, system)
    A = p.A
    call, kv, reqs, eng = vllm_engine(p, budget=64, bs=8, blocks=blocks, max_seqs=4, cost=N(1),
                                      content=(N(1), N(system), A("serial")))
    wait = p.stage({"name": "wait", "kind": "delay"})
    server = p.block(call(N(prompt), N(out)))
    session = p.block([p.run(wait, Bin("*", A("serial"), N(100))), {"op": "turn"}, {"op": "end"}])
    return p.ir({"kind": "batch", "n": 2}, session, server=server)



def test_second_session_hits_the_shared_prefix():
    lines = []
    sim = Sim(_two_sessions(), states=lines.append).run()
    adm = [r for line in lines for r in line["records"]["admitted"] if r[1] == "kv"]
    # session 0: 50 tokens = 7 blocks (56), nothing cached; session 1: the 5 blocks of the 40
    # shared tokens hit (cached 40), 2 new blocks
    assert adm == [[0, "kv", 56, 0], [1, "kv", 56, 40]]
    kv = lines[-1]["pools"][0]
    # session 0 held blocks 0…6; 52 tokens scheduled identify blocks 0…5 (block 6, 48 … 55, is
    # never full). Release, last first: 6 (unidentified) to the head, 5 … 0 to the tail:
    # [6, 7 … 19, 5, 4, 3, 2, 1, 0]. Session 1 hits blocks 0…4 (the 40 shared tokens; out of the
    # queue), pops 6 and 7 for its blocks 5 and 6, identifies its block 5 (physical 6) as its own
    # history; its release puts 7 at the head, 6 then 4 … 0 at the tail.
    assert kv["free_queue"] == [7] + list(range(8, 20)) + [5, 6, 4, 3, 2, 1, 0]
    ids = {b[0]: b[2] for b in kv["blocks"]}
    assert ids[0] == ["p", 1, 0] and ids[4] == ["p", 1, 4]
    assert ids[5] == ["h", 0, 5]  # session 0's own tokens after the shared 40 (block 5: 40 … 47)
    assert ids[6] == ["h", 1, 5]
    assert 7 not in ids and 8 not in ids
    assert sim.pools[0].cached == 7 * 8 and sim.pools[0].used == 0
    assert _obs_hits(sim) == [0.0, 1.0]


def _obs_hits(sim):
    return sim.obs_stats[sim.observe_names.index("hit")].exact


@pytest.mark.parametrize("kw,k", [
    ({"blocks": 120, "Lambda": 2.0, "system": 40}, 3),  # eviction and preemption pressure
    ({"blocks": 100, "Lambda": 3.0, "system": 64, "history": N(0), "max_seqs": 4}, 3),  # duplicates
])
def test_fast_forward_keeps_the_block_order(monkeypatch, kw, k):
    """The decode fast-forward identifies blocks in the step-by-step order: every state line it
    emits (free queue, blocks, identity map, held lists) equals the step-by-step line."""
    from serq_drt.lockstep import compare_lines, fast_lines, sample_sessions

    ir = shared_prompt_ir(**kw)
    sessions = sample_sessions(ir, 1, k)
    fast = fast_lines(ir, sessions)
    monkeypatch.setenv("SERQ_FAST_NO_FF", "1")
    every = {line["step"]: line for line in fast_lines(ir, sessions)}
    for line in fast:
        compare_lines(every[line["step"]], line, line["step"])


def test_duplicates_keep_serving_order(monkeypatch):
    from serq_drt.lockstep import compare_lines, fast_lines, sample_sessions

    ir = duplicates_ir()
    sessions = sample_sessions(ir, 1, 3)
    fast = fast_lines(ir, sessions)
    monkeypatch.setenv("SERQ_FAST_NO_FF", "1")
    every = {line["step"]: line for line in fast_lines(ir, sessions)}
    dup = [ids for line in every.values() for _, ids in line["pools"][0]["idmap"] if len(ids) > 1]
    assert dup, "the program must make duplicates"
    for line in fast:
        compare_lines(every[line["step"]], line, line["step"])


def test_lean_state_lines_are_the_full_lines_less_the_lean_keys():
    """`Sim(lean_states=True)` (the oracle model's lines) leaves out exactly what trace.LEAN
    says: the block-level keys of docs/content.md §5, the delay stage's job list and the
    sessions not ending; every other key is as in the full line."""
    from serq_fast.trace import LEAN

    full, lean = [], []
    Sim(_two_sessions(), states=full.append).run()
    Sim(_two_sessions(), states=lean.append, lean_states=True).run()
    keys = LEAN["content keys"]
    assert len(full) == len(lean) > 2
    assert any(f["sessions"] != s["sessions"] for f, s in zip(full, lean))
    for f, s in zip(full, lean):
        assert all(k in f["pools"][0] and k not in s["pools"][0] for k in keys)
        for k in keys:
            del f["pools"][0][k]
        for st in f["stages"]:
            if st["kind"] == "delay":
                del st["active"]
        f["sessions"] = [x for x in f["sessions"] if x[1].startswith("ending:")]
        assert f == s

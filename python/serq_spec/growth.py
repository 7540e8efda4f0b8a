"""Growth and preemption (language.md §11.7).

`grow` adds whole blocks to a hold; when the pool is full it preempts a victim chosen by the
pool's `preempt` rule (the engine resident admitted last for `lifo`), or stalls (`none`, or no
candidate). A preempted hold caches up to its position, records `computed`, and goes back to
the head of its first pool's queue; re-admission re-reads its header.
"""

from __future__ import annotations

from fractions import Fraction

from . import values as V
from .errors import NotSupported
from .expr import Env, evaluate, resolve_ref
from .pools import enqueue, hold_of, make_room, release_hold
from .program import COMPUTED


def grow(cfg, s, p: int, d: int, ictx) -> bool:
    """Grow s's hold on p by d units, rounded up to the block; True on success (§11.7)."""
    prog = cfg.program
    h = hold_of(s, p)
    i = h.pools.index(p)
    target = V.roundup_block(h.alloc[i] + d, prog.block[p])
    st = cfg.pools[p]
    while True:
        need = target - h.alloc[i]
        if st.used + need <= prog.caps[p]:
            make_room(cfg, p, need)
            st.used += need
            h.alloc[i] = target
            return True
        victim = choose_victim(cfg, p)
        if victim is None:
            stall(cfg, s, p, target)
            return False
        preempt(cfg, victim, p, ictx)
        if victim is s:
            return False


def stall(cfg, s, p: int, target: int) -> None:
    """No room and no victim: the session waits in p's growers (retried at every settle)."""
    s.status = ("growing", p)
    s.growth = [p, target]
    cfg.pools[p].growers.append(s.serial)


def preemption_candidates(cfg, p: int) -> list:
    """Holders of p that are residents of a step engine whose memory is p (a holder in a delay is not)."""
    prog = cfg.program
    engines = [e for e in prog.engines if prog.memory_of[e] == p]
    if not engines:
        raise NotSupported(f"preemption in pool {prog.pools[p]['name']}, which is no engine's memory",
                           None, prog.files)
    out = []
    for serial in cfg.pools[p].holders:
        s = cfg.sessions[serial]
        if s.job is not None and s.job.stage in engines:
            out.append(s)
    return out


def choose_victim(cfg, p: int):
    """`lifo`: the latest admitted candidate; `by (k…)`: least keys, ties to the latest admitted."""
    spec = cfg.program.pools[p]["preempt"]
    if spec["kind"] == "none":
        return None
    cands = preemption_candidates(cfg, p)
    if not cands:
        return None
    if spec["kind"] == "lifo":
        return max(cands, key=lambda s: s.adm_seq)
    best, best_key = None, None
    for s in cands:
        h = hold_of(s, p)
        i = h.pools.index(p)
        env = Env(cfg, s, engine=s.job.stage, job=s.job, what=f"pool {cfg.program.pools[p]['name']}: a preemption key",
                  ctx={"position": Fraction(h.position[i]), "computed": s.attrs[COMPUTED]})
        key = tuple(evaluate(k, env) for k in spec["keys"]) + (-s.adm_seq,)
        if best is None or key < best_key:
            best, best_key = s, key
    return best


def preempt(cfg, v, p: int, ictx) -> None:
    """Preempt v's hold on p (§11.7): computed, stuck, detach, release caching to the position, requeue."""
    prog = cfg.program
    h = hold_of(v, p)
    i = h.pools.index(p)
    job = v.job
    est = cfg.stages[job.stage]
    # A victim already served in this iteration leaves the batch; its tokens return to the budget
    # and its position goes back to before this iteration's chunk (§11.6).
    if ictx is not None and ictx.engine == job.stage:
        for a in list(ictx.assign):
            if a.serial == v.serial:
                ictx.assign.remove(a)
                ictx.left = V.add(ictx.left, Fraction(a.tokens)) if V.is_inf(ictx.left) else ictx.left + a.tokens
                if a.pos_before is not None:
                    gh = hold_of(v, job.growing)
                    gh.position[gh.pools.index(job.growing)] = a.pos_before
    elif est.iteration is not None and any(a.serial == v.serial for a in est.iteration["assign"]):
        raise NotSupported("preemption of a resident of another engine's iteration in flight", None, prog.files)
    computed = h.position[i]
    prev = v.preempt_pos.get(p)
    if prev is not None and computed <= prev and not v.stuck:
        v.stuck = True
        cfg.pools[p].stuck += 1
    v.preempt_pos[p] = computed
    v.attrs[COMPUTED] = Fraction(computed)   # set before the release (oracle.md §10)
    est.jobs.remove(job)
    v.job = None
    if v.status[0] == "growing":
        q = v.status[1]
        cfg.pools[q].growers.remove(v.serial)
        v.growth = None
    k = v.holds.index(h)
    for inner in reversed(v.holds[k:]):
        release_hold(cfg, v, inner, preempted=True)
    v.holds = v.holds[:k]
    v.frames = v.frames[:h.depth]
    v.pending = (h.stmt[0], h.stmt[1], h.stream)
    requeue = prog.pools[p]["preempt"].get("requeue", "head")
    stmt = prog.stmt(h.stmt)
    first = resolve_ref(Env(cfg, v, h.stream, stmt.get("at")), stmt["pools"][0]["pool"])
    enqueue(cfg, first, v, head=(requeue != "tail"))
    cfg.pools[p].preemptions += 1
    if ictx is not None:
        ictx.preempted += 1
    cfg.records["preempted"].append([v.serial, prog.pools[p]["name"], computed])

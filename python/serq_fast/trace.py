"""The per-step observable state of docs/state.md, produced by the fast engine for lockstep.

Times and values are floats here (the fast engine's own numbers); `lockstep` compares them with
the spec's exact wire values to 1e-9 relative. Pool amounts (used, cached, entry sizes,
positions, allocations, the amounts of records) are ints when whole and "p/q" otherwise in the
contract (docs/state.md): a float within 1e-9 relative of a whole number is emitted as that int
(the rounding of float sums), any other stays a float and is compared with the spec's "p/q".

serq_spec counterpart: `serq_spec/trace.py` (`state_line`, the exact values on the wire).
"""

from __future__ import annotations

import json
import math

from serq_fast.defs import ENDING, EV_ARRIVE, EV_ENDS, EV_FINISH, EV_ITER_END, EV_LEASE_END



def dump_line(line: dict) -> str:
    """A state line as `--states` writes it and lockstep prints it: compact JSON, keys sorted;
    anything that is not JSON (a stray Python object) is a TypeError, not a silent repr."""
    def default(o):
        raise TypeError(repr(o))

    return json.dumps(line, sort_keys=True, separators=(",", ":"), default=default, allow_nan=True)

def _int(x) -> int | float:
    if isinstance(x, float) and math.isfinite(x):
        r = round(x)
        if abs(x - r) <= 1e-9 * max(1.0, abs(x)):
            return int(r)
    return x


def _event(ev):
    if ev is None:
        return None

    t, seq, kind, a, b = ev
    if kind == EV_ARRIVE:
        return {"kind": "arrive", "time": t, "seq": seq, "arg": a}
    if kind == EV_FINISH:
        # a departure of the stages flows cross (stages.Sharing) names the job's first stage
        return {"kind": "finish", "time": t, "seq": seq, "arg": [b.stage.name, b.sess.tid]}
    if kind == EV_ITER_END:
        return {"kind": "iter_end", "time": t, "seq": seq, "arg": a.name}
    if kind == EV_ENDS:
        return {"kind": "ends", "time": t, "seq": seq, "arg": a.name}
    if kind == EV_LEASE_END:
        return {"kind": "lease_end", "time": t, "seq": seq, "arg": [a.name, b.hold.sess.tid]}
    return {"kind": "warmup_end", "time": t, "seq": seq, "arg": None}


#: What a lean line (`Sim(lean_states=True)`) leaves out of the docs/state.md line: the content
#: pools' block-level keys (docs/content.md §5), the job lists of `fifo`, `delay` and `ps` stages,
#: and in `sessions` every session that is not ending at a stage (docs/async.md §6). Each grows
#: with the KV blocks or the sessions, so a full line per step makes a long run quadratic.
LEAN = {"content keys": ("free_queue", "blocks", "idmap", "held"),
        "stage lists": ("waiting", "active"), "sessions": "ending only"}


def _pool(p, content: bool = True) -> dict:
    entries = sorted(p.entries.values(), key=lambda e: (e.last, e.rel))
    return {
        "name": p.name,
        "used": _int(p.used),
        "cached": _int(p.cached),
        "queue": [h.sess.tid for h in p.queue_list()],
        "holders": [part.hold.sess.tid for part in p.holders],
        "growers": [s.tid for s in p.growers],
        "entries": [[e.owner, _int(e.size), e.last, e.rel] for e in entries],
        "preemptions": p.preemptions,
        **({"rejected": p.rejected} if p.rejected else {}),
        **({"spills": p.spills} if p.spill is not None else {}),
        **({"tier_hits": p.tier_hits} if p.spill is not None and p.content else {}),
        **({"leases": [[serial, _int(x.part.alloc), x.ends_at] for serial, x in p.leases.items()]}
           if p.leases else {}),
        **(_content(p) if p.content and content else {}),
    }


def _content(p) -> dict:
    """The content pool keys of docs/content.md §5."""
    d = p.bp.state()
    d["held"] = [[part.hold.sess.tid, list(part.blocks)] for part in p.holders]
    return d


def _stage(st, sim, lean: bool = False) -> dict:
    d = {"name": st.name, "kind": st.kind}
    if st.kind == "step":
        res = []
        for j in st.residents:
            part = j.growpart
            r = {"serial": j.sess.tid, "mode": j.mode, "remaining": _int(j.left),
                 "admission": j.adm,
                 "position": _int(part.pos) if part is not None else None,
                 "allocation": _int(part.alloc) if part is not None else None}
            if j.lagged:
                r["pending"] = True  # docs/async.md §5
            res.append(r)
        d["residents"] = res
        if st.lag:
            d["pending"] = [s.tid for s in st.pending]
            d["due"] = [s.tid for s in st.due]
        it = st.iter
        d["iteration"] = None if it is None else {
            "end": it.end, "seq": it.seq,
            "assign": [[a[0].sess.tid, _int(a[1])] for a in it.assign]}
        d["registers"] = list(st.registers)
    elif lean:
        pass
    elif st.kind == "fifo":
        d["waiting"] = [[j.sess.tid, j.left] for j in st.waiting]
        d["active"] = [[j.sess.tid, j.fin_t] for j in st.active]
    elif st.kind == "delay":
        d["active"] = [[j.sess.tid, j.fin_t] for j in st.active]
    elif st.shared:   # a stage a flow crosses (docs/language.md §11.14): remaining work now, rates
        now = sim.now
        d["active"] = [[j.sess.tid, j.left - j.rate * (now - j.since)] for j in st.jobs]
        d["rates"] = [[j.sess.tid, j.rate] for j in st.jobs]
    elif st.kind == "ps":
        v = st.v + st.rate * (sim.now - st.t_last)
        d["active"] = [[j.sess.tid, j.tag - v] for j in st.jobs]
    if st.est is not None:   # only on a stage whose estimates the program reads (docs/state.md)
        d["est"] = st.est.state()
    return d


def state_line(sim, step: int, ev) -> dict:

    lean = sim.lean_states
    rec = sim.rec or {}
    r = {k: v for k, v in rec.items()}
    r["admitted"] = [[a, b, _int(c), _int(d)] for a, b, c, d in rec.get("admitted", [])]
    r["released"] = [[a, b, _int(c)] for a, b, c in rec.get("released", [])]
    r["evicted"] = [[a, b, _int(c)] for a, b, c in rec.get("evicted", [])]
    r["preempted"] = [[a, b, _int(c)] for a, b, c in rec.get("preempted", [])]
    if not r.get("rejected"):
        r.pop("rejected", None)
    r["iterations"] = [dict(x, assign=[[s, m, _int(t)] for s, m, t in x["assign"]]) for x in rec.get("iterations", [])]
    return {
        "step": step,
        "event": _event(ev),
        "now": sim.now,
        "pools": [_pool(p, not lean) for p in sim.pools],
        "stages": [_stage(st, sim, lean) for st in sim.stages],
        "sessions": [[serial, s.status_text()] for serial, s in sorted(sim.sessions.items())
                     if not lean or s.status == ENDING],
        # the live branches (docs/language.md §11.13), only while there are some
        **({"branches": [[b.tid, b.status_text()] for b in sim.branches.values()]} if sim.branches else {}),
        "records": r,
        # iteration claims' tallies, only in programs that declare claims (docs/state.md)
        **({"claims": [t.counts() for t in sim.claims.tallies]} if sim.claims.tallies else {}),
    }

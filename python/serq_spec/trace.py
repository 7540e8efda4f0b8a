"""The per-step observable line of docs/state.md (`serq-state/1`)."""

from __future__ import annotations

from typing import Any, Optional

from serq.wire import Value, canonical_json

from .config import Config, EngineEstimates, Event, Session, hold_on, thread
from .content import block_pool
from .expr import ps_rate, remaining
from .values import amount_wire as amt, wire


def event_json(cfg: Config, ev: Optional[Event]) -> Optional[dict]:
    """The event of docs/state.md (stage names instead of indices)."""
    if ev is None:
        return None
    arg = ev.arg
    names = cfg.program.stages
    if ev.kind == "finish":
        arg = [names[arg[0]]["name"], arg[1]]
    elif ev.kind in ("iter_end", "ends"):
        arg = names[arg]["name"]
    elif ev.kind == "lease_end":
        arg = [cfg.program.pools[arg[0]]["name"], arg[1]]
    return {"kind": ev.kind, "time": wire(ev.time), "seq": ev.seq, "arg": arg}


def status_json(cfg: Config, s: Session) -> str:
    """STATUS of docs/state.md."""
    st = s.status
    if st[0] in ("ready", "ended", "joining"):
        return st[0]
    if st[0] in ("queued", "growing"):
        return f"{st[0]}:{cfg.program.pools[st[1]]['name']}"
    if st[0] == "ending":   # docs/async.md §5
        return f"ending:{cfg.program.stages[st[1]]['name']}"
    if s.job is not None and s.job.stages is not None:   # a flow: all its stages (§11.14)
        return "stage:" + ",".join(cfg.program.stages[x]["name"] for x in s.job.stages)
    return f"stage:{cfg.program.stages[st[1]]['name']}"


def pool_json(cfg: Config, p: int) -> dict:
    """POOL of docs/state.md."""
    st = cfg.pools[p]
    out = {"name": cfg.program.pools[p]["name"], "used": amt(st.used), "cached": amt(st.cached()),
           "queue": [q.serial for q in st.queue], "holders": list(st.holders),
           "growers": list(st.growers),
           "entries": [e.to_json() for e in sorted(st.entries, key=lambda e: (e.last, e.rel))],
           "preemptions": st.preemptions}
    if st.rejected:   # present once the pool has rejected a hold (docs/state.md POOL)
        out["rejected"] = st.rejected
    if cfg.program.pools[p].get("spill") is not None:   # a pool with `spill` (docs/state.md POOL)
        out["spills"] = st.spills
        if st.content is not None:   # blocks loaded back from a content tier (docs/content.md §6)
            out["tier_hits"] = st.tier_hits
    if st.leases:     # present while a lease is held (docs/state.md POOL)
        out["leases"] = [[x.serial, amt(x.part.alloc[0]), None if x.ends_at is None else wire(x.ends_at)]
                         for x in st.leases]
    if st.content is not None:
        out.update(content_json(cfg, p))
    return out


def content_json(cfg: Config, p: int) -> dict:
    """The keys of a `share content` pool (docs/content.md §5, docs/state.md POOL)."""
    cs = block_pool(cfg, p)
    def ident(x: Optional[tuple]) -> Optional[list]:
        return None if x is None else list(x)

    held: list = []
    seen: dict[int, int] = {}
    for serial in cfg.pools[p].holders:
        # a session holding p in nested holds is listed once per hold, outermost first
        k = seen.get(serial, 0)
        seen[serial] = k + 1
        h = [h for h in thread(cfg, serial).holds if p in h.pools][k]
        held.append([serial, list(h.blocks_of(h.pools.index(p)))])
    return {"free_queue": list(cs.free_queue),
            "blocks": [[b, r, ident(x)] for b, (r, x) in enumerate(zip(cs.refs, cs.ident)) if r > 0 or x is not None],
            "idmap": sorted(([list(k), list(v)] for k, v in cs.idmap.items()), key=lambda kv: canonical_json(kv[0])),
            "held": held}


def stage_json(cfg: Config, i: int) -> dict:
    """STAGE of docs/state.md."""
    spec = cfg.program.stages[i]
    st = cfg.stages[i]
    out = {"name": spec["name"], "kind": st.kind}
    if st.kind == "step":
        mem = cfg.program.memory_of[i]
        res = []
        for j in st.jobs:
            pos = alloc = None
            if j.growing is not None:
                h = hold_on(thread(cfg, j.serial), j.growing)
                k = h.pools.index(j.growing)
                pos, alloc = h.position[k], h.alloc[k]
            r = {"serial": j.serial, "mode": j.mode, "remaining": j.left, "admission": j.admission,
                 "position": None if pos is None else amt(pos),
                 "allocation": None if alloc is None else amt(alloc)}
            if j.pending:
                r["pending"] = True
            res.append(r)
        out["residents"] = res
        if spec.get("lag", 0) == 1:   # docs/async.md §5: only on a lag 1 engine
            out["pending"] = list(st.pending)
            out["due"] = list(st.due)
        it = st.iteration
        out["iteration"] = None if it is None else {
            "end": wire(it["end"]), "seq": it["seq"], "assign": [[a.serial, a.tokens] for a in it["assign"]]}
        out["registers"] = [wire(r) for r in st.registers]
        del mem
    elif st.kind == "fifo":
        out["waiting"] = [[j.serial, wire(j.left)] for j in st.waiting]
        out["active"] = [[j.serial, wire(st.finish[j.serial])] for j in st.jobs]
    elif st.kind == "delay":
        out["active"] = [[j.serial, wire(st.finish[j.serial])] for j in st.jobs]
    elif i in cfg.program.shared_stages:   # a stage a flow crosses: remaining work now and rates
        out["active"] = [[j.serial, wire(remaining(cfg, j))] for j in st.jobs]
        out["rates"] = [[j.serial, wire(j.rate)] for j in st.jobs]
    else:  # ps: remaining work at now, the clock advanced to now (without changing the state)
        v: Value = st.v
        if st.jobs and cfg.now > st.t_last:
            v = v + ps_line_rate(cfg, i) * (cfg.now - st.t_last)
        out["active"] = [[j.serial, wire(st.tags[j.serial] - v)] for j in st.jobs]
    if st.est is not None:   # only on a stage whose estimates the program reads (docs/state.md)
        fields = (st.est.fields() if isinstance(st.est, EngineEstimates)
                  else (st.est.last, st.est.gap, st.est.service, st.est.wait))
        out["est"] = [None if x is None else wire(x) for x in fields]
    return out


def reads_state(e: Any) -> bool:
    """Can evaluating IR expression `e` change the Config? A draw consumes a stream value; an
    observable may advance a ps clock (`work`) or evaluate a capacity that draws."""
    if isinstance(e, dict):
        if e.get("k") in ("draw", "obs"):
            return True
        return any(reads_state(x) for x in e.values())
    if isinstance(e, list):
        return any(reads_state(x) for x in e)
    return False


def ps_line_rate(cfg: Config, i: int) -> Value:
    """The per-job rate of ps stage i since its clock was last advanced, for the line only:
    printing a line must never change the state. A capacity that reads only numbers, `present`
    and pure functions is evaluated (it cannot draw); one that draws or reads an observable is not
    evaluated — the rate is the one the pending departure was scheduled with, recovered exactly
    from that event (expr.current_rate), as the run itself does."""
    st = cfg.stages[i]
    if not reads_state(cfg.program.stages[i]["capacity"]):
        return ps_rate(cfg, i, len(st.jobs))
    ev = next((e for e in cfg.events if e.kind == "finish" and e.arg[0] == i), None)
    if ev is None or ev.time <= st.t_last:
        return 0   # no departure pending (horizon reached): the clock is shown where it stands
    return (st.tags[ev.arg[1]] - st.v) / (ev.time - st.t_last)


def records_json(rec: dict) -> dict:
    """RECORDS of docs/state.md."""
    out = {
        "admitted": [[s, p, amt(u), amt(c)] for s, p, u, c in rec["admitted"]],
        "preempted": [[s, p, amt(x)] for s, p, x in rec["preempted"]],
        "released": [[s, p, amt(x)] for s, p, x in rec["released"]],
        "evicted": [[s, p, amt(x)] for s, p, x in rec["evicted"]],
        "finished": rec["finished"],
        "iterations": [{"stage": it["stage"], "start": wire(it["start"]), "end": wire(it["end"]),
                        "assign": it["assign"], "preempted": it["preempted"], "admitted": it["admitted"]}
                       for it in rec["iterations"]],
        "observations": [[n, s, t, wire(time), wire(v)] for n, s, t, time, v in rec["observations"]],
    }
    if rec.get("rejected"):   # present when the step rejected a hold (docs/state.md RECORDS)
        out["rejected"] = rec["rejected"]
    if "gauges" in rec:
        out["gauges"] = [[n, wire(v)] for n, v in rec["gauges"]]
    return out


def state_line(cfg: Config, rec: dict, k: int) -> dict:
    """The docs/state.md line of step k."""
    return {"step": k, "event": event_json(cfg, rec.get("event")), "now": wire(cfg.now),
            "pools": [pool_json(cfg, p) for p in range(len(cfg.program.pools))],
            "stages": [stage_json(cfg, i) for i in range(len(cfg.program.stages))],
            "sessions": [[s.serial, status_json(cfg, s)] for s in cfg.sessions],
            # the live branches (docs/language.md §11.13), only while there are some
            **({"branches": [[b.tid, status_json(cfg, b)] for b in cfg.branches.values()]} if cfg.branches else {}),
            "records": records_json(rec),
            # iteration claims' tallies (docs/state.md), only in programs that declare claims
            **({"claims": [t.counts() for t in cfg.claims]} if cfg.claims else {})}


def state_text(cfg: Config, rec: dict, k: int) -> str:
    """The canonical JSON text of the docs/state.md line of step k."""
    return canonical_json(state_line(cfg, rec, k))

"""Async scheduling (docs/async.md): the ends of a `lag 1` engine's requests, applied after its next schedule.

A session reaching the end of a lagged hold's body leaves a *pending resident* on the engine (it
still holds every unit; an `eos (…)` one wants one more, discarded, token). The engine's next
schedule makes the pending ends *due* and schedules an `ends` event at the end of the iteration
it starts (at `now` when it starts none), just before that iteration's `iter_end`; the event
applies them in order: release, scope end, the session continues.
"""

from __future__ import annotations

from fractions import Fraction

from . import values as V
from .config import READY, Job
from .events import schedule_event
from .program import COMPUTED


def lag_engine(cfg, hold):
    """The `lag 1` engine whose request `hold` is (its first pool is admitted by it), or None (also
    for a hold whose every pool a `release P;` in its body released early)."""
    if not hold.pools:
        return None
    e = cfg.program.pools[hold.pools[0]].get("admitted_by")
    if e is None or cfg.program.stages[e].get("lag", 0) != 1:
        return None
    return e


def make_pending(cfg, s, e: int) -> None:
    """The end of a lagged hold's body (docs/async.md §3 item 1): a pending resident, no release."""
    from .engine import add_resident
    from .sessions import eval_in_session
    prog = cfg.program
    hold = s.holds[-1]
    st = prog.stmt(hold.stmt)
    eos = 0
    if st.get("eos") is not None:
        eos = 1 if V.nz(eval_in_session(cfg, s, st["eos"], hold.stream, st.get("at"))) else 0
    mem = prog.memory_of[e]
    job = Job(serial=s.serial, stage=e, mode="decode", left=eos,
              growing=mem if mem is not None and mem in hold.pools else None,
              admission=hold.admission, pending=True)
    s.job = job
    s.status = ("ending", e)
    add_resident(cfg, e, job)
    cfg.stages[e].pending.append(s.serial)


def make_due(cfg, e: int, at) -> None:
    """After E's schedule built its batch (docs/async.md §3 item 4): pending ends become due and
    an `ends` event at `at` (the iteration's end, or `now`) will apply them; it is scheduled
    before the iteration's own `iter_end`, so it is handled first."""
    st = cfg.stages[e]
    if not st.pending:
        return
    st.due.extend(st.pending)
    st.pending = []
    schedule_event(cfg, at, "ends", e)


def apply_ends(cfg, e: int) -> None:
    """The `ends` event (docs/async.md §3 item 5): each due end, in order, ends its hold's scope."""
    from .sessions import end_scope, scope_end
    st = cfg.stages[e]
    due, st.due = st.due, []
    for serial in due:
        s = cfg.sessions[serial]
        f = s.frames.pop()
        if s.job is not None:
            st.jobs.remove(s.job)
            s.job = None
            scope_end(cfg, s)
        else:
            # its pending resident was preempted: the hold is released already
            end_scope(cfg, s, f.stmt, [])
        s.status = READY
        cfg.ready.append(serial)


def identifies(job) -> bool:
    """Do the tokens a resident is given identify blocks on a content pool? Not a pending
    resident's EOS token: its output is never processed, and vLLM caches a block only up to the
    tokens whose output it knows (docs/async.md §3 item 2)."""
    return not job.pending


def is_candidate(s, p: int) -> bool:
    """Is an ending session a preemption candidate of pool p? Only while its pending resident is
    resident, and only for the pools its lagged hold (the innermost) holds (docs/async.md §3 item
    3): an outer hold's pool, or a session whose pending resident was preempted, has no victim to
    give: the session is not requeued (its end is still applied) and its outer holds stay."""
    return s.job is not None and p in s.holds[-1].pools


def preempt_pending(cfg, v, p: int, ictx) -> None:
    """Preempt a pending resident (docs/async.md §3 item 3): released as a preemption, not
    requeued; its end stays pending (or due)."""
    from .growth import detach_resident
    from .pools import release_hold
    prog = cfg.program
    h = v.holds[-1]
    i = h.pools.index(p)
    job = v.job
    detach_resident(cfg, v, ictx)
    computed = h.position[i]
    v.attrs[COMPUTED] = Fraction(computed)
    cfg.stages[job.stage].jobs.remove(job)
    v.job = None
    for q in h.pools:
        v.preempt_pos.pop(q, None)
    v.holds.pop()
    release_hold(cfg, v, h, preempted=True)
    cfg.pools[p].preemptions += 1
    if ictx is not None:
        ictx.preempted += 1
    cfg.records["preempted"].append([v.serial, prog.pools[p]["name"], computed])

"""The rules of async scheduling (`lag 1`, docs/async.md §3): the end of a lagged engine request
becomes a pending resident (`PendingJob`) at the hold's admission number, the engine's next
schedule makes the pending ends due, and its `ends` event applies them in order.

Programs without `lag 1` reach this module only through one attribute test at the end of a
hold's body (`Pool.lag_eng`) and one at each schedule (`Engine.lag`).

serq_spec counterpart: `serq_spec/lag.py` (lag_engine, make_due, identifies, is_candidate), with
the ends themselves (`serq_spec/sessions.py` `make_pending`, `apply_ends`).
"""

from __future__ import annotations

import bisect

from serq_fast.defs import ENDING, EV_ENDS
from serq_fast.pools import scope_end
from serq_fast.stages import Job


class PendingJob(Job):
    """A pending resident (docs/async.md §3 item 1): the end of a lagged engine request waiting
    for the engine's next schedule. A decode that wants `left` = 0 or 1 (an `eos` token) and whose
    `left` never changes; it takes the place of its request (`adm`: the hold's admission number,
    which differs from the session's when a hold nested in the request was admitted later)."""

    __slots__ = ("adm",)
    lagged = True


def lag_end(eng, s, h):
    """The session reached the end of its lagged request `h` (§3 item 1): `eos` is read in the
    session moment, a pending resident takes the request's place, the session is ending."""

    x = 0.0
    if h.stmt.eos is not None:
        v = h.stmt.eos(eng.sim.cx)
        x = 1.0 if v != 0 else 0.0
    left, drafts = pending_want(s, x)
    job = PendingJob(s, eng, left, "decode")
    job.drafts = drafts
    job.hold = h
    job.adm = h.adm
    mem = eng.memory
    if mem is not None:
        for part in h.parts:
            if part.pool.idx == mem:
                job.growpart = part
                break
    job.resident = True
    i = bisect.bisect_right(eng.adm_keys, h.adm)
    eng.adm_keys.insert(i, h.adm)
    eng.residents.insert(i, job)
    s.job = job
    s.status = ENDING
    s.where = eng
    eng.pending.append(s)

def make_due(eng, t):
    """The schedule makes the pending ends due (docs/async.md §3 item 4): the `ends` event at
    `t`, the end of the iteration it started (or `now` when it started none; also with no end
    due when that empty schedule settled step outcomes, §8, so that the engine is tried again)."""

    eng.due.extend(eng.pending)
    eng.pending = []
    eng.sim.push(t, EV_ENDS, eng)

def apply_ends(eng):
    """The `ends` event (§3 item 5): each due end in order: the pending resident (unless
    preempted) leaves, the hold frame is popped and the hold's scope ends as without lag,
    the session is ready."""

    sim = eng.sim
    due = eng.due
    eng.due = []
    if eng.fault_end_order:
        due.reverse()  # seeded fault (docs/fast.md): not in the batch's order
    for s in due:
        job = s.job
        if job is not None:
            if job.resident:
                eng._remove_resident(job)
            job.dead = True
            s.job = None
        fr = s.frames.pop()
        scope_end(sim, s, fr[3])
        s.frames[-1][1] += 1
        sim.make_ready(s)


# -- a step's outcome, seen one schedule late (docs/async.md §8; serq_spec/lag.py) ----------------

def defer_outcome(eng, s, part, tokens, done, rejected, decode, draft_end):
    """IterEnd of a step with drafts: its work counts at once, but its rejected drafts keep their
    positions and its blocks are identified only up to what the next schedule knows, until
    `settle_outcomes` after that schedule. Positions are the verified ones (the outcome of the
    step before was settled after this step was scheduled)."""

    before = part.pos - tokens
    s.unseen = (part, rejected, before + done, before + (1.0 if decode else done), draft_end)
    eng.unseen.append(s)

def settle_outcomes(eng):
    """After the engine's schedule: every unseen outcome, in the order the steps ended, gives its
    rejected drafts' positions back and identifies the blocks up to its verified position; True if
    any was applied (one of a session preempted meanwhile was dropped)."""

    sessions = eng.unseen
    eng.unseen = []
    settled = False
    for s in sessions:
        u = s.unseen
        if u is None:
            continue
        s.unseen = None
        part = u[0]
        part.pos -= u[1]
        part.pool.identify(part, u[2])
        settled = True
    return settled

def known_upto(s, pos0):
    """How far a speculative step of a lag engine identifies blocks: its own token, not past what
    the schedule knows while an earlier step's outcome is unseen."""

    u = s.unseen
    return pos0 + 1.0 if u is None else min(pos0 + 1.0, u[3])

def pending_want(s, eos):
    """A pending resident's `left` and drafts: one more step of 1 + the last run's drafts when
    vLLM cannot know the request stopped (an `eos` stop, or an unseen step that ended the run
    through accepted drafts), else nothing."""

    u = s.unseen
    wasted = 1.0 if eos or (u is not None and u[4]) else 0.0
    return wasted, (s.spec_drafts if wasted else 0)

"""Async scheduling (docs/async.md): the ends of a `lag 1` engine's requests, applied after its next schedule.

A session reaching the end of a lagged hold's body leaves a *pending resident* on the engine (it
still holds every unit; an `eos (…)` one wants one more, discarded, token). The engine's next
schedule makes the pending ends *due* and schedules an `ends` event at the end of the iteration
it starts (at `now` when it starts none), just before that iteration's `iter_end`; the event
applies them in order: release, scope end, the session continues.

This module holds the rules that the layers above it share; as in SerqLang/Lag.lean, the steps
that run a session or detach a resident are where those are: `make_pending` and `apply_ends` in
sessions.py, `preempt_pending` in growth.py.
"""

from __future__ import annotations

from typing import Optional

from serq.wire import Value

from .config import Config, HoldState, Job, Session, hold_of, hold_on, thread
from .content import identify
from .events import schedule_event
from .values import Amount


def lag_engine(cfg: Config, hold: HoldState) -> Optional[int]:
    """The `lag 1` engine whose request `hold` is (its first pool is admitted by it), or None (also
    for a hold whose every pool a `release P;` in its body released early)."""
    if not hold.pools:
        return None
    e = cfg.program.pools[hold.pools[0]].get("admitted_by")
    if e is None or cfg.program.stages[e].get("lag", 0) != 1:
        return None
    return e


def make_due(cfg: Config, e: int, at: Value, retry: bool = False) -> None:
    """After E's schedule built its batch (docs/async.md §3 item 4): pending ends become due and
    an `ends` event at `at` (the iteration's end, or `now`) will apply them; it is scheduled
    before the iteration's own `iter_end`, so it is handled first. `retry`: an empty schedule
    settled step outcomes (§8), so the event comes even with no end due: the engine is tried
    again at once, as vLLM's driver calls `schedule()` again after processing the output."""
    st = cfg.stages[e]
    if not st.pending and not retry:
        return
    st.due.extend(st.pending)
    st.pending = []
    schedule_event(cfg, at, "ends", e)


def identifies(job: Job) -> bool:
    """Do the tokens a resident is given identify blocks on a content pool? Not a pending
    resident's EOS token: its output is never processed, and vLLM caches a block only up to the
    tokens whose output it knows (docs/async.md §3 item 2)."""
    return not job.pending


def is_candidate(s: Session, p: int) -> bool:
    """Is an ending session a preemption candidate of pool p? Only while its pending resident is
    resident, and only for the pools its lagged hold (the innermost) holds (docs/async.md §3 item
    3): an outer hold's pool, or a session whose pending resident was preempted, has no victim to
    give: the session is not requeued (its end is still applied) and its outer holds stay."""
    return s.job is not None and p in s.holds[-1].pools




# -- a step's outcome, seen one schedule late (docs/async.md §8) ----------------------------------

def defer_outcome(cfg: Config, e: int, s: Session, pool: int, tokens: int, done: int,
                  rejected: int, decode: bool, draft_end: bool) -> None:
    """At IterEnd of a `lag 1` engine, a step with drafts: its outcome is not seen by the next
    schedule. Its work counts at once (the run knows its outputs), but its rejected drafts keep
    their positions, and its content pool identifies nothing past what the schedule knows, until
    `settle_outcomes` after the engine's next schedule (vLLM's update of step k comes after the
    schedule of step k + 1). Positions are the verified ones: the outcome of the step before was
    settled after this step was scheduled. `known`: what the next schedule knows of the request's
    tokens, the position before a decode step plus its sampled token, or the prefill work done.
    `draft_end`: the step ended its run through accepted drafts (`pending_want`)."""
    h = hold_on(s, pool)
    before = h.position[h.pools.index(pool)] - tokens
    s.unseen = [pool, rejected, before + done, before + (1 if decode else done), draft_end]
    cfg.stages[e].unseen.append(s.tid)


def settle_outcomes(cfg: Config, e: int) -> bool:
    """After E's schedule (one that started an iteration or not): every outcome it had not seen is
    applied in the order the steps ended: the rejected drafts give their positions back, and a
    content pool identifies the blocks up to the verified position (vLLM caches on output
    processing, up to `num_computed_tokens − num_output_placeholders`). A session preempted
    meanwhile has none left (`drop_outcome`). True if any was applied."""
    st = cfg.stages[e]
    serials, st.unseen = st.unseen, []
    settled = False
    for serial in serials:
        s = thread(cfg, serial)
        if s.unseen is None:
            continue
        p, rejected, verified, _, _ = s.unseen
        s.unseen = None
        if p is None:
            continue
        h = hold_of(s, p)
        if h is None:
            continue
        i = h.pools.index(p)
        h.position[i] -= rejected
        identify(cfg, p, h.content_of(i), h.blocks_of(i), verified)
        settled = True
    return settled


def drop_outcome(s: Session, p: int) -> Amount:
    """A preempted session's unseen outcome (on pool p): its rejected drafts, which the position
    recorded at the preemption must not count (vLLM restarts the request from its verified tokens);
    the outcome itself is dropped: vLLM does not cache a preempted request's blocks on output."""
    if s.unseen is None:
        return 0
    rejected = s.unseen[1] if s.unseen[0] == p else 0
    s.unseen = None
    return rejected


def known_upto(s: Session, pos_before: Amount) -> Amount:
    """How far a speculative step served by a `lag 1` engine identifies blocks: its own token, but
    not past what the schedule knows when an earlier step's outcome is still unseen (vLLM caches at
    allocation up to `num_tokens`, which lacks the outputs in flight)."""
    if s.unseen is None:
        return pos_before + 1
    return min(pos_before + 1, s.unseen[3])


def pending_want(s: Session, eos: int) -> tuple[int, int]:
    """A pending resident's `left` and drafts (docs/async.md §3 item 1, §8): one more step when
    vLLM cannot know the request stopped — an `eos` stop, or an unseen step that ended the run
    through accepted drafts (vLLM skips a request only once its in-flight step surely reaches the
    end) — of 1 + the drafts of the session's last run; else nothing."""
    wasted = 1 if eos or (s.unseen is not None and s.unseen[4]) else 0
    return wasted, s.spec_drafts if wasted else 0

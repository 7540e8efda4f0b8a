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

from .config import Config, HoldState, Job, Session
from .events import schedule_event


def lag_engine(cfg: Config, hold: HoldState) -> Optional[int]:
    """The `lag 1` engine whose request `hold` is (its first pool is admitted by it), or None (also
    for a hold whose every pool a `release P;` in its body released early)."""
    if not hold.pools:
        return None
    e = cfg.program.pools[hold.pools[0]].get("admitted_by")
    if e is None or cfg.program.stages[e].get("lag", 0) != 1:
        return None
    return e


def make_due(cfg: Config, e: int, at: Value) -> None:
    """After E's schedule built its batch (docs/async.md §3 item 4): pending ends become due and
    an `ends` event at `at` (the iteration's end, or `now`) will apply them; it is scheduled
    before the iteration's own `iter_end`, so it is handled first."""
    st = cfg.stages[e]
    if not st.pending:
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



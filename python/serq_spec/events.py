"""The event list (docs/language.md §11.1–§11.2): ordered by (time, seq), seq a global counter."""

from __future__ import annotations

from typing import Any

from serq.wire import Value

from .config import Config, Event
from .errors import SpecError


def schedule_event(cfg: Config, time: Value, kind: str, arg: Any) -> Event:
    """Insert an event at `time` with the next sequence number; same-time events keep their order."""
    if time < cfg.now:
        raise SpecError(f"an event scheduled in the past ({time} < {cfg.now})")
    ev = Event(time, cfg.counters.next_seq, kind, arg)
    cfg.counters.next_seq += 1
    i = len(cfg.events)
    while i > 0 and cfg.events[i - 1].key() > ev.key():
        i -= 1
    cfg.events.insert(i, ev)
    return ev


def withdraw_event(cfg: Config, kind: str, arg: Any) -> None:
    """Remove the pending event of this kind and argument (a ps stage's rescheduled departure)."""
    cfg.events = [e for e in cfg.events if not (e.kind == kind and e.arg == arg)]


def pending_at_now(cfg: Config) -> bool:
    """Is any event pending at the current instant? (iteration start rule, §11.2)."""
    return bool(cfg.events) and cfg.events[0].time == cfg.now

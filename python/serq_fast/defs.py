"""The definitions every serq_fast module shares: the built-in attribute slots, the session
statuses, the event kinds, the float-time tolerances, the run guards, the float conversions of
pool amounts and the seeded faults. It imports nothing of serq_fast but `expr`, so that every
other module can import it at its top instead of reaching back into the event loop (`step`).

serq_spec counterparts: `values` (the exact arithmetic these float conversions stand in for),
`config` (the statuses of a session, `SessionState`), `events` (the event kinds), `program`
(the guards).
"""

from __future__ import annotations

import math
import os

from serq.wire import value_from_wire

from serq_fast.expr import to_float

# Built-in attribute slots (docs/ir.md "Slots").
SERIAL, TURN_NO, CACHED, COMPUTED, NEW, OUT, THINK, MORE, FORCED = range(9)

# Session status. ENDING: the end of a lagged engine request is pending or due on `where`
# (docs/async.md §3). JOINING: at a `join;`, waiting for its branches (docs/language.md §11.13).
READY, QUEUED, STAGE, GROWING, ENDED, ENDING, JOINING = range(7)

# Event kinds.
EV_ARRIVE, EV_FINISH, EV_ITER_END, EV_WARMUP, EV_ENDS, EV_LEASE_END = range(6)
EVENT_NAMES = ("arrive", "finish", "iter_end", "warmup_end", "ends", "lease_end")

TIE_EPS = 1e-10  # relative: event times closer than this are one instant (docs/fast.md "Float time")
EPS = 1e-9       # absolute: pool amounts and work within this of a block edge or of 0 are there
INF = math.inf
MAX_STATEMENTS = 1_000_000  # §11.9 guard: statements without blocking
MAX_READY_PER_INSTANT = 1000  # §11.9 guard
MAX_CLOSED_RESPAWNS_PER_INSTANT = 10_000  # §11.9 guard: replacements in one instant beyond closed(n)'s n


def FAULTS() -> set:
    """Faults seeded on purpose (env SERQ_FAST_FAULT, comma-separated); empty in normal runs."""
    return set(filter(None, os.environ.get("SERQ_FAST_FAULT", "").split(",")))


def blocks_down(x: float, b: int) -> int:
    """floor(x / b) as a block count (`reuse (ρ)` on a content pool): inf keeps all, < 0 none."""
    if x <= 0:
        return 0
    if math.isinf(x):
        return 1 << 62
    return int(math.floor(x / b + EPS))


def wire(v: str, what: str = "a value") -> float:
    return to_float(value_from_wire(v), what)


def roundup(x: float, b) -> float:
    if b is None or x <= 0 or math.isinf(x):
        return x
    return math.ceil(x / b - EPS) * b


def rounddown(x: float, b) -> float:
    if b is None:
        return x
    if x <= 0:
        return 0.0
    if math.isinf(x):
        return x  # e.g. `reuse (inf)`: keep the whole entry
    return math.floor(x / b + EPS) * b


class Request:
    """The client-metric mark of a lowered engine call (docs/ir.md `request`), or of a turn whose
    server made no engine call (prompt, output, hit and first stay None)."""

    __slots__ = ("serial", "turn", "prompt", "output", "submit", "first", "done", "hit")

    def __init__(self, serial, turn, prompt, output, submit):
        self.serial, self.turn, self.prompt, self.output, self.submit = serial, turn, prompt, output, submit
        self.first = None
        self.done = None
        self.hit = None

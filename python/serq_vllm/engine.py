"""Running a program's IR on one of serQ's engines, its per-step state lines (docs/state.md) fed
to a callback: serq_fast (`Sim(states=…)`, lean lines) or serq_spec (`run(on_step=…)`, the
exact reference). The callback ends a run early by raising `StopRun` (vLLM's max_steps).
"""

from __future__ import annotations

import json
import math
from typing import Callable

from serq_fast.step import Sim
from serq_fast.expr import RunError
from serq_drt.lockstep import error_text
from serq_spec.cli import prepare
from serq_spec.errors import SpecError
from serq_spec.step import run
from serq_spec.trace import state_text
from serq_spec.workload import Workload

#: The file name run-time errors are reported against (the programs' common stem).
PROGRAM_NAME = "vllm_scenario.sq"


class ModelError(Exception):
    """The engine failed or produced state lines the trace builder cannot read."""


class StopRun(Exception):
    """Raised from the state-line callback to end a run early (vLLM's max_steps)."""


def replay_sessions(ir: dict) -> dict:
    """The sessions file serq_spec replays for `ir`: one session per trace session, one empty draw
    list per turn (the ordered trace carries every number)."""
    rows = ir["workload"]["trace"]["sessions"]
    return {"format": "serq-sessions/1", "seed": 1, "arrivals": [], "trace_picks": [],
            "machine": [],
            "sessions": [{"serial": i, "init": [], "turns": [[] for _ in turns], "session": []}
                         for i, turns in enumerate(rows)]}


def run_engine(ir: dict, engine: str, feed: Callable[[dict], None]) -> None:
    """Run `ir` (an ordered trace written into it, no draws) on `engine` ("fast" or "spec"),
    each state line to `feed`. A run-time error of the program is a ModelError naming its place."""
    if engine == "fast":
        try:
            # lean lines (serq_fast.trace.LEAN): the collector reads no block identities, no
            # gate lists and only the ending sessions, which full lines would list per step
            # (O(KV blocks + requests) each: most of a large scenario's run time)
            Sim(ir, seed=1, horizon=math.inf, warmup=0.0, states=feed, lean_states=True).run()
        except StopRun:
            pass
        except RunError as exc:
            raise ModelError(f"serq_fast run-time error: {error_text(exc, ir, PROGRAM_NAME)}") from None
        return
    if engine == "spec":
        prog = prepare(ir, Workload.replay(replay_sessions(ir)), PROGRAM_NAME)
        try:
            run(prog, on_step=lambda cfg, rec, k: feed(json.loads(state_text(cfg, rec, k))), check=False)
        except StopRun:
            pass
        except SpecError as exc:
            raise ModelError(f"serq_spec run-time error: {error_text(exc, ir, PROGRAM_NAME)}") from None
        return
    raise ValueError(f"unknown engine {engine!r} (spec or fast)")

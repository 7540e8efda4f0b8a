"""`serq sample`: draw, once, every random value a program consumes for K sessions (docs/sessions.md).

The program is run by the spec itself with a live `Workload`: each time a draw needs a value its
list does not have, the value is drawn from the stream of docs/sessions.md (serq.draws) and
appended. Arrival times come from the `arrival` stream, unordered trace picks from the `trace`
stream. The run goes on until every session has ended (no horizon).
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from typing import Callable, Optional

from serq import draws as live_draws
from serq.errors import number_text
from serq.wire import Value

from .config import Config
from .errors import SpecError
from .expr import Env, evaluate
from .program import Program
from .step import run
from .workload import Workload


#: The most sessions `serq sample` and `serq lockstep` draw: the sampling run keeps every session
#: in exact arithmetic (about 5 KB each for examples/single-turn/mm1.sq, measured: 20 000 sessions
#: 128 MB, 7.6 s), so 250 000 is already about 1.3 GB; asked for more, they refuse up front
#: instead of growing until memory runs out (docs/sessions.md).
MAX_SESSIONS = 250_000


def arrival_times(prog: Program, w: Workload, seed: int, count: int) -> list:
    """Poisson: an arrival at 0, then exponential gaps of mean 1/λ; renewal: the first after one gap."""
    arrival = prog.workload["arrival"]
    kind = arrival["kind"]
    if kind not in ("poisson", "renewal"):
        return []
    rng = live_draws.buffered_stream("arrival", seed)  # many draws: U's made in numpy chunks
    times = []
    t = Fraction(0)
    if kind == "poisson":
        rate = Fraction(arrival["rate"])
        if rate <= 0:
            raise SpecError("poisson rate must be positive")
        for i in range(count):
            if i > 0:
                try:
                    t += live_draws.draw_exact("exp", [Fraction(1) / rate], rng)
                except live_draws.DrawError as exc:
                    raise SpecError(f"`arrive poisson(rate)`: the mean gap 1/rate: {exc}") from None
            times.append(t)
        return times
    cfg = Config(prog)
    w.arrival_rng = rng
    for _ in range(count):
        gap = evaluate(arrival["gap"], Env(cfg, stream=("arrival",), at=arrival.get("at"), what="`arrive renewal(…)`: the gap"))
        if isinstance(gap, float) or gap <= 0:
            raise SpecError(f"`arrive renewal(…)`: a renewal gap must be positive and finite, got {number_text(gap)}",
                            arrival.get("at"), prog.files)
        t += gap
        times.append(t)
    w.arrival_rng = None
    return times


def trace_picks(prog: Program, seed: int, count: int) -> list:
    """Unordered trace: the corpus session of each serial, floor(U·n) from the trace stream."""
    trace = prog.workload.get("trace")
    if trace is None or trace["ordered"]:
        return []
    n = len(trace["sessions"])
    u = live_draws.make_stream("trace", seed).uniforms(count).tolist()  # every pick's U in one numpy call
    return [min(n - 1, math.floor(x * n)) for x in u]


def _reaches_end(ir: dict, block: int, seen: set) -> bool:
    """Whether an `end` statement can be reached from `block` (through nested blocks and turns)."""
    if block in seen:
        return False
    seen.add(block)
    for s in ir["blocks"][block]:
        op = s["op"]
        if op == "end":
            return True
        nested = [s.get(k) for k in ("body", "then", "else")]
        if op == "turn":
            nested += [ir["workload"].get("turn"), ir["workload"].get("server")]
        if any(isinstance(b, int) and _reaches_end(ir, b, seen) for b in nested):
            return True
    return False


def never_ending_loop(ir: dict) -> Optional[list]:
    """The `at` of a `loop` that every session enters and none can leave, or None.

    A `loop` has no exit but `end`; when it sits at the top of the session block (every session
    reaches it unless it ends first) and no `end` is reachable from its body, no session ever
    ends, so sampling without a horizon would only run into its step limit."""
    session = ir["workload"].get("session")
    if session is None:
        return None
    for s in ir["blocks"][session]:
        if s["op"] == "end":
            return None
        if s["op"] == "loop" and not _reaches_end(ir, s["body"], set()):
            return s.get("at")
    return None


def _stuck_note(prog: Program) -> Callable[[Config, dict, int], None]:
    """An on_step hook that says, once, when a session is first preempted without progress.

    A request that cannot fit even alone preempts itself forever (docs/language.md §11.7); its
    events never run out, so sampling without a horizon would only stop at its step limit, which
    the exact engine takes minutes to reach. The note names the pool and what to do as soon as the
    `stuck` counter shows it; the run goes on, since sessions preempted by each other may still
    make progress later."""
    said = False

    def note(cfg: Config, rec: dict, k: int) -> None:
        nonlocal said
        if said:
            return
        stuck = [prog.pools[i]["name"] for i, p in enumerate(cfg.pools) if p.stuck]
        if stuck:
            said = True
            print(f"serq sample: note: at step {k} (t = {float(cfg.now):.6g}) a session on pool "
                  f"{stuck[0]} was preempted without progress (docs/language.md §11.7: a request that "
                  "cannot fit even alone preempts itself forever); if sampling does not finish, stop "
                  "it and sample with --horizon T, or give the pool room for the longest request",
                  file=sys.stderr, flush=True)
    return note


def sample(ir: dict, seed: int, count: int, name: str = "program", max_steps: int | None = 2_000_000,
           horizon: Value = float("inf")) -> dict:
    """The sessions file of `count` sessions of program `ir` with seed `seed`.

    Without a horizon the run goes on until every session has ended; with one (for sessions that
    never end, e.g. a closed loop) it stops before the first event after it, and the file holds
    the draws consumed until then (replay it with the same horizon)."""
    prog = Program(ir, name)
    prog.horizon = horizon
    loop_at = never_ending_loop(ir) if horizon == float("inf") and count > 0 else None
    if loop_at is not None:   # located at the loop as every program error is (FILE:LINE:COLUMN: error: …)
        raise SpecError("every session enters this `loop` and none can leave it (no `end` in it), so the "
                        "sessions never end: sample with --horizon T and replay with the same horizon",
                        loop_at, prog.files)
    kind = prog.workload["arrival"]["kind"]
    if kind == "batch" and count != prog.workload["arrival"]["n"]:
        raise SpecError(f"the program spawns batch({prog.workload['arrival']['n']}): sample exactly that many sessions")
    if kind == "none" and count != 0:
        raise SpecError("the program has no arrivals (`arrive none`): sample 0 sessions")
    w = Workload.live_sample(seed, count)
    prog.workload_data = w
    w.arrivals = arrival_times(prog, w, seed, count)
    w.trace_picks = trace_picks(prog, seed, count)
    cfg = run(prog, max_steps=max_steps, check=False,
              on_step=_stuck_note(prog) if horizon == float("inf") else None)
    if cfg.events and cfg.events[0].time <= horizon:
        raise SpecError(f"sampling did not finish within {max_steps} steps (sessions that never end "
                        "need --horizon T)")
    stalled = [x.serial for x in cfg.sessions if x.status[0] != "ended"]
    if stalled and horizon == float("inf"):
        # e.g. a request larger than the KV cache blocks its queue forever (docs/language.md §11.7): the
        # replay stalls the same way; the file holds every draw consumed until no event was left
        print(f"serq sample: note: {len(stalled)} session(s) never ended (blocked when the run "
              f"ran out of events): {stalled[:10]}", file=sys.stderr)
    return w.to_file(name, ir.get("inputs", {}))

"""Cost of the random streams of docs/sessions.md (python/serq/draws.py): issue 15, item 3.

Prints microseconds of CPU time (time.process_time, the best of --repeat rounds; on the shared
machine wall time was inflated two- to threefold by the other jobs) for:
  open session stream   draws.make_stream("session", seed, serial), a new serial each time
  open turn stream      draws.make_stream("turn", seed, serial, 1)
  open LiveSource       serq_fast's live source of a session (what serq_fast does per session)
  U                     one rng.random() of an open stream
  ~exp draw             one draw_float("exp", [1.0], rng)
  LiveSource ~exp       one serq_fast draw (the law, the 12-digit rounding)
  M/M/1 session         open a session stream and make its one ~exp draw (examples/single-turn/mm1.sq)
and, when the module has the vectorised path (stream v2), per stream or draw: the keys of n session
streams and the first U of each in one numpy call, and n U's of one stream in one call.

    PYTHONPATH=python python3 benchmarks/bench_draws.py [--n 20000] [--repeat 5] [--json]

It uses only the module's public calls, so it measures an older checkout too (the figures
before and after a change of the stream).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from serq import draws
from serq_fast.sources import LiveSource

SEED = 1


def _best_us(fn, n: int, repeat: int) -> float:
    """The least CPU time of `repeat` calls of fn(n), in µs per unit of n."""
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn(n)
        best = min(best, time.process_time() - t)
    return best / n * 1e6


def open_session(n):
    make = draws.make_stream
    for serial in range(n):
        make("session", SEED, serial)


def open_turn(n):
    make = draws.make_stream
    for serial in range(n):
        make("turn", SEED, serial, 1)


def open_live(n):
    for serial in range(n):
        LiveSource("session", SEED, serial)


def one_u(n):
    rng = draws.make_stream("session", SEED, 0)
    r = rng.random
    for _ in range(n):
        r()


def one_exp(n):
    rng = draws.make_stream("session", SEED, 0)
    f = draws.draw_float
    args = [1.0]
    for _ in range(n):
        f("exp", args, rng)


def live_exp(n):
    src = LiveSource("session", SEED, 0)
    args = [1.0]
    for _ in range(n):
        src("exp", args)


def mm1_session(n):
    args = [1.0]
    for serial in range(n):
        LiveSource("session", SEED, serial)("exp", args)


def vector_u(n):
    keys = draws.stream_keys("session", SEED, range(n))
    draws.uniforms(keys, 0)


def block_u(n):
    draws.make_stream("arrival", SEED).uniforms(n)


CASES = [
    ("open session stream", open_session),
    ("open turn stream", open_turn),
    ("open LiveSource", open_live),
    ("U (rng.random)", one_u),
    ("~exp draw", one_exp),
    ("LiveSource ~exp", live_exp),
    ("M/M/1 session", mm1_session),
]
VECTOR_CASES = [
    ("vectorised: n keys + U", vector_u),
    ("vectorised: n U, 1 stream", block_u),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000, help="streams or draws per round (default 20000)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds; the fastest counts (default 5)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    version = getattr(draws, "STREAM_VERSION", 1)
    cases = CASES + (VECTOR_CASES if hasattr(draws, "uniforms") else [])
    figures = {name: _best_us(fn, args.n, args.repeat) for name, fn in cases}
    if args.json:
        print(json.dumps({"stream_version": version, "n": args.n, "repeat": args.repeat, "us": figures}, indent=2))
        return 0
    print(f"stream v{version}: µs of CPU each, best of {args.repeat} rounds of {args.n}")
    for name, us in figures.items():
        print(f"  {name:<26}{us:>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

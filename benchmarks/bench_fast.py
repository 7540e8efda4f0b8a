"""Speed of serq_fast (docs/fast.md "Speed").

Prints, for the seed vLLM workload (examples/multi-turn/vllm.sq at Lambda = 0.3, and with
blocks = 2500): requests per CPU-second and microseconds of CPU per output token; for M/M/1
(examples/single-turn/mm1.sq): events per CPU-second. When pyserq 0.1.6 is importable, the same
workloads in dialect P (benchmarks/peer/, docs/language.md §15) run under it through
benchmarks/peer/pyserq_peer.py and the ratios are printed.

    PYTHONPATH=python python3 benchmarks/bench_fast.py [--horizon 20000] [--seed 1]

Then, for the seed and M/M/1 (issue 15 item 7; `--no-rss`, `--no-phases` leave them out):

RSS per 10^6 requests, measured, not extrapolated from one run: each workload runs once in a
fresh child process (this script with `--rss-child`, records off, as `serq run` without
`--records`) to a horizon (`--rss-horizon`, `--mm1-rss-horizon`); the child reads its own
resident set (VmRSS, /proc/self/status) at half the horizon and at the end, and its peak (VmHWM)
at the end. The slope through the two VmRSS points is the memory a run keeps per request (MiB
per 10^6 requests); the peak adds what was held once and given back. Both points lie beyond the
one-time steps of a run: the exact samples' switch to streaming statistics (at 65 536 samples;
docs/report.md) and numpy's import by the run's buffered streams (at the arrival stream's 8 193rd
draw; serq/draws.py `BufferedStream`), which two runs of different horizons place at different
points of their peaks (docs/fast.md "Memory"). Where /proc is absent the child prints nulls and
the line says so. Not `getrusage(RUSAGE_CHILDREN)` nor the child's `ru_maxrss` on Linux: both
carry the parent's peak across fork and exec (measured: all four points read 81.6 MiB, this
process's own size after its timed runs).

CPU per request by phase: a separate run under cProfile (`--profile-horizon`,
`--mm1-profile-horizon`), never the timed run. Each function's own time (tottime) goes to the
phase of PHASE_OF_MODULE / PHASE_OF_FUNCTION below; a built-in's (heap push, len, ...) goes to
its callers' phases in proportion to the time it spent for each. The profile slows everything
by a factor (≈ 2-3), so only the phases' shares are read from it: each phase's µs per request is
its share × the timed run's CPU per request. Phases: formation (forming an engine iteration:
schedule, admission, budget, cost, growth, preemption, eviction), advance (the decode
fast-forward, fastforward.py + advance.py), sessions (the interpreter, the generated blocks,
expressions and draws, the hold statement, scope end and release), rest (the event loop, settle,
sampling and gauges, stages, statistics).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from serq.frontend import load_program  # noqa: E402
from serq_fast.step import Sim  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "peer"))

import pyserq_peer  # noqa: E402


def fast_vllm(sets: dict, horizon: float, seed: int) -> dict:
    ir = load_program(str(ROOT / "examples" / "multi-turn" / "vllm.sq"), sets)
    recs: list = []
    t = time.process_time()
    sim = Sim(ir, seed=seed, horizon=horizon, warmup=horizon / 10, records=recs).run()
    cpu = time.process_time() - t
    reqs = sim.client["response"].n
    tokens = sum(r.output for r in recs)
    return {"cpu": cpu, "requests": reqs, "tokens": tokens, "events": sim.events,
            "ttft": sim.client["ttft"].mean, "response": sim.client["response"].mean}


def fast_mm1(horizon: float, seed: int) -> dict:
    ir = load_program(str(ROOT / "examples" / "single-turn" / "mm1.sq"), {})
    t = time.process_time()
    sim = Sim(ir, seed=seed, horizon=horizon, warmup=horizon / 10).run()
    cpu = time.process_time() - t
    return {"cpu": cpu, "events": sim.events, "requests": sim.client["response"].n}


# The phase of each module's functions (path relative to python/; "<serq block" = the generated
# session blocks of specialise.py), and the functions of a module that belong elsewhere.
PHASE_OF_MODULE = {
    "serq_fast/engine.py": "formation",
    "serq_fast/growth.py": "formation",
    "serq_fast/lag.py": "formation",
    "serq_fast/claims.py": "formation",
    "serq_fast/content.py": "formation",
    "serq_fast/pools.py": "formation",
    "serq_fast/fastforward.py": "advance",
    "serq_fast/advance.py": "advance",
    "serq_fast/sessions.py": "sessions",
    "serq_fast/specialise.py": "sessions",
    "<serq block": "sessions",
    "serq_fast/expr.py": "sessions",
    "serq_fast/sources.py": "sessions",
    "serq/draws.py": "sessions",
    "serq_fast/step.py": "rest",
    "serq_fast/stages.py": "rest",
    "serq_fast/stats.py": "rest",
    "serq_fast/trace.py": "rest",
    "serq_fast/invariants.py": "rest",
}
PHASE_OF_FUNCTION = {
    # the hold statement and the end of its scope are statements a session runs
    ("serq_fast/pools.py", "execute"): "sessions",
    ("serq_fast/pools.py", "__init__"): "sessions",
    ("serq_fast/pools.py", "scope_end"): "sessions",
    ("serq_fast/pools.py", "release_hold"): "sessions",
    ("serq_fast/pools.py", "release_part"): "sessions",
    ("serq_fast/pools.py", "release_early"): "sessions",
    ("serq_fast/pools.py", "_cache_amount"): "sessions",
    ("serq_fast/pools.py", "sample"): "rest",
    ("serq_fast/pools.py", "reset_averages"): "rest",
    ("serq_fast/engine.py", "sample"): "rest",
    # settle is the event loop's; the session it runs is `exec_session`'s
    ("serq_fast/sessions.py", "settle"): "rest",
    ("serq_fast/stages.py", "__init__"): "rest",
}
PHASES = ("formation", "advance", "sessions", "rest")


def _phase(func: tuple) -> str | None:
    """The phase of a pstats function key (file, line, name); None for a built-in."""
    path, _, name = func
    if path == "~":
        return None
    path = path.replace(os.sep, "/")
    for mod, phase in PHASE_OF_MODULE.items():
        if path.endswith(mod) or (mod.startswith("<") and path.startswith(mod)):
            return PHASE_OF_FUNCTION.get((mod, name), phase)
    return "rest"


def phase_shares(prof: cProfile.Profile) -> dict:
    """Each phase's share of the profiled run's own time (built-ins split among their callers)."""
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    own = dict.fromkeys(PHASES, 0.0)
    for func, (_, _, tt, _, callers) in stats.items():
        phase = _phase(func)
        if phase is not None:
            own[phase] += tt
            continue
        split = [(_phase(c), v[2]) for c, v in callers.items()]
        total = sum(t for _, t in split)
        for ph, t in split:
            own[ph or "rest"] += tt * (t / total) if total > 0 else 0.0
        if not split:
            own["rest"] += tt
    whole = sum(own.values()) or 1.0
    return {ph: own[ph] / whole for ph in PHASES}


def profiled_phases(path: str, sets: dict, horizon: float, seed: int) -> dict:
    ir = load_program(str(ROOT / path), sets)
    prof = cProfile.Profile()
    prof.enable()
    Sim(ir, seed=seed, horizon=horizon, warmup=horizon / 10).run()
    prof.disable()
    return phase_shares(prof)


def _proc_status_kib(key: str):
    """A field of /proc/self/status in KiB (VmRSS:, VmHWM:), or None where /proc is absent."""
    try:
        with open("/proc/self/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith(key)), None)
    except OSError:
        return None


def rss_child(path: str, horizon: float, seed: int) -> None:
    """The child of the RSS points: one run, records off; prints (requests, VmRSS) at half the
    horizon and at the end, and VmHWM at the end."""
    ir = load_program(str(ROOT / path), {})
    half: list = []

    def at_half(now: float, _horizon: float) -> None:
        if not half and now >= horizon / 2:
            half.append((sim.client["response"].n, _proc_status_kib("VmRSS:")))

    sim = Sim(ir, seed=seed, horizon=horizon, warmup=horizon / 10, progress=at_half)
    sim.run()
    print(json.dumps({"half": half[0] if half else None,
                      "end": (sim.client["response"].n, _proc_status_kib("VmRSS:")),
                      "hwm_kib": _proc_status_kib("VmHWM:")}))


def print_rss(label: str, path: str, horizon: float, seed: int) -> None:
    child = subprocess.run([sys.executable, __file__, "--rss-child", path, str(horizon), str(seed)],
                           stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT / "python")}, check=True)
    got = json.loads(child.stdout)
    if got["half"] is None or got["half"][1] is None or got["end"][1] is None:
        print(f"{label:<34} RSS: not measured (no /proc/self/status, or the run was too short)")
        return
    (n1, k1), (n2, k2) = got["half"], got["end"]
    r1, r2 = k1 / 1024.0, k2 / 1024.0
    slope = (r2 - r1) / (n2 - n1) * 1e6 if n2 != n1 else float("nan")
    print(f"{label:<34} RSS {r1:.1f} MiB at {n1} requests (t = {horizon / 2:g} s), {r2:.1f} MiB at {n2} "
          f"(t = {horizon:g} s): {slope:+.1f} MiB per 10^6 requests; peak (VmHWM) {got['hwm_kib'] / 1024.0:.1f} MiB")


def print_phases(label: str, path: str, horizon: float, seed: int, us_per_request: float) -> None:
    shares = profiled_phases(path, {}, horizon, seed)
    parts = ", ".join(f"{ph} {shares[ph] * us_per_request:.1f}" for ph in PHASES)
    print(f"{label:<34} µs of CPU per request by phase (profiled run, horizon {horizon:g}, shares × the "
          f"timed {us_per_request:.1f} µs): {parts}")


def pyserq_vllm(sets: dict, horizon: float, seed: int):
    """The P translation of the seed under pyserq (None when absent); CPU of the run alone."""
    if not pyserq_peer.available():
        return None
    r = pyserq_peer.run_peer("vllm", sets, seed=seed, horizon=horizon)
    cl = r["client"]
    return {"cpu": r["cpu"]["run"], "requests": cl["response"]["count"], "ttft": cl["ttft"]["mean"],
            "response": cl["response"]["mean"]}


def pyserq_mm1(horizon: float, seed: int):
    if not pyserq_peer.available():
        return None
    r = pyserq_peer.run_peer("mm1", seed=seed, horizon=horizon)
    return {"cpu": r["cpu"]["run"], "events": r["run"]["events"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--horizon", type=float, default=20000.0)
    ap.add_argument("--mm1-horizon", type=float, default=200000.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-pyserq", action="store_true")
    ap.add_argument("--no-rss", action="store_true", help="leave out the peak-RSS points")
    ap.add_argument("--no-phases", action="store_true", help="leave out the profiled run by phase")
    ap.add_argument("--rss-horizon", type=float, default=80000.0,
                    help="the seed's RSS run, s (points at half of it and at the end, both beyond the one-time steps)")
    ap.add_argument("--mm1-rss-horizon", type=float, default=400000.0, help="M/M/1's RSS run, s")
    ap.add_argument("--profile-horizon", type=float, default=4000.0, help="the seed's profiled run, s")
    ap.add_argument("--mm1-profile-horizon", type=float, default=40000.0, help="M/M/1's profiled run, s")
    ap.add_argument("--rss-child", nargs=3, metavar=("PATH", "HORIZON", "SEED"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rss_child:
        rss_child(args.rss_child[0], float(args.rss_child[1]), int(args.rss_child[2]))
        return 0
    if args.no_pyserq:
        sys.modules["pyserq"] = None  # type: ignore[assignment]
    print(f"serq_fast benchmark: horizon {args.horizon:g} s (warm-up 10 %), seed {args.seed}, "
          f"python {sys.version.split()[0]}, fast-forward {'off' if os.environ.get('SERQ_FAST_NO_FF') else 'on'}")
    us_per_request = {}
    for label, sets in (("vllm.sq Lambda=0.3", {}), ("vllm.sq Lambda=0.3 blocks=2500", {"blocks": "2500"})):
        f = fast_vllm(sets, args.horizon, args.seed)
        us_per_request[label] = 1e6 * f["cpu"] / max(1, f["requests"])
        rps = f["requests"] / f["cpu"]
        us_tok = 1e6 * f["cpu"] / max(1, f["tokens"])
        print(f"{label:<34} serq_fast: {f['requests']} requests in {f['cpu']:.2f} CPU s = "
              f"{rps:,.0f} requests/CPU-s, {us_tok:.2f} µs/output token, {f['events']} events; "
              f"mean ttft {f['ttft']:.4f} s, response {f['response']:.4f} s")
        try:
            p = pyserq_vllm(sets, args.horizon, args.seed)
        except Exception as exc:  # the P translation must not stop the serq_fast figures
            print(f"{'':<34} pyserq: failed ({exc})")
            p = None
        if p:
            prps = p["requests"] / p["cpu"]
            print(f"{'':<34} pyserq 0.1.6: {p['requests']} requests in {p['cpu']:.2f} CPU s = "
                  f"{prps:,.0f} requests/CPU-s; ratio serq_fast/pyserq = {rps / prps:.2f}; "
                  f"mean ttft {p['ttft']:.4f} s, response {p['response']:.4f} s")
    m = fast_mm1(args.mm1_horizon, args.seed)
    eps = m["events"] / m["cpu"]
    print(f"{'mm1.sq (horizon %g)' % args.mm1_horizon:<34} serq_fast: {m['events']} events in {m['cpu']:.2f} CPU s = "
          f"{eps:,.0f} events/CPU-s")
    try:
        pm = pyserq_mm1(args.mm1_horizon, args.seed)
    except Exception as exc:
        print(f"{'':<34} pyserq: failed ({exc})")
        pm = None
    if pm:
        peps = pm["events"] / pm["cpu"]
        print(f"{'':<34} pyserq 0.1.6: {peps:,.0f} events/CPU-s; ratio {eps / peps:.2f}")
    vllm_path, mm1_path = "examples/multi-turn/vllm.sq", "examples/single-turn/mm1.sq"
    if not args.no_phases:
        print_phases("vllm.sq Lambda=0.3", vllm_path, args.profile_horizon, args.seed,
                     us_per_request["vllm.sq Lambda=0.3"])
        print_phases("mm1.sq", mm1_path, args.mm1_profile_horizon, args.seed, 1e6 * m["cpu"] / max(1, m["requests"]))
    if not args.no_rss:
        print_rss("vllm.sq Lambda=0.3", vllm_path, args.rss_horizon, args.seed)
        print_rss("mm1.sq", mm1_path, args.mm1_rss_horizon, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Speed of serq_fast (docs/fast.md "Speed").

Prints, for the seed vLLM workload (examples/multi-turn/vllm.sq at Lambda = 0.3, and with
blocks = 2500): requests per CPU-second and microseconds of CPU per output token; for M/M/1
(examples/single-turn/mm1.sq): events per CPU-second. When pyserq 0.1.6 is importable, the same
workloads in dialect P (benchmarks/peer/, docs/language.md §15) run under it through
benchmarks/peer/pyserq_peer.py and the ratios are printed.

    PYTHONPATH=python python3 benchmarks/bench_fast.py [--horizon 20000] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
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
    return {"cpu": cpu, "events": sim.events}


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
    args = ap.parse_args(argv)
    if args.no_pyserq:
        sys.modules["pyserq"] = None  # type: ignore[assignment]
    print(f"serq_fast benchmark: horizon {args.horizon:g} s (warm-up 10 %), seed {args.seed}, "
          f"python {sys.version.split()[0]}, fast-forward {'off' if os.environ.get('SERQ_FAST_NO_FF') else 'on'}")
    for label, sets in (("vllm.sq Lambda=0.3", {}), ("vllm.sq Lambda=0.3 blocks=2500", {"blocks": "2500"})):
        f = fast_vllm(sets, args.horizon, args.seed)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Speed of serQ's vLLM model (`serq oracle run`) at scale: issue 15 item 4.

Prints the CPU seconds of `run_scenario` (the scenario loaded and resolved first, timed apart) on
the speed scenarios of tools/vllm_oracle/gen_scenarios.py: Poisson arrivals over four shared
prefixes (4,096 blocks, budget 2,048, 128 sequences, seconds clock) and multi-turn chains of
`after` + `prompt_from` requests. The targets: linear in requests and chain length; 1,000
Poisson requests under 60 s, 2,000 under 120 s, a 50-turn chain under 10 s.

    PYTHONPATH=python taskset -c 0 python3 benchmarks/bench_oracle.py [--quick] [--engine fast]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tools" / "vllm_oracle"))

from gen_scenarios import chain_scenario, poisson_scenario  # noqa: E402
from serq_vllm.model import run_scenario  # noqa: E402
from serq_vllm.scenario import resolve_scenario  # noqa: E402

FULL = [("poisson", 50), ("poisson", 100), ("poisson", 200), ("poisson", 500), ("poisson", 1000),
        ("poisson", 2000), ("chain", 16), ("chain", 20), ("chain", 25), ("chain", 50),
        ("chain", 200), ("sessions", 100)]
QUICK = [("poisson", 50), ("poisson", 200), ("chain", 25), ("chain", 50), ("sessions", 20)]


def scenario(kind: str, n: int) -> dict:
    if kind == "poisson":
        return poisson_scenario(n)
    if kind == "chain":
        return chain_scenario(n)
    return chain_scenario(20, sessions=n)  # n conversations of 20 turns


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the small cases only (about a minute)")
    ap.add_argument("--engine", choices=("fast", "spec"), default="fast")
    args = ap.parse_args(argv)
    print(f"{'scenario':<22}{'requests':>9}{'steps':>8}{'load s':>9}{'model s':>10}{'s/request':>11}")
    for kind, n in (QUICK if args.quick else FULL):
        raw = scenario(kind, n)
        t = time.process_time()
        sc = resolve_scenario(raw)
        load = time.process_time() - t
        t = time.process_time()
        trace = run_scenario(sc, args.engine)
        cpu = time.process_time() - t
        nreq = len(sc.requests)
        print(f"{sc.name:<22}{nreq:>9}{len(trace['steps']):>8}{load:>9.3f}{cpu:>10.2f}"
              f"{cpu / nreq:>11.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

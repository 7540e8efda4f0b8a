#!/usr/bin/env python3
"""Robustness campaign: many random scenarios through the real vLLM scheduler (nothing committed).

    python3 tools/vllm_oracle/campaign.py --seed 1000 --count 500 [--keep DIR]

Generates the scenarios with gen_scenarios.py (seed, indices 1..count), runs them all in one
driver process, and reports how many produced a trace, how many crashed, stalled, left
requests unfinished or hit max_steps, plus feature counts (preemptions, preempt-only records,
prefix hits, EOS finishes, async, priority). Exit 1 if any scenario crashed.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "python"))

import gen_scenarios  # noqa: E402
from regen import MISSING_VENV, run_driver  # noqa: E402
from serq.oracle.compare import check_trace_shape  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--count", type=int, default=500)
    ap.add_argument("--keep", help="write scenarios and traces here instead of a temp dir")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="serq-campaign-") as tmp:
        d = Path(args.keep) if args.keep else Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        scenarios = []
        for k in range(1, args.count + 1):
            name = f"c{k:05d}"
            p = d / f"{name}.scenario.json"
            p.write_text(json.dumps(gen_scenarios.generate(args.seed, k, name), indent=1) + "\n")
            scenarios.append(p)
        t0 = time.time()
        rc = run_driver(scenarios, d)
        wall = time.time() - t0
        if rc == MISSING_VENV:
            return 2
        c: collections.Counter = collections.Counter()
        problems = []
        for p in scenarios:
            name = p.name[: -len(".scenario.json")]
            tp = d / f"{name}.trace.json"
            if not tp.exists():
                c["crashed"] += 1
                problems.append(f"{name}: crashed (no trace)")
                continue
            t = json.loads(tp.read_text())
            check_trace_shape(t)
            sc = json.loads(p.read_text())
            c["traces"] += 1
            c["steps"] += len(t["steps"])
            if t["stalled"]:
                c["stalled"] += 1
                problems.append(f"{name}: stalled")
            if t["unfinished"]:
                c["with_unfinished"] += 1
                problems.append(f"{name}: unfinished {t['unfinished']}")
            if t["steps"] and t["steps"][-1]["step"] + 1 >= sc.get("max_steps", 100000):
                c["hit_max_steps"] += 1
            if any(s["preempted"] for s in t["steps"]):
                c["with_preemption"] += 1
            if any(s["total_tokens"] == 0 for s in t["steps"]):
                c["with_preempt_only_record"] += 1
            if any((r["cached_tokens_at_admission"] or 0) > 0 for r in t["requests"].values()):
                c["with_prefix_hit"] += 1
            if any(r["finish_reason"] == "stop" for r in t["requests"].values()):
                c["with_eos_finish"] += 1
            cfg = t["config"]
            c["async"] += bool(cfg["async_scheduling"])
            c["priority"] += cfg["policy"] == "priority"
            c["reserve_off"] += cfg["scheduler_config_extra"].get("scheduler_reserve_full_isl") is False
        for line in problems[:50]:
            print(line)
        print(
            f"campaign seed {args.seed}: {args.count} scenarios in {wall:.1f} s; "
            + ", ".join(f"{k}={v}" for k, v in sorted(c.items()))
        )
        return 1 if c["crashed"] else 0


if __name__ == "__main__":
    sys.exit(main())

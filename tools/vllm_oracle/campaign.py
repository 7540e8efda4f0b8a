#!/usr/bin/env python3
"""Differential campaign: random scenarios through real vLLM and through serQ's model, side by side.

    python3 tools/vllm_oracle/campaign.py --seed 2000 --count 500 [--engines fast,spec]
                                          [--keep DIR] [--diverge-dir DIR] [--stop-first]
                                          [--json OUT] [--venv DIR]
    python3 tools/vllm_oracle/campaign.py --seed 1000 --count 3000 --engines none   # vLLM only

Generates scenarios with gen_scenarios.py (seed, indices start..start+count-1), runs them all
through the oracle driver in one vLLM process, then runs each one through serQ's model
(`serq_vllm.model.run_scenario`, the code behind `serq oracle run`) on every engine named in
--engines and compares the two traces with the oracle rule (docs/oracle.md §5). Each
(scenario, engine) ends in one of:

- ``agree``          the traces agree exactly;
- ``diverge``        they differ: the scenario, vLLM's trace, serQ's trace and a `diff.txt`
                     (first difference, both traces rendered around it) are kept in
                     `--diverge-dir/<name>/` (default `campaign-divergences/` in the current
                     directory), and the first divergent step is printed;
- ``refused:<feature>``  the model refuses the scenario (model.FEATURES);
- ``model-error``    the model failed (an engine error, a fixpoint that did not settle);
- ``vllm-crash``     the driver wrote no trace (the scenario is not run through the model).

It also reports the vLLM side's robustness counts (stalls, unfinished requests, max_steps) and
feature counts. `--json OUT` writes every (scenario, engine) outcome with its detail, so that
refusals and errors can be listed by name. Exit 1 on any divergence, model error or vLLM crash; 2 without the oracle venv.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "python"))

import gen_scenarios  # noqa: E402
from regen import MISSING_VENV, run_driver  # noqa: E402
from serq_vllm.compare import check_trace_shape, compare_traces, render_step  # noqa: E402
from serq_vllm.scenario import load_scenario  # noqa: E402


def vllm_features(t: dict, sc: dict, c: collections.Counter, problems: list, name: str) -> None:
    """Robustness and coverage counts of one vLLM trace."""
    c["steps"] += len(t["steps"])
    if t["stalled"]:
        c["stalled"] += 1
        problems.append(f"{name}: vLLM stalled")
    if t["unfinished"]:
        c["with_unfinished"] += 1
        problems.append(f"{name}: vLLM left {t['unfinished']} unfinished")
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


def model_outcome(scenario_path: Path, vllm_trace: dict, engine: str) -> tuple[str, str, dict | None]:
    """(status, detail, serQ trace or None) of one scenario on one engine of the model."""
    from serq_vllm.engine import ModelError
    from serq_vllm.model import run_scenario
    from serq_vllm.plan import Unsupported

    try:
        ours = run_scenario(load_scenario(scenario_path), engine)
    except Unsupported as exc:
        return f"refused:{exc.feature}", exc.detail, None
    except ModelError as exc:
        return "model-error", str(exc), None
    except Exception as exc:
        return "model-error", f"{type(exc).__name__}: {exc}", None
    diffs = compare_traces(ours, vllm_trace, limit=1)
    if diffs:
        return "diverge", diffs[0].describe("serQ", "vLLM"), ours
    return "agree", f"{len(vllm_trace['steps'])} steps", ours


def keep_divergence(out: Path, scenario_path: Path, vllm_trace: dict, ours: dict, engine: str,
                    context: int = 3) -> str:
    """Write scenario, both traces and the first difference with context; return the report."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(scenario_path, out / scenario_path.name)
    (out / "vllm.trace.json").write_text(json.dumps(vllm_trace, indent=1) + "\n")
    (out / f"serq-{engine}.trace.json").write_text(json.dumps(ours, indent=1) + "\n")
    first = compare_traces(ours, vllm_trace, limit=1)[0]
    lines = [f"first difference ({engine}): {first.describe('serQ', 'vLLM')}"]
    if first.step is not None:
        for label, t in (("serQ", ours), ("vLLM", vllm_trace)):
            lines.append(f"--- {label} around step {first.step}")
            lines += ["  " + render_step(s) for s in t["steps"]
                      if first.step - context <= s["step"] <= first.step + context]
    text = "\n".join(lines) + "\n"
    (out / f"diff-{engine}.txt").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--count", type=int, default=500)
    ap.add_argument("--start", type=int, default=1, help="first scenario index (default 1)")
    ap.add_argument("--engines", default="fast",
                    help="comma-separated model engines: fast, spec, auto; 'none' = vLLM only")
    ap.add_argument("--venv", metavar="DIR",
                    help="oracle venv to run (default $SERQ_VLLM_VENV, else tools/vllm_oracle/.venv)")
    ap.add_argument("--keep", help="write scenarios and vLLM traces here instead of a temp dir")
    ap.add_argument("--diverge-dir", default="campaign-divergences",
                    help="where each divergence's scenario and both traces are kept")
    ap.add_argument("--stop-first", action="store_true", help="stop at the first divergence")
    ap.add_argument("--json", metavar="OUT",
                    help="write every (scenario, engine) outcome with its detail as a JSON list")
    args = ap.parse_args(argv)
    engines = [] if args.engines == "none" else [e for e in args.engines.split(",") if e]
    for e in engines:
        if e not in ("fast", "spec", "auto"):
            ap.error(f"--engines: unknown engine {e!r} (fast, spec, auto or none)")

    with tempfile.TemporaryDirectory(prefix="serq-campaign-") as tmp:
        d = Path(args.keep) if args.keep else Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        scenarios = []
        for k in range(args.start, args.start + args.count):
            name = f"c{args.seed}_{k:05d}"
            p = d / f"{name}.scenario.json"
            p.write_text(json.dumps(gen_scenarios.generate(args.seed, k, name), indent=1) + "\n")
            scenarios.append(p)
        t0 = time.time()
        rc = run_driver(scenarios, d, venv=args.venv)
        vllm_wall = time.time() - t0
        if rc == MISSING_VENV:
            return 2
        c: collections.Counter = collections.Counter()
        outcome: dict[str, collections.Counter] = {e: collections.Counter() for e in engines}
        problems: list[str] = []
        rows: list[dict] = []
        t1 = time.time()
        stopped = False
        for p in scenarios:
            name = p.name[: -len(".scenario.json")]
            tp = d / f"{name}.trace.json"
            if not tp.exists():
                c["vllm_crash"] += 1
                problems.append(f"{name}: vLLM crashed (no trace)")
                continue
            t = json.loads(tp.read_text())
            check_trace_shape(t)
            c["traces"] += 1
            vllm_features(t, json.loads(p.read_text()), c, problems, name)
            for e in engines:
                status, detail, ours = model_outcome(p, t, e)
                outcome[e][status] += 1
                rows.append({"name": name, "engine": e, "status": status, "detail": detail})
                if status == "diverge":
                    report = keep_divergence(Path(args.diverge_dir) / name, p, t, ours, e)
                    print(f"DIVERGE {name} [{e}] (kept in {Path(args.diverge_dir) / name})\n"
                          + report, flush=True)
                    if args.stop_first:
                        stopped = True
                elif status == "model-error":
                    print(f"MODEL-ERROR {name} [{e}]: {detail}", flush=True)
            if stopped:
                break
        model_wall = time.time() - t1
        for line in problems[:50]:
            print(line)
        print(f"campaign seed {args.seed}: {args.count} scenarios; vLLM {vllm_wall:.1f} s, "
              f"model {model_wall:.1f} s" + (" (stopped at the first divergence)" if stopped else ""))
        print("vLLM: " + ", ".join(f"{k}={v}" for k, v in sorted(c.items())))
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
        bad = c["vllm_crash"]
        for e in engines:
            o = outcome[e]
            print(f"model [{e}]: " + ", ".join(f"{k}={v}" for k, v in sorted(o.items())))
            bad += o["diverge"] + o["model-error"]
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

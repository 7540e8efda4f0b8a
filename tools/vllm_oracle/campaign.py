#!/usr/bin/env python3
"""Differential campaign: random scenarios through real vLLM and through serQ's model, side by side.

    python3 tools/vllm_oracle/campaign.py --seed 2000 --count 500 [--engines fast,spec]
                                          [--keep DIR] [--diverge-dir DIR] [--stop-first]
                                          [--json OUT] [--venv DIR]
    python3 tools/vllm_oracle/campaign.py --seed 1000 --count 3000 --engines none   # vLLM only
    python3 tools/vllm_oracle/campaign.py --from-kept DIR --engines fast,spec       # model only

Generates scenarios with gen_scenarios.py (seed, indices start..start+count-1), runs them all
through the oracle driver in one vLLM process, then runs each one through serQ's model
(`serq_vllm.model.run_scenario`, the code behind `serq oracle run`) on every engine named in
--engines and compares the two traces with the oracle rule (docs/oracle.md §5). Each
(scenario, engine) ends in one of:

- ``agree``          the traces agree exactly;
- ``diverge``        they differ: the scenario, vLLM's trace, serQ's trace and a `diff-<engine>.txt`
                     (first difference, both traces rendered around it) are kept in
                     `--diverge-dir/<name>/` (default `campaign-divergences/` in the current
                     directory), and the first divergent step is printed;
- ``refused:<feature>``  the model refuses the scenario (model.FEATURES);
- ``model-error``    the model failed (an engine error, a fixpoint that did not settle); the
                     scenario, vLLM's trace and the error are kept in `--diverge-dir/<name>/`;
- ``vllm-crash``     the driver wrote no trace (the scenario is not run through the model).

`--from-kept DIR` skips generation and vLLM: it compares every `<name>.scenario.json` an earlier
`--keep DIR` left with its `<name>.trace.json` (or `.trace.json.gz`), so the model side of a
campaign can be re-run on newer model code without the oracle venv.

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
from serq_vllm.compare import compare_traces, load_trace, render_step, vector_trace_path  # noqa: E402
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


def keep_model_error(out: Path, scenario_path: Path, vllm_trace: dict, engine: str, detail: str) -> None:
    """Write the scenario, vLLM's trace and the model's error, to re-run it alone."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(scenario_path, out / scenario_path.name)
    (out / "vllm.trace.json").write_text(json.dumps(vllm_trace, indent=1) + "\n")
    (out / f"error-{engine}.txt").write_text(detail + "\n")


def generate_scenarios(seed: int, start: int, count: int, d: Path) -> list[Path]:
    """Write scenarios start..start+count-1 of `seed` into `d` as `c<seed>_<k>.scenario.json`."""
    scenarios = []
    for k in range(start, start + count):
        name = f"c{seed}_{k:05d}"
        p = d / f"{name}.scenario.json"
        p.write_text(json.dumps(gen_scenarios.generate(seed, k, name), indent=1) + "\n")
        scenarios.append(p)
    return scenarios


def compare_all(scenarios: list[Path], d: Path, engines: list[str], diverge_dir: Path,
                stop_first: bool) -> tuple[collections.Counter, dict, list[str], list[dict], bool]:
    """Each scenario's vLLM trace in `d` (plain or gzipped) against the model on every engine:
    (vLLM counts, outcome counts per engine, problems, rows, stopped at the first divergence)."""
    c: collections.Counter = collections.Counter()
    outcome: dict[str, collections.Counter] = {e: collections.Counter() for e in engines}
    problems: list[str] = []
    rows: list[dict] = []
    for p in scenarios:
        name = p.name[: -len(".scenario.json")]
        tp = vector_trace_path(d, name)
        if not tp.exists():
            c["vllm_crash"] += 1
            problems.append(f"{name}: vLLM crashed (no trace)")
            rows += [{"name": name, "engine": e, "status": "vllm-crash", "detail": "no trace"}
                     for e in engines]
            continue
        t = load_trace(tp)
        c["traces"] += 1
        vllm_features(t, json.loads(p.read_text()), c, problems, name)
        for e in engines:
            status, detail, ours = model_outcome(p, t, e)
            outcome[e][status] += 1
            rows.append({"name": name, "engine": e, "status": status, "detail": detail})
            if status == "diverge":
                report = keep_divergence(diverge_dir / name, p, t, ours, e)
                print(f"DIVERGE {name} [{e}] (kept in {diverge_dir / name})\n" + report,
                      flush=True)
                if stop_first:
                    return c, outcome, problems, rows, True
            elif status == "model-error":
                keep_model_error(diverge_dir / name, p, t, e, detail)
                print(f"MODEL-ERROR {name} [{e}] (kept in {diverge_dir / name}): {detail}",
                      flush=True)
    return c, outcome, problems, rows, False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, help="generator seed (default 1000)")
    ap.add_argument("--count", type=int, help="how many scenarios (default 500)")
    ap.add_argument("--start", type=int, help="first scenario index (default 1)")
    ap.add_argument("--engines", default="fast",
                    help="comma-separated model engines: fast, spec, auto; 'none' = vLLM only")
    ap.add_argument("--venv", metavar="DIR",
                    help="oracle venv to run (default $SERQ_VLLM_VENV, else tools/vllm_oracle/.venv)")
    ap.add_argument("--keep", help="write scenarios and vLLM traces here instead of a temp dir")
    ap.add_argument("--from-kept", metavar="DIR",
                    help="compare the scenarios and vLLM traces an earlier --keep DIR holds; "
                    "vLLM is not run (a scenario without a trace counts as a vLLM crash)")
    ap.add_argument("--diverge-dir", default="campaign-divergences",
                    help="where each divergence's (or model error's) scenario and traces are kept")
    ap.add_argument("--stop-first", action="store_true", help="stop at the first divergence")
    ap.add_argument("--json", metavar="OUT",
                    help="write every (scenario, engine) outcome with its detail as a JSON list")
    args = ap.parse_args(argv)
    engines = [] if args.engines == "none" else [e for e in args.engines.split(",") if e]
    for e in engines:
        if e not in ("fast", "spec", "auto"):
            ap.error(f"--engines: unknown engine {e!r} (fast, spec, auto or none)")
    if args.from_kept:
        given = [o for o, v in (("--seed", args.seed), ("--count", args.count),
                                ("--start", args.start), ("--keep", args.keep)) if v is not None]
        if given:
            ap.error(f"--from-kept reads its scenarios from DIR: {', '.join(given)} cannot go with it")
        if not engines:
            ap.error("--from-kept with --engines none has nothing to do")

    with tempfile.TemporaryDirectory(prefix="serq-campaign-") as tmp:
        if args.from_kept:
            d = Path(args.from_kept)
            scenarios = sorted(d.glob("*.scenario.json")) if d.is_dir() else []
            if not scenarios:
                ap.error(f"--from-kept {d}: no <name>.scenario.json files there")
            title, vllm_time = f"campaign kept in {d}", "vLLM not run"
        else:
            seed = 1000 if args.seed is None else args.seed
            d = Path(args.keep) if args.keep else Path(tmp)
            d.mkdir(parents=True, exist_ok=True)
            scenarios = generate_scenarios(seed, 1 if args.start is None else args.start,
                                           500 if args.count is None else args.count, d)
            t0 = time.time()
            rc = run_driver(scenarios, d, venv=args.venv)
            if rc == MISSING_VENV:
                return 2
            title, vllm_time = f"campaign seed {seed}", f"vLLM {time.time() - t0:.1f} s"
        t1 = time.time()
        c, outcome, problems, rows, stopped = compare_all(scenarios, d, engines,
                                                          Path(args.diverge_dir), args.stop_first)
        model_wall = time.time() - t1
        for line in problems[:50]:
            print(line)
        print(f"{title}: {len(scenarios)} scenarios; {vllm_time}, model {model_wall:.1f} s"
              + (" (stopped at the first divergence)" if stopped else ""))
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

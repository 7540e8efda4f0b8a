#!/usr/bin/env python3
"""Measure the real engine and regenerate docs/validation.md from the measurements.

    python3 tools/vllm_testbed/validate.py measure [--venv DIR] [--model DIR] [--out vectors/testbed]
    python3 tools/vllm_testbed/validate.py report  [--data vectors/testbed] [-o docs/validation.md] [--check]

`measure` needs the testbed (tools/vllm_testbed/setup.sh); it writes, for every workload below, the
workload file and what the engine did into --out (the committed copy is vectors/testbed/):

* calibration, on the step clock (deterministic schedules, compared step by step with serQ's
  model by `serq oracle agreement vectors/testbed`): NAME.scenario.json, NAME.trace.json.gz and
  NAME.steps.csv, whose measured step durations `serq fit` fits;
* validation, on the wall clock, at loads from light to past saturation, each replayed --reps
  times: NAME.scenario.json and NAME-rK.requests.csv / NAME-rK.steps.csv.

`report` needs no vLLM: it fits the calibration steps, predicts every validation run with the
replay program on that fit, and writes docs/validation.md (with --check: exit 1 if the file
differs from what the data gives, which is how the tests keep the document honest).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(HERE))

import workload as wl  # noqa: E402

#: (name, trace generator options, scenario options) of the calibration workloads (step clock)
CALIBRATION = [
    ("cal_light", dict(seed=11, sessions=12),
     dict(spacing_steps=25, blocks=512, max_num_seqs=16, max_num_batched_tokens=256, max_model_len=4096)),
    ("cal_tight", dict(seed=12, sessions=10, turns=(3, 5)),
     dict(spacing_steps=8, blocks=96, max_num_seqs=8, max_num_batched_tokens=256, max_model_len=1760)),
    ("cal_capped", dict(seed=13, sessions=10, first=(300, 900)),
     dict(spacing_steps=10, blocks=100, max_num_seqs=4, max_num_batched_tokens=192, max_model_len=3168,
          long_prefill_token_threshold=96)),
    # long answers in a KV pool too small for all of them: preemptions, and hits between them
    ("cal_preempt", dict(seed=15, sessions=12, turns=(3, 5), out=(32, 128), think=(0.2, 1.0)),
     dict(spacing_steps=3, step_s=0.05, blocks=160, max_num_seqs=12, max_num_batched_tokens=256,
          max_model_len=4096)),
    # long prompts, short answers: the prefill-only and mixed steps the others have few of
    ("cal_prefill", dict(seed=14, sessions=40, turns=(2, 3), first=(400, 1500), new=(100, 600), out=(2, 8),
                         think=(0.1, 0.5)),
     dict(spacing_steps=6, step_s=0.05, blocks=512, max_num_seqs=8, max_num_batched_tokens=512,
          max_model_len=8192)),
    # many sessions at once: full batches (up to max_num_seqs decoders), as the validation's
    # shortest spacings run them; without it the per-decoder term is extrapolated there
    ("cal_busy", dict(seed=17, sessions=24, turns=(2, 4), out=(32, 128), think=(0.2, 1.0)),
     dict(spacing_steps=2, step_s=0.02, blocks=512, max_num_seqs=16, max_num_batched_tokens=256,
          max_model_len=4096)),
    # one or two long prompts at a time, answers of one or two tokens: prefill-only steps, chunked
    ("cal_prompts", dict(seed=16, sessions=40, turns=(1, 3), first=(300, 2000), new=(100, 800), out=(1, 2),
                         think=(0.1, 0.3)),
     dict(spacing_steps=8, step_s=0.05, blocks=512, max_num_seqs=4, max_num_batched_tokens=512,
          max_model_len=8192)),
]
#: the validation trace and the session spacings (s) that set the load, light to past saturation
VALIDATION_TRACE = dict(seed=21, sessions=24)
VALIDATION_CONFIG = dict(blocks=512, max_num_seqs=16, max_num_batched_tokens=256, max_model_len=4096)
VALIDATION_SPACINGS = (4.0, 2.0, 1.2, 0.6, 0.3, 0.15)
#: passes of each calibration workload on one engine: the schedule is the same in every pass
#: (checked), and a step's duration is the mean over the passes. Step times on this machine drift
#: slowly (residuals of neighbouring steps correlate; those of one step in two passes do not), so
#: one pass alone measures the machine's drift as much as the step's cost (docs/validation.md §3).
CALIBRATION_REPS = 3
GEN_DEFAULTS = dict(turns=(2, 5), first=(96, 480), new=(16, 160), out=(8, 64), think=(0.2, 2.0))


def trace_rows(opts: dict) -> list:
    o = {**GEN_DEFAULTS, **opts}
    return wl.generate(o["seed"], o["sessions"], o["turns"], o["first"], o["new"], o["out"], o["think"])


def make_scenario(name: str, rows: list, clock: str, opts: dict) -> dict:
    config = {"block_size": 32, "num_gpu_blocks": opts["blocks"], "max_num_seqs": opts["max_num_seqs"],
              "max_num_batched_tokens": opts["max_num_batched_tokens"], "max_model_len": opts["max_model_len"]}
    if opts.get("long_prefill_token_threshold"):
        config["long_prefill_token_threshold"] = opts["long_prefill_token_threshold"]
    return wl.scenario(rows, name=name, clock=clock, config=config, spacing=opts.get("spacing", 1.0),
                       spacing_steps=opts.get("spacing_steps", 20), step_s=opts.get("step_s", 0.02))


def workloads() -> list[tuple[str, dict, int]]:
    """Every workload: (name, scenario, reps)."""
    out = [(name, make_scenario(name, trace_rows(g), "step", s), CALIBRATION_REPS) for name, g, s in CALIBRATION]
    rows = trace_rows(VALIDATION_TRACE)
    for sp in VALIDATION_SPACINGS:
        name = f"val_s{sp:g}"
        out.append((name, make_scenario(name, rows, "wall", {**VALIDATION_CONFIG, "spacing": sp}), 2))
    return out


def _schedule(trace: dict) -> dict:
    """A step-clock trace without what the clock measured: what must be equal in every pass."""
    t = json.loads(json.dumps(trace))
    for st in t["steps"]:
        st.pop("time", None)
        st.pop("measured", None)
    for r in t["requests"].values():
        r.pop("arrival_time", None)
    t.pop("timing", None)
    return t


def combine_passes(tmp: Path, name: str, reps: int) -> tuple[dict, str]:
    """The passes NAME-r1 … NAME-rR of a step-clock workload as one trace and one steps CSV.

    Every pass must have scheduled the same steps (else the engine is not deterministic here and
    the passes measure different things: refused). A step's ``wall_s`` and ``cpu_s`` become the
    mean over the passes; each pass's value is kept as ``wall_s_K`` / ``cpu_s_K``; the other
    columns (features, the driver's gaps) are the first pass's."""
    import csv
    import io

    traces = [json.loads((tmp / f"{name}-r{k}.trace.json").read_text()) for k in range(1, reps + 1)]
    first = _schedule(traces[0])
    for k, t in enumerate(traces[1:], start=2):
        if _schedule(t) != first:
            raise SystemExit(f"validate.py: {name}: pass {k} scheduled differently from pass 1 "
                             "(the step-clock schedule is not deterministic here)")
    tables = []
    for k in range(1, reps + 1):
        with open(tmp / f"{name}-r{k}.steps.csv", newline="") as f:
            tables.append(list(csv.DictReader(f)))
    header = list(tables[0][0].keys())
    extra = [f"{m}_{k}" for m in ("wall_s", "cpu_s") for k in range(1, reps + 1)]
    rows = []
    for i, row in enumerate(tables[0]):
        out = dict(row)
        for m in ("wall_s", "cpu_s"):
            vals = [float(t[i][m]) for t in tables]
            out[m] = f"{sum(vals) / reps:.9g}"
            for k, v in enumerate(vals, start=1):
                out[f"{m}_{k}"] = f"{v:.9g}"
        rows.append(out)
    trace = traces[0]
    for st, row in zip(trace["steps"], rows):
        st["measured"] = {"wall_s": round(float(row["wall_s"]), 6), "cpu_s": round(float(row["cpu_s"]), 6),
                          "passes": reps}
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=header + extra, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return trace, buf.getvalue()


def run_summary(steps_csv: Path) -> dict:
    """A wall-clock run in numbers: steps, busy time, makespan, utilisation, steps per kind."""
    import csv

    with open(steps_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    busy = sum(float(r["wall_s"]) for r in rows)
    span = float(rows[-1]["start_s"]) + float(rows[-1]["wall_s"]) if rows else 0.0
    kinds: dict[str, int] = {}
    for r in rows:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    return {"steps": len(rows), "busy_s": round(busy, 6), "makespan_s": round(span, 6),
            "utilisation": round(busy / span, 6) if span else None, "steps_by_kind": kinds,
            "preemptions": sum(int(r["preempted"]) for r in rows)}


def measure(a: argparse.Namespace) -> int:
    py = Path(a.venv) / "bin" / "python"
    if not py.is_file():
        print(f"validate.py: error: no testbed venv at {a.venv} (run tools/vllm_testbed/setup.sh)", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = {"cpus": os.cpu_count(), "engine_cpu": a.cpu, "platform": platform.platform(), "python": platform.python_version(),
               "affinity": sorted(os.sched_getaffinity(0)), "runs": []}
    only = set(a.only.split(",")) if a.only else None
    for name, sc, reps in workloads():
        if only and name not in only:
            continue
        wfile = out / f"{name}.scenario.json"
        wl.write_atomic(str(wfile), json.dumps(sc, indent=1) + "\n")
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [str(py), str(HERE / "driver.py"), str(wfile), "--model", a.model, "--out-dir", tmp,
                   "--reps", str(reps)]
            load_before = os.getloadavg()
            t0 = time.time()
            print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
            pin = (lambda: os.sched_setaffinity(0, {a.cpu})) if a.cpu is not None else None
            proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=pin)
            if proc.returncode != 0:
                print(proc.stderr[-4000:], file=sys.stderr)
                return 1
            machine["runs"].append({"name": name, "seconds": round(time.time() - t0, 1),
                                    "loadavg_before": [round(x, 2) for x in load_before],
                                    "loadavg_after": [round(x, 2) for x in os.getloadavg()]})
            if sc["_clock"] == "step":
                # deterministic: worth comparing step by step, so the trace is kept
                trace, steps = combine_passes(Path(tmp), name, reps)
                data = gzip.compress((json.dumps(trace, indent=1) + "\n").encode(), mtime=0)
                from serq.outputfile import atomic_write

                with atomic_write(str(out / f"{name}.trace.json.gz"), "wb") as fh:
                    fh.write(data)
                wl.write_atomic(str(out / f"{name}.steps.csv"), steps)
                continue
            for f in sorted(Path(tmp).iterdir()):
                if f.name.endswith(".trace.json"):
                    continue
                elif f.name.endswith(".steps.csv"):
                    # a wall-clock run's steps are kept as their summary (megabytes otherwise)
                    summary = run_summary(f)
                    wl.write_atomic(str(out / f.name.replace(".steps.csv", ".summary.json")),
                                    json.dumps(summary, indent=1) + "\n")
                else:
                    shutil.copyfile(f, out / f.name)
    old = out / "machine.json"
    if only and old.is_file():       # a partial run keeps the other runs' records
        kept = [r for r in json.loads(old.read_text()).get("runs", []) if r["name"] not in only]
        order = [name for name, _, _ in workloads()]
        machine["runs"] = sorted(kept + machine["runs"], key=lambda r: order.index(r["name"])
                                 if r["name"] in order else len(order))
    wl.write_atomic(str(old), json.dumps(machine, indent=1) + "\n")
    from report import make_profile

    make_profile(out)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="run every workload on the real engine (needs the testbed)")
    m.add_argument("--venv", default=str(HERE / ".venv"))
    m.add_argument("--model", default=str(HERE / ".model"))
    m.add_argument("--out", default=str(REPO / "vectors" / "testbed"))
    m.add_argument("--only", default=None, help="comma-separated workload names")
    m.add_argument("--cpu", type=int, default=None,
                   help="pin the engine to this core (keep other work off it for steady timings)")
    r = sub.add_parser("report", help="fit, predict and write docs/validation.md (no vLLM needed)")
    r.add_argument("--data", default=str(REPO / "vectors" / "testbed"))
    r.add_argument("-o", "--output", default=str(REPO / "docs" / "validation.md"))
    r.add_argument("--check", action="store_true", help="exit 1 if the output file is not up to date")
    a = p.parse_args(argv)
    if a.cmd == "measure":
        return measure(a)
    from report import write_report  # the report needs serq (numpy, lark), not vLLM

    return write_report(Path(a.data), Path(a.output), check=a.check)


if __name__ == "__main__":
    sys.exit(main())

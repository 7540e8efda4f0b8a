"""Run a dialect-P program under pyserq 0.1.6 (the original serQ, our peer) and read its report in
OUR report's vocabulary (the JSON of `serq run --json`: run / client / observe / stages / pools).

As a library:

    from pyserq_peer import run_peer, run_ours, PROGRAMS
    peer = run_peer("vllm", sets={"blocks": 2500}, seed=3, horizon=20000)   # warm-up: 10 % as ours
    ours = run_ours("vllm", sets={"blocks": 2500}, seed=3, horizon=20000)
    peer["client"]["ttft"]["mean"], ours["client"]["ttft"]["mean"], peer["cpu"]["run"]

As a script:

    python benchmarks/peer/pyserq_peer.py vllm --set blocks=2500 --seed 3 --horizon 2000
    python benchmarks/peer/pyserq_peer.py vllm --compare --horizon 2000      # ours | pyserq
    python benchmarks/peer/pyserq_peer.py vllm --agree 1,2,3,4 --horizon 20000 --set blocks=2500
    python benchmarks/peer/pyserq_peer.py --deployment D.sq --workload W.sq --json

PROGRAM is a name of PROGRAMS (our S program and its P translation, benchmarks/peer/README.md) or
an explicit --deployment/--workload pair. Both sides get the same inputs, seed, horizon and
warm-up; their random streams differ, so only statistics are comparable, never single samples.

Vocabulary mapping (P -> ours): the run fields and client metrics have the same names; the engine's
automatic records `E.prefill` become `prefill_tokens` and `E.reused` (tokens) also gives `hit`
(the fraction of admissions with a positive hit, what our seed program observes); `p50` (which P
does not report) is computed from the samples with our rank rule ceil(q*n); `cpu` holds
time.process_time() seconds of the compile and of the run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

# name -> (our S program, P deployment, P workload)
PROGRAMS = {
    "vllm": (REPO / "examples/multi-turn/vllm.sq", HERE / "vllm_p.sq", HERE / "vllm_p_workload.sq"),
    "mm1": (REPO / "examples/single-turn/mm1.sq", HERE / "mm1_p.sq", HERE / "mm1_p_workload.sq"),
    # Diagnostic (README, "blocks=2500"): sessions end once their conversation reaches 30000 tokens.
    "vllm_capped": (HERE / "diagnostics/vllm_capped.sq", HERE / "vllm_p.sq",
                    HERE / "diagnostics/vllm_capped_p_workload.sq"),
}

DEFAULT_HORIZON = 600.0  # as `serq run`
DEFAULT_WARMUP_FRACTION = 0.1  # as `serq run` (pyserq's own default is 0: we always pass it)
PYSERQ_VERSION = "0.1.6"

# The 95 % batch-means half-width of docs/language.md §11.9 (shared by both implementations).
_BATCHES = 20
_T19 = 2.093


def pyserq_module():
    """The pyserq module, or None when it is not installed (pip install 'serq[bench]')."""
    try:
        import pyserq
    except ImportError:
        return None
    return pyserq


def available() -> bool:
    return pyserq_module() is not None


def why_unavailable() -> str | None:
    mod = pyserq_module()
    if mod is None:
        return f"pyserq is not installed (pip install pyserq=={PYSERQ_VERSION}, the `bench` extra)"
    if getattr(mod, "__version__", None) != PYSERQ_VERSION:
        return f"pyserq {getattr(mod, '__version__', '?')} is installed, the peer is {PYSERQ_VERSION}"
    return None


def _warmup(horizon: float, warmup: float | None) -> float:
    return DEFAULT_WARMUP_FRACTION * horizon if warmup is None else float(warmup)


def _finite(x):
    if x is None:
        return None
    x = float(x) if not isinstance(x, int) else x
    return x if not isinstance(x, float) or math.isfinite(x) else None


def _rank_value(sorted_xs: list, q: float):
    n = len(sorted_xs)
    if n == 0:
        return None
    k = min(max(math.ceil(q * n), 1), n)
    return sorted_xs[k - 1]


def batch_means_ci(xs: list) -> float | None:
    """95 % half-width from 20 consecutive batches of floor(n/20) (tail dropped); None below 40."""
    n = len(xs)
    if n < 2 * _BATCHES:
        return None
    m = n // _BATCHES
    means = [sum(xs[i * m:(i + 1) * m]) / m for i in range(_BATCHES)]
    g = sum(means) / _BATCHES
    s2 = sum((b - g) ** 2 for b in means) / (_BATCHES - 1)
    return _T19 * math.sqrt(s2 / _BATCHES)


def summarize(xs: list) -> dict:
    """count / mean / ci / cv2 / p50 / p99 of samples in recording order, by our report's rules."""
    n = len(xs)
    if n == 0:
        return {"count": 0, "mean": None, "ci": None, "cv2": None, "p50": None, "p99": None}
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / (n - 1) if n > 1 else None
    s = sorted(xs)
    return {"count": n, "mean": mean, "ci": batch_means_ci(xs),
            "cv2": (var / mean ** 2) if (var is not None and mean != 0) else None,
            "p50": _rank_value(s, 0.5), "p99": _rank_value(s, 0.99)}


def _observe_entry(o, with_cv2: bool) -> dict:
    """One pyserq Observe in our vocabulary: its own statistics, plus p50 from its samples."""
    xs = o.samples
    d = {"count": o.count, "mean": _finite(o.mean), "ci": _finite(o.ci)}
    if with_cv2:
        d["cv2"] = _finite(o.cv2)
    d["p50"] = _rank_value(sorted(xs), 0.5)
    d["p99"] = _finite(o.p99)
    return d


def _paths(program) -> tuple[Path, Path]:
    if isinstance(program, str):
        if program not in PROGRAMS:
            raise ValueError(f"unknown program {program!r}; known: {', '.join(PROGRAMS)}")
        return PROGRAMS[program][1], PROGRAMS[program][2]
    deployment, workload = program
    return Path(deployment), Path(workload)


def run_peer(program, sets: dict | None = None, seed: int = 1, horizon: float = DEFAULT_HORIZON,
             warmup: float | None = None) -> dict:
    """Run PROGRAM (a PROGRAMS name or a (deployment, workload) pair) under pyserq; our vocabulary."""
    pyserq = pyserq_module()
    if pyserq is None:
        raise RuntimeError(why_unavailable())
    deployment, workload = _paths(program)
    warm = _warmup(horizon, warmup)
    sets = {k: float(v) if not isinstance(v, str) else v for k, v in (sets or {}).items()}
    c0 = time.process_time()
    prog = pyserq.compile(str(deployment), workload=str(workload), sets=sets, seed=int(seed),
                          horizon=float(horizon), warmup=warm)
    c1 = time.process_time()
    rep = pyserq.run(prog)
    c2 = time.process_time()
    raw = json.loads(rep.json())
    out = {
        "run": {k: raw[k] for k in ("horizon", "end", "warmup", "seed", "events", "arrivals",
                                    "turns", "ended", "mean_live")},
        "client": {k: _observe_entry(rep.client[k], with_cv2=False) for k in ("ttft", "tpot", "response")},
        "observe": {},
        "stages": [{k: v for k, v in s.items() if k != "index"} for s in raw["stages"]],
        "pools": [{k: v for k, v in p.items() if k != "index"} for p in raw["pools"]],
        "gauges": raw.get("gauges", {}),
        "cpu": {"compile": c1 - c0, "run": c2 - c1, "total": c2 - c0},
        "implementation": f"pyserq {pyserq.__version__}",
    }
    for name in rep.observes:
        o = rep.observe(name)
        engine, _, what = name.rpartition(".")
        if engine and what == "prefill":
            out["observe"]["prefill_tokens"] = _observe_entry(o, with_cv2=True)
        elif engine and what == "reused":
            xs = o.samples
            out["observe"]["hit"] = summarize([1.0 if x > 0 else 0.0 for x in xs])
            out["observe"][name] = _observe_entry(o, with_cv2=True)
        else:
            out["observe"][name] = _observe_entry(o, with_cv2=True)
    return out


def _our_path(program) -> Path:
    if isinstance(program, str):
        if program not in PROGRAMS:
            raise ValueError(f"unknown program {program!r}; known: {', '.join(PROGRAMS)}")
        return PROGRAMS[program][0]
    return Path(program)


def run_ours(program, sets: dict | None = None, seed: int = 1, horizon: float = DEFAULT_HORIZON,
             warmup: float | None = None) -> dict:
    """`serq run PROGRAM --json` in process (serq.cli.main), with its CPU seconds under "cpu".

    PROGRAM is a PROGRAMS name or the path of one of our .sq programs. "cpu" has "total"
    (compile + run, what `serq run` costs) and "compile" (the same settings through `serq ir`),
    whose difference estimates the run alone."""
    from serq import cli

    path = str(_our_path(program))
    setargs = []
    for k, v in (sets or {}).items():
        setargs += ["--set", f"{k}={v}"]
    argv = ["run", path, "--json", "--seed", str(int(seed)), "--horizon", repr(float(horizon)),
            "--warmup", repr(_warmup(horizon, warmup))] + setargs
    buf, err = io.StringIO(), io.StringIO()
    c0 = time.process_time()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    c1 = time.process_time()
    if rc != 0:
        raise RuntimeError(f"serq {' '.join(argv)} exited {rc}: {err.getvalue().strip()}")
    rep = json.loads(buf.getvalue())
    sink = io.StringIO()
    c2 = time.process_time()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        cli.main(["ir", path] + setargs)
    c3 = time.process_time()
    compile_s = c3 - c2
    total = c1 - c0
    rep["cpu"] = {"compile": compile_s, "run": max(total - compile_s, 0.0), "total": total}
    rep["implementation"] = "serq (serq_fast)"
    return rep


def compare(program: str, sets: dict | None = None, seed: int = 1, horizon: float = DEFAULT_HORIZON,
            warmup: float | None = None) -> tuple[dict, dict]:
    """(ours, peer) for the same inputs, seed, horizon and warm-up."""
    ours = run_ours(program, sets, seed, horizon, warmup)
    peer = run_peer(program, sets, seed, horizon, warmup)
    return ours, peer


def _kv(rep: dict) -> dict:
    return next((p for p in rep["pools"] if p["name"] == "kv"), {})


def agreement(program: str, sets: dict | None, seeds: list, horizon: float,
              warmup: float | None = None, metrics=("ttft", "response"), log=None) -> dict:
    """Both sides over SEEDS: per-seed rows, and per metric the seed-averaged means, their
    half-widths (per-seed batch-means half-widths combined as independent errors) and
    ours/pyserq - 1."""
    rows = []
    for seed in seeds:
        for side, fn in (("ours", run_ours), ("pyserq", run_peer)):
            r = fn(program, sets, seed, horizon, warmup)
            kv = _kv(r)
            row = {"side": side, "seed": seed,
                   **{m: r["client"][m]["mean"] for m in metrics},
                   **{m + "_ci": r["client"][m]["ci"] for m in metrics},
                   "prefill": r["observe"].get("prefill_tokens", {}).get("mean"),
                   "hit": r["observe"].get("hit", {}).get("mean"),
                   "turns": r["run"]["turns"], "mean_live": r["run"]["mean_live"],
                   "preemptions": kv.get("preemptions"), "rejected": kv.get("rejected"),
                   "cpu": r["cpu"]["total"]}
            rows.append(row)
            if log:
                log(format_agreement_row(row))
    summary = {}
    for m in metrics:
        out = {}
        for side in ("ours", "pyserq"):
            rs = [r for r in rows if r["side"] == side]
            # A run with no sample after warm-up (mean None) makes the average NaN: it is not skipped.
            mean = sum(r[m] if r[m] is not None else math.nan for r in rs) / len(rs)
            hw = math.sqrt(sum((r[m + "_ci"] if r[m + "_ci"] is not None else math.inf) ** 2 for r in rs)) / len(rs)
            out[side] = {"mean": mean, "ci": hw}
        out["rel"] = out["ours"]["mean"] / out["pyserq"]["mean"] - 1.0
        out["rel_ci"] = math.hypot(out["ours"]["ci"], out["pyserq"]["ci"]) / out["pyserq"]["mean"]
        summary[m] = out
    # A side whose live sessions pile up (engine idle with work waiting) no longer serves the same
    # workload: name it, so a disagreement is not mistaken for noise.
    notes = []
    for seed in seeds:
        a = next(r for r in rows if r["seed"] == seed and r["side"] == "ours")
        b = next(r for r in rows if r["seed"] == seed and r["side"] == "pyserq")
        la, lb = a["mean_live"] or 0.0, b["mean_live"] or 0.0
        if la > 3 * lb or lb > 3 * la:
            notes.append(f"seed {seed}: mean live sessions ours {la:.1f} vs pyserq {lb:.1f}, turns {a['turns']} vs "
                         f"{b['turns']}: one side stopped serving (benchmarks/peer/README.md, 'blocks=2500')")
    return {"program": program, "sets": sets or {}, "seeds": list(seeds), "horizon": horizon,
            "warmup": _warmup(horizon, warmup), "rows": rows, "summary": summary, "notes": notes}


def format_agreement_row(r: dict) -> str:
    def ci(x):
        return "inf" if x is None else f"{x:.5f}"

    def m(x):
        return "-" if x is None else f"{x:.5f}"
    return (f"seed {r['seed']:>3} {r['side']:<7} ttft {m(r['ttft'])} ±{ci(r['ttft_ci'])}  "
            f"response {m(r['response'])} ±{ci(r['response_ci'])}  prefill {_fmt(r['prefill'])}  "
            f"hit {_fmt(r['hit'])}  turns {r['turns']}  live {r['mean_live']:.2f}  "
            f"preempt {r['preemptions']}  rejected {r['rejected']}  cpu {r['cpu']:.1f}s")


def format_agreement(a: dict, rows: bool = True) -> str:
    lines = [f"{a['program']}  sets {a['sets'] or '{}'}  horizon {a['horizon']:g}  warmup {a['warmup']:g}  "
             f"seeds {','.join(map(str, a['seeds']))}"]
    if rows:
        lines += [format_agreement_row(r) for r in a["rows"]]
    for m, s in a["summary"].items():
        lines.append(f"mean {m}: ours {s['ours']['mean']:.5f} ±{s['ours']['ci']:.5f}  pyserq "
                     f"{s['pyserq']['mean']:.5f} ±{s['pyserq']['ci']:.5f}  ours/pyserq - 1 = {s['rel']:+.2%} "
                     f"(±{s['rel_ci']:.2%})")
    lines += ["NOTE " + n for n in a.get("notes", [])]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Printing


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-3):
        return f"{x:.4g}"
    return f"{x:.4f}"


def _stat(d: dict | None) -> str:
    if not d or d.get("mean") is None:
        return "-"
    ci = d.get("ci")
    return f"{_fmt(d['mean'])} ±{'inf' if ci is None else _fmt(ci)}"


def _rows(rep: dict) -> dict:
    rows = {}
    for k in ("events", "arrivals", "turns", "ended", "mean_live"):
        rows[f"run.{k}"] = _fmt(rep["run"].get(k))
    for k, v in rep["client"].items():
        rows[f"client.{k}"] = _stat(v)
        rows[f"client.{k}.p99"] = _fmt(v.get("p99"))
    for k, v in rep["observe"].items():
        rows[f"observe.{k}"] = _stat(v)
    for s in rep["stages"]:
        for k in ("utilization", "mean_number", "throughput", "mean_service", "iterations"):
            rows[f"stage.{s['name']}.{k}"] = _fmt(s.get(k))
    for p in rep["pools"]:
        for k in ("mean_used", "mean_cached", "admissions", "evicted_units", "preemptions", "rejected"):
            rows[f"pool.{p['name']}.{k}"] = _fmt(p.get(k))
    for k in ("compile", "run", "total"):
        rows[f"cpu.{k} (s)"] = f"{rep['cpu'][k]:.3f}"
    return rows


def side_by_side(ours: dict, peer: dict) -> str:
    a, b = _rows(ours), _rows(peer)
    keys = list(a) + [k for k in b if k not in a]
    w = max(len(k) for k in keys) + 2
    out = [f"{'':<{w}}{'ours (serq_fast)':>28}{'pyserq ' + PYSERQ_VERSION:>28}"]
    for k in keys:
        out.append(f"{k:<{w}}{a.get(k, '') :>28}{b.get(k, ''):>28}")
    return "\n".join(out)


def _parse_sets(items: list[str]) -> dict:
    sets = {}
    for s in items:
        if "=" not in s:
            raise SystemExit(f"--set {s!r}: expected NAME=VALUE")
        k, v = s.split("=", 1)
        sets[k.strip()] = v.strip()
    return sets


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("program", nargs="?", choices=sorted(PROGRAMS), help="a known program pair")
    ap.add_argument("--deployment", help="a P deployment file (with --workload) instead of PROGRAM")
    ap.add_argument("--workload", help="the P workload file of --deployment")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--horizon", type=float, default=DEFAULT_HORIZON)
    ap.add_argument("--warmup", type=float, default=None, help="default 10%% of the horizon (as serq run)")
    ap.add_argument("--compare", action="store_true",
                    help="also run `serq run --json` on our program with the same inputs; print both")
    ap.add_argument("--agree", metavar="SEEDS",
                    help="comma-separated seeds: both sides on each, seed-averaged mean TTFT / response")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    why = why_unavailable()
    if why:
        print(f"pyserq_peer: {why}", file=sys.stderr)
        return 2
    if args.deployment or args.workload:
        if not (args.deployment and args.workload) or args.program or args.compare:
            ap.error("--deployment needs --workload, and neither goes with PROGRAM or --compare")
        program = (args.deployment, args.workload)
    elif args.program:
        program = args.program
    else:
        ap.error("give PROGRAM or --deployment/--workload")
    sets = _parse_sets(args.sets)
    if args.agree:
        if not isinstance(program, str):
            ap.error("--agree needs PROGRAM")
        seeds = [int(x) for x in args.agree.split(",") if x.strip()]
        log = None if args.json else (lambda line: print(line, flush=True))
        a = agreement(program, sets, seeds, args.horizon, args.warmup, log=log)
        print(json.dumps(a, indent=2) if args.json else format_agreement(a, rows=False))
        return 0
    if args.compare:
        ours, peer = compare(program, sets, args.seed, args.horizon, args.warmup)
        if args.json:
            print(json.dumps({"ours": ours, "pyserq": peer}, indent=2))
        else:
            print(f"{program}  sets {sets or '{}'}  seed {args.seed}  horizon {args.horizon:g}  "
                  f"warmup {_warmup(args.horizon, args.warmup):g}")
            print(side_by_side(ours, peer))
        return 0
    peer = run_peer(program, sets, args.seed, args.horizon, args.warmup)
    if args.json:
        print(json.dumps(peer, indent=2))
    else:
        rows = _rows(peer)
        w = max(len(k) for k in rows) + 2
        print("\n".join(f"{k:<{w}}{v:>28}" for k, v in rows.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""serQ's side of the testbed: predict a measured workload with the replay program, compare.

A testbed workload (tools/vllm_testbed/workload.py: an oracle scenario whose sessions are
multi-turn conversations on a wall clock) was run on the real engine, which wrote one row per
request (`NAME.requests.csv`). Here the same workload is turned into the replay program's inputs
(examples/replay/vllm_replay.sq: its trace rows, session spacing, block size, budget, slots, KV
blocks), the program runs on a step-cost profile (`serq fit` of measured steps), and the
predicted per-request TTFT, TPOT and response are set beside the measured ones.

Nothing here needs vLLM: the measured files are data.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from .errors import SerqError

REPLAY_PROGRAM = Path(__file__).resolve().parents[2] / "examples" / "replay" / "vllm_replay.sq"
METRICS = ("ttft", "tpot", "response")
QUANTILES = (("mean", None), ("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


@dataclass
class Workload:
    name: str
    rows: list[tuple[int, int, int, int, float]]    # session, turn, new, out, think
    spacing: float
    settings: dict[str, str]


def read_workload(path: str | Path) -> Workload:
    """A wall-clock testbed workload as the replay program's trace rows and settings."""
    p = Path(path)
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SerqError(f"cannot read the workload: {exc}", str(p)) from None
    if obj.get("_clock") != "wall":
        raise SerqError("not a wall-clock testbed workload (tools/vllm_testbed/workload.py scenario "
                        "--clock wall); a step-clock one is compared with `serq oracle compare`", str(p))
    cfg = obj.get("config", {})
    if cfg.get("long_prefill_token_threshold"):
        raise SerqError("config.long_prefill_token_threshold: the replay program has no per-request "
                        "chunk cap", str(p))
    reqs = obj["requests"]
    by_id = {r["id"]: r for r in reqs}
    think_after: dict[str, float] = {}
    for r in reqs:
        if "after" in r:
            think_after[r["after"]] = float(r.get("_think_s", 0.0))
    rows, starts = [], []
    for r in reqs:
        s, t = int(r["_session"]), int(r["_turn"])
        new = int(r["prompt_len"]) if t == 1 else int(r["append_len"])
        if t == 1:
            starts.append(Fraction(str(r["arrival_time"])))
        elif by_id[r["after"]]["_session"] != s:
            raise SerqError(f"request {r['id']}: follows a request of another session", str(p))
        rows.append((s, t, new, int(r["max_tokens"]), think_after.get(r["id"], 0.0)))
    spacing = starts[1] - starts[0] if len(starts) > 1 else Fraction(0)
    if any(x != i * spacing for i, x in enumerate(starts)):
        raise SerqError("sessions must start at i × spacing (the replay program's arrival rule)", str(p))
    settings = {
        "spacing": str(spacing), "sessions": str(len(starts)),
        "slots": str(cfg.get("max_num_seqs", 128)), "budget": str(cfg.get("max_num_batched_tokens", 2048)),
        "bs": str(cfg.get("block_size", 16)), "blocks": str(cfg.get("num_gpu_blocks", 1024) - 1),
    }
    return Workload(obj.get("name", p.stem), rows, float(spacing), settings)


def predict(workload: Workload, profile_settings: dict[str, str], program: str | Path = REPLAY_PROGRAM,
            extra: dict[str, str] | None = None) -> dict[tuple[int, int], dict]:
    """The replay program on the workload: (session, turn) -> predicted times."""
    from serq.irfile import read_program
    from serq.wire import value_to_wire
    from serq.exact import parse_number
    from serq_fast.step import Sim
    from serq_fast.report import RECORD_COLUMNS, record_rows

    if not Path(program).is_file():
        raise SerqError(f"the replay program {program} is not there (an installed serq has no examples/): "
                        "give the program's path")
    settings = {**profile_settings, **workload.settings, **(extra or {})}
    ir = read_program(str(program), [f"{k}={v}" for k, v in settings.items()])
    trace = ir.get("workload", {}).get("trace")
    if trace is None:
        raise SerqError("the program has no `trace` statement to replay the workload through", str(program))
    sessions: list[list[list[str]]] = []
    for s, t, new, out, think in workload.rows:
        if t == 1:
            sessions.append([])
        sessions[-1].append([value_to_wire(parse_number(str(new))), value_to_wire(parse_number(str(out))),
                             value_to_wire(parse_number(repr(think))), "0"])
    trace["sessions"] = sessions
    records: list = []
    sim = Sim(ir, seed=0, horizon=math.inf, warmup=0.0, records=records)
    sim.run()
    out = {}
    for row in record_rows(records):
        r = dict(zip(RECORD_COLUMNS, row))
        key = (int(r["session"]), int(r["turn"]))
        n = int(r["output"]) if r["output"] is not None else 0
        tpot = ((r["completion"] - r["first_token"]) / (n - 1)) if n > 1 else None
        out[key] = {"ttft": r["ttft"], "response": r["response"], "tpot": tpot, "hit": r["hit"]}
    return out


def read_measured(path: str | Path) -> dict[tuple[int, int], dict]:
    """A driver's NAME.requests.csv: (session, turn) -> measured times."""
    p = Path(path)
    try:
        with open(p, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise SerqError(f"cannot read the measured requests: {exc}", str(p)) from None
    need = {"session", "turn", "ttft_s", "tpot_s", "response_s"}
    if not rows or not need <= set(rows[0]):
        raise SerqError(f"not a testbed requests file (need columns {', '.join(sorted(need))})", str(p))
    num = lambda v: float(v) if v not in ("", None) else None  # noqa: E731
    return {(int(r["session"]), int(r["turn"])): {"ttft": num(r["ttft_s"]), "tpot": num(r["tpot_s"]),
                                                  "response": num(r["response_s"])} for r in rows}


def quantile(xs: list[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (numpy's default)."""
    s = sorted(xs)
    h = (len(s) - 1) * q
    lo = math.floor(h)
    return s[lo] + (h - lo) * (s[min(lo + 1, len(s) - 1)] - s[lo])


def summarise(xs: list[float]) -> dict[str, float]:
    return {name: (sum(xs) / len(xs) if q is None else quantile(xs, q)) for name, q in QUANTILES}


def compare(predicted: dict, measured: dict) -> dict:
    """Per metric: measured and predicted summaries over the requests both have, the relative
    error of each summary, and the distribution of per-request relative errors."""
    missing = sorted(set(measured) - set(predicted))
    out: dict = {"requests": len(measured), "unpredicted": [f"s{s}t{t}" for s, t in missing]}
    for m in METRICS:
        keys = [k for k in measured if k in predicted and measured[k][m] is not None
                and predicted[k][m] is not None]
        if not keys:
            continue
        meas = [measured[k][m] for k in keys]
        pred = [predicted[k][m] for k in keys]
        sm, sp = summarise(meas), summarise(pred)
        errs = [(p - q) / q for p, q in zip(pred, meas) if q > 0]
        out[m] = {"n": len(keys), "measured": sm, "predicted": sp,
                  "error": {k: (sp[k] - sm[k]) / sm[k] if sm[k] else None for k in sm},
                  "per_request_error": summarise(errs) | {"p10": quantile(errs, 0.1)} if errs else None}
    return out


def render(cmp: dict, title: str) -> str:
    lines = [title, f"  {cmp['requests']} requests measured"
             + (f"; not predicted: {', '.join(cmp['unpredicted'])}" if cmp["unpredicted"] else "")]
    lines.append(f"  {'metric':<9}{'stat':<6}{'measured':>11}{'predicted':>11}{'error':>9}")
    for m in METRICS:
        if m not in cmp:
            continue
        c = cmp[m]
        for stat, _ in QUANTILES:
            e = c["error"][stat]
            lines.append(f"  {m:<9}{stat:<6}{c['measured'][stat]:>11.4f}{c['predicted'][stat]:>11.4f}"
                         f"{'' if e is None else f'{100 * e:+8.1f}%':>9}")
        pe = c["per_request_error"]
        if pe:
            lines.append(f"  {m:<9}per-request error: p10 {100 * pe['p10']:+.1f}%  median {100 * pe['p50']:+.1f}%  "
                         f"p90 {100 * pe['p90']:+.1f}%  mean {100 * pe['mean']:+.1f}%")
    return "\n".join(lines)

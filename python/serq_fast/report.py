"""The run report (docs/language.md §11.9; schema in docs/report.md) and its text rendering.

serq_spec counterpart: none — the spec reports no statistics; its runs give state lines
and claims (`serq_spec/trace.py`, `serq_spec/claims.py`).
"""

from __future__ import annotations

import csv
import json
import math
import os



def _f(x):
    """A report number: finite floats as they are, non-finite as null."""
    if x is None:
        return None
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def over_cap(sim) -> dict:
    """pool index -> serials of queue heads whose need in that pool exceeds its cap at the end
    (docs/language.md §11.4), in pool order of the queues."""
    out: dict = {}
    for q in sim.pools:
        for pool, serial, _need in q.head_over_cap():
            out.setdefault(pool.idx, []).append(serial)
    return out


def notes(sim) -> list:
    """Text-only notes (docs/language.md §14): engines idle with work, heads over the cap, sessions
    stuck or rejected."""
    out = []
    for q in sim.pools:
        for pool, serial, need in q.head_over_cap():
            out.append(f"over: pool {pool.name}: session {serial}, the head of {q.name}'s queue, asks for "
                       f"{need:g} > cap {pool.cap:g} at the end (docs/language.md §11.4: it can never be "
                       f"admitted; raise the pool's cap or ask for less)")
    for st in sim.engines:
        waiting = sum(p.qlen() for p in st.admits)
        if st.iter is None and waiting and not st.residents:
            h = next((p.head() for p in st.admits if p.qlen()), None)
            who = f" (head: session {h.sess.serial})" if h is not None else ""
            out.append(f"idle: engine {st.name} ends idle with {waiting} waiting request(s){who}: "
                       f"the head never fits (head-of-line blocking, docs/language.md §11.4)")
    for p in sim.pools:
        if p.stuck:
            out.append(f"stuck: pool {p.name}: {p.stuck} session(s) preempted without progress (docs/language.md "
                       f"§11.7: preempted again before passing the previous preemption's position, so the "
                       f"recomputed work was lost; more room on the pool or fewer holders at once avoids it)")
        if p.rejected:
            out.append(f"rejected: pool {p.name}: {p.rejected} hold(s) asked for more than the cap "
                       f"(docs/language.md §11.4: each ended its session or branch; raise the pool's cap or ask for less)")
    return out


def build(sim) -> dict:
    end = sim.end
    span = end - sim.warmup if end > sim.warmup else 0.0
    client = {k: {kk: _f(vv) for kk, vv in v.summary().items()} for k, v in sim.client.items()}
    observe = {}
    for name, st in zip(sim.observe_names, sim.obs_stats):
        s = st.summary(with_cv2=True)
        observe[name] = {k: _f(s[k]) for k in ("count", "mean", "ci", "cv2", "p50", "p90", "p99")}
    gauges = {name: {k: _f(v) for k, v in g.summary(end).items()}
              for name, g in zip(sim.gauge_names, sim.gauges)}
    stages = []
    for st in sim.stages:
        stages.append({
            "name": st.name,
            "utilization": _f(st.ta_util.mean(end)),
            "mean_number": _f(st.ta_number.mean(end)),
            "throughput": _f(st.completed / span) if span > 0 else None,
            "completed": st.completed,
            "mean_wait": _f(st.wait_sum / st.wait_n) if st.wait_n else None,
            "mean_service": _f(st.service_sum / st.service_n) if st.service_n else None,
            "iterations": st.iterations,
        })
    over = over_cap(sim)
    pools = []
    for p in sim.pools:
        pools.append({
            "name": p.name,
            "mean_used": _f(p.ta_used.mean(end)),
            "mean_cached": _f(p.ta_cached.mean(end)),
            "mean_queue": _f(p.ta_queue.mean(end)),
            "admissions": p.admissions,
            "evicted_units": _f(p.evicted_units),
            "preemptions": p.preemptions,
            "rejected": p.rejected,
            "stuck": p.stuck,
            "over_cap": over.get(p.idx, []),
            # chunks moved to the `spill` tier, only on a pool that has one (docs/report.md)
            **({"spills": p.spills} if p.spill is not None else {}),
            # blocks loaded back from a content tier, only on a content pool with `spill` (docs/content.md §6)
            **({"tier_hits": p.tier_hits} if p.spill is not None and p.content else {}),
        })
    sim.report_notes = notes(sim)
    return {
        "run": {
            "horizon": _f(sim.horizon),
            "end": _f(end),
            "warmup": sim.warmup,
            "seed": sim.seed,
            "events": sim.events,
            "arrivals": sim.narrivals,
            "turns": sim.turns,
            "ended": sim.ended,
            "mean_live": _f(sim.ta_live.mean(end)),
        },
        "client": client,
        "observe": observe,
        "gauges": gauges,
        "claims": sim.claims.entries([st.name for st in sim.stages]),
        "stages": stages,
        "pools": pools,
    }


def to_json(rep: dict) -> str:
    return json.dumps(rep, indent=2, allow_nan=False)


def _num(x, width=12):
    if x is None:
        return "-".rjust(width)
    if isinstance(x, int):
        return str(x).rjust(width)
    if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-3):
        return f"{x:.4g}".rjust(width)
    return f"{x:.4f}".rjust(width)


def _ci(x, width=12):
    # null in the JSON (fewer than 40 samples: no batch-means interval) is `-`, as in every other
    # column; `±inf` read as an interval that was computed and found unbounded
    return ("-" if x is None else "±" + _num(x, 0).strip()).rjust(width)


def to_text(rep: dict, notes_: list | None = None) -> str:
    r = rep["run"]
    out = [
        f"run: horizon {'inf' if r['horizon'] is None else r['horizon']}  end {r['end']:.6g}  "
        f"warmup {r['warmup']:g}  seed {r['seed']}  "
        f"events {r['events']}  arrivals {r['arrivals']}  turns {r['turns']}  ended {r['ended']}  "
        f"mean_live {_num(r['mean_live'], 0)}",
        "",
    ]
    rows = [(k, v) for k, v in rep["client"].items()]
    out.append(f"{'client':<16}{'count':>10}{'mean':>12}{'95% CI':>12}{'p50':>12}{'p99':>12}")
    for k, v in rows:
        out.append(f"{k:<16}{v['count']:>10}{_num(v['mean'])}{_ci(v['ci'])}{_num(v['p50'])}{_num(v['p99'])}")
    if rep["observe"]:
        out.append("")
        out.append(f"{'observe':<16}{'count':>10}{'mean':>12}{'95% CI':>12}{'cv2':>12}{'p50':>12}{'p99':>12}")
        for k, v in rep["observe"].items():
            out.append(f"{k:<16}{v['count']:>10}{_num(v['mean'])}{_ci(v['ci'])}{_num(v['cv2'])}"
                       f"{_num(v['p50'])}{_num(v['p99'])}")
    if rep["gauges"]:
        out.append("")
        out.append(f"{'gauge':<26}{'mean':>12}{'95% CI':>12}{'min':>12}{'max':>12}")
        for k, v in rep["gauges"].items():
            out.append(f"{k:<26}{_num(v['mean'])}{_ci(v['ci'])}{_num(v['min'])}{_num(v['max'])}")
    if rep["claims"]:
        out.append("")
        out.append(f"{'claim':<20}{'kind':>7}{'result':>15}{'checked':>10}{'held':>10}{'violated':>10}"
                   f"{'first held':>12}{'first viol.':>12}")
        for c in rep["claims"]:
            out.append(f"{c['name']:<20}{c['kind']:>7}{c['result']:>15}{c['checked']:>10}{c['held']:>10}"
                       f"{c['violated']:>10}{_num(c['first_held'])}{_num(c['first_violated'])}")
    out.append("")
    out.append(f"{'stage':<16}{'number':>12}{'util':>12}{'done':>10}{'thru':>12}{'wait':>12}{'service':>12}{'iters':>10}")
    for s in rep["stages"]:
        out.append(f"{s['name']:<16}{_num(s['mean_number'])}{_num(s['utilization'])}{s['completed']:>10}"
                   f"{_num(s['throughput'])}{_num(s['mean_wait'])}{_num(s['mean_service'])}{s['iterations']:>10}")
    if rep["pools"]:
        out.append("")
        out.append(f"{'pool':<16}{'used':>12}{'cached':>12}{'queue':>12}{'admits':>10}{'evicted':>12}{'preempt':>10}"
                   f"{'reject':>10}{'stuck':>8}")
        for p in rep["pools"]:
            out.append(f"{p['name']:<16}{_num(p['mean_used'])}{_num(p['mean_cached'])}{_num(p['mean_queue'])}"
                       f"{p['admissions']:>10}{_num(p['evicted_units'])}{p['preemptions']:>10}{p['rejected']:>10}"
                       f"{p['stuck']:>8}")
        spilling = [p for p in rep["pools"] if "spills" in p]
        if spilling:   # a line of its own: the table of programs without `spill` stays as it was
            out.append("spills: " + ", ".join(f"{p['name']} {p['spills']}"
                                              + (f" (tier hits {p['tier_hits']} blocks)" if "tier_hits" in p else "")
                                              for p in spilling))
    if notes_:
        out.append("")
        out.extend(notes_)
    return "\n".join(out) + "\n"


RECORD_COLUMNS = ["session", "turn", "submit", "first_token", "completion", "ttft", "response", "prompt", "output", "hit"]
# The Parquet types of the columns (docs/report.md): serials and turn numbers are whole; amounts
# are numbers of the language (whole for tokens, but a program may hold fractions), so float64.
RECORD_TYPES = {"session": "int64", "turn": "int64"}


def record_schema():
    import pyarrow as pa

    return pa.schema([(c, pa.int64() if RECORD_TYPES.get(c) == "int64" else pa.float64())
                      for c in RECORD_COLUMNS])


def record_rows(reqs):
    for q in reqs:
        ttft = q.first - q.submit if q.first is not None else None
        yield [q.serial, q.turn, q.submit, q.first, q.done, ttft, q.done - q.submit, q.prompt, q.output, q.hit]


def check_records_path(path: str) -> None:
    """Fail before the run, not after it, when the records could not be written: a folder that
    does not exist or cannot be written, a path that is a folder, Parquet without pyarrow."""
    folder = os.path.dirname(path) or "."
    if os.path.isdir(path):
        raise RuntimeError(f"--records {path}: is a directory (give a file name, e.g. "
                           f"{path.rstrip('/')}/records.csv)")
    if not os.path.isdir(folder):
        raise RuntimeError(f"--records {path}: {folder} is not an existing folder")
    if not os.access(folder, os.W_OK):
        raise RuntimeError(f"--records {path}: the folder {folder} is not writable")
    if path.endswith(".parquet"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise RuntimeError("--records *.parquet needs pyarrow (pip install 'serq[records]'); "
                               "write a .csv path instead") from None


def _whole(x):
    return int(x) if isinstance(x, float) and math.isfinite(x) and x == int(x) else x


def write_records(path: str, reqs) -> None:
    from serq.outputfile import atomic_write

    rows = [[_whole(x) if i in (7, 8, 9) else x for i, x in enumerate(r)] for r in record_rows(reqs)]
    if path.endswith(".parquet"):
        check_records_path(path)
        import pyarrow as pa
        import pyarrow.parquet as pq

        cols = {c: [r[i] for r in rows] for i, c in enumerate(RECORD_COLUMNS)}
        with atomic_write(path, "wb") as f:
            pq.write_table(pa.table(cols, schema=record_schema()), f)
        return
    with atomic_write(path, "w", newline="") as f:  # an interrupted write leaves the old file
        w = csv.writer(f)
        w.writerow(RECORD_COLUMNS)
        for r in rows:
            w.writerow(["" if x is None else (repr(x) if isinstance(x, float) else x) for x in r])

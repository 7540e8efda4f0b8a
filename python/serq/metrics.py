"""The headline metrics of one run, under the names of vLLM's `bench serve` (docs/api.md §Metrics).

Every number is taken from the run's report (serq_fast.report, docs/report.md) and renamed,
except the two the report does not compute, which come from the per-request records:
- `itl_mean`, vLLM's mean inter-token latency: the mean gap between consecutive output tokens
  over all tokens of all requests. A request's gaps add up to completion − first token and there
  are output − 1 of them, so the mean over all gaps is Σ(completion − first_token) / Σ(output − 1)
  exactly; its median and p99 would need each token's time, which no record keeps.
- `output_throughput`: output tokens of the recorded requests per second of [warm-up, end].
Times are seconds (vLLM prints milliseconds).
"""

from __future__ import annotations

import math
import operator
import re

from .errors import SerqError

# the report's client metric -> vLLM's name
CLIENT_NAMES = {"ttft": "ttft", "tpot": "tpot", "response": "e2el"}
# the report's STAT key -> vLLM's statistic name
STAT_NAMES = {"count": "count", "mean": "mean", "p50": "median", "p90": "p90", "p99": "p99"}
RUN_KEYS = ("turns", "arrivals", "ended", "mean_live")
POOL_KEYS = ("mean_used", "mean_cached", "mean_queue", "preemptions", "evicted_units")
STAGE_KEYS = ("utilization", "throughput")

# the record columns used here (serq_fast.report.RECORD_COLUMNS)
_FIRST, _COMPLETION, _OUTPUT = 3, 4, 8


def summarize(report: dict, record_rows: list | None = None) -> dict:
    """One flat row {metric: number or None} for REPORT; RECORD_ROWS (serq_fast.report.record_rows
    of the run's records) give `itl_mean` and `output_throughput` (None without them)."""
    run = report["run"]
    span = run["end"] - run["warmup"] if run["end"] is not None else 0.0
    row: dict = {}
    for ours, theirs in CLIENT_NAMES.items():
        stat = report["client"].get(ours) or {}
        for k, name in STAT_NAMES.items():
            row[f"{theirs}_{name}"] = stat.get(k)
    row["itl_mean"] = None
    row["output_throughput"] = None
    if record_rows is not None:
        gaps = tokens = 0.0
        out = 0.0
        for r in record_rows:
            if r[_OUTPUT] is not None:
                out += r[_OUTPUT]
            if r[_FIRST] is not None and r[_OUTPUT] is not None and r[_OUTPUT] > 1:
                gaps += r[_COMPLETION] - r[_FIRST]
                tokens += r[_OUTPUT] - 1
        row["itl_mean"] = gaps / tokens if tokens else None
        row["output_throughput"] = out / span if span > 0 else None
    count = report["client"].get("response", {}).get("count")
    row["request_throughput"] = count / span if span > 0 and count is not None else None
    for k in RUN_KEYS:
        row[k] = run[k]
    for name, stat in report["observe"].items():
        for k in ("mean", "p50", "p90", "p99"):
            row[f"observe_{name}_{STAT_NAMES[k]}"] = stat.get(k)
    for name, g in report["gauges"].items():
        row[f"gauge_{name}_mean"] = g["mean"]
    for c in report.get("claims", []):   # 1 if the claim holds (or is witnessed), else 0
        row[f"claim_{c['name']}_holds"] = int(c["holds"])
    for st in report["stages"]:
        for k in STAGE_KEYS:
            row[f"stage_{st['name']}_{k}"] = st[k]
    for p in report["pools"]:
        for k in POOL_KEYS:
            row[f"pool_{p['name']}_{k}"] = p[k]
    return row


# ------------------------------------------------------------------------------------------ SLOs

_OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
_SLO = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|<|>)\s*([-+0-9.eE]+|inf)\s*$")


class Slo:
    """`METRIC OP NUMBER`, e.g. `ttft.p99<2` or `e2el_mean <= 10` (a dot or `_` between the
    metric and its statistic; `p50` is `median`)."""

    def __init__(self, text: str, columns=None):
        m = _SLO.match(text)
        if not m:
            raise SerqError(f"--slo {text!r}: expected METRIC<NUMBER (or <=, >, >=), e.g. 'ttft.p99<2'")
        self.text = text.strip()
        self.metric = metric_column(m[1])
        self.op_text = m[2]
        self.op = _OPS[m[2]]
        self.bound = float(m[3])
        if columns is not None and self.metric not in columns:
            raise SerqError(f"--slo {text!r}: no metric {self.metric!r}; the metrics are "
                            f"{', '.join(c for c in columns)}")

    def met(self, value) -> bool:
        """Whether VALUE meets the objective (an undefined value, e.g. no request finished, does not)."""
        return value is not None and not (isinstance(value, float) and math.isnan(value)) \
            and bool(self.op(value, self.bound))

    def __repr__(self) -> str:
        return f"Slo({self.text!r})"


def metric_column(name: str) -> str:
    """A metric as the user names it (`ttft.p99`, `ttft_p50`, `e2el.mean`) -> its column."""
    col = name.strip().replace(".", "_")
    return re.sub(r"_p50$", "_median", col)

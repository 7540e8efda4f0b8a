"""Compare two oracle traces, and render a trace one line per step.

The comparison rule (docs/oracle.md, "Comparing traces"): two traces agree when

- for every step number present in either trace: the ordered ``(id, tokens)`` pairs that were
  scheduled, the ``preempted`` ids, the *sorted* ids in ``finished`` and
  ``free_blocks_after_schedule`` are equal; a step present in only one trace is a difference;
- for every request id present in either trace: ``cached_tokens_at_admission``,
  ``first_token_step``, ``finish_step``, ``num_preemptions`` and ``output_len`` are equal.

Nothing else is compared (times, timing, kinds, block counts, cache statistics, queue lengths,
free blocks after update). When a preempt-only ``schedule()`` record shares its step number with
the following step, the later record is the one compared.

A step may give its schedule in the compact form ``"sched": "a:64 b:1"`` instead of the
``scheduled`` list; both forms compare equal when they say the same thing. Trace files may be
gzipped (``.json.gz``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from serq_drt.compare import EXACT, EXACT_IN_ORDER, first_difference as first_value_difference

__all__ = [
    "TraceError",
    "Difference",
    "STEP_FIELDS",
    "REQUEST_FIELDS",
    "load_trace",
    "vector_trace_path",
    "check_trace_shape",
    "step_schedule",
    "parse_compact_schedule",
    "compare_traces",
    "first_difference",
    "render_step",
    "render_trace",
]

STEP_FIELDS = ("scheduled", "preempted", "finished", "free_blocks_after_schedule")
REQUEST_FIELDS = (
    "cached_tokens_at_admission",
    "first_token_step",
    "finish_step",
    "num_preemptions",
    "output_len",
)


class TraceError(ValueError):
    """A trace that cannot be read or does not have the documented shape."""


@dataclass(frozen=True)
class Difference:
    """One way two traces disagree.

    kind: ``"step"`` (a compared field of one step differs), ``"missing-step"`` (a step number
    present in one trace only), ``"request"`` (a compared field of one request differs) or
    ``"missing-request"``.
    """

    kind: str
    step: int | None = None
    request: str | None = None
    field: str | None = None
    a: Any = None
    b: Any = None

    def describe(self, a_name: str = "A", b_name: str = "B") -> str:
        if self.kind == "missing-step":
            have = a_name if self.a is not None else b_name
            lack = b_name if self.a is not None else a_name
            return f"step {self.step}: present in {have} only (missing in {lack})"
        if self.kind == "missing-request":
            have = a_name if self.a is not None else b_name
            lack = b_name if self.a is not None else a_name
            return f"request {self.request!r}: present in {have} only (missing in {lack})"
        if self.kind == "step":
            return (
                f"step {self.step}: {self.field} differs: "
                f"{a_name} {_fmt(self.field, self.a)} vs {b_name} {_fmt(self.field, self.b)}"
            )
        return (
            f"request {self.request!r}: {self.field} differs: "
            f"{a_name} {json.dumps(self.a)} vs {b_name} {json.dumps(self.b)}"
        )

    def __str__(self) -> str:
        return self.describe()


def _fmt(field: str | None, v: Any) -> str:
    if field == "scheduled" and isinstance(v, list):
        return '"' + " ".join(f"{i}:{n}" for i, n in v) + '"'
    return json.dumps(v)


# --------------------------------------------------------------------------------------------
# loading


def load_trace(path: str | Path) -> dict:
    """Read a trace file (plain or gzipped JSON) and check its shape; raises TraceError."""
    from serq import inputfile

    p = Path(path)
    try:
        raw = inputfile.gunzip(inputfile.read_bytes(str(p)))
    except inputfile.InputError as exc:
        msg = str(exc)
        raise TraceError(f"cannot read {p}: {msg.removeprefix('cannot read: ')}" if msg.startswith("cannot read")
                         else f"{p}: {msg}") from None
    try:
        obj = inputfile.parse(raw)
    except inputfile.InputError as exc:
        raise TraceError(f"{p} is not valid JSON: {str(exc).removeprefix('not JSON: ')}") from None
    try:
        check_trace_shape(obj)
    except TraceError as exc:
        raise TraceError(f"{p}: {exc}") from None
    return obj


def vector_trace_path(directory: str | Path, name: str) -> Path:
    """The committed trace of vector `name`: `<name>.trace.json`, or `<name>.trace.json.gz` (the
    campaign vectors are stored gzipped to keep the repository small). The plain name when
    neither exists."""
    d = Path(directory)
    gz = d / f"{name}.trace.json.gz"
    return gz if gz.exists() else d / f"{name}.trace.json"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_trace_shape(t: Any) -> None:
    """Raise TraceError unless `t` has what the comparison needs (and the documented types)."""
    if not isinstance(t, dict):
        raise TraceError("a trace must be a JSON object")
    for key in ("steps", "requests"):
        if key not in t:
            raise TraceError(f"missing key {key!r}")
    if not isinstance(t["steps"], list):
        raise TraceError("'steps' must be a list")
    if not isinstance(t["requests"], dict):
        raise TraceError("'requests' must be an object (id -> record)")
    for i, s in enumerate(t["steps"]):
        where = f"steps[{i}]"
        if not isinstance(s, dict):
            raise TraceError(f"{where}: must be an object")
        if not _is_int(s.get("step")):
            raise TraceError(f"{where}.step: must be an integer")
        if "scheduled" in s:
            sch = s["scheduled"]
            if not isinstance(sch, list):
                raise TraceError(f"{where}.scheduled: must be a list")
            for j, e in enumerate(sch):
                if not isinstance(e, dict) or not isinstance(e.get("id"), str) or not _is_int(
                    e.get("tokens")
                ):
                    raise TraceError(f"{where}.scheduled[{j}]: must be {{id: string, tokens: int, ...}}")
                # what `render_step` shows of an entry
                if not isinstance(e.get("kind", ""), str) or not (
                    e.get("computed_before") is None or _is_int(e["computed_before"])
                ):
                    raise TraceError(f"{where}.scheduled[{j}]: kind must be a string, computed_before an integer")
        elif "sched" in s:
            try:
                parse_compact_schedule(s["sched"])
            except TraceError as exc:
                raise TraceError(f"{where}.sched: {exc}") from None
        else:
            raise TraceError(f"{where}: needs 'scheduled' or the compact 'sched'")
        for key in ("preempted", "arrived"):
            ids = s.get(key, [])
            if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids):
                raise TraceError(f"{where}.{key}: must be a list of ids")
        clock = s.get("time")
        if clock is not None and (isinstance(clock, bool) or not isinstance(clock, (int, float))
                                  or (isinstance(clock, int) and abs(clock) > 2**1023)):
            raise TraceError(f"{where}.time: must be a number (within binary64's range)")
        fin = s.get("finished", [])
        if not isinstance(fin, list):
            raise TraceError(f"{where}.finished: must be a list")
        for j, f in enumerate(fin):
            if not (isinstance(f, str) or (isinstance(f, dict) and isinstance(f.get("id"), str))):
                raise TraceError(f"{where}.finished[{j}]: must be an id or {{id, reason, output_len}}")
        if "free_blocks_after_schedule" not in s:
            raise TraceError(f"{where}: missing free_blocks_after_schedule")
    for rid, r in t["requests"].items():
        if not isinstance(r, dict):
            raise TraceError(f"requests.{rid}: must be an object")


# --------------------------------------------------------------------------------------------
# the rule


def parse_compact_schedule(text: Any) -> list[tuple[str, int]]:
    """``"a:64 b:1"`` -> ``[("a", 64), ("b", 1)]`` (an id may itself contain ':')."""
    if not isinstance(text, str):
        raise TraceError(f"compact schedule must be a string, got {text!r}")
    out = []
    for item in text.split():
        rid, sep, n = item.rpartition(":")
        if not sep or not rid or not n.isdigit():
            raise TraceError(f"bad compact schedule entry {item!r} (expected id:tokens)")
        out.append((rid, int(n)))
    return out


def step_schedule(step: dict) -> list[tuple[str, int]]:
    """The ordered (id, tokens) pairs of a step, from either form."""
    if "scheduled" in step:
        return [(e["id"], e["tokens"]) for e in step["scheduled"]]
    return parse_compact_schedule(step.get("sched", ""))


def _finished_ids(step: dict) -> list[str]:
    return sorted(f if isinstance(f, str) else f["id"] for f in step.get("finished", []))


def _step_view(step: dict) -> dict[str, Any]:
    return {
        "scheduled": step_schedule(step),
        "preempted": sorted(step.get("preempted", [])),
        "finished": _finished_ids(step),
        "free_blocks_after_schedule": step.get("free_blocks_after_schedule"),
    }


def _steps_by_number(trace: dict) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for s in trace["steps"]:
        out[s["step"]] = s  # a later record with the same number wins (preempt-only calls)
    return out


def compare_traces(a: dict, b: dict, *, limit: int | None = None) -> list[Difference]:
    """All differences between two traces under the rule, steps (ascending) then requests.

    `limit` stops after that many differences. An empty list means the traces agree.
    """
    diffs: list[Difference] = []

    def full() -> bool:
        return limit is not None and len(diffs) >= limit

    sa, sb = _steps_by_number(a), _steps_by_number(b)
    for n in sorted(set(sa) | set(sb)):
        if full():
            return diffs
        if n not in sa or n not in sb:
            diffs.append(
                Difference(
                    "missing-step",
                    step=n,
                    a=step_schedule(sa[n]) if n in sa else None,
                    b=step_schedule(sb[n]) if n in sb else None,
                )
            )
            continue
        va, vb = _step_view(sa[n]), _step_view(sb[n])
        d = first_value_difference(va, vb, EXACT_IN_ORDER)  # fields in STEP_FIELDS order
        if d:  # one difference per step is enough to read
            f = d.field
            diffs.append(Difference("step", step=n, field=f, a=va[f], b=vb[f]))
    ra, rb = a["requests"], b["requests"]
    order = list(ra) + [r for r in rb if r not in ra]
    for rid in order:
        if full():
            return diffs
        if rid not in ra or rid not in rb:
            diffs.append(
                Difference(
                    "missing-request",
                    request=rid,
                    a=True if rid in ra else None,
                    b=True if rid in rb else None,
                )
            )
            continue
        for f in REQUEST_FIELDS:
            if not EXACT.same(ra[rid].get(f), rb[rid].get(f)):
                diffs.append(Difference("request", request=rid, field=f, a=ra[rid].get(f), b=rb[rid].get(f)))
    return diffs


def first_difference(a: dict, b: dict) -> Difference | None:
    d = compare_traces(a, b, limit=1)
    return d[0] if d else None


# --------------------------------------------------------------------------------------------
# rendering


def render_step(step: dict, requests: dict | None = None) -> str:
    """One readable line for a step record.

    ``<step> t=<time> tok=<total> run=<running> wait=<waiting> free=<after schedule>/<after
    update> | <entries> arr=<ids> PREEMPT=<ids> fin=<id>(<reason>,<len>)`` where an entry is
    ``+id:n`` (new), ``^id:n`` (resumed) or ``id:n`` (running), followed by ``(cN)`` for an
    N-token prefix-cache hit on a new or resumed entry. Compact-form steps show plain entries.
    """
    t = step.get("time")
    head = [f"{step['step']:>4}"]
    if t is not None:
        head.append(f"t={t:.4f}")
    sched_entries = []
    if "scheduled" in step:
        for e in step["scheduled"]:
            mark = {"new": "+", "resumed": "^"}.get(e.get("kind"), "")
            txt = f"{mark}{e['id']}:{e['tokens']}"
            hit = e.get("computed_before") or 0
            if mark and hit:
                txt += f"(c{hit})"
            sched_entries.append(txt)
        total = step.get("total_tokens", sum(e["tokens"] for e in step["scheduled"]))
    else:
        pairs = step_schedule(step)
        sched_entries = [f"{i}:{n}" for i, n in pairs]
        total = step.get("total_tokens", sum(n for _, n in pairs))
    head.append(f"tok={total}")
    if "num_running" in step:
        head.append(f"run={step['num_running']} wait={step.get('num_waiting')}")
    fa = step.get("free_blocks_after_schedule")
    fu = step.get("free_blocks_after_update")
    head.append(f"free={fa}/{'-' if fu is None else fu}")
    line = " ".join(head) + " | " + " ".join(sched_entries)
    if step.get("arrived"):
        line += " arr=" + ",".join(step["arrived"])
    if step.get("preempted"):
        line += " PREEMPT=" + ",".join(step["preempted"])
    fins = []
    for f in step.get("finished", []):
        if isinstance(f, str):
            fins.append(f)
        else:
            fins.append(f"{f['id']}({f.get('reason')},{f.get('output_len')})")
    if fins:
        line += " fin=" + ",".join(fins)
    return line


def render_trace(trace: dict, steps: Iterable[int] | None = None) -> str:
    """The rendering of every step (or only of the given step numbers), one per line."""
    want = None if steps is None else set(steps)
    lines = [render_step(s) for s in trace["steps"] if want is None or s["step"] in want]
    return "\n".join(lines)

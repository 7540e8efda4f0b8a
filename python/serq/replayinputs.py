"""Does a run's inputs fit the sessions file it replays (docs/sessions.md "Inputs of a replay")?

A sessions file holds the values a sampling run drew — arrival times, trace picks, every `~DIST`
draw — not the inputs that shaped them. A replay reads those values back, so an input the
sampled workload read (`rate` in `arrive poisson(rate)`, `svc` in `~det(svc)`, or a `let` built
from them) has no effect when it is set to another value than the file's: the run would silently
keep the file's. An input only the deployment reads (`servers`, `blocks`) is what a replay is for,
and takes effect. This module tells the two apart and refuses the first kind with a message that
names the file, the input, both values and what to do.

How: inputs are folded into the IR as numbers, so the IR cannot say which input an expression
read. Instead the program is linked again with the file's values, and the part of the IR that
decides the recorded values — the workload's arrival process and trace, every draw's law and
arguments, and what is assigned to the attributes those arguments read — is compared with the
run's (`recorded_part`). When they differ, each differing input is put back alone to find those
that matter. An input read only by control flow (a `while` over an input count) changes how many
values the run takes, not the values, and the run reports that itself ("does not fit").
"""

from __future__ import annotations

import sys
from typing import Any, Iterator

from .errors import SerqError
from .exact import first_constant_beyond_doubles
from .wire import INF, WireError, canonical_json, value_from_wire

# arrival kinds whose parameters decide values the file holds (the arrival times, batch's count);
# `closed(n)` spawns the file's sessions n at a time, so its n takes effect in a replay
_RECORDED_ARRIVALS = ("poisson", "renewal", "batch")


def _walk(x: Any) -> Iterator[dict]:
    """Every JSON object in X, depth first, in document order."""
    stack = [x]
    while stack:
        y = stack.pop()
        if isinstance(y, dict):
            yield y
            stack.extend(reversed(list(y.values())))
        elif isinstance(y, list):
            stack.extend(reversed(y))


def _without_positions(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _without_positions(v) for k, v in x.items() if k != "at"}
    if isinstance(x, list):
        return [_without_positions(v) for v in x]
    return x


def _slots_read(x: Any) -> set[int]:
    return {d["slot"] for d in _walk(x) if d.get("k") == "attr" and isinstance(d.get("slot"), int)}


def recorded_part(ir: dict) -> str:
    """The part of IR that decides the values a sessions file holds, as canonical JSON: the
    arrival process (unless `closed`) and the trace, each draw's law and arguments (an `accept`
    statement's n and alpha too) in the order they appear, and every assignment (`set`, a hold's binding, `choose`) to an attribute the
    arguments read, directly or through other attributes."""
    workload = ir.get("workload") or {}
    arrival = workload.get("arrival") or {}
    # `accept (n, alpha)` (docs/language.md §7.3) draws n acceptance counts of the internal law
    # `accept`: a statement, not a `"k": "draw"` node, but its n and alpha shape values the file holds
    draws = [d for d in _walk(ir) if d.get("k") == "draw" or d.get("op") == "accept"]
    writers: dict[int, list] = {}
    for d in _walk(ir.get("blocks") or []):
        if "k" not in d and isinstance(d.get("slot"), int):   # a write, not a read (`"k": "attr"`)
            writers.setdefault(d["slot"], []).append({k: v for k, v in d.items() if k not in ("body", "at")})
    wanted, todo = set(), _slots_read(draws)
    while todo:
        slot = todo.pop()
        wanted.add(slot)
        todo |= _slots_read(writers.get(slot, [])) - wanted
    return canonical_json(_without_positions({
        "arrival": arrival if arrival.get("kind") in _RECORDED_ARRIVALS else {"kind": arrival.get("kind")},
        "trace": workload.get("trace"),
        "draws": draws,
        "writers": [writers.get(s, []) for s in sorted(wanted)],
    }))


def _shown(wire: str) -> str:
    from .inputs import shown_value

    try:
        return shown_value(value_from_wire(wire))
    except WireError:   # a hand-edited file: show what it says
        return str(wire)


def differing_inputs(data: dict, ir: dict) -> list[str]:
    """The inputs of the program whose value in this run (IR) differs from the sessions file's
    (DATA's `inputs`), in the program's order; an input one of them does not name is not compared."""
    theirs = data.get("inputs")
    if not isinstance(theirs, dict):
        return []
    ours = ir.get("inputs") or {}
    out = []
    for name, wire in ours.items():
        if name in theirs and _value(theirs[name]) != _value(wire):
            out.append(name)
    return out


def _value(wire: Any) -> Any:
    try:
        return value_from_wire(wire)
    except WireError:   # compared as written; linking it reports it
        return wire


def check_replay_inputs(data: dict, ir: dict, program: str, sessions: str | None) -> None:
    """Refuse a replay of DATA (the sessions file at SESSIONS; None for sessions given as a dict)
    by the run of PROGRAM whose IR is IR when an input the sampled workload read has another value
    than the file's; a note on standard error when PROGRAM is an IR file, whose source is not at
    hand to tell."""
    differ = differing_inputs(data, ir)
    if not differ:
        return
    if first_constant_beyond_doubles(ir) is not None:   # the engine refuses the program itself
        return
    theirs, ours = data["inputs"], ir["inputs"]
    if program.endswith(".json"):
        where = f"{sessions}: " if sessions else ""
        print(f"serq: note: {where}this run's inputs differ from those the sessions file was "
              f"sampled with ({_pairs(differ, theirs, ours)}); from an IR file serq cannot tell whether "
              "the sampled workload reads them (a replay keeps the file's values for those it reads): "
              "replay the .sq program to have this checked", file=sys.stderr)
        return
    from .frontend import load_program

    sampled = {name: _setting(theirs[name] if name in theirs else wire) for name, wire in ours.items()}
    try:
        base = recorded_part(load_program(program, dict(sampled)))
    except SerqError as exc:
        raise SerqError(f"the inputs the sessions file was sampled with ({_pairs(differ, theirs, ours)}) "
                        f"do not link with this program: {exc.message}", sessions) from None
    if base == recorded_part(ir):
        return
    read = [name for name in differ
            if recorded_part(load_program(program, {**sampled, name: _setting(ours[name])})) != base]
    read = read or differ   # only a combination changes the draws: name every input that differs
    values = ", ".join(f"{n}={_shown(ours[n])} (the file's: {_shown(theirs[n])})" for n in read)
    again = " ".join(f"--set {n}={_shown(ours[n])}" for n in read)
    back = " ".join(f"--set {n}={_shown(theirs[n])}" for n in read)
    raise SerqError(
        f"this run gives the sampled workload other inputs than the sessions file was sampled with: "
        f"{values}; the file holds the arrival times and draws they shaped, so the replay would "
        f"silently keep the file's values. Sample again with this run's (serq sample {program} "
        f"{again} …), or replay with the file's ({back}, or no --set where that is the default)",
        sessions)


def _setting(wire: str) -> str:
    """A wire value as a `--set` text that means exactly it: `p/q` or `±inf` (a wire integer of
    400 digits is past what a decimal setting may spell)."""
    v = value_from_wire(wire)
    if v in (INF, -INF):
        return "inf" if v == INF else "-inf"
    return f"{v.numerator}/{v.denominator}"


def _pairs(names: list[str], theirs: dict, ours: dict) -> str:
    return ", ".join(f"{n}: file {_shown(theirs[n])}, run {_shown(ours[n])}" for n in names)

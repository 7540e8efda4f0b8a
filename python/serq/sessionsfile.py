"""Reading a sessions file (docs/sessions.md) for either engine: `serq spec --sessions` and
`serq run --replay`.

A sessions file on disk may have been edited by hand or come from elsewhere. Both engines
assume its shape (lists of exact draw values, serials 0 … K−1, arrival times in order), so it is
checked here, once, and a violation is reported with its JSON path (`arrivals[0]: …`) instead of
surfacing later as a traceback in one engine and a message in the other. Whether the draws fit
the program is a question only a run can answer; the engines report that themselves.
"""

from __future__ import annotations

from typing import Any

from .errors import SerqError
from .exact import beyond_doubles, constant_beyond_doubles
from .wire import INF, WireError, value_from_wire

SESSIONS_FORMAT = "serq-sessions/1"


class SessionsFileBad(ValueError):
    """The first entry of a sessions file the engines could not trust: `where` (a JSON path) and
    `what` is wrong with it."""

    def __init__(self, where: str, what: str):
        super().__init__(f"sessions file: {where}: {what}" if where else f"sessions file: {what}")
        self.where = where
        self.what = what


def read_json_file(path: str, what: str, advice: str) -> Any:
    """The JSON value in PATH; a SerqError naming PATH (and `what` it should be) otherwise."""
    from . import inputfile

    if not path.strip():  # a FILE: prefix would be empty (": error: …")
        raise SerqError(f"the path of the {what} is empty: give a file")

    try:
        return inputfile.read(path)
    except inputfile.InputError as exc:
        msg = str(exc).removeprefix("cannot read: ")
        tail = f" ({advice})" if msg.startswith("not JSON") else ""
        raise SerqError(f"cannot read the {what}: {msg}{tail}", path) from None


def read_sessions_file(path: str, ir: dict | None = None) -> dict:
    """The sessions file at PATH, checked (and, given the program's IR, checked to hold what its
    workload spawns); a SerqError naming PATH otherwise."""
    data = read_json_file(path, "sessions file", "write one with `serq sample`")
    try:
        check_sessions(data)
        if ir is not None:
            check_counts(data, ir)
    except SessionsFileBad as bad:
        raise SerqError(f"{bad} (write one with `serq sample`; docs/sessions.md gives the format)", path) from None
    return data


def _list(x: Any, where: str) -> list:
    if not isinstance(x, list):
        raise SessionsFileBad(where, "must be a list")
    return x


def _draw(x: Any, where: str):
    try:
        v = value_from_wire(x)
    except WireError as exc:
        raise SessionsFileBad(where, str(exc)) from None
    if v in (INF, -INF):
        raise SessionsFileBad(where, "a draw cannot be infinite")
    if beyond_doubles(v):   # refused for both engines, as a constant is (docs/language.md §4.1)
        raise SessionsFileBad(where, constant_beyond_doubles(v, "a draw", todo=False))
    return v


def _draws(x: Any, where: str) -> None:
    for i, v in enumerate(_list(x, where)):
        _draw(v, f"{where}[{i}]")


def _shown(x: Any) -> str:
    text = "null" if x is None else repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def check_sessions(data: Any) -> None:
    """Raise SessionsFileBad for the first entry of DATA (parsed JSON) that is not a sessions file."""
    if not isinstance(data, dict) or data.get("format") != SESSIONS_FORMAT:
        raise SessionsFileBad("", f"not a {SESSIONS_FORMAT} sessions file")
    # the seed may be left out (`serq run --seed` applies), but when given it is what `--seed`
    # takes: a non-negative integer (null once passed here and made the replay crash)
    if "seed" in data and not _is_count(data["seed"]):
        raise SessionsFileBad("seed", f"must be a non-negative integer, got {_shown(data['seed'])}")
    # informational, but read to explain a file that does not fit the run (sampling_difference)
    if "inputs" in data and not isinstance(data["inputs"], dict):
        raise SessionsFileBad("inputs", f"must be an object (the settings it was sampled with), got {_shown(data['inputs'])}")
    for name, v in (data.get("inputs") or {}).items():   # compared with the run's (serq/replayinputs.py)
        try:
            value_from_wire(v)
        except WireError as exc:
            raise SessionsFileBad(f"inputs.{name}", f"{exc} (the value it was sampled with)") from None
    if data.get("program") is not None and not isinstance(data["program"], str):
        raise SessionsFileBad("program", f"must be a string (the program's name), got {_shown(data['program'])}")
    sessions = _list(data.get("sessions"), "sessions")
    arrivals = [_draw(x, f"arrivals[{i}]") for i, x in enumerate(_list(data.get("arrivals", []), "arrivals"))]
    # every arrival, not only pairs: a lone negative one would be an event in the past
    for i, a in enumerate(arrivals):
        if a < 0 or (i > 0 and a < arrivals[i - 1]):
            raise SessionsFileBad(f"arrivals[{i}] = {a}", "must be >= 0 and not before the arrival "
                                  "before it")
    picks = _list(data.get("trace_picks", []), "trace_picks")
    for i, p in enumerate(picks):
        if not _is_count(p):
            raise SessionsFileBad(f"trace_picks[{i}]", f"must be a non-negative integer, got {p!r}")
    _draws(data.get("machine", []), "machine")
    for i, s in enumerate(sessions):
        if not isinstance(s, dict) or s.get("serial") != i:
            raise SessionsFileBad(f"sessions[{i}]", f"must have serial {i}")
        _draws(s.get("init", []), f"sessions[{i}].init")
        for k, t in enumerate(_list(s.get("turns", []), f"sessions[{i}].turns")):
            _draws(t, f"sessions[{i}].turns[{k}]")
        _draws(s.get("session", []), f"sessions[{i}].session")


def check_counts(data: dict, ir: dict) -> None:
    """Raise SessionsFileBad unless DATA (a checked sessions file) holds exactly what the program's
    workload consumes of K sessions (docs/sessions.md): K arrival times for `poisson`/`renewal`
    and none otherwise, K trace picks for an unordered `trace` and none otherwise, n sessions for
    `batch(n)`, none for `arrive none`. A value left over is an error, not ignored: it means the
    file was sampled from another program."""
    k = len(data["sessions"])
    workload = ir.get("workload") or {}
    arrival = workload.get("arrival") or {}
    kind = arrival.get("kind")
    arrivals = len(data.get("arrivals", []))
    if kind in ("poisson", "renewal"):
        if arrivals != k:
            raise SessionsFileBad("arrivals", f"the program's `arrive {kind}` takes one arrival time per "
                                  f"session: {k} session(s) need {k}, the file has {arrivals}")
    elif arrivals:
        raise SessionsFileBad("arrivals", f"the program's workload (`arrive {kind}`) takes no arrival "
                              f"times, the file has {arrivals}")
    if kind == "batch" and isinstance(arrival.get("n"), int) and k != arrival["n"]:
        raise SessionsFileBad("sessions", f"the program spawns batch({arrival['n']}), the file has {k} "
                              "session(s)")
    if kind == "none" and k:
        raise SessionsFileBad("sessions", f"the program has no arrivals (`arrive none`), the file has "
                              f"{k} session(s)")
    trace = workload.get("trace")
    picks = len(data.get("trace_picks", []))
    unordered = trace is not None and not trace.get("ordered")
    if unordered and picks != k:
        raise SessionsFileBad("trace_picks", f"an unordered `trace` takes one pick per session: {k} "
                              f"session(s) need {k}, the file has {picks}")
    if not unordered and picks:
        raise SessionsFileBad("trace_picks", f"the program has no unordered `trace`, the file has {picks} "
                              "pick(s)")


#: The head of every message about a sessions file that does not fit the program's run.
DOES_NOT_FIT = "the sessions file does not fit the program"


def stream_name(serial: int | None, turn: int | None = None) -> str:
    """The words for a stream of a sessions file in both engines' messages: `the machine stream`
    (SERIAL None), `session 3's init stream` (TURN 0), `session 3's turn 2 stream`, `session 3's
    session stream` (TURN None)."""
    if serial is None:
        return "the machine stream"
    if turn is None:
        return f"session {serial}'s session stream"
    return f"session {serial}'s init stream" if turn == 0 else f"session {serial}'s turn {turn} stream"


def missing_draw(stream: str, number: int, dist: str, held: int) -> str:
    """A replay needs draw NUMBER (from 1) of STREAM (`stream_name`) for a `~DIST`, and the file
    holds only HELD: the message both engines stop with, at the draw (docs/sessions.md)."""
    return f"{DOES_NOT_FIT}: {stream} needs draw #{number} (~{dist}) but the file has only {held}"


def unused_session_draws(serial: int, init: tuple[int, int], ran: int, lists: int,
                         turns: list[tuple[int, int, int]], session: tuple[int, int]) -> str | None:
    """A session's lists when it ends (docs/sessions.md "Unused values"): INIT and SESSION as
    (used, held), RAN turns against LISTS turn lists, TURNS as (turn, used, held) for each turn it
    ran that the file has a list for. The message both engines stop with when a value is left or
    the turn count differs, None when all fit."""
    problems = []
    if init[0] != init[1]:
        problems.append(f"init stream: used {init[0]} of {init[1]}")
    if ran != lists:
        problems.append(f"{ran} turn(s) run against the file's {lists}")
    problems += [f"turn {k} stream: used {used} of {held}" for k, used, held in turns if used != held]
    if session[0] != session[1]:
        problems.append(f"session stream: used {session[0]} of {session[1]}")
    if not problems:
        return None
    return f"{DOES_NOT_FIT}: session {serial} ended with " + "; ".join(problems)


def fit_hint(message: str, data: dict, ir: dict, program_name: str) -> str:
    """What both engines add to a MESSAGE that says the sessions file does not fit: why, when the
    file's header tells (`sampling_difference`), else for a missing draw the usual cause."""
    if not message.startswith(DOES_NOT_FIT):
        return ""
    why = sampling_difference(data, ir, program_name)
    if why is not None:
        return f" ({why})"
    if "needs draw" in message:
        return " (was it sampled with --horizon T? replay with the same --horizon)"
    return ""


def unused_machine_draws(used: int, held: int) -> str | None:
    """A replay that ended because no event was left (not cut by a horizon or a step limit) must
    have used every value of the file's machine stream (docs/sessions.md "Unused values"): the
    message both engines stop with when it did not, None when it did."""
    if used >= held:
        return None
    return (f"{DOES_NOT_FIT}: the run ended with {held - used} unused "
            f"draw(s) of the machine stream (it used {used} of {held})")


def sampling_difference(data: dict, ir: dict, program_name: str) -> str | None:
    """Why a sessions file that ran out of draws may not fit this run, when its header says: it
    was sampled from another program, or with other inputs (`--set`). The draws of a session can
    depend on the deployment (a rejected request ends its session early), so a file sampled under
    one setting may hold too few draws for another. None when the header matches."""
    if data.get("program") not in (None, program_name):
        return f"it was sampled from {data.get('program')}, not {program_name}"
    theirs, ours = data.get("inputs") or {}, ir.get("inputs") or {}
    differ = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
    if not differ:
        return None
    return ("it was sampled with " + ", ".join(f"{k}={theirs.get(k, '?')}" for k in differ)
            + "; this run has " + ", ".join(f"{k}={ours.get(k, '?')}" for k in differ)
            + ": sample again with this run's --set, or replay with the file's")

"""The pre-drawn workload (docs/sessions.md): every random value a run consumes, as data.

`Workload.replay(file)` serves the values of a sessions file, in order, per stream; the cursors
live in the Config (Session.cursors, Counters.machine), so the spec stays a function of its
Config. `Workload.live(seed, n)` is used by `serq sample` only: when a list runs out it draws the
next value from the stream of docs/sessions.md (serq.draws) and appends it, so the same code
path records a fresh sample.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Optional

from serq import draws as live_draws
from serq.sessionsfile import missing_draw, stream_name, unused_machine_draws, unused_session_draws
from serq.wire import Value, WireError, value_from_wire

from .config import Config, Session
from .errors import At, SessionsFileError, SpecError
from .values import wire

FORMAT = "serq-sessions/1"


def _val(x: Any, where: str) -> Fraction:
    try:
        v = value_from_wire(x)
    except WireError as exc:
        raise SessionsFileError(f"sessions file: {where}: {exc}")
    if isinstance(v, float):
        raise SessionsFileError(f"sessions file: {where}: a draw cannot be infinite")
    return v


def _list(x: Any, where: str) -> list:
    if not isinstance(x, list):
        raise SessionsFileError(f"sessions file: {where} must be a list")
    return x


class Workload:
    def __init__(self) -> None:
        self.seed: Optional[int] = None
        self.live = False
        self.count = 0                 # K: sessions in the file
        self.arrivals: list = []
        self.trace_picks: list = []
        self.machine: list = []
        self.sessions: list = []       # [{"init": [...], "turns": [[...]...], "session": [...]}]
        self._rngs: dict = {}
        self.arrival_rng: Any = None         # sampling renewal gaps: draws come from the arrival stream

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def replay(cls, data: Any) -> Workload:
        """Read a sessions file (already parsed JSON); malformed files raise SessionsFileError.
        The CLIs check a file first with serq.sessionsfile (shared with the fast engine, whose
        messages name the file); the spec still checks what it reads, as SerqLang's
        `Workload.replay` does."""
        w = cls()
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise SessionsFileError(f"not a {FORMAT} sessions file")
        sessions = _list(data.get("sessions"), "sessions")
        w.count = len(sessions)
        w.arrivals = [_val(x, f"arrivals[{i}]") for i, x in enumerate(_list(data.get("arrivals", []), "arrivals"))]
        # every arrival, not only pairs: a lone negative one would be an event in the past
        for i, a in enumerate(w.arrivals):
            if a < 0 or (i > 0 and a < w.arrivals[i - 1]):
                raise SessionsFileError(f"sessions file: arrivals[{i}] = {a} must be >= 0 and not before "
                                        "the arrival before it")
        picks = _list(data.get("trace_picks", []), "trace_picks")
        if any(not isinstance(p, int) or isinstance(p, bool) or p < 0 for p in picks):
            raise SessionsFileError("sessions file: trace_picks must be non-negative integers")
        w.trace_picks = picks
        w.machine = [_val(x, f"machine[{i}]") for i, x in enumerate(_list(data.get("machine", []), "machine"))]
        for i, s in enumerate(sessions):
            if not isinstance(s, dict) or s.get("serial") != i:
                raise SessionsFileError(f"sessions file: sessions[{i}] must have serial {i}")
            w.sessions.append({
                "init": [_val(x, f"sessions[{i}].init") for x in _list(s.get("init", []), f"sessions[{i}].init")],
                "turns": [[_val(x, f"sessions[{i}].turns[{k}]") for x in _list(t, f"sessions[{i}].turns[{k}]")]
                          for k, t in enumerate(_list(s.get("turns", []), f"sessions[{i}].turns"))],
                "session": [_val(x, f"sessions[{i}].session") for x in _list(s.get("session", []), f"sessions[{i}].session")],
            })
        w.seed = data.get("seed")
        return w

    @classmethod
    def live_sample(cls, seed: int, count: int) -> Workload:
        w = cls()
        w.live = True
        w.seed = seed
        w.count = count
        w.sessions = [{"init": [], "turns": [], "session": []} for _ in range(count)]
        return w

    def rng(self, *key: Any) -> Any:
        if key not in self._rngs:
            self._rngs[key] = live_draws.make_stream(*key)
        return self._rngs[key]

    # -- the streams --------------------------------------------------------------------------
    def take(self, cfg: Config, session: Optional[Session], stream: tuple, dist: str, args: list[Value], at: At) -> Fraction:
        """The next value of `stream` for `session` (None: the machine stream)."""
        key: tuple   # the stream's key in serq.draws
        if stream == ("arrival",) and self.arrival_rng is not None:
            return self._draw(cfg, dist, args, self.arrival_rng, at)
        if session is None:
            lst = self.machine
            i = cfg.counters.machine
            key, where = ("machine", self.seed), stream_name(None)
            cfg.counters.machine += 1
        else:
            rec = self.sessions[session.serial]
            if stream[0] == "init":
                lst, ckey, key = rec["init"], "init", ("turn", self.seed, session.serial, 0)
                where = stream_name(session.serial, 0)
            elif stream[0] == "turn":
                k = stream[1]
                while self.live and len(rec["turns"]) < k:
                    rec["turns"].append([])
                # a turn the file has no list for: an empty one, whose first draw is missing
                lst = rec["turns"][k - 1] if k <= len(rec["turns"]) else []
                ckey, key = f"turn:{k}", ("turn", self.seed, session.serial, k)
                where = stream_name(session.serial, k)
            else:
                lst, ckey, key = rec["session"], "session", ("session", self.seed, session.serial)
                where = stream_name(session.serial)
            i = session.cursors.get(ckey, 0)
            session.cursors[ckey] = i + 1
        if not self.live:   # a replayed draw's arguments are checked as a live draw's (first, as serq_fast)
            self._check_args(cfg, dist, args, at)
        if i < len(lst):
            return lst[i]
        if not self.live:
            raise SessionsFileError(missing_draw(where, i + 1, dist, len(lst)), at, cfg.program.files)
        if key[0] == "machine":
            key = ("machine", self.seed)
        x = self._draw(cfg, dist, args, self.rng(*key), at)
        lst.append(x)
        return x

    @staticmethod
    def _check_args(cfg: Config, dist: str, args: list[Value], at: At) -> None:
        """A replayed draw's arguments outside its law are the located error a live draw gives
        (serq.draws.check_args; docs/language.md §4.3)."""
        if dist == "det" and not isinstance(args[0], float):
            return   # exact: any finite value
        try:
            live_draws.check_args(dist, live_draws.as_doubles(args))
        except live_draws.DrawError as exc:
            raise SpecError(str(exc), at, cfg.program.files) from None

    @staticmethod
    def _draw(cfg: Config, dist: str, args: list[Value], rng: Any, at: At) -> Fraction:
        """One fresh draw (sampling only); arguments outside the law are a located error — also
        those the sampler itself trips on (e.g. `~erlang(inf, m)`: OverflowError)."""
        try:
            return live_draws.draw_exact(dist, args, rng)
        except live_draws.DrawError as exc:
            raise SpecError(str(exc), at, cfg.program.files)
        except (ArithmeticError, ValueError) as exc:
            shown = ", ".join(wire(a) for a in args)
            raise SpecError(f"~{dist}({shown}): arguments outside what the draw can sample ({exc})",
                            at, cfg.program.files)

    def check_consumed(self, cfg: Config, session: Session) -> None:
        """At a session's end every value of its streams must have been used (docs/sessions.md)."""
        if self.live:
            return
        rec = self.sessions[session.serial]
        c = session.cursors
        turns = [(k, c.get(f"turn:{k}", 0), len(t)) for k, t in enumerate(rec["turns"], start=1) if k <= session.turns]
        unused = unused_session_draws(session.serial, (c.get("init", 0), len(rec["init"])), session.turns,
                                      len(rec["turns"]), turns, (c.get("session", 0), len(rec["session"])))
        if unused:
            raise SessionsFileError(unused)

    def check_machine_consumed(self, cfg: Config) -> None:
        """At the end of a replay that no horizon or step limit cut, every value of the machine
        stream must have been used (docs/sessions.md "Unused values")."""
        if self.live:
            return
        unused = unused_machine_draws(cfg.counters.machine, len(self.machine))
        if unused:
            raise SessionsFileError(unused)

    def note_turn(self, session: Session) -> None:
        if self.live:
            rec = self.sessions[session.serial]
            while len(rec["turns"]) < session.turns:
                rec["turns"].append([])

    # -- output -------------------------------------------------------------------------------
    def to_file(self, program_name: str, inputs: dict) -> dict:
        return {"format": FORMAT, "seed": self.seed, "program": program_name, "inputs": inputs,
                "arrivals": [wire(a) for a in self.arrivals], "trace_picks": self.trace_picks,
                "machine": [wire(x) for x in self.machine],
                "sessions": [{"serial": i, "init": [wire(x) for x in s["init"]],
                              "turns": [[wire(x) for x in t] for t in s["turns"]],
                              "session": [wire(x) for x in s["session"]]}
                             for i, s in enumerate(self.sessions)]}

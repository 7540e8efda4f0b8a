"""The Python API (docs/api.md): `serq.load(path, **settings)` -> a Program; `program.run(...)`
-> a Result with the report, the per-request records and a one-row summary.

It runs the same code as the command line: programs are read by serq.irfile.load_ir
(settings through serq.irfile.parse_settings, as `--set NAME=VALUE`), runs are made by
serq_fast.simulate.simulate and reported by serq_fast.report. What the command line prints and
exits 2 for is raised here as `serq.errors.SerqError` (its `render()` is the CLI's message).
pandas is needed only for the DataFrames (`.records`, `.summary`): `pip install 'serq[sweep]'`.
"""

from __future__ import annotations

import math
import os
from fractions import Fraction
from typing import Any, Mapping

from .errors import SerqError
from .irfile import parse_settings
from .replayinputs import check_replay_inputs


def setting_text(name: str, value: Any) -> str:
    """A setting value as `--set` takes it: a number (inf allowed) or its text."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Fraction)):
        raise SerqError(f"setting {name}={value!r}: a setting is a number (or its text, e.g. '0.5', 'inf')")
    if isinstance(value, float):
        return "inf" if value == math.inf else ("-inf" if value == -math.inf else repr(value))
    return str(value)


def settings_args(settings: Mapping[str, Any]) -> list[str]:
    """{name: value} as the `--set NAME=VALUE` texts the CLI would pass."""
    return [f"{k}={setting_text(k, v)}" for k, v in settings.items()]


def load(path: str | os.PathLike, *, profile: str | None = None, **settings: Any) -> "Program":
    """The program in PATH (a .sq program or its .json IR) with SETTINGS bound to its
    `args.number` inputs, after those of PROFILE (`--profile`: a profile file or a shipped
    profile's name, docs/profiles.md); compiled at once, so a bad program or setting raises here."""
    return Program(os.fspath(path), settings, profile)


class Program:
    """A compiled program and its settings. Immutable: `with_settings` makes another."""

    def __init__(self, path: str, settings: Mapping[str, Any] | None = None, profile: str | None = None):
        from serq.irfile import load_ir

        self.path = path
        self.profile = profile
        self.settings = parse_settings(settings_args(settings or {}))
        self.ir = load_ir(path, settings_args(self.settings), profile)

    def with_settings(self, **settings: Any) -> "Program":
        """This program with SETTINGS added to (or replacing) its own (the profile kept)."""
        return Program(self.path, {**self.settings, **settings}, self.profile)

    def __repr__(self) -> str:
        sets = "".join(f", {k}={v}" for k, v in self.settings.items())
        prof = f", profile={self.profile!r}" if self.profile else ""
        return f"serq.load({self.path!r}{prof}{sets})"

    def run(self, seed: int = 1, horizon: float | None = None, warmup: float | None = None,
            arrivals: int | None = None, replay: str | dict | None = None, records: bool = True,
            progress=None) -> "Result":
        """Simulate with the fast simulator, as `serq run` (defaults of docs/report.md: horizon
        600 s, warm-up 10 % of it). REPLAY is a sessions file (path or the dict `sample` returns);
        RECORDS=False keeps no per-request records (less memory on long runs)."""
        from serq_fast import report
        from serq_fast.simulate import RunOptions, simulate

        replay_path = None
        if isinstance(replay, (str, os.PathLike)):
            from .sessionsfile import read_sessions_file

            replay_path = os.fspath(replay)
            replay = read_sessions_file(replay_path)
        if replay is not None:
            check_replay_inputs(replay, self.ir, self.path, replay_path)
        opts = RunOptions(seed=seed, horizon=horizon, warmup=warmup, arrivals=arrivals,
                          replay=replay is not None)
        reqs: list | None = [] if records else None
        sim = simulate(self.ir, opts, file=self.path, replay=replay, replay_path=replay_path,
                       records=reqs, progress=progress)
        rep = report.build(sim)
        rows = list(report.record_rows(reqs)) if reqs is not None else None
        return Result(rep, rows, list(sim.report_notes), self.settings)

    def sample(self, seed: int, sessions: int, horizon: float = math.inf,
               max_steps: int | None = 2_000_000) -> dict:
        """The sessions file (docs/sessions.md) of SESSIONS sessions drawn with SEED, as
        `serq sample` writes it; `run(replay=…)` and `spec(…)` take it."""
        from serq_spec.errors import SpecError
        from serq_spec.sample import sample

        if seed < 0:
            raise SerqError("--seed must be a non-negative integer")
        if sessions < 0:
            raise SerqError("--sessions must be >= 0")
        try:
            return sample(self.ir, seed, sessions, os.path.basename(self.path), max_steps,
                          _exact_time(horizon, "horizon"))
        except SpecError as exc:
            raise _spec_error(exc, self) from None

    def spec(self, sessions: str | dict, max_steps: int | None = None, warmup: float = 0,
             horizon: float = math.inf, check: bool = True) -> list[dict]:
        """Run the exact semantics (serq_spec) on a sessions file: one dict per step, the state
        lines `serq spec` prints (docs/state.md)."""
        import json

        from serq_spec.cli import prepare
        from serq_spec.errors import SpecError
        from serq_spec.step import run
        from serq_spec.trace import state_text
        from serq_spec.workload import Workload

        from .sessionsfile import read_sessions_file

        path = os.fspath(sessions) if isinstance(sessions, (str, os.PathLike)) else None
        data = read_sessions_file(path) if path is not None else sessions
        check_replay_inputs(data, self.ir, self.path, path)
        w, h = _exact_time(warmup, "warmup"), _exact_time(horizon, "horizon")
        if w > 0 and w >= h:
            raise SerqError(f"--warmup must be below --horizon, got {warmup} >= {horizon}")
        steps: list[dict] = []
        try:
            prog = prepare(self.ir, Workload.replay(data), os.path.basename(self.path), w, h)
            run(prog, max_steps=max_steps, check=check,
                on_step=lambda cfg, rec, k: steps.append(json.loads(state_text(cfg, rec, k))))
        except SpecError as exc:
            raise _spec_error(exc, self) from None
        return steps


class Result:
    """One run: `.report` (the dict `serq run --json` prints), `.records` (a pandas DataFrame, one
    row per request, the columns of `--records`), `.summary` (a one-row DataFrame of the headline
    metrics, serq.metrics), `.metrics` (the same row as a dict, without pandas), `.notes`."""

    def __init__(self, report: dict, record_rows: list | None, notes: list, settings: Mapping[str, str]):
        from .metrics import summarize

        self.report = report
        self.record_rows = record_rows
        self.notes = notes
        self.settings = dict(settings)
        self.metrics = summarize(report, record_rows)

    @property
    def records(self):
        from serq_fast.report import RECORD_COLUMNS

        if self.record_rows is None:
            raise SerqError("this run kept no records (run(records=True) keeps them)")
        return _pandas().DataFrame(self.record_rows, columns=RECORD_COLUMNS)

    @property
    def summary(self):
        return _pandas().DataFrame([self.metrics])

    def text(self) -> str:
        """The report as `serq run` prints it."""
        from serq_fast.report import to_text

        return to_text(self.report, self.notes)

    def __repr__(self) -> str:
        m = self.metrics
        return (f"<serq Result: {self.report['run']['turns']} turns, ttft mean {m['ttft_mean']}, "
                f"e2el p99 {m['e2el_p99']}>")


def _pandas():
    try:
        import pandas
    except ImportError:
        raise SerqError("DataFrames need pandas: pip install 'serq[sweep]' (or use .report / .metrics)") from None
    return pandas


def _exact_time(x, what: str):
    """A time for the exact spec: inf, or the exact rational of the number as written."""
    if x == math.inf:
        return math.inf
    try:
        v = Fraction(str(x))
    except ValueError:
        raise SerqError(f"--{what} must be a number, got {x!r}") from None
    if v < 0:
        raise SerqError(f"--{what} must be >= 0")
    return v


def _spec_error(exc, program: Program) -> SerqError:
    """An error of the exact spec as `serq sample` / `serq spec` print it."""
    from serq_spec.cli import located

    return located(exc, program.ir, program.path)

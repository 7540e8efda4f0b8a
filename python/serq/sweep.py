"""Sweeps (docs/api.md §Sweeps): a grid of settings × R replications, one run each, with
independent seeds; one row per (point, rep) and a per-point table of means and 95 % CIs.

Resumable by construction: every finished run is appended to a journal (OUT.journal.jsonl, one
JSON line, flushed and fsynced) before the next result is taken, so a killed sweep loses no
finished run; a rerun reads the journal, runs only what is missing, and the tables are then
written atomically from the journal in the grid's order, so an interrupted-and-resumed sweep
gives the same tables as an uninterrupted one. The journal's first line records what the rows
depend on (the program's IR, the fixed settings, the run options, the base seed); a journal of
another sweep is refused rather than mixed in.

Runs are carried out by an executor: the calling process (`jobs=1`), local worker processes
(the default), or a Ray cluster (`executor="ray"`). Workers receive compiled IR, so a Ray
cluster needs serQ installed but not the program's files.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

from .errors import SerqError
from .irfile import parse_settings

JOURNAL_SUFFIX = ".journal.jsonl"
JOURNAL_VERSION = 1
KEY_COLUMNS = ("point", "rep", "seed")


# ------------------------------------------------------------------------------- definitions

def rep_seed(base: int, rep: int) -> int:
    """The seed of replication REP (0-based) of a sweep with base seed BASE: a hash of both, so
    replications and sweeps of other base seeds never share a seed by accident (base + rep would:
    base 1 rep 1 = base 2 rep 0). Independent of the grid point: replication r of every point
    uses the same seed (common random numbers, which make differences between points less noisy)."""
    h = hashlib.sha256(f"serq-sweep-rep:{base}:{rep}".encode()).digest()
    return int.from_bytes(h[:4], "big") & 0x7FFFFFFF


def parse_grid(items: Iterable[str] | Mapping[str, Iterable[Any]]) -> dict[str, list[str]]:
    """`NAME=v1,v2,…` texts (or {name: values}) as {name: [value text, …]}, in the order given."""
    from .api import setting_text

    out: dict[str, list[str]] = {}
    if isinstance(items, Mapping):
        pairs = [(k, [setting_text(k, v) for v in (vs if isinstance(vs, (list, tuple)) else [vs])])
                 for k, vs in items.items()]
    else:
        pairs = []
        for text in items:
            name, sep, values = text.partition("=")
            if not sep or not name.strip():
                raise SerqError(f"--grid {text}: expected NAME=v1,v2,… (an args.number input and its values)")
            pairs.append((name.strip(), [v.strip() for v in values.split(",")]))
    for name, values in pairs:
        if name in out:
            raise SerqError(f"--grid {name} is given twice (list all its values in one --grid {name}=v1,v2,…)")
        if not values or any(v == "" for v in values):
            raise SerqError(f"--grid {name}: an empty value (expected {name}=v1,v2,…)")
        if len(set(values)) != len(values):
            raise SerqError(f"--grid {name}: a value is repeated ({','.join(values)})")
        out[name] = values
    if not out:
        raise SerqError("a sweep needs at least one --grid NAME=v1,v2,…")
    return out


def value_of(text: str):
    """A setting's text as the number it is (an int for a whole literal), for the tables."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


@dataclass
class RunSpec:
    """What every run of a sweep shares (the grid and replication vary)."""
    path: str
    settings: dict = field(default_factory=dict)  # fixed settings, {name: text}
    seed: int = 1  # the base seed
    horizon: float | None = None
    warmup: float | None = None
    arrivals: int | None = None
    replay: str | None = None  # a sessions file every run replays (docs/sessions.md, docs/traces.md)
    profile: str | None = None  # `--profile`: a profile file or a shipped profile's name (docs/profiles.md)

    def replay_data(self) -> dict | None:
        if self.replay is None:
            return None
        from .sessionsfile import read_sessions_file

        return read_sessions_file(self.replay)


@dataclass(frozen=True)
class Task:
    """One run: grid point POINT (0-based, in grid order) with SETTINGS, replication REP."""
    point: int
    settings: tuple  # ((name, text), …) of the grid
    rep: int
    seed: int
    ir: dict = field(compare=False, hash=False, repr=False)
    horizon: float | None = None
    warmup: float | None = None
    arrivals: int | None = None
    replay: dict | None = field(default=None, compare=False, hash=False, repr=False)

    @property
    def key(self) -> tuple:
        return (self.settings, self.rep, self.seed)


def run_task(task: Task) -> dict:
    """Carry out one run (in a worker): its row, or {"error": message} for bad input."""
    from serq_fast import report
    from serq_fast.simulate import RunOptions, simulate

    from .metrics import summarize

    try:
        reqs: list = []
        sim = simulate(task.ir, RunOptions(task.seed, task.horizon, task.warmup, task.arrivals),
                       file=(task.ir.get("files") or ["program"])[0], records=reqs, replay=task.replay)
        metrics = summarize(report.build(sim), list(report.record_rows(reqs)))
    except SerqError as exc:
        return {"error": exc.render()}
    return {"settings": [list(kv) for kv in task.settings], "rep": task.rep, "seed": task.seed,
            "metrics": metrics}


# --------------------------------------------------------------------------------- executors

class InlineExecutor:
    """Every run in this process, one after another (jobs=1; nothing to pickle)."""

    name = "inline"

    def map_unordered(self, fn: Callable, tasks: list) -> Iterator[tuple]:
        for t in tasks:
            yield t, fn(t)

    def close(self) -> None:
        pass


class ProcessExecutor:
    """Local worker processes (concurrent.futures), results in the order they finish."""

    name = "local"

    def __init__(self, jobs: int):
        self.jobs = jobs

    def map_unordered(self, fn: Callable, tasks: list) -> Iterator[tuple]:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=self.jobs) as pool:
            futures = {pool.submit(fn, t): t for t in tasks}
            try:
                for f in as_completed(futures):
                    yield futures[f], f.result()
            finally:  # an interrupted sweep does not wait for runs nobody will record
                for f in futures:
                    f.cancel()

    def close(self) -> None:
        pass


class RayExecutor:
    """The runs as Ray tasks: on the cluster at ADDRESS (`ray.init(address=…)`, serQ installed on
    its nodes), or, without one, on a local Ray started here with JOBS CPUs (and stopped again)."""

    name = "ray"

    def __init__(self, address: str | None = None, jobs: int | None = None):
        try:
            import ray
        except ImportError:
            raise SerqError("--executor ray needs Ray: pip install 'serq[ray]'") from None
        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            kwargs: dict = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
            if address is None:
                # a local cluster: its workers import serQ from where this process did
                here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
                kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": here}}
                if jobs:
                    kwargs["num_cpus"] = jobs
            try:
                ray.init(address=address, **kwargs)
            except Exception as exc:
                # a local start gives its raylet 30 s to register (fixed in Ray 2.60's node.py);
                # on a loaded 2-core machine that is not always enough: say so
                hint = ("; a local Ray failed to start in time (the machine is busy?): try again, "
                        "or start one with `ray start --head` and pass --ray-address auto") if address is None else ""
                raise SerqError(f"--executor ray: cannot start or reach Ray"
                                f"{' at ' + address if address else ''}: {exc}{hint}") from None
            self.started = True

    def map_unordered(self, fn: Callable, tasks: list) -> Iterator[tuple]:
        ray = self.ray
        remote = ray.remote(fn)
        refs = {remote.remote(t): t for t in tasks}
        try:
            while refs:
                done, _ = ray.wait(list(refs), num_returns=1)
                for ref in done:
                    yield refs.pop(ref), ray.get(ref)
        finally:
            for ref in refs:
                ray.cancel(ref)

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
            self.started = False


def make_executor(executor: str = "local", jobs: int | None = None, address: str | None = None):
    if jobs is not None and jobs < 1:
        raise SerqError("--jobs must be a positive integer")
    if executor == "local":
        jobs = jobs or os.cpu_count() or 1
        return InlineExecutor() if jobs == 1 else ProcessExecutor(jobs)
    if executor == "ray":
        return RayExecutor(address, jobs)
    raise SerqError(f"--executor {executor}: expected local or ray")


# ---------------------------------------------------------------------------------- journal

class Journal:
    """OUT.journal.jsonl: a header line (what the rows depend on), then one line per finished run."""

    def __init__(self, path: str, header: dict):
        self.path = path
        self.header = header
        self.rows: dict[tuple, dict] = {}
        if os.path.exists(path):
            self._read()
        else:
            folder = os.path.dirname(path) or "."
            if not os.path.isdir(folder):
                raise SerqError(f"-o: {folder} is not an existing folder")
            self._append(header)

    def _read(self) -> None:
        with open(self.path, "rb") as fh:
            data = fh.read()
        if data and not data.endswith(b"\n"):
            # the last line was being written when the sweep was killed: that run is not done
            cut = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as fh:
                fh.truncate(cut)
            data = data[:cut]
        lines = data.decode("utf-8").splitlines()
        try:
            head = json.loads(lines[0]) if lines else None
        except json.JSONDecodeError:
            head = None
        if head != self.header:
            raise SerqError(f"{self.path} is the journal of another sweep ({_differs(head, self.header)}); "
                            "remove it to start afresh, or choose another -o")
        for n, line in enumerate(lines[1:], 2):
            try:
                row = json.loads(line)
                key = (tuple(tuple(kv) for kv in row["settings"]), row["rep"], row["seed"])
            except (json.JSONDecodeError, KeyError, TypeError):
                raise SerqError(f"{self.path}:{n}: not a journal line (remove the file to start afresh)") from None
            self.rows[key] = row

    def _append(self, obj: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(obj, allow_nan=False, separators=(",", ":")) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def add(self, task: Task, row: dict) -> None:
        self._append(row)
        self.rows[task.key] = row


def _differs(old, new) -> str:
    if not isinstance(old, dict):
        return "its first line is not a sweep header"
    keys = [k for k in new if old.get(k) != new.get(k)]
    return "different " + ", ".join(keys) if keys else "a different header"


def _ir_digest(ir: dict) -> str:
    text = json.dumps(ir, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------ tables

T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
       2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
       2.052, 2.048, 2.045, 2.042]  # Student t, 95 % two-sided, 1…30 degrees of freedom


def t95(df: int) -> float:
    """The 95 % two-sided Student t quantile for DF degrees of freedom (a table to 30, then the
    Cornish–Fisher expansion around 1.96, within 1e-3 there)."""
    if df < 1:
        return math.nan
    if df <= len(T95):
        return T95[df - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def mean_ci(values: list) -> tuple:
    """(mean, 95 % half-width across replications, n) of the defined VALUES; the half-width is
    None for fewer than two."""
    xs = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    n = len(xs)
    if n == 0:
        return None, None, 0
    m = sum(xs) / n
    if n < 2:
        return m, None, n
    s2 = sum((x - m) ** 2 for x in xs) / (n - 1)
    return m, t95(n - 1) * math.sqrt(s2 / n), n


def _pandas():
    try:
        import pandas
    except ImportError:
        raise SerqError("sweeps make tables with pandas: pip install 'serq[sweep]'") from None
    return pandas


@dataclass
class SweepResult:
    runs: Any  # DataFrame: one row per (point, rep)
    points: Any  # DataFrame: one row per point, metric means and `<metric>_ci` half-widths
    ran: int  # runs carried out now (the others came from the journal)
    reused: int


def runs_table(grid: dict, tasks: list, journal: Journal):
    pd = _pandas()
    rows = []
    for t in tasks:
        j = journal.rows[t.key]
        row = {"point": t.point, "rep": t.rep, "seed": t.seed}
        for name, text in t.settings:
            row[name] = value_of(text)
        row.update(j["metrics"])
        rows.append(row)
    return pd.DataFrame(rows)


def points_table(grid: dict, runs):
    pd = _pandas()
    names = list(grid)
    metrics = [c for c in runs.columns if c not in KEY_COLUMNS and c not in names]
    out = []
    for point, g in runs.groupby("point", sort=True):
        row = {"point": point, **{n: g[n].iloc[0] for n in names}, "reps": len(g)}
        for m in metrics:
            mean, ci, _n = mean_ci(list(g[m]))
            row[m] = mean
            row[f"{m}_ci"] = ci
        out.append(row)
    return pd.DataFrame(out)


def points_path(out: str) -> str:
    stem, ext = os.path.splitext(out)
    return f"{stem}.points{ext}"


def write_table(df, path: str) -> None:
    from .outputfile import replacing

    with replacing(path) as tmp:
        if path.endswith(".parquet"):
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False)


def check_output_path(out: str) -> None:
    if not out.endswith((".parquet", ".csv")):
        raise SerqError(f"-o {out}: a sweep is written as .parquet or .csv")
    folder = os.path.dirname(out) or "."
    if not os.path.isdir(folder):
        raise SerqError(f"-o {out}: {folder} is not an existing folder")
    if out.endswith(".parquet"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise SerqError("-o *.parquet needs pyarrow: pip install 'serq[sweep]' (or write .csv)") from None


# --------------------------------------------------------------------------------- the sweep

def make_tasks(spec: RunSpec, grid: dict, reps: int) -> list:
    from serq.irfile import load_ir

    from .replayinputs import check_replay_inputs

    tasks = []
    names = list(grid)
    replay = spec.replay_data()
    for point, values in enumerate(itertools.product(*(grid[n] for n in names))):
        settings = tuple(zip(names, values))
        ir = load_ir(spec.path, {**spec.settings, **dict(settings)}, spec.profile)
        if replay is not None:
            check_replay_inputs(replay, ir, spec.path, spec.replay)
        for rep in range(reps):
            tasks.append(Task(point, settings, rep, rep_seed(spec.seed, rep), ir,
                              spec.horizon, spec.warmup, spec.arrivals, replay))
    return tasks


def journal_header(spec: RunSpec, grid: dict) -> dict:
    from serq.irfile import load_ir

    from .profilefile import profile_settings

    base_ir = load_ir(spec.path, spec.settings, spec.profile)
    replay = spec.replay_data()
    return {"serq_sweep": JOURNAL_VERSION, "program": _ir_digest(base_ir), "settings": spec.settings,
            "profile": profile_settings(spec.profile),
            "seed": spec.seed, "horizon": spec.horizon, "warmup": spec.warmup, "arrivals": spec.arrivals,
            "replay": None if replay is None else _ir_digest(replay)}


def check_spec(spec: RunSpec, grid: dict, reps: int) -> None:
    from serq_fast.simulate import RunOptions

    if not isinstance(reps, int) or reps < 1:
        raise SerqError("--reps must be a positive integer")
    RunOptions(spec.seed, spec.horizon, spec.warmup, spec.arrivals, spec.replay is not None).checked_horizon()
    if spec.replay is not None and reps > 1:
        raise SerqError("--replay: every replication would be the same run (the sessions file holds "
                        "every draw, the seed too): use --reps 1")
    both = sorted(set(grid) & set(spec.settings))
    if both:
        raise SerqError(f"{both[0]} is both a --set and a --grid name (give it in one of them)")


def run_sweep(spec: RunSpec, grid: dict, reps: int, out: str | None = None, executor=None,
              progress: bool = True) -> SweepResult:
    """The sweep of SPEC over GRID × REPS. With OUT (a .parquet or .csv path) it is journaled and
    resumable, and the tables are written to OUT and OUT's `.points` sibling."""
    from .progress import CountProgress

    check_spec(spec, grid, reps)
    if out is not None:
        check_output_path(out)
    _pandas()
    tasks = make_tasks(spec, grid, reps)
    header = journal_header(spec, grid)
    journal = Journal(out + JOURNAL_SUFFIX, header) if out is not None else _MemoryJournal(header)
    todo = [t for t in tasks if t.key not in journal.rows]
    executor = executor or make_executor()
    bar = CountProgress(len(tasks), "sweep", done=len(tasks) - len(todo)) if progress else None
    try:
        for task, row in finished_runs(executor, todo, bar):
            journal.add(task, row)
    finally:
        if bar:
            bar.close()
        executor.close()
    runs = runs_table(grid, tasks, journal)
    points = points_table(grid, runs)
    if out is not None:
        write_table(runs, out)
        write_table(points, points_path(out))
    return SweepResult(runs, points, len(todo), len(tasks) - len(todo))


def finished_runs(executor, tasks: list, bar=None) -> Iterator[tuple]:
    """(task, row) for each of TASKS as it finishes; a run that failed stops everything with its
    message, naming the run."""
    for task, row in executor.map_unordered(run_task, tasks):
        if "error" in row:
            at = ", ".join(f"{k}={v}" for k, v in task.settings)
            raise SerqError(f"the run at {at}, rep {task.rep} (seed {task.seed}) failed: "
                            + row["error"].removeprefix("serq: error: "))
        if bar:
            bar.update()
        yield task, row


class _MemoryJournal(Journal):
    """A sweep without an output file keeps its rows in memory only."""

    def __init__(self, header: dict):
        self.path = None
        self.header = header
        self.rows = {}

    def add(self, task: Task, row: dict) -> None:
        self.rows[task.key] = row


def sweep(path: str, grid: Mapping[str, Iterable[Any]], reps: int = 1, *, seed: int = 1,
          horizon: float | None = None, warmup: float | None = None, arrivals: int | None = None,
          replay: str | None = None, profile: str | None = None, out: str | None = None, jobs: int | None = None, executor: str = "local",
          address: str | None = None, progress: bool = True, **settings: Any) -> SweepResult:
    """Python form of `serq sweep`: GRID {name: [values]}, SETTINGS fixed for every run."""
    from .api import settings_args

    spec = RunSpec(os.fspath(path), parse_settings(settings_args(settings)), seed, horizon, warmup, arrivals,
                   None if replay is None else os.fspath(replay), profile)
    g = parse_grid(grid)
    check_spec(spec, g, reps)
    return run_sweep(spec, g, reps, out, make_executor(executor, jobs, address), progress)

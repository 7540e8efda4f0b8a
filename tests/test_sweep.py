"""Sweeps (serq.sweep, `serq sweep`): rows are the runs they name, executors agree, a killed or
interrupted sweep resumes to the same tables, a journal of another sweep is refused."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import serq
from serq.cli import main
from serq.errors import SerqError
from serq.sweep import (JOURNAL_SUFFIX, InlineExecutor, RunSpec, mean_ci, parse_grid, rep_seed,
                        run_sweep, sweep, t95)

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parents[1]
VLLM = str(ROOT / "examples" / "multi-turn" / "vllm.sq")
MM1 = str(ROOT / "examples" / "single-turn" / "mm1.sq")
GRID = {"lambda": [0.4, 0.6], "service": [0.5, 1]}


def test_rep_seeds_are_deterministic_and_distinct():
    assert rep_seed(1, 0) == rep_seed(1, 0)
    seeds = {rep_seed(b, r) for b in range(1, 20) for r in range(20)}
    assert len(seeds) == 19 * 20  # base 1 rep 1 is not base 2 rep 0
    assert all(0 <= s < 2 ** 31 for s in seeds)


def test_t_quantiles():
    assert t95(1) == 12.706 and t95(19) == 2.093 and t95(30) == 2.042
    assert t95(31) == pytest.approx(2.0395, abs=1e-3)
    assert t95(120) == pytest.approx(1.9799, abs=1e-3)


def test_rows_are_the_runs_they_name_and_points_average_them():
    res = sweep(MM1, GRID, reps=2, seed=5, horizon=60, jobs=1, progress=False)
    runs, points = res.runs, res.points
    assert len(runs) == 8 and list(runs.columns[:5]) == ["point", "rep", "seed", "lambda", "service"]
    assert list(runs["seed"]) == [rep_seed(5, r) for r in (0, 1)] * 4
    programs = {}
    for row in runs.itertuples(index=False):
        key = (row[3], row.service)
        if key not in programs:
            programs[key] = serq.load(MM1, **{"lambda": row[3], "service": row.service})
        direct = programs[key].run(seed=row.seed, horizon=60)
        assert row.e2el_mean == direct.metrics["e2el_mean"]
        assert row.turns == direct.metrics["turns"]
    p = points[(points["lambda"] == 0.6) & (points["service"] == 1)].iloc[0]
    xs = list(runs[(runs["lambda"] == 0.6) & (runs["service"] == 1)]["e2el_mean"])
    m = sum(xs) / 2
    assert p["e2el_mean"] == pytest.approx(m)
    assert p["e2el_mean_ci"] == pytest.approx(12.706 * math.sqrt(((xs[0] - m) ** 2 + (xs[1] - m) ** 2) / 2))
    assert p["reps"] == 2


def test_worker_processes_give_the_rows_of_one_process(tmp_path):
    a = sweep(MM1, GRID, reps=2, horizon=60, jobs=1, progress=False, out=str(tmp_path / "a.parquet"))
    b = sweep(MM1, GRID, reps=2, horizon=60, jobs=2, progress=False, out=str(tmp_path / "b.parquet"))
    pd.testing.assert_frame_equal(a.runs, b.runs)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "a.parquet"), pd.read_parquet(tmp_path / "b.parquet"))
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "a.points.parquet"), b.points)


class StopAfter(InlineExecutor):
    """Runs K tasks, then is interrupted as Ctrl-C would interrupt it."""

    def __init__(self, k):
        self.k = k

    def map_unordered(self, fn, tasks):
        for i, t in enumerate(tasks):
            if i == self.k:
                raise KeyboardInterrupt
            yield t, fn(t)


def test_an_interrupted_sweep_resumes_to_the_same_tables(tmp_path):
    spec = RunSpec(MM1, {}, 1, 60.0, None, None)
    grid = parse_grid(["lambda=0.4,0.6", "service=0.5,1"])
    run_sweep(spec, grid, 2, str(tmp_path / "whole.csv"), InlineExecutor(), progress=False)
    out = str(tmp_path / "cut.csv")
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, grid, 2, out, StopAfter(3), progress=False)
    assert not os.path.exists(out)  # tables are written only at the end
    lines = Path(out + JOURNAL_SUFFIX).read_text().splitlines()
    assert len(lines) == 1 + 3
    again = run_sweep(spec, grid, 2, out, InlineExecutor(), progress=False)
    assert (again.ran, again.reused) == (5, 3)
    assert Path(out).read_text() == Path(tmp_path / "whole.csv").read_text()
    assert Path(tmp_path / "cut.points.csv").read_text() == Path(tmp_path / "whole.points.csv").read_text()
    # a rerun of a finished sweep runs nothing
    assert run_sweep(spec, grid, 2, out, InlineExecutor(), progress=False).ran == 0


def test_a_half_written_last_line_is_a_run_not_done(tmp_path):
    spec = RunSpec(MM1, {}, 1, 60.0, None, None)
    grid = parse_grid({"lambda": [0.4, 0.6]})
    out = str(tmp_path / "s.csv")
    run_sweep(spec, grid, 2, out, InlineExecutor(), progress=False)
    journal = Path(out + JOURNAL_SUFFIX)
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # killed mid-write
    res = run_sweep(spec, grid, 2, out, InlineExecutor(), progress=False)
    assert (res.ran, res.reused) == (1, 3)
    assert journal.read_text().splitlines() == [x.rstrip("\n") for x in lines]


def test_the_journal_of_another_sweep_is_refused(tmp_path):
    out = str(tmp_path / "s.csv")
    sweep(MM1, {"lambda": [0.5]}, reps=1, horizon=60, out=out, jobs=1, progress=False)
    with pytest.raises(SerqError, match=r"journal of another sweep \(different horizon\)"):
        sweep(MM1, {"lambda": [0.5]}, reps=1, horizon=70, out=out, jobs=1, progress=False)
    with pytest.raises(SerqError, match=r"different program"):
        sweep(MM1, {"lambda": [0.5]}, reps=1, horizon=60, out=out, jobs=1, progress=False, service=0.5)


def test_cli_sweep_writes_both_tables_and_prints_the_points(capsys, tmp_path):
    out = tmp_path / "s.parquet"
    rc = main(["sweep", MM1, "--grid", "lambda=0.5,0.7", "--reps", "2", "--horizon", "60",
               "--jobs", "1", "-o", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    runs = pd.read_parquet(out)
    points = pd.read_parquet(tmp_path / "s.points.parquet")
    assert len(runs) == 4 and len(points) == 2
    assert "4 run(s) now, 0 from the journal" in text
    assert text.splitlines()[0].split()[:3] == ["lambda", "reps", "ttft_mean"]
    json.loads(Path(str(out) + JOURNAL_SUFFIX).read_text().splitlines()[0])


@pytest.mark.parametrize("argv, message", [
    (["--grid", "lambda"], "expected NAME=v1,v2"),
    (["--grid", "lambda=0.5,"], "an empty value"),
    (["--grid", "lambda=0.5,0.5"], "a value is repeated"),
    (["--grid", "lambda=0.5", "--grid", "lambda=0.6"], "is given twice"),
    (["--grid", "lambda=0.5", "--set", "lambda=0.6"], "both a --set and a --grid name"),
    (["--grid", "nope=1"], "unknown input `nope`"),
    (["--grid", "lambda=0.5", "--reps", "0"], "--reps must be a positive integer"),
    (["--grid", "lambda=0.5", "--jobs", "0"], "--jobs must be a positive integer"),
    (["--grid", "lambda=0.5", "--horizon", "-1"], "--horizon must be positive"),
])
def test_cli_sweep_bad_input_exits_2(capsys, tmp_path, argv, message):
    rc = main(["sweep", MM1, *argv, "-o", str(tmp_path / "s.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err
    assert err.startswith("serq")


def test_cli_sweep_bad_output_path(capsys, tmp_path):
    assert main(["sweep", MM1, "--grid", "lambda=0.5", "-o", str(tmp_path / "s.txt")]) == 2
    assert "written as .parquet or .csv" in capsys.readouterr().err
    assert main(["sweep", MM1, "--grid", "lambda=0.5", "-o", str(tmp_path / "no" / "s.csv")]) == 2
    assert "not an existing folder" in capsys.readouterr().err


def test_mean_ci_ignores_undefined_values():
    assert mean_ci([None, float("nan")]) == (None, None, 0)
    assert mean_ci([2.0, None]) == (2.0, None, 1)


# ------------------------------------------------------------------------------ the sweep

VLLM_ARGS = ["--grid", "Lambda=0.5,1.0,1.5", "--grid", "max_seqs=4,16", "--reps", "3", "--horizon", "30"]


def _sweep_cmd(out, *more):
    return [sys.executable, "-m", "serq.cli", "sweep", VLLM, *VLLM_ARGS, "-o", str(out), *more]


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT / "python")}


@pytest.mark.slow
def test_a_killed_sweep_rerun_gives_the_table_of_an_uninterrupted_one(tmp_path):
    whole = tmp_path / "whole.parquet"
    subprocess.run(_sweep_cmd(whole, "--jobs", "2"), check=True, env=_env(), capture_output=True)
    cut = tmp_path / "cut.parquet"
    journal = Path(str(cut) + JOURNAL_SUFFIX)
    proc = subprocess.Popen(_sweep_cmd(cut, "--jobs", "2"), env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and len(journal.read_text().splitlines()) >= 1 + 5:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the sweep ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its worker processes
    proc.wait()
    done = len(journal.read_text().splitlines()) - 1
    assert 5 <= done < 18 and not cut.exists()
    rerun = subprocess.run(_sweep_cmd(cut, "--jobs", "2"), check=True, env=_env(), capture_output=True, text=True)
    assert f"{18 - done} run(s) now, {done} from the journal" in rerun.stdout
    pd.testing.assert_frame_equal(pd.read_parquet(cut), pd.read_parquet(whole))
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "cut.points.parquet"),
                                  pd.read_parquet(tmp_path / "whole.points.parquet"))
    runs = pd.read_parquet(whole)
    assert len(runs) == 18 and set(runs["Lambda"]) == {0.5, 1.0, 1.5} and set(runs["max_seqs"]) == {4, 16}


@pytest.mark.ray
def test_ray_executor_gives_the_rows_of_local_processes(tmp_path):
    pytest.importorskip("ray")
    local = tmp_path / "local.parquet"
    subprocess.run(_sweep_cmd(local, "--jobs", "2"), check=True, env=_env(), capture_output=True)
    on_ray = tmp_path / "ray.parquet"
    done = subprocess.run(_sweep_cmd(on_ray, "--jobs", "2", "--executor", "ray"), env=_env(),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    pd.testing.assert_frame_equal(pd.read_parquet(on_ray), pd.read_parquet(local))


def test_a_profile_reaches_every_run_and_the_journal(tmp_path, capsys):
    profile = tmp_path / "P.json"
    assert main(["profile", "--gpu", "h100-sxm", "--model", "llama-3.1-70b", "-o", str(profile)]) == 0
    out = tmp_path / "s.csv"
    argv = ["sweep", VLLM, "--grid", "Lambda=0.5", "--reps", "1", "--horizon", "20", "--jobs", "1", "-o", str(out)]
    assert main([*argv, "--profile", str(profile)]) == 0
    capsys.readouterr()
    row = pd.read_csv(out).iloc[0]
    seed = pd.read_csv(out)["seed"][0]  # numpy int64 (the row itself is upcast to floats)
    direct = serq.load(VLLM, profile=str(profile), Lambda=0.5).run(seed=seed, horizon=20)
    plain = serq.load(VLLM, Lambda=0.5).run(seed=seed, horizon=20)
    assert row["e2el_mean"] == pytest.approx(direct.metrics["e2el_mean"], rel=1e-12)
    assert direct.metrics["e2el_mean"] != plain.metrics["e2el_mean"]  # the profile matters here
    assert main(argv) == 2  # the same OUT without the profile is another sweep
    assert "journal of another sweep (different program, profile)" in capsys.readouterr().err

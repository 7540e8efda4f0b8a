"""Figures (serq.plot, `serq plot`, `serq run --plot`): files are written, with the curve's
numbers from the sweep's replications, and bad input is a message."""

from __future__ import annotations

from pathlib import Path

import pytest

from serq.cli import main

pd = pytest.importorskip("pandas")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]
VLLM = str(ROOT / "examples" / "multi-turn" / "vllm.sq")
MM1 = str(ROOT / "examples" / "single-turn" / "mm1.sq")

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from serq.sweep import sweep

    out = tmp_path_factory.mktemp("sweep") / "s.csv"
    sweep(MM1, {"lambda": [0.3, 0.5, 0.7], "service": [0.5, 1]}, reps=2, horizon=100, jobs=1,
          progress=False, out=str(out))
    return out


def test_curve_with_hue_and_ci_bands(runs, tmp_path, monkeypatch):
    import matplotlib.axes

    drawn = []
    real = matplotlib.axes.Axes.plot

    def spy(self, *args, **kwargs):
        drawn.append((list(args[0]), list(args[1]), kwargs.get("label")))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    fig = tmp_path / "f.png"
    assert main(["plot", str(runs), "--x", "lambda", "--y", "e2el.mean", "--hue", "service", "-o", str(fig)]) == 0
    assert fig.read_bytes()[:8] == PNG
    df = pd.read_csv(runs)
    assert [d[2] for d in drawn] == ["service=0.5", "service=1.0"]
    xs, ys, _ = drawn[1]
    assert xs == [0.3, 0.5, 0.7]
    want = df[df["service"] == 1.0].groupby("lambda")["e2el_mean"].mean()
    assert ys == pytest.approx(list(want))


def test_svg_and_cdf_of_records(tmp_path, capsys):
    a, b = tmp_path / "a.csv", tmp_path / "b.parquet"
    assert main(["run", VLLM, "--horizon", "30", "--records", str(a)]) == 0
    assert main(["run", VLLM, "--horizon", "30", "--set", "Lambda=1", "--records", str(b)]) == 0
    capsys.readouterr()
    fig = tmp_path / "cdf.svg"
    for metric in ("ttft", "tpot", "e2el"):
        assert main(["plot", str(a), str(b), "--cdf", metric, "--log", "-o", str(fig)]) == 0
        assert fig.read_text().lstrip().startswith("<?xml")


def test_run_plot_draws_the_time_series(tmp_path, capsys):
    fig = tmp_path / "ts.png"
    assert main(["run", VLLM, "--horizon", "30", "--json", "--plot", str(fig)]) == 0
    assert capsys.readouterr().out.startswith("{")  # the report is still the JSON alone
    assert fig.read_bytes()[:8] == PNG


def test_series_samples_the_state():
    from serq.timeseries import Series
    from serq.irfile import load_ir
    from serq_fast.simulate import RunOptions, simulate

    s = Series(step=0.5)
    sim = simulate(load_ir(VLLM, ["Lambda=1"]), RunOptions(seed=1, horizon=30), series=s)
    assert s.pools == ["kv", "reqs"] and s.engines == ["vllm"]
    assert all(b - a >= 0.5 for a, b in zip(s.times, s.times[1:]))
    assert 40 <= len(s.times) <= 61
    batch = [r[-1] for r in s.rows]
    assert max(batch) > 0 and max(batch) <= 16
    kv_used = [r[0][0] for r in s.rows]
    assert max(kv_used) > 0
    assert s.times[-1] <= sim.end


@pytest.mark.parametrize("argv, message", [
    (["--x", "lambda", "-o", "f.png"], "needs --x NAME --y METRIC"),
    (["--x", "lambda", "--y", "nope", "-o", "f.png"], "no column 'nope'"),
    (["--x", "lambda", "--y", "ttft_mean", "-o", "f.txt"], "a figure is written as"),
    (["--cdf", "ttft", "-o", "f.png"], "not a records table"),
    (["--cdf", "hit", "-o", "f.png"], "a per-request metric is one of"),
])
def test_plot_bad_input_exits_2(runs, tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    rc = main(["plot", str(runs), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


def test_plot_missing_file(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "none.parquet"), "--x", "a", "--y", "b", "-o", str(tmp_path / "f.png")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_run_plot_path_is_checked_before_the_run(tmp_path, capsys):
    assert main(["run", VLLM, "--plot", str(tmp_path / "ts.txt")]) == 2
    captured = capsys.readouterr()
    assert "a figure is written as" in captured.err and captured.out == ""

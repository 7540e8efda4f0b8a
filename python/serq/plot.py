"""Figures of sweeps and records (docs/api.md §Plots), with matplotlib (the `plot` extra).

- `curve`: a metric against a setting from a sweep's runs table, one line per HUE value, the
  mean over replications with its 95 % CI as a band (serq.sweep.mean_ci: the same numbers as
  the points table).
- `cdf`: the empirical CDF of a per-request metric from records (`serq run --records`,
  `Result.records`), one line per records file.
"""

from __future__ import annotations

import os

from .errors import SerqError
from .metrics import metric_column
from .plotting import check_plot_path, pyplot, save_figure

# per-request metrics of the records, by vLLM's names (serq_fast.report.RECORD_COLUMNS)
RECORD_METRICS = ("ttft", "tpot", "e2el")


def read_table(path: str):
    from .sweep import _pandas

    pd = _pandas()
    if not os.path.isfile(path):
        raise SerqError(f"{path}: no such file")
    try:
        if path.endswith(".parquet"):
            return pd.read_parquet(path)
        return pd.read_csv(path, comment="#")
    except ImportError:
        raise SerqError(f"{path}: reading Parquet needs pyarrow: pip install 'serq[sweep]'") from None
    except Exception as exc:
        raise SerqError(f"{path}: cannot read as a table ({type(exc).__name__}: {exc})") from None


def _column(df, name: str, what: str, path: str) -> str:
    col = name if name in df.columns else metric_column(name)
    if col not in df.columns:
        raise SerqError(f"{path}: no column {name!r} for {what}; the columns are {', '.join(map(str, df.columns))}")
    return col


def curve(runs, x: str, y: str, path: str, hue: str | None = None, source: str = "table",
          logy: bool = False) -> None:
    """Y (mean over replications, 95 % CI band) against X, one line per HUE value."""
    from .sweep import mean_ci

    if "rep" not in runs.columns:
        raise SerqError(f"{source}: not the runs table of a sweep (no `rep` column); plot the file "
                        "`serq sweep -o` wrote, not its .points table")
    xc = _column(runs, x, "--x", source)
    yc = _column(runs, y, "--y", source)
    hc = _column(runs, hue, "--hue", source) if hue else None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups = runs.groupby(hc, sort=True) if hc else [(None, runs)]
    for key, g in groups:
        xs, means, los, his = [], [], [], []
        for xv, gx in g.groupby(xc, sort=True):
            m, ci, _n = mean_ci(list(gx[yc]))
            if m is None:
                continue
            xs.append(xv)
            means.append(m)
            los.append(m - (ci or 0.0))
            his.append(m + (ci or 0.0))
        label = f"{hc}={key}" if hc else None
        line, = ax.plot(xs, means, marker="o", label=label)
        ax.fill_between(xs, los, his, alpha=0.2, color=line.get_color(), linewidth=0)
    ax.set_xlabel(xc)
    ax.set_ylabel(f"{yc} (mean, 95% CI)")
    if logy:
        ax.set_yscale("log")
    if hc:
        ax.legend()
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def record_values(df, metric: str, source: str) -> list:
    """The defined values of a per-request metric (ttft, tpot, e2el) of a records table."""
    m = metric_column(metric)
    if m not in RECORD_METRICS:
        raise SerqError(f"--cdf {metric}: a per-request metric is one of {', '.join(RECORD_METRICS)}")
    for c in ("ttft", "response", "first_token", "completion", "output"):
        if c not in df.columns:
            raise SerqError(f"{source}: not a records table (no `{c}` column; write one with "
                            "`serq run --records PATH`)")
    if m == "ttft":
        s = df["ttft"]
    elif m == "e2el":
        s = df["response"]
    else:  # vLLM's TPOT of a request: (e2el - ttft) / (output - 1), for output > 1
        d = df[df["output"] > 1]
        s = (d["completion"] - d["first_token"]) / (d["output"] - 1)
    return sorted(float(v) for v in s.dropna())


def cdf(tables: list, metric: str, path: str, logx: bool = False) -> None:
    """The empirical CDF of METRIC, one line per (label, records table)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, df in tables:
        xs = record_values(df, metric, label)
        if not xs:
            raise SerqError(f"{label}: no request has a {metric} value")
        n = len(xs)
        ax.step(xs, [(i + 1) / n for i in range(n)], where="post", label=f"{label} (n={n})")
    ax.set_xlabel(f"{metric_column(metric)} (s)")
    ax.set_ylabel("fraction of requests")
    if logx:
        ax.set_xscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_files(files: list, out: str, x: str | None = None, y: str | None = None,
               hue: str | None = None, cdf_metric: str | None = None, log: bool = False) -> None:
    """`serq plot`: a curve of a sweep (--x, --y) or CDFs of records (--cdf)."""
    check_plot_path(out)
    if cdf_metric:
        if x or y or hue:
            raise SerqError("--cdf draws records; --x/--y/--hue draw a sweep: give one or the other")
        cdf([(os.path.basename(f), read_table(f)) for f in files], cdf_metric, out, logx=log)
        return
    if not (x and y):
        raise SerqError("serq plot needs --x NAME --y METRIC (a sweep's runs table) or --cdf METRIC (records)")
    if len(files) != 1:
        raise SerqError("a curve is drawn from one sweep table (several files: only with --cdf)")
    curve(read_table(files[0]), x, y, out, hue=hue, source=files[0], logy=log)

"""`serq sweep`, `serq capacity` and `serq plot` (registered into python/serq/cli.py): the
capacity-planning workflow of docs/api.md on the command line. Bad input exits 2 with one message."""

from __future__ import annotations

import math
import sys

from .errors import SerqError, print_error


def _run_options(p) -> None:
    from .irfile import add_program_args

    add_program_args(p)  # FILE, --set and --profile, exactly as `serq run` takes them
    p.add_argument("--seed", type=int, default=1, metavar="N",
                   help="base seed; replication r runs with a seed derived from (N, r) (default 1)")
    p.add_argument("--reps", type=int, default=3, metavar="R", help="replications per point (default 3)")
    p.add_argument("--horizon", type=float, default=None, metavar="T", help="simulated seconds per run (default 600)")
    p.add_argument("--warmup", type=float, default=None, metavar="W", help="warm-up seconds (default 10%% of the horizon)")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="worker processes (default: one per core; 1 = in this process)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local worker processes (default) or a Ray cluster")
    p.add_argument("--ray-address", metavar="ADDR", default=None,
                   help="the Ray cluster to join (ray.init(address=ADDR); default: start a local one)")
    p.add_argument("--replay", metavar="S.json", default=None,
                   help="every run replays this sessions file (serq sample, serq import) instead of drawing")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="run a grid of settings × replications; a table of runs and one of points",
        description="Run FILE at every combination of the --grid values, R replications each (seeds "
                    "derived from --seed and the replication). Writes one row per run to OUT and the "
                    "per-point means and 95 % CIs to OUT's .points sibling; every finished run is "
                    "journaled in OUT.journal.jsonl, so a rerun of a killed sweep runs only what is missing.")
    _run_options(p)
    p.add_argument("--grid", action="append", default=[], metavar="NAME=v1,v2,…", required=True,
                   help="an args.number input and its values (repeatable: the grid is the product)")
    p.add_argument("--arrivals", type=int, default=None, metavar="N", help="as `serq run --arrivals`")
    p.add_argument("-o", "--output", required=True, metavar="OUT.parquet|csv", help="the runs table")
    p.set_defaults(func=cmd_sweep)

    c = subparsers.add_parser(
        "capacity", help="the largest value of a setting at which an SLO holds (with its CI)",
        description="Search the largest value of --vary at which every --slo holds: each replication "
                    "brackets (doubling or halving from --start, or within --lo/--hi) then bisects to "
                    "--tol; the answer is the mean over replications with its 95 % CI. Assumes the "
                    "metric worsens as the value grows (a load).")
    _run_options(c)
    c.add_argument("--vary", required=True, metavar="NAME", help="the args.number input to search")
    c.add_argument("--slo", action="append", default=[], required=True, metavar="'METRIC<X'",
                   help="an objective, e.g. 'ttft.p99<2' or 'e2el.mean<=10' (repeatable: all must hold)")
    c.add_argument("--start", type=float, default=1.0, metavar="X", help="first value tried (default 1)")
    c.add_argument("--lo", type=float, default=None, metavar="X", help="smallest value to try")
    c.add_argument("--hi", type=float, default=None, metavar="X", help="largest value to try")
    c.add_argument("--tol", type=float, default=0.02, metavar="F",
                   help="stop when the bracket is within F of its value (default 0.02)")
    c.add_argument("--integer", action="store_true", help="the setting is a whole number (max_seqs, blocks)")
    c.add_argument("--json", action="store_true", help="print the answer as JSON")
    c.set_defaults(func=cmd_capacity)

    q = subparsers.add_parser(
        "plot", help="draw a sweep's curve (--x --y [--hue]) or CDFs of records (--cdf)",
        description="From a sweep's runs table: METRIC against NAME, the mean over replications "
                    "with a 95 % CI band, one line per --hue value. From records files (serq run "
                    "--records): the CDF of a per-request metric (ttft, tpot, e2el), one line per file.")
    q.add_argument("files", nargs="+", metavar="TABLE", help="a sweep's runs table, or records files (--cdf)")
    q.add_argument("--x", metavar="NAME", help="the setting on the x axis")
    q.add_argument("--y", metavar="METRIC", help="the metric on the y axis (e.g. ttft_p99 or ttft.p99)")
    q.add_argument("--hue", metavar="NAME", help="one line per value of this setting")
    q.add_argument("--cdf", metavar="METRIC", help="per-request CDF of ttft, tpot or e2el from records")
    q.add_argument("--log", action="store_true", help="a logarithmic metric axis")
    q.add_argument("-o", "--output", required=True, metavar="FIG.png|svg|pdf",
                   help="the figure (its format from the suffix; written atomically)")
    q.set_defaults(func=cmd_plot)


def _spec(args):
    from .irfile import parse_settings
    from .sweep import RunSpec

    return RunSpec(args.file, parse_settings(args.sets), args.seed, args.horizon, args.warmup,
                   getattr(args, "arrivals", None), args.replay, getattr(args, "profile", None))


def _fail(exc: SerqError) -> int:
    return print_error(exc)


POINT_COLUMNS = ("ttft_mean", "ttft_p99", "tpot_mean", "e2el_p99", "request_throughput")


def _fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def points_text(points, names: list) -> str:
    """The per-point table as text: the grid settings, then mean ± CI of the headline metrics."""
    cols = [c for c in POINT_COLUMNS if c in points.columns]
    head = list(names) + ["reps"] + cols
    rows = []
    for _, r in points.iterrows():
        cells = [_fmt(r[n]) for n in names] + [str(int(r["reps"]))]
        for c in cols:
            ci = r.get(f"{c}_ci")
            cells.append(_fmt(r[c]) + ("" if ci is None or ci != ci else f" ±{ci:.2g}"))
        rows.append(cells)
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(lines) + "\n"


def cmd_sweep(args) -> int:
    from .sweep import check_spec, make_executor, parse_grid, points_path, run_sweep

    try:
        spec = _spec(args)
        grid = parse_grid(args.grid)
        check_spec(spec, grid, args.reps)
        res = run_sweep(spec, grid, args.reps, args.output,
                        make_executor(args.executor, args.jobs, args.ray_address))
    except SerqError as exc:
        return _fail(exc)
    sys.stdout.write(points_text(res.points, list(grid)))
    sys.stdout.write(f"{res.ran} run(s) now, {res.reused} from the journal; runs in {args.output}, "
                     f"points in {points_path(args.output)}\n")
    return 0


def cmd_capacity(args) -> int:
    import json

    from .capacity import search_capacity
    from .metrics import Slo
    from .sweep import make_executor

    try:
        slos = [Slo(s) for s in args.slo]
        res = search_capacity(_spec(args), args.vary, slos, args.reps, start=args.start, lo=args.lo,
                              hi=args.hi, rel_tol=args.tol, integer=args.integer,
                              executor=make_executor(args.executor, args.jobs, args.ray_address))
    except SerqError as exc:
        return _fail(exc)
    if args.json:
        out = {"name": res.name, "slo": [s.text for s in res.slos], "capacity": res.capacity,
               "ci": res.ci, "per_rep": res.per_rep, "brackets": res.brackets, "runs": len(res.evaluations)}
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write(res.text())
    return 0


def cmd_plot(args) -> int:
    from .plot import plot_files

    try:
        plot_files(args.files, args.output, x=args.x, y=args.y, hue=args.hue, cdf_metric=args.cdf, log=args.log)
    except SerqError as exc:
        return _fail(exc)
    return 0

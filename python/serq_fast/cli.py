"""`serq run` (registered into python/serq/cli.py; `serq lockstep` is serq_drt/cli.py).

Exit codes: 0 success; 2 bad input (usage, program, settings) or a
run-time error of docs/language.md §11.9 — always a one-paragraph message, never a traceback.

serq_spec counterpart: `serq_spec/cli.py` (`serq sample`, `serq spec`).
"""

from __future__ import annotations

import os
import sys

from serq.errors import SerqError, print_error
from serq.irfile import add_program_args, integer_option, load_ir, number_option
from serq_fast.simulate import DEFAULT_HORIZON, DEFAULT_WARMUP_FRACTION


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run", help="simulate a program with the fast simulator and print its report",
        description="Simulate FILE (a .sq program or its .json IR) with live random streams "
                    f"(or a sessions file with --replay). Defaults: --horizon {DEFAULT_HORIZON:g}, "
                    f"--warmup {DEFAULT_WARMUP_FRACTION:.0%} of the horizon (0 for a batch workload), --seed 1.")
    add_program_args(p)
    p.add_argument("--seed", type=integer_option, default=1, metavar="N", help="random seed (non-negative integer; default 1)")
    p.add_argument("--horizon", type=number_option, default=None, metavar="T",
                   help=f"simulated seconds (default {DEFAULT_HORIZON:g})")
    p.add_argument("--warmup", type=number_option, default=None, metavar="W",
                   help="warm-up seconds (default 10%% of the horizon; 0 for a `batch` workload or an "
                        "infinite horizon)")
    p.add_argument("--arrivals", type=integer_option, default=None, metavar="N",
                   help="exactly N open arrivals, then run until every session ended (horizon = deadline)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (docs/report.md)")
    p.add_argument("--records", metavar="PATH", help="write one row per request (CSV, or Parquet for *.parquet)")
    p.add_argument("--replay", metavar="S.json", help="replay a sessions file from `serq sample` instead of drawing")
    p.add_argument("--states", metavar="PATH", help="write the per-step state lines of docs/state.md ('-' = stdout)")
    p.add_argument("--plot", metavar="FIG.png|svg",
                   help="draw the run's time series (queues, KV used/cached, batch sizes; needs serq[plot])")
    p.set_defaults(func=cmd_run)


def _err(msg: str) -> int:
    """An error of the command line itself (no program position): `serq: error: MSG`, exit 2."""
    return print_error(SerqError(msg))


def cmd_run(args) -> int:
    from serq_fast import report
    from serq_fast.simulate import RunOptions, simulate

    opts = RunOptions(seed=args.seed, horizon=args.horizon, warmup=args.warmup,
                      arrivals=args.arrivals, replay=bool(args.replay))
    for flag, path in (("--records", args.records), ("--states", args.states), ("--replay", args.replay)):
        if path is not None and not path.strip():
            return _err(f"{flag} needs a file path, got an empty one")
    if args.records == "-":  # `--states -` is standard output; records are a table for a file
        return _err("--records - : records are written to a file (CSV, or Parquet for *.parquet), "
                    "not to standard output; give a path")
    if (args.records and args.states and args.states != "-"
            and os.path.realpath(args.records) == os.path.realpath(args.states)):
        return _err(f"--records and --states name the same file ({args.records}): one would overwrite "
                    "the other; give two paths")
    try:
        opts.checked_horizon()
        if args.json and args.states == "-":
            raise SerqError("--json and --states - would both write to standard output: give --states a file")
        ir = load_ir(args.file, args.sets, args.profile)
        if args.records is not None:
            try:
                report.check_records_path(args.records)
            except RuntimeError as exc:
                raise SerqError(str(exc)) from None
        series = None
        if getattr(args, "plot", None):
            from serq.timeseries import Series, check_plot_path

            check_plot_path(args.plot)
            series = Series()
        replay = None
        if args.replay:
            from serq.replayinputs import check_replay_inputs
            from serq.sessionsfile import read_sessions_file

            replay = read_sessions_file(args.replay, ir)
            check_replay_inputs(replay, ir, args.file, args.replay)
    except SerqError as exc:
        return print_error(exc)
    states_file = None  # an AtomicFile: renamed into place only when the run completes
    states_out = None
    states_cb = None
    if args.states:
        from serq.outputfile import AtomicFile

        try:
            if args.states == "-":
                states_out = sys.stdout
            else:
                states_file = AtomicFile(args.states, "w", encoding="utf-8")
                states_out = states_file.fh
        except OSError as exc:
            return _err(f"--states {args.states}: cannot write: {exc.strerror or exc}")
        from serq_fast.trace import dump_line

        states_cb = lambda line: states_out.write(dump_line(line) + "\n")  # noqa: E731
    records = [] if args.records else None
    from serq.progress import run_progress

    progress = None if args.states else run_progress()
    try:
        sim = simulate(ir, opts, file=args.file, replay=replay, replay_path=args.replay,
                       states=states_cb, records=records, progress=progress, series=series)
    except BaseException as exc:
        if states_file is not None:
            states_file.discard()  # never a states file that looks complete (and the old one kept)
            from serq.outputfile import is_write_failure

            if is_write_failure(exc):  # only the states are written during the run
                return _err(f"--states {args.states}: cannot write: {exc.strerror or exc}")
        if isinstance(exc, SerqError):
            return print_error(exc)
        raise
    finally:
        if progress:
            progress.close()
    if states_file is not None:
        try:
            states_file.commit()
        except OSError as exc:
            return _err(f"--states {args.states}: cannot write: {exc.strerror or exc}")
    rep = report.build(sim)
    if args.json:
        sys.stdout.write(report.to_json(rep) + "\n")
    elif not args.states or args.states != "-":
        sys.stdout.write(report.to_text(rep, getattr(sim, "report_notes", None)))
    if args.records:
        try:
            report.write_records(args.records, records)
        except OSError as exc:
            return _err(f"--records {args.records}: cannot write: {exc.strerror or exc}")
        except RuntimeError as exc:
            return _err(str(exc))
    if series is not None:
        try:
            series.plot(args.plot, title=os.path.basename(args.file))
        except SerqError as exc:
            return print_error(exc)
    return 0


"""`serq run` and `serq lockstep` (registered into python/serq/cli.py).

Exit codes: 0 success; 1 a lockstep divergence; 2 bad input (usage, program, settings) or a
run-time error of language.md §11.9 — always a one-paragraph message, never a traceback.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from serq.irfile import integer_option, number_option

DEFAULT_HORIZON = 600.0  # seconds of simulated time (docs/report.md)
DEFAULT_WARMUP_FRACTION = 0.1  # of the horizon


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run", help="simulate a program with the fast simulator and print its report",
        description="Simulate FILE (a .sq program or its .json IR) with live random streams "
                    f"(or a sessions file with --replay). Defaults: --horizon {DEFAULT_HORIZON:g}, "
                    f"--warmup {DEFAULT_WARMUP_FRACTION:.0%} of the horizon (0 for a batch workload), --seed 1.")
    _common(p)
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
    p.set_defaults(func=cmd_run)

    q = subparsers.add_parser(
        "lockstep", help="run serq_spec and serq_fast on one sampled workload, compare every step",
        description="Sample K sessions with `serq sample` semantics, replay them in the exact spec and the "
                    "fast simulator, and compare the state after every step (times to 1e-9 relative, "
                    "everything else exactly). Exit 1 and print both states at the first divergence.")
    _common(q)
    q.add_argument("--seed", type=integer_option, default=1, metavar="N", help="random seed (non-negative integer; default 1)")
    q.add_argument("--sessions", type=integer_option, required=True, metavar="K", help="number of sessions to sample")
    q.add_argument("--horizon", type=number_option, default=None, metavar="T",
                   help="stop both at this time (default: run to the end)")
    q.add_argument("--max-steps", type=integer_option, default=None, metavar="N",
                   help="stop after N steps (the count printed includes the initial state, step 0)")
    q.set_defaults(func=cmd_lockstep)


def _common(p) -> None:
    p.add_argument("file", metavar="FILE", help="a .sq program or a .json IR")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE",
                   help="bind an args.number input (repeatable; the last one wins)")


def _err(msg: str) -> int:
    print(f"serq: error: {msg}", file=sys.stderr)
    return 2


def load_ir(path: str, sets: list) -> dict:
    """The IR of FILE with its settings (serq.irfile: a checked `.json` IR or a compiled program);
    raises serq.errors.SerqError."""
    from serq.irfile import read_program

    return read_program(path, sets)


def default_warmup(ir: dict, horizon: float) -> float:
    """10 % of a finite horizon, so that statistics describe the steady state an open or closed
    workload settles into; but 0 for a `batch(n)` workload (and an infinite horizon): its sessions
    all start at time 0 and there is no steady state to wait for, so a warm-up would only discard
    the run (the replay and oracle examples finished before 10 % of 600 s and reported 0 turns)."""
    kind = (ir.get("workload", {}).get("arrival") or {}).get("kind")
    if not math.isfinite(horizon) or kind == "batch":
        return 0.0
    return DEFAULT_WARMUP_FRACTION * horizon


def _progress(now: float, horizon: float) -> None:
    if math.isfinite(horizon) and horizon > 0:
        frac = min(1.0, now / horizon)
        bar = "#" * int(frac * 30)
        sys.stderr.write(f"\r[{bar:<30}] {frac:6.1%}  t = {now:.1f} s")
    else:
        sys.stderr.write(f"\rt = {now:.1f} s")
    sys.stderr.flush()


def cmd_run(args) -> int:
    from serq_fast import report

    try:
        from serq.errors import SerqError
    except ImportError:  # pragma: no cover
        SerqError = ValueError  # noqa: N806
    if args.seed < 0:
        return _err("--seed must be a non-negative integer")
    horizon = DEFAULT_HORIZON if args.horizon is None else args.horizon
    if args.replay and args.horizon is None:
        horizon = math.inf
    if not (horizon > 0):
        return _err(f"--horizon must be positive, got {args.horizon}")
    if math.isinf(horizon) and not args.replay and args.arrivals is None:
        return _err("--horizon inf needs --arrivals N or --replay (the run would never end)")
    warmup = args.warmup
    if warmup is not None and (warmup < 0 or not math.isfinite(warmup) or warmup >= horizon):
        return _err(f"--warmup must be in [0, horizon), got {warmup:g}")
    if args.arrivals is not None and args.arrivals < 1:
        return _err("--arrivals must be a positive integer")
    for flag, path in (("--records", args.records), ("--states", args.states)):
        if path is not None and not path.strip():
            return _err(f"{flag} needs a file path, got an empty one")
    if args.records == "-":  # `--states -` is standard output; records are a table for a file
        return _err("--records - : records are written to a file (CSV, or Parquet for *.parquet), "
                    "not to standard output; give a path")
    if (args.records and args.states and args.states != "-"
            and os.path.realpath(args.records) == os.path.realpath(args.states)):
        return _err(f"--records and --states name the same file ({args.records}): one would overwrite "
                    "the other; give two paths")
    if args.json and args.states == "-":
        return _err("--json and --states - would both write to standard output: give --states a file")
    if args.arrivals is not None and args.replay:
        # the engine would stop the replay once N sessions had arrived and none was live
        return _err("--arrivals does not combine with --replay: the sessions file holds the arrivals "
                    "(sample N sessions with `serq sample FILE --seed S --sessions N`)")
    try:
        ir = load_ir(args.file, args.sets)
    except SerqError as exc:
        print(exc.render() if hasattr(exc, "render") else str(exc), file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        return _err(str(exc))
    if warmup is None:
        warmup = default_warmup(ir, horizon)
    if args.records is not None:
        try:
            report.check_records_path(args.records)
        except RuntimeError as exc:
            return _err(str(exc))
    replay = None
    if args.replay:
        from serq.sessionsfile import read_sessions_file

        try:
            replay = read_sessions_file(args.replay, ir)
        except SerqError as exc:
            print(exc.render(), file=sys.stderr)
            return 2
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
        from serq_fast.lockstep import dump_line

        states_cb = lambda line: states_out.write(dump_line(line) + "\n")  # noqa: E731
    records = [] if args.records else None
    progress = _progress if (sys.stderr.isatty() and not args.states) else None
    from serq_fast.engine import Sim

    try:
        sim = _simulate(Sim, ir, args, replay, horizon, warmup, states_cb, records, progress)
    except BaseException as exc:
        if states_file is not None:
            states_file.discard()  # never a states file that looks complete (and the old one kept)
            from serq.outputfile import is_write_failure

            if is_write_failure(exc):  # only the states are written during the run
                return _err(f"--states {args.states}: cannot write: {exc.strerror or exc}")
        raise
    if isinstance(sim, int):  # an error, reported
        if states_file is not None:
            states_file.discard()
        return sim
    if states_file is not None:
        try:
            states_file.commit()
        except OSError as exc:
            return _err(f"--states {args.states}: cannot write: {exc.strerror or exc}")
    if progress:
        sys.stderr.write("\r" + " " * 60 + "\r")
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
    return 0


def _simulate(Sim, ir, args, replay, horizon, warmup, states_cb, records, progress):
    """The finished Sim, or the exit code of a run-time error (or a malformed IR file) it reported."""
    from serq_fast.expr import RunError, name_files

    try:
        sim = Sim(ir, seed=args.seed if replay is None else int(replay.get("seed", args.seed)),
                  horizon=horizon, warmup=warmup, arrivals=args.arrivals, replay=replay,
                  states=states_cb, records=records, progress=progress)
        sim.run()
        return sim
    except RunError as exc:
        if progress:
            sys.stderr.write("\n")
        hint = ""
        if replay is not None and str(exc).startswith("replay:"):
            from serq.sessionsfile import sampling_difference

            hint = f" (the sessions file {args.replay} does not fit the program: "
            why = sampling_difference(replay, ir, os.path.basename(args.file))
            if why is not None:
                hint += why + ")"
            else:  # the file does not say how it was sampled
                hint += "was it sampled with --horizon T? replay with the same --horizon)"
        return _err(f"run-time error: {name_files(str(exc), ir.get('files') or [args.file])}{hint}")
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        if not args.file.endswith(".json"):
            raise      # the front-end's IR: a bug of ours, not bad input
        # an IR file made by hand: its declarations passed serq.irfile, a statement did not
        return _err(f"malformed IR in {args.file} ({type(exc).__name__}: {exc}); produce IR with "
                    "`serq ir FILE` (docs/ir.md gives the format)")


def cmd_lockstep(args) -> int:
    from serq_fast import lockstep

    return lockstep.main(args)

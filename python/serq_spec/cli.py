"""`serq sample` and `serq spec` (registered into the top-level `serq` command).

Bad input — an unreadable or malformed file, a sessions file that does not fit the program, a
construct the spec does not support, a run-time guard — prints a clear message and exits 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from fractions import Fraction
from typing import Any, Optional

from serq.errors import SerqError, print_error, source_names
from serq import irfile
from serq.irfile import add_program_args, integer_option
from serq.outputfile import is_write_failure, write_text
from serq.replayinputs import check_replay_inputs
from serq.sessionsfile import fit_hint, read_sessions_file
from serq.wire import Value, WireError, canonical_json, parse_decimal

from .claims import claim_results
from .config import Config
from .errors import SessionsFileError, SpecError
from .program import Program
from .sample import MAX_SESSIONS, sample
from .step import run
from .trace import state_text
from .workload import Workload


def register(subparsers: Any) -> None:
    sp = subparsers.add_parser(
        "sample", help="draw every random value of K sessions once (a sessions file)",
        description="Run FILE once with live random streams through the exact semantics and write every "
                    "value K sessions drew as a sessions file (docs/sessions.md), which `serq spec --sessions`, "
                    "`serq run --replay` and `serq sweep --replay` replay draw for draw.")
    add_program_args(sp)
    sp.add_argument("--seed", type=integer_option, required=True, help="random seed (a non-negative integer)")
    sp.add_argument("--sessions", type=integer_option, required=True, metavar="K", help="how many sessions to draw")
    sp.add_argument("-o", "--output", metavar="OUT", help="write here instead of standard output")
    sp.add_argument("--horizon", default="inf", metavar="T",
                    help="stop at T (for sessions that never end); replay with the same --horizon")
    sp.add_argument("--max-steps", type=integer_option, default=2_000_000, metavar="N",
                    help="give up after N steps of the sampling run (default 2000000)")
    sp.set_defaults(func=cmd_sample)

    pp = subparsers.add_parser(
        "spec", help="run the exact semantics on a sessions file, one JSON line per step",
        description="Replay a sessions file (serq sample) in the exact reference semantics over rationals "
                    "and print the observable state after every step, one JSON line each (docs/state.md); "
                    "exit 2 at a run-time error, with its FILE:LINE:COLUMN.")
    add_program_args(pp)
    pp.add_argument("--sessions", required=True, metavar="S.json", help="a sessions file (serq sample)")
    pp.add_argument("--max-steps", type=integer_option, default=None, metavar="N", help="stop after N steps")
    pp.add_argument("--warmup", default="0", metavar="T", help="warm-up time (observations before it are not recorded)")
    pp.add_argument("--horizon", default="inf", metavar="T", help="stop before the first event later than T")
    pp.add_argument("--gauges", action="store_true",
                    help="add every gauge's end-of-step value to the records (not part of lockstep)")
    pp.add_argument("--claims", action="store_true",
                    help="after the last step, print one more line: {\"claims\": [...]}, each claim's "
                         "result and counts (docs/report.md `claims`)")
    pp.add_argument("--check-invariants", dest="check", action="store_true", default=True,
                    help="check the invariants of docs/spec.md after every step (the default)")
    pp.add_argument("--no-check-invariants", dest="check", action="store_false", help="do not (faster)")
    pp.set_defaults(func=cmd_spec)


def fail(exc: SpecError, ir: Optional[dict], path: str) -> int:
    """Print EXC as every command prints an error (serq.errors.print_error); exit 2."""
    return print_error(located(exc, ir, path))


def time_arg(text: str, what: str) -> Value:
    if text == "inf":
        return float("inf")
    try:
        v = parse_decimal(text)
    except WireError:
        raise SpecError(f"{what} must be a number, got {text!r}")
    if v < 0:
        raise SpecError(f"{what} must be >= 0")
    return v


def located(exc: SpecError, ir: Optional[dict], path: str) -> SerqError:
    """EXC as the commands print it: its position named through the IR's file list (PATH, the
    file the CLI read, when the IR names none)."""
    return exc.located(source_names(ir.get("files"), path) if isinstance(ir, dict) else None)


def cmd_sample(args: argparse.Namespace) -> int:
    ir = None
    try:
        if args.sessions < 0:
            raise SpecError("--sessions must be >= 0")
        if args.sessions > MAX_SESSIONS:
            raise SpecError(f"--sessions {args.sessions}: at most {MAX_SESSIONS} sessions are sampled "
                            "(every session is kept in exact arithmetic: docs/sessions.md)")
        if args.seed < 0:
            raise SpecError("--seed must be a non-negative integer")  # as `serq run` and `serq lockstep`
        if args.max_steps < 0:
            raise SpecError("--max-steps must be >= 0")
        if args.output:  # before sampling, which may take long, not after it
            folder = os.path.dirname(args.output) or "."
            if os.path.isdir(args.output) or not os.path.isdir(folder):
                raise SpecError(f"cannot write the sessions file {args.output}: "
                                + ("it is a directory" if os.path.isdir(args.output)
                                   else f"{folder} is not an existing folder"))
        ir = irfile.load_ir(args.file, args.sets, args.profile)
        data = sample(ir, args.seed, args.sessions, os.path.basename(args.file), args.max_steps,
                      time_arg(args.horizon, "--horizon"))
        text = canonical_json(data) + "\n"
        if args.output:
            try:
                write_text(args.output, text)
            except OSError as exc:
                raise SpecError(f"cannot write the sessions file {args.output}: {exc.strerror or exc}")
        else:
            sys.stdout.write(text)
        return 0
    except SerqError as exc:
        return print_error(exc)
    except SpecError as exc:
        return fail(exc, ir, args.file)
    except (KeyError, TypeError, IndexError, WireError) as exc:
        return print_error(SerqError(f"malformed IR ({type(exc).__name__}: {exc})"))
    except Exception as exc:
        return internal(exc)


def internal(exc: Exception) -> int:
    """An unexpected exception is a defect of serq_spec: say so in one line (exit 2)."""
    if os.environ.get("SERQ_TRACEBACK") or isinstance(exc, BrokenPipeError) or is_write_failure(exc):
        raise exc  # a reader that stopped (`serq spec … | head`), a full disk: serq.cli says so
    return print_error(SerqError(f"internal error in serq_spec: {type(exc).__name__}: {exc} "
                                 "(set SERQ_TRACEBACK=1 for the traceback)"))


def prepare(ir: dict, workload: Workload, name: str, warmup: Value = Fraction(0),
            horizon: Value = float("inf")) -> Program:
    prog = Program(ir, name, workload=workload)
    prog.warmup = warmup
    prog.horizon = horizon
    return prog


def cmd_spec(args: argparse.Namespace) -> int:
    out = sys.stdout
    ir = None
    try:
        if args.max_steps is not None and args.max_steps < 0:
            raise SpecError("--max-steps must be >= 0")
        warmup, horizon = time_arg(args.warmup, "--warmup"), time_arg(args.horizon, "--horizon")
        if warmup > 0 and warmup >= horizon:   # as serq run: nothing would ever be recorded
            raise SpecError(f"--warmup must be below --horizon, got {args.warmup} >= {args.horizon}")
        ir = irfile.load_ir(args.file, args.sets, args.profile)
        sessions = read_sessions_file(args.sessions, ir)
        check_replay_inputs(sessions, ir, args.file, args.sessions)
        prog = prepare(ir, Workload.replay(sessions), os.path.basename(args.file), warmup, horizon)
        prog.emit_gauges = args.gauges

        def emit(cfg: Config, rec: dict, k: int) -> None:
            out.write(state_text(cfg, rec, k) + "\n")
        try:
            cfg = run(prog, max_steps=args.max_steps, on_step=emit, check=args.check)
        except SessionsFileError as exc:
            exc.message += fit_hint(exc.message, sessions, ir, os.path.basename(args.file))
            raise
        if args.claims:
            out.write(canonical_json({"claims": claim_results(cfg)}) + "\n")
        return 0
    except SerqError as exc:
        return print_error(exc)
    except SpecError as exc:
        out.flush()
        return fail(exc, ir, args.file)
    except (KeyError, TypeError, IndexError, WireError) as exc:
        return print_error(SerqError(f"malformed IR ({type(exc).__name__}: {exc})"))
    except Exception as exc:
        return internal(exc)

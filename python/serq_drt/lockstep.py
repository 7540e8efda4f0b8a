"""Lockstep: the exact spec (serq_spec) and the fast simulator (replay mode) on one sampled
workload, compared after every step (docs/state.md).

The comparison is the harness's one (serq_drt/compare.py) under its `WIRE_VS_FLOAT` rule:
structure, names, integers and list order must be equal; times and values (wire strings on the
spec side, floats on the fast side) must agree to 1e-9 relative. The first differing step is
reported with both states and the path of the difference.
"""

from __future__ import annotations

import json
import math
import os
from fractions import Fraction

from serq.errors import SerqError, print_error, source_names
from serq.irfile import load_ir
from serq_drt.compare import WIRE_VS_FLOAT, first_difference
from serq_fast.step import Sim
from serq_fast.expr import RunError
from serq_fast.trace import dump_line
from serq_spec.cli import prepare
from serq_spec.errors import SpecError
from serq_spec.sample import MAX_SESSIONS, sample
from serq_spec.step import run
from serq_spec.trace import state_text
from serq_spec.workload import Workload


class Divergence(Exception):
    def __init__(self, step: int, path: str, spec, fast, spec_line=None, fast_line=None):
        super().__init__(f"step {step}: {path}: spec {spec!r} != fast {fast!r}")
        self.step, self.path, self.spec, self.fast = step, path, spec, fast
        self.spec_line, self.fast_line = spec_line, fast_line


def compare_lines(spec_line: dict, fast_line: dict, step: int) -> None:
    d = first_difference(spec_line, fast_line, WIRE_VS_FLOAT)
    if d:
        raise Divergence(step, d.path or "(line)", d.a, d.b, spec_line, fast_line)


# ------------------------------------------------------------------ running both sides


def sample_sessions(ir: dict, seed: int, k: int, name: str = "program", horizon=math.inf) -> dict:
    return sample(ir, seed, k, name, 2_000_000, horizon)


def spec_lines(ir: dict, sessions: dict, name: str = "program", horizon=math.inf, max_steps=None) -> list:
    prog = prepare(ir, Workload.replay(sessions), name, Fraction(0), horizon if math.isinf(horizon) else Fraction(horizon))

    out: list = []
    try:
        run(prog, max_steps=max_steps, on_step=lambda cfg, rec, k: out.append(state_text(cfg, rec, k)), check=True)
    except SpecError as exc:
        exc.partial = out
        raise
    return out


def fast_lines(ir: dict, sessions: dict, horizon=math.inf, max_steps=None) -> list:
    out: list = []
    try:
        sim = Sim(ir, seed=int(sessions.get("seed", 1)), horizon=horizon, warmup=0.0, replay=sessions,
                  states=out.append, max_steps=max_steps)
        sim.run()
    except Exception as exc:
        exc.partial = out
        raise
    return out


def lockstep(ir: dict, seed: int, k: int, name: str = "program", horizon=math.inf, max_steps=None):
    """Sample, run both, compare. Returns the number of steps compared; raises Divergence."""
    sessions = sample_sessions(ir, seed, k, name, horizon)
    return compare_runs(ir, sessions, name, horizon, max_steps)


def compare_runs(ir: dict, sessions: dict, name: str = "program", horizon=math.inf, max_steps=None) -> int:
    """Run both engines on one sessions file and compare; the number of steps compared."""
    return compare_runs_counted(ir, sessions, name, horizon, max_steps)[0]


def compare_runs_counted(ir: dict, sessions: dict, name: str = "program", horizon=math.inf,
                         max_steps=None) -> tuple[int, int]:
    """compare_runs, returning (steps compared, steps the spec took): fewer are compared than the
    spec takes when the fast engine fast-forwards a run of decode steps and emits only its last."""

    spec_err = None
    try:
        spec = spec_lines(ir, sessions, name, horizon, max_steps)
    except SpecError as exc:  # a run-time error of the spec: the fast side must stop there too
        spec_err = exc
        spec = exc.partial
    fast_err = None
    try:
        fast = fast_lines(ir, sessions, horizon, max_steps)
    except Exception as exc:  # a fast-side failure is a divergence at the step it reached
        fast_err = exc
        fast = getattr(exc, "partial", [])
    # The fast engine may handle several identical steps at once (decode fast-forward): it emits
    # the line of the last one, numbered as the spec numbers it; compare the steps it emits, and
    # require its last step to be the spec's last.
    j = 0
    compared = 0
    for i, text in enumerate(spec):
        if j >= len(fast):
            line = json.loads(text)
            raise Divergence(i, "(missing step)", "a step", f"no step ({error_text(fast_err, ir, name)})" if fast_err else "no step",
                             line, None)
        if fast[j]["step"] > i:
            continue
        line = json.loads(text)
        compare_lines(line, fast[j], i)
        compared += 1
        j += 1
    if j < len(fast):
        raise Divergence(len(spec), "(extra step)", "no step", "a step", None, fast[j])
    # both engines stop at a run-time error, or neither; with the same located message (issue 13)
    if error_text(spec_err, ir, name) != error_text(fast_err, ir, name):
        raise Divergence(len(spec), "(run-time error)", error_text(spec_err, ir, name),
                         error_text(fast_err, ir, name), None, None)
    if spec_err is not None:
        raise spec_err      # the run's error, the same in both: the command reports it
    return compared, len(spec)


def run_error(exc: Exception, ir: dict, path: str) -> SerqError:
    """A run-time error of either engine as every command prints it (serq.errors): its position
    named through the IR's file list (PATH when the IR names none)."""
    if isinstance(exc, (SpecError, RunError)):
        return exc.located(source_names(ir.get("files"), path))
    return SerqError(f"{type(exc).__name__}: {exc}")   # a crash: say what


def error_text(exc: Exception | None, ir: dict, path: str) -> str | None:
    """`run_error`'s rendered line, None for no error."""
    return None if exc is None else run_error(exc, ir, path).render()


def main(args) -> int:
    for bad, what in ((args.sessions < 0, "--sessions must be >= 0"),
                      (args.sessions > MAX_SESSIONS, f"--sessions {args.sessions}: at most {MAX_SESSIONS} "
                       "sessions are sampled (every session is kept in exact arithmetic: docs/sessions.md)"),
                      (args.seed < 0, "--seed must be a non-negative integer"),
                      (args.max_steps is not None and args.max_steps < 0, "--max-steps must be >= 0"),
                      (args.horizon is not None and not args.horizon >= 0,  # NaN too
                       f"--horizon must be >= 0, got {args.horizon}")):
        if bad:
            return print_error(SerqError(what))
    try:
        ir = load_ir(args.file, args.sets, args.profile)
    except SerqError as exc:
        return print_error(exc)
    except (OSError, ValueError) as exc:
        return print_error(SerqError(str(exc)))
    horizon = math.inf if args.horizon is None else args.horizon

    try:
        name = os.path.basename(args.file)
        sessions = sample_sessions(ir, args.seed, args.sessions, name, horizon)
        n, taken = compare_runs_counted(ir, sessions, name, horizon, args.max_steps)
    except Divergence as d:
        print(f"lockstep: first divergence at step {d.step}: {d.path}: spec {d.spec!r} vs fast {d.fast!r}")
        print(f"  program {args.file} --seed {args.seed} --sessions {args.sessions}"
              + (f" --profile {args.profile}" if args.profile else "")
              + "".join(f" --set {s}" for s in args.sets))
        if d.spec_line is not None:
            print("spec: " + json.dumps(d.spec_line, sort_keys=True, separators=(",", ":")))
        if d.fast_line is not None:
            print("fast: " + dump_line(d.fast_line))
        return 1
    except (SpecError, RunError) as exc:
        return print_error(run_error(exc, ir, args.file))
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        if not args.file.endswith(".json"):
            raise      # the front-end's IR: a bug of ours, not bad input
        # an IR file made by hand: its declarations passed serq.irfile, a statement did not
        return print_error(SerqError(f"malformed IR in {args.file} ({type(exc).__name__}: {exc}); produce "
                                     "IR with `serq ir FILE` (docs/ir.md gives the format)"))
    # "N steps agree" alone read as the run's length: say how many the spec took when the fast
    # engine's decode fast-forward left some uncompared (docs/fast.md, speed trick 3)
    skipped = (f" (of the spec's {taken}; the rest lie inside decode runs the fast engine "
               f"fast-forwards, compared at their ends)" if taken > n else "")
    print(f"lockstep: {n} steps agree{skipped} ({args.file}, seed {args.seed}, {args.sessions} sessions)")
    return 0

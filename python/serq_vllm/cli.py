"""`serq oracle ...`: the vLLM oracle's commands (docs/oracle.md, docs/vllm-model.md).

    serq oracle compare A.json B.json [--all] [--context N]
    serq oracle vllm SCENARIO.json [-o TRACE.json]
    serq oracle render TRACE.json [--steps FROM:TO]
    serq oracle run SCENARIO.json [-o TRACE.json] [--engine auto|fast|spec]
    serq oracle agreement [DIR] [--engine …] [--json OUT] [--force]

Argument parsing and printing only: the work is in the modules of serq_vllm. Only the top-level
`serq` command loads this module (serq/cli.py names it); no module of serq_vllm imports it.

Exit codes: 0 success / traces agree; 1 traces diverge (or the driver or the model failed); 2 bad
input (unreadable or malformed file, invalid or unsupported scenario, missing oracle environment).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

from serq.errors import SerqError, print_error
from serq.irfile import integer_option
from serq.outputfile import write_text
from serq_vllm.compare import TraceError, compare_traces, load_trace, render_step
from serq_vllm.scenario import ScenarioError, load_scenario

VENV_ENV_VAR = "SERQ_VLLM_VENV"


def _err(msg: str, file: str | None = None) -> int:
    """Print an error as every serq command does (serq.errors.print_error: `FILE: error: …`, or
    `serq: error: …` without a file); exit 2."""
    return print_error(SerqError(msg, file))


# --------------------------------------------------------------------------------------------
# compare


def _load_trace(path: str) -> dict:
    """load_trace, with a truncated gzip stream (EOFError, which load_trace lets through) as the
    TraceError of any other unreadable trace."""
    try:
        return load_trace(path)
    except (EOFError, zlib.error) as exc:
        raise TraceError(f"{path}: broken gzip data: {exc}") from None


def _context_lines(trace: dict, step: int, n: int) -> list[str]:
    return [render_step(s) for s in trace["steps"] if step - n <= s["step"] <= step + n]


def _trace_err(exc: TraceError, path: str) -> int:
    """A trace that cannot be read, as `PATH: error: …` (its message starts with the path)."""
    text = str(exc)
    return _err(text.removeprefix(f"{path}: "), path) if text.startswith(f"{path}: ") else _err(text)


def cmd_compare(args: argparse.Namespace) -> int:
    path = args.a
    try:
        a = _load_trace(path)
        path = args.b
        b = _load_trace(path)
    except TraceError as exc:
        return _trace_err(exc, path)
    try:
        diffs = compare_traces(a, b, limit=None if args.all else 1)
    except (TypeError, KeyError, ValueError) as exc:  # a shape the checks above let through
        return _err(f"cannot compare {args.a} and {args.b}: malformed trace ({type(exc).__name__}: {exc})")
    if not diffs:
        print(
            f"agree: {args.a} and {args.b} ({len(a['steps'])} / {len(b['steps'])} step records, "
            f"{len(a['requests'])} requests)"
        )
        return 0
    first = diffs[0]
    print(f"DIVERGE: first difference: {first.describe('A', 'B')}")
    print(f"  A = {args.a}\n  B = {args.b}")
    if first.step is not None and args.context >= 0:
        for label, t in (("A", a), ("B", b)):
            print(f"--- {label} around step {first.step}")
            for line in _context_lines(t, first.step, args.context) or ["(no steps there)"]:
                print(f"  {line}")
    if args.all and len(diffs) > 1:
        print(f"--- all {len(diffs)} differences")
        for d in diffs:
            print(f"  {d.describe('A', 'B')}")
    return 1


# --------------------------------------------------------------------------------------------
# vllm


def source_tree(marker: str) -> Path | None:
    """The serQ source tree holding `marker` (a relative path): the one this package lives in
    (python/serq_vllm/cli.py -> repo) when it is a checkout, else the working directory if it is
    one, else None (an installed package has no tools/ or vectors/)."""
    here = Path(__file__).resolve()
    for cand in (here.parents[2], Path.cwd()):
        if (cand / marker).exists():
            return cand
    return None


def _venv_python(root: Path | None) -> Path | None:
    venv = os.environ.get(VENV_ENV_VAR)
    if venv:
        p = Path(venv)
    elif root is not None:
        p = root / "tools" / "vllm_oracle" / ".venv"
    else:
        return None
    py = p / "bin" / "python"
    return py if py.exists() else None


def cmd_vllm(args: argparse.Namespace) -> int:
    try:
        sc = load_scenario(args.scenario, allow_unknown_config=args.allow_unknown_knobs)
    except ScenarioError as exc:
        return _err(str(exc), args.scenario)
    root = source_tree("tools/vllm_oracle/driver.py")
    if root is None:
        return _err("cannot find tools/vllm_oracle/driver.py (run from the serQ source tree)")
    py = _venv_python(root)
    if py is None:
        where = os.environ.get(VENV_ENV_VAR) or str(root / "tools" / "vllm_oracle" / ".venv")
        return _err(
            f"the vLLM oracle environment is missing ({where}); build it with "
            f"`bash tools/vllm_oracle/setup.sh` (about 80 s, 1.5 GB; set {VENV_ENV_VAR} to use "
            "another location)"
        )
    cmd = [str(py), str(root / "tools" / "vllm_oracle" / "driver.py"), args.scenario]
    if args.output:
        cmd += ["-o", args.output]
    if args.allow_unknown_knobs:
        cmd.append("--allow-unknown-knobs")
    if args.quiet:
        cmd.append("--quiet")
    for w in sc.warnings if not args.quiet else ():
        print(f"{args.scenario}: warning: {w}", file=sys.stderr)
    try:
        proc = subprocess.run(cmd)
    except OSError as exc:
        return _err(f"cannot run {py}: {exc}")
    return 0 if proc.returncode == 0 else (2 if proc.returncode == 2 else 1)


# --------------------------------------------------------------------------------------------
# render


def _parse_range(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    lo, sep, hi = text.partition(":")
    try:
        a = int(lo) if lo else 0
        b = int(hi) if hi else (a if not sep else 1 << 62)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad step range {text!r} (use FROM:TO)") from None
    return a, b


def cmd_render(args: argparse.Namespace) -> int:
    try:
        t = _load_trace(args.trace)
        rng = _parse_range(args.steps)
    except TraceError as exc:
        return _trace_err(exc, args.trace)
    except argparse.ArgumentTypeError as exc:
        return _err(str(exc))
    for s in t["steps"]:
        if rng is None or rng[0] <= s["step"] <= rng[1]:
            print(render_step(s))
    return 0


# --------------------------------------------------------------------------------------------
# run: serQ's model of a scenario


def cmd_run(args: argparse.Namespace) -> int:
    # the model loads the front-end and both engines: only when a command runs it, so that
    # `serq --help` and `serq oracle compare` stay quick
    from serq_vllm.engine import ModelError
    from serq_vllm.model import run_scenario
    from serq_vllm.plan import Unsupported

    try:
        sc = load_scenario(args.scenario)
    except ScenarioError as exc:
        return _err(str(exc), args.scenario)
    try:
        trace = run_scenario(sc, args.engine)
    except Unsupported as exc:
        return _err(str(exc), args.scenario)
    except ModelError as exc:
        _err(f"the model failed: {exc}", args.scenario)
        return 1   # the model, not the input, failed
    text = json.dumps(trace, indent=1) + "\n"
    if args.output:
        try:
            write_text(args.output, text)
        except OSError as exc:
            return _err(f"cannot write {args.output}: {exc.strerror or exc}")
    else:
        sys.stdout.write(text)
    return 0


# --------------------------------------------------------------------------------------------
# agreement: every committed vector




def cmd_agreement(args: argparse.Namespace) -> int:
    from serq_vllm import agreement

    if args.dir:
        directory = Path(args.dir)
    else:
        root = source_tree("vectors/vllm")
        directory = (root or Path.cwd()) / "vectors" / "vllm"
    # bad arguments are refused before the run (minutes on the committed vectors), not after it
    names = agreement.vector_names(directory) if directory.is_dir() else []
    if not names:
        return _err(f"{directory}: no vectors there (DIR must be a folder holding "
                       "<name>.scenario.json files, each beside its <name>.trace.json or .trace.json.gz)")
    if args.json and (Path(args.json).is_dir() or not Path(args.json).resolve().parent.is_dir()):
        return _err(f"--json {args.json}: cannot write there (not a file in an existing folder)")
    rows = []
    for name in names:
        row = agreement.check_vector(directory, name, args.engine, getattr(args, "force", False))
        rows.append(row)
        extra = f" (needs {', '.join(row['needs'])})" if len(row.get("needs", ())) > 1 else ""
        if "forced" in row:
            extra += f" [forced: {row['forced']}]"
        print(f"{row['status']:<28} {name:<10} {row['seconds']:6.2f}s  {row['detail']}{extra}",
              flush=True)
    counts = agreement.status_counts(rows)
    print(f"--- {len(rows)} vectors: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    fc = agreement.forced_counts(rows)
    if fc:
        print("--- refused, then forced (features approximated): " + ", ".join(
            f"{s} -> {f} {v}" for (s, f), v in sorted(fc.items())))
    if args.json:
        try:
            write_text(args.json, json.dumps(rows, indent=1) + "\n")
        except OSError as exc:
            return _err(f"--json {args.json}: cannot write: {exc.strerror or exc}")
    return 0 if agreement.all_agree(rows) else 1


# --------------------------------------------------------------------------------------------


def register(subparsers) -> None:
    oracle = subparsers.add_parser(
        "oracle",
        help="the vLLM oracle: run the real scheduler on a scenario, compare traces",
        description="Scenario files, the real vLLM scheduler, and the trace comparison rule "
        "(docs/oracle.md).",
    )
    sub = oracle.add_subparsers(dest="oracle_command", metavar="SUBCOMMAND")

    def _help(args: argparse.Namespace) -> int:
        oracle.print_help(sys.stderr)
        return 2

    oracle.set_defaults(func=_help)

    p = sub.add_parser(
        "compare",
        help="compare two traces under the oracle rule (exit 1 on divergence)",
        description="Compare two traces: per step the scheduled (id, tokens) list, preempted, "
        "sorted finished ids and free blocks after schedule; per request the hit at admission, "
        "first-token and finish steps, preemptions and output length. Prints the first "
        "difference. Exit 0 agree, 1 diverge, 2 bad input.",
    )
    p.add_argument("a", metavar="A.json", help="trace (plain or .gz; full or compact form)")
    p.add_argument("b", metavar="B.json", help="trace to compare with A")
    p.add_argument("--all", action="store_true", help="list every difference, not just the first")
    p.add_argument(
        "--context", type=integer_option, default=2, metavar="N",
        help="rendered steps shown around the first divergent step (default 2; -1: none)",
    )
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "vllm",
        help="run the real vLLM scheduler on a scenario and write its trace",
        description="Runs tools/vllm_oracle/driver.py with the oracle virtualenv's python "
        f"(tools/vllm_oracle/.venv, or ${VENV_ENV_VAR}). Build it with tools/vllm_oracle/setup.sh.",
    )
    p.add_argument("scenario", metavar="SCENARIO.json", help="an oracle scenario (docs/oracle.md §3)")
    p.add_argument("-o", "--output", metavar="OUT", help="trace file (default: stdout)")
    p.add_argument("--allow-unknown-knobs", action="store_true",
                   help="accept unknown config keys (passed through to the trace)")
    p.add_argument("--quiet", action="store_true", help="no warnings or progress on stderr")
    p.set_defaults(func=cmd_vllm)

    p = sub.add_parser("render", help="print a trace one line per step",
                       description="Print a vLLM-style trace one line per step: time, tokens scheduled, running "
                                   "and waiting counts, free blocks, then each scheduled request as id:tokens "
                                   "(docs/oracle.md §5).")
    p.add_argument("trace", metavar="TRACE.json", help="a trace (plain or .gz), from serq oracle vllm or run")
    p.add_argument("--steps", metavar="FROM:TO", help="only these step numbers (inclusive)")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser(
        "run",
        help="run a scenario through serQ's vLLM model and write its trace",
        description="Map the scenario to one of serQ's vLLM programs (python/serq_vllm/programs/, "
        "docs/vllm-model.md), run it with the fast simulator (or the exact spec) and write a trace "
        "in the oracle format, to compare with `serq oracle compare`. Exit 0 ok, 1 model failure, "
        "2 bad or unsupported scenario (the message names the field or the missing feature).",
    )
    p.add_argument("scenario", metavar="SCENARIO.json", help="an oracle scenario (docs/oracle.md §3)")
    p.add_argument("-o", "--output", metavar="OUT", help="trace file (default: stdout)")
    p.add_argument("--engine", choices=("auto", "fast", "spec"), default="auto",
                   help="serq_fast (auto, the default) or serq_spec (exact, slower)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "agreement",
        help="run every committed vector through serQ's model and compare with vLLM's traces",
        description="For each DIR/<name>.scenario.json with a <name>.trace.json (default "
        "vectors/vllm/): `serq oracle run` + `serq oracle compare`; one line per vector "
        "(agree / diverge / refused:<feature> / error) and a summary. Exit 0 when nothing "
        "diverged or errored, 1 otherwise, 2 when DIR holds no vectors or --json cannot be written.",
    )
    p.add_argument("dir", nargs="?", default=None, metavar="DIR",
                   help="a folder of NAME.scenario.json beside NAME.trace.json (default vectors/vllm/)")
    p.add_argument("--engine", choices=("auto", "fast", "spec"), default="auto",
                   help="serq_fast (auto, the default) or serq_spec (exact, slower), as serq oracle run")
    p.add_argument("--json", metavar="OUT", help="also write the table as JSON")
    p.add_argument("--force", action="store_true",
                   help="also run each refused vector with its missing features approximated "
                   "(async as sync, cross-session sharing ignored, ...) and report whether it "
                   "agrees anyway: what each refusal protects against")
    p.set_defaults(func=cmd_agreement)

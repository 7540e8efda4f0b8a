"""`serq oracle ...`: compare traces and run the real vLLM scheduler on a scenario.

    serq oracle compare A.json B.json [--all] [--context N]
    serq oracle vllm SCENARIO.json [-o TRACE.json]
    serq oracle render TRACE.json [--steps FROM:TO]

Exit codes: 0 success / traces agree; 1 traces diverge (or the driver failed); 2 bad input
(unreadable or malformed file, invalid scenario, missing oracle environment).
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import zlib
from pathlib import Path

from serq.irfile import integer_option
from serq.oracle.compare import TraceError, compare_traces, load_trace, render_step
from serq.oracle.scenario import ScenarioError, load_scenario

#: Packages that add more `serq oracle` subcommands. Each listed module exposes
#: `register_oracle(oracle_subparsers)`. `serq.oracle.model` adds `serq oracle run` — serQ's own
#: model of a scenario, writing a trace in the same format (docs/vllm-model.md).
ORACLE_SUBCOMMAND_PROVIDERS: list[str] = ["serq.oracle.model"]

VENV_ENV_VAR = "SERQ_VLLM_VENV"


def _err(msg: str) -> None:
    print(f"serq oracle: {msg}", file=sys.stderr)


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


def cmd_compare(args: argparse.Namespace) -> int:
    try:
        a = _load_trace(args.a)
        b = _load_trace(args.b)
    except TraceError as exc:
        _err(str(exc))
        return 2
    try:
        diffs = compare_traces(a, b, limit=None if args.all else 1)
    except (TypeError, KeyError, ValueError) as exc:  # a shape the checks above let through
        _err(f"cannot compare {args.a} and {args.b}: malformed trace ({type(exc).__name__}: {exc})")
        return 2
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


def _repo_root() -> Path | None:
    """The source tree this package lives in (python/serq/oracle/cli.py -> repo), else cwd."""
    here = Path(__file__).resolve()
    for cand in (here.parents[3], Path.cwd()):
        if (cand / "tools" / "vllm_oracle" / "driver.py").is_file():
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
        _err(f"{args.scenario}: {exc}")
        return 2
    root = _repo_root()
    if root is None:
        _err("cannot find tools/vllm_oracle/driver.py (run from the serQ source tree)")
        return 2
    py = _venv_python(root)
    if py is None:
        where = os.environ.get(VENV_ENV_VAR) or str(root / "tools" / "vllm_oracle" / ".venv")
        _err(
            f"the vLLM oracle environment is missing ({where}); build it with "
            f"`bash tools/vllm_oracle/setup.sh` (about 80 s, 1.5 GB; set {VENV_ENV_VAR} to use "
            "another location)"
        )
        return 2
    cmd = [str(py), str(root / "tools" / "vllm_oracle" / "driver.py"), args.scenario]
    if args.output:
        cmd += ["-o", args.output]
    if args.allow_unknown_knobs:
        cmd.append("--allow-unknown-knobs")
    if args.quiet:
        cmd.append("--quiet")
    for w in sc.warnings if not args.quiet else ():
        _err(f"warning: {w}")
    try:
        proc = subprocess.run(cmd)
    except OSError as exc:
        _err(f"cannot run {py}: {exc}")
        return 2
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
    except (TraceError, argparse.ArgumentTypeError) as exc:
        _err(str(exc))
        return 2
    for s in t["steps"]:
        if rng is None or rng[0] <= s["step"] <= rng[1]:
            print(render_step(s))
    return 0


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
    p.add_argument("scenario", metavar="SCENARIO.json")
    p.add_argument("-o", "--output", metavar="OUT", help="trace file (default: stdout)")
    p.add_argument("--allow-unknown-knobs", action="store_true",
                   help="accept unknown config keys (passed through to the trace)")
    p.add_argument("--quiet", action="store_true", help="no warnings or progress on stderr")
    p.set_defaults(func=cmd_vllm)

    p = sub.add_parser("render", help="print a trace one line per step")
    p.add_argument("trace", metavar="TRACE.json")
    p.add_argument("--steps", metavar="FROM:TO", help="only these step numbers (inclusive)")
    p.set_defaults(func=cmd_render)

    # `serq oracle run` (serQ's own model) is contributed through ORACLE_SUBCOMMAND_PROVIDERS.
    for name in ORACLE_SUBCOMMAND_PROVIDERS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):
                continue
            raise
        module.register_oracle(sub)

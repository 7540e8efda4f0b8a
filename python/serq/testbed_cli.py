"""`serq testbed predict`: serQ's prediction of a measured testbed run, beside the measurement."""

from __future__ import annotations

import argparse
import json
import sys

from .errors import SerqError, print_error


def register(subparsers) -> None:
    p = subparsers.add_parser("testbed", help="compare serQ with runs of the real engine (docs/testbed.md)")
    sub = p.add_subparsers(dest="testbed_command", metavar="COMMAND")
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])
    q = sub.add_parser(
        "predict", help="predict a wall-clock testbed workload and compare with its measured requests",
        description="Run the replay program (examples/replay/vllm_replay.sq) on a wall-clock testbed "
                    "workload with a step-cost profile, and print predicted against measured TTFT, TPOT "
                    "and response per request (mean, p50, p90, p99, and per-request errors).")
    q.add_argument("workload", metavar="WORKLOAD.json", help="tools/vllm_testbed/workload.py scenario --clock wall")
    q.add_argument("--measured", required=True, metavar="REQUESTS.csv", help="the driver's NAME.requests.csv")
    q.add_argument("--profile", required=True, metavar="PROFILE", help="a profile file or a shipped profile's name")
    q.add_argument("--program", default=None, help="the replay program [examples/replay/vllm_replay.sq]")
    q.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE",
                   help="more settings of the program (the workload's own win over the profile's)")
    q.add_argument("--json", action="store_true", help="print the comparison as JSON")
    q.set_defaults(func=cmd_predict)


def cmd_predict(args: argparse.Namespace) -> int:
    from . import testbed
    from .irfile import parse_settings
    from .profilefile import resolve_profile

    try:
        profile = resolve_profile(args.profile)
        work = testbed.read_workload(args.workload)
        measured = testbed.read_measured(args.measured)
        program = args.program or testbed.REPLAY_PROGRAM
        pred = testbed.predict(work, profile["set"], program, parse_settings(args.sets))
    except SerqError as exc:
        return print_error(exc)
    cmp = testbed.compare(pred, measured)
    if args.json:
        print(json.dumps(cmp, indent=2, sort_keys=True))
    else:
        print(testbed.render(cmp, f"{work.name}: predicted ({profile['name']}) against measured ({args.measured})"))
    return 0

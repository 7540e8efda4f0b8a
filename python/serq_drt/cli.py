"""`serq lockstep` (registered into python/serq/cli.py): serq_spec and serq_fast on one sampled
workload, compared after every step by the harness (serq_drt/lockstep.py).

Exit codes: 0 every step agrees; 1 a divergence (both states printed); 2 bad input.
"""

from __future__ import annotations

from serq.irfile import integer_option, number_option
from serq_fast.cli import _common


def register(subparsers) -> None:
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


def cmd_lockstep(args) -> int:
    from serq_drt import lockstep  # imports both engines: only when the command runs

    return lockstep.main(args)

"""`serq fit STEPS.csv`: fit a step-cost model to measured steps and write it as a profile."""

from __future__ import annotations

import argparse
import json
import sys

from .fit import DEFAULT_MODEL, KINDS, FitError, fit_steps, loop_overhead, profile_for


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fit", help="fit a step-cost model to measured engine steps (a profile)",
        description="Fit a step-cost model, linear in its coefficients, to a CSV of measured steps "
                    "(tools/vllm_testbed/driver.py writes one); print the coefficients with 95 % "
                    "intervals and the held-out error per step kind, and write a profile that "
                    "`serq run --profile` reads (docs/profiles.md, docs/testbed.md).")
    p.add_argument("steps", metavar="STEPS.csv", nargs="+",
                   help="one row per step: the target and the features (several files are fitted together)")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"the cost as a sum of coefficient*columns terms [{DEFAULT_MODEL}]")
    p.add_argument("--target", default="cpu_s",
                   help="the column to fit: cpu_s (steadier on a loaded machine), wall_s, or duration_s [cpu_s]")
    p.add_argument("--robust", action="store_true", help="Huber-weighted least squares (outliers count less)")
    p.add_argument("--holdout", type=float, default=0.2, help="fraction of rows held out for the error [0.2]")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/held-out split [0]")
    p.add_argument("--name", default=None, help="the profile's name [the CSV's stem]")
    p.add_argument("-o", "--output", metavar="PROFILE.json", help="write the profile here (atomically)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON instead of the table")
    p.add_argument("--set-args", action="store_true", help="print the profile's settings as --set words")
    p.set_defaults(func=cmd_fit)


def cmd_fit(args: argparse.Namespace) -> int:
    try:
        fit = fit_steps(args.steps, model=args.model, target=args.target, robust=args.robust,
                        holdout=args.holdout, seed=args.seed)
        name = args.name or args.steps[0].rsplit("/", 1)[-1].split(".")[0]
        profile = profile_for(fit, args.steps, name, loop_overhead(args.steps))
    except FitError as exc:
        print(f"serq fit: error: {exc}", file=sys.stderr)
        return 2
    if args.output:
        from .profilefile import write_profile

        try:
            write_profile(args.output, profile)
        except OSError as exc:
            print(f"serq fit: error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    if args.set_args:
        print(" ".join(f"--set {k}={v}" for k, v in sorted(profile["set"].items())))
    elif args.json:
        print(json.dumps(profile, indent=2, sort_keys=True))
    else:
        print(render(fit))
    return 0


def render(fit) -> str:
    lines = [f"fit of {fit.target} = {fit.model}",
             f"  {fit.rows} steps: {fit.train_rows} fitted, {fit.test_rows} held out"
             + ("; Huber-weighted" if fit.robust else ""),
             "  coefficient        value        95% interval"]
    for t in fit.terms:
        lo, hi = fit.ci95[t.coef]
        lines.append(f"  {t.coef:<10} {fit.coef[t.coef]:>14.6g}   [{lo:.6g}, {hi:.6g}]   × {t.text()}")
    lines.append("  MAPE (held out)   " + "   ".join(
        f"{k}: {_pct(fit.mape.get(k))} ({fit.counts.get(k, 0)} steps)" for k in KINDS)
        + f"   all: {_pct(fit.mape.get('all'))}")
    return "\n".join(lines)


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"

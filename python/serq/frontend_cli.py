"""`serq check` and `serq ir`: the front-end's subcommands (registered by serq/cli.py)."""

from __future__ import annotations

import argparse
import json
import sys

from .errors import SerqError, print_error
from .irfile import add_program_args, load_with_profile, parse_settings
from .outputfile import is_write_failure


def _load(args: argparse.Namespace) -> dict:
    if args.file.endswith(".json"):  # the engines read FILE.json as an IR file (serq.irfile)
        raise SerqError("this is an IR file, not a program: `serq check` and `serq ir` read a .sq "
                        "program; `serq sample|spec|run|lockstep` take an IR file as it is", args.file)
    return load_with_profile(args.file, parse_settings(args.sets), args.profile)


def _guarded(fn, args: argparse.Namespace) -> int:
    try:
        return fn(args)
    except SerqError as e:
        return print_error(e)
    except BrokenPipeError:
        raise  # a reader that stopped (`serq ir … | head`) is no defect: serq.cli ends quietly
    except Exception as e:
        if is_write_failure(e):
            raise  # a full disk is no defect either: serq.cli says the write failed
        return print_error(SerqError(f"internal error in the front-end ({type(e).__name__}: {e}); please report it",
                                     args.file))


def _check(args: argparse.Namespace) -> int:
    ir = _load(args)
    print(f"OK: {len(ir['pools'])} pool(s), {len(ir['stages'])} stage(s), {len(ir['attrs'])} attribute(s), "
          f"{len(ir['blocks'])} block(s)")
    return 0


def _ir(args: argparse.Namespace) -> int:
    from .wire import canonical_json

    ir = _load(args)
    if args.pretty:
        text = json.dumps(ir, sort_keys=True, indent=2, ensure_ascii=False)
    else:
        text = canonical_json(ir)
    sys.stdout.write(text + "\n")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("check", help="parse and link a program; print a one-line summary",
                              description="Parse and link FILE (and the libraries it uses). Exit 0 and print a "
                                          "summary when it links; otherwise print FILE:LINE:COLUMN: error: … "
                                          "with the source line and a caret, and exit 2.")
    add_program_args(p, "a serQ program (.sq)")
    p.set_defaults(func=lambda a: _guarded(_check, a))

    p = subparsers.add_parser("ir", help="print the canonical IR of a program (docs/ir.md)",
                              description="Print the IR of FILE as canonical JSON (sorted keys, exact numbers). "
                                          "Errors as for `serq check`.")
    add_program_args(p, "a serQ program (.sq)")
    p.add_argument("--pretty", action="store_true", help="indent the JSON (not canonical)")
    p.set_defaults(func=lambda a: _guarded(_ir, a))

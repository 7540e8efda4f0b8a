"""The `serq` command: one entry point, each subcommand registered by the package that owns it.

Why a registry: the front-end, the exact spec, the fast simulator and the oracle each own their
subcommands, so each can grow without touching the others. A module listed here exposes
`register(subparsers)`, which adds its subcommands and sets `func` on each parser; `func(args)`
returns the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap

# (module, what it adds) in the order `serq --help` lists them.
SUBCOMMAND_MODULES = [
    "serq.frontend_cli",  # check, ir
    "serq_spec.cli",  # sample, spec
    "serq_fast.cli",  # run
    "serq_drt.cli",  # lockstep
    "serq_vllm.cli",  # oracle compare | vllm | render | run | agreement
    "serq.workflow_cli",  # sweep, capacity, plot
    "serq.traces",  # import
    "serq.profile_cli",  # profile
    "serq.fit_cli",  # fit
    "serq.testbed_cli",  # testbed predict
]


def import_optional(name: str):
    """The module `name`, or None when it (or the package holding it) is not written yet; any
    other import failure, such as a module it imports being missing, is raised."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            return None
        raise


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, wrapping at spaces only: its default also breaks after a hyphen, so
    `examples/multi-turn/vllm.sq` in a help text came out as `examples/multi-` and `turn/vllm.sq`
    on two lines, a path no one can paste."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False)


class Parser(argparse.ArgumentParser):
    """The parser of `serq` and, through argparse's add_subparsers (which makes subcommand parsers
    of the parent's class), of every subcommand: they all format help with HelpFormatter."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    from serq import __version__

    parser = Parser(
        prog="serq",
        description="serQ: simulate an LLM serving deployment and its workload, written as a program.",
    )
    parser.add_argument("--version", action="version", version=f"serq {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        module = import_optional(name)  # a subcommand package not written yet must not break the others
        if module is not None:
            module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        # building the parser imports every subcommand's module (~0.1 s): Ctrl-C there too is
        # an interruption, not a traceback
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            return 2
        from serq.errors import deep_recursion

        with deep_recursion():  # programs nested up to the parser's limit are run recursively too
            rc = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit: a full device is then reported like any error
        return rc
    except KeyboardInterrupt:
        print("serq: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _drop_stdout()
        return 0
    except OSError as exc:
        from serq.outputfile import is_write_failure

        if not is_write_failure(exc):
            raise
        _drop_stdout()
        where = f" to {exc.filename}" if exc.filename else ""
        print(f"serq: error: writing the output{where} failed: {exc.strerror or exc}", file=sys.stderr)
        return 2


def _drop_stdout() -> None:
    """Send what is still buffered for standard output nowhere, so that Python's own flush at
    exit does not fail a second time and print a traceback of its own."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout replaced (pytest's capture): nothing to do
        pass


if __name__ == "__main__":
    sys.exit(main())

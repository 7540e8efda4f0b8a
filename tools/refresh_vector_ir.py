#!/usr/bin/env python3
"""Regenerate `ir.json` next to every `program.sq` of the spec vectors (vectors/spec/*/).

The Lean side (`lake exe serq-vectors vectors/`, docs/lean.md) replays each vector from its IR,
which only the Python front-end can produce. Each `ir.json` is exactly what

    serq ir vectors/spec/<name>/program.sq > vectors/spec/<name>/ir.json

writes: the canonical JSON of the IR (sorted keys, exact numbers) and a newline, compiled with
no `--set` — tests/test_spec_vectors.py loads every vector with no settings too. The IR names
its file `program.sq` and embeds a declared trace, so the bytes do not depend on the directory
the command runs from.

    python3 tools/refresh_vector_ir.py            # rewrite every ir.json that differs
    python3 tools/refresh_vector_ir.py --check    # exit 1 and list the stale or missing ones
    python3 tools/refresh_vector_ir.py --root DIR # another vectors directory (default: vectors/spec)

tests/test_spec_vector_ir.py fails when a committed ir.json differs from what the front-end
produces now, so they cannot go stale silently.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

from serq.errors import SerqError  # noqa: E402
from serq.frontend import load_program  # noqa: E402
from serq.outputfile import write_text  # noqa: E402
from serq.wire import canonical_json  # noqa: E402

DEFAULT_ROOT = REPO / "vectors" / "spec"


def vector_dirs(root: Path) -> list[Path]:
    """Every directory directly under root that holds a program.sq, sorted by name."""
    return sorted(d for d in root.iterdir() if (d / "program.sq").is_file())


def ir_text(vector: Path) -> str:
    """The bytes `serq ir program.sq` prints for this vector (no settings)."""
    return canonical_json(load_program(str(vector / "program.sq"), {})) + "\n"


def refresh(root: Path, check: bool) -> int:
    stale = []
    for d in vector_dirs(root):
        try:
            want = ir_text(d)
        except SerqError as exc:
            print(f"{d / 'program.sq'}: {exc.render() if hasattr(exc, 'render') else exc}", file=sys.stderr)
            return 2
        target = d / "ir.json"
        have = target.read_text(encoding="utf-8") if target.exists() else None
        if have == want:
            continue
        stale.append(target)
        if not check:
            write_text(str(target), want)      # atomically: a killed refresh leaves no half file
    verb = "stale or missing" if check else "rewritten"
    for t in stale:
        print(f"{verb}: {t}")
    if check and stale:
        print(f"{len(stale)} ir.json file(s) differ from the front-end; run python3 tools/refresh_vector_ir.py",
              file=sys.stderr)
        return 1
    # say so on success too: a silent --check read as "did nothing"
    print(f"{len(vector_dirs(root)) - len(stale)} ir.json file(s) up to date" + (f", {len(stale)} rewritten" if stale else ""))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if any ir.json is stale or missing")
    ap.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="the vectors directory (default: vectors/spec)")
    args = ap.parse_args(argv)
    if not args.root.is_dir():
        print(f"{args.root}: not a directory", file=sys.stderr)
        return 2
    return refresh(args.root, args.check)


if __name__ == "__main__":
    sys.exit(main())

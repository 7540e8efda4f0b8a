"""`serq oracle agreement [DIR]`: run every committed vector through serQ's model and compare.

For each `<name>.scenario.json` beside a `<name>.trace.json` or `.trace.json.gz` (default: vectors/vllm/), run
`serq.oracle.model.run_scenario` and compare with the vLLM trace under the oracle rule
(docs/oracle.md). Each vector ends in one of:

- ``agree``     — the traces agree exactly;
- ``diverge``   — the model ran but the traces differ (first difference printed);
- ``refused:<feature>`` — the scenario needs a feature the model refuses (model.FEATURES);
- ``error``     — the model failed.

Prints one line per vector and a summary; `--json` writes the table. Exit 0 when nothing
diverged or errored, 1 otherwise, 2 when DIR holds no vectors or `--json` cannot be written.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

from serq.oracle.compare import compare_traces, load_trace, vector_trace_path
from serq.outputfile import write_text
from serq.oracle.scenario import ScenarioError, load_scenario


def vector_names(directory: Path) -> list[str]:
    return sorted(p.name[: -len(".scenario.json")] for p in directory.glob("*.scenario.json")
                  if vector_trace_path(directory, p.name[: -len(".scenario.json")]).exists())


def check_vector(directory: Path, name: str, engine: str = "auto", force: bool = False) -> dict:
    from serq.oracle.model import ModelError, Unsupported, run_scenario

    t0 = time.perf_counter()
    row = {"name": name}
    try:
        sc = load_scenario(directory / f"{name}.scenario.json")
        ours = run_scenario(sc, engine)
    except Unsupported as exc:
        row.update(status=f"refused:{exc.feature}", detail=exc.detail,
                   needs=[f for f, _ in exc.needs])
        if force:  # what the refusal protects against: approximate the features and compare
            try:
                forced = run_scenario(sc, engine, force=True)
            except Unsupported:
                row["forced"] = "not forceable"
            except Exception as exc2:
                row["forced"] = f"error: {exc2}"
            else:
                d = compare_traces(forced, load_trace(vector_trace_path(directory, name)), limit=1)
                row["forced"] = f"diverge: {d[0].describe('serQ', 'vLLM')}" if d else "agree"
    except (ModelError, ScenarioError) as exc:
        row.update(status="error", detail=str(exc))
    except Exception as exc:  # an engine crash: report it, go on with the next vector
        row.update(status="error", detail=f"{type(exc).__name__}: {exc}")
    else:
        ref = load_trace(vector_trace_path(directory, name))
        diffs = compare_traces(ours, ref, limit=1)
        if diffs:
            row.update(status="diverge", detail=diffs[0].describe("serQ", "vLLM"))
        else:
            row.update(status="agree", detail=f"{len(ref['steps'])} steps")
    row["seconds"] = round(time.perf_counter() - t0, 3)
    return row


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="serq oracle agreement")
    ap.add_argument("dir", nargs="?", default=None)
    ap.add_argument("--engine", choices=("auto", "fast", "spec"), default="auto")
    ap.add_argument("--json", metavar="OUT")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    return run(args)


def run(args) -> int:
    from serq.oracle.model import _repo_root

    directory = Path(args.dir) if args.dir else _repo_root() / "vectors" / "vllm"
    # bad arguments are refused before the run (minutes on the committed vectors), not after it
    names = vector_names(directory) if directory.is_dir() else []
    if not names:
        print(f"serq oracle agreement: {directory}: no vectors there (DIR must be a folder holding "
              "<name>.scenario.json files, each beside its <name>.trace.json or .trace.json.gz)",
              file=sys.stderr)
        return 2
    if args.json and (Path(args.json).is_dir() or not Path(args.json).resolve().parent.is_dir()):
        print(f"serq oracle agreement: --json {args.json}: cannot write there (not a file in an "
              "existing folder)", file=sys.stderr)
        return 2
    rows = []
    for name in names:
        row = check_vector(directory, name, args.engine, getattr(args, "force", False))
        rows.append(row)
        extra = f" (needs {', '.join(row['needs'])})" if len(row.get("needs", ())) > 1 else ""
        if "forced" in row:
            extra += f" [forced: {row['forced']}]"
        print(f"{row['status']:<28} {name:<10} {row['seconds']:6.2f}s  {row['detail']}{extra}",
              flush=True)
    counts = Counter(r["status"] for r in rows)
    print(f"--- {len(rows)} vectors: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if any("forced" in r for r in rows):
        fc = Counter((r["status"], r["forced"].split(":")[0]) for r in rows if "forced" in r)
        print("--- refused, then forced (features approximated): " + ", ".join(
            f"{s} -> {f} {v}" for (s, f), v in sorted(fc.items())))
    if args.json:
        try:
            write_text(args.json, json.dumps(rows, indent=1) + "\n")
        except OSError as exc:
            print(f"serq oracle agreement: --json {args.json}: cannot write: {exc.strerror or exc}",
                  file=sys.stderr)
            return 2
    return 0 if counts.get("diverge", 0) + counts.get("error", 0) == 0 else 1


def register(sub) -> None:
    p = sub.add_parser(
        "agreement",
        help="run every committed vector through serQ's model and compare with vLLM's traces",
        description="For each DIR/<name>.scenario.json with a <name>.trace.json (default "
        "vectors/vllm/): `serq oracle run` + `serq oracle compare`; one line per vector "
        "(agree / diverge / refused:<feature> / error) and a summary.",
    )
    p.add_argument("dir", nargs="?", default=None, metavar="DIR")
    p.add_argument("--engine", choices=("auto", "fast", "spec"), default="auto")
    p.add_argument("--json", metavar="OUT", help="also write the table as JSON")
    p.add_argument("--force", action="store_true",
                   help="also run each refused vector with its missing features approximated "
                   "(async as sync, cross-session sharing ignored, ...) and report whether it "
                   "agrees anyway: what each refusal protects against")
    p.set_defaults(func=run)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Regenerate the committed vLLM traces and report drift (runs under any Python 3.10+).

    python3 tools/vllm_oracle/regen.py             # check: exit 1 if any trace drifted
    python3 tools/vllm_oracle/regen.py --update    # also rewrite the traces that changed
    python3 tools/vllm_oracle/regen.py r0001 caps  # only these vectors

Every `vectors/vllm/<name>.scenario.json` is run through tools/vllm_oracle/driver.py with the
oracle venv's python (all in one process, so vLLM is imported once), and the new trace is
compared with the committed `<name>.trace.json` (or `<name>.trace.json.gz`):

- ``same``: equal in every field except `timing` (wall-clock numbers);
- ``fields``: equal under the comparison rule, but some uncompared field (time, kind, blocks,
  cached_blocks, prefix_cache, free after update, queue lengths, config, ...) changed;
- ``DRIFT``: different under the comparison rule (the first difference is printed);
- ``new``: no committed trace yet.

With --update, traces in states fields/DRIFT/new are rewritten; a `same` trace is left alone so
its committed timing does not churn. A gzipped trace stays gzipped; a new trace is written gzipped
with --gzip (reproducible bytes: no name, mtime 0).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "python"))

from serq.oracle.compare import compare_traces, load_trace, vector_trace_path  # noqa: E402


def venv_python() -> Path:
    venv = Path(os.environ.get("SERQ_VLLM_VENV", HERE / ".venv"))
    return venv / "bin" / "python"


def without_timing(t: dict) -> dict:
    return {k: v for k, v in t.items() if k != "timing"}


MISSING_VENV = 127


def run_driver(scenarios: list[Path], out_dir: Path, extra: list[str] = ()) -> int:
    """Run the driver on many scenarios in one process; MISSING_VENV if there is no venv."""
    py = venv_python()
    if not py.exists():
        print(
            f"regen: the oracle venv is missing ({py.parent.parent}); run tools/vllm_oracle/setup.sh",
            file=sys.stderr,
        )
        return MISSING_VENV
    cmd = [str(py), str(HERE / "driver.py"), "--quiet", "--out-dir", str(out_dir), *extra]
    cmd += [str(p) for p in scenarios]
    return subprocess.run(cmd).returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="vector names (default: all)")
    ap.add_argument("--vectors", default=str(REPO / "vectors" / "vllm"), help="vector directory")
    ap.add_argument("--update", action="store_true", help="rewrite traces that changed")
    ap.add_argument("--gzip", action="store_true", help="write new traces as <name>.trace.json.gz")
    args = ap.parse_args(argv)

    vdir = Path(args.vectors)
    scenarios = sorted(vdir.glob("*.scenario.json"))
    if args.names:
        want = set(args.names)
        scenarios = [p for p in scenarios if p.name[: -len(".scenario.json")] in want]
        missing = want - {p.name[: -len(".scenario.json")] for p in scenarios}
        if missing:
            print(f"regen: no such vectors: {', '.join(sorted(missing))}", file=sys.stderr)
            return 2
    if not scenarios:
        print(f"regen: no *.scenario.json in {vdir}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="serq-regen-") as tmp:
        tmpdir = Path(tmp)
        rc = run_driver(scenarios, tmpdir)
        if rc == MISSING_VENV:
            return 2
        counts = {"same": 0, "fields": 0, "DRIFT": 0, "new": 0, "FAILED": 0}
        for sp in scenarios:
            name = sp.name[: -len(".scenario.json")]
            fresh_p = tmpdir / f"{name}.trace.json"
            old_p = vector_trace_path(vdir, name)
            if not fresh_p.exists():
                counts["FAILED"] += 1
                print(f"FAILED  {name}: the driver wrote no trace")
                continue
            fresh = json.loads(fresh_p.read_text())
            if not old_p.exists():
                state, detail = "new", ""
            else:
                old = load_trace(old_p)
                diffs = compare_traces(old, fresh, limit=1)
                if diffs:
                    state, detail = "DRIFT", diffs[0].describe("committed", "fresh")
                elif without_timing(old) != without_timing(fresh):
                    changed = sorted(
                        k for k in set(old) | set(fresh)
                        if k != "timing" and old.get(k) != fresh.get(k)
                    )
                    state, detail = "fields", "uncompared fields changed in: " + ", ".join(changed)
                else:
                    state, detail = "same", ""
            counts[state] += 1
            if state != "same":
                print(f"{state:7} {name}{': ' + detail if detail else ''}")
            if args.update and state != "same":
                if state == "new" and args.gzip:
                    old_p = vdir / f"{name}.trace.json.gz"
                if old_p.name.endswith(".gz"):
                    old_p.write_bytes(gzip.compress(fresh_p.read_bytes(), 9, mtime=0))
                else:
                    old_p.write_text(fresh_p.read_text())
        summary = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
        print(f"regen: {len(scenarios)} vectors: {summary}" + (" (updated)" if args.update else ""))
        drift = counts["DRIFT"] + counts["fields"] + counts["new"] + counts["FAILED"]
        return 0 if (drift == 0 or (args.update and counts["FAILED"] == 0)) else 1


if __name__ == "__main__":
    sys.exit(main())

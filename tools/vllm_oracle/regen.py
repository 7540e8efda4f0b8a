#!/usr/bin/env python3
"""Regenerate the committed vLLM traces and report drift (runs under any Python 3.10+).

    python3 tools/vllm_oracle/regen.py             # check: exit 1 if any trace drifted
    python3 tools/vllm_oracle/regen.py --update    # also rewrite the traces that changed
    python3 tools/vllm_oracle/regen.py r0001 caps  # only these vectors
    python3 tools/vllm_oracle/regen.py --venv tools/vllm_oracle/.venv-0.33.0   # check another vLLM

Every `vectors/vllm/<name>.scenario.json` is run through tools/vllm_oracle/driver.py with the
oracle venv's python (all in one process, so vLLM is imported once), and the new trace is
compared with the committed `<name>.trace.json` (or `<name>.trace.json.gz`):

- ``same``: equal in every field except `timing` (wall-clock numbers);
- ``fields``: equal under the comparison rule, but some uncompared field (time, kind, blocks,
  cached_blocks, prefix_cache, free after update, queue lengths, config, ...) changed;
- ``DRIFT``: different under the comparison rule (the first difference is printed);
- ``new``: no committed trace yet.

The venv is `--venv DIR`, else `$SERQ_VLLM_VENV`, else tools/vllm_oracle/.venv (vLLM 0.31.0, the
version of the committed traces). Every trace records its `vllm_version`; a venv of another version
(tools/vllm_oracle/setup.sh 0.33.0) checks the committed traces against that version: the version
field is then left out of the `same`/`fields` comparison and reported once in the summary, and
--update refuses, so the committed vectors never mix versions.

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

from serq_vllm.compare import compare_traces, load_trace, vector_trace_path  # noqa: E402


def venv_dir(venv: str | os.PathLike | None = None) -> Path:
    """The oracle venv: the argument, else $SERQ_VLLM_VENV, else tools/vllm_oracle/.venv."""
    return Path(venv or os.environ.get("SERQ_VLLM_VENV") or HERE / ".venv")


def without(t: dict, keys: frozenset) -> dict:
    return {k: v for k, v in t.items() if k not in keys}


MISSING_VENV = 127


def run_driver(scenarios: list[Path], out_dir: Path, extra: list[str] = (),
               venv: str | os.PathLike | None = None) -> int:
    """Run the driver on many scenarios in one process; MISSING_VENV if there is no venv."""
    py = venv_dir(venv) / "bin" / "python"
    if not py.exists():
        print(
            f"regen: the oracle venv is missing ({py.parent.parent}); build it with "
            "tools/vllm_oracle/setup.sh [VERSION]",
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
    ap.add_argument("--venv", metavar="DIR",
                    help="oracle venv to run (default $SERQ_VLLM_VENV, else tools/vllm_oracle/.venv)")
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
        rc = run_driver(scenarios, tmpdir, venv=args.venv)
        if rc == MISSING_VENV:
            return 2
        counts = {"same": 0, "fields": 0, "DRIFT": 0, "new": 0, "FAILED": 0}
        fresh_versions: set[str] = set()
        old_versions: set[str] = set()
        results = []  # (name, state, fresh trace path, committed trace path)
        for sp in scenarios:
            name = sp.name[: -len(".scenario.json")]
            fresh_p = tmpdir / f"{name}.trace.json"
            old_p = vector_trace_path(vdir, name)
            if not fresh_p.exists():
                counts["FAILED"] += 1
                print(f"FAILED  {name}: the driver wrote no trace")
                continue
            fresh = json.loads(fresh_p.read_text())
            fresh_versions.add(fresh.get("vllm_version"))
            if not old_p.exists():
                state, detail = "new", ""
            else:
                old = load_trace(old_p)
                old_versions.add(old.get("vllm_version"))
                # Another vLLM version writes another version string in every trace; that is
                # the point of the check, not a field change, so it is reported once below.
                ignored = frozenset({"timing"} | (
                    {"vllm_version"} if old.get("vllm_version") != fresh.get("vllm_version") else set()))
                diffs = compare_traces(old, fresh, limit=1)
                if diffs:
                    state, detail = "DRIFT", diffs[0].describe("committed", "fresh")
                elif without(old, ignored) != without(fresh, ignored):
                    changed = sorted(
                        k for k in set(old) | set(fresh)
                        if k not in ignored and old.get(k) != fresh.get(k)
                    )
                    state, detail = "fields", "uncompared fields changed in: " + ", ".join(changed)
                else:
                    state, detail = "same", ""
            counts[state] += 1
            results.append((name, state, fresh_p, old_p))
            if state != "same":
                print(f"{state:7} {name}{': ' + detail if detail else ''}")
        summary = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
        versions = (f"vLLM {', '.join(sorted(map(str, fresh_versions)))} against committed "
                    f"{', '.join(sorted(map(str, old_versions))) or '-'}")
        print(f"regen: {len(scenarios)} vectors ({versions}): {summary}")
        if args.update and old_versions and old_versions != fresh_versions:
            print(f"regen: --update refused: this venv runs {versions}; the committed traces "
                  "stay at one version (use the venv of their version)", file=sys.stderr)
            return 2
        if args.update:
            for name, state, fresh_p, old_p in results:
                if state == "same":
                    continue
                if state == "new" and args.gzip:
                    old_p = vdir / f"{name}.trace.json.gz"
                if old_p.name.endswith(".gz"):
                    old_p.write_bytes(gzip.compress(fresh_p.read_bytes(), 9, mtime=0))
                else:
                    old_p.write_text(fresh_p.read_text())
            print(f"regen: updated {sum(1 for r in results if r[1] != 'same')} traces")
        drift = counts["DRIFT"] + counts["fields"] + counts["new"] + counts["FAILED"]
        return 0 if (drift == 0 or (args.update and counts["FAILED"] == 0)) else 1

if __name__ == "__main__":
    sys.exit(main())

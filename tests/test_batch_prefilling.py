"""`batch.prefilling`, the number of prefill chunks in an iteration (the testbed's fit has a cost
per chunk): the same in serq_spec and serq_fast, and live in the replay program's cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPLAY = ROOT / "examples" / "replay" / "vllm_replay.sq"
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "python")}


def serq(*args):
    return subprocess.run([sys.executable, "-m", "serq.cli", *map(str, args)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True)


def test_lockstep_agrees_with_a_per_chunk_cost():
    # fails when serq_fast counts something else (seeded: counting decodes diverges at step 6)
    r = serq("lockstep", REPLAY, "--set", "f_pre=0.01", "--sessions", 6, "--horizon", 100)
    assert r.returncode == 0 and "agree" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]


def test_the_term_reaches_the_clock():
    ttft = []
    for f in ("0", "0.01"):
        r = serq("run", REPLAY, "--set", f"f_pre={f}", "--json")
        assert r.returncode == 0, r.stderr
        ttft.append(json.loads(r.stdout)["client"]["ttft"]["mean"])
    # every turn has at least one prefill chunk, so each TTFT grows by at least 10 ms
    assert ttft[1] >= ttft[0] + 0.01 - 1e-12


def test_only_in_execute():
    from serq.errors import SerqError
    from serq.frontend import compile_source

    text = REPLAY.read_text().replace("tokens cap budget;", "tokens cap budget + batch.prefilling;")
    try:
        compile_source(text, str(REPLAY), {})
    except SerqError as exc:
        assert "batch.prefilling" in exc.message
    else:
        raise AssertionError("batch.prefilling accepted in `tokens cap`")

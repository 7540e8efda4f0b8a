"""Optional: rerun some committed vectors through the real vLLM scheduler.

Runs only with SERQ_ORACLE_LIVE=1 and the oracle venv built (tools/vllm_oracle/setup.sh);
otherwise it is skipped. `python3 tools/vllm_oracle/regen.py` is the full version of this check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from serq_vllm.compare import compare_traces, load_trace, vector_trace_path  # noqa: E402

VECTORS = ROOT / "vectors" / "vllm"
VENV_PY = Path(os.environ.get("SERQ_VLLM_VENV", ROOT / "tools" / "vllm_oracle" / ".venv")) / "bin" / "python"
NAMES = ["caps", "longchunk", "multiturn", "preempt", "reserve", "h_preempt_only", "h_async_multiturn",
         "h_idle_time", "h_stall", "r0001", "r0002", "r0003",
         # speculative decoding: the fake drafts and acceptances (docs/oracle.md §2.2)
         "h_spec_reject", "h_spec_async", "h_spec_lookahead_preempt"]

pytestmark = pytest.mark.skipif(
    os.environ.get("SERQ_ORACLE_LIVE") != "1" or not VENV_PY.exists(),
    reason="live vLLM check: set SERQ_ORACLE_LIVE=1 and build tools/vllm_oracle/.venv",
)


def test_live_driver_reproduces_committed_traces(tmp_path):
    scenarios = [str(VECTORS / f"{n}.scenario.json") for n in NAMES]
    cmd = [str(VENV_PY), str(ROOT / "tools" / "vllm_oracle" / "driver.py"), "--quiet",
           "--out-dir", str(tmp_path), *scenarios]
    subprocess.run(cmd, check=True, timeout=300)
    for n in NAMES:
        fresh = json.loads((tmp_path / f"{n}.trace.json").read_text())
        committed = load_trace(vector_trace_path(VECTORS, n))
        assert compare_traces(committed, fresh) == [], n
        fresh.pop("timing")
        committed.pop("timing")
        assert fresh == committed, n

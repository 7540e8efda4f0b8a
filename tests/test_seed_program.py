"""The seed's own program and library, exactly as printed in the seed file, check and link.

They are extracted at test time (never stored in the repository); skipped when ../shared is absent.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT
from serq.frontend import load_program


def test_seed_program_links(seed_tree):
    ir = load_program(str(seed_tree), {})
    assert ir["files"] == ["vllm.sq", "../../lib/vllm.sq"]
    assert [p["name"] for p in ir["pools"]] == ["kv", "reqs"]
    assert [s["name"] for s in ir["stages"]] == ["vllm", "tool"]
    assert ir["inputs"] == {"max_seqs": "16", "blocks": "10000", "chunk_cap": "inf", "Lambda": "3/10", "Z": "3"}
    assert ir["pools"][0]["cap"] == "160000" and ir["pools"][0]["block"] == "16"
    assert ir["pools"][1]["admitted_by"] == 0 and ir["stages"][0]["memory"] == 0


def test_seed_program_cli_check(seed_tree):
    r = subprocess.run([sys.executable, "-m", "serq.cli", "check", str(seed_tree)], capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OK: 2 pool(s), 2 stage(s), ")

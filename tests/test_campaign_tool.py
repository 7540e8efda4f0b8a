"""tools/vllm_oracle/campaign.py --from-kept: the model side of a campaign over the scenarios and
vLLM traces an earlier `--keep DIR` left, without running vLLM (no oracle venv needed)."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / "vectors" / "vllm"
sys.path.insert(0, str(ROOT / "tools" / "vllm_oracle"))

import campaign  # noqa: E402

# small committed vectors (a few steps each): two kept as found, one with its trace changed
AGREE = ("c2000_00005", "c2000_00076")
TAMPERED, NO_TRACE = "c2000_00037", "c2000_00075"


def _kept_dir(tmp_path: Path) -> Path:
    """A --keep folder: gzipped traces as committed, one plain trace that vLLM did not write
    (a step's free blocks changed), one scenario whose trace is missing (the driver crashed)."""
    kept = tmp_path / "kept"
    kept.mkdir()
    for name in (*AGREE, TAMPERED, NO_TRACE):
        shutil.copy(VECTORS / f"{name}.scenario.json", kept)
    for name in AGREE:
        shutil.copy(VECTORS / f"{name}.trace.json.gz", kept)
    t = json.loads(gzip.decompress((VECTORS / f"{TAMPERED}.trace.json.gz").read_bytes()))
    t["steps"][2]["free_blocks_after_schedule"] += 1
    (kept / f"{TAMPERED}.trace.json").write_text(json.dumps(t))
    return kept


def test_from_kept_counts_each_outcome_and_keeps_the_divergence(tmp_path, capsys):
    kept = _kept_dir(tmp_path)
    out, dd = tmp_path / "rows.json", tmp_path / "div"
    rc = campaign.main(["--from-kept", str(kept), "--engines", "fast", "--diverge-dir", str(dd),
                        "--json", str(out)])
    assert rc == 1  # a divergence and a vLLM crash
    status = {r["name"]: r["status"] for r in json.loads(out.read_text())}
    assert status == {AGREE[0]: "agree", AGREE[1]: "agree", TAMPERED: "diverge",
                      NO_TRACE: "vllm-crash"}
    diff = (dd / TAMPERED / "diff-fast.txt").read_text()
    assert "step 2" in diff and "free" in diff
    assert (dd / TAMPERED / f"{TAMPERED}.scenario.json").exists()
    printed = capsys.readouterr().out
    assert f"campaign kept in {kept}: 4 scenarios; vLLM not run" in printed
    assert "model [fast]: agree=2, diverge=1" in printed
    assert "traces=3" in printed and "vllm_crash=1" in printed


@pytest.mark.parametrize("extra", [["--seed", "51000"], ["--count", "3"], ["--keep", "x"],
                                   ["--engines", "none"]])
def test_from_kept_refuses_options_that_would_be_ignored(tmp_path, extra):
    kept = _kept_dir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        campaign.main(["--from-kept", str(kept), *extra])
    assert exc.value.code == 2


def test_from_kept_needs_scenarios(tmp_path):
    with pytest.raises(SystemExit) as exc:
        campaign.main(["--from-kept", str(tmp_path), "--engines", "fast"])
    assert exc.value.code == 2

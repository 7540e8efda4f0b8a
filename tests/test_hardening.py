"""Issue 13 (hardening): each defect of the hardening audit, as a user meets it: a command that
once ended in a traceback, an unlocated error, a hang or a silently wrong result. Every test here
failed on the code before its fix (the commit message of each fix says so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from serq.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").rglob("*.sq"))


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err, cap.err
    return rc, cap.out, cap.err


# -- D1: every shipped example runs at any horizon ------------------------------------------------

@pytest.mark.parametrize("horizon", ["1", "5", "20"])
@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_runs_at_any_horizon(capsys, example, horizon):
    """vllm_scenario.sq and vllm_request.sq ended in AttributeError when a request was still
    queued at the horizon: its admission amount reads a schedule `let`, read at the end outside
    any iteration."""
    rc, out, err = run(capsys, "run", ROOT / example, "--horizon", horizon)
    assert rc == 0, err
    assert "requests" in out or "stage" in out

"""Progress (serq.progress): drawn on a terminal only, never into a pipe or the JSON report."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from serq.progress import CountProgress, RunProgress, run_progress

ROOT = Path(__file__).resolve().parents[1]
VLLM = str(ROOT / "examples" / "multi-turn" / "vllm.sq")


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_bars_draw_on_a_terminal_only():
    assert run_progress(io.StringIO()) is None
    tty = Tty()
    bar = run_progress(tty)
    assert isinstance(bar, RunProgress)
    bar(30.0, 60.0)
    bar.close()
    assert "30.0" in tty.getvalue()
    quiet = io.StringIO()
    c = CountProgress(4, "sweep", stream=quiet)
    c.update()
    c.close()
    assert quiet.getvalue() == ""
    loud = Tty()
    c = CountProgress(4, "sweep", stream=loud, done=1)
    c.update()
    c.close()
    assert "sweep" in loud.getvalue() and "/4" in loud.getvalue()


def test_a_run_in_a_pipe_writes_no_progress():
    done = subprocess.run([sys.executable, "-m", "serq.cli", "run", VLLM, "--horizon", "20", "--json"],
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "python"), "PATH": ""})
    assert done.returncode == 0 and done.stderr == "" and done.stdout.startswith("{")

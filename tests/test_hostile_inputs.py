"""Issue 18 hardening: the defects the fuzz campaign and hand-written hostile inputs found in the
constructs of this round (flows, `share`, an engine's estimates, K's step stage) and in what they
touch. Every test here failed on the code before its fix (the fix's commit message says so)."""

from __future__ import annotations

import json

import pytest

from serq.cli import main


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err and "internal error" not in cap.err, cap.err
    return rc, cap.out, cap.err


# -- a request block with fewer than two parameters: no output length, so no `tpot` -------------

def _request_program(params: str, args: str) -> str:
    return f"""
fn main() {{
  device acc {{ kv cap 1024; }}
  pool kv on acc {{ block 16; }}
  engine eng on acc {{
    reqs cap 8;
    tokens cap 256;
    request ({params}) {{ prefill (40) growing kv; }}
    schedule {{ advance running; admit waiting taking reqs (1), kv (40); }}
    execute (0.001);
  }}
  pool reqs on eng {{ queue fifo; }}
  workload {{ arrive poisson(2); turn {{ set a = ceil(~uniform(10, 50)); }} }}
  server {{ eng ({args}); }}
}}
"""


@pytest.mark.parametrize("params,args", [("prompt", "a"), ("", "")])
def test_request_block_without_an_output_parameter(tmp_path, capsys, params, args):
    """`request (prompt) { … }` ended `serq sample` / `serq spec` in "malformed IR (TypeError)" and
    `serq run` in a traceback: the request mark's `output` is null when the block has fewer than
    two parameters (docs/ir.md `request`). Both engines now record `ttft` and `response` and no
    `tpot`, and agree step by step."""
    prog = tmp_path / "p.sq"
    prog.write_text(_request_program(params, args))
    sessions = tmp_path / "s.json"
    rc, _, err = run(capsys, "sample", prog, "--seed", "1", "--sessions", "4", "-o", sessions)
    assert rc == 0, err
    rc, out, err = run(capsys, "spec", prog, "--sessions", sessions)
    assert rc == 0, err
    rc, out, err = run(capsys, "lockstep", prog, "--seed", "1", "--sessions", "6")
    assert rc == 0 and "agree" in out + err, err
    rc, out, err = run(capsys, "run", prog, "--horizon", "20", "--json")
    assert rc == 0, err
    client = json.loads(out)["client"]
    assert client["ttft"]["count"] > 0 and client["tpot"]["count"] == 0, client


# -- closed(n) whose sessions take no time: time never advances ------------------------------------

def test_closed_workload_of_sessions_that_take_no_time(tmp_path):
    """Found by the `constructs` fuzz target (`observe o = price(f, 1, 2);` as the whole server
    under `closed(2)`): `serq run` never returned, replacing ended sessions at t = 0 forever. Now a
    located run-time error (§11.9). Run as a process with a timeout, so that the hang of the
    code before the fix fails the test instead of stopping the suite."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    prog = tmp_path / "p.sq"
    prog.write_text("fn main() {\n  stage f : fifo;\n  workload { arrive closed(2); }\n"
                    "  server { observe o = price(f, 1, 2); }\n}\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "python"))
    p = subprocess.run([sys.executable, "-m", "serq.cli", "run", str(prog), "--horizon", "3"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith(f"{prog}:3:3: error: `arrive closed(2)`: ") and "never advances" in p.stderr, p.stderr

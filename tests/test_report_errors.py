"""`serq run` bad input (issue 4 "Done when"): unknown `--set` names, bad settings, and every run-time
guard of docs/language.md §11.9 reachable from a program — a one-line message, exit 2, no traceback,
starting with the program position as FILE:LINE:COLUMN: error:."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from serq.cli import main

ROOT = Path(__file__).resolve().parents[1]
VLLM = str(ROOT / "examples" / "multi-turn" / "vllm.sq")
MM1 = str(ROOT / "examples" / "single-turn" / "mm1.sq")

ENGINE_COST_0 = """
fn main() {
  device acc { kv cap 64 * 16; }
  pool kv on acc { block 16; evict lru; preempt lifo; }
  engine eng on acc {
    reqs cap 4;
    tokens cap 16;
    request (prompt, output) {
      prefill (prompt) growing kv;
      decode (output - 1) growing kv;
    }
    schedule {
      advance running;
      admit waiting taking reqs (1), kv (min(prompt, budget_left(eng)));
    }
    execute (0);
  }
  pool reqs on eng { queue fifo; }
  workload { arrive poisson(1); }
  server { eng (20, 3); }
}
"""

GUARDS = {
    # an iteration with tokens that costs 0
    "cost-0": (ENGINE_COST_0, "an iteration with 16 tokens costs 0"),
    # a renewal gap <= 0
    "renewal-gap": ("""
fn main() {
  stage s : fifo(1);
  workload { arrive renewal(~uniform(-1, 1)); }
  server { run s (1); }
}""", "a renewal gap must be positive"),
    # negative amounts: work, units
    "negative-work": ("""
fn main() {
  stage s : fifo(1);
  workload { arrive poisson(1); }
  server { run s (~uniform(-2, 1)); }
}""", "negative work"),
    "negative-units": ("""
fn main() {
  pool m { cap 10; }
  stage s : delay;
  workload { arrive poisson(1); }
  server { set u = ~uniform(-3, 3); hold m (u) { run s (1); } }
}""", "p.sq:6:37: error: a negative amount for pool m"),
    # an index out of range
    "index": ("""
fn main() {
  stage rep[2] : fifo(1);
  workload { arrive poisson(1); }
  server { run rep[serial] (1); }
}""", "index 2.0 is not a whole number in 0..1"),
    # a guard that is not 0/1
    "guard": ("""
fn main() {
  stage s : fifo(1);
  workload { arrive poisson(1); }
  server { set x = ~uniform(0, 3); branch (floor(x)) { run s (1); } }
}""", "a branch guard must be 0 or 1"),
    # a session made ready 1000 times in one instant (zero work completes at once and yields)
    "ready-1000": ("""
fn main() {
  stage s : delay;
  workload { arrive batch(1); session { turn; loop { run s (serial * 0); } } }
}""", "became ready 1000 times"),
}


def _run(capsys, *argv):
    rc = main(["run", *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.mark.parametrize("name", sorted(GUARDS))
def test_run_time_guard_exit_2(capsys, tmp_path, name):
    text, needle = GUARDS[name]
    f = tmp_path / "p.sq"
    f.write_text(text)
    rc, out, err = _run(capsys, str(f), "--horizon", "100")
    assert rc == 2, err
    # located as the front-end's errors: FILE:LINE:COLUMN: error: message (issue 13)
    assert re.match(rf"{re.escape(str(f))}:\d+:\d+: error: ", err) and needle in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert out == ""


@pytest.mark.parametrize("argv,needle", [
    ([VLLM, "--set", "nope=3"], "nope"),
    ([VLLM, "--set", "blocks"], "NAME=VALUE"),
    ([VLLM, "--set", "blocks=lots"], "blocks"),
    ([VLLM, "--horizon", "-5"], "--horizon must be positive"),
    ([VLLM, "--horizon", "0"], "--horizon must be positive"),
    ([VLLM, "--horizon", "-0.0"], "--horizon must be positive"),  # nan: refused by argparse (test_hardening)
    ([VLLM, "--horizon", "inf"], "--arrivals N or --replay"),
    ([VLLM, "--warmup", "-1"], "--warmup"),
    ([VLLM, "--seed", "-3"], "--seed"),
    ([MM1, "--arrivals", "0"], "--arrivals must be a positive integer"),
    ([str(ROOT / "no_such_file.sq")], "no_such_file.sq"),
])
def test_bad_settings_exit_2(capsys, argv, needle):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2, err
    assert needle in err and "Traceback" not in err, err

"""`budget_left(E)` read outside E's admission (docs/language.md §4.4, §11.6): `max(0, B − Σ want)` over
the residents for the next iteration, where a prefill's want is capped by the `advance` statement's
`each at most` (a decode wants 1). The exact value in serq_spec, and serq_fast in lockstep with it."""

from __future__ import annotations


import pytest

pytest.importorskip("serq_spec.step")

from serq.frontend import compile_source
from serq_drt.lockstep import lockstep, sample_sessions, spec_lines

# Session 0 arrives at 1.5 with a prompt of 40 tokens; the engine serves at most EACH of it per
# iteration (iteration time 1). Session 1 arrives at 3, in the middle of the second iteration, and
# reads budget_left(eng) outside the admission: 16 − min(40 − 4, EACH) = 12 with EACH = 4.
PROGRAM = """
fn main() {
  device acc { kv cap 64 * 16; }
  pool kv on acc { block 16; evict lru; preempt lifo; }
  engine eng on acc {
    reqs cap 16;
    tokens cap 16;
    request (prompt, output) {
      prefill (prompt) growing kv;
      decode (output - 1) growing kv;
    }
    schedule {
      advance running each at most (EACH);
      admit waiting taking reqs (1), kv (min(prompt, budget_left(eng)));
    }
    execute (1);
  }
  pool reqs on eng { queue fifo; }
  workload { arrive renewal(1.5); }
  server {
    observe outside = budget_left(eng);
    eng (40, 3);
  }
}
"""


def outside_values(each: str, k: int = 2):
    ir = compile_source(PROGRAM.replace("EACH", each), "t.sq", {})
    sessions = sample_sessions(ir, 0, k, "t.sq")
    import json

    lines = [json.loads(x) for x in spec_lines(ir, sessions, "t.sq", float("inf"), None)]
    return [(o[1], o[4]) for x in lines for o in x["records"]["observations"] if o[0] == "outside"]


def test_spec_caps_each_prefill_want_by_the_chunk_cap():
    # session 0 reads an empty engine: the whole budget; session 1 reads 16 − min(36 left, 4) = 12
    assert outside_values("4") == [(0, "16"), (1, "12")]
    # without a cap the whole remainder (40 − 16 = 24) is wanted: nothing is left
    assert outside_values("inf") == [(0, "16"), (1, "0")]


@pytest.mark.parametrize("each", ["4", "7", "inf"])
def test_fast_agrees_with_spec(each):
    ir = compile_source(PROGRAM.replace("EACH", each), "t.sq", {})
    assert lockstep(ir, 0, 4, "t.sq") > 0

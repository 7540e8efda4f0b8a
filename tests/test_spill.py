"""Offload tiers, `spill Q via S (w) when (c);` (docs/language.md §11.8.1): the link errors, each at
its FILE:LINE:COLUMN, the run-time error of a bad copy work in both engines, and a program without
`spill` whose IR has no trace of it. The rule vector is vectors/spec/spill_load_back; lockstep in
tests/test_lockstep_spill.py and tests/test_lockstep_random.py."""

from __future__ import annotations

import json

import pytest

from conftest import compile_err, compile_ok
from serq_drt.lockstep import compare_runs, sample_sessions, spec_lines
from serq_spec.errors import SpecError

PROGRAM = """fn main() {
  pool kv { cap 8; block 2; spill host via link (size / 2) when (1); }
  pool host { cap 8; block 2; }
  stage link : fifo;
  stage work : delay;
  workload { arrive batch(2); session { turn; turn; } }
  server {
    hold kv (4) { observe hit = cached; run work (1); } cache (4);
  }
}
"""


# `spill` on a pool array (docs/language.md §11.8.1): member k spills to host[k] over the shared link
ARRAY = """fn main() {
  device gpu[2] { kv cap 8; }
  pool kv[2] on gpu[j] { block 2; spill host via link (size / 2) when (1); }
  pool host[2] { cap 8; block 2; }
  stage link : fifo;
  stage work : delay;
  workload { arrive batch(2); session { turn; turn; } }
  server {
    hold kv[serial] (4) { observe hit = cached; run work (1); } cache (4);
  }
}
"""


def marked(old: str, new: str) -> str:
    assert old in PROGRAM, old
    return PROGRAM.replace(old, new, 1)


def locate(text: str) -> tuple[str, int, int]:
    i = text.index("@@")
    clean = text[:i] + text[i + 2:]
    return clean, clean.count("\n", 0, i) + 1, i - (clean.rfind("\n", 0, i) + 1) + 1


CASES = {
    "not when": (marked("when (1)", "@@whenever (1)"), "expected `when`"),
    "itself": (marked("spill host", "spill @@kv"), "cannot spill to itself"),
    "unknown tier": (marked("spill host", "spill @@hst"), "unknown pool `hst`"),
    "stage as tier": (marked("spill host", "spill @@work"), "`work` is a stage, not a pool"),
    "held tier": (marked("hold kv (4)", "@@hold host (4)"), "is the `spill` tier of another pool"),
    "released tier": (marked("run work (1); }", "run work (1); @@release host; }"), "is the `spill` tier"),
    "cycle": (marked("pool host { cap 8; block 2; }", "pool host { cap 8; block 2; spill kv via link (1) when (1); }")
              .replace("pool kv { cap 8; block 2; spill", "pool kv { cap 8; block 2; @@spill"), "form a cycle: kv → host → kv"),
    "blocks differ": (marked("spill host", "spill @@host").replace("pool host { cap 8; block 2; }",
                                                                 "pool host { cap 8; block 4; }"),
                      "give both the same `block`"),
    "engine link": (marked("spill host via link", "spill host via @@eng").replace(
        "  stage link : fifo;", "  stage link : fifo;\n  device d { }\n  engine eng on d { tokens cap 4; "
        "schedule { advance running; } execute (1); }"), "is an engine"),
    "context variable elsewhere": (marked("(size / 2)", "(size / 2 + @@waited)"), "`waited`"),
    # a content-addressed tier needs both pools `share content` (docs/content.md §6)
    "content pool over a plain tier": (marked("spill host", "spill @@host").replace("when (1); }", "when (1); share content; }"),
                                       "the tier `host` of the `share content` pool `kv` must be `share content` too"),
    "plain pool over a content tier": (marked("spill host", "spill @@host").replace(
        "pool host { cap 8; block 2; }", "pool host { cap 8; block 2; share content; }"),
        "the tier `host` is a `share content` pool but `kv` is not"),
    "chain of content tiers": (marked("spill host", "spill @@host").replace("when (1); }", "when (1); share content; }")
                               .replace("pool host { cap 8; block 2; }", "pool host { cap 8; block 2; share content; "
                                        "spill disk via link (1) when (1); }\n  pool disk { cap 8; block 2; share content; }"),
                               "a chain of content tiers is not supported"),
    "array over one tier": (ARRAY.replace("spill host", "spill @@host").replace("pool host[2]", "pool host"),
                            "needs a tier array of 2 (member k spills to member k): `host` is a single pool"),
    "array over a longer tier": (ARRAY.replace("spill host", "spill @@host").replace("pool host[2]", "pool host[3]"),
                                 "`host` is an array of 3"),
    "array tier with an index": (ARRAY.replace("spill host", "spill @@host[0]"), "without an index"),
    "array over a longer link": (ARRAY.replace("via link", "via @@link").replace("stage link :", "stage link[3] :"),
                                 "the link array `link` has 3 members"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_link_error_is_located(case):
    text, fragment = CASES[case]
    clean, line, col = locate(text)
    e = compile_err(clean)
    assert fragment in e.message, e.message
    assert (e.file, e.line, e.column) == ("t.sq", line, col), (e.line, e.column, e.message)


def test_ir_of_a_spilling_pool():
    ir = compile_ok(PROGRAM)
    spill = ir["pools"][0]["spill"]
    assert (spill["pool"], spill["stage"], spill["at"]) == (1, 0, [0, 2, 29])
    assert spill["when"] == {"k": "num", "v": "1"}
    assert "spill" not in ir["pools"][1]


def test_a_program_without_spill_has_no_spill_keys():
    ir = compile_ok(PROGRAM.replace(" spill host via link (size / 2) when (1);", ""))
    assert "spill" not in json.dumps(ir)


def test_negative_copy_work_is_the_same_located_error_in_both_engines():
    """A copy's work below 0 is a run-time error of the `spill` clause, at its location, worded
    alike by the spec and the fast engine (compare_runs raises a Divergence when they differ)."""
    ir = compile_ok(PROGRAM.replace("(size / 2)", "(1 - size)").replace("cap 8; block 2; spill", "cap 4; block 2; spill")
                    .replace("arrive batch(2)", "arrive batch(3)"))
    sessions = {"format": "serq-sessions/1", "program": "t.sq", "seed": 0, "inputs": {}, "arrivals": [],
                "machine": [], "trace_picks": [],
                "sessions": [{"serial": k, "init": [], "session": [], "turns": [[], []]} for k in range(3)]}
    with pytest.raises(SpecError) as info:
        compare_runs(ir, sessions, "t.sq")
    assert str(info.value) == "t.sq:2:29: error: pool kv: the work of `spill` must be finite and >= 0, got -1.0"


def test_ir_of_a_spilling_pool_array():
    """Member k spills to host[k]; one link shared, or member k's own link of a link array."""
    ir = compile_ok(ARRAY)
    assert [(p["name"], p["spill"]["pool"], p["spill"]["stage"]) for p in ir["pools"][:2]] == [("kv[0]", 2, 0), ("kv[1]", 3, 0)]
    ir = compile_ok(ARRAY.replace("stage link :", "stage link[2] :"))
    assert [p["spill"]["stage"] for p in ir["pools"][:2]] == [0, 1]


CONTENT_ARRAY = """fn main() {
  device gpu[2] { kv cap 8; }
  pool kv[2] on gpu[j] { block 2; share content; spill host via link (size / 2) when (1); }
  pool host[2] { cap 8; block 2; share content; }
  stage link : fifo;
  stage work : delay;
  workload { arrive batch(4); session { turn; tool (1); turn; tool (1); turn; } }
  server {
    hold kv[serial - 2 * floor(serial / 2)] (2 + 2 * turn_no) content (0, 0, serial) {
      observe hit = cached; run work (1);
    } cache (0);
  }
}
"""


def test_content_pool_array_spills_member_wise_to_a_content_tier_array():
    """`pool kv[2] … share content; spill host …` over `pool host[2] { … share content; }`: member
    k's content tier is host[k] (docs/content.md §6 keeps the pool-array rule of §11.8.1), and
    both engines agree step by step on a run whose members load blocks back from their tiers."""
    ir = compile_ok(CONTENT_ARRAY)
    assert [(p["name"], p.get("spill", {}).get("pool")) for p in ir["pools"]] == [
        ("kv[0]", 2), ("kv[1]", 3), ("host[0]", None), ("host[1]", None)]
    sessions = sample_sessions(ir, 1, 4, "t.sq")
    last = json.loads(spec_lines(ir, sessions, "t.sq")[-1])
    assert all(p["tier_hits"] > 0 for p in last["pools"] if p["name"].startswith("kv[")), last["pools"]
    assert compare_runs(ir, sessions, "t.sq") > 0

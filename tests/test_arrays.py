"""Device and engine arrays (docs/language.md §6.1): what the linker expands them to, that an array
behaves as the same engines written out one by one, and what it refuses."""

from __future__ import annotations

import pytest

from serq.errors import SerqError
from serq.frontend import compile_source

spec_helpers = pytest.importorskip("spec_helpers")

# Two replicas of a small engine, each with its own KV pool, slots and prefix cache, and a
# router `ROUTER` that sets x.
ARRAY = """\
fn main() {
  device gpu[2] { t (n) = 1/100 + n / 1000; kv cap 96; }
  pool kv[2] on gpu[j] { block 16; preempt lifo; }
  engine eng[2] on gpu[j] {
    reqs cap 2;
    tokens cap 32;
    request (p, o) {
      at admission { avail = min(cachedin(kv[j]), floor((p - 1) / 16) * 16); }
      set took = min(cached, floor((p - 1) / 16) * 16);
      observe reused = took;
      prefill (p - took) growing kv[j];
      decode (o) growing kv[j];
      cache (p + o);
    }
    schedule {
      advance running;
      admit waiting taking reqs[j] (1), kv[j] (min(p, avail + budget_left(eng[j]))) reserve (p);
    }
    execute (t(batch.tokens));
  }
  pool reqs[2] on eng[j] { queue fifo; }
  workload {
    arrive batch(6);
    session { turn; tool (~exp(2)); turn; }
    turn { set p = 20 + floor(~uniform(0, 40)); }
  }
  server {
    ROUTER
    observe picked = x;
    eng[x] (p, 5);
  }
}
"""

# The same deployment written out: two devices, two engines, their pools, and the branch that
# the call `eng[x] (p, 5);` lowers to.
WRITTEN_OUT = ARRAY.replace("device gpu[2] { t (n) = 1/100 + n / 1000; kv cap 96; }",
                            "device gpu0 { t (n) = 1/100 + n / 1000; kv0 cap 96; }\n"
                            "  device gpu1 { t (n) = 1/100 + n / 1000; kv1 cap 96; }")
WRITTEN_OUT = WRITTEN_OUT.replace("  pool kv[2] on gpu[j] { block 16; preempt lifo; }\n",
                                  "  pool kv0 on gpu0 { block 16; preempt lifo; }\n"
                                  "  pool kv1 on gpu1 { block 16; preempt lifo; }\n")
_ENGINE = WRITTEN_OUT[WRITTEN_OUT.index("  engine eng[2]"):WRITTEN_OUT.index("  pool reqs[2]")]
WRITTEN_OUT = WRITTEN_OUT.replace(_ENGINE, "".join(
    _ENGINE.replace("eng[2] on gpu[j]", f"eng{k} on gpu{k}").replace("kv[j]", f"kv{k}")
    .replace("reqs[j]", f"reqs{k}").replace("eng[j]", f"eng{k}").replace("reqs cap", f"reqs{k} cap")
    for k in (0, 1)))
WRITTEN_OUT = WRITTEN_OUT.replace("  pool reqs[2] on eng[j] { queue fifo; }\n",
                                  "  pool reqs0 on eng0 { queue fifo; }\n  pool reqs1 on eng1 { queue fifo; }\n")
WRITTEN_OUT = WRITTEN_OUT.replace("eng[x] (p, 5);", "branch (x == 0) { eng0 (p, 5); } else { eng1 (p, 5); }")

ROUTERS = {
    "round robin": "set x = serial - 2 * floor(serial / 2);",
    "least loaded": "choose x in 2 by (holders(reqs[x]) + queued(reqs[x]));",
    "prefix aware": "choose x in 2 by (cachedin(kv[x]) > 0 ? 0 : 1, holders(reqs[x]) + queued(reqs[x]));",
}


def written_out_router(router: str) -> str:
    """The router for the written-out program: `reqs[x]` over two separately named pools."""
    return (router.replace("holders(reqs[x]) + queued(reqs[x])",
                           "x == 0 ? holders(reqs0) + queued(reqs0) : holders(reqs1) + queued(reqs1)")
            .replace("cachedin(kv[x])", "(x == 0 ? cachedin(kv0) : cachedin(kv1))"))


def test_the_linker_expands_the_arrays_into_members():
    ir = compile_source(ARRAY.replace("ROUTER", ROUTERS["least loaded"]), "t.sq", {})
    assert [(p["name"], p["cap"], p["admitted_by"]) for p in ir["pools"]] == [
        ("kv[0]", "96", None), ("kv[1]", "96", None), ("reqs[0]", "2", 0), ("reqs[1]", "2", 1)]
    assert [(s["name"], s["kind"], s.get("memory")) for s in ir["stages"]] == [
        ("eng[0]", "step", 0), ("eng[1]", "step", 1), ("tool", "delay", None)]
    # each member's `taking` names its own pools
    adm = [s["schedule"] for s in ir["stages"][:2]]
    assert all(a[1]["op"] == "admit" for a in adm)
    holds = [s for b in ir["blocks"] for s in b if s["op"] == "hold"]
    assert [(h["request"]["engine"], [p["pool"]["base"] + int(p["pool"]["index"]["v"]) for p in h["pools"]])
            for h in holds] == [(1, [3, 1]), (0, [2, 0])]


@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_an_array_runs_as_the_engines_written_out(router):
    """The array program and the same engines written out one by one give the same records at the
    same exact times, under each router (a member's body, pools or call mixed up would differ)."""
    a_cfg, a_obs = spec_helpers.run_text(ARRAY.replace("ROUTER", ROUTERS[router]), 6, seed=3)
    b_cfg, b_obs = spec_helpers.run_text(WRITTEN_OUT.replace("ROUTER", written_out_router(ROUTERS[router])), 6, seed=3)
    assert a_obs == b_obs and len(a_obs) == 24   # 6 sessions, 2 turns, `picked` and `reused`
    assert a_cfg.now == b_cfg.now
    assert {v for name, _, _, v in a_obs if name == "picked"} == {0, 1}   # both replicas used


def test_a_constant_index_calls_the_member_directly():
    ir = compile_source(ARRAY.replace("ROUTER", "set x = 1;").replace("eng[x] (p, 5);", "eng[1] (p, 5);"), "t.sq", {})
    server = ir["blocks"][ir["workload"]["server"]]
    assert [s["op"] for s in server] == ["set", "observe", "set", "set", "hold"]
    assert server[-1]["request"]["engine"] == 1


def test_an_index_that_is_no_member_stops_the_run():
    from serq_spec.errors import SpecError
    text = ARRAY.replace("ROUTER", "set x = 2;")
    with pytest.raises(SpecError, match=r"index 2.0 is not a whole number in 0\.\.1"):
        spec_helpers.run_text(text, 6)


def err(text: str) -> SerqError:
    with pytest.raises(SerqError) as info:
        compile_source(text, "t.sq", {})
    return info.value


BASE = ARRAY.replace("ROUTER", ROUTERS["round robin"])


@pytest.mark.parametrize("old, new, message, at", [
    ("engine eng[2] on gpu[j]", "engine eng[2] on gpu", "`gpu` is an array of 2", (4, 20)),
    ("engine eng[2] on gpu[j]", "engine eng[3] on gpu[j]", "an array of 3 engines on `gpu`, an array of 2", (4, 24)),
    ("engine eng[2] on gpu[j]", "engine eng[2] on gpu[1]", "write `gpu[j]` with a new name j", (4, 24)),
    ("pool reqs[2] on eng[j]", "pool reqs on eng", "`eng` is an array of 2", (21, 16)),
    ("pool reqs[2] on eng[j]", "pool reqs[2] on eng[5]", "write `eng[j]` with a new name j", (21, 23)),
    ("pool kv[2] on gpu[j]", "pool kv on gpu[2]", "index 2 is outside `gpu[0 … 1]`", (3, 18)),
    ("eng[x] (p, 5);", "eng (p, 5);", "`eng` is an array of 2 engines: write `eng[i] (…);`", (30, 5)),
    ("eng[x] (p, 5);", "eng[~uniform(0, 2)] (p, 5);", "a draw in it would be drawn again", (30, 9)),
    ("eng[x] (p, 5);", "eng[3] (p, 5);", "index 3 is outside `eng[0 … 1]`", (30, 9)),
    ("eng[x] (p, 5);", "kv[x] (p, 5);", "`kv` is not one", (30, 5)),
    ("set took = min(", "set j = min(", "`j` is the member index of engine array `eng`", (9, 7)),
    ("reqs cap 2;", "state j = 0; reqs cap 2;", "`j` is the member index", (5, 5)),
])
def test_refused_with_a_reason_at_the_place(old, new, message, at):
    assert old in BASE
    e = err(BASE.replace(old, new))
    assert message in e.message, e.message
    assert (e.line, e.column) == at, (e.line, e.column, e.message)


def test_a_single_engine_on_one_member_of_a_device_array():
    text = BASE.replace("engine eng[2] on gpu[j]", "engine eng[1] on gpu[j]").replace("device gpu[2]", "device gpu[1]")
    text = text.replace("pool kv[2]", "pool kv[1]").replace("pool reqs[2]", "pool reqs[1]")
    text = text.replace("set x = serial - 2 * floor(serial / 2);", "set x = 0;")
    ir = compile_source(text, "t.sq", {})
    assert [p["name"] for p in ir["pools"]] == ["kv[0]", "reqs[0]"]
    one = BASE.replace("engine eng[2] on gpu[j]", "engine solo on gpu[1]").replace("eng[j]", "solo")
    one = one.replace("kv[j]", "kv[1]").replace("reqs[j]", "reqs[1]")
    one = one.replace("pool reqs[2] on solo { queue fifo; }", "pool reqs on solo { queue fifo; }")
    one = one.replace("reqs[1]", "reqs").replace("eng[x] (p, 5);", "solo (p, 5);")
    one = one.replace("pool kv[2] on gpu[j]", "pool kv[2] on gpu[j]")
    ir = compile_source(one, "t.sq", {})
    assert [(p["name"], p["admitted_by"]) for p in ir["pools"]] == [("kv[0]", None), ("kv[1]", None), ("reqs", 0)]
    assert ir["stages"][0]["memory"] == 1


def test_a_claim_watches_one_member():
    text = BASE.replace("  workload {", "  claim small : every iteration of eng[1] (batch.tokens <= 32);\n  workload {")
    assert compile_source(text, "t.sq", {})["claims"][0]["stage"] == 1
    for index, message in (("serial", "`serial` is a session attribute; a constant cannot read it"),
                           ("sqrt(2) - 1", "the member of an engine array a claim watches must be a constant index")):
        e = err(BASE.replace("  workload {", f"  claim small : every iteration of eng[{index}] (batch.tokens <= 32);\n"
                                              "  workload {"))
        assert message in e.message, e.message


def test_an_aggregate_in_a_member_body_may_not_reuse_the_member_index():
    e = err(BASE.replace("execute (t(batch.tokens));", "execute (t(batch.tokens) + 0 * max j in 2 (j));"))
    assert "`j` is the member index of engine array `eng`" in e.message, e.message

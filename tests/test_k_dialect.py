"""K's spellings (docs/language.md §16 "The K spellings"): `admit via E;` — a free-standing pool
admitted by an engine compiles to the IR of `pool P on E` with the capacity declared in E — and
`stage E : step { … }`, read as the S engine it spells (the same IR); misuse of either is refused
at its place."""

from __future__ import annotations

import json

import pytest

from serq.errors import SerqError
from serq.frontend import compile_source
from test_ir import strip_at   # the IR without source positions (the two texts differ in layout)

K = """\
fn main() {
  device acc { }
  pool kv { cap 64; block 16; preempt lifo; }
  engine eng on acc {
    tokens cap 32;
    schedule { advance running; admit waiting; }
    execute (1);
  }
  pool slots { cap 2; admit via eng; }
  workload { arrive poisson(1/2); }
  server {
    hold slots (1), kv (20) { run eng prefill (20) growing kv; run eng decode (4) growing kv; }
  }
}
"""

S = K.replace("    tokens cap 32;", "    slots cap 2;\n    tokens cap 32;").replace(
    "pool slots { cap 2; admit via eng; }", "pool slots on eng { }")


def test_admit_via_is_a_pool_on_the_engine():
    k, s = compile_source(K, "t.sq", {}), compile_source(S, "t.sq", {})
    assert [(p["name"], p["cap"], p["admitted_by"]) for p in k["pools"]] == [("kv", "64", None), ("slots", "2", 0)]
    assert strip_at(k) == strip_at(s)


def test_admit_via_an_engine_declared_below_the_pool():
    text = K.replace("  pool slots { cap 2; admit via eng; }\n", "").replace(
        "  engine eng on acc {", "  pool slots { cap 2; admit via eng; }\n  engine eng on acc {")
    assert [(p["name"], p["admitted_by"]) for p in compile_source(text, "t.sq", {})["pools"]] == [
        ("kv", None), ("slots", 0)]


def test_admit_via_a_member_of_an_engine_array():
    text = K.replace("device acc { }", "device acc[2] { }").replace("engine eng on acc", "engine eng[2] on acc[j]")
    text = text.replace("admit via eng;", "admit via eng[1];").replace("run eng prefill", "run eng[1] prefill")
    text = text.replace("run eng decode", "run eng[1] decode")
    assert [(p["name"], p["admitted_by"]) for p in compile_source(text, "t.sq", {})["pools"]] == [
        ("kv", None), ("slots", 1)]


@pytest.mark.parametrize("old, new, message, at", [
    ("admit via eng;", "admit via gate;", "`gate` is not an engine", (9, 33)),
    ("admit via eng;", "admit via nobody;", "unknown stage `nobody`", (9, 33)),
    ("pool slots { cap 2; admit via eng; }", "pool slots[2] { cap 2; admit via eng; }", "on the pool array `slots`", (9, 26)),
    ("admit via eng;", "admit via eng; admit via eng;", "pool option `admit via` given twice", (9, 38)),
])
def test_admit_via_misuse_is_refused_at_its_place(old, new, message, at):
    text = K.replace(old, new).replace("  workload {", "  stage gate : delay;\n  workload {")
    with pytest.raises(SerqError) as info:
        compile_source(text, "t.sq", {})
    assert message in info.value.message, info.value.message
    assert (info.value.line, info.value.column) == at, (info.value.line, info.value.column, info.value.message)


# -- K's step stage --------------------------------------------------------------------------------

K_STEP = """\
fn main() {
  let budget = 32;
  def per_token(n) = n / 100;
  pool kv { cap 64; block 16; preempt lifo; }
  stage eng : step {
    budget budget;
    chunk 8;
    granule 2;
    state turns = 0;
    cost 1 + per_token(tokens) + residents / 4 + decoders / 8 + prefilled / 16 + kv_decode / 32 + attention / 1000;
    memory kv;
    serve decode first;
  }
  pool slots { cap 2; admit via eng; }
  workload { arrive poisson(1/2); }
  server {
    observe b = budget;
    hold slots (1), kv (20) { run eng prefill (20) growing kv; run eng decode (4) growing kv; }
  }
}
"""

# the S spelling of docs/language.md §16, written out by hand
S_ENGINE = """\
  device acc { }
  engine eng on acc {
    tokens cap budget;
    granule 2;
    state turns = 0;
    schedule {
      advance running decode first each at most (8);
      admit waiting each at most (8);
    }
    execute (1 + per_token(batch.tokens) + running.count / 4 + batch.decoding / 8 + batch.prefilled / 16
             + batch.kv_decode / 32 + batch.attention / 1000);
  }
"""


def k_step_as_s(k: str) -> str:
    start, end = k.index("  stage eng : step {"), k.index("  pool slots")
    return k[:start] + S_ENGINE + k[end:]


def test_a_step_stage_is_the_s_engine_it_spells():
    """The IR of K's step stage is exactly that of its S spelling (positions aside): budget →
    `tokens cap`, chunk → `each at most` of both statements, serve → the advance's order, cost →
    `execute` with the bare engine values as S's dotted ones; `budget` stays a name outside the
    block (the `let` and the observation read it)."""
    k, s = compile_source(K_STEP, "t.sq", {}), compile_source(k_step_as_s(K_STEP), "t.sq", {})
    assert strip_at(k) == strip_at(s)
    eng = k["stages"][0]
    assert eng["budget"] == {"k": "num", "v": "32"}
    assert [st["each"] for st in eng["schedule"]] == [{"k": "num", "v": "8"}] * 2
    assert {n["name"] for n in _eng_values(eng["cost"])} == {
        "batch.tokens", "running.count", "batch.decoding", "batch.prefilled", "batch.kv_decode", "batch.attention"}


def _eng_values(e):
    if isinstance(e, dict):
        if e.get("k") == "eng":
            yield e
        for v in e.values():
            yield from _eng_values(v)
    elif isinstance(e, list):
        for v in e:
            yield from _eng_values(v)


@pytest.mark.parametrize("serve, spelled", [
    ("", "advance running;"),
    ("serve;", "advance running;"),
    ("serve by (remaining, -admission);", "advance running by (remaining, -admission);"),
    ("serve only (decoding == 1) decode first;", "advance running only (decoding == 1) decode first;"),
    ("serve admission;", "advance running admission;"),
])
def test_serve_is_the_advance_order(serve, spelled):
    k = K_STEP.replace("    chunk 8;\n", "").replace("    serve decode first;\n", f"    {serve}\n" if serve else "")
    s = k_step_as_s(k).replace("      advance running decode first each at most (8);", "      " + spelled).replace(
        "      admit waiting each at most (8);", "      admit waiting;")
    assert strip_at(compile_source(k, "t.sq", {})) == strip_at(compile_source(s, "t.sq", {}))


def test_serve_exclusive_prefill_takes_the_advance_s_place():
    k = K_STEP.replace("serve decode first;", "serve exclusive prefill;")
    s = k_step_as_s(K_STEP).replace(
        "      advance running decode first each at most (8);", "      exclusive prefill each at most (8);")
    assert strip_at(compile_source(k, "t.sq", {})) == strip_at(compile_source(s, "t.sq", {}))


# At 1, session 0's decode needs a second block and preempts session 1 (the latest admitted),
# requeued at the tail; session 2, waiting at the head, would fit in the slot and the blocks that
# freed, but the iteration preempted, so it is admitted only at the next one.
PREEMPTING = """\
fn main() {
  pool kv { cap 48; block 16; preempt by (-admission) requeue tail; }
  stage eng : step { budget 64; cost 1; memory kv; }
  pool slots { cap 2; admit via eng; }
  workload { arrive batch(3); }
  server {
    hold slots (1), kv (serial == 1 ? 32 : 16) {
      run eng prefill (serial == 1 ? 32 : 16) growing kv;
      run eng decode (8) growing kv;
    }
  }
}
"""


def _iterations(ir: dict) -> list[dict]:
    from serq_spec.program import Program
    from serq_spec.sample import sample
    from serq_spec.step import run
    from serq_spec.workload import Workload
    prog = Program(ir, "t.sq", workload=Workload.replay(sample(ir, 0, 3, "t.sq")))
    out: list[dict] = []
    run(prog, on_step=lambda c, r, k: out.extend(r["iterations"]), check=True)
    return out


def test_no_admission_in_an_iteration_that_preempted():
    """docs/language.md §16: K's step stage admits only while no preemption happened in the
    iteration, the rule of every `admit waiting` (§11.6): its run is S's with `while
    (running.preempted == 0)` written out, iteration by iteration."""
    k = compile_source(PREEMPTING, "t.sq", {})
    s = compile_source(PREEMPTING.replace("  stage eng : step { budget 64; cost 1; memory kv; }", """\
  device acc { }
  engine eng on acc {
    tokens cap 64;
    schedule { advance running; admit waiting while (running.preempted == 0); }
    execute (1);
  }"""), "t.sq", {})
    k_its, s_its = _iterations(k), _iterations(s)
    assert json.dumps(k_its, default=str) == json.dumps(s_its, default=str)
    assert [(it["start"], it["preempted"], it["admitted"]) for it in k_its[:3]] == [(0, 0, 2), (1, 1, 0), (2, 0, 1)]


@pytest.mark.parametrize("old, new, message, at", [
    ("    chunk 8;\n", "    chunk 8;\n    chunk 4;\n", "`chunk` given twice in step stage `eng` (first at t.sq:7:5)", (8, 5)),
    ("    budget budget;\n", "", "step stage `eng` needs `budget …;` (S: `tokens cap …;`)", (5, 3)),
    ("    cost 1 + per_token(tokens)", "    cost 1 + per_token(kv)", "`kv` is a pool, stage, device or engine, not a value", (10, 24)),
    ("stage eng : step", "stage eng[2] : step", "a K step stage array", (5, 13)),
    ("    memory kv;", "    memory slot;", "unknown pool `slot`", (11, 12)),
    ("    memory kv;", "    memory eng;", "`eng` is a stage", (11, 12)),
    ("  pool kv { cap 64; block 16; preempt lifo; }",
     "  pool kv { cap 64; block 16; preempt lifo; }\n  pool kv2 { cap 64; }",
     None, None),
    ("  let budget = 32;", "  let budget = 32;\n  let residents = 2;",
     "`residents` in a K step stage's `cost` is the engine value `running.count`, but it also names a constant "
     "(defined at t.sq:3:7) here", (11, 34)),
    ("    state turns = 0;", "    state decoders = 0;",
     "`decoders` in a K step stage's `cost` is the engine value `batch.decoding`, but it also names a parameter, "
     "`let` or register here", (10, 50)),
    ("    memory kv;", "    memory kv;\n    iteration { }", "K's `iteration { … }` block of a step stage is not supported yet", (12, 5)),
    ("    budget budget;", "    budget tokens;", "`tokens` is a reserved word", (6, 12)),
    ("    budget budget;", "    budget residents;", "session attribute `residents` cannot be read in `tokens cap`", (6, 12)),
    ("    memory kv;", "    memory kv;\n    spend 3;", "unexpected 'spend'", (12, 5)),
])
def test_step_stage_misuse_is_refused_at_its_place(old, new, message, at):
    if message is None:   # K's `memory kv` against a run that grows another pool
        text = K_STEP.replace(old, new).replace("run eng decode (4) growing kv;", "run eng decode (4) growing kv2;")
        message, at = "this run grows `kv2`, but step stage `eng`'s memory is `kv` (`memory` at t.sq:12:12)", (19, 64)
    else:
        text = K_STEP.replace(old, new)
    assert text != K_STEP
    with pytest.raises(SerqError) as info:
        compile_source(text, "t.sq", {})
    assert message in info.value.message, info.value.message
    assert (info.value.file, info.value.line, info.value.column) == ("t.sq",) + at, (
        info.value.line, info.value.column, info.value.message)


def test_the_item_words_are_names_outside_the_step_block():
    """`budget`, `chunk`, `cost`, `memory`, `serve` name constants, attributes and a statement
    definition outside a step block (`serve(memory);` starts a statement, as an item word starts
    an item), and `residents` is an ordinary name outside its `cost`."""
    text = K_STEP.replace("  let budget = 32;", "  let budget = 32;\n  let chunk = 8;\n  let residents = 1;").replace(
        "    cost 1 + per_token(tokens) + residents / 4", "    cost 1 + per_token(tokens)").replace(
        "    observe b = budget;", "    set cost = chunk + residents;\n    observe b = budget + cost;\n"
        "    set memory = cost; serve(memory);").replace(
        "  pool slots {", "  def serve(n) { observe served = n; }\n  pool slots {")
    ir = compile_source(text, "t.sq", {})
    assert "served" in ir["observes"]
    assert ir["stages"][0]["budget"] == {"k": "num", "v": "32"}

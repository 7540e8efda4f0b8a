"""K's `admit via E;` (docs/language.md §16 "The K spellings"): a free-standing pool admitted by an
engine compiles to the IR of `pool P on E` with the capacity declared in E; misuse is refused at
its place; K's step stage stays refused with its S spelling."""

from __future__ import annotations

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


def test_a_step_stage_is_refused_with_the_s_spelling():
    with pytest.raises(SerqError) as info:
        compile_source(K.replace("  workload {", "  stage old : step { budget 8; }\n  workload {"), "t.sq", {})
    assert "declare an `engine NAME on DEVICE { … }`" in info.value.message

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
    ("pool slots { cap 2; admit via eng; }", "pool slots[2] { cap 2; admit via eng; }",
     "`admit via` on the pool array `slots` needs an engine array", (9, 26)),
    ("pool slots { cap 2; admit via eng; }", "pool slots[2] { cap 2; admit via gate[j]; }",
     "`admit via` on the pool array `slots` needs an engine array", (9, 26)),
    ("admit via eng;", "admit via eng; admit via eng;", "pool option `admit via` given twice", (9, 38)),
])
def test_admit_via_misuse_is_refused_at_its_place(old, new, message, at):
    text = K.replace(old, new).replace("  workload {", "  stage gate : delay;\n  workload {")
    text = text.replace("hold slots (1)", "hold slots[0] (1)") if "slots[2]" in new else text
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
    ("stage eng : step", "stage eng[0] : step", "the size of a step stage array must be a whole number", (5, 13)),
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
    ("    memory kv;", "    memory kv;\n    iteration { run eng (1); }",
     "`run` cannot be written in the `iteration` block of step stage `eng`", (12, 17)),
    ("    memory kv;", "    memory kv;\n    iteration { if (turns > 0) { turn; } }",
     "`turn;` cannot be written in the `iteration` block of step stage `eng`", (12, 34)),
    ("    memory kv;", "    memory kv;\n    iteration { branch with (1/2) { set turns = 1; } }",
     "`branch with` draws a coin", (12, 17)),
    ("    memory kv;", "    memory kv;\n    iteration { set turns = batch.tokens; }",
     "`batch.tokens` cannot be read in a register update of K's `iteration { … }` block", (12, 29)),
    ("    memory kv;", "    memory kv;\n    iteration { set turns = serial; }",
     "session attribute `serial` cannot be read in a register update of K's `iteration", (12, 29)),
    ("    memory kv;", "    memory kv;\n    iteration { set count = 1; }",
     "`count` is not a register of engine `eng`", (12, 21)),
    ("    memory kv;", "    memory kv;\n    iteration { }\n    iteration { }", "`iteration` given twice", (13, 5)),
    ("    state turns = 0;", "    state turns = 0;\n    state kv_decode = 0;\n    iteration { set turns = kv_decode; }",
     "`kv_decode` in a K step stage's `iteration` is the engine value `running.kv_decode`, but it also names a "
     "parameter, `let` or register here", (11, 29)),
    ("    memory kv;", "    memory kv;\n    iteration { set turns = attention; }",
     "session attribute `attention` cannot be read in a register update of K's `iteration { … }` block, which "
     "runs before anyone is served (`attention` is the engine value `batch.attention` only in a K step stage's "
     "`cost`", (12, 29)),
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


# -- K's `iteration { … }` block and step stage arrays ---------------------------------------------

ITERATION_CASES = [
    # (the block, the statements it is in S, first in the schedule)
    ("iteration { set turns = turns + 1; }", "set turns = turns + 1;"),
    ("iteration { if (running.count > 1) { set turns = turns + 1; } else if (waiting.count > 0) "
     "{ set turns = 0; } }",
     "if (running.count > 1) { set turns = turns + 1; } else if (waiting.count > 0) { set turns = 0; }"),
    ("iteration { set turns = max(turns, running.kv_decode); branch (turns > 2) { set turns = now / 2; } "
     "set turns = turns + running.decoding; }",
     "set turns = max(turns, running.kv_decode); branch (turns > 2) { set turns = now / 2; } "
     "set turns = turns + running.decoding;"),
    ("iteration { }", ""),
    # K's bare values of the residents, as the iteration starts (§4.5's kernel names)
    ("iteration { branch (residents > 1) { set turns = decoders + kv_decode / 16 + kv_prefill / 32; } }",
     "branch (running.count > 1) { set turns = running.decoding + running.kv_decode / 16 "
     "+ running.kv_prefill / 32; }"),
]


@pytest.mark.parametrize("block, spelled", ITERATION_CASES)
def test_an_iteration_block_is_the_start_of_the_schedule(block, spelled):
    """docs/language.md §16: K's `iteration { … }` block is S's register updates placed first in
    the schedule, before the advance and the admission; the cost and the serve keys read the
    registers it sets (the same IR as the S spelling)."""
    k = K_STEP.replace("    memory kv;\n", f"    memory kv;\n    {block}\n").replace(
        "serve decode first;", "serve by (turns - admission);").replace("cost 1 + ", "cost 1 + turns / 64 + ")
    s = k_step_as_s(K_STEP).replace("      advance running decode first each at most (8);",
                                    f"      {spelled}\n      advance running by (turns - admission) each at most (8);")
    s = s.replace("execute (1 + ", "execute (1 + turns / 64 + ")
    ki, si = compile_source(k, "t.sq", {}), compile_source(s, "t.sq", {})
    assert strip_at(ki) == strip_at(si)
    if spelled:
        assert ki["stages"][0]["schedule"][0]["op"] in ("set", "branch")


K_ARRAY = """\
fn main() {
  pool kv[3] { cap 64; block 16; preempt lifo; }
  stage eng[3] : step {
    budget 32;
    chunk 8;
    state busy = 0;
    iteration { set busy = running.count > 1 ? busy + 1 : 0; }
    cost 0.001 * (1 + busy) + 0.0001 * tokens + j / 1000;
    memory kv[j];
    serve by (busy - admission, j);
  }
  pool slots[3] { cap 2; admit via eng[j]; }
  def serve_on(k) {
    hold slots[k] (1), kv[k] (40) { run eng[k] prefill (40) growing kv[k]; run eng[k] decode (16) growing kv[k]; }
  }
  workload { arrive poisson(5); }
  server {
    choose x in 3 by (holders(slots[x]) + queued(slots[x]), x);
    branch (x == 0) { serve_on(0); } else if (x == 1) { serve_on(1); } else { serve_on(2); }
  }
}
"""

# the S spelling of K_ARRAY's step stage array and its slots, written out by hand
S_ARRAY_ENGINE = """\
  device d[3] { }
  engine eng[3] on d[j] {
    slots cap 2;
    tokens cap 32;
    state busy = 0;
    schedule {
      set busy = running.count > 1 ? busy + 1 : 0;
      advance running by (busy - admission, j) each at most (8);
      admit waiting each at most (8);
    }
    execute (0.001 * (1 + busy) + 0.0001 * batch.tokens + j / 1000);
  }
  pool slots[3] on eng[j] { }
"""
S_ARRAY = (K_ARRAY[:K_ARRAY.index("  stage eng[3]")] + S_ARRAY_ENGINE
           + K_ARRAY[K_ARRAY.index("  def serve_on"):])


@pytest.mark.parametrize("k_old, k_new, s_old, s_new", [
    ("", "", "", ""),
    # no `memory`: no member index; every member alike (the cost and keys then name no member)
    ("    memory kv[j];\n", "", "", ""),
    # a pool array admitted via the members, declared above the stage array
    ("  pool slots[3] { cap 2; admit via eng[j]; }\n", "", "", ""),
])
def test_a_step_stage_array_is_the_s_engine_array_it_spells(k_old, k_new, s_old, s_new):
    """`stage E[N] : step { … memory P[j]; … }` is `engine E[N] on D[j] { … }` over N devices of
    its own (§6.1): j, bound by `memory P[j]`, reads k in member k's copy; `pool Q[N] { cap c;
    admit via E[j]; }` is `pool Q[N] on E[j]` with `Q cap c;` in E. The same IR as the S spelling."""
    k, s = K_ARRAY, S_ARRAY
    if k_old == "    memory kv[j];\n":
        # without a member index the body cannot name its member
        k = k.replace(k_old, k_new).replace(" + j / 1000", "").replace(", j);", ");")
        s = s.replace(" + j / 1000", "").replace(", j) each", ") each")
    elif k_old:
        k = k.replace(k_old, k_new).replace("  stage eng[3] : step {", "  pool slots[3] { cap 2; admit via eng[j]; }\n"
                                                                     "  stage eng[3] : step {")
    ki, si = compile_source(k, "t.sq", {}), compile_source(s, "t.sq", {})
    if k_old == "  pool slots[3] { cap 2; admit via eng[j]; }\n":
        # the slots come before kv's stage here: compare with S's pools in the same order
        assert [p["name"] for p in ki["pools"]] == ["kv[0]", "kv[1]", "kv[2]", "slots[0]", "slots[1]", "slots[2]"]
    assert strip_at(ki) == strip_at(si)
    assert [p["admitted_by"] for p in ki["pools"]] == [None] * 3 + [0, 1, 2]
    if k is K_ARRAY:
        # member k reads j as k: in its cost, in its serve keys
        assert [st["cost"]["b"]["v"] for st in ki["stages"][:3]] == ["0", "1/1000", "1/500"]
        assert [st["schedule"][1]["order"]["keys"][1]["v"] for st in ki["stages"][:3]] == ["0", "1", "2"]


@pytest.mark.parametrize("old, new, message, at", [
    ("  pool slots[3] { cap 2; admit via eng[j]; }", "  pool slots[4] { cap 2; admit via eng[j]; }",
     "an array of 4 pools admitted via `eng`, an array of 3 engines", (12, 36)),
    ("  pool slots[3] { cap 2; admit via eng[j]; }", "  pool slots[3] { cap 2; admit via eng[1]; }",
     "`admit via` on the pool array `slots` needs an engine array", (12, 26)),
    ("    memory kv[j];", "    memory kv[j];\n    state j = 0;", "`j` is the member index of engine array `eng` (`memory …[j]`)",
     (10, 5)),
    ("    memory kv[j];", "    memory kv;", "session attribute `j` cannot be read in `execute`", (8, 49)),
    ("run eng[k] decode (16) growing kv[k];", "run eng[k] decode (16) growing kv[0];",
     "this run grows `kv[0]`, but step stage `eng[1]`'s memory is `kv[1]`", (19, 57)),
    # `memory kv[c]` with a constant c: every member's memory is kv[c], so member 1's runs are refused
    ("+ j / 1000;\n    memory kv[j];", ";\n    memory kv[0];", "this run grows `kv[1]`, but step stage `eng[1]`'s memory is `kv[0]`",
     (19, 57)),
])
def test_step_stage_array_misuse_is_refused_at_its_place(old, new, message, at):
    text = K_ARRAY.replace(old, new).replace(", j);", ");") if "memory kv[0]" in new else K_ARRAY.replace(old, new)
    assert text != K_ARRAY
    with pytest.raises(SerqError) as info:
        compile_source(text, "t.sq", {})
    assert message in info.value.message, info.value.message
    assert (info.value.line, info.value.column) == at, (info.value.line, info.value.column, info.value.message)


def _observations(ir: dict, sessions: int) -> dict:
    """serq_spec's observations of a run of `sessions` sampled sessions: name -> [(serial, value)]."""
    from serq_spec.program import Program
    from serq_spec.sample import sample
    from serq_spec.step import run
    from serq_spec.workload import Workload
    prog = Program(ir, "t.sq", workload=Workload.replay(sample(ir, 1, sessions, "t.sq")))
    out: dict = {}
    run(prog, on_step=lambda c, r, k: [out.setdefault(name, []).append((serial, v))
                                       for name, serial, _turn, _t, v in r["observations"]], check=True)
    return {name: sorted(rows) for name, rows in out.items()}


@pytest.mark.parametrize("sets, sojourns", [
    ({}, ["627/1000", "627/1000", "77/100", "77/100"]),
    ({"warm": "0"}, ["143/1000", "143/1000", "143/500", "143/500"]),
])
def test_k_replicas_example_header_check(sets, sojourns):
    """examples/single-turn/k_replicas.sq's exact check (its header): each replica's first `warm`
    iterations cost `cold` times more, counted by its own `iteration { … }` block; the router
    alternates the replicas; each serves two requests back to back."""
    from pathlib import Path

    from serq.frontend import load_program
    from serq_drt.lockstep import lockstep
    path = Path(__file__).resolve().parent.parent / "examples" / "single-turn" / "k_replicas.sq"
    ir = load_program(str(path), sets)
    obs = _observations(ir, 4)
    assert [str(v) for _, v in obs["replica"]] == ["0", "1", "0", "1"]
    assert [str(v) for _, v in obs["sojourn"]] == sojourns
    assert lockstep(ir, 1, 4, "k_replicas.sq") > 0


# Session 0 is resident on `eng` and stalls at 1: its decode needs a second block while session 1
# holds the other one, off the engine, until 5 (`preempt none`: the growth waits). The attempts at
# 1, 2 and 3 (session 2's gate runs end then) form no iteration, so their updates of `n` are undone.
STALLED = """\
fn main() {
  pool kv { cap 32; block 16; preempt none; }
  stage eng : step { budget 64; state n = 0; iteration { set n = n + 1; } cost n; memory kv; }
  pool slots { cap 2; admit via eng; }
  stage gate : delay;
  workload { arrive batch(3); }
  server {
    branch (serial == 0) {
      hold slots (1), kv (16) { run eng prefill (16) growing kv; run eng decode (2) growing kv; }
    } else if (serial == 1) {
      hold kv (16) { run gate (5); }
    } else {
      run gate (1); run gate (1); run gate (1);
    }
    observe done = now;
  }
}
"""


def test_an_attempt_that_forms_no_iteration_undoes_the_block():
    """docs/language.md §16: the block runs once per iteration. Iterations: at 0 (n = 1, the
    prefill, cost 1); the attempts at 1, 2, 3 stall on the growth and are undone; at 5 (session 1
    frees its block, the growth fits) n = 2, cost 2; at 7 n = 3, cost 3: session 0 ends at 10.
    Kept updates would give n = 5 at 5 and end it at 5 + 5 + 6 = 16."""
    ir = compile_source(STALLED, "t.sq", {})
    its = _iterations(ir)
    assert [(str(it["start"]), str(it["end"])) for it in its] == [("0", "1"), ("5", "7"), ("7", "10")]
    assert [str(v) for _, v in _observations(ir, 3)["done"]] == ["10", "5", "3"]
    from serq_drt.lockstep import lockstep
    assert lockstep(ir, 1, 3, "t.sq") > 0   # serq_fast undoes them too

"""Every construct of dialect S in scope parses (and links), with programs written for these tests;
the lexical rules of docs/language.md §1; precedence; syntax errors say what was expected, where."""

from __future__ import annotations

import pytest

from conftest import compile_err, compile_ok

LIB = """// a library: constants and definitions only
let half = 1 / 2;
def reusable(x, bs) { floor((x - 1) / bs) * bs }
def twice(x) = 2 * x;            /* the K spelling of an expression definition */
"""

ALL = """use "lib/util.sq";
use "lib/util.sq";   // read once
use "std/args";
let B = 512;
let a = 2e-5;
def service() { ~exp(1) }
def tick(s, w) { run s (w); observe ticked = w; }

fn main() {
  let lam = args.number("Lambda", 0.5);
  let cap_in = args.number("cap", inf);
  def local_def(x) { x + half }
  device gpu {
    compute (t) = t * a;
    hbm (k) = 0.0002 + 2e-9 * k;
    kv cap 64 * 16;
  }
  pool kv on gpu { block 16; evict by (age, -size, waiting, last); preempt by (-admission, position, computed, decoding) requeue tail; reserve held; }
  pool live { cap 20; queue by (waited, serial); }
  pool tier[2] { cap 100; evict lru; preempt none; }
  pool other { cap 5; preempt lifo; preempt_ok_name_is_fine_here_not; }
  engine vllm on gpu {
    reqs cap 8;
    tokens cap max(B, running.count + running.decoding + running.kv_decode + running.kv_prefill + waiting.count);
    granule 16;
    state ticks = 0;
    request (prompt, output) {
      set kept = prompt;
      observe submitted = prompt;
      at admission {
        known = max(kept, computed + 1);
        reused = min(cachedin(kv), reusable(known, blocksize(kv)));
      }
      set c = min(cached, reusable(known, blocksize(kv)));
      prefill (known - c) growing kv;
      decode (output - 1 - (known - prompt)) growing kv;
      cache (prompt + output);
    }
    schedule {
      let n = running.count + waiting.count;
      let th = n > 1 ? max(64, floor(B / n)) : inf;
      set ticks = ticks + 1 + running.preempted + waiting.admitted + batch.tokens + batch.prefilled;
      branch (ticks > 100) {
        exclusive prefill each at most (th);
      } else if (ticks > 50) {
        advance running only (decoding == 1) decode first each at most (th);
      } else {
        advance running admission;
      }
      advance running by (-remaining, admission) each at most (th);
      admit waiting only (1) while (running.preempted == 0) each at most (th)
        taking reqs (1), kv (min(known, reused + budget_left(vllm))) reserve (known) reuse (reused);
    }
    execute (max(hbm(batch.kv_decode + batch.kv_prefill), compute(batch.tokens)) + 0 * batch.attention
             + 0 * batch.decoding + 0 * running.count);
  }
  pool reqs on vllm { queue fifo; }
  stage cpu : fifo(2);
  stage cpu1 : fifo;
  stage shared : ps(min(present, 4));
  stage rep[3] : fifo(1);
  stage think : delay;
  workload {
    arrive poisson(lam);
    hidden o, unused_hidden;
    init { set K = 0; observe start = now; }
    turn {
      set n = ceil(K == 0 ? ~uniform(10, 30) : ~exp(5));
      set o = floor(~exp(20)) + 1 + 0 * ~erlang(2, 1) + 0 * ~h2(1, 4) + 0 * ~det(1);
      set more = ~bernoulli(0.9);
    }
    session {
      turn;
      while (more) {
        set K = K + n + o;
        tool (~exp(3));
        tool ~exp(1);
        tool on think (2);
        turn;
      }
      loop { run cpu (1); end; }
    }
  }
  stage link[2] : ps(1);
  server {
    set prompt = K + n;
    choose r in 3 by (queue(rep[r]) + busy(rep[r]) + work(rep[r]), r);
    run rep[r] (service());
    tick(cpu1, twice(1));
    branch with (0.5) { run cpu (local_def(1)); } else { run cpu (2 ^ 3 ^ 1); }
    if (prompt > 100) { set big = 1; } else if (prompt > 50) { set big = 2; } else { set big = 0; }
    branch (big == 1) { run shared (abs(-1) + sqrt(4) + exp(0) + ln(1) + pow(2, 3) + ceil(0.5)); }
    run shared, link[r - 2 * floor(r / 2)] (1 / 4);
    hold live (1), tier[0] (5) reserve (10) at admission (w = used(live) + free(live) + holders(live) + queued(live)) {
      grow tier[0] (1);
      load tier[0] (1);
      release tier[1];
      drop tier[0];
      set z = !cached && -1 < 2 || 3 >= 4 && 5 != 6 && 1 <= 2 && 2 > 1;
    } cache (10);
    hold live (1) { run cpu (1); };
    vllm (prompt, o);
    observe tot = sum j in 3 (queue(rep[j]));
    observe mx = max j in 2 (used(tier[j]));
    observe mn = min j in 2 (used(tier[j]));
  }
  gauge busy_cpu = busy(cpu);
  gauge kvused = used(kv) / 16 + budget_left(vllm);
  claim within given (waiting.count > 0) : every iteration of vllm (batch.tokens <= 1000 && now >= 0);
  claim busy : some iteration of vllm (batch.decoding > 0);
  claim drained : at end (used(kv) == 0);
  share bottleneck;
}
"""


def write_all(tmp_path):
    tmp_path = tmp_path / "all"
    (tmp_path / "lib").mkdir(parents=True)
    (tmp_path / "lib" / "util.sq").write_text(LIB)
    p = tmp_path / "all.sq"
    p.write_text(ALL.replace("  pool other { cap 5; preempt lifo; preempt_ok_name_is_fine_here_not; }\n", ""))
    return p


def test_every_construct_parses_and_links(tmp_path):
    from serq.frontend import load_program
    ir = load_program(str(write_all(tmp_path)), {})
    assert [p["name"] for p in ir["pools"]] == ["kv", "live", "tier[0]", "tier[1]", "reqs"]
    assert [s["name"] for s in ir["stages"]] == ["vllm", "cpu", "cpu1", "shared", "rep[0]", "rep[1]", "rep[2]",
                                                 "think", "link[0]", "link[1]", "tool"]
    assert ir["share"] == "bottleneck"
    assert ir["files"] == ["all.sq", "lib/util.sq"]
    kv = ir["pools"][0]
    assert kv["preempt"]["requeue"] == "tail" and kv["reserve_held"] is True and kv["evict"]["kind"] == "by"
    assert ir["pools"][4]["admitted_by"] == 0
    eng = ir["stages"][0]
    assert eng["granule"] == {"k": "num", "v": "16"} and eng["registers"] == [{"name": "ticks", "init": {"k": "num", "v": "0"}, "at": [0, 25, 19]}]
    ops = [s["op"] for s in eng["schedule"]]
    assert ops == ["set", "branch", "advance", "admit"]
    assert eng["schedule"][1]["else"][0]["op"] == "branch"  # else if
    assert ir["stages"][1] == {"name": "cpu", "kind": "fifo", "servers": 2}
    assert ir["stages"][2]["servers"] == 1
    assert ir["stages"][3]["capacity"]["f"] == "min"
    assert ir["workload"]["arrival"] == {"kind": "poisson", "rate": "1/2", "at": [0, 63, 20]}  # `lam` in it
    assert ir["inputs"] == {"Lambda": "1/2", "cap": "inf"}
    assert ir["observes"][:2] == ["submitted", "hit"] or "submitted" in ir["observes"]


def test_keyword_arguments_and_forms(tmp_path):
    """Each arrival form, trace, and the K-style `def … = e;`."""
    (tmp_path / "t.csv").write_text("session,turn,new,out,think\n# comment\n1,0,10,5,0\n1,1,20,5,2.5\n\n2,0,7,3,0,1\n")
    base = """fn main() {
  stage s : delay;
  workload { ARRIVE trace "t.csv" ordered; }
  server { run s (new + out + think + forced); }
}
"""
    from serq.frontend import load_program
    for arr, want in [("arrive poisson(2);", {"kind": "poisson", "rate": "2", "at": [0, 3, 29]}),  # the `2`
                      ("arrive renewal(~exp(1));", "renewal"),
                      ("arrive closed(3);", {"kind": "closed", "n": 3}),
                      ("arrive batch(1e3);", {"kind": "batch", "n": 1000}),
                      ("arrive none;", {"kind": "none"}),
                      ("", {"kind": "none"})]:
        p = tmp_path / "w.sq"
        p.write_text(base.replace("ARRIVE", arr))
        ir = load_program(str(p), {})
        got = ir["workload"]["arrival"]
        assert got == want or got["kind"] == want
        assert ir["workload"]["trace"] == {"ordered": True, "sessions": [[["10", "5", "0", "0"], ["20", "5", "5/2", "0"]],
                                                                          [["7", "3", "0", "1"]]],
                                           "at": [0, 3, 15 + len(arr)]}  # the `trace` declaration


def test_trace_bad_row_points_into_the_csv(tmp_path):
    (tmp_path / "t.csv").write_text("session,turn,new,out,think\n1,0,10,5\n")
    p = tmp_path / "w.sq"
    p.write_text('fn main() { stage s : delay; workload { trace "t.csv"; } server { run s (1); } }\n')
    from serq.errors import SerqError
    from serq.frontend import load_program
    with pytest.raises(SerqError) as info:
        load_program(str(p), {})
    assert info.value.file.endswith("t.csv") and info.value.line == 2 and "5 to 7 fields" in info.value.message
    (tmp_path / "t.csv").write_text("1,0,10,5,x\n")
    with pytest.raises(SerqError) as info:
        load_program(str(p), {})
    assert (info.value.line, info.value.column) == (1, 10) and "not a number" in info.value.message
    # what `Fraction` would take but a decimal is not: digit separators, a ratio, other scripts' digits
    for bad in ("1_0", "1/2", "\u0663"):
        (tmp_path / "t.csv").write_text(f"1,0,{bad},5,0\n", encoding="utf-8")
        with pytest.raises(SerqError) as info:
            load_program(str(p), {})
        assert (info.value.line, info.value.column) == (1, 5) and "not a number" in info.value.message, bad


def test_trace_with_byte_order_mark_and_bad_bytes(tmp_path):
    p = tmp_path / "w.sq"
    p.write_text('fn main() { stage s : delay; workload { trace "t.csv"; } server { run s (1); } }\n')
    from serq.errors import SerqError
    from serq.frontend import load_program
    # a spreadsheet's CSV: a byte-order mark before the header, CRLF line ends
    (tmp_path / "t.csv").write_bytes("\ufeffsession,turn,new,out,think\r\n1,0,10,5,0\r\n".encode("utf-8"))
    assert load_program(str(p), {})["workload"]["trace"]["sessions"] == [[["10", "5", "0", "0"]]]
    (tmp_path / "t.csv").write_bytes(b"1,0,10,5,0\n1,1,1\xff,5,0\n")
    with pytest.raises(SerqError) as info:
        load_program(str(p), {})
    e = info.value
    assert e.file.endswith("t.csv") and (e.line, e.column) == (2, 6) and "not valid UTF-8" in e.message


@pytest.mark.parametrize("sep", ["\x0c", "\x0b", "\u2028", "\x1c"])
def test_error_shows_its_own_line_whatever_the_comment_holds(sep):
    # lines end at "\n" only; other separators inside a comment must not shift the shown line
    e = compile_err(f"fn main() {{\n  // a{sep}b\n  let x = 0/0;\n}}\n")
    assert (e.line, e.column) == (3, 11) and e.source_line == "  let x = 0/0;"


def test_comments_numbers_strings():
    ir = compile_ok("""// line comment
/* block
   comment */ let a = 2e-5; let b = 0.9; let c = 1e9; let d = .5; let e = 16; let f = 1.;
fn main() { stage s : delay; workload { arrive batch(1); } server { run s (a + b + c + d + e + f); } }
""")
    work = ir["blocks"][ir["workload"]["server"]][0]["work"]
    assert work == {"k": "num", "v": str(__import__("fractions").Fraction("2e-5") + __import__("fractions").Fraction("0.9")
                                        + 10 ** 9 + __import__("fractions").Fraction(1, 2) + 16 + 1)}


def srv(expr: str) -> dict:
    ir = compile_ok("fn main() { stage s : delay; workload { turn { set a = 1; set b = 2; set c = 3; set d = 4; } } "
                    "server { run s (" + expr + "); } }")
    return ir["blocks"][ir["workload"]["server"]][0]["work"]


A, B, C, D = ({"k": "attr", "slot": i} for i in (9, 10, 11, 12))


def bin_(op, a, b):
    return {"k": "bin", "op": op, "a": a, "b": b}


@pytest.mark.parametrize("expr,tree", [
    ("a + b * c", bin_("+", A, bin_("*", B, C))),
    ("a - b - c", bin_("-", bin_("-", A, B), C)),
    ("a / b / c", bin_("/", bin_("/", A, B), C)),
    ("a ^ b ^ c", bin_("^", A, bin_("^", B, C))),
    ("-a ^ b", {"k": "un", "op": "neg", "a": bin_("^", A, B)}),
    ("a ? b : c ? d : a", {"k": "cond", "c": A, "a": B, "b": {"k": "cond", "c": C, "a": D, "b": A}}),
    ("a || b && c", bin_("||", A, bin_("&&", B, C))),
    ("a < b + c", bin_("<", A, bin_("+", B, C))),
    ("a == b && c != d", bin_("&&", bin_("==", A, B), bin_("!=", C, D))),
    ("!a * b", bin_("*", {"k": "un", "op": "not", "a": A}, B)),
    ("(a + b) * c", bin_("*", bin_("+", A, B), C)),
])
def test_precedence(expr, tree):
    assert srv(expr) == tree


def test_comparisons_do_not_chain():
    e = compile_err("fn main() { stage s : delay; server { run s (1 < 2 < 3); } }")
    assert (e.line, e.column) == (1, 52) and "expected" in e.message


@pytest.mark.parametrize("text,line,col,fragment", [
    ("let x = 1\nlet y = 2;", 2, 1, "expected ';' after '1'"),
    ("let x = ;", 1, 9, "expected an expression after '='"),
    ("fn main() { pool engine { cap 1; } }", 1, 18, "reserved word"),
    ("fn main() { stage s : delay; server { set order = 1; } }", 1, 43, "reserved word"),
    ("fn main() {\n  server { run s (1) }\n}", 2, 22, "expected ';'"),
    ("fn main() { server { while (1) { end; }; } }", 1, 40, "unexpected ';'"),
    ("/* never closed\nlet x = 1;", 1, 1, "unclosed block comment"),
    ('use "lib.sq\n;', 1, 5, "unterminated string"),
    ("let x = 3 $;", 1, 11, "unexpected character '$'"),
    ("let x = (((1)", 1, 14, "expected ')'"),
    ("fn main() { } let x = 1;", 1, 15, "nothing may follow"),
    ("fn main(x) { }", 1, 9, "expected ')'"),
    ("let a = 1;", 1, 1, "no `fn main"),
    ("fn main() { server { branch (x = 1) { } } }", 1, 32, "write '=='"),
    ("fn main() { device d { c cap 1; } engine e on d { scheduler { } } }", 1, 61, "writes `schedule"),
])
def test_syntax_errors_say_what_was_expected(text, line, col, fragment):
    e = compile_err(text)
    assert fragment in e.message, e.message
    assert (e.line, e.column) == (line, col), (e.line, e.column, e.message)


def test_stray_semicolon_after_hold_is_tolerated():
    with_semicolon = compile_ok("fn main() { pool p { cap 1; } stage s : delay; server { hold p (1) { run s (1); }; } }")
    without = compile_ok("fn main() { pool p { cap 1; } stage s : delay; server { hold p (1) { run s (1); } } }")
    assert with_semicolon == without  # the `;` adds nothing (no empty statement)


def test_if_is_a_synonym_of_branch():
    a = compile_ok("fn main() { stage s : delay; workload { turn { set x = 1; } } server { branch (x) { run s (1); } else { run s (2); } } }")
    b = compile_ok("fn main() { stage s : delay; workload { turn { set x = 1; } } server { if (x) { run s (1); } else { run s (2); } } }")
    strip = lambda ir: [[{k: v for k, v in st.items() if k != "at"} for st in blk] for blk in ir["blocks"]]  # noqa: E731
    assert strip(a) == strip(b)


def test_error_render_has_caret():
    e = compile_err("let x = 1\nlet y = 2;")
    assert e.render() == "t.sq:2:1: error: expected ';' after '1', found 'let'\n  let y = 2;\n  ^"


SMALL = "fn main() {{ stage s : delay; pool p {{ cap 10; block 2; }} pool q[2] {{ cap 4; }} {decl} " \
        "workload {{ turn {{ set x = 1; }} }} server {{ {stmt} }} }}"

STATEMENTS = {
    "set": "set y = x + 1;",
    "observe": "observe o = x;",
    "branch": "branch (x > 0) { run s (1); }",
    "branch-else": "branch (x > 0) { run s (1); } else { run s (2); }",
    "branch-with": "branch with (0.5) { run s (1); } else { run s (2); }",
    "if-else-if": "if (x > 1) { run s (1); } else if (x > 0) { run s (2); } else branch (x < 0) { run s (3); }",
    "while": "while (x > 0) { set x = x - 1; run s (1); }",
    "loop-end": "loop { run s (1); branch (x > 3) { end; } }".replace("end;", "set x = 0;") + " ",
    "choose": "choose k in 2 by (used(q[k]), k); hold q[k] (1) { run s (1); }",
    "hold-full": "hold p (2) reserve (4), q[0] (1) reuse (2) at admission (u = 2, v = u + cachedin(p)) "
                 "{ run s (u); } cache (4);",
    "hold-semicolon": "hold p (1) { run s (1); };",
    "grow-load-release-drop": "hold p (1) { grow p (1); load p (1); release p; } drop p;",
    "run": "run s (1);",
    "tool-paren": "tool (1);",
    "tool-bare": "tool 1 + 1;",
    "tool-on": "tool on s (2);",
    "draws": "run s (~exp(1) + ~det(1) + ~uniform(0, 1) + ~erlang(2, 1) + ~h2(1, 4) + ~bernoulli(0.5));",
    "functions": "run s (min(1, 2) + max(1, 2) + abs(-1) + floor(1.5) + ceil(1.5) + sqrt(4) + exp(0) + ln(1) + pow(2, 2));",
    "observables": "observe o = queue(s) + busy(s) + work(s) + used(p) + free(p) + cachedin(p) + holders(p) + queued(p) + blocksize(p);",
    "aggregates": "observe o = sum j in 2 (used(q[j])) + max j in 2 (free(q[j])) + min j in 2 (queued(q[j]));",
    "conditional": "run s (x > 0 ? 1 : x < 0 ? 2 : 3);",
    "inf": "observe o = min(x, inf);",
}


# the ops the server block holds for each statement above (`tool` runs on the added delay stage)
STATEMENT_OPS = {
    "set": ["set"], "observe": ["observe"], "branch": ["branch"], "branch-else": ["branch"],
    "branch-with": ["branch"], "if-else-if": ["branch"], "while": ["while"], "loop-end": ["loop"],
    "choose": ["choose", "hold"], "hold-full": ["hold"], "hold-semicolon": ["hold"],
    "grow-load-release-drop": ["hold", "drop"], "run": ["run"], "tool-paren": ["run"], "tool-bare": ["run"],
    "tool-on": ["run"], "draws": ["run"], "functions": ["run"], "observables": ["observe"],
    "aggregates": ["observe"], "conditional": ["run"], "inf": ["observe"],
}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_each_statement_parses_and_links(name):
    ir = compile_ok(SMALL.format(decl="", stmt=STATEMENTS[name]))
    server = ir["blocks"][ir["workload"]["server"]]
    assert [st["op"] for st in server] == STATEMENT_OPS[name]
    if name.startswith("tool"):
        assert ir["stages"][server[0]["stage"]["base"]]["name"] == ("s" if name == "tool-on" else "tool")
    if name == "branch-with":
        assert server[0]["cond"] == {"k": "draw", "dist": "bernoulli", "args": [{"k": "num", "v": "1/2"}]}


DECLS = {
    "let": "let k = 2 * 3;",
    "def-expr": "def f(a) { a + 1 } let k = f(1);",
    "def-stmt": "def g(a) { run s (a); observe gg = a; }",
    "def-K": "def h(a) = a * 2; let k = h(2);",
    "device": "device d { f (t) = t * 2; c cap 5; }",
    "pool-on-device": "device d { c cap 5; } pool c on d { evict lru; preempt none; queue fifo; }",
    "pool-options": "pool r { cap 5; block 1; evict by (size); preempt by (position) requeue head; queue by (waited); reserve held; }",
    "stages": "stage f1 : fifo; stage f2 : fifo(3); stage g : ps(1); stage h : delay; stage arr[3] : fifo(1);",
    "gauge": "gauge gg = used(p);",
    "stage-tool": "stage tool : fifo(2);",   # docs/language.md §8: K programs declared the tool stage
    "pool-on-engine-device": "device d { kv cap 64; } engine e on d { tokens cap 8; request (a) { prefill (a) growing kv; } "
                             "schedule { advance running; admit waiting taking kv (a); } execute (1); } pool kv on e.d { }",
}


# what each declaration adds to the IR beside SMALL's own stage `s` and pools `p`, `q[0]`, `q[1]`
DECL_ADDS = {
    "device": ([], []), "pool-on-device": (["c"], []),
    "pool-options": (["r"], []), "stages": ([], ["f1", "f2", "g", "h", "arr[0]", "arr[1]", "arr[2]"]),
    "pool-on-engine-device": (["kv"], ["e"]), "stage-tool": ([], ["tool"]),
}


@pytest.mark.parametrize("name", sorted(DECLS))
def test_each_declaration_parses_and_links(name):
    ir = compile_ok(SMALL.format(decl=DECLS[name], stmt="run s (1);"))
    pools, stages = DECL_ADDS.get(name, ([], []))
    assert [x["name"] for x in ir["pools"]] == ["p", "q[0]", "q[1]"] + pools
    assert sorted(x["name"] for x in ir["stages"]) == sorted(["s"] + stages)
    if name == "gauge":
        assert ir["gauges"] == [{"name": "gg", "expr": {"k": "obs", "f": "used",
                                                        "pool": {"base": 0, "count": 1, "index": None}},
                                 "at": [0, 1, 90]}]


def test_the_tool_stage_can_be_declared_and_named():
    """`tool` is a keyword, yet it names the stage `tool (z);` runs on: declared (`stage tool : …;`,
    `stage tool[N] : …;`), run on (`run tool (z);`) and read (`busy(tool)`)."""
    ir = compile_ok("fn main() { stage tool : fifo(2); workload { arrive batch(1); } "
                    "server { tool (3); run tool (1); observe b = busy(tool); } }")
    assert ir["stages"] == [{"name": "tool", "kind": "fifo", "servers": 2}]  # no delay stage added
    server = ir["blocks"][ir["workload"]["server"]]
    ref = {"base": 0, "count": 1, "index": None}
    assert [st["stage"] for st in server[:2]] == [ref, ref] and server[2]["expr"]["stage"] == ref
    ir = compile_ok("fn main() { stage tool[2] : delay; workload { arrive batch(1); } server { tool [1] (3); } }")
    assert ir["blocks"][ir["workload"]["server"]][0]["stage"] == {"base": 0, "count": 2, "index": {"k": "num", "v": "1"}}
    e = compile_err("fn main() { stage tool[2] : delay; workload { arrive batch(1); } server { tool [2] (3); } }")
    assert "outside `tool[0 … 1]`" in e.message and (e.line, e.column) == (1, 75)


def test_the_grammar_resolves_one_known_conflict_only(caplog):
    """lark's LALR builder refuses reduce/reduce conflicts but resolves shift/reduce ones silently
    (as a shift), which can make a form unparsable: `def f(k) { Q[k].VERB (…); }` did not parse
    while the statement `Q[k].VERB …;` read its index through a rule of its own. The one conflict
    left is harmless: at `tool -` in a definition's body, `tool -1;` is the statement (a shift),
    since the stage `tool` is no value to subtract from."""
    import logging

    from lark import Lark, logger

    from serq import parser
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        with caplog.at_level(logging.DEBUG, logger="lark"):
            Lark(parser._GRAMMAR.read_text(encoding="utf-8"), debug=True, **parser._LARK_OPTIONS)
    finally:
        logger.setLevel(level)
    conflicts = sorted({r.getMessage().split(":")[0] for r in caplog.records if "conflict" in r.getMessage()})
    assert conflicts == ["Shift/Reduce conflict for terminal MINUS"], conflicts
    compile_ok("fn main() { queue Q[2] : gateway { stage s : delay; def go(t) { run s (t); } }\n"
               "  def both(k) { Q[k].go (1); Q[1 - k].go (2); }\n"
               "  workload { arrive batch(1); } server { both(0); } }")

"""Each linker rule (docs/language.md §2, §4, §5, §10) and each moment rule: a small program that breaks
it, the message, and the exact line:column of the error.

A case is a program with the marker `@@` just before the place the error must point at.
"""

from __future__ import annotations

import pytest

from conftest import compile_err, compile_ok

BASE = """use "std/args";
let bsz = 16;
fn main() {
  let rate = args.number("rate", 1);
  device dev {
    t (n) = 0.001 + 1e-5 * n;
    kv cap 64 * bsz;
  }
  pool kv on dev { block bsz; preempt lifo; }
  pool live { cap 20; }
  engine eng on dev {
    slots cap 4;
    tokens cap 128;
    request (p, q) {
      at admission { need = max(p, computed + 1); }
      prefill (need) growing kv;
      decode (q - 1 - (need - p)) growing kv;
    }
    schedule {
      advance running;
      admit waiting while (running.preempted == 0)
        taking slots (1), kv (min(need, budget_left(eng))) reserve (need);
    }
    execute (t(batch.tokens));
  }
  pool slots on eng { queue fifo; }
  stage cpu : fifo(1);
  workload {
    arrive poisson(rate);
    hidden b;
    turn { set a = ceil(~uniform(10, 50)); set b = ceil(~exp(20)); }
  }
  server { eng (a, b); }
}
"""


def edit(old: str, new: str, base: str = BASE) -> str:
    assert old in base, old
    return base.replace(old, new, 1)


def locate(marked: str) -> tuple[str, int, int]:
    i = marked.index("@@")
    text = marked[:i] + marked[i + 2:]
    line = text.count("\n", 0, i) + 1
    col = i - (text.rfind("\n", 0, i) + 1) + 1
    return text, line, col


def expect(marked: str, fragment: str, settings: dict | None = None) -> None:
    text, line, col = locate(marked)
    e = compile_err(text, settings)
    assert fragment in e.message, e.message
    assert (e.line, e.column) == (line, col), (e.line, e.column, e.message)
    assert e.file == "t.sq"


def test_base_links():
    ir = compile_ok(BASE)
    assert [p["name"] for p in ir["pools"]] == ["kv", "live", "slots"]


SERVER = "  server { eng (a, b); }"


def server(body: str) -> str:
    return edit(SERVER, "  server { eng (a, b); " + body + " }")


CASES = {
    # ---- §10: loop and while bodies must let time pass
    "loop-no-time": (server("@@loop { set x = 1; }"), "does not let time pass"),
    "while-no-time": (server("@@while (a > 1) { set a = a - 1; }"), "does not let time pass"),
    "while-zero-run": (server("@@while (a > 1) { run cpu (0); }"), "does not let time pass"),
    "while-branch-one-arm": (server("@@while (a > 1) { branch (a > 2) { run cpu (1); } }"),
                             "does not let time pass"),
    "while-fork-no-time": (server("@@while (a > 1) { fork { set a = a - 1; } join; }"), "does not let time pass"),
    # ---- §11.13: fork and join
    "fork-unjoined": (server("@@fork { run cpu (1); }"), "never joined"),
    "fork-joined-in-inner-block": (server("@@fork { run cpu (1); } branch (a > 1) { join; }"), "never joined"),
    "join-without-fork": (server("@@join;"), "without a `fork` before it"),
    "join-twice": (server("fork { run cpu (1); } join; @@join;"), "without a `fork` before it"),
    # a branch may hold and call engines (a sub-agent); not `turn;` or `end;`, at any depth
    "fork-turn": (edit("    arrive poisson(rate);\n", "    arrive poisson(rate);\n    session { fork { @@turn; } join; }\n"),
                  "`turn;` is not allowed inside a `fork` block"),
    "fork-end-in-hold": (edit("    arrive poisson(rate);\n", "    arrive poisson(rate);\n    session { turn; fork { hold "
                              "live (1) { run cpu (1); @@end; } } join; }\n"), "`end;` is not allowed inside a `fork` block"),
    "fork-nested-end": (edit("    arrive poisson(rate);\n", "    arrive poisson(rate);\n    session { turn; fork { fork { "
                             "while (a > 1) { run cpu (1); @@end; } } join; } join; }\n"),
                        "`end;` is not allowed inside a `fork` block"),
    "parent-call-before-join": (server("fork { run cpu (1); } @@eng (a, b); join;"),
                                "not allowed between a `fork` and its `join;`"),
    "parent-engine-run-before-join": (server("fork { run cpu (1); } @@run eng (1); join;"),
                                      "a run on engine `eng` is not allowed between a `fork` and its `join;`"),
    "parent-hold-before-join": (server("hold live (1) { fork { run cpu (1); } @@hold live (1) { run cpu (1); } "
                                       "join; }"), "a `hold` or an engine call is not allowed between"),
    "parent-grow-in-loop-before-join": (server("fork { run cpu (1); } loop { run cpu (1); @@drop live; } join;"),
                                        "`drop` is not allowed between"),
    # ---- §10: constant branch condition
    "branch-const": (server("branch (@@2) { run cpu (1); }"), "not 0 or 1"),
    "if-const": (server("if (@@1 + 1) { run cpu (1); }"), "branch with"),
    "sched-branch-const": (edit("      advance running;\n",
                                "      branch (@@3) { advance running; } else { advance running; }\n"),
                           "not 0 or 1"),
    # ---- §10: a value set from live state and read later in a hold header
    "live-set-header": (server("set f = free(live); hold live (@@f) { run cpu (1); }"), "use `at admission`"[:0] + "at admission"),
    "live-set-copied-header": (server("set f = free(live); set g = f + 1; hold live (@@g) { run cpu (1); }"),
                               "at admission"),
    # ---- §10: hold without cache
    "cached-without-cache": (server("hold live (1) { set x = @@cached; run cpu (1); }"), "without a `cache"),
    "reuse-without-cache": (server("hold live (1) reuse (@@2) { run cpu (1); }"), "needs a `cache"),
    # ---- §10: each at most
    "each-zero": (edit("advance running;", "advance running each at most (@@0);")
                  .replace("reserve (need);", "reserve (need);"), "must be positive"),
    "each-not-constant": (edit("advance running;", "advance running each at most (@@running.count);"),
                          "select among positive constants"),
    "each-max-zero": (edit("advance running;", "advance running each at most (@@max(0, running.count));"),
                      "select among positive constants"),
    "each-unequal": (edit("while (running.preempted == 0)\n", "while (running.preempted == 0) each at most (@@8)\n")
                     .replace("advance running;", "advance running each at most (16);"), "must be equal"),
    "granule-zero": (edit("tokens cap 128;", "tokens cap 128; granule @@0;"), "whole number >= 1"),
    "granule-fraction": (edit("tokens cap 128;", "tokens cap 128; granule @@2.5;"), "whole number >= 1"),
    # ---- §10: tokens cap, schedule paths
    "tokens-cap-zero": (edit("tokens cap 128;", "tokens cap @@0;"), "must be positive"),
    "schedule-path": (edit("    schedule {\n      advance running;\n      admit waiting",
                           "    @@schedule {\n      branch (running.count > 0) { advance running; }\n      set r = 1;\n      admit waiting")
                      .replace("tokens cap 128;", "tokens cap 128; state r = 0;")
                      .replace("      set r = 1;\n      admit waiting while (running.preempted == 0)\n"
                               "        taking slots (1), kv (min(need, budget_left(eng))) reserve (need);\n",
                               "      set r = 1;\n"),
                      "reaches neither"),
    # ---- §10: constant units above the cap
    "units-above-cap": (server("hold live (@@21) { run cpu (1); }"), "above its capacity"),
    "reserve-above-cap-block": (server("hold kv (1) reserve (@@1025) { run cpu (1); }"), "above its capacity"),
    "taking-above-cap": (edit("taking slots (1)", "taking slots (@@5)"), "above its capacity"),
    "array-units-above-cap": (edit("pool live { cap 20; }", "pool live { cap 20; }\n  pool arr[2] { cap 4; }")
                              .replace(SERVER, "  server { eng (a, b); hold arr[1] (@@5) { run cpu (1); } }"),
                              "above its capacity"),
    "array-index-out-of-range": (edit("pool live { cap 20; }", "pool live { cap 20; }\n  pool arr[2] { cap 4; }")
                                 .replace(SERVER, "  server { eng (a, b); hold arr[@@2] (1) { run cpu (1); } }"),
                                 "outside"),
    "array-without-index": (edit("pool live { cap 20; }", "pool live { cap 20; }\n  pool arr[2] { cap 4; }")
                            .replace(SERVER, "  server { eng (a, b); hold @@arr (1) { run cpu (1); } }"),
                            "write `arr[i]`"),
    # ---- §10: arrivals
    "poisson-zero": (edit("arrive poisson(rate);", "arrive poisson(@@0);"), "positive finite"),
    "poisson-inf": (edit("arrive poisson(rate);", "arrive poisson(@@inf);"), "positive finite"),
    "batch-fraction": (edit("arrive poisson(rate);", "arrive batch(@@1.5);"), "whole number"),
    "closed-too-many": (edit("arrive poisson(rate);", "arrive closed(@@2e6);"), "whole number"),
    "poisson-not-constant": (edit("arrive poisson(rate);", "arrive poisson(@@serial);"), "cannot read"),
    "choose-none": (server("choose j in @@0 by (j); run cpu (1);"), "whole number n >= 1"),
    "choose-fraction": (server("choose j in @@1.5 by (j); run cpu (1);"), "whole number n >= 1"),
    # ---- §4.3: draws in re-read places
    "draw-hold-units": (server("hold live (@@~exp(1)) { run cpu (1); }"), "a draw"),
    "draw-reserve": (server("hold live (1) reserve (@@~exp(1)) { run cpu (1); }"), "a draw"),
    "draw-binding": (server("hold live (1) at admission (x = @@~det(1)) { run cpu (x); }"), "a draw"),
    "draw-taking": (edit("taking slots (1)", "taking slots (@@~det(1))"), "a draw"),
    "draw-queue-key": (edit("pool live { cap 20; }", "pool live { cap 20; queue by (@@~exp(1)); }"), "a draw"),
    "draw-evict-key": (edit("pool live { cap 20; }", "pool live { cap 20; evict by (@@~exp(1)); }"), "a draw"),
    "draw-preempt-key": (edit("pool live { cap 20; }", "pool live { cap 20; preempt by (@@~exp(1)); }"),
                         "a draw"),
    "draw-sched-let": (edit("    schedule {\n", "    schedule {\n      let x = @@~exp(1);\n"), "a draw"),
    "draw-guard": (edit("while (running.preempted == 0)", "while (@@~bernoulli(1))"), "a draw"),
    "draw-only": (edit("advance running;", "advance running only (@@~bernoulli(1));"), "a draw"),
    "draw-order": (edit("advance running;", "advance running by (@@~exp(1));"), "a draw"),
    "draw-gauge": ("" + edit(SERVER, SERVER + "\n  gauge g = @@~exp(1);"), "a draw"),
    "draw-constant": (edit("let bsz = 16;", "let bsz = @@~exp(16);"), "a constant"),
    # ---- §4.6: context variables outside their moment
    "now-in-gauge": (edit(SERVER, SERVER + "\n  gauge g = @@now;"), "context variable `now`"),
    "now-in-guard": (edit("while (running.preempted == 0)", "while (@@now > 0)"), "context variable `now`"),
    "size-in-session": (server("set x = @@size;"), "eviction keys"),
    "waited-in-evict": (edit("pool live { cap 20; }", "pool live { cap 20; evict by (@@waited); }"), "queue keys"),
    "age-in-queue": (edit("pool live { cap 20; }", "pool live { cap 20; queue by (@@age); }"), "eviction keys"),
    "present-in-session": (server("set x = @@present;"), "ps stage"),
    "position-in-queue": (edit("pool live { cap 20; }", "pool live { cap 20; queue by (@@position); }"),
                          "preemption keys"),
    "waiting-in-session": (server("set x = @@waiting;"), "eviction keys"),
    # ---- §4.4/§4.5: observables and engine values
    "observable-in-constant": (edit("let bsz = 16;", "let q = 1;\nlet bsz = @@used(kv);"), "cannot be read in a constant"),
    "engine-value-outside": (server("set x = @@running.count;"), "value of an engine"),
    "batch-in-tokens-cap": (edit("tokens cap 128;", "tokens cap @@batch.tokens;"), "cannot be read in `tokens cap`"),
    "attr-in-execute": (edit("execute (t(batch.tokens));", "execute (t(@@a));"), "cannot be read in `execute`"),
    "job-key-outside": (server("set x = @@admission;"), "per-request key"),
    # ---- §4.7: name clashes
    "let-inf": (edit("let bsz = 16;", "let bsz = 16;\nlet @@inf = 2;"), "reserved name"),
    "let-ctx": (edit("let bsz = 16;", "let bsz = 16;\nlet @@now = 2;"), "context variable"),
    "set-const": (server("set @@bsz = 1;"), "constant"),
    "set-ctx": (server("set @@size = 1;"), "context variable"),
    "set-inf": (server("set @@inf = 1;"), "reserved name"),
    "let-attr": (edit("  stage cpu : fifo(1);", "  stage cpu : fifo(1);\n  let @@more = 1;"), "session attribute"),
    "param-const": (edit("request (p, q)", "request (p, @@bsz)"), "constant"),
    "sched-let-hides-attr": (edit("    schedule {\n", "    schedule {\n      let need = 5;\n")
                             .replace("kv (min(need,", "kv (min(@@need,"), "both a schedule `let`"),
    "register-hides-attr": (edit("tokens cap 128;", "tokens cap 128; state a = 0;")
                            .replace("advance running;", "advance running by (@@a);"), "both a register"),
    "register-const": (edit("tokens cap 128;", "tokens cap 128; @@state bsz = 0;"), "constant"),
    "register-inf": (edit("tokens cap 128;", "tokens cap 128; @@state inf = 0;"), "reserved"),
    "register-twice": (edit("tokens cap 128;", "tokens cap 128; state r = 0; @@state r = 1;"), "already a register"),
    "sched-let-ctx": (edit("    schedule {\n", "    schedule {\n      let @@age = 5;\n"), "reserved or context"),
    "def-then-engine": (edit("let bsz = 16;", "let bsz = 16;\ndef eng(x, y) { set z = 1; }")
                        .replace("  engine eng on dev", "  @@engine eng on dev"), "already a definition"),
    "engine-then-def": (edit("  stage cpu : fifo(1);", "  stage cpu : fifo(1);\n  @@def eng(x, y) { set z = 1; }"),
                        "already declared"),
    "def-builtin": (edit("let bsz = 16;", "let bsz = 16;\n@@def floor(x) { x }"), "built-in function"),
    "devfn-builtin": (edit("    t (n) =", "    @@ceil (n) = 1;\n    t (n) ="), "built-in function"),
    # ---- blocksize, NaN
    "blocksize-no-block": (server("set x = @@blocksize(live);"), "has no `block`"),
    "blocksize-in-let": (edit("  stage cpu", "  let z = @@blocksize(kv);\n  stage cpu"), "cannot be used in a `let`"),
    "nan-zero-over-zero": (edit("let bsz = 16;", "let bsz = 16;\nlet z = @@0 / 0;"), "NaN"),
    "nan-inf-minus-inf": (edit("let bsz = 16;", "let bsz = 16;\nlet z = @@inf - inf;"), "NaN"),
    "nan-in-expression": (server("set x = a + @@0 * inf;"), "NaN"),
    # ---- hidden attributes and `at admission` purity (§7.2, §8)
    "hidden-in-header": (server("hold live (@@b) { run cpu (1); }"), "hidden"),
    "hidden-through-request-parameter": (edit("kv (min(need, budget_left(eng)))", "kv (min(need + @@q, budget_left(eng)))"),
                                         "given the hidden `b`"),
    "hidden-parameter-in-queue-key": (edit("pool slots on eng { queue fifo; }", "pool slots on eng { queue by (@@q); }"),
                                      "given the hidden `b`"),
    "impure-binding-in-body": (server("hold live (1) at admission (r = used(kv)) { run cpu (@@r); }"),
                               "reads live state"),
    # ---- definitions (§2)
    "def-recursion": (edit("let bsz = 16;", "let bsz = 16;\ndef f(x) { @@f(x) + 1 }")
                      .replace("set a = ceil(", "set a = f(1) + ceil("), "defined after this use"),
    "def-later": (edit("let bsz = 16;", "let bsz = 16;\ndef g(x) { @@h(x) }\ndef h(x) { x }")
                  .replace("set a = ceil(", "set a = g(1) + ceil("), "defined after this use"),
    "def-draw-twice": (edit("let bsz = 16;", "let bsz = 16;\ndef sq(x) { x * x }")
                       .replace(SERVER, "  server { eng (a, b); run cpu (sq(@@~exp(1))); }"), "read exactly once"),
    "def-arity": (edit("let bsz = 16;", "let bsz = 16;\ndef sq(x) { x * x }")
                  .replace(SERVER, "  server { eng (a, b); run cpu (@@sq(1, 2)); }"), "takes 1 argument"),
    "unknown-function": (server("set x = @@frob(1);"), "unknown function"),
    "unknown-name": (server("set x = @@rte + 1;"), "unknown name `rte`"),
    # ---- §2 inputs
    "args-without-std": (edit('use "std/args";\n', "").replace('let rate = args.number', 'let rate = @@args.number'),
                         "std/args"),
    "args-outside-main": (edit("let bsz = 16;", 'let bsz = 16;\nlet r = @@args.number("r", 1);'),
                          "inside `fn main`"),
    "args-not-whole": (server('set x = @@args.number("x", 1);'), "whole initializer"),
    # ---- §8 workload and server
    "turn-in-server": (server("@@turn;"), "not allowed in the server"),
    "end-in-server": (server("@@end;"), "not allowed in the server"),
    "while-in-turn-block": (edit("turn { set a", "turn { @@while (1) { end; } set a"), "only `set` and `observe`"),
    "session-without-turn": (edit("    hidden b;", "    hidden b;\n    @@session { run cpu (1); }"),
                             "must contain `turn;`"),
    "engine-call-in-session": (edit("    hidden b;", "    hidden b;\n    session { turn; @@eng (a, b); }"),
                               "only in the `server` block"),
    "engine-call-arity": (edit("server { eng (a, b); }", "server { @@eng (a); }"), "takes 2 argument"),
    # ---- declarations (§2, §6)
    "pool-unknown-owner": (edit("pool live { cap 20; }", "pool live on @@nowhere { }"), "unknown device or engine"),
    "pool-owner-below": (edit("pool slots on eng { queue fifo; }", "").replace(
        "  pool live { cap 20; }", "  pool slots on @@eng { queue fifo; }\n  pool live { cap 20; }"),
        "unknown device or engine"),
    "pool-owner-no-cap": (edit("pool live { cap 20; }", "@@pool live on dev { }"), "declares no capacity `live`"),
    "pool-without-cap": (edit("pool live { cap 20; }", "@@pool live { block 2; }"), "has no capacity"),
    "pool-cap-negative": (edit("pool live { cap 20; }", "pool live { cap @@-1; }"), "cannot be negative"),
    "device-cap-negative": (edit("kv cap 64 * bsz;", "kv cap @@-64 * bsz;"), "cannot be negative"),
    "engine-cap-negative": (edit("slots cap 4;", "slots cap @@-4;"), "cannot be negative"),
    "pool-on-engine-other-device": (edit("pool kv on dev { block bsz; preempt lifo; }", "").replace(
        "  pool slots on eng { queue fifo; }",
        "  pool slots on eng { queue fifo; }\n  device dev2 { kv cap 64; }\n  pool kv on eng.@@dev2 { block bsz; }"),
        "runs on device `dev`"),
    "pool-cap-on-owner": (edit("pool kv on dev { block bsz;", "pool kv on dev { @@cap 3; block bsz;"),
                          "takes its capacity"),
    "duplicate-decl": (edit("  stage cpu : fifo(1);", "  stage cpu : fifo(1);\n  @@stage live : delay;"),
                       "already declared"),
    "engine-no-execute": (edit("    execute (t(batch.tokens));\n", "").replace("  engine eng on dev", "  @@engine eng on dev"),
                          "needs `execute"),
    "engine-unknown-device": (edit("engine eng on dev", "engine eng on @@gpu"), "unknown device"),
    "second-taking": (edit("reserve (need);\n", "reserve (need);\n      admit waiting @@taking slots (1);\n"),
                      "second `taking`"),
    "growing-two-pools": (edit("decode (q - 1 - (need - p)) growing kv;", "decode (q - 1 - (need - p)) growing @@live;"),
                          "grow two different pools"),
    "growing-unknown-pool": (edit("prefill (need) growing kv;", "prefill (need) growing @@kv2;"), "unknown pool `kv2`"),
    "unknown-pool": (server("hold @@pool9 (1) { run cpu (1); }"), "unknown pool"),
    "unknown-stage": (server("run @@gpu2 (1);"), "unknown stage"),
    "register-unknown": (edit("      advance running;\n", "      set @@nope = 1;\n      advance running;\n"),
                         "not a register"),
    # ---- one case for each remaining message of the linker (found by tracing which `raise` ran)
    "def-twice": (edit("let bsz = 16;", "let bsz = 16;\ndef f(x) { x }\n@@def f(y) { y }"), "already defined"),
    "def-param-twice": (edit("let bsz = 16;", "let bsz = 16;\ndef f(x, @@x) { x }"), "appears twice"),
    "const-twice": (edit("let bsz = 16;", "let bsz = 16;\nlet @@bsz = 2;"), "already defined"),
    "read-before-let": (edit(SERVER, "  server { eng (a, b); set y = zz; }\n  let @@zz = 3;"), "before this `let`"),
    "input-twice": (edit('  let rate = args.number("rate", 1);',
                         '  let rate = args.number("rate", 1);\n  let r2 = args.number(@@"rate", 2);'), "already declared"),
    "input-not-rational": (edit('args.number("rate", 1)', 'args.number("rate", @@sqrt(2))'), "exact constant"),
    "array-size": (edit("pool live { cap 20; }", "pool live[@@0] { cap 20; }"), "from 1 to 4096"),
    "device-item-twice": (edit("    kv cap 64 * bsz;", "    kv cap 64 * bsz;\n    @@kv cap 2;"), "declared twice"),
    "pool-option-twice": (edit("pool live { cap 20; }", "pool live { cap 20; @@cap 3; }"), "given twice"),
    "block-zero": (edit("block bsz;", "block @@0;"), "positive finite"),
    "engine-item-twice": (edit("tokens cap 128;", "tokens cap 128; @@tokens cap 64;"), "given twice"),
    "engine-cap-twice": (edit("slots cap 4;", "slots cap 4; @@slots cap 5;"), "declared twice"),
    "request-param-twice": (edit("request (p, q)", "request (p, @@p)"), "appears twice"),
    "request-cache-twice": (edit("decode (q - 1 - (need - p)) growing kv;",
                                 "decode (q - 1 - (need - p)) growing kv; cache (p); @@cache (q);"), "second `cache"),
    "request-run-before-admission": (edit("      at admission { need = max(p, computed + 1); }\n      prefill",
                                          "      @@prefill (p) growing kv;\n      at admission { need = max(p, computed + 1); }\n      prefill"),
                                     "go after `at admission"),
    "workload-item-twice": (edit("arrive poisson(rate);", "arrive poisson(rate); arrive @@none;"), "given twice"),
    "server-twice": (edit(SERVER, SERVER + "\n  @@server { run cpu (1); }"), "second `server`"),
    "gauge-twice": (edit(SERVER, SERVER + "\n  gauge g = 1;\n  @@gauge g = 2;"), "already declared"),
    "attr-named-pool": (server("set @@live = 1;"), "not an attribute"),
    "prefill-on-fifo": (server("@@run cpu prefill (1);"), "needs an engine"),
    # §11.6: a growing run advances by the tokens an engine serves; a fifo, ps or delay serves none
    "growing-on-fifo": (server("hold live (1) { @@run cpu (1) growing live; }"), "`run … growing` needs an engine"),
    # §4.5: the per-request keys are a resident's; a waiting head has no run
    "admit-only-remaining": (edit("admit waiting while", "admit waiting only (@@remaining > 0) while"),
                             "`remaining` (a per-request key) cannot be read in `admit waiting only (…)`"),
    "admit-only-decoding": (edit("admit waiting while", "admit waiting only (1 - @@decoding) while"),
                            "`decoding` (a per-request key) cannot be read in `admit waiting only (…)`"),
    "admit-only-admission": (edit("admit waiting while", "admit waiting only (@@admission < 3) while"),
                             "`admission` (a per-request key) cannot be read in `admit waiting only (…)`"),
    "expr-def-as-statement": (edit("let bsz = 16;", "let bsz = 16;\ndef f(x) { x }").replace(SERVER, "  server { eng (a, b); @@f (1); }"),
                              "expression definition"),
    "stmt-def-in-expression": (edit("let bsz = 16;", "let bsz = 16;\ndef g(x) { run cpu (x); }").replace(SERVER, "  server { eng (a, b); run cpu (@@g(1)); }"),
                               "statement definition"),
    "value-as-statement": (server("@@used (live);"), "a value, not a statement"),
    "negative-units": (server("hold live (@@-1) { run cpu (1); }"), "negative amount"),
    "pool-as-stage": (server("run @@live (1);"), "is a pool, not a stage"),
    "unknown-distribution": (server("run cpu (~@@gamma(1));"), "unknown distribution"),
    "distribution-arity": (server("run cpu (@@~uniform(1));"), "takes 2 argument"),
    "unknown-engine-value": (edit("execute (t(batch.tokens));", "execute (t(@@batch.nope));"), "unknown engine value"),
    "pool-as-value": (server("set x = @@live + 1;"), "not a value"),
    "def-as-value": (edit("let bsz = 16;", "let bsz = 16;\ndef f(x) { x }").replace(SERVER, "  server { eng (a, b); set x = @@f + 1; }"),
                     "call it as"),
    "function-arity": (server("set x = @@floor(1, 2);"), "takes exactly 1"),
    "blocksize-arity": (server("set x = @@blocksize(kv, kv);"), "exactly 1 argument"),
    "second-workload": (edit(SERVER, SERVER + "\n  @@workload { arrive none; }"), "second `workload`"),
    # ---- docs/language.md §4.4: an engine's online estimates take the stage forms' arguments
    "price-engine-arity": (server("set x = @@price(eng, 1);"), "takes exactly 3 arguments"),
    "est-engine-arity": (server("set x = @@est_wait(eng, 1);"), "takes exactly 1 argument"),
    "est-of-a-pool": (server("set x = est_rho(@@kv);"), "`kv` is a pool, not a stage"),
    "est-in-a-constant": (edit("let bsz = 16;", "let bsz = @@est_rho(eng);"), "cannot be read in a constant"),
    # ---- docs/language.md §11.4 `lease P (t)`
    "lease-other-pool": (server("hold live (1) { run cpu (1); } lease @@kv (3);"), "does not take"),
    "lease-negative-time": (server("hold live (1) { run cpu (1); } lease live (@@-1);"), "must be >= 0"),
    "lease-request-twice": (edit("      decode (q - 1 - (need - p)) growing kv;\n",
                                 "      decode (q - 1 - (need - p)) growing kv;\n      lease kv (1);\n      @@lease kv (2);\n"),
                            "a second `lease"),
    "lease-request-before-admission": (edit("      at admission {", "      @@lease kv (1);\n      at admission {"),
                                       "go after `at admission"),
    "lease-request-other-pool": (edit("      decode (q - 1 - (need - p)) growing kv;\n",
                                      "      decode (q - 1 - (need - p)) growing kv;\n      lease @@live (1);\n"),
                                 "does not take"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule(case):
    marked, fragment = CASES[case]
    expect(marked, fragment)


def test_schedule_let_beside_an_attribute_it_does_not_read():
    # docs/language.md §10's adaptive threshold `let n = …` beside the seed's attribute `n`: no clash
    # while no expression that sees both reads `n`.
    text = edit("    schedule {\n", "    schedule {\n      let n = running.count + waiting.count;\n"
                "      let c = n > 1 ? max(16, floor(128 / n)) : inf;\n").replace(
        "advance running;", "advance running each at most (c);").replace(
        "set a = ceil(~uniform(10, 50));", "set n = ceil(~uniform(10, 50)); set a = n;")
    ir = compile_ok(text)
    assert [x["name"] for x in ir["stages"][0]["lets"]] == ["n", "c"] and "n" in ir["attrs"]


def test_set_unknown_input_lists_known():
    e = compile_err(BASE, {"nope": "1"})
    assert "unknown input `nope`" in e.message and "rate" in e.message and e.file is None


def test_set_plain_let_refused():
    e = compile_err(BASE, {"bsz": "1"})
    assert "plain `let`" in e.message


def test_set_local_name_points_to_the_external_one():
    text = BASE.replace('let rate = args.number("rate", 1);', 'let rate = args.number("Rate", 1);')
    e = compile_err(text, {"rate": "2"})
    assert "--set Rate=" in e.message
    assert compile_ok(text, {"Rate": "2"})["inputs"] == {"Rate": "2"}


def test_set_bad_value():
    e = compile_err(BASE, {"rate": "fast"})
    assert "not a number" in e.message


@pytest.mark.parametrize("text", ["--5", "+-5", "- 5", "1_000", "\u0663", "1/0", "1/-2", "0x10", "nan",
                                  "INF", "1e5/3", "", "5\n6"])
def test_set_value_that_is_not_one_number(text):
    e = compile_err(BASE, {"rate": text})
    assert e.file is None and "not a number" in e.message, e.message


@pytest.mark.parametrize("text, wire", [("+5", "5"), (" 2.5 ", "5/2"), ("-1/2", "-1/2"), ("1e3", "1000"),
                                        (".5", "1/2"), ("5.", "5"), ("-inf", "-inf"), ("+inf", "inf")])
def test_set_value_spellings(text, wire):
    text_ = BASE.replace('  let rate = args.number("rate", 1);',
                         '  let rate = args.number("rate", 1);\n  let x = args.number("x", 0);')
    assert compile_ok(text_, {"x": text})["inputs"] == {"rate": "1", "x": wire}


def test_set_negative_capacity_is_an_error_at_the_capacity():
    text = BASE.replace("kv cap 64 * bsz;", "kv cap blocks * bsz;").replace(
        '  let rate = args.number("rate", 1);', '  let rate = args.number("rate", 1);\n  let blocks = args.number("blocks", 64);')
    compile_ok(text)
    e = compile_err(text, {"blocks": "-1"})
    assert "capacity `kv` cannot be negative, got -16" in e.message and (e.line, e.column) == (8, 12)


def test_set_binds_inf_and_numbers():
    ir = compile_ok(BASE, {"rate": "2.5"})
    assert ir["inputs"] == {"rate": "5/2"} and ir["workload"]["arrival"]["rate"] == "5/2"


def test_set_each_cap_zero_is_an_error():
    text = edit("advance running;", 'advance running each at most (cap_);').replace(
        '  let rate = args.number("rate", 1);', '  let rate = args.number("rate", 1);\n  let cap_ = args.number("cap", inf);')
    compile_ok(text)
    e = compile_err(text, {"cap": "0"})
    assert "must be positive" in e.message


def test_use_cycle(tmp_path):
    (tmp_path / "a.sq").write_text('use "b.sq";\nfn main() { }\n')
    (tmp_path / "b.sq").write_text('use "c.sq";\n')
    (tmp_path / "c.sq").write_text('let z = 1;\nuse "b.sq";\n')
    from serq.errors import SerqError
    from serq.frontend import load_program
    with pytest.raises(SerqError) as info:
        load_program(str(tmp_path / "a.sq"), {})
    e = info.value
    assert "`use` cycle" in e.message and (e.line, e.column) == (2, 5) and e.file.endswith("c.sq")


def test_use_missing_library(tmp_path):
    (tmp_path / "a.sq").write_text('let x = 1;\nuse "lib/none.sq";\nfn main() { }\n')
    from serq.errors import SerqError
    from serq.frontend import load_program
    with pytest.raises(SerqError) as info:
        load_program(str(tmp_path / "a.sq"), {})
    assert "cannot read library" in info.value.message and (info.value.line, info.value.column) == (2, 5)


def test_use_reads_each_library_once(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "l.sq").write_text("let k = 3;\n")
    (tmp_path / "lib" / "m.sq").write_text('use "l.sq";\n')
    (tmp_path / "a.sq").write_text('use "lib/l.sq";\nuse "lib/m.sq";\nuse "lib/l.sq";\n'
                                   'fn main() { stage s : fifo(k); workload { arrive batch(1); } server { run s (k); } }\n')
    from serq.frontend import load_program
    ir = load_program(str(tmp_path / "a.sq"), {})
    assert ir["files"] == ["a.sq", "lib/l.sq", "lib/m.sq"]
    assert ir["stages"][0]["servers"] == 3


def test_library_with_main_is_refused(tmp_path):
    (tmp_path / "l.sq").write_text("let k = 3;\nfn main() { }\n")
    (tmp_path / "a.sq").write_text('use "l.sq";\nfn main() { }\n')
    from serq.errors import SerqError
    from serq.frontend import load_program
    with pytest.raises(SerqError) as info:
        load_program(str(tmp_path / "a.sq"), {})
    assert "library" in info.value.message and (info.value.line, info.value.column) == (2, 1)


# No construct is refused as "not supported yet" any more (docs/language.md §16): the last one,
# `spill` on a `share content` pool, is docs/content.md §6 (its still-refused mixes are located
# errors in tests/test_spill.py).


def test_engine_estimates_mark_only_the_engine():
    """docs/language.md §4.4 "An engine's estimates": reading them of an engine is accepted and
    marks that engine `"estimates": true` in the IR (only it: the fifo stage keeps none)."""
    ir = compile_ok(server("observe r = est_rho(eng); observe m = price(eng, 1, 2);"))
    marked = {s["name"]: s.get("estimates", False) for s in ir["stages"]}
    assert marked == {"eng": True, "cpu": False}, marked


def test_several_errors_in_one_pass_without_cascades():
    e = compile_err("""fn main() {
  pool p { cap 0/0; }
  stage s : fifo(0);
  workload { turn { set x = 1; } }
  server {
    hold p (1) { run s (1); }
    set now = 3;
    branch (2) { run s (1); }
    run q (1);
  }
}
""")
    got = [(x.line, x.column) for x in [e] + e.more]
    assert got == [(2, 16), (3, 18), (7, 9), (8, 13), (9, 9)]  # nothing about `p` or `s` being unknown
    assert e.render().count(": error: ") == 5


def test_per_request_keys_and_growing_where_they_belong():
    """The counterparts of the cases `admit-only-*` and `growing-on-fifo`: per-request keys in
    `advance running only (…)` (a resident's, §4.5) and `growing` on an engine's run compile."""
    ir = compile_ok(edit("advance running;", "advance running only (remaining > decoding + admission);"))
    adv = ir["stages"][0]["schedule"][0]
    assert adv["op"] == "advance" and {"k": "job", "name": "remaining"} == adv["only"]["a"]
    compile_ok(edit("admit waiting while", "admit waiting only (a > 0) while"))


def test_one_error_is_reported_once():
    # The seed's engine request body is lowered at each call site; an error in it (here a cap of
    # 0 request slots) was printed twice with the same place and message.
    from pathlib import Path

    from serq.errors import SerqError
    from serq.frontend import load_program
    prog = Path(__file__).resolve().parents[1] / "examples/multi-turn/vllm.sq"
    with pytest.raises(SerqError) as info:
        load_program(str(prog), {"max_seqs": "0"})
    assert "above its capacity 0" in info.value.message
    assert info.value.render().count("above its capacity 0") == 1


def test_lease_clause_in_the_ir():
    """`lease P (t)` (docs/language.md §11.4) on an explicit hold and in a request block: the hold's IR
    carries `lease` {pool, time}; a hold without the clause has no `lease` key (docs/ir.md)."""
    ir = compile_ok(server("hold live (1) { run cpu (1); } cache (1) lease live (3/2);"))
    holds = [s for b in ir["blocks"] for s in b if s["op"] == "hold"]
    assert [h.get("lease") for h in holds] == [None, {"pool": {"base": 1, "count": 1, "index": None},
                                                      "time": {"k": "num", "v": "3/2"}}]
    assert "lease" not in holds[0]
    ir = compile_ok(edit("      decode (q - 1 - (need - p)) growing kv;\n",
                         "      decode (q - 1 - (need - p)) growing kv;\n      lease kv (inf);\n"))
    (hold,) = [s for b in ir["blocks"] for s in b if s["op"] == "hold"]
    assert hold["lease"] == {"pool": {"base": 0, "count": 1, "index": None}, "time": {"k": "num", "v": "inf"}}


def test_fork_and_join_lower_to_their_ir_statements():
    """§11.13: `fork { … }` becomes {"op": "fork", "body": BLOCK}, `join;` {"op": "join"}, nested
    forks inside a branch's block included; a fork body that lets time pass lets a loop pass time."""
    from serq.frontend import compile_source
    text = server("fork { run cpu (1); fork { tool (2); } join; } fork { tool (3); } join; "
                  "while (a > 100) { fork { tool (1); } join; }")
    ir = compile_source(text, "fork.sq")
    server_ops = [st["op"] for st in ir["blocks"][ir["workload"]["server"]]]
    assert server_ops[-4:] == ["fork", "fork", "join", "while"]
    first = ir["blocks"][ir["workload"]["server"]][-4]
    assert [st["op"] for st in ir["blocks"][first["body"]]] == ["run", "fork", "join"]


def test_a_fork_whose_block_holds_is_marked_own():
    """§11.13: a fork whose block holds a pool or calls an engine, at any depth, is a sub-agent:
    `"own": true` (its attributes are its own); a fork that only computes and runs has no key, so
    the IR of every program without holds in branches is what it was; a fork inside a hold links."""
    from serq.frontend import compile_source
    text = server("hold live (1) { fork { eng (a, b); } fork { while (a > 1) { hold live (1) { run cpu (1); } } } "
                  "fork { tool (1); } join; }")
    ir = compile_source(text, "own.sq")
    forks = [st for b in ir["blocks"] for st in b if st["op"] == "fork"]
    assert [st.get("own") for st in forks] == [True, True, None]

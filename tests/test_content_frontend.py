"""The content-addressed prefix extension in the front-end (docs/content.md §1, §4): `prefix`,
`share content`, `content (p, n, h)` — the IR they produce and each link error, with its message
and exact line:column (the marker `@@` of test_linker.py)."""

from __future__ import annotations

import pytest

from conftest import compile_err, compile_ok
from test_linker import BASE, edit, expect

CONTENT = edit("  pool kv on dev { block bsz; preempt lifo; }",
               "  prefix 7 (40);\n  prefix 8 (20) after 7;\n"
               "  pool kv on dev { block bsz; share content; preempt lifo; }")
CONTENT = edit("kv (min(need, budget_left(eng))) reserve (need);",
               "kv (min(need, budget_left(eng))) content (8, 50, serial) reserve (need);", CONTENT)


def test_ir_of_prefixes_share_and_content():
    ir = compile_ok(CONTENT)
    assert ir["prefixes"] == [{"key": "7", "length": "40", "after": None, "total": "40"},
                              {"key": "8", "length": "20", "after": "7", "total": "60"}]
    assert [p["share"] for p in ir["pools"]] == ["content", None, None]
    hold = next(s for b in ir["blocks"] for s in b if s["op"] == "hold")
    slots, kv = hold["pools"]
    assert slots["content"] is None and slots["reserve"] is None
    assert kv["content"] == {"prefix": {"k": "num", "v": "8"}, "length": {"k": "num", "v": "50"},
                             "history": {"k": "attr", "slot": 0}}
    assert kv["reserve"] is not None


def test_a_program_without_the_extension_gets_empty_fields():
    ir = compile_ok(BASE)
    assert ir["prefixes"] == [] and all(p["share"] is None for p in ir["pools"])
    hold = next(s for b in ir["blocks"] for s in b if s["op"] == "hold")
    assert all(item["content"] is None for item in hold["pools"])


def test_content_and_reserve_in_either_order_on_a_hold():
    a = compile_ok(edit("  server { eng (a, b); }",
                        "  server { eng (a, b); hold kv (16) content (7, 3, serial) reserve (32) { run cpu (1); } }",
                        CONTENT))
    b = compile_ok(edit("  server { eng (a, b); }",
                        "  server { eng (a, b); hold kv (16) reserve (32) content (7, 3, serial) { run cpu (1); } }",
                        CONTENT))
    assert a["blocks"] == b["blocks"]


def test_key_given_as_a_constant_name_or_a_parenthesised_expression():
    ir = compile_ok(edit("  prefix 7 (40);", "  prefix 7 (40);\n  prefix bsz (40);\n  prefix (bsz + 1) (2) after bsz;",
                         CONTENT))
    assert [(p["key"], p["total"]) for p in ir["prefixes"]][1:3] == [("16", "40"), ("17", "42")]


CASES = [
    (edit("  prefix 8 (20) after 7;", "  prefix 8 (20) after 7;\n  prefix @@7 (3);", CONTENT),
     "prefix 7 is already declared at t.sq:9:3"),
    (edit("  prefix 8 (20) after 7;", "  prefix 8 (20) after @@9;", CONTENT),
     "`after 9`: no prefix 9 is declared before this one"),
    (edit("  prefix 7 (40);\n  prefix 8 (20) after 7;", "  prefix 8 (20) after @@7;\n  prefix 7 (40);", CONTENT),
     "no prefix 7 is declared before this one"),
    (edit("  prefix 7 (40);", "  prefix @@serial (40);", CONTENT), "`serial` is a session attribute; a constant cannot read it"),
    (edit("  prefix 7 (40);", "  prefix @@1.5 (40);", CONTENT), "a prefix key must be a positive whole number, got 3/2"),
    (edit("  prefix 7 (40);", "  prefix @@0 (40);", CONTENT), "a prefix key must be a positive whole number, got 0"),
    (edit("  prefix 7 (40);", "  prefix (@@-7) (40);", CONTENT), "a prefix key must be a positive whole number, got -7"),
    (edit("  prefix 7 (40);", "  prefix 7 (@@-1);", CONTENT), "a prefix length must be a whole number >= 0, got -1"),
    (edit("  prefix 7 (40);", "  prefix 7 (@@2.5);", CONTENT), "a prefix length must be a whole number >= 0, got 5/2"),
    (edit("  prefix 7 (40);", "  prefix 7 (@@sqrt(2));", CONTENT), "a prefix length must be an exact constant"),
    (edit("block bsz; share content;", "@@share content;", CONTENT), "`share content` needs `block b;` on pool `kv`"),
    (edit("block bsz; share content;", "block 2.5; @@share content;", CONTENT), "needs a whole block size"),
    (edit("kv cap 64 * bsz;", "kv cap 64 * bsz + 8;", edit("block bsz; share content;", "block bsz; @@share content;", CONTENT)),
     "cap 1032 is not a multiple of block 16"),
    (edit("  pool live { cap 20; }", "  pool live { cap inf; block 4; @@share content; }", CONTENT),
     "cap inf is not a multiple of block 4"),
    (edit("block bsz; share content;", "block bsz; share content; @@evict by (size);", CONTENT),
     "`evict by (…)` cannot be used with `share content`"),
    (edit("  server { eng (a, b); }", "  server { eng (a, b); hold live (1) @@content (7, 1, serial) { run cpu (1); } }", CONTENT),
     "`content (…)` needs a `share content` pool; pool `live` is not one"),
    (edit("content (8, 50, serial) reserve (need);", "content (8, 50, serial) reserve (need) @@content (7, 1, 1);", CONTENT),
     "`content (…)` given twice for one pool (first at t.sq:"),
    (edit("content (8, 50, serial) reserve (need);", "content (8, 50, serial) reserve (need) @@reserve (1);", CONTENT),
     "`reserve (…)` given twice for one pool"),
    (edit("content (8, 50, serial)", "content (@@9, 50, serial)", CONTENT), "`content`: 9 is no declared prefix key"),
    (edit("content (8, 50, serial)", "content (8, @@61, serial)", CONTENT), "61 shared tokens, but prefix 8 has 60"),
    (edit("content (8, 50, serial)", "content (0, @@1, serial)", CONTENT), "1 shared tokens, but prefix 0 has 0"),
    (edit("content (8, 50, serial)", "content (8, @@-1, serial)", CONTENT), "the shared length must be a whole number >= 0"),
    (edit("  server { eng (a, b); }", "  server { eng (a, b); @@drop kv; }", CONTENT),
     "`drop kv;`: pool `kv` is `share content`"),
    (edit("  server { eng (a, b); }", "  server { eng (a, b); hold kv (16) { @@load kv (16); run cpu (1); } }", CONTENT),
     "`load kv (…);`: pool `kv` is `share content`"),
]


@pytest.mark.parametrize("marked,fragment", CASES, ids=[f"{i}-{c[1][:40]}" for i, c in enumerate(CASES)])
def test_content_link_errors(marked, fragment):
    expect(marked, fragment)


@pytest.mark.parametrize("word", ["prefix", "content", "after"])
def test_the_new_keywords_are_reserved(word):
    e = compile_err(edit("  server { eng (a, b); }", f"  server {{ eng (a, b); set {word} = 1; }}", CONTENT))
    assert f"`{word}` is a reserved word" in e.message


def test_share_maxmin_on_a_pool_points_to_the_program_item():
    marked = edit("block bsz; share content;", "block bsz; share @@maxmin;", CONTENT)
    expect(marked, "`share maxmin;` is an item of `fn main`")


def test_drop_and_load_stay_allowed_on_other_pools():
    compile_ok(edit("  server { eng (a, b); }", "  server { eng (a, b); drop live; hold live (2) { load live (1); run cpu (1); } }",
                    CONTENT))


def test_random_token_sequences_with_the_new_words():
    """The fuzz of test_frontend_fuzz.py with the extension's words: every outcome is a located
    SerqError or a link, never a traceback."""
    from hypothesis import given, strategies as st
    from test_frontend_fuzz import PROFILE, VOCAB, run

    vocab = VOCAB + "prefix content after share prefix content ( 7 ) ;".split(" ")

    @PROFILE
    @given(st.lists(st.sampled_from(vocab), max_size=60))
    def fuzz(tokens):
        run(" ".join(tokens))

    fuzz()


def test_mutations_of_the_content_program_fail_cleanly():
    """Dropping one token of the content program gives a located error or a valid program."""
    from test_frontend_fuzz import run
    tokens = CONTENT.replace("(", " ( ").replace(")", " ) ").replace(";", " ; ").replace(",", " , ").split()
    lo = tokens.index("prefix")
    for i in range(lo, lo + 25):
        run(" ".join(tokens[:i] + tokens[i + 1:]))

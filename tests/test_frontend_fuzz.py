"""Whatever the input, the front-end raises nothing but SerqError (docs/language.md §14; docs/frontend.md "Errors").

Three generators, each with a fixed, derandomized profile so the run is reproducible and short:
random bytes, random sequences of the language's own tokens, and random token edits of a valid
program (which reach the linker, not just the parser).
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serq.errors import SerqError
from serq.frontend import compile_source
from test_linker import BASE
from test_parser import ALL

PROFILE = settings(max_examples=250, deadline=None, derandomize=True, database=None,
                   suppress_health_check=list(HealthCheck))

VOCAB = (
    "use let def fn main device engine pool stage workload server session init turn arrive poisson renewal "
    "closed batch none trace ordered hidden set observe hold reserve reuse at admission cache grow drop "
    "release load run prefill decode growing tool on branch with else if while loop choose in by end gauge "
    "schedule advance running admit waiting only each most exclusive first taking tokens cap block evict lru "
    "preempt lifo requeue head tail fifo ps delay sum min max request state execute granule held "
    "fork join lease spill claim share queue transfer est_lambda price args number inf now size "
    "x y kv vllm gpu tool cached computed blocksize used free cachedin budget_left "
    "( ) { } [ ] ; , . : = + - * / ^ < <= > >= == != && || ! ? ~ 0 1 2.5 2e-5 1e999 \"std/args\" \"x.sq\" "
    "/* */ // \n"
).split(" ")


def run(text) -> None:
    """Compile; an error must be located in this text (the files it may `use` do not exist), inside it."""
    try:
        compile_source(text, "fuzz.sq", {})
    except SerqError as e:
        for err in [e] + e.more:
            assert err.message and err.file == "fuzz.sq", err.render()
            if err.line is not None:
                n_lines = (text.count(b"\n") if isinstance(text, bytes) else len(text.splitlines())) + 1
                assert 1 <= err.line <= n_lines and (err.column or 1) >= 1, (err.line, err.column, err.render())
            assert err.render().startswith(f"{err.location()}: error: {err.message}")


@PROFILE
@given(st.binary(max_size=400))
def test_random_bytes(data):
    run(data)


@PROFILE
@given(st.lists(st.sampled_from(VOCAB), max_size=80))
def test_random_token_sequences(tokens):
    run(" ".join(tokens))


_TOKEN = re.compile(r'"[^"\n]*"|[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|&&|\|\||[<>=!]=|\S')
BASE_TOKENS = _TOKEN.findall(BASE)
ALL_TOKENS = _TOKEN.findall(ALL)


@PROFILE
@given(st.sampled_from([BASE_TOKENS, ALL_TOKENS]),
       st.lists(st.tuples(st.sampled_from(["del", "ins", "rep", "dup"]), st.integers(0, 10 ** 6),
                          st.sampled_from(VOCAB)), min_size=1, max_size=4))
def test_token_edits_of_valid_programs(tokens, edits):
    toks = list(tokens)
    for op, i, word in edits:
        i %= len(toks)
        if op == "del":
            del toks[i]
        elif op == "ins":
            toks.insert(i, word)
        elif op == "rep":
            toks[i] = word
        else:
            toks.insert(i, toks[i])
    run(" ".join(toks))


def test_deep_nesting_is_an_error_not_a_crash():
    for text in ["let x = " + "(" * 5000 + "1" + ")" * 5000 + ";",
                 "let x = " + " + ".join(["1"] * 20000) + ";",
                 "let x = " + "-" * 20000 + "1;",
                 "fn main() { server { " + "loop { " * 3000 + "}" * 3000 + " } }",
                 "let x = " + "9" * 6000 + ";", "let x = 0." + "1" * 6000 + ";", "let x = 1e99999999999;",
                 "let x = 10 ^ 100000; fn main() { pool p { cap x; } }",
                 "let x = 2 ^ 0.5; let y = (-8) ^ (1/3); fn main() { }"]:
        run(text)


@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.binary(max_size=200), st.lists(st.sampled_from(VOCAB), max_size=40).map(" ".join)))
def test_serq_check_command_never_raises(tmp_path_factory, data):
    """The `serq check` command itself: exit 0 or 2, one located message, no traceback."""
    import contextlib
    import io

    from serq.cli import main

    path = tmp_path_factory.mktemp("fuzz") / "p.sq"
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["check", str(path)])
    assert rc in (0, 2)
    if rc == 2:
        assert err.getvalue().startswith(str(path) + ":") and ": error: " in err.getvalue()
        assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue()

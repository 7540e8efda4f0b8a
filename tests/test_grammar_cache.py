"""The parser cache (`parser.build_lark`): a cached parser is the parser the grammar builds, a
changed grammar is never served an old one, and an unusable cache directory only costs time."""

from __future__ import annotations

from pathlib import Path

import pytest
from lark import Lark
from lark.exceptions import UnexpectedInput

from serq import parser as sp
from serq.ast import Node
from serq.errors import SerqError

GRAMMAR = sp._GRAMMAR.read_text(encoding="utf-8")
EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").rglob("*.sq"))
BROKEN = [
    "fn main() { let x = ; }\n",
    "fn main() { pool p { cap 3 } }\n",
    "let a = (1 + 2;\n",
    "fn main() {\n",
]
TOY_A = 'start: "a"+\n%ignore " "\n'
TOY_B = 'start: ("a" | "b")+\n%ignore " "\n'


class _NoBuild(Lark):
    """A Lark that refuses to build: a parser obtained through it came from the cache."""

    def __init__(self, *args, **kwargs):
        raise AssertionError("built, although a cached parser was there")


def _shown(v) -> str:
    """A node tree as text, with every node's position (a Node's repr leaves positions out)."""
    if isinstance(v, Node):
        return f"{v.kind}@{v.pos}(" + ", ".join(f"{k}={_shown(x)}" for k, x in v.f.items()) + ")"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_shown(x) for x in v) + "]"
    return repr(v)


def _outcome(lk: Lark, text: str) -> str:
    """What `parse` makes of `text` with parser `lk`: the nodes, or the error message."""
    old = sp._lark
    sp._lark = lambda: lk
    try:
        return _shown(sp.parse(text, 0, sp.Source("t.sq", text)))
    except SerqError as e:
        return f"error: {e}"
    finally:
        sp._lark = old


def test_cached_parser_parses_and_reports_errors_as_the_built_one(tmp_path, monkeypatch):
    built = sp.build_lark(GRAMMAR, tmp_path)  # builds and stores
    assert sp.grammar_cache_file(GRAMMAR, tmp_path).is_file()
    monkeypatch.setattr(sp, "Lark", _NoBuild)
    cached = sp.build_lark(GRAMMAR, tmp_path)
    texts = [p.read_text(encoding="utf-8") for p in EXAMPLES[::4]] + BROKEN
    assert len(texts) > len(BROKEN)
    for text in texts:
        assert _outcome(cached, text) == _outcome(built, text)
    assert sum(_outcome(built, t).startswith("error:") for t in BROKEN) == len(BROKEN)


def test_a_changed_grammar_is_not_served_the_old_parser(tmp_path):
    sp.build_lark(TOY_A, tmp_path)
    with pytest.raises(UnexpectedInput):
        sp.build_lark(TOY_A, tmp_path).parse("a b")
    assert sp.build_lark(TOY_B, tmp_path).parse("a b").data == "start"
    assert sp.grammar_cache_file(TOY_A, tmp_path) != sp.grammar_cache_file(TOY_B, tmp_path)
    assert len(list(tmp_path.iterdir())) == 2


def test_a_damaged_cache_file_is_rebuilt_and_replaced(tmp_path, monkeypatch):
    path = sp.grammar_cache_file(TOY_A, tmp_path)
    path.write_bytes(b"not a pickle")
    assert sp.build_lark(TOY_A, tmp_path).parse("a a").data == "start"
    monkeypatch.setattr(sp, "Lark", _NoBuild)
    assert sp.build_lark(TOY_A, tmp_path).parse("a").data == "start"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def test_an_unusable_cache_directory_falls_back_to_building(tmp_path, capfd):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for cache_dir in (blocker, blocker / "under-a-file"):  # cannot be made a directory
        assert sp.build_lark(TOY_A, cache_dir).parse("a").data == "start"
    assert capfd.readouterr() == ("", "")


def test_the_cache_directory_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert sp.grammar_cache_dir() == tmp_path / "serq"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert sp.grammar_cache_dir() == tmp_path / "home" / ".cache" / "serq"

"""Every program in docs/language.md is checked: each ```serq block must link, each
```serq-refused block must be refused with the message its first line names (`// refused: …`).

The snippets are compiled as if they were files in docs/ (so `use "../lib/vllm.sq"` and a trace
path `../examples/…` resolve inside the repository)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from serq.errors import SerqError
from serq.frontend import compile_source

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "language.md"
FENCE = re.compile(r"^```(serq(?:-refused)?)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
REFUSED = re.compile(r"^//\s*refused:\s*(.+?)\s*$")


def snippets(text: str) -> list[tuple[str, int, str]]:
    """(kind, line of the opening fence, body) for every serq block of a markdown text."""
    return [(m.group(1), text.count("\n", 0, m.start()) + 1, m.group(2)) for m in FENCE.finditer(text)]


def check_snippet(kind: str, line: int, body: str) -> None:
    """Raise AssertionError when the snippet does not behave as its fence says."""
    where = f"docs/language.md:{line}"
    name = str(ROOT / "docs" / f"language-snippet-{line}.sq")
    if kind == "serq":
        try:
            ir = compile_source(body, name)
        except SerqError as e:
            raise AssertionError(f"{where}: the example does not link:\n{e}") from None
        assert isinstance(ir, dict) and ir, where
        return
    m = REFUSED.match(body.splitlines()[0]) if body.strip() else None
    assert m, f"{where}: a serq-refused block must start with `// refused: MESSAGE`"
    try:
        compile_source(body, name)
    except SerqError as e:
        assert m.group(1) in str(e), f"{where}: refused, but with another message:\n{e}"
        return
    raise AssertionError(f"{where}: the front-end accepts a program the manual says it refuses")


SNIPPETS = snippets(DOC.read_text(encoding="utf-8"))


def test_the_manual_has_examples_of_both_kinds():
    kinds = [k for k, _, _ in SNIPPETS]
    assert kinds.count("serq") >= 10 and kinds.count("serq-refused") >= 5


@pytest.mark.parametrize("kind,line,body", SNIPPETS, ids=[f"{k}@{n}" for k, n, _ in SNIPPETS])
def test_snippet(kind, line, body):
    check_snippet(kind, line, body)


def test_a_broken_snippet_fails():
    """The checker is not vacuous: a typo in an example, an accepted 'refused' program, a wrong
    message and a missing `// refused:` line are each caught."""
    ok = "fn main() { stage s : fifo; workload { arrive poisson(1); } server { run s (1); } }\n"
    check_snippet("serq", 1, ok)
    with pytest.raises(AssertionError, match="does not link"):
        check_snippet("serq", 1, ok.replace("run s", "run t"))
    with pytest.raises(AssertionError, match="accepts a program"):
        check_snippet("serq-refused", 1, "// refused: anything\n" + ok)
    bad = "// refused: not this message\n" + ok.replace("run s (1);", "run s, s (1);")
    with pytest.raises(AssertionError, match="another message"):
        check_snippet("serq-refused", 1, bad)
    with pytest.raises(AssertionError, match="must start with"):
        check_snippet("serq-refused", 1, ok)


def test_the_fence_pattern_finds_blocks():
    text = "a\n```serq\nX\n```\nb\n```serq-refused\n// refused: m\nY\n```\n```text\nZ\n```\n"
    assert snippets(text) == [("serq", 2, "X\n"), ("serq-refused", 6, "// refused: m\nY\n")]


def test_every_unsupported_construct_has_a_refused_example():
    """Each message of the §16 table is the message of a refused example, so the table is checked."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## 16. Not supported yet"):text.index("## 17.")]
    rows = re.findall(r"^\| (?!Construct|---)[^|]+\| (`+) ?(.+?) ?\1 \|\s*$", section, re.M)
    # an empty table says so: 1 row until `spill` on `share content` pools, 15 until `lease` became supported, 14 until claims, 13 until arrays, 11 until `admit via`, 10 until flows and `share maxmin | bottleneck`, 8 until an engine's estimates, 7 until `transfer`, 6 until a `fork` inside a hold, 5 until queues, 4 until K's `iteration { … }` block
    assert rows or "None at present" in section, section[:400]
    refused = [REFUSED.match(b.splitlines()[0]).group(1) for k, _, b in snippets(section) if k == "serq-refused"]
    missing = [msg for _, msg in rows if not any(msg.startswith(r) or r.startswith(msg) for r in refused)]
    assert not missing, f"no refused example gives: {missing}"

"""Every Lean doc comment (`/-- … -/`) documents something, checked without a Lean toolchain.

Lean attaches a doc comment to the declaration, structure field or constructor right after it;
one followed by another doc comment, by `end` or by a plain statement does not parse. Two such
were left by edits that moved a declaration away from its comment (SerqLang/Config.lean before
`ClaimTally`, SerqLang/Program.lean before `tiersBelow`). Module docs (`/-! … -/`) are not doc
comments and may stand anywhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_lean_sources import REPO, lean_files

DOC = re.compile(r"/--(?:(?!-/).)*?-/\s*", re.S)
# what a doc comment may precede: a declaration (with its attributes and modifiers), a Lake
# declaration, a constructor (`| name`) or a field (`name (binders) : T`)
DOCUMENTED = re.compile(r"@\[|(?:def|theorem|structure|inductive|abbrev|instance|class|private|protected|partial|"
                        r"noncomputable|opaque|unsafe|lean_lib|lean_exe|package)\b|\||[\w«»'?]+\s*(?:\([^)]*\)\s*)*:")


def stray_doc_comments(text: str) -> list[int]:
    """Lines of doc comments that precede nothing they can document."""
    return [text[:m.start()].count("\n") + 1 for m in DOC.finditer(text) if not DOCUMENTED.match(text, m.end())]


@pytest.mark.parametrize("path", lean_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_doc_comments_document_something(path: Path):
    bad = stray_doc_comments(path.read_text())
    assert not bad, f"{path.relative_to(REPO)}: a doc comment followed by no declaration, field or constructor on lines {bad}"


def test_the_check_sees_a_doc_comment_left_behind():
    assert stray_doc_comments("/-- a -/\n/-- b -/\ndef f : Nat := 1\n") == [1]
    assert stray_doc_comments("def f : Nat := 1\n/-- the end -/\nend X\n") == [2]
    assert stray_doc_comments("structure S where\n  /-- a field -/\n  x : Nat := 0\n"
                              "inductive T where\n  /-- a constructor -/\n  | a\n"
                              "/-- f -/\n@[simp] theorem t : True := trivial\n/-- g -/\nprivate def g := 1\n") == []

"""SerqLang/Invariants.lean reports what python/serq_spec/invariants.py reports, in the same order.

No Lean toolchain runs here, so this compares the text: for each pair of functions
(`check_invariants` / `checkInvariants`, `content_invariants` / `contentInvariants`) the messages
each appends, in source order, with every interpolated value replaced by `{}`. Python's come from
the f-strings passed to `bad.append` (and the lists added with `bad += [...]`), Lean's from the
strings added with `bad := bad ++ [...]`. It shows the Lean checks the same rules with the same
wording in the same order; not that its conditions are right (that needs `lake build` and a run).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = REPO / "python" / "serq_spec" / "invariants.py"
LEAN = REPO / "SerqLang" / "Invariants.lean"

PAIRS = [("check_invariants", "checkInvariants"), ("content_invariants", "contentInvariants"),
         ("branch_invariants", "branchInvariants"), ("shared_invariants", "sharedInvariants")]


def shape(node: ast.AST) -> str:
    """An f-string or a string constant with each interpolation as `{}`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    raise AssertionError(f"invariants.py: a message that is no string: {ast.dump(node)}")


def python_messages(name: str) -> list[str]:
    tree = ast.parse(PY.read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    found = []
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "bad"):
            found.append((node.lineno, node.col_offset, shape(node.args[0])))
    return [m for _, _, m in sorted(found)]


LEAN_ADD = re.compile(r'bad := bad \+\+ \[(?:s!)?"((?:[^"\\]|\\.)*)"\]')
LEAN_DEF = re.compile(r"^def (\w+)", re.M)


def lean_messages(name: str) -> list[str]:
    text = LEAN.read_text()
    starts = [(m.start(), m.group(1)) for m in LEAN_DEF.finditer(text)]
    i = next(k for k, (_, n) in enumerate(starts) if n == name)
    body = text[starts[i][0]:starts[i + 1][0] if i + 1 < len(starts) else len(text)]
    return [re.sub(r"\{[^{}]*\}", "{}", m.group(1)) for m in LEAN_ADD.finditer(body)]


def test_the_pairs_exist_and_say_something():
    for py, lean in PAIRS:
        assert python_messages(py), py
        assert lean_messages(lean), lean


def test_same_messages_in_the_same_order():
    for py, lean in PAIRS:
        assert lean_messages(lean) == python_messages(py), f"{py} / {lean}"


def test_content_invariants_are_called_for_a_content_pool_only():
    """invariants.py adds content_invariants on a `share content` pool and the `used = Σ` rule
    elsewhere; the Lean must branch the same way."""
    text = LEAN.read_text()
    assert re.search(r"if st\.content\.isSome then\s+bad := bad \+\+ contentInvariants prog cfg p\s+else if held \+ leased != st\.used",
                     text)

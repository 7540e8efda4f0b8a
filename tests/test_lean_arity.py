"""Calls in a monad get all their arguments, checked without a Lean toolchain.

SerqLang's functions that mutate the configuration are functions in `M` (SerqLang/State.lean).
A bind `let x ← f a b` or `(← f a b)` of such a function must apply it to every explicit
argument it requires: given fewer, `f a b` is a function, not an `M` action, and Lean refuses
the bind. Two branches merged on one day did exactly that: one gave `Eval.take` the draw's
arguments (a third parameter), the other called `take env "accept"` with two.

Checked here, by reading the text: for every `def` in binder style (`def f (a : A) (b : B := d)
: M R`, or `Res R`, `IO R`) whose name is defined once, every `← f args` whose application ends the bind (the end
of the line with no indented continuation, or a closing bracket) passes at least the required
and at most all explicit arguments (`(x := e)` named arguments apart). Not types, not calls
outside a bind, not functions of the same name in two namespaces.
"""

from __future__ import annotations

import re
from pathlib import Path

from test_lean_sources import LIB, REPO, strip_comments_and_strings

HEADER = re.compile(r"^(?:@\[[^\]]*\]\s*)?(?:(?:private|protected|partial|noncomputable)\s+)*def\s+([\w.?!']+)", re.M)
OPEN, CLOSE = "([{⟨⦃", ")]}⟩⦄"
WORDS = {"then", "else", "do", "with", "fun", "in", "at", "if", "let", "match", "return"}
# the monads binds run in: the step monad, `Res` (decoding, values) and `IO` (serq-vectors)
MONADS = re.compile(r"(?:M|Res|IO|Except\s+\w+)\b")
# names of core's monad functions (`(← get)` is MonadState's, not `Wire.get`)
CORE_MONADIC = {"get", "set", "read", "modify", "modifyGet", "throw", "pure"}


def matching(text: str, i: int) -> int:
    """The index of the bracket closing the one at `i` (-1 if none)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] in OPEN:
            depth += 1
        elif text[j] in CLOSE:
            depth -= 1
            if depth == 0:
                return j
    return -1


def signature(code: str, start: int) -> str:
    """The text after a def's name up to the `:=` (or the first `|` equation) that ends it."""
    depth = 0
    for i in range(start, len(code)):
        c = code[i]
        if c in OPEN:
            depth += 1
        elif c in CLOSE:
            depth -= 1
        elif depth == 0 and code.startswith(":=", i):
            return code[start:i]
        elif depth == 0 and c == "\n" and code[i + 1:].lstrip(" ").startswith("|"):
            return code[start:i]
    return code[start:]


def binder_counts(sig: str) -> tuple[int, int, str] | None:
    """(required, optional) explicit binders and the return type; None if not in binder style."""
    i, required, optional = 0, 0, 0
    while i < len(sig):
        c = sig[i]
        if c.isspace():
            i += 1
        elif c in "({[⦃":
            j = matching(sig, i)
            if j < 0:
                return None
            if c == "(":
                inner = sig[i + 1:j]
                if ":" not in inner:
                    return None
                names, rest = inner.split(":", 1)
                if ":=" in rest:
                    optional += len(names.split())
                else:
                    required += len(names.split())
            i = j + 1
        elif c == ":":
            return required, optional, sig[i + 1:].strip()
        else:
            return None
    return None


def monadic_signatures(sources: dict[Path, str]) -> dict[str, tuple[int, int]]:
    """Last name -> (required, optional) of the binder-style monadic defs (`MONADS`) whose name
    is defined once and is not one of core's monad functions."""
    defined: dict[str, int] = {}
    found: dict[str, tuple[int, int]] = {}
    for code in sources.values():
        for m in HEADER.finditer(code):
            name = m.group(1).split(".")[-1]
            defined[name] = defined.get(name, 0) + 1
            counts = binder_counts(signature(code, m.end()))
            if counts is not None and MONADS.match(counts[2]):
                found[name] = counts[:2]
    return {name: c for name, c in found.items() if defined[name] == 1 and name not in CORE_MONADIC}


def count_arguments(text: str) -> tuple[int, str] | None:
    """The positional arguments at the start of `text` (Lean's application syntax) and the rest."""
    i, positional = 0, 0
    while i < len(text):
        c = text[i]
        if c in " \t":
            i += 1
            continue
        if c in OPEN:
            j = matching(text, i)
            if j < 0:
                return None
            if not re.match(r"\(\s*\w+\s*:=", text[i:j + 1]):
                positional += 1
            i = j + 1
            if m := re.match(r"(?:\.[A-Za-z_][\w'!?]*)+", text[i:]):   # `(…).field`
                i += len(m.group(0))
            continue
        m = re.match(r"s!\"\"|\.?[A-Za-z_][\w'.!?]*|\d+(?:\.\d+)?|\"\"", text[i:])
        if m is None or m.group(0) in WORDS:
            break
        positional += 1
        i += len(m.group(0))
    return positional, text[i:].strip()


def arity_problems(sources: dict[Path, str]) -> list[str]:
    table = monadic_signatures(sources)
    bad = []
    for path, code in sources.items():
        lines = code.splitlines()
        for n, line in enumerate(lines, 1):
            following = lines[n] if n < len(lines) else ""
            continued = following.strip() != "" and \
                len(following) - len(following.lstrip()) > len(line) - len(line.lstrip())
            for m in re.finditer(r"←\s*([A-Za-z_][\w.'!?]*)", line):
                name = m.group(1).split(".")[-1]
                if name not in table:
                    continue
                counted = count_arguments(line[m.end():])
                if counted is None:
                    continue
                given, rest = counted
                ends_here = (rest == "" and not continued) or rest.startswith((")", "]", "⟩", ",", "|"))
                required, optional = table[name]
                if ends_here and not required <= given <= required + optional:
                    bad.append(f"{path.relative_to(REPO)}:{n}: {m.group(1)} given {given} argument(s), "
                               f"takes {required}..{required + optional}")
    return bad


def lean_sources() -> dict[Path, str]:
    return {p: strip_comments_and_strings(p.read_text()) for p in sorted(LIB.rglob("*.lean"))}


def test_monadic_calls_get_their_arguments():
    sources = lean_sources()
    assert len(monadic_signatures(sources)) > 100
    bad = arity_problems(sources)
    assert not bad, "binds of M functions with a wrong number of arguments:\n" + "\n".join(bad)


def test_the_check_sees_a_missing_argument():
    src = {LIB / "X.lean": strip_comments_and_strings(
        "def take (env : EnvM) (dist : String) (args : List Value) : M Value := do\n  pure .zero\n"
        "def spec (msg : String) (loc : Option Loc := none) : M Unit := pure ()\n"
        "def ok : M Unit := do\n"
        "  let v ← take env \"exp\" [alpha]\n"
        "  let w ← take env s!\"\" ((xs.map f).take 2)\n"
        "  spec (← take env \"a\" []).toWire\n"
        "  let u ← spec \"m\"\n"
        "  let z ← take env\n    \"continued\" []\n"
        "def bad : M Unit := do\n"
        "  let v ← take env \"accept\"\n"
        "  let u ← spec \"m\" none extra\n")}   # as the check reads a file: strings blanked
    assert [b.split(": ", 1)[1] for b in arity_problems(src)] == [
        "take given 2 argument(s), takes 3..3", "spec given 3 argument(s), takes 1..2"]

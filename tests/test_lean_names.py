"""Names in the Lean sources resolve, checked without a Lean toolchain.

SerqLang was never compiled here (docs/lean.md), so a rename on one side of a call — a Python
function renamed and its Lean mirror with it, the callers not — is found only by reading. Two
shapes that a reader misses and a compiler would refuse are checked here:

- `A.name`, where `A` is a type or namespace that SerqLang itself declares (`Value.add`,
  `ContentPool.identify`, `Pool.makeRoom`): `A.name` must be declared — a `def`/`theorem`/… in
  namespace `A` or named `A.name`, a field of structure `A`, or a constructor of inductive `A`.
- `.name` written for a constructor or function of the expected type (`.fin q`, `.step sd`,
  `.session n`): some SerqLang declaration, field or constructor ends in `.name`, or `name` is one
  of the core constructors the sources use (`.some`, `.ok`, `.inl`, Json's `.arr`, …). The type
  is not known without an elaborator, so only "declared nowhere" is caught.

- a lowercase name used unqualified (`settleOutcomes e`, `pendingWant th eos`): declared (a
  declaration, field or constructor, a `where` or `let rec` helper), bound in the same file (a
  parameter, `let`, `fun`, `for`, a match or tactic pattern: found by shape, so any binding of
  the name anywhere in the file counts), or one of the core names in `CORE_NAMES`.

None says the sources compile; they catch the unknown-identifier errors that reading missed. A
new core function used by the Lean goes in `CORE_NAMES` (check that it exists in core Lean first).
"""

from __future__ import annotations

import re
from pathlib import Path

from test_lean_sources import LIB, REPO, strip_comments_and_strings

DECL = re.compile(r"^\s*(?:@\[[^\]]*\]\s*)?(?:(?:private|protected|partial|noncomputable)\s+)*"
                  r"(def|theorem|structure|inductive|abbrev|class|instance|opaque)\s+([\w.?!'«»]+)")

# core constructors and functions reached as `.name` (Option, Except, Sum, List, Int, Bool, Unit,
# Lean.Json, the pipeline `|>.map`)
CORE_DOT = {"some", "none", "ok", "error", "inl", "inr", "nil", "cons", "ofNat", "negSucc", "unit",
            "true", "false", "mk", "zero", "succ", "str", "arr", "obj", "null", "num", "bool",
            "map", "flatMap", "filter", "foldl", "getD"}

# core namespaces never treated as SerqLang's own, even where SerqLang adds a definition to them
CORE_NAMESPACES = {"Lean", "List", "Array", "Option", "Nat", "Int", "String", "Rat", "Except", "Json", "IO",
                   "System", "Char", "Bool"}


def declared_names(sources: dict[Path, str]) -> set[str]:
    """Fully qualified names (without the leading `SerqLang.`) of every declaration, structure
    field and inductive constructor."""
    names: set[str] = set()
    for code in sources.values():
        spaces: list[str] = []
        inside: tuple[str, str] | None = None      # (kind, name) of the structure or inductive being read
        for line in code.splitlines():
            if m := re.match(r"^\s*namespace\s+([\w.]+)", line):
                spaces.append(m.group(1))
                inside = None
            elif (m := re.match(r"^\s*end\s+([\w.]+)\s*$", line)) and spaces and spaces[-1] == m.group(1):
                spaces.pop()
                inside = None
            elif m := DECL.match(line):
                kind, name = m.group(1), m.group(2).replace("«", "").replace("»", "")
                full = ".".join(spaces + [name])
                names.add(full)
                inside = (kind, full) if kind in ("structure", "inductive", "class") else None
            elif inside and line.strip():
                if not line.startswith((" ", "\t")) and not line.lstrip().startswith("|"):
                    inside = None
                    continue
                kind, owner = inside
                if kind == "inductive":
                    for c in re.finditer(r"\|\s*([\w'«»]+)", line):
                        names.add(f"{owner}.{c.group(1).strip('«»')}")
                elif f := re.match(r"^\s+([\w'«»?]+)\s*(?:\([^)]*\)\s*)*(?::|::|:=)", line):
                    names.add(f"{owner}.{f.group(1).strip('«»')}")
    return {n.removeprefix("SerqLang.") for n in names}


def own_namespaces(names: set[str]) -> set[str]:
    spaces = set()
    for n in names:
        parts = n.split(".")
        spaces |= {".".join(parts[:k]) for k in range(1, len(parts))}
    return spaces - CORE_NAMESPACES


def unresolved_qualified(sources: dict[Path, str], names: set[str]) -> list[str]:
    spaces = own_namespaces(names)
    bad = []
    for path, code in sources.items():
        for n, line in enumerate(code.splitlines(), 1):
            if re.match(r"^\s*import\s", line):
                continue
            for m in re.finditer(r"(?<![\w.'»])([A-Z][\w']*(?:\.[A-Za-z_][\w'!?]*)+)", line):
                parts = m.group(1).removeprefix("SerqLang.").split(".")
                for k in range(len(parts) - 1, 0, -1):     # the longest prefix that is SerqLang's
                    if ".".join(parts[:k]) in spaces:
                        name = ".".join(parts[:k + 1])
                        if name not in names and name not in spaces:
                            bad.append(f"{path.relative_to(REPO)}:{n}: {name}")
                        break
    return bad


def unresolved_dot(sources: dict[Path, str], names: set[str]) -> list[str]:
    last = {n.rsplit(".", 1)[-1] for n in names} | CORE_DOT
    bad = []
    for path, code in sources.items():
        for n, line in enumerate(code.splitlines(), 1):
            for m in re.finditer(r"(?:^|[\s(\[,|⟨{=>←])\.([a-z][\w']*)", line):
                if m.group(1) not in last:
                    bad.append(f"{path.relative_to(REPO)}:{n}: .{m.group(1)}")
    return bad


# core Lean functions, tactics and lemmas the sources call unqualified (each checked to exist in
# core: Init's prelude and tactics, `Std`-free), and the exported C symbols of Ffi.lean
CORE_NAMES = {"by_cases", "congrArg", "decide", "default", "discard", "id", "if_neg", "if_pos",
              "inferInstanceAs", "max", "min", "mkRat", "modify", "read", "throw", "toString", "tryCatch",
              "while", "s!", "export", "serq_init", "serq_run", "serq_step"}

KEYWORDS = set("""def theorem abbrev structure inductive class instance where deriving namespace end open import
section mutual partial private protected noncomputable let mut fun do if then else match with return
for in unless repeat break continue pure by have show from at this true false some none
termination_by decreasing_by calc exact intro intros apply refine rw simp simp_all omega grind cases
induction obtain rcases constructor rfl trivial contradiction exfalso assumption split next case subst
unfold dsimp injection generalizing generalize specialize first try all_goals any_goals focus only
using nomatch nofun absurd at_ catch finally""".split())

IDENT = r"[A-Za-z_][\w'?!]*"


def file_binders(code: str) -> set[str]:
    """Names bound somewhere in a file, by the shapes that bind: `fun … =>`, `let`/`have`/`obtain`
    … `:=`/`←`/`:`, `for … in`, a pattern `| … =>`, a binder `(x y : T)`, a tactic's names
    (`intro`, `by_cases h :`, `cases h :`, `next … =>`, …), `∀`/`∃`, `where` and `let rec` helpers."""
    shapes = [r"\bfun\s+([^=]*?)=>", r"\b(?:let|have|obtain|let mut|if let|rcases|set)\s+([^:=←\n]*?)\s*(?::=|←|:|\|)",
              r"\bfor\s+([^\n]*?)\s+in\b", r"\|\s*([^\n|]*?)=>", r"[({⦃\[]\s*(" + IDENT + r"(?:\s+" + IDENT + r")*)\s*:(?!=)",
              r"\b(?:intro|intros|rename_i|next|case|generalizing|with|at|by_cases|cases|induction)\s+([^\n=⊢]*)",
              r"[∀∃]\s*([^,]*),", r"⟨([^⟨⟩]*)⟩\s*(?::=|←|=>)", r"\(([^()]*)\)\s*(?::=|←|=>)",
              r"\bmatch\s+(\w+)\s*:", r"^\s+(" + IDENT + r")\s*(?:\([^)]*\)\s*)*:", r"\blet rec\s+(" + IDENT + r")"]
    bound: set[str] = set()
    for shape in shapes:
        for m in re.finditer(shape, code, re.M):
            bound |= set(re.findall(IDENT, m.group(1)))
    return bound


def unresolved_plain(sources: dict[Path, str], names: set[str]) -> list[str]:
    last = {n.rsplit(".", 1)[-1] for n in names}
    bad = []
    for path, code in sources.items():
        bound = file_binders(code)
        for n, line in enumerate(code.splitlines(), 1):
            # (a name right after `"` is the text of a string nested in an interpolation)
            for m in re.finditer(r"(?<![\w.'?!@`\"])([a-z_][\w'?!]*)", line):
                name = m.group(1)
                if name not in KEYWORDS and name not in last and name not in bound and name not in CORE_NAMES:
                    bad.append(f"{path.relative_to(REPO)}:{n}: {name}")
    return bad


def lean_sources() -> dict[Path, str]:
    return {p: strip_comments_and_strings(p.read_text()) for p in sorted(LIB.rglob("*.lean"))}


def test_qualified_names_resolve():
    sources = lean_sources()
    names = declared_names(sources)
    assert len(names) > 500
    bad = unresolved_qualified(sources, names)
    assert not bad, "names in a SerqLang namespace that nothing declares:\n" + "\n".join(bad)


def test_dot_names_resolve():
    sources = lean_sources()
    bad = unresolved_dot(sources, declared_names(sources))
    assert not bad, "`.name` that no SerqLang declaration, field or constructor ends in:\n" + "\n".join(bad)


def test_plain_names_resolve():
    sources = lean_sources()
    bad = unresolved_plain(sources, declared_names(sources))
    assert not bad, ("names used unqualified that nothing declares or binds (a core function new to the "
                     "sources goes in CORE_NAMES once checked to exist):\n" + "\n".join(bad))


def test_the_checks_see_a_renamed_function_field_and_constructor():
    src = {LIB / "X.lean": (
        "namespace SerqLang\n"
        "inductive Tok where\n  | n (k : Nat)\n  | inf\n"
        "structure Job where\n  serial : Nat\n  left : Tok := .inf\n"
        "namespace Value\ndef add (a b : Nat) : Nat := a + b\nend Value\n"
        "def ok1 (j : Job) : Nat := Value.add j.serial 1\n"
        "def ok2 : Tok := .n 3\n"
        "def bad1 : Nat := Value.addd 1 2\n"
        "def bad2 : Tok := .infinite\n"
        "def bad3 (j : Job) : Nat := Job.serail j\n"
        "end SerqLang\n")}
    names = declared_names(src)
    assert {"Tok.n", "Tok.inf", "Job.serial", "Job.left", "Value.add", "ok1"} <= names
    assert [b.split(": ")[-1] for b in unresolved_qualified(src, names)] == ["Value.addd", "Job.serail"]
    assert [b.split(": ")[-1] for b in unresolved_dot(src, names)] == [".infinite"]
    plain = {LIB / "Y.lean": (
        "namespace SerqLang\n"
        "def settle (e : Nat) : Nat := e + 1\n"
        "def caller (x : Nat) : Nat :=\n  let y := settle x\n  (fun z => z + y) (settled x)\n"
        "def viaWhere (n : Nat) : Nat := go n\nwhere\n  go (k : Nat) : Nat := k\n"
        "end SerqLang\n")}
    assert [b.split(": ")[-1] for b in unresolved_plain(plain, declared_names(plain))] == ["settled"]

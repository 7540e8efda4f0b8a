"""Static checks of the Lean sources that need no Lean toolchain.

No toolchain could be installed where SerqLang was written, so nothing here says the sources
compile. What is checked: no proof escape hatch (`sorry`, `admit`, `axiom`, `native_decide`)
outside comments and strings; core Lean only (no Mathlib, Batteries, Aesop); every module of the
library is imported by SerqLang.lean and every local import resolves to a file; the toolchain is
pinned; the lakefile declares the shared library and the vectors executable; every theorem is
named in docs/lean.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIB = REPO / "SerqLang"
ROOT = REPO / "SerqLang.lean"
EXE_DIR = LIB / "Exe"          # executable roots: not part of the shared library, not imported

FORBIDDEN = {
    "sorry": re.compile(r"\bsorry\b"),
    # the tactic: `admit` alone as a tactic step (a line, after `by`, a bullet, `;` or `<;>`)
    "admit (tactic)": re.compile(r"(^|\bby|[·;]|<;>)[ \t]*admit[ \t]*$", re.M),
    "axiom": re.compile(r"(^|\s)axiom\s"),
    "native_decide": re.compile(r"\bnative_decide\b"),
    "decide +native": re.compile(r"decide\s*\+\s*native"),
    "implemented_by": re.compile(r"\bimplemented_by\b"),
    "Mathlib/Batteries/Aesop import": re.compile(r"^\s*import\s+(Mathlib|Batteries|Aesop|Plausible)\b", re.M),
}


def strip_comments_and_strings(text: str) -> str:
    """Lean source with comments (`--`, nested `/- -/`) and string literals blanked out."""
    out, i, n, depth = [], 0, len(text), 0
    while i < n:
        if depth:
            if text.startswith("/-", i):
                depth += 1
                i += 2
            elif text.startswith("-/", i):
                depth -= 1
                i += 2
            else:
                out.append("\n" if text[i] == "\n" else " ")
                i += 1
        elif text.startswith("/-", i):
            depth = 1
            i += 2
        elif text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif text[i] == "'" and i + 2 < n and text[i + 2] == "'" and text[i + 1] != "\\":
            out.append("' '")       # a character literal like '"'
            i += 3
        elif text[i] == "'" and text.startswith("'\\", i):
            j = text.find("'", i + 2)
            out.append("' '")
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def lean_files() -> list[Path]:
    return sorted([ROOT, REPO / "lakefile.lean"] + list(LIB.rglob("*.lean")))


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def test_there_are_sources():
    assert ROOT.is_file()
    assert len(list(LIB.rglob("*.lean"))) >= 5


@pytest.mark.parametrize("path", lean_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_escape_hatch_and_core_only(path):
    code = strip_comments_and_strings(path.read_text())
    for what, pattern in FORBIDDEN.items():
        m = pattern.search(code)
        assert m is None, f"{path.relative_to(REPO)}: {what} at offset {m.start()}"


def test_stripper_sees_through_comments_but_not_code():
    src = '/- sorry /- nested sorry -/ still -/\n-- sorry\ndef x := "sorry"\ntheorem t : True := by sorry\n'
    code = strip_comments_and_strings(src)
    assert code.count("sorry") == 1 and "by sorry" in code
    assert FORBIDDEN["admit (tactic)"].search("  · admit\n")
    assert FORBIDDEN["admit (tactic)"].search("theorem t : False := by admit\n")
    assert not FORBIDDEN["admit (tactic)"].search("def admitPool := admissions")
    assert not FORBIDDEN["admit (tactic)"].search("def admit (serial : Nat) : M Unit := do\n")
    assert not FORBIDDEN["admit (tactic)"].search("  | admit (only : Option Expr)\n")


def test_every_module_is_imported_by_the_root():
    imported = set(re.findall(r"^import\s+(\S+)", ROOT.read_text(), re.M))
    modules = {module_name(p) for p in LIB.rglob("*.lean") if EXE_DIR not in p.parents}
    missing = sorted(modules - imported)
    assert not missing, f"SerqLang.lean does not import: {missing}"


def test_local_imports_resolve():
    for path in lean_files():
        for mod in re.findall(r"^import\s+(\S+)", path.read_text(), re.M):
            if mod.split(".")[0] in ("Lean", "Init", "Std", "Lake"):
                continue
            target = REPO / (mod.replace(".", "/") + ".lean")
            assert target.is_file(), f"{path.relative_to(REPO)} imports {mod}: no {target.relative_to(REPO)}"


def test_toolchain_pinned():
    assert (REPO / "lean-toolchain").read_text().strip() == "leanprover/lean4:v4.34.0"


def test_lakefile_declares_shared_library_and_vectors_exe():
    text = (REPO / "lakefile.lean").read_text()
    assert re.search(r"^package\s+serq\b", text, re.M)
    assert "lean_lib SerqLang" in text
    assert "defaultFacets := #[LeanLib.sharedFacet]" in text
    assert 'libName := "serqlang"' in text
    assert "lean_exe «serq-vectors»" in text
    root = re.search(r"root\s*:=\s*`(\S+)", text).group(1)
    assert (REPO / (root.replace(".", "/") + ".lean")).is_file()


def test_exports_are_the_ffi_contract():
    code = strip_comments_and_strings((LIB / "Ffi.lean").read_text())
    for sym in ("serq_init", "serq_step", "serq_run"):
        assert re.search(rf"@\[export {sym}\]", code), sym
    # lean4#13017: an @[export] function may not take borrowed (@&) parameters
    assert "@&" not in code


def test_every_theorem_is_documented():
    doc = (REPO / "docs" / "lean.md").read_text()
    names = set()
    for path in LIB.rglob("*.lean"):
        names |= set(re.findall(r"^\s*(?:@\[[^\]]*\]\s*)?theorem\s+([\w.]+)",
                                strip_comments_and_strings(path.read_text()), re.M))
    assert names
    undocumented = sorted(n for n in names if f"`{n}`" not in doc and f"`{n.split('.')[-1]}`" not in doc)
    assert not undocumented, f"theorems missing from docs/lean.md: {undocumented}"


@pytest.mark.parametrize("path", lean_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_brackets_balance(path):
    """(), [], {}, ⟨⟩ balance outside comments and strings — a cheap stand-in for the parser."""
    pairs = {"(": ")", "[": "]", "{": "}", "⟨": "⟩"}
    closing = {v: k for k, v in pairs.items()}
    code = strip_comments_and_strings(path.read_text())
    stack = []
    for i, ch in enumerate(code):
        if ch in pairs:
            stack.append((ch, i))
        elif ch in closing:
            assert stack and stack[-1][0] == closing[ch], \
                f"{path.relative_to(REPO)}: unmatched {ch!r} on line {code[:i].count(chr(10)) + 1}"
            stack.pop()
    assert not stack, f"{path.relative_to(REPO)}: unclosed {stack[-1][0]!r} on line {code[:stack[-1][1]].count(chr(10)) + 1}"


@pytest.mark.parametrize("path", sorted(LIB.rglob("*.lean")), ids=lambda p: str(p.relative_to(REPO)))
def test_namespaces_close_in_order(path):
    """Every `end NAME` closes the innermost open `namespace`/`section` NAME (a bare `end`: a `mutual` block or an
    anonymous section), and every one opened
    is closed: Lean refuses a mismatched `end` (a copy of a namespace pasted after `end X` for the
    wrong X once went unnoticed by the duplicate check below)."""
    opened: list[tuple[str, int]] = []
    for n, line in enumerate(strip_comments_and_strings(path.read_text()).splitlines(), 1):
        if m := re.match(r"^\s*(?:namespace|section)\s+([\w.]+)\s*$", line):
            opened.append((m.group(1), n))
        elif re.match(r"^\s*(?:section|mutual)\s*$", line):
            opened.append(("", n))
        elif m := re.match(r"^\s*end(?:\s+([\w.]+))?\s*$", line):
            name = m.group(1) or ""
            assert opened, f"{path.relative_to(REPO)}:{n}: `end {name}` closes nothing"
            assert opened[-1][0] == name, \
                f"{path.relative_to(REPO)}:{n}: `end {name}` but the innermost open is `{opened[-1][0]}` (line {opened[-1][1]})"
            opened.pop()
    assert not opened, f"{path.relative_to(REPO)}: `{opened[-1][0]}` opened on line {opened[-1][1]} is never closed"


@pytest.mark.parametrize("path", lean_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_local_recursive_functions_say_let_rec(path):
    """`let NAME ARG (x : T) …` — a name followed by a bare name and then a binder — is how a
    `let rec f (x : T)` reads after `rec` was renamed away (a rename of `rec` identifiers once
    turned `let rec ins` into `let rd ins`, which does not compile). No such shape is used on
    purpose here."""
    code = strip_comments_and_strings(path.read_text())
    bad = [code[:m.start()].count("\n") + 1
           for m in re.finditer(r"\blet\s+(?!rec\b|mut\b)\w+\s+\w+\s+\(", code)]
    assert not bad, f"{path.relative_to(REPO)}: `let NAME NAME (` on lines {bad} (a lost `rec`?)"


def test_no_declaration_is_made_twice():
    """Two files declaring the same fully qualified name would not compile together."""
    decl = re.compile(r"^\s*(?:@\[[^\]]*\]\s*)?(?:(?:private|protected|partial|noncomputable)\s+)*"
                      r"(def|theorem|structure|inductive|abbrev|class)\s+([\w.?!']+)")
    seen: dict[str, str] = {}
    for path in sorted(LIB.rglob("*.lean")):
        spaces: list[str] = []
        for n, line in enumerate(strip_comments_and_strings(path.read_text()).splitlines(), 1):
            if m := re.match(r"^\s*namespace\s+([\w.]+)", line):
                spaces.append(m.group(1))
            elif (m := re.match(r"^\s*end\s+([\w.]+)\s*$", line)) and spaces and spaces[-1] == m.group(1):
                spaces.pop()
            elif m := decl.match(line):
                full = ".".join(spaces + [m.group(2)])
                where = f"{path.relative_to(REPO)}:{n}"
                assert full not in seen, f"{full} declared at {seen[full]} and {where}"
                seen[full] = where
    assert len(seen) > 100

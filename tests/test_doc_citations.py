"""Every citation of a document in the tree points into the repository.

- `docs/NAME.md §N` (also `§N–§M`, `§N, §M`, `§N/§M`) must name an existing file of docs/ and a
  numbered heading `N.` / `N` of it;
- `docs/NAME.md "Heading"` must name a heading or an item of that file: the quoted text must occur
  in it (case and backticks ignored);
- no citation of a document outside the repository: no bare `language.md §…` / `oracle.md §…`
  (the reference texts the project started from, which are not in the clone) and no absolute
  `/work/…` path."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["python", "tests", "SerqLang", "tools", "examples", "lib", "docs", "benchmarks", "vectors"]
SUFFIXES = {".py", ".md", ".sq", ".lean", ".c", ".h", ".lark", ".toml", ".sh", ".csv", ".txt"}
TOP_FILES = ["README.md", "SerqLang.lean", "lakefile.lean", "pyproject.toml"]

SECTION_CITE = re.compile(r"docs/([\w-]+\.md)`?((?:\s*(?:,|–|-|/|and)?\s*§\s*\d+(?:\.\d+)*)+)")
SECTION_NUM = re.compile(r"§\s*(\d+(?:\.\d+)*)")
HEADING_CITE = re.compile(r"docs/([\w-]+\.md)`? \"([^\"\n]+)\"")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.M)
NUMBERED = re.compile(r"^(\d+(?:\.\d+)*)\.?\s")
# a reference text cited without a path into the repository (`language.md §3`, `oracle.md 9.2`)
OUTSIDE = re.compile(r"(?<![\w/.-])(language|oracle|style)\.md`?\s*(§|\d|section)")
ABSOLUTE = re.compile(r"/work/(?:shared|main|wt-)")


def tree_files() -> list[Path]:
    """The text files whose citations are checked (tool-made folders such as .venv skipped)."""
    out = [ROOT / f for f in TOP_FILES if (ROOT / f).is_file()]
    for top in SCANNED:
        for p in sorted((ROOT / top).rglob("*")):
            rel = p.relative_to(ROOT).parts
            if p.is_file() and p.suffix in SUFFIXES and not any(s.startswith(".") or s == "__pycache__" for s in rel):
                out.append(p)
    return out


def headings(doc: Path) -> list[str]:
    return HEADING.findall(doc.read_text(encoding="utf-8"))


def section_numbers(doc: Path) -> set[str]:
    return {m.group(1) for h in headings(doc) if (m := NUMBERED.match(h))}


@functools.lru_cache(maxsize=None)
def info(doc: Path) -> tuple[set[str], str] | None:
    """(its section numbers, its text lowered without backticks), or None if there is no such file."""
    if not doc.is_file():
        return None
    return section_numbers(doc), doc.read_text(encoding="utf-8").lower().replace("`", "")


def bad_citations(text: str, where: str, docs: Path) -> list[str]:
    """Messages for each citation in `text` that does not resolve inside `docs`."""
    bad = []
    for m in SECTION_CITE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        got = info(docs / m.group(1))
        if got is None:
            bad.append(f"{where}:{line}: docs/{m.group(1)} does not exist")
            continue
        for n in SECTION_NUM.findall(m.group(2)):
            if n not in got[0]:
                bad.append(f"{where}:{line}: docs/{m.group(1)} has no section §{n}")
    for m in HEADING_CITE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        got = info(docs / m.group(1))
        if got is None:
            bad.append(f"{where}:{line}: docs/{m.group(1)} does not exist")
        elif m.group(2).lower().replace("`", "") not in got[1]:
            bad.append(f"{where}:{line}: docs/{m.group(1)} has no heading or item \"{m.group(2)}\"")
    for m in OUTSIDE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        bad.append(f"{where}:{line}: `{m.group(0)}` cites a document that is not in the repository; "
                   f"cite docs/…md §N")
    for m in ABSOLUTE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        bad.append(f"{where}:{line}: an absolute path outside the clone ({m.group(0)}…)")
    return bad


def test_every_citation_points_into_the_repository():
    me = Path(__file__).resolve()
    bad = []
    for p in tree_files():
        if p.resolve() == me:
            continue  # this file quotes the forbidden forms in its patterns and docstrings
        bad += bad_citations(p.read_text(encoding="utf-8", errors="replace"), str(p.relative_to(ROOT)), ROOT / "docs")
    assert not bad, "\n".join(bad)


def test_the_scan_covers_the_tree():
    names = {str(p.relative_to(ROOT)) for p in tree_files()}
    for must in ("python/serq/linker.py", "SerqLang/Growth.lean", "docs/vllm-model.md", "examples/multi-turn/vllm.sq",
                 "lib/vllm.sq", "tools/vllm_oracle/driver.py", "tests/conftest.py", "README.md"):
        assert must in names, must


@pytest.mark.parametrize("text,expect", [
    ("see docs/language.md §99 for more", "has no section §99"),
    ("(docs/language.md §11.4, §11.99)", "has no section §11.99"),
    ("docs/language.md §6–§42", "has no section §42"),
    ("docs/nosuch.md §1", "docs/nosuch.md does not exist"),
    ("docs/spec.md \"No such heading\"", "has no heading"),
    ("the rule of language.md §11.4", "not in the repository"),
    ("scenarios of oracle.md 9.2", "not in the repository"),
    ("read /work/shared/reference/x", "absolute path"),
])
def test_a_seeded_bad_citation_is_caught(text, expect):
    bad = bad_citations(text, "seed", ROOT / "docs")
    assert bad and expect in bad[0], bad


def test_good_citations_pass():
    good = ("docs/language.md §11.4/§11.7, docs/language.md §6–§8, §12 and docs/oracle.md §1.1; "
            "docs/spec.md \"A hold that can never fit\"; docs/content.md §3 item 2")
    assert bad_citations(good, "good", ROOT / "docs") == []

"""Every link and repository path that the user-facing docs point at exists in the clone.

The docs name files in two ways: Markdown links `[text](target)`, and repository paths written
out (`tools/vllm_oracle/setup.sh`, `docs/api.md`, `examples/multi-turn/vllm.sq`). A reader who
follows one should find the file. Checked in README.md, examples/README.md, docs/*.md and the
example programs and data files (their headers):

- a link's relative target (anchor dropped) must exist beside the linking file;
- a path that starts with a top-level folder of the repository (`docs/`, `python/`, `tools/`, …),
  or with `../`, must exist from the repository root or from the file's own folder.

Not checked, because they are not files of the clone: placeholders (`vectors/vllm/NAME.scenario.json`),
patterns (`vectors/spec/*/ir.json`, `…`, `{a,b}`), folders that a setup script creates (a part
starting with `.`, such as `tools/vllm_oracle/.venv`), a value in double quotes (a JSON or program
string such as `"../../lib/vllm.sq"`, relative to its own program), and another project's path
written with its owner (`lean4's tests/…`). docs/language.md §N citations are test_doc_citations.py's."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_FOLDERS = ("docs", "python", "tests", "tools", "examples", "lib", "vectors", "benchmarks", "SerqLang", ".ci")
PATH = re.compile(r"(?<![\w/.~:\"-])((?:\.\./)*(?:%s)/[\w./*<>{}…-]*[\w*>}…])"
                  % "|".join(re.escape(t) for t in TOP_FOLDERS))
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
# NAME.json, DIR/…, .venv-VERSION: words that stand for a name the reader picks
PLACEHOLDER = re.compile(r"\b(?:NAME|DIR|FILE|OUT|VERSION|GPU|MODEL)\b")
ELSEWHERE = re.compile(r"\w's\s+`?$")     # "lean4's `tests/…`": a path of another project


def documents() -> list[Path]:
    """The docs, and the example programs and data files, whose headers are a user's first reading."""
    examples = ROOT / "examples"
    return [ROOT / "README.md", examples / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted(examples.rglob("*.sq")), *sorted(examples.rglob("*.csv"))]


def checked(path: str) -> bool:
    parts = path.split("/")
    return not (any(c in path for c in "*<>{}…") or PLACEHOLDER.search(path)
                or any(p.startswith(".") and p not in (".", "..", ".ci") for p in parts))


def resolves(target: str, doc: Path) -> bool:
    return (ROOT / target).exists() or (doc.parent / target).exists()


def line_of(text: str, m: re.Match[str]) -> int:
    return text.count("\n", 0, m.start()) + 1


def broken_links(text: str, doc: Path) -> list[str]:
    """FILE:LINE messages for each link or repository path in `text` (the text of `doc`) that
    names nothing in the clone."""
    where = doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc
    bad = []
    for m in LINK.finditer(text):
        target = m.group(1).split("#", 1)[0]
        if target and not re.match(r"[a-z]+:", target) and not (doc.parent / target).exists():
            bad.append(f"{where}:{line_of(text, m)}: the link ({m.group(1)}) names no file beside {doc.name}")
    for m in PATH.finditer(text):
        path = m.group(1).rstrip(".")
        if checked(path) and not ELSEWHERE.search(text[max(0, m.start() - 40):m.start()]) and not resolves(path, doc):
            bad.append(f"{where}:{line_of(text, m)}: `{path}` is not in the repository (moved or renamed? "
                       f"write its current path)")
    return bad


def test_every_doc_link_and_path_resolves():
    bad = []
    for doc in documents():
        bad += broken_links(doc.read_text(encoding="utf-8"), doc)
    assert not bad, "\n".join(bad)


def test_the_scan_reads_the_docs_and_finds_paths():
    # the scan is not vacuous: the README's own pointers are found as paths
    readme = ROOT / "README.md"
    found = [m.group(1) for m in PATH.finditer(readme.read_text(encoding="utf-8"))]
    assert "docs/architecture.md" in found and "tools/vllm_oracle/setup.sh" in found, found
    assert ROOT / "docs" / "tutorial.md" in documents()


@pytest.mark.parametrize("seeded,expect", [
    ("see `docs/no-such-page.md` for more", "docs/no-such-page.md"),
    ("run `tools/vllm_oracle/setup.sh.old`", "tools/vllm_oracle/setup.sh.old"),
    ("the manual ([language](nosuch.md#syntax))", "(nosuch.md#syntax)"),
    ("in examples/oracle/vllm_scenario.sq, replace", "examples/oracle/vllm_scenario.sq"),
])
def test_a_seeded_broken_link_is_caught(seeded, expect):
    bad = broken_links(f"line one\n{seeded}\n", ROOT / "docs" / "api.md")
    assert len(bad) == 1 and expect in bad[0] and "docs/api.md:2:" in bad[0], bad


def test_good_links_and_placeholders_pass():
    good = ("`docs/api.md`, (docs/language.md §3), [tutorial](tutorial.md#1-install), "
            "[site](https://example.org/x.md), `vectors/vllm/NAME.scenario.json`, `vectors/spec/*/ir.json`, "
            "`tools/vllm_oracle/.venv-0.33.0`, lean4's `tests/lean/run/x.lean`, `../lib/vllm.sq`.")
    assert broken_links(good, ROOT / "docs" / "api.md") == []
    assert broken_links("`single-turn/mm1.sq` and `../lib/vllm.sq`", ROOT / "examples" / "README.md") == []


def unlisted_docs(architecture: str, names: list[str]) -> list[str]:
    """The docs/NAME.md of `names` that the "The documents" table of `architecture` leaves out."""
    table = architecture.split("## The documents", 1)[-1].split("\n## ", 1)[0]
    return [n for n in names if f"docs/{n}" not in table]


def test_every_doc_is_in_the_architecture_index():
    # a reader finds the documents through docs/architecture.md's table (the README points there)
    names = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    missing = unlisted_docs((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"), names)
    assert not missing, f"docs/architecture.md \"The documents\" does not list: {missing}"
    assert unlisted_docs("## The documents\n| docs/api.md | x |\n## Next\n docs/tutorial.md",
                         ["api.md", "tutorial.md"]) == ["tutorial.md"]      # seeded: one left out


def unlisted_examples(section: str, programs: list[str]) -> list[str]:
    """The example programs (paths under examples/) that `section` names neither by path, by file
    name in backquotes (`mg1.sq` in a row that starts with `single-turn/mm1.sq`) nor by a pattern
    (`oracle/*.sq`)."""
    patterns = re.findall(r"`([\w/-]*\*[\w./*-]*)`", section)
    return [p for p in programs
            if p not in section and f"`{p.rsplit('/', 1)[-1]}`" not in section
            and not any(fnmatch.fnmatch(p, pat) for pat in patterns)]


def test_every_example_is_in_the_manual_s_example_table():
    # docs/language.md §13 summarises each example's check; a new example left out of it is found
    # only by those who read examples/README.md
    text = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
    section = text.split("\n## 13.", 1)[1].split("\n## 14.", 1)[0]
    programs = sorted(p.relative_to(ROOT / "examples").as_posix() for p in (ROOT / "examples").rglob("*.sq"))
    missing = unlisted_examples(section, programs)
    assert not missing, f"docs/language.md §13 does not list: {missing}"
    assert unlisted_examples("| `a/x.sq`, `y.sq` | … | `o/*.sq` |", ["a/x.sq", "a/y.sq", "o/q.sq", "b/z.sq"]) == ["b/z.sq"]

"""The spec's index is complete: every module is in docs/spec.md's module map and every rule
vector in its table of rules."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = (REPO / "docs" / "spec.md").read_text()


def test_every_module_is_in_the_module_map():
    for p in sorted((REPO / "python" / "serq_spec").glob("*.py")):
        if p.name != "__init__.py":
            assert f"`{p.name}`" in DOC, p.name


def test_every_vector_is_in_the_rule_table():
    for d in sorted((REPO / "vectors" / "spec").iterdir()):
        if (d / "program.sq").exists():
            assert f"`{d.name}`" in DOC, d.name

"""`serq COMMAND --help` is what a new user reads first: every command's help (nested ones such as
`serq oracle run` included) prints clean text and names only files that exist."""

from __future__ import annotations

import argparse
from pathlib import Path

from serq.cli import build_parser
from test_doc_links import broken_links

ROOT = Path(__file__).resolve().parents[1]


def help_texts(parser: argparse.ArgumentParser, prefix: str = "serq") -> dict[str, str]:
    """Every parser's help text, keyed by its command line (`serq oracle run`)."""
    out = {prefix: parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(help_texts(sub, f"{prefix} {name}"))
    return out


def help_faults(texts: dict[str, str]) -> list[str]:
    bad = []
    for command, text in texts.items():
        # argparse %-formats an option's help but prints a description as written: a `%%` there shows
        if "%%" in text:
            bad.append(f"{command} --help prints '%%' (write a single % in a description)")
        bad += [f"{command} --help: {msg.split(': ', 1)[1]}" for msg in broken_links(text, ROOT / "README.md")]
    return bad


def test_every_command_has_help():
    texts = help_texts(build_parser())
    for command in ("serq run", "serq sweep", "serq fit", "serq oracle run", "serq testbed predict"):
        assert command in texts, sorted(texts)


def test_help_texts_are_clean_and_name_existing_files(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")     # argparse wraps to the terminal: check a common width
    bad = help_faults(help_texts(build_parser()))
    assert not bad, "\n".join(bad)


def test_a_seeded_help_fault_is_caught():
    seeded = {"serq x": "usage: serq x\n\nwith 95 %% intervals; see docs/no-such.md\n"}
    bad = help_faults(seeded)
    assert len(bad) == 2 and "'%%'" in bad[0] and "docs/no-such.md" in bad[1], bad


def undocumented(parser: argparse.ArgumentParser, prefix: str = "serq") -> list[str]:
    """Commands without a description and arguments without a help text, leaf commands only
    (`serq oracle`, a group, is described by its subcommands)."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if groups:
        return [bad for g in groups for name, sub in g.choices.items() for bad in undocumented(sub, f"{prefix} {name}")]
    bad = [f"{prefix}: no description"] if not parser.description else []
    return bad + [f"{prefix} {'/'.join(a.option_strings) or a.metavar or a.dest}: no help text"
                  for a in parser._actions if a.help is None and not isinstance(a, argparse._HelpAction)]


def test_every_command_and_argument_is_described():
    # `serq sample --help` and `serq spec --help` printed no description; `serq import`'s TRACE, the
    # oracle commands' SCENARIO.json and DIR, `-o` of plot and import had no help text
    bad = undocumented(build_parser())
    assert not bad, "\n".join(bad)
    seeded = argparse.ArgumentParser(prog="x")
    seeded.add_argument("trace")
    assert undocumented(seeded, "serq x") == ["serq x: no description", "serq x trace: no help text"]

"""Shared fixtures of the front-end tests: compiling a program text, catching a located error."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from serq.errors import SerqError  # noqa: E402
from serq.frontend import compile_source  # noqa: E402

# The project's seed texts, an optional extra next to the clone (never an absolute path): the tests
# that read them skip, saying why, when ../shared is absent.
SHARED = ROOT.parent / "shared"
SEED = SHARED / "seeds" / "000_8677f3ea27abfe26.txt"


def extract_seed(seed_text: str) -> tuple[str, str]:
    """The seed's program (examples/multi-turn/vllm.sq) and its library (lib/vllm.sq), as printed."""
    head = "examples/multi-turn/vllm.sq\n\n"
    a = seed_text.index(head) + len(head)
    b = seed_text.index("The program's definition reusable")
    prog = seed_text[a:b].rstrip() + "\n"
    head = "lib/vllm.sq\n\n"
    a = seed_text.index(head, b) + len(head)
    m = re.search(r"\n\n(Requirement\t|\S+\t)", seed_text[a:])
    lib = seed_text[a:a + m.start()].rstrip() + "\n" if m else seed_text[a:].rstrip() + "\n"
    return prog, lib


@pytest.fixture
def seed_tree(tmp_path: Path) -> Path:
    """tmp/examples/multi-turn/vllm.sq + tmp/lib/vllm.sq, extracted from the seed at test time."""
    if not SEED.is_file():
        pytest.skip(f"the seed file is absent ({SEED}): ../shared is not next to the repository")
    prog, lib = extract_seed(SEED.read_text(encoding="utf-8"))
    (tmp_path / "examples" / "multi-turn").mkdir(parents=True)
    (tmp_path / "lib").mkdir()
    (tmp_path / "examples" / "multi-turn" / "vllm.sq").write_text(prog, encoding="utf-8")
    (tmp_path / "lib" / "vllm.sq").write_text(lib, encoding="utf-8")
    return tmp_path / "examples" / "multi-turn" / "vllm.sq"


def compile_ok(text: str, settings: dict | None = None, filename: str = "t.sq") -> dict:
    return compile_source(text, filename, settings or {})


def compile_err(text: str, settings: dict | None = None, filename: str = "t.sq") -> SerqError:
    with pytest.raises(SerqError) as info:
        compile_source(text, filename, settings or {})
    return info.value


#: markers whose tests the default run leaves out, and why; `-m NAME` (or SERQ_SLOW=1 for slow)
#: selects them
OPT_IN = {
    "ray": "starts a local Ray cluster (20-40 s on this machine): select with -m ray",
    "slow": "a long check kept out of the default run: select with -m slow or SERQ_SLOW=1",
    "testbed": "runs the real vLLM engine: select with -m testbed",
}


def pytest_collection_modifyitems(config, items):
    """Tests of an OPT_IN marker run only when the marker expression names it."""
    import os

    expr = config.option.markexpr or ""
    for name, why in OPT_IN.items():
        if name in expr or (name == "slow" and os.environ.get("SERQ_SLOW")):
            continue
        skip = pytest.mark.skip(reason=why)
        for item in items:
            if item.get_closest_marker(name) is not None:
                item.add_marker(skip)

"""serq_fast's modules form one straight line of imports, stated in docs/architecture.md "The
layers of serq_fast" as serq_spec's are: a module imports only modules before it in that order,
so the import graph has no cycle and nothing imports back from the event loop (`step`). Imports
inside a function (the commands load the engine only when they run) must go down the order too.
Every module's docstring names its serq_spec counterpart. Read from the source with `ast`, by
the machinery of tests/test_spec_layers.py; nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

from test_architecture import import_circle
from test_spec_layers import graph, layer_order
from test_spec_layers import layer_violations as spec_layer_violations

ROOT = Path(__file__).resolve().parents[1]
FAST = ROOT / "python" / "serq_fast"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PACKAGE = "serq_fast"


def fast_modules() -> dict[str, str]:
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(FAST.glob("*.py"))}


def layer_violations(sources: dict[str, str], order: list[str]) -> list[str]:
    """test_spec_layers' rule, with the imports inside a function too; `__init__` exports step.Sim."""
    return spec_layer_violations(sources, order, PACKAGE, ("runtime", "type_only", "in_function"), frozenset(),
                                 frozenset({"step"}))


def missing_counterparts(sources: dict[str, str]) -> list[str]:
    """Modules whose docstring does not say `serq_spec counterpart`."""
    return [f"serq_fast/{m}.py: its docstring names no serq_spec counterpart (a line `serq_spec counterpart: …`)"
            for m, src in sources.items()
            if m != "__init__" and "serq_spec counterpart" not in (ast.get_docstring(ast.parse(src)) or "")]


def test_the_import_graph_of_serq_fast_has_no_cycle():
    cycle = import_circle(graph(fast_modules(), PACKAGE))
    assert cycle is None, "import cycle: " + " → ".join(cycle)


def test_every_import_goes_down_the_documented_layers():
    bad = layer_violations(fast_modules(), layer_order(ARCHITECTURE.read_text(encoding="utf-8"), PACKAGE))
    assert not bad, "\n".join(bad)


def test_every_module_names_its_serq_spec_counterpart():
    bad = missing_counterparts(fast_modules())
    assert not bad, "\n".join(bad)


# -- the checks catch seeded faults --------------------------------------------------------------

def test_a_seeded_cycle_is_caught():
    sources = fast_modules()
    sources["pools"] = "from serq_fast.step import Sim\n" + sources["pools"]
    cycle = import_circle(graph(sources, PACKAGE))
    assert cycle is not None and cycle[0] == cycle[-1] and "pools" in cycle and "step" in cycle


def test_a_seeded_upward_import_is_caught():
    order = layer_order(ARCHITECTURE.read_text(encoding="utf-8"), PACKAGE)
    sources = fast_modules()
    sources["stages"] = "from serq_fast.defs import STAGE\nfrom serq_fast.engine import Engine\n" + sources["stages"]
    assert any("stages.py:2: imports engine," in b for b in layer_violations(sources, order))
    sources = fast_modules()
    sources["pools"] += "\n\ndef late():\n    from serq_fast.step import READY\n    return READY\n"
    assert any("pools.py" in b and "imports step inside a function" in b for b in layer_violations(sources, order))
    assert layer_violations(fast_modules(), order[1:]), "a module left out of the documented order"


def test_a_seeded_missing_counterpart_is_caught():
    sources = fast_modules()
    sources["growth"] = sources["growth"].replace("serq_spec counterpart", "spec twin")
    assert missing_counterparts(sources) == [
        "serq_fast/growth.py: its docstring names no serq_spec counterpart (a line `serq_spec counterpart: …`)"]

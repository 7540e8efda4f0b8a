"""serq_spec's modules form one straight line of imports (docs/architecture.md "The layers of
serq_spec"), as SerqLang's files do: every import at the top of its module, none inside a
function, and every module importing only modules before it in the documented order, so the
import graph has no cycle. Read from the source with `ast`; nothing is imported."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from test_architecture import import_circle

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "python" / "serq_spec"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Imports allowed inside a function, each with its reason: the optional Lean backend is loaded
# only when asked for, and a failure to load it means Python only (docs/lean.md).
LAZY = {("__init__", "serq_lean")}
# Type-only imports (`if TYPE_CHECKING:`) of a module later in the order, each with its reason:
# a Config holds its Program, whose Workload and checks read a Config.
TYPE_ONLY_UP = {("config", "program")}


def layer_order(text: str, package: str = "serq_spec") -> list[str]:
    """The module order stated in docs/architecture.md: the `text` block after the heading
    "The layers of `PACKAGE`"."""
    section = text.split(f"### The layers of `{package}`", 1)[1]
    block = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    return [name.strip() for name in block.replace("\n", " ").split("→") if name.strip()]


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _target(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The modules of PACKAGE (relative names) or other top-level packages an import names."""
    prefix = package + "."
    if isinstance(node, ast.Import):
        return [a.name.removeprefix(prefix) if a.name.startswith(prefix) else a.name.split(".")[0]
                for a in node.names]
    if node.level == 0:
        mod = node.module or ""
        if mod.startswith(prefix):
            return [mod.removeprefix(prefix).split(".")[0]]
        if mod == package:
            return [a.name for a in node.names]
        return [mod.split(".")[0]]
    if node.module:
        return [node.module.split(".")[0]]
    return [a.name for a in node.names]   # `from . import values`


@functools.lru_cache(maxsize=None)   # each source is parsed once per run
def module_imports(source: str, package: str = "serq_spec") -> dict[str, list]:
    """{"runtime": [(module, line)], "type_only": [...], "in_function": [...]} of one module."""
    out: dict[str, list] = {"runtime": [], "type_only": [], "in_function": []}
    tree = ast.parse(source)

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out[where] += [(t, child.lineno) for t in _target(child, package)]
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                visit(child, "in_function")
            elif isinstance(child, ast.If) and where == "runtime" and _is_type_checking(child.test):
                for stmt in child.body:
                    visit(ast.Module(body=[stmt], type_ignores=[]), "type_only")
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), "runtime")
            else:
                visit(child, where)
    visit(tree, "runtime")
    return out


def spec_modules() -> dict[str, str]:
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(SPEC.glob("*.py"))}


def function_imports(sources: dict[str, str]) -> list[str]:
    return [f"serq_spec/{m}.py:{line}: imports {t} inside a function (move it to the top of the module)"
            for m, src in sources.items() for t, line in module_imports(src)["in_function"] if (m, t) not in LAZY]


def graph(sources: dict[str, str], package: str = "serq_spec") -> dict[str, set[str]]:
    """module -> the PACKAGE modules it imports when it is imported (type-only imports left out)."""
    return {m: {t for t, _ in module_imports(src, package)["runtime"] if t in sources and t != m}
            for m, src in sources.items()}


def layer_violations(sources: dict[str, str], order: list[str], package: str = "serq_spec",
                     kinds: tuple = ("runtime", "type_only"), allowed_up: frozenset = frozenset(TYPE_ONLY_UP),
                     init_exports: frozenset = frozenset()) -> list[str]:
    """Imports of KINDS that do not go down ORDER (bar the type-only ones in ALLOWED_UP), an order
    that is not the package's modules once each, and `__init__` importing a module of its own
    (other than those in INIT_EXPORTS)."""
    bad = []
    modules = set(sources) - {"__init__"}
    if set(order) != modules or len(order) != len(set(order)):
        bad.append(f"docs/architecture.md's order {order} is not the modules of {package} {sorted(modules)} once each")
    rank = {m: i for i, m in enumerate(order)}
    for m in order:
        if m not in sources:
            continue
        found = module_imports(sources[m], package)
        for kind in kinds:
            for t, line in found[kind]:
                if t in rank and rank[t] >= rank[m] and not (kind == "type_only" and (m, t) in allowed_up):
                    where = " inside a function" if kind == "in_function" else ""
                    bad.append(f"{package}/{m}.py:{line}: imports {t}{where}, which is not before it in the layer "
                               f"order of docs/architecture.md")
    init = module_imports(sources.get("__init__", ""), package)
    bad += [f"{package}/__init__.py:{line}: imports {t} (the package imports no module of its own"
            + (f" but {', '.join(sorted(init_exports))})" if init_exports else ")")
            for t, line in init["runtime"] + init["type_only"] if t in modules and t not in init_exports]
    return bad


def test_no_serq_spec_module_imports_inside_a_function():
    bad = function_imports(spec_modules())
    assert not bad, "\n".join(bad)


def test_the_import_graph_of_serq_spec_has_no_cycle():
    cycle = import_circle(graph(spec_modules()))
    assert cycle is None, "import cycle: " + " → ".join(cycle)


def test_every_import_goes_down_the_documented_layers():
    bad = layer_violations(spec_modules(), layer_order(ARCHITECTURE.read_text(encoding="utf-8")))
    assert not bad, "\n".join(bad)


# -- the checks catch seeded faults --------------------------------------------------------------

def test_a_seeded_import_inside_a_function_is_caught():
    sources = spec_modules()
    sources["engine"] += "\n\ndef late():\n    from .sessions import settle\n    return settle\n"
    assert any("engine.py" in b and "sessions inside a function" in b for b in function_imports(sources))


def test_a_seeded_cycle_is_caught():
    sources = spec_modules()
    sources["values"] = "from .step import run\n" + sources["values"]
    cycle = import_circle(graph(sources))
    assert cycle is not None and cycle[0] == cycle[-1] and "values" in cycle and "step" in cycle


def test_a_seeded_upward_import_is_caught():
    sources = spec_modules()
    order = layer_order(ARCHITECTURE.read_text(encoding="utf-8"))
    sources["pools"] = "from .sessions import settle\n" + sources["pools"]
    assert any("pools.py:1: imports sessions" in b for b in layer_violations(sources, order))
    sources = spec_modules()
    sources["expr"] = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .engine import serve\n" + sources["expr"]
    assert any("expr.py:3: imports engine" in b for b in layer_violations(sources, order))
    assert layer_violations(spec_modules(), order[1:]), "a module left out of the documented order"

"""The import rules of docs/architecture.md, read from the source with `ast` (nothing is imported).

A rule broken here means a part now depends on a part it should not: the front-end on an engine,
the reference on the fast engine, the vLLM driver (which runs inside vLLM's own environment) on
anything but the standard library and the scenario reader, or two modules of the vLLM model on
each other."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = ROOT / "python"
OURS = ("serq", "serq_spec", "serq_fast", "serq_lean", "serq_vllm", "serq_drt")
# what an engine may use of the front-end package: reading programs and sessions, exact values, draws
SHARED = {"serq", "serq.wire", "serq.exact", "serq.draws", "serq.errors", "serq.irfile", "serq.sessionsfile",
          "serq.replayinputs",
          "serq.outputfile", "serq.progress", "serq.timeseries", "serq.claimreport"}
# modules that import only the standard library, so the vLLM drivers may load them (checked below)
STDLIB_ONLY = {"serq", "serq.inputfile", "serq.outputfile", "serq_vllm", "serq_vllm.scenario",
               "serq_vllm.compare", "serq_drt", "serq_drt.compare"}
# the layer above the engines (docs/architecture.md): it may use them, nothing below may use it
APPLICATION = {"serq.api", "serq.sweep", "serq.capacity", "serq.plot", "serq.workflow_cli", "serq.testbed",
               "serq.testbed_cli"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PY).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, package: str) -> set[str]:
    """The project modules `path` imports (`from serq import draws` counts as `serq.draws`)."""
    out = set()
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                base = package.split(".")[: len(package.split(".")) - n.level + 1]
                mod = ".".join(base + ([n.module] if n.module else []))
            else:
                mod = n.module or ""
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in n.names if f"{mod}.{a.name}".split(".")[0] in OURS
                    and (PY / Path(*f"{mod}.{a.name}".split("."))).with_suffix(".py").is_file()}
    return {m for m in out if m.split(".")[0] in OURS}


def package_of(path: Path) -> str:
    name = module_name(path)
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def violations(path: Path, deps: set[str]) -> list[str]:
    """The rule each import of one module breaks."""
    mod = module_name(path)
    top = mod.split(".")[0]
    bad = []
    for d in sorted(deps):
        dtop = d.split(".")[0]
        if top == "serq_lean" and dtop != "serq_lean":
            bad.append(f"{mod} imports {d}: serq_lean stands alone")
        elif top != "serq_vllm" and dtop == "serq_vllm":
            bad.append(f"{mod} imports {d}: nothing outside serq_vllm imports it (serq/cli.py "
                       "names serq_vllm.cli as text)")
        elif top == "serq_spec" and dtop == "serq_fast":
            bad.append(f"{mod} imports {d}: the reference never depends on the fast engine")
        elif top == "serq_spec" and dtop == "serq_lean" and mod != "serq_spec":
            bad.append(f"{mod} imports {d}: only serq_spec/__init__.py loads the Lean backend")
        elif top in ("serq_spec", "serq_fast") and dtop == "serq" and d not in SHARED:
            bad.append(f"{mod} imports {d}: an engine uses only {sorted(SHARED)} of the front-end")
        elif top == "serq_fast" and dtop == "serq_spec":
            bad.append(f"{mod} imports {d}: the fast engine never depends on the reference "
                       "(serq_drt holds the two against each other)")
        elif top in ("serq", "serq_spec", "serq_fast", "serq_lean") and dtop == "serq_drt":
            bad.append(f"{mod} imports {d}: the harness sits above the engines (serq/cli.py names "
                       "serq_drt.cli as text)")
        elif d == "serq_drt.compare" or mod == "serq_drt.compare":
            if mod == "serq_drt.compare" and d not in STDLIB_ONLY:
                bad.append(f"{mod} imports {d}: the one comparison loads with the standard library alone")
        elif top == "serq_fast" and dtop == "serq_lean":
            bad.append(f"{mod} imports {d}: the fast engine has no Lean backend")
        elif d in APPLICATION and mod not in APPLICATION and mod != "serq":
            bad.append(f"{mod} imports {d}: nothing below the application layer uses it")
        elif top == "serq" and mod not in APPLICATION and dtop != "serq":
            bad.append(f"{mod} imports {d}: the front-end does not depend on an engine")
        elif top == "serq_vllm" and dtop == "serq_lean":
            bad.append(f"{mod} imports {d}: the vLLM model runs the engines, not the Lean backend")
        elif d == "serq_vllm.cli" and mod != "serq_vllm.cli":
            bad.append(f"{mod} imports {d}: only the top-level `serq` command loads the CLI layer")
        elif mod in ("serq_vllm.scenario", "serq_vllm.compare") and d not in STDLIB_ONLY:
            bad.append(f"{mod} imports {d}: it must load with the standard library alone "
                       "(tools/vllm_oracle runs it inside vLLM's environment)")
    return bad


def test_the_parts_keep_their_import_rules():
    bad = []
    for path in sorted(PY.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        bad += violations(path, imports(path, package_of(path)))
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("tool", ["vllm_oracle", "vllm_testbed"])
def test_the_vllm_drivers_read_only_the_scenario_module(tool):
    deps = imports(ROOT / "tools" / tool / "driver.py", "")
    assert "serq_vllm.scenario" in deps and deps <= {"serq_vllm", "serq_vllm.scenario"}, deps


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports, at its top or inside a function (a circle
    through a function-level import still makes the modules depend on each other)."""
    graph = {}
    for path in sorted((PY / package).rglob("*.py")):
        mod = module_name(path)
        graph[mod] = {d for d in imports(path, package_of(path))
                      if d.split(".")[0] == package and d != mod}
    return graph


def import_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports in `graph` (module -> the modules it imports), as [a, …, a], or None
    (graphlib finds it; tests/test_spec_layers.py uses this one too)."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(reversed(exc.args[1]))   # graphlib lists predecessors: a imports b imports … a
    return None


def test_the_vllm_model_has_no_import_circle():
    graph = import_graph("serq_vllm")
    # not vacuous: the graph holds the modules and the imports of the model's loop
    assert {"serq_vllm.plan", "serq_vllm.encode", "serq_vllm.feedback"} <= graph["serq_vllm.model"], graph
    circle = import_circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle)


@pytest.mark.parametrize("seed", [
    ("serq_vllm.scenario", "serq_vllm.model"),  # model -> plan -> scenario -> model
    ("serq_vllm.model", "serq_vllm.agreement"),  # the old model.py <-> agreement.py
    ("serq_vllm.collect", "serq_vllm.feedback"),  # feedback -> collect -> feedback
])
def test_a_seeded_import_circle_is_caught(seed):
    graph = import_graph("serq_vllm")
    graph[seed[0]] = graph[seed[0]] | {seed[1]}
    circle = import_circle(graph)
    assert circle is not None and seed[0] in circle and seed[1] in circle, circle


@pytest.mark.parametrize("module,dep,rule", [
    ("serq_spec/step.py", "serq_fast.step", "never depends on the fast engine"),
    ("serq/linker.py", "serq_spec.values", "does not depend on an engine"),
    ("serq_fast/pools.py", "serq_spec.values", "never depends on the reference"),
    ("serq_fast/cli.py", "serq_drt.lockstep", "the harness sits above the engines"),
    ("serq_spec/step.py", "serq_drt.compare", "the harness sits above the engines"),
    ("serq_drt/compare.py", "serq_spec.values", "standard library alone"),
    ("serq_fast/step.py", "serq.linker", "an engine uses only"),
    ("serq_vllm/scenario.py", "serq.wire", "standard library alone"),
    ("serq_vllm/compare.py", "serq_fast.step", "standard library alone"),
    ("serq/linker.py", "serq_vllm.plan", "nothing outside serq_vllm imports it"),
    ("serq_fast/step.py", "serq_vllm.scenario", "nothing outside serq_vllm imports it"),
    ("serq_vllm/model.py", "serq_vllm.cli", "only the top-level `serq` command"),
    ("serq_vllm/engine.py", "serq_lean.build", "not the Lean backend"),
    ("serq_lean/build.py", "serq.wire", "stands alone"),
])
def test_a_seeded_bad_import_is_caught(module, dep, rule):
    path = PY / module
    deps = imports(path, package_of(path)) | {dep}
    assert any(rule in v for v in violations(path, deps))


def test_stdlib_only_modules_import_nothing_of_the_project_but_each_other():
    for name in STDLIB_ONLY:
        parts = name.split(".")
        path = PY.joinpath(*parts).with_suffix(".py")
        if not path.is_file():
            path = PY.joinpath(*parts, "__init__.py")
        deps = imports(path, package_of(path)) - STDLIB_ONLY
        assert not deps, f"{name} imports {sorted(deps)}: the vLLM drivers load it with the standard library alone"

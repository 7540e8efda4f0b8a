"""Pool state is keyed by thread (docs/language.md §11.13): a branch that holds a pool (a
sub-agent) has its own holds, queue places, cache entries, leases, growths and engine requests,
named by its id "s.k". Two checks:

- serq_spec and serq_fast agree on a sub-agent's engine admission read by `running_served`
  (serq_spec marked the admitted session's serial as fresh, not the thread, so the other
  sub-agent's running entry was miscounted: lockstep diverged at step 0);
- the Lean mirror (SerqLang/, never compiled here) keeps the keys as threads: every field that
  holds a thread in config.py is a `Tid` in Lean, and every function of docs/spec-map.md whose
  serq_spec side takes a `Session` or a `Tid` takes a `Tid` or a `Session` on the Lean side
  (a Lean `serial : Nat` there would key a branch's state by its session, as before this mirror
  followed serq_spec). Text only: not that the Lean compiles.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import sys
from pathlib import Path

import pytest

from serq.frontend import compile_source
from serq_drt.lockstep import compare_runs, sample_sessions
from serq_spec import config

from test_spec_map import SPEC_MAP, rows

REPO = Path(__file__).resolve().parents[1]

SUB_AGENTS_READ_RUNNING = """
fn main() {
  device acc { kv cap 8 * 16; }
  pool kv on acc { block 16; evict lru; preempt lifo; }
  engine eng on acc {
    reqs cap 4;
    tokens cap 64;
    request (prompt, output) {
      prefill (prompt) growing kv;
      decode (output - 1) growing kv;
    }
    schedule {
      advance running;
      admit waiting taking reqs (1), kv (prompt + 16 * running_served(eng));
    }
    execute (1);
  }
  pool reqs on eng { queue fifo; }
  workload { arrive batch(1); }
  server {
    fork { eng (10, 3); }
    fork { eng (10, 3); }
    join;
  }
}
"""


def test_a_sub_agents_admission_is_fresh_in_both_engines():
    """Both sub-agents are admitted in the first iteration: when 0.2 is admitted, 0.1's prefill
    entry is of a request this iteration admitted, so running_served(eng) is 0 and 0.2 takes
    16 units of kv, as 0.1 did."""
    ir = compile_source(SUB_AGENTS_READ_RUNNING, "agents.sq", {})
    assert compare_runs(ir, sample_sessions(ir, 0, 1, "agents.sq"), "agents.sq") > 0


# Fields of config.py that hold a thread although Python annotates them as a plain list (or not
# at all), with their Lean structure and field: pools.py appends `s.tid` to them.
THREAD_FIELDS = {
    ("PoolState", "holders"): "List Tid",
    ("PoolState", "growers"): "List Tid",
    ("StageState", "pending"): "List Tid",
    ("StageState", "due"): "List Tid",
    ("Config", "ready"): "List Tid",
    ("EnvM", "session"): "Option Tid",   # expr.py `Env.session`: the thread whose moment it is
}

# config.py fields annotated `Tid` that SerqLang keeps another way, and why.
OTHER_SHAPE = {
    ("Job", "serial"): "Lean keeps the session's serial and the branch number (`Job.branch`); `Job.tid` is the thread",
}

# serq_spec functions that take a Session but belong to a session, never to a branch.
SESSION_ONLY = {
    "sessions.server_done": "a turn's server frame runs on the session",
    "sessions.exec_turn": "a branch refuses `turn;` (§11.13)",
    "workload.Workload.check_consumed": "the draws are the session's",
    "workload.Workload.take": "the draws are the session's; Lean reads the thread from `env.session`",
}


def lean_sources() -> dict[Path, str]:
    return {p: p.read_text() for p in sorted((REPO / "SerqLang").rglob("*.lean"))}


def lean_fields(structure: str) -> dict[str, str]:
    """The fields of `structure NAME where` in SerqLang/**/*.lean: name -> type (default cut)."""
    for text in lean_sources().values():
        m = re.search(rf"^structure {structure} where\n((?:(?:  .*)?\n)*)", text, re.M)
        if m:
            out = {}
            for line in m.group(1).splitlines():
                f = re.match(r"^  (?!-|/)([\w«»]+) : (.+?)(?: := .*)?$", line)
                if f:
                    out[f.group(1)] = f.group(2).strip()
            return out
    raise AssertionError(f"SerqLang declares no structure {structure}")


def lean_binders(name: str) -> str | None:
    """The binders and result type of `def NAME` (its last component), up to `:=` or a `|` arm."""
    last = name.split(".")[-1]
    pat = re.compile(r"^\s*(?:@\[[^\]]*\]\s*)?(?:(?:private|protected|partial)\s+)*def\s+(?:\w+\.)*"
                     + re.escape(last) + r"\b(.*?)(?::=|\n\s*\|)", re.M | re.S)
    for text in lean_sources().values():
        m = pat.search(text)
        if m:
            return m.group(1)
    return None


def python_thread_fields() -> dict[tuple[str, str], str]:
    """config.py dataclass fields annotated with `Tid`: (class, field) -> the Lean type wanted."""
    out = {}
    for name, obj in vars(config).items():
        if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == config.__name__:
            for f in dataclasses.fields(obj):
                ann = str(f.type)
                if re.search(r"\bTid\b", ann):
                    out[(name, f.name)] = "Option Tid" if ann.startswith("Optional") else "Tid"
    return out


def field_problems() -> list[str]:
    problems = []
    wanted = {**python_thread_fields(), **THREAD_FIELDS}
    for (structure, field), typ in sorted(wanted.items()):
        if (structure, field) in OTHER_SHAPE:
            continue
        fields = lean_fields(structure)
        lean = "serial" if field == "serial" else re.sub(r"_(\w)", lambda m: m.group(1).upper(), field)
        if fields.get(lean) != typ:
            problems.append(f"{structure}.{lean} is `{fields.get(lean)}` in SerqLang, not `{typ}`")
    return problems


def function_problems() -> list[str]:
    problems = []
    for py, lean in rows(SPEC_MAP.read_text()):
        mod, _, attr = py.partition(".")
        obj = importlib.import_module(f"serq_spec.{mod}")
        for a in attr.split("."):
            obj = getattr(obj, a)
        if not inspect.isfunction(obj) or py in SESSION_ONLY:
            continue
        anns = [str(p.annotation) for p in inspect.signature(obj).parameters.values()]
        if not any(re.search(r"\b(Session|Tid)\b", a) for a in anns):
            continue
        binders = lean_binders(lean)
        if binders is None:
            problems.append(f"{lean} (for {py}): no `def` found in SerqLang")
        elif not re.search(r"\b(Tid|Session)\b", binders):
            problems.append(f"{lean} (for {py}) takes no thread: {' '.join(binders.split())[:100]}")
    return problems


def test_the_lean_fields_that_hold_a_thread_are_tids():
    assert python_thread_fields(), "config.py annotates no field with Tid: the check would be empty"
    assert not field_problems()


def test_the_lean_functions_of_thread_functions_take_a_thread():
    assert not function_problems()


@pytest.mark.parametrize("path, old, new, found", [
    ("SerqLang/Pool.lean", "  holders : List Tid := []", "  holders : List Nat := []", "PoolState.holders"),
    ("SerqLang/Pool.lean", "  owner : Tid\n  size : Rat", "  owner : Int\n  size : Rat", "Entry.owner"),
    ("SerqLang/Holds.lean", "def releaseHold (serial : Tid)", "def releaseHold (serial : Nat)", "releaseHold"),
    ("SerqLang/Growth.lean", "def preempt (v : Tid)", "def preempt (v : Nat)", "preempt"),
])
def test_seeded_faults_are_caught(monkeypatch, path, old, new, found):
    """The keys as they were before this mirror followed serq_spec: each is reported."""
    real = lean_sources()
    target = REPO / path
    assert old in real[target]
    seeded = {**real, target: real[target].replace(old, new, 1)}
    monkeypatch.setattr(sys.modules[__name__], "lean_sources", lambda: seeded)
    assert any(found in p for p in field_problems() + function_problems())

"""The field names SerqLang's JSON codecs read and write, checked against JSON that the front-end
and serq_spec really produce (no Lean toolchain is needed: the names are read from the Lean text).

SerqLang cannot be compiled here, so nothing else would notice a field the front-end or serq_spec
starts to emit that the Lean codecs ignore. Three documents are checked:

* the IR (`SerqLang/Ir.lean`): every object key of the IR of the spec vectors, the examples and
  the lockstep programs must be a name Ir.lean reads (`field`/`fieldOpt`/`getOpt`/`get`);
* the Config (`config.py` `Config.to_json`, `SerqLang/Json.lean`): per kind of object (a pool, a
  hold, a job, …) the keys serq_spec writes must be the keys the Lean decoder of that object reads
  and the keys the Lean encoder of that object writes, both ways (a stale Lean key fails too);
* the state line (`trace.state_line`, `SerqLang/Step.lean`): per kind of object, every key
  serq_spec prints must be written by the Lean function that prints that object.

A new kind of object (a path not in the maps below) fails, naming the path.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("serq_spec.step")

from serq.frontend import compile_source, load_program
from serq_spec.program import Program
from serq_spec.sample import sample
from serq_spec.step import run
from serq_spec.trace import state_line
from serq_spec.workload import Workload
from test_lockstep_constructs import CASES

REPO = Path(__file__).resolve().parents[1]
LEAN = REPO / "SerqLang"

# IR keys SerqLang does not read, on purpose: the front-end's parameter table, whose values are
# already substituted into the expressions (serq_spec reads it only to write a sampled sessions
# file, sample.py). Its own keys are data (parameter names), not fields.
IR_IGNORED = {"inputs"}
IR_DATA_MAPS = {".inputs"}

# Config.to_json object path -> (the Lean decoder in Json.lean's Decode, the Lean encoder)
CONFIG_OBJECTS = {
    "": ("config", "Config.toJson"),
    ".counters": ("counters", "Counters.toJson"),
    ".pools[]": ("pool", "PoolState.toJson"),
    ".pools[].content": ("contentState", "Content.CState.toJson"),
    ".sessions[]": ("session", "Session.toJson"),
    ".sessions[].holds[]": ("hold", "HoldState.toJson"),
    ".pools[].leases[][]": ("hold", "HoldState.toJson"),   # a lease's part: [serial, HOLD, ends_at]
    ".sessions[].request": ("request", "Request.toJson"),
    ".sessions[].job": ("job", "Job.toJson"),
    ".branches[]": ("session", "Session.toJson"),   # docs/language.md §11.13
    ".branches[].job": ("job", "Job.toJson"),
    ".branches[].holds[]": ("hold", "HoldState.toJson"),   # a sub-agent's holds (§11.13)
    ".branches[].request": ("request", "Request.toJson"),
    ".stages[]": ("stage", "StageState.toJson"),
    ".stages[].jobs[]": ("job", "Job.toJson"),
    ".stages[].waiting[]": ("job", "Job.toJson"),
    ".stages[].iteration": ("iteration", "Iteration.toJson"),
    ".stages[].est": ("estimates", "Estimates.toJson"),   # docs/spec.md "Online estimates"
}
# Config objects keyed by data: a session's draw cursors (`init`, `session`, `turn:k`), which
# Decode.cursors reads by probing exactly those keys.
CONFIG_DATA_MAPS = {".sessions[].cursors": re.compile(r"init|session|turn:\d+"),
                    ".branches[].cursors": re.compile(r"init|session|turn:\d+")}

# state-line object path -> the Lean functions (file, def) that print it (an iteration record is
# built when the iteration starts, engine.py `start_iteration`)
LINE_OBJECTS = {
    "": (("Step.lean", "stateLine"),),
    ".event": (("Step.lean", "eventJson"),),
    ".pools[]": (("Step.lean", "poolJson"), ("Step.lean", "contentJson")),
    ".stages[]": (("Step.lean", "stageJson"),),
    ".stages[].residents[]": (("Step.lean", "stageJson"),),
    ".stages[].iteration": (("Step.lean", "stageJson"),),
    ".records": (("Step.lean", "recordsJson"),),
    ".records.iterations[]": (("Engine.lean", "startIteration"),),
}

READ = re.compile(r'\b(?:field|fieldOpt|getOpt|get)\s+\w+\s+"([^"]+)"')
# Ir.lean's `kind j KEY` reads KEY (`"kind"` when no key is given: its default argument)
KIND_READ = re.compile(r'\bkind\s+\w+\s+"([^"]+)"')
KIND_DEFAULT = re.compile(r'\(\s*←\s*kind\s+\w+\s*\)')
WRITTEN = re.compile(r'\(\s*"([^"]+)"\s*,')


def lean_text(name: str) -> str:
    return (LEAN / name).read_text()


def lean_def(text: str, name: str) -> str:
    """The text of `def NAME` up to the next top-level declaration or doc comment."""
    m = re.search(rf"^(?:partial\s+)?def\s+{re.escape(name)}\b", text, re.M)
    assert m, f"SerqLang declares no def {name}"
    end = re.compile(r"^(?:/--|@\[|(?:private\s+|partial\s+)*(?:def|theorem|structure|inductive|abbrev|instance)\s|end\s|namespace\s)", re.M)
    n = end.search(text, m.end())
    return text[m.start():n.start() if n else len(text)]


def decode_section(text: str) -> str:
    a = text.index("namespace Decode")
    return text[a:text.index("end Decode", a)]


def object_keys(doc, path: str = "", out: dict | None = None, data_maps=()) -> dict:
    """path -> the set of keys of the objects at that path (`[]` for a list element)."""
    out = {} if out is None else out
    if isinstance(doc, dict):
        out.setdefault(path, set()).update(doc)
        if path in data_maps:   # keys that are data: recorded, their values not walked
            return out
        for k, v in doc.items():
            object_keys(v, path + "." + k, out, data_maps)
    elif isinstance(doc, list):
        for v in doc:
            object_keys(v, path + "[]", out, data_maps)
    return out


def merge(into: dict, more: dict) -> None:
    for k, v in more.items():
        into.setdefault(k, set()).update(v)


def programs() -> list[tuple[str, dict, dict]]:
    """(name, IR, sessions file) of every program the check runs: the spec vectors with their
    sessions files, the lockstep construct programs with a sampled one."""
    out = []
    for d in sorted((REPO / "vectors" / "spec").iterdir()):
        if (d / "program.sq").exists():
            out.append((d.name, load_program(str(d / "program.sq"), {}),
                        json.loads((d / "sessions.json").read_text())))
    for name, (text, n) in sorted(CASES.items()):
        ir = compile_source(text, "t.sq", {})
        out.append((name, ir, sample(ir, 0, n, "t.sq")))
    return out


@pytest.fixture(scope="module")
def observed():
    """The keys serq_spec writes: IR, Config (every step) and state line (every step)."""
    ir_keys, cfg_keys, line_keys, kind_keys = {}, {}, {}, {}
    for name, ir, sessions in programs():
        merge(ir_keys, object_keys(ir, data_maps=IR_DATA_MAPS))
        prog = Program(ir, name, workload=Workload.replay(sessions))

        def on_step(cfg, rec, k):
            merge(cfg_keys, object_keys(cfg.to_json(), data_maps=set(CONFIG_DATA_MAPS)))
            line = state_line(cfg, rec, k)
            merge(line_keys, object_keys(line))
            for st in line["stages"]:
                kind_keys.setdefault(st["kind"], set()).update(st)
        run(prog, on_step=on_step, check=False)
    for d in sorted((REPO / "examples").rglob("*.sq")):
        merge(ir_keys, object_keys(load_program(str(d), {}), data_maps=IR_DATA_MAPS))
    return ir_keys, cfg_keys, line_keys, kind_keys


def ir_problems(ir_keys: dict, ir_lean: str) -> list[str]:
    read = set(READ.findall(ir_lean)) | set(KIND_READ.findall(ir_lean))
    if KIND_DEFAULT.search(ir_lean):
        read.add("kind")
    fields = _by_key({p: ks for p, ks in ir_keys.items() if p not in IR_DATA_MAPS})
    return [f"IR key {k!r} (at {sorted(paths)[0] or 'top level'}) is read nowhere in SerqLang/Ir.lean"
            for k, paths in sorted(fields.items()) if k not in read and k not in IR_IGNORED]


def _by_key(keys_at: dict) -> dict:
    out = {}
    for path, keys in keys_at.items():
        for k in keys:
            out.setdefault(k, set()).add(path)
    return out


def config_problems(cfg_keys: dict, json_lean: str) -> list[str]:
    problems = []
    decode = decode_section(json_lean)
    # a decoder serving several paths (a job on `jobs` and on `waiting`) may read a key that only
    # some of them carry: its reads are checked against the union
    seen_by = {}
    for path, keys in cfg_keys.items():
        if path in CONFIG_OBJECTS:
            seen_by.setdefault(CONFIG_OBJECTS[path], set()).update(keys)
    for path, keys in sorted(cfg_keys.items()):
        if path in CONFIG_DATA_MAPS:
            problems += [f"Config {path}: key {k!r} is not one Decode.cursors probes"
                         for k in sorted(keys) if not CONFIG_DATA_MAPS[path].fullmatch(k)]
            continue
        if path not in CONFIG_OBJECTS:
            problems.append(f"Config object at {path!r} (keys {sorted(keys)}) has no SerqLang decoder/encoder")
            continue
        dec, enc = CONFIG_OBJECTS[path]
        read = set(READ.findall(lean_def(decode, dec)))
        written = set(WRITTEN.findall(lean_def(json_lean, enc)))
        problems += [f"Config {path}: key {k!r} is not read by Decode.{dec}" for k in sorted(keys - read)]
        problems += [f"Config {path}: key {k!r} is not written by {enc}" for k in sorted(keys - written)]
        problems += [f"Config {path}: Decode.{dec} reads {k!r}, which config.py never wrote"
                     for k in sorted(read - seen_by[dec, enc])]
        problems += [f"Config {path}: {enc} writes {k!r}, which config.py never wrote"
                     for k in sorted(written - seen_by[dec, enc])]
    return problems


def line_problems(line_keys: dict, sources: dict) -> list[str]:
    """`sources`: Lean file name -> its text."""
    problems = []
    for path, keys in sorted(line_keys.items()):
        if path not in LINE_OBJECTS:
            problems.append(f"state-line object at {path!r} (keys {sorted(keys)}) is printed by no mapped SerqLang function")
            continue
        written = set()
        for file, fn in LINE_OBJECTS[path]:
            written |= set(WRITTEN.findall(lean_def(sources[file], fn)))
        names = "/".join(fn for _, fn in LINE_OBJECTS[path])
        problems += [f"state line {path}: key {k!r} is not written by {names}" for k in sorted(keys - written)]
    return problems


def stage_kind_problems(kind_keys: dict, step_lean: str) -> list[str]:
    """Per stage kind, the state-line keys serq_spec prints for it against those the arm of
    `stageJson`'s `match d.kind with` for that kind writes — itself or through a `let` of the
    lines before the match that the arm uses (`base`, `estKey`). The union over kinds that
    `line_problems` checks cannot see a key one kind's arm forgets (an engine's `est`)."""
    text = lean_def(step_lean, "stageJson")
    head, _, arms = text.partition("match d.kind with")
    lets = {m.group(1): m.group(0) for m in re.finditer(r"^  let (\w+)[^\n]*(?:\n(?!  \S)[^\n]*)*", head, re.M)}
    problems = []
    for kind, keys in sorted(kind_keys.items()):
        m = re.search(rf"^  \| \.{kind}\b.*?(?=^  \| \.|\Z)", arms, re.M | re.S)
        if m is None:
            problems.append(f"stageJson has no arm for stage kind {kind!r}")
            continue
        arm = m.group(0)
        used = "".join(body for name, body in lets.items() if re.search(rf"\b{name}\b", arm))
        written = set(WRITTEN.findall(arm + used))
        problems += [f"state line, a {kind} stage: key {k!r} is not written by stageJson's .{kind} arm"
                     for k in sorted(keys - written)]
    return problems


def line_sources() -> dict:
    return {f: lean_text(f) for f in {f for fns in LINE_OBJECTS.values() for f, _ in fns}}


def test_ir_fields_are_read(observed):
    ir_keys, _, _, _ = observed
    for key in ("content", "prefixes", "share", "reserve_held", "bindings", "schedule"):
        assert key in _by_key(ir_keys), f"the programs no longer exercise the IR key {key}"
    problems = ir_problems(ir_keys, lean_text("Ir.lean"))
    assert not problems, "\n".join(problems)


def test_config_fields_match(observed):
    _, cfg_keys, _, _ = observed
    # what the check must see at least once (else a program is missing from `programs()`)
    for path, key in ((".pools[].content", "free_queue"), (".pools[].content", "idmap"),
                      (".sessions[].holds[]", "reserved"), (".sessions[].holds[]", "blocks"),
                      (".sessions[]", "growth"), (".pools[]", "evicted_units"),
                      (".stages[]", "due"), (".stages[].jobs[]", "pending")):
        assert key in cfg_keys.get(path, set()), f"no run wrote {path}.{key}"
    problems = config_problems(cfg_keys, lean_text("Json.lean"))
    assert not problems, "\n".join(problems)


def test_state_line_fields_are_written(observed):
    _, _, line_keys, _ = observed
    for key in ("free_queue", "blocks", "idmap", "held", "used", "cached"):
        assert key in line_keys.get(".pools[]", set()), f"no run printed the pool key {key}"
    for path, key in ((".stages[]", "pending"), (".stages[]", "due"), (".stages[].residents[]", "pending")):
        assert key in line_keys.get(path, set()), f"no run printed {path}.{key} (a lag 1 engine)"
    problems = line_problems(line_keys, line_sources())
    assert not problems, "\n".join(problems)


def test_seeded_faults_are_caught(observed):
    """A field the Lean stops reading or writing, and a new front-end field, are reported."""
    ir_keys, cfg_keys, line_keys, kind_keys = observed
    ir_lean = lean_text("Ir.lean")
    assert any("'share'" in p for p in ir_problems(ir_keys, ir_lean.replace('"share"', '"shared_"')))
    new_ir = {k: set(v) for k, v in ir_keys.items()}
    new_ir.setdefault(".pools[]", set()).add("future_field")
    assert any("'future_field'" in p for p in ir_problems(new_ir, ir_lean))

    json_lean = lean_text("Json.lean")
    dec = decode_section(json_lean)
    faulty = json_lean.replace(dec, dec.replace('"free_queue"', '"freeQueue"'))
    assert any("'free_queue' is not read by Decode.contentState" in p for p in config_problems(cfg_keys, faulty))
    faulty = json_lean.replace('("evicted_units", CJ.amt p.evictedUnits)', '("evicted", CJ.amt p.evictedUnits)')
    assert faulty != json_lean
    probs = config_problems(cfg_keys, faulty)
    assert any("'evicted_units' is not written by PoolState.toJson" in p for p in probs)
    assert any("writes 'evicted'" in p for p in probs)
    new_cfg = {k: set(v) for k, v in cfg_keys.items()}
    new_cfg[".stages[].lag"] = {"pending"}
    assert any("'.stages[].lag'" in p for p in config_problems(new_cfg, json_lean))

    sources = line_sources()
    faulty = dict(sources, **{"Step.lean": sources["Step.lean"].replace('("held", .arr held)', '("holds", .arr held)')})
    assert faulty != sources
    assert any("'held'" in p for p in line_problems(line_keys, faulty))
    new_line = {k: set(v) for k, v in line_keys.items()}
    new_line[".stages[]"] = new_line[".stages[]"] | {"lag"}
    assert any("'lag' is not written by stageJson" in p for p in line_problems(new_line, sources))
    # an engine's estimates left out of the step arm (as before the leanaudit fix)
    step = sources["Step.lean"]
    faulty = step.replace("++ lagKeys ++ estKey)", "++ lagKeys)")
    assert faulty != step
    assert any("a step stage: key 'est'" in p for p in stage_kind_problems(kind_keys, faulty))


def test_state_line_fields_are_written_per_stage_kind(observed):
    _, _, _, kind_keys = observed
    assert {"step", "fifo", "delay", "ps"} <= set(kind_keys), "the programs no longer print every stage kind"
    assert "est" in kind_keys["step"], "no run printed an engine's estimates (vector engine_estimates)"
    problems = stage_kind_problems(kind_keys, lean_text("Step.lean"))
    assert not problems, "\n".join(problems)

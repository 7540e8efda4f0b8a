"""The Lean backend (python/serq_lean): clear failures without a library, and — where a built
library is available (never in the workplace these sources were written in) — the spec vectors.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import serq_lean
from serq_lean import LeanBackend, LeanUnavailable, available

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A clean loader state, no SERQ_* settings, no default library, a private shim cache."""
    for var in ("SERQ_LEAN_LIB", "SERQ_LEAN_PREFIX", "SERQ_LEAN_INIT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SERQ_LEAN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(serq_lean, "DEFAULT_LIB", tmp_path / "no-build" / "libserqlang.so")
    monkeypatch.setattr(serq_lean, "_loaded", None)
    monkeypatch.setattr(serq_lean, "_failure", None)
    return tmp_path


def fake_elf(path: Path, names: list[str]) -> Path:
    """A file that starts like an ELF object and carries the given symbol names as strings."""
    path.write_bytes(b"\x7fELF" + b"\0" * 60 + b"\0".join(n.encode() for n in names) + b"\0")
    return path


def test_unavailable_without_library_says_how_to_build(fresh):
    ok, reason = available()
    assert not ok
    assert "SERQ_LEAN_LIB" in reason and "lake build" in reason


def test_backend_raises_clear_error_not_traceback(fresh):
    with pytest.raises(LeanUnavailable) as e:
        LeanBackend()
    assert "lake build" in str(e.value)


def test_missing_file(fresh, monkeypatch):
    monkeypatch.setenv("SERQ_LEAN_LIB", str(fresh / "nowhere" / "libserqlang.so"))
    ok, reason = available()
    assert not ok
    assert "SERQ_LEAN_LIB=" in reason and "no such file" in reason and "lake build" in reason


def test_directory_is_refused(fresh, monkeypatch):
    monkeypatch.setenv("SERQ_LEAN_LIB", str(fresh))
    ok, reason = available()
    assert not ok and "not a file" in reason


def test_bogus_file(fresh, monkeypatch):
    bogus = fresh / "libserqlang.so"
    bogus.write_text("this is not a library\n")
    monkeypatch.setenv("SERQ_LEAN_LIB", str(bogus))
    ok, reason = available()
    assert not ok
    assert "not a shared library" in reason and "lake build" in reason


def test_library_without_initializer_lists_what_it_found(fresh, monkeypatch):
    lib = fake_elf(fresh / "libother.so", ["initialize_other_Thing", "initialize_Init", "lean_mk_string"])
    monkeypatch.setenv("SERQ_LEAN_LIB", str(lib))
    ok, reason = available()
    assert not ok
    assert "initialize_serq_SerqLang" in reason
    assert "initialize_Init, initialize_other_Thing" in reason
    assert "SERQ_LEAN_INIT" in reason


def test_initializer_shapes(fresh, monkeypatch):
    new = fake_elf(fresh / "new.so", ["initialize_serq_SerqLang", "initialize_Init"])
    old = fake_elf(fresh / "old.so", ["initialize_SerqLang"])
    assert serq_lean.initializer(new) == ("initialize_serq_SerqLang", 1)
    assert serq_lean.initializer(old) == ("initialize_SerqLang", 2)
    monkeypatch.setenv("SERQ_LEAN_INIT", "initialize_custom_SerqLang:2")
    assert serq_lean.initializer(old) == ("initialize_custom_SerqLang", 2)
    monkeypatch.setenv("SERQ_LEAN_INIT", "initialize_custom_SerqLang")
    with pytest.raises(LeanUnavailable, match="NAME:1 or NAME:2"):
        serq_lean.initializer(old)


def test_initializer_from_generated_c(fresh):
    build = fresh / ".lake" / "build"
    (build / "lib").mkdir(parents=True)
    (build / "ir").mkdir(parents=True)
    lib = fake_elf(build / "lib" / "libserqlang.so", ["initialize_serq_SerqLang"])
    (build / "ir" / "SerqLang.c").write_text(
        "LEAN_EXPORT lean_object* initialize_SerqLang(uint8_t builtin, lean_object* w) {\n")
    assert serq_lean.initializer(lib) == ("initialize_SerqLang", 2)
    (build / "ir" / "SerqLang.c").write_text(
        "LEAN_EXPORT lean_object* initialize_serq_SerqLang(uint8_t builtin) {\n")
    assert serq_lean.initializer(lib) == ("initialize_serq_SerqLang", 1)


@pytest.mark.skipif(shutil.which("lean") is not None, reason="a Lean toolchain is on PATH")
def test_library_found_but_no_toolchain(fresh, monkeypatch):
    lib = fake_elf(fresh / "libserqlang.so", ["initialize_serq_SerqLang"])
    monkeypatch.setenv("SERQ_LEAN_LIB", str(lib))
    ok, reason = available()
    assert not ok
    assert "no Lean toolchain" in reason and "SERQ_LEAN_PREFIX" in reason and "lake build" in reason


def test_prefix_without_headers(fresh, monkeypatch):
    lib = fake_elf(fresh / "libserqlang.so", ["initialize_serq_SerqLang"])
    monkeypatch.setenv("SERQ_LEAN_LIB", str(lib))
    monkeypatch.setenv("SERQ_LEAN_PREFIX", str(fresh / "toolchain"))
    ok, reason = available()
    assert not ok and "include/lean/lean.h" in reason


def test_build_script_fails_cleanly(fresh, monkeypatch):
    """`python -m serq_lean.build` without a toolchain: one line on stderr, exit 1, no traceback."""
    if shutil.which("lean"):
        pytest.skip("a Lean toolchain is on PATH")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("SERQ_LEAN")}
    env["PYTHONPATH"] = str(REPO / "python")
    r = subprocess.run([__import__("sys").executable, "-m", "serq_lean.build"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "lake build" in r.stderr


# -- with a built library ----------------------------------------------------------------------

VECTOR_ROOT = REPO / "vectors" / "spec"


def spec_vectors() -> list[Path]:
    if not VECTOR_ROOT.is_dir():
        return []
    return sorted(p for p in VECTOR_ROOT.iterdir() if (p / "program.sq").exists() and (p / "sessions.json").exists())


@pytest.mark.parametrize("vector", [p.name for p in spec_vectors()] or ["(none)"])
def test_spec_vectors_lockstep_through_lean(vector):
    """Every docs/state.md line of the Lean step equals serq_spec's, step by step."""
    ok, reason = available()
    if not ok:
        pytest.skip(f"Lean backend not available: {reason}")
    if vector == "(none)":
        pytest.skip("no spec vectors committed under vectors/spec/")
    from serq.frontend import load_program
    from serq.wire import canonical_json
    from serq_spec.program import Program
    from serq_spec.step import run
    from serq_spec.trace import state_line
    from serq_spec.workload import Workload

    d = VECTOR_ROOT / vector
    ir = load_program(str(d / "program.sq"), {})
    sessions = json.loads((d / "sessions.json").read_text())
    prog = Program(ir, "program.sq")
    prog.workload_data = Workload.replay(sessions)
    want: list[str] = []
    run(prog, on_step=lambda c, r, k: want.append(canonical_json(state_line(c, r, k))), check=False)

    lean = LeanBackend()
    first = json.loads(lean.init(json.dumps(ir), json.dumps(sessions)))
    assert "error" not in first, first.get("error")
    got = [canonical_json(first["line"])]
    answer = json.loads(lean.run(json.dumps(first["state"]), len(want) + 1))
    assert "error" not in answer, answer.get("error")
    got += [canonical_json(line) for line in answer["lines"]]
    from serq_drt.compare import EXACT, first_divergence

    # both sides print canonical wire lines: the harness's exact rule, step by step
    d = first_divergence([json.loads(w) for w in want], [json.loads(g) for g in got], EXACT)
    assert d is None, f"{vector}: step {d[0]}: {d[1].path}: spec {d[1].a!r} vs lean {d[1].b!r}"


# -- the shim's plumbing, against a stand-in runtime --------------------------------------------
#
# No Lean toolchain can be installed where these sources were written, so the real library
# cannot be built. This test builds a *stand-in*: a minimal lean.h declaring exactly what the
# shim uses, a mock libleanshared.so that counts live objects, and a mock libserqlang.so that
# exports initialize_serq_SerqLang / serq_init / serq_step / serq_run with Lean's ownership
# conventions (arguments consumed, result owned by the caller). It checks the cffi API-mode
# build, the preload/dlopen/initializer order, the string round trip and that no object leaks
# or is freed twice. It says nothing about SerqLang itself.

MOCK_LEAN_H = r"""
#pragma once
#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
typedef struct lean_object { int rc; int tag; char *data; } lean_object;
typedef lean_object *lean_obj_arg;
typedef lean_object *b_lean_obj_arg;
typedef lean_object *lean_obj_res;
lean_object *lean_mk_string(const char *s);
void mock_free(lean_object *o);
void lean_io_result_show_error(b_lean_obj_arg r);
void lean_io_mark_end_initialization(void);
void lean_set_exit_on_panic(bool flag);
static inline lean_object *lean_box(size_t n) { return (lean_object *)((n << 1) | 1); }
static inline size_t lean_unbox(lean_object *o) { return (size_t)o >> 1; }
static inline bool lean_is_scalar(lean_object *o) { return ((size_t)o & 1) == 1; }
static inline const char *lean_string_cstr(b_lean_obj_arg o) { return o->data; }
static inline void lean_dec_ref(lean_object *o) { if (--o->rc == 0) mock_free(o); }
static inline void lean_dec(lean_object *o) { if (!lean_is_scalar(o)) lean_dec_ref(o); }
static inline lean_object *lean_io_mk_world(void) { return lean_box(0); }
static inline bool lean_io_result_is_ok(b_lean_obj_arg r) { return r->tag == 0; }
static inline lean_obj_res lean_usize_to_nat(size_t n) { return lean_box(n); }
"""

MOCK_RUNTIME_C = r"""
#include <lean/lean.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int mock_live = 0, mock_initialized = 0, mock_ended = 0, mock_exit_on_panic = 0;
lean_object *lean_mk_string(const char *s) {
  lean_object *o = malloc(sizeof *o); o->rc = 1; o->tag = 249; o->data = strdup(s); mock_live++; return o;
}
lean_object *mock_io_ok(void) {
  lean_object *o = malloc(sizeof *o); o->rc = 1; o->tag = 0; o->data = NULL; mock_live++; return o;
}
void mock_free(lean_object *o) {
  if (o->rc != 0) { fprintf(stderr, "double free\n"); abort(); }
  free(o->data); free(o); mock_live--;
}
void lean_initialize(void) { mock_initialized++; }
void lean_io_result_show_error(b_lean_obj_arg r) { (void)r; fprintf(stderr, "mock error\n"); }
void lean_io_mark_end_initialization(void) { mock_ended++; }
void lean_set_exit_on_panic(bool flag) { mock_exit_on_panic = flag; }
"""

MOCK_SERQLANG_C = r"""
#include <lean/lean.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern int mock_initialized;
lean_object *mock_io_ok(void);
static int module_ready = 0;
lean_object *initialize_serq_SerqLang(uint8_t builtin) {
  if (!mock_initialized || builtin != 1) abort();   /* the runtime first, builtin = 1 */
  module_ready = 1; return mock_io_ok();
}
static lean_object *answer(const char *a, const char *b, size_t k) {
  if (!module_ready) abort();
  size_t n = strlen(a) + strlen(b) + 64; char *buf = malloc(n);
  snprintf(buf, n, "{\"a\":%s,\"b\":\"%s\",\"k\":%zu}", a, b, k);
  lean_object *o = lean_mk_string(buf); free(buf); return o;
}
lean_object *serq_step(lean_object *c) { lean_object *r = answer(lean_string_cstr(c), "step", 0); lean_dec(c); return r; }
lean_object *serq_init(lean_object *i, lean_object *s) {
  lean_object *r = answer(lean_string_cstr(i), lean_string_cstr(s), 0); lean_dec(i); lean_dec(s); return r;
}
lean_object *serq_run(lean_object *c, lean_object *k) {
  lean_object *r = answer(lean_string_cstr(c), "run", lean_unbox(k)); lean_dec(c); lean_dec(k); return r;
}
"""

DRIVER = r"""
import ctypes, json, sys
import serq_lean
ok, reason = serq_lean.available()
assert ok, reason
lean = serq_lean.LeanBackend()
assert json.loads(lean.step('{"x":1}')) == {"a": {"x": 1}, "b": "step", "k": 0}
assert json.loads(lean.init('[1,2]', 'sess')) == {"a": [1, 2], "b": "sess", "k": 0}
assert json.loads(lean.run('"é"', 7)) == {"a": "é", "b": "run", "k": 7}
for _ in range(200):
    lean.step('{"y":"' + "z" * 1000 + '"}')
rt = ctypes.CDLL(sys.argv[1])
assert ctypes.c_int.in_dll(rt, "mock_live").value == 0, "leaked or over-freed Lean objects"
assert ctypes.c_int.in_dll(rt, "mock_initialized").value == 1
assert ctypes.c_int.in_dll(rt, "mock_ended").value == 1
assert ctypes.c_int.in_dll(rt, "mock_exit_on_panic").value == 1
print("mock-ok")
"""


def test_shim_plumbing_with_a_stand_in_runtime(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    pytest.importorskip("cffi")
    prefix = tmp_path / "prefix"
    (prefix / "include" / "lean").mkdir(parents=True)
    (prefix / "lib" / "lean").mkdir(parents=True)
    (prefix / "include" / "lean" / "lean.h").write_text(MOCK_LEAN_H)
    (tmp_path / "rt.c").write_text(MOCK_RUNTIME_C)
    (tmp_path / "sq.c").write_text(MOCK_SERQLANG_C)
    runtime = prefix / "lib" / "lean" / "libleanshared.so"
    lib = tmp_path / "build" / "lib" / "libserqlang.so"
    lib.parent.mkdir(parents=True)
    inc = f"-I{prefix / 'include'}"
    subprocess.run([cc, "-shared", "-fPIC", inc, "-o", str(runtime), str(tmp_path / "rt.c")], check=True)
    subprocess.run([cc, "-shared", "-fPIC", inc, "-o", str(lib), str(tmp_path / "sq.c"),
                    f"-L{runtime.parent}", "-lleanshared", f"-Wl,-rpath,{runtime.parent}"], check=True)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("SERQ_LEAN")}
    env.update(SERQ_LEAN_LIB=str(lib), SERQ_LEAN_PREFIX=str(prefix),
               SERQ_LEAN_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(REPO / "python"))
    r = subprocess.run([__import__("sys").executable, "-c", DRIVER, str(runtime)], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0 and "mock-ok" in r.stdout, r.stdout + r.stderr

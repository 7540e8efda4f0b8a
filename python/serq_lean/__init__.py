"""serq_lean: the Lean backend of serq_spec — SerqLang's exported step, called through a C shim.

    ok, reason = serq_lean.available()
    lean = serq_lean.LeanBackend()          # raises LeanUnavailable (clear message) if it cannot load
    config = lean.init(ir_json, sessions_json)
    answer = lean.step(config_json)         # JSON text: {"config", "record"} or {"error"}
    answer = lean.run(config_json, k)       # up to k steps in one boundary crossing

Where things come from:
- the library: `$SERQ_LEAN_LIB` (path to libserqlang.so), else `.lake/build/lib/libserqlang.so`
  of the repository (built by `lake build`);
- the Lean headers and runtime: `$SERQ_LEAN_PREFIX`, else `lean --print-prefix` (build.py);
- the module initializer: `$SERQ_LEAN_INIT` = `NAME:ARITY` if set; else the signature written in
  the generated C (`.lake/build/ir/SerqLang.c`) when it is next to the library; else the known
  shapes `initialize_serq_SerqLang(uint8_t)` (recent releases: the package name is part of the
  symbol) and `initialize_SerqLang(uint8_t, lean_object*)` (older releases), whichever the
  library exports. If none is exported the error lists the initialize_* symbols it does have.

The Lean runtime is initialised once per process and is not thread-safe: every call goes
through one lock. These sources were written without a Lean toolchain; docs/lean.md says what
was and was not verified.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from .build import HOW_TO_BUILD, LeanUnavailable, compile_shim

__all__ = ["LeanBackend", "LeanUnavailable", "available", "find_library", "initializer"]

REPO = Path(__file__).resolve().parents[2]
DEFAULT_LIB = REPO / ".lake" / "build" / "lib" / "libserqlang.so"
KNOWN_INITIALIZERS = (("initialize_serq_SerqLang", 1), ("initialize_SerqLang", 2))
_INIT_SYMBOL = re.compile(rb"initialize_[A-Za-z0-9_]+")
_INIT_SIGNATURE = re.compile(r"lean_object\s*\*\s*(initialize_serq_SerqLang|initialize_SerqLang)"
                             r"\s*\(\s*uint8_t\s+\w+\s*(,\s*lean_object\s*\*\s*\w+\s*)?\)")

_lock = threading.Lock()
_loaded = None          # (module, library path) once initialised
_failure: str | None = None


def find_library() -> Path:
    """The SerqLang shared library to load, or LeanUnavailable saying how to build one."""
    env = os.environ.get("SERQ_LEAN_LIB")
    if env:
        path = Path(env)
        if not path.exists():
            raise LeanUnavailable(f"SERQ_LEAN_LIB={env}: no such file; {HOW_TO_BUILD}")
        if not path.is_file():
            raise LeanUnavailable(f"SERQ_LEAN_LIB={env}: not a file; {HOW_TO_BUILD}")
    else:
        path = DEFAULT_LIB
        if not path.is_file():
            raise LeanUnavailable(
                f"the SerqLang library is not built (no SERQ_LEAN_LIB, no {DEFAULT_LIB}); "
                + HOW_TO_BUILD)
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"\x7fELF" and magic[:3] != b"\xcf\xfa\xed" and magic[:4] != b"\xfe\xed\xfa\xcf":
        raise LeanUnavailable(f"{path} is not a shared library (no ELF or Mach-O header); {HOW_TO_BUILD}")
    return path


def exported_initializers(lib: Path) -> list[str]:
    """The `initialize_*` names in the library's symbol string table (sorted, unique)."""
    data = lib.read_bytes()
    return sorted({m.group(0).decode() for m in _INIT_SYMBOL.finditer(data)})


def initializer(lib: Path) -> tuple[str, int]:
    """The root module initializer's name and number of arguments (1 or 2)."""
    env = os.environ.get("SERQ_LEAN_INIT")
    if env:
        name, _, arity = env.partition(":")
        if arity not in ("1", "2") or not name:
            raise LeanUnavailable(f"SERQ_LEAN_INIT={env}: expected NAME:1 or NAME:2")
        return name, int(arity)
    generated = lib.parent.parent / "ir" / "SerqLang.c"
    if generated.is_file():
        m = _INIT_SIGNATURE.search(generated.read_text(errors="replace"))
        if m:
            return m.group(1), 2 if m.group(2) else 1
    found = exported_initializers(lib)
    for name, arity in KNOWN_INITIALIZERS:
        if name in found:
            return name, arity
    shown = ", ".join(found[:20]) if found else "none"
    raise LeanUnavailable(
        f"{lib} exports neither initialize_serq_SerqLang nor initialize_SerqLang "
        f"(initialize_* symbols found: {shown}); is it the library built from SerqLang.lean? "
        "Set SERQ_LEAN_INIT=NAME:ARITY to name the initializer explicitly. " + HOW_TO_BUILD)


def _load():
    """Load and initialise once per process (under the lock); later calls reuse or re-raise."""
    global _loaded, _failure
    if _loaded is not None:
        return _loaded
    if _failure is not None:
        raise LeanUnavailable(_failure)
    lib = find_library()
    name, arity = initializer(lib)
    mod, runtime = compile_shim()
    for path in runtime:
        if mod.lib.serq_preload(path.encode()) != 0:
            raise LeanUnavailable(mod.ffi.string(mod.lib.serq_last_error()).decode())
    if mod.lib.serq_load(str(lib).encode(), name.encode(), arity) != 0:
        msg = mod.ffi.string(mod.lib.serq_last_error()).decode()
        if mod.lib.serq_state() == -1:
            _failure = f"{lib}: {msg}"
        raise LeanUnavailable(f"{lib}: {msg}")
    _loaded = (mod, lib)
    return _loaded


def available() -> tuple[bool, str]:
    """(True, library path) if the Lean backend loads here, else (False, why and how to build)."""
    with _lock:
        try:
            _, lib = _load()
        except LeanUnavailable as e:
            return False, str(e)
        return True, str(lib)


class LeanBackend:
    """Calls into SerqLang. Inputs and outputs are JSON text (docs/state.md, docs/lean.md)."""

    name = "lean"

    def __init__(self):
        with _lock:
            self._mod, self.library = _load()

    def _call(self, fn, *args) -> str:
        ffi = self._mod.ffi
        with _lock:
            p = fn(*args)
            if p == ffi.NULL:
                raise LeanUnavailable("the Lean runtime is not initialised")
            try:
                return ffi.string(p).decode("utf-8")
            finally:
                self._mod.lib.serq_free(p)

    def init(self, ir_json: str, sessions_json: str) -> str:
        """The initial configuration (step 0 done) for an IR and a sessions file."""
        return self._call(self._mod.lib.serq_init_c, ir_json.encode(), sessions_json.encode())

    def step(self, config_json: str) -> str:
        """One step: `{"config": …, "record": …}`, or `{"error": …}`."""
        return self._call(self._mod.lib.serq_step_c, config_json.encode())

    def run(self, config_json: str, k: int) -> str:
        """Up to k steps: `{"config": …, "records": […]}`, or `{"error": …}`."""
        if k < 0:
            raise ValueError("k must be ≥ 0")
        return self._call(self._mod.lib.serq_run_c, config_json.encode(), k)

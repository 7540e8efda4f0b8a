"""Compile the C shim with cffi (API mode) against the Lean toolchain's headers and runtime.

Usable as a script (`python -m serq_lean.build`) or through `compile_shim()`, which
`serq_lean.LeanBackend` calls on first use. Every failure raises `LeanUnavailable` with a
message that says what is missing and how to get it; nothing here prints a traceback at the
user.

Inputs, all found without guessing:
- the headers: `$SERQ_LEAN_PREFIX/include/lean/lean.h`, or the prefix printed by
  `lean --print-prefix` (elan puts `lean` on PATH);
- the runtime libraries the shim links with: the `Init_shared`, `leanshared_2`, `leanshared_1`,
  `leanshared` that exist in `<prefix>/lib/lean` (the set changed across releases; the
  reverse-ffi example of leanprover/lean4 links all four);
- a C compiler (cffi uses the one of the running Python's build configuration).

The compiled module goes to a cache directory keyed by the shim source and the prefix:
`$SERQ_LEAN_CACHE`, else `$XDG_CACHE_HOME/serq_lean`, else `~/.cache/serq_lean`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIM = HERE / "shim.c"
MODULE = "_serq_lean_shim"
RUNTIME_LIBS = ("Init_shared", "leanshared_2", "leanshared_1", "leanshared")

CDEF = """
int serq_preload(const char *path);
int serq_load(const char *lib, const char *init_name, int init_arity);
int serq_state(void);
const char *serq_last_error(void);
char *serq_init_c(const char *ir, const char *sessions);
char *serq_step_c(const char *config);
char *serq_run_c(const char *config, size_t k);
void serq_free(char *p);
"""

HOW_TO_BUILD = (
    "build the Lean library with `lake build` in the repository root (needs elan: "
    "https://github.com/leanprover/elan; the toolchain is pinned in lean-toolchain), then set "
    "SERQ_LEAN_LIB=$PWD/.lake/build/lib/libserqlang.so (see docs/lean.md)"
)


class LeanUnavailable(RuntimeError):
    """The Lean backend cannot be used here; the message says why and how to fix it."""


def lean_prefix() -> Path:
    """The toolchain prefix: `$SERQ_LEAN_PREFIX`, else `lean --print-prefix`."""
    env = os.environ.get("SERQ_LEAN_PREFIX")
    if env:
        prefix = Path(env)
        source = "SERQ_LEAN_PREFIX"
    else:
        lean = shutil.which("lean")
        if lean is None:
            raise LeanUnavailable(
                "no Lean toolchain: `lean` is not on PATH and SERQ_LEAN_PREFIX is not set; "
                "install elan, or set SERQ_LEAN_PREFIX to the output of `lean --print-prefix`; "
                + HOW_TO_BUILD)
        try:
            out = subprocess.run([lean, "--print-prefix"], capture_output=True, text=True,
                                 timeout=60, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            raise LeanUnavailable(f"`lean --print-prefix` failed ({e}); set SERQ_LEAN_PREFIX") from None
        prefix = Path(out)
        source = "`lean --print-prefix`"
    header = prefix / "include" / "lean" / "lean.h"
    if not header.is_file():
        raise LeanUnavailable(f"{source} gives {prefix}, which has no include/lean/lean.h")
    return prefix


def runtime_libs(prefix: Path) -> list[str]:
    """The Lean runtime shared libraries present in `<prefix>/lib/lean`, in link order."""
    libdir = prefix / "lib" / "lean"
    found = [name for name in RUNTIME_LIBS if (libdir / f"lib{name}.so").is_file()
             or (libdir / f"lib{name}.dylib").is_file()]
    if "leanshared" not in found:
        raise LeanUnavailable(f"no libleanshared in {libdir}: not a Lean toolchain prefix?")
    return found


def cache_dir(prefix: Path) -> Path:
    base = os.environ.get("SERQ_LEAN_CACHE")
    if base:
        root = Path(base)
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "serq_lean"
    key = hashlib.sha256(SHIM.read_bytes() + CDEF.encode() + str(prefix).encode()
                         + sys.version.encode()).hexdigest()[:16]
    return root / key


def compile_shim(prefix: Path | None = None):
    """Compile (or reuse) the shim; return the imported cffi module (`.ffi`, `.lib`)."""
    try:
        import cffi
    except ImportError:
        raise LeanUnavailable("the Lean backend needs cffi: pip install 'serq[lean]'") from None
    prefix = prefix or lean_prefix()
    libs = runtime_libs(prefix)
    libdir = prefix / "lib" / "lean"
    out = cache_dir(prefix)
    out.mkdir(parents=True, exist_ok=True)
    built = sorted(out.glob(f"{MODULE}*.so")) + sorted(out.glob(f"{MODULE}*.pyd"))
    if not built:
        ffi = cffi.FFI()
        ffi.cdef(CDEF)
        ffi.set_source(
            MODULE, SHIM.read_text(),
            include_dirs=[str(prefix / "include")],
            library_dirs=[str(libdir)],
            libraries=libs + ["dl"],
            extra_link_args=[f"-Wl,-rpath,{libdir}"],
        )
        try:
            path = ffi.compile(tmpdir=str(out), verbose=False)
        except Exception as e:  # cffi raises VerificationError, distutils/setuptools errors, OSError
            raise LeanUnavailable(f"compiling the Lean shim failed: {e}") from None
        built = [Path(path)]
    spec = importlib.util.spec_from_file_location(MODULE, built[0])
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except ImportError as e:
        raise LeanUnavailable(f"loading the compiled Lean shim failed: {e}") from None
    return mod, [str(libdir / f"lib{n}.so") for n in libs]


if __name__ == "__main__":
    try:
        mod, _ = compile_shim()
    except LeanUnavailable as e:
        print(f"serq_lean: {e}", file=sys.stderr)
        sys.exit(1)
    print(f"serq_lean: shim ready: {mod.__file__}")

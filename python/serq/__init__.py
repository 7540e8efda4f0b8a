"""serQ front-end: the language (lexer, parser, linker), its canonical IR, and the `serq` command.

The Python API (docs/api.md) is imported on first use, so that the command line does not pay for
it: `serq.load`, `serq.Program`, `serq.Result` (serq.api) and `serq.SerqError`; sweeps and
capacity searches are `serq.sweep.sweep` and `serq.capacity.capacity`.
"""

__version__ = "0.1.0"

_LAZY = {"load": "serq.api", "Program": "serq.api", "Result": "serq.api",
         "SerqError": "serq.errors"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'serq' has no attribute {name!r}")

"""The front-end's public entry points: a program (file or text) and its settings -> the IR.

    load_program(path, settings)            -> dict   (the IR of docs/ir.md)
    compile_source(text, filename, settings) -> dict

Both raise only `SerqError` (whatever the input: a missing file, a directory, bytes that are not
UTF-8, a `use` cycle, a program nested too deeply, …).
"""

from __future__ import annotations

import os
from typing import Mapping

from . import inputfile
from .errors import SerqError, deep_recursion
from .linker import Linker
from .parser import Source, decode_source, parse

__all__ = ["load_program", "compile_source", "SerqError"]


def _read(path: str, display: str, limit: int) -> str:
    """The text of a source file of at most `limit` bytes; a SerqError (without a line) when it
    cannot be read (serq.inputfile: a regular file only, within the size limit)."""
    if os.path.isdir(path):
        raise SerqError("cannot read: it is a directory", display)
    if not os.path.lexists(path) and "\0" not in path:
        raise SerqError("cannot read: no such file", display)
    try:
        raw = inputfile.read_bytes(path, limit)
    except inputfile.InputError as e:
        msg = str(e)
        if "larger than the limit" in msg:
            msg = (f"cannot read: the program's source files are larger than the limit of "
                   f"{inputfile.MAX_SOURCE_BYTES // 2**20} MiB together (docs/frontend.md \"Limits\")")
        raise SerqError(msg, display) from None
    return decode_source(raw, display)


class _Program:
    """One compilation: the files read so far (main first, each once by real path), the `use`
    chain being linked (for cycle errors), and the linker they feed."""

    def __init__(self, main_path: str, settings: Mapping[str, str] | None,
                 optional: Mapping[str, str] | None = None):
        self.main_path = main_path
        self.main_dir = os.path.dirname(os.path.abspath(main_path))
        self.files: list[str] = []
        self.by_real: dict[str, int] = {}
        self.nodes: dict[int, list] = {}
        self.linker = Linker(dict(settings or {}), self.read_use, dict(optional or {}))
        self.linking: list[int] = []
        self.linked: set[int] = set()
        self.bytes_left = inputfile.MAX_SOURCE_BYTES  # of all the program's source files together

    def read(self, path: str, display: str) -> str:
        text = _read(path, display, self.bytes_left)
        self.bytes_left -= len(text.encode("utf-8"))
        return text

    def add_source(self, path: str, display: str, text: str) -> int:
        fid = len(self.linker.sources)
        src = Source(display, text)
        src.path = os.path.abspath(path)  # type: ignore[attr-defined]
        self.linker.sources.append(src)
        rel = os.path.relpath(os.path.abspath(path), self.main_dir)
        self.files.append(rel.replace(os.sep, "/"))
        self.by_real[os.path.realpath(path)] = fid
        return fid

    def read_use(self, rel: str, from_fid: int, pos: tuple):
        """`use "rel";` in file `from_fid`: (file id, its nodes) to link, or None when it is linked already."""
        src = self.linker.sources[from_fid]
        if "\0" in rel:  # os.path and open() raise ValueError on it
            shown = rel.replace("\0", "\\0")
            raise self.linker.err(pos, f"cannot read library \"{shown}\": the path holds a NUL byte")
        path = os.path.normpath(os.path.join(os.path.dirname(src.path), rel))
        real = os.path.realpath(path)
        fid = self.by_real.get(real)
        if fid is None:
            display = os.path.normpath(os.path.join(os.path.dirname(src.name), rel))
            try:
                text = self.read(path, display)
            except SerqError as e:
                if e.line is not None:
                    raise
                raise self.linker.err(pos, f"cannot read library \"{rel}\": {e.message.replace('cannot read: ', '')}") from None
            fid = self.add_source(path, display, text)
            self.nodes[fid] = parse(text, fid, self.linker.sources[fid])
        if fid in self.linking:
            chain = [self.linker.sources[f].name for f in self.linking[self.linking.index(fid):]]
            chain.append(self.linker.sources[fid].name)
            raise self.linker.err(pos, "`use` cycle: " + " -> ".join(chain))
        if fid in self.linked:
            return None
        return fid, _Tracked(self, fid, self.nodes[fid])

    def run(self, text: str) -> dict:
        fid = self.add_source(self.main_path, self.main_path, text)
        nodes = parse(text, fid, self.linker.sources[fid])
        self.linking.append(fid)
        self.linker.link_file(nodes, fid, is_main=True)
        self.linking.pop()
        return self.linker.ir(self.files)


class _Tracked(list):
    """The nodes of a library; iterating them marks the file as being linked (for cycle errors)."""

    def __init__(self, prog: _Program, fid: int, nodes: list):
        super().__init__(nodes)
        self.prog = prog
        self.fid = fid

    def __iter__(self):
        self.prog.linking.append(self.fid)
        try:
            yield from super().__iter__()
        finally:
            self.prog.linking.pop()
            self.prog.linked.add(self.fid)


def _guard(fn, display: str):
    """Run fn with room for deep (but bounded) nesting; a program deeper still is a SerqError
    (the parser and the linker locate it where they can)."""
    try:
        with deep_recursion():
            return fn()
    except RecursionError:
        raise SerqError("the program is nested too deeply to compile", display) from None


def load_program(path: str, settings: Mapping[str, str] | None = None,
                 optional: Mapping[str, str] | None = None) -> dict:
    """The IR of the program in `path` with `--set` settings {input name: value text}.
    `optional` settings (a profile's) bind the inputs the program declares that `settings` does
    not, and are ignored for names it does not declare."""
    path = os.fspath(path)

    def go():
        prog = _Program(path, settings, optional)
        return prog.run(prog.read(path, path))

    return _guard(go, path)


def compile_source(text: str | bytes, filename: str = "<input>.sq", settings: Mapping[str, str] | None = None) -> dict:
    """Like `load_program` for a text (or raw bytes); `use` paths are relative to `filename`'s directory."""

    def go():
        t = decode_source(bytes(text), filename) if isinstance(text, (bytes, bytearray)) else text
        return _Program(filename, settings).run(t)

    return _guard(go, filename)

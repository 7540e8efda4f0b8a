"""The syntax tree the parser builds and the linker reads.

One small node type: a `kind`, a source position `pos = (file_id, line, column)` and named fields.
Expressions and statements are both `Node`s; lists of statements are plain lists.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

Pos = tuple  # (file_id, line, column), all ints, 1-based line/column


class Node:
    __slots__ = ("kind", "pos", "f")

    def __init__(self, kind: str, pos: Pos, **fields: Any):
        self.kind = kind
        self.pos = pos
        self.f = fields

    def __getattr__(self, name: str) -> Any:
        try:
            return self.f[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.f.items())
        return f"{self.kind}({inner})"

    def children(self) -> Iterator["Node"]:
        """Sub-nodes, in field order (lists flattened)."""
        for v in self.f.values():
            yield from _nodes(v)


def _nodes(v: Any) -> Iterator[Node]:
    if isinstance(v, Node):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _nodes(x)


def walk(node: Any) -> Iterator[Node]:
    """Every node under `node` (pre-order, iterative, so deep trees do not recurse)."""
    stack = list(_nodes(node))[::-1]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(list(n.children())[::-1])


def rewrite(v: Any, replace: Callable[[Node], Optional[Node]]) -> Any:
    """A copy of `v` (a node, or a list or tuple of them) in which each node for which
    `replace(node)` gives a node is that node, and every other node is copied with its fields
    rewritten the same way. The one tree walk of the front-end's rewrites (member indices, K's
    bare values, queue members), so each says only which nodes it replaces."""
    if isinstance(v, Node):
        new = replace(v)
        if new is not None:
            return new
        return Node(v.kind, v.pos, **{k: rewrite(x, replace) for k, x in v.f.items()})
    if isinstance(v, list):
        return [rewrite(x, replace) for x in v]
    if isinstance(v, tuple):
        return tuple(rewrite(x, replace) for x in v)
    return v


def substitute(v: Any, var: str, number: str) -> Any:
    """A copy of `v` (a node, or a list or tuple of them) in which every read of the name `var`
    is the number literal `number`: the body of one member of an engine array, whose member index
    `var` (`engine E[N] on D[var]`) is a constant in each copy (docs/language.md §6.1)."""
    return rewrite(v, lambda n: Node("num", n.pos, text=number) if n.kind == "name" and n.id == var else None)

"""Queues (docs/language.md §11.16): `queue NAME[N] : ROLE { … }`, lowered to the items and
statements the linker already knows.

A queue is a namespace. Its members (devices, engines, pools, stages) become ordinary items named
`Q.m`; a member of a queue array `Q[N]` becomes the array `Q.m[N]` (member m of queue Q[i] is
`Q.m[i]`). Its `let`s become constants `Q.c`, its expression `def`s definitions `Q.f`, and its
statement `def`s are its entries: definitions `Q.VERB` whose parameters are the queue's index (a
queue array), the source's members the body reads (`source.kv`), then the entry's own. A call
`Q[i].VERB (a) from S[k];` becomes the call `Q.VERB (i, S.kv[k], a);` of that definition, which
the linker expands as it expands any statement definition. An expression `def` of a queue array
takes the queue's index first only if its body reads it (a member of its own queue, `self.index`,
or an own definition that does), so `Q[i].f (a)` is `Q.f (i, a)` or `Q.f (a)`, and a definition
that reads none of these may be called where a value is one for all the queues (a pool's options).
`self.index` is the index itself. Nothing new reaches the IR: a queue program's IR is the IR of
the program spelled out by hand with these names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .ast import Node, rewrite, walk
from .errors import SerqError
from .exact import whole_in
from .inputs import brief_value

ROLES = ("gateway", "prefill", "agg", "decode", "link", "l2")
# the roles whose entries may take the KV from another queue, and the roles that KV may come from
READERS = ("decode", "agg")
SOURCES = ("prefill", "agg", "l2")
MEMBER_KINDS = ("device", "engine", "pool", "stage")
# The index of a queue array's member inside its lowered items and entries: a name no program can
# spell, so it never meets a name of the program.
SELF_INDEX = "#q"
SOURCE_PREFIX = "source."
# names a queue's body gives a meaning of its own, so nothing declared in a queue may take them
RESERVED_LOCAL = {
    "self": "`self` names a queue inside a queue's body; a member may not take it",
    "source": "`source` names a queue inside a queue's body; a member may not take it",
    "index": "`index` is the queue's own index inside its body (`self.index`); nothing declared in a queue may "
             "take it",
}
# names a queue may not take: each already means something before a `.`
RESERVED_QUEUE = {
    "self": "`self` names, inside a queue's body, that queue; a queue may not take it",
    "source": "`source` names, inside an entry, the queue it takes the KV from; a queue may not take it",
    "args": "`args` names the program's inputs (`args.number(\"NAME\", default)`); a queue may not take it",
}


@dataclass
class Entry:
    """A statement `def` of a queue: callable as `Q[i].VERB (…) [from S[k]];`."""
    name: str
    pos: tuple
    params: list
    def_name: str
    sources: list = field(default_factory=list)   # the members m of `source.m` its body reads, in order


@dataclass
class Queue:
    name: str
    pos: tuple
    size: int | None          # None: one queue; N: the queue array Q[0 … N-1]
    role: str
    members: dict = field(default_factory=dict)   # name -> (kind, pos, is_array)
    consts: dict = field(default_factory=dict)    # `let` name -> pos
    defs: dict = field(default_factory=dict)      # expression `def` name -> pos
    arity: dict = field(default_factory=dict)     # expression `def` name -> its number of parameters
    # expression `def` name -> whether its lowered definition takes the queue's index first; a
    # definition is here once lowered, so one named above its declaration is not
    reads_index: dict = field(default_factory=dict)
    entries: dict = field(default_factory=dict)   # statement `def` name -> Entry

    def local(self, name: str) -> tuple | None:
        """The position of a local name of any kind, or None."""
        if name in self.members:
            return self.members[name][1]
        if name in self.entries:
            return self.entries[name].pos
        return self.consts.get(name) or self.defs.get(name)


@dataclass
class Scope:
    """Where a node is rewritten: inside queue `queue` (None: outside every queue) and, inside one
    of its definitions, that definition's parameters and, for an entry, the entry itself."""
    queue: Queue | None = None
    params: frozenset = frozenset()
    entry: Entry | None = None
    shared: str | None = None   # in a queue array: what is one for all its queues ("a pool's options are")


class QueueLowering:
    """Rewrites `fn main`'s items one at a time, in order, so a queue is known below its declaration.

    `err(pos, msg, about)` makes a located error and `where(pos)` the text of a position,
    `const_index(node)` folds a constant index (None when it is not constant), `declare(name, pos)`
    reserves the queue's name among the program's declarations, `is_declared(name)` tells whether
    a pool, stage, engine or device has it, `dim(node, what)` reads an array size; a queue whose
    name is in `failed` has reported its error already."""

    def __init__(self, err: Callable, where: Callable, const_index: Callable, declare: Callable,
                 is_declared: Callable, dim: Callable, failed: set):
        self.err = err
        self.where = where
        self.const_index = const_index
        self.declare = declare
        self.is_declared = is_declared
        self.dim = dim
        self.failed = failed
        self.queues: dict[str, Queue] = {}

    # ------------------------------------------------------------------ items
    def lower(self, item: Node) -> list[Node]:
        """The items that stand for `item`: a queue's members and definitions, or `item` itself
        with every queue member and entry call it names rewritten."""
        if item.kind == "queue":
            return self.queue(item)
        if not any(n.kind in ("qref", "qcall", "qdefcall") for n in walk([item])):
            return [item]   # names no queue: kept as it is (no copy of a large item)
        return [self.rw(item, Scope())]

    def queue(self, qn: Node) -> list[Node]:
        """A queue declaration: its local names collected and checked (the role's rules, nothing
        bound anew), then its items lowered in their order."""
        if qn.role not in ROLES:
            raise self.err(qn.role_pos, f"unknown role `{qn.role}`: a queue is one of {', '.join(ROLES)}")
        if qn.name in RESERVED_QUEUE:
            raise self.err(qn.name_pos, RESERVED_QUEUE[qn.name])
        self.declare(qn.name, qn.name_pos)
        q = Queue(qn.name, qn.name_pos, self.dim(qn.dim, "a queue"), qn.role)
        for it in qn.items:
            name = it.name
            if it.kind == "kstep":
                raise self.err(it.pos, "a K step stage cannot be a queue's member: write the engine in S "
                                       "(`engine NAME on DEVICE { … }`, docs/language.md §16)")
            if name in RESERVED_LOCAL:
                raise self.err(it.pos, RESERVED_LOCAL[name])
            first = q.local(name)
            if first is not None:
                raise self.err(it.pos, f"`{name}` is declared twice in queue `{q.name}` (first at {self.where(first)})")
            if it.kind in MEMBER_KINDS:
                q.members[name] = (it.kind, it.pos, it.f.get("dim") is not None)
            elif it.kind == "let":
                q.consts[name] = it.pos
            elif it.stmt:
                q.entries[name] = Entry(name, it.pos, it.params, f"{q.name}.{name}")
            else:
                q.defs[name] = it.pos
                q.arity[name] = len(it.params)
        self.check_role(q, qn)
        self.check_binders(q, qn)
        out = [self.member_item(q, it) for it in qn.items]
        self.queues[q.name] = q
        return out

    def check_role(self, q: Queue, qn: Node) -> None:
        """The few rules a queue's role sets on what it holds (docs/language.md §11.16)."""
        kinds = {it.kind: it for it in reversed(qn.items)}   # the first item of each kind
        if q.role == "link":
            for k in ("device", "engine", "pool"):
                if k in kinds:
                    raise self.err(kinds[k].pos, f"a link queue is a wire: it holds stages (the copies run on "
                                                 f"them), not a {k}; declare the {k} in a prefill, decode, agg "
                                                 "or l2 queue")
            if "stage" not in kinds:
                raise self.err(qn.pos, f"link queue `{q.name}` holds no stage: declare the wire it stands for "
                                       "(`stage wire : fifo;`)")
        elif q.role == "gateway":
            for k in ("device", "engine", "pool"):
                if k in kinds:
                    raise self.err(kinds[k].pos, f"a gateway queue routes requests and holds no KV: no {k} here; "
                                                 "declare it in a prefill, decode or agg queue")
        elif q.role == "l2" and "engine" in kinds:
            raise self.err(kinds["engine"].pos, "an l2 queue is a KV tier: pools and the stages that copy to "
                                                "them, no engine; declare the engine in a prefill, decode or "
                                                "agg queue")

    def check_binders(self, q: Queue, qn: Node) -> None:
        """Inside a queue a member's name means the member, so nothing there may bind it anew (a
        parameter, an attribute set, a binding, a schedule `let`, a register, an aggregate's index);
        a member of a queue array is no array itself, and sits on a member of the same queue."""
        for it in qn.items:
            if q.size is not None and it.kind in MEMBER_KINDS and it.f.get("dim") is not None:
                raise self.err(it.pos, f"`{it.name}` is a member of the queue array `{q.name}[{q.size}]`, so it is "
                                       f"already the array `{q.name}.{it.name}[{q.size}]` (one per queue); it cannot "
                                       "be an array itself")
            if q.size is not None and it.kind in ("engine", "pool") and (it.f.get("device") or it.f.get("owner")):
                owner = it.device if it.kind == "engine" else it.owner
                opos = it.device_pos if it.kind == "engine" else it.owner_pos
                if owner not in q.members:
                    raise self.err(opos, f"`{owner}` is not a member of the queue array `{q.name}`: each queue of "
                                         f"the array needs its own, so declare `{owner}` inside the queue")
                if it.member is not None:
                    raise self.err(it.member.pos, f"`{owner}` is a member of the queue array `{q.name}`: write "
                                                  f"`on {owner}` (this queue's), without an index")
            for n in walk([it]):
                bound = [p for p, _ in n.f.get("params") or []]
                bound += [b[0] for b in n.f.get("bindings") or [] if isinstance(b, tuple)]
                if n.kind in ("set", "choose", "slet", "state"):
                    bound.append(n.name)
                if n.kind == "agg":
                    bound.append(n.var)
                for b in bound:
                    if b in RESERVED_LOCAL:   # as for a member: `def f(self) = used(self.kv);` reads two selves
                        raise self.err(n.pos, RESERVED_LOCAL[b].split("; ")[0] + "; a parameter or binding may "
                                              "not take it either")
                    if b in q.members or b in q.consts:
                        what = "a member" if b in q.members else "a constant"
                        raise self.err(n.pos, f"`{b}` is {what} of queue `{q.name}` (at {self.where(q.local(b))}); "
                                              f"inside the queue its name means the {what[2:]}, so this may not take it")

    def member_item(self, q: Queue, it: Node) -> Node:
        """One item of a queue's body, lowered: its name qualified, its body rewritten."""
        scope = Scope(q)
        if it.kind == "let":
            if q.size is not None:   # `Q.c` is one value for all the queues of the array
                scope = Scope(q, shared="a constant (`let`) is")
            return Node("let", it.pos, **{**it.f, "name": f"{q.name}.{it.name}", "expr": self.rw(it.expr, scope)})
        if it.kind == "def":
            index = [(SELF_INDEX, it.pos)] if q.size is not None else []
            if it.stmt:
                entry = q.entries[it.name]
                params = frozenset(p for p, _ in it.params)
                body = self.rw(it.body, Scope(q, params, entry))
                sources = [(SOURCE_PREFIX + m, it.pos) for m in entry.sources]
                return Node("def", it.pos, name=entry.def_name, params=index + sources + list(it.params),
                            body=body, stmt=True)
            params = frozenset(p for p, _ in it.params)
            body = self.rw(it.body, Scope(q, params))
            reads = any(n.kind == "name" and n.id == SELF_INDEX for n in walk(body))
            q.reads_index[it.name] = reads
            return Node("def", it.pos, name=f"{q.name}.{it.name}", params=(index if reads else []) + list(it.params),
                        body=body, stmt=False)
        f = dict(it.f)
        f["name"] = f"{q.name}.{it.name}"
        if q.size is not None:
            f["dim"] = Node("num", it.pos, text=str(q.size))
        if it.kind in ("device", "engine"):
            # a capacity `kv cap …;` of a queue's device or engine is the capacity of its pool `kv`
            f["items"] = [Node("cap", c.pos, **{**c.f, "name": f"{q.name}.{c.name}"})
                          if c.kind == "cap" and c.name in q.members else c for c in it.items]
        if it.kind == "engine":
            if it.device in q.members:
                f["device"] = f"{q.name}.{it.device}"
                if q.size is not None:
                    f["member"] = Node("name", it.device_pos, id=SELF_INDEX)
        if it.kind == "pool":
            if it.owner in q.members:
                f["owner"] = f"{q.name}.{it.owner}"
                if q.size is not None:
                    f["member"] = Node("name", it.owner_pos, id=SELF_INDEX)
            if it.owner_dev is not None and it.owner_dev[0] in q.members:
                f["owner_dev"] = (f"{q.name}.{it.owner_dev[0]}", it.owner_dev[1])
        if q.size is not None and it.kind != "engine":
            # a device's time functions, a pool's options, a stage's capacity: one for every queue of
            # the array (only an engine's body is copied per member, §6.1)
            scope = Scope(q, shared={"device": "a device's body is", "pool": "a pool's options are",
                                     "stage": "a stage's capacity is"}[it.kind])
        kept = {"name", "dim", "device", "member", "owner", "owner_dev"}
        return Node(it.kind, it.pos, **{k: v if k in kept else self.rw(v, scope) for k, v in f.items()})

    # ------------------------------------------------------------------ references
    def rw(self, v: Any, s: Scope) -> Any:
        """A copy of `v` (a node, a list or tuple of them) with the queue members, local names and
        entry calls it names rewritten for scope `s`."""
        return rewrite(v, lambda n: self.rw_node(n, s))

    def rw_node(self, v: Node, s: Scope) -> Node | None:
        """What node `v` becomes in scope `s`, or None where only its fields are rewritten."""
        k = v.kind
        q = s.queue
        if k == "qref":
            return self.qref(v, s)
        if k == "qcall":
            return self.qcall(v, s)
        if k == "qdefcall":
            return self.qdefcall(v, s)
        if k == "queue":   # pragma: no cover - the grammar allows a queue only as an item of `fn main`
            raise self.err(v.pos, "a queue is an item of `fn main`")
        if q is not None:
            if k == "name" and v.id not in s.params:
                if v.id in ("self", "source"):
                    raise self.err(v.pos, f"`{v.id}` names a queue; write `{v.id}.MEMBER`")
                if v.id in q.members:
                    return self.member(q, v.id, self.own_index(s, v.pos), None, v.pos, as_ref=False)
                if v.id in q.consts:
                    return Node("name", v.pos, id=f"{q.name}.{v.id}")
            if k == "ref" and v.name not in s.params and v.name in q.members:
                return self.member(q, v.name, self.own_index(s, v.pos), self.rw(v.index, s), v.pos, as_ref=True)
            if k == "indexed" and v.id not in s.params and v.id in q.members:
                return self.member(q, v.id, self.own_index(s, v.pos), self.rw(v.index, s), v.pos, as_ref=False)
            if k == "call" and v.fname in q.defs:
                return self.def_call(q, v.fname, None, v.args, v.pos, s)
            if k == "call" and v.fname in q.entries:
                raise self.err(v.pos, f"`{v.fname}` is an entry of queue `{q.name}` (a statement): call it as "
                                      f"`{v.fname}(…);`")
            if k == "callstmt" and v.fname in q.defs:
                raise self.not_a_statement(q, v.fname, v.pos, v.fname)
            if k == "callstmt" and v.fname in q.entries and v.f.get("index") is None:
                return self.entry_call(q, self.own_index(s, v.pos), q.entries[v.fname], v.args, None, v, s)
            if k == "callstmt" and v.fname in q.members:
                index = v.f.get("index")
                if q.size is not None and index is not None:
                    raise self.err(index.pos, f"`{v.fname}` is this queue's engine, no array: write `{v.fname} (…);`")
                return Node("callstmt", v.pos, **{**v.f, "fname": f"{q.name}.{v.fname}",
                                                  "index": self.own_index(s, v.pos) if q.size is not None
                                                  else self.rw(index, s), "args": self.rw(v.args, s)})
        return None

    def own_index(self, s: Scope, pos: tuple, what: str = "name one queue's own members") -> Node | None:
        """The index of the queue a body is lowered for: in a queue array, the member index of its
        lowered engines and the first parameter of its entries and of the definitions that read it."""
        q = s.queue
        if q is None or q.size is None:
            return None
        if s.shared is not None:
            raise self.err(pos, f"in the queue array `{q.name}`, {s.shared} one for all its queues, so it "
                                f"cannot {what}: write `{q.name}[k].…` for queue k")
        return Node("name", pos, id=SELF_INDEX)

    def def_call(self, q: Queue, fname: str, qindex: Node | None, args: list, pos: tuple, s: Scope) -> Node:
        """The call of queue q's expression definition `fname`: of q[qindex], or with qindex None of
        the queue whose body `s` lowers. The index goes first if the definition reads it."""
        if fname not in q.reads_index:
            raise self.err(pos, f"`{fname}` of queue `{q.name}` is defined at {self.where(q.defs[fname])}, not above "
                                "this use: a definition sees only the definitions above it (no recursion)")
        if len(args) != q.arity[fname]:
            raise self.err(pos, f"`{q.name}.{fname}` takes {q.arity[fname]} argument(s), got {len(args)}")
        lead: list = []
        if q.reads_index[fname]:
            lead = [qindex] if qindex is not None else [self.own_index(
                s, pos, f"call `{fname}`, which reads one queue's own members or `self.index`")]
        return Node("call", pos, fname=f"{q.name}.{fname}", args=lead + self.rw(args, s))

    def not_a_statement(self, q: Queue, fname: str, pos: tuple, spelled: str) -> SerqError:
        """An expression definition called as a statement (`spelled` as the call names it)."""
        return self.err(pos, f"`{fname}` is an expression definition of queue `{q.name}`, not an entry: use its "
                             f"value, e.g. `set x = {spelled} (…);`")

    @staticmethod
    def spelled(q: Queue, queue: str, name: str) -> str:
        """How a call names queue q's `name` through `queue` (Q, or `self`): `Q[i].name`, `self.name`."""
        return f"{queue}{'[i]' if q.size is not None and queue != 'self' else ''}.{name}"

    def member(self, q: Queue, m: str, qindex: Node | None, mindex: Node | None, pos: tuple, as_ref: bool) -> Node:
        """The lowered name of member m of queue q (of q[qindex] in a queue array)."""
        kind, mpos, is_array = q.members[m]
        if mindex is not None and not is_array:
            raise self.err(mindex.pos, f"member `{m}` of queue `{q.name}` is not an array")
        index = qindex if qindex is not None else mindex
        name = f"{q.name}.{m}"
        if as_ref:
            return Node("ref", pos, name=name, index=index)
        return Node("name", pos, id=name) if index is None else Node("indexed", pos, id=name, index=index)

    def queue_of(self, name: str, qindex: Node | None, pos: tuple, s: Scope) -> tuple[Queue, Node | None]:
        """The queue a `NAME[i].…` names, and its index (rewritten), for a declared queue or `self`."""
        if name == "self":
            if s.queue is None:
                raise self.err(pos, "`self` names the queue whose body it is in; here it is outside every queue")
            if qindex is not None:
                raise self.err(qindex.pos, "`self` is this queue already; it takes no index")
            return s.queue, self.own_index(s, pos)
        if name in self.failed:
            raise self.err(pos, f"queue `{name}` has an error", about=name)
        # inside its own body a queue is not declared yet: `Q[k].m` there names member m of queue k
        q = s.queue if s.queue is not None and name == s.queue.name else self.queues.get(name)
        if q is None:
            if name == "args":
                raise self.err(pos, "`args.NAME` is no value: an input is `let x = args.number(\"NAME\", default);`")
            if name == "source":
                raise self.err(pos, "`source` names the queue an entry takes the KV from: only inside a queue's "
                                    "entry (`def VERB (…) { … }`)")
            if self.is_declared(name):
                raise self.err(pos, f"`{name}` is not a queue, so `{name}.…` names nothing")
            raise self.err(pos, f"unknown queue `{name}` (declare the queue above its first use)", about=name)
        if q.size is None:
            if qindex is not None:
                raise self.err(qindex.pos, f"queue `{name}` is not an array")
            return q, None
        if qindex is None:
            raise self.err(pos, f"`{name}` is an array of {q.size} queues: write `{name}[i].…`")
        if any(n.kind == "draw" for n in walk([qindex])):
            raise self.err(qindex.pos, "a queue's index is read at every use of its members, so a draw there would "
                                       f"be drawn again: `set x = …;` first, then `{name}[x]`")
        index = self.rw(qindex, s)
        k = self.const_index(index)
        if k is not None and not whole_in(k, 0, q.size - 1):   # (k may be ±inf: no int())
            raise self.err(qindex.pos, f"index {brief_value(k)} is outside the queue array `{name}[0 … {q.size - 1}]`: "
                                       f"a queue of the array is named by a whole number from 0 to {q.size - 1}")
        return q, index

    def qref(self, v: Node, s: Scope) -> Node:
        """`Q.m`, `Q[i].m`, `Q.m[j]`, `self.m`, `source.m`, `self.index`."""
        as_ref = v.f.get("is_ref", False)
        if v.queue == "self" and v.member == "index" and s.queue is not None and v.qindex is None:
            return self.self_index(v, s)
        if v.queue == "source" and s.entry is not None and v.qindex is None:
            if v.member == "index":
                raise self.err(v.member_pos, "`source.index`: an entry is not told its source's index; pass it as an "
                                             "argument (`D[k].pull (n, i) from P[i];`)")
            if v.mindex is not None:
                raise self.err(v.mindex.pos, "`source.m` is the source's member whole: it takes no index")
            if v.member not in s.entry.sources:
                s.entry.sources.append(v.member)
            name = SOURCE_PREFIX + v.member
            return Node("ref", v.pos, name=name, index=None) if as_ref else Node("name", v.pos, id=name)
        m = v.member
        known = self.queues.get(v.queue)
        if known is not None and m in known.consts and v.qindex is None and v.mindex is None:
            return Node("name", v.pos, id=f"{known.name}.{m}")   # one value for every queue of an array
        q, qindex = self.queue_of(v.queue, v.qindex, v.pos, s)
        if m in q.members:
            return self.member(q, m, qindex, self.rw(v.mindex, s), v.pos, as_ref)
        if m in q.consts:
            return Node("name", v.pos, id=f"{q.name}.{m}")
        if m in q.entries:
            raise self.err(v.member_pos, f"`{m}` is an entry of queue `{q.name}`: call it as a statement, "
                                         f"`{self.spelled(q, v.queue, m)} (…);`")
        if m in q.defs:
            raise self.err(v.member_pos, f"`{m}` is a definition of queue `{q.name}`: call it, "
                                         f"`{self.spelled(q, v.queue, m)} (…)`")
        if m == "index":
            raise self.err(v.member_pos, f"`index` is read inside queue `{q.name}`'s body, as `self.index`; "
                                         + (f"here the index of `{v.queue}[i]` is i itself" if q.size is not None
                                            else f"`{q.name}` is a single queue, which has no index"))
        raise self.err(v.member_pos, f"queue `{q.name}` has no member `{m}`" + self.listing(q, "members"))

    def self_index(self, v: Node, s: Scope) -> Node:
        """`self.index`: the index of the queue of a queue array whose body it is in."""
        q = s.queue
        assert q is not None
        if v.mindex is not None:
            raise self.err(v.mindex.pos, "`self.index` is a number; it takes no index")
        if v.f.get("is_ref"):
            raise self.err(v.pos, "`self.index` is a number, not a pool or stage")
        if q.size is None:
            raise self.err(v.pos, f"`self.index`: `{q.name}` is a single queue, which has no index (a queue array "
                                  f"`queue {q.name}[N]` has one, 0 to N-1)")
        index = self.own_index(s, v.pos, "read `self.index`")
        assert index is not None
        return index

    def listing(self, q: Queue, what: str) -> str:
        names = {"members": list(q.members) + list(q.consts), "entries": list(q.entries),
                 "definitions": list(q.defs)}[what]
        return f" (its {what}: {', '.join(names)})" if names else f" (it has no {what})"

    def qcall(self, v: Node, s: Scope) -> Node:
        """`Q[i].VERB (a…) [from S[k]];`: an entry call, or a request to the queue's engine VERB."""
        q, qindex = self.queue_of(v.queue, v.qindex, v.queue_pos, s)
        if v.verb in q.entries:
            return self.entry_call(q, qindex, q.entries[v.verb], v.args, v.source, v, s)
        if v.verb in q.defs:
            raise self.not_a_statement(q, v.verb, v.verb_pos, self.spelled(q, v.queue, v.verb))
        if v.verb in q.members and q.members[v.verb][0] == "engine":
            if v.source is not None:
                raise self.err(v.source.pos, f"`{v.verb}` is queue `{q.name}`'s engine; `from` goes with an entry")
            return Node("callstmt", v.pos, fname=f"{q.name}.{v.verb}", fname_pos=v.verb_pos,
                        args=self.rw(v.args, s), index=qindex)
        raise self.err(v.verb_pos, f"queue `{q.name}` has no entry `{v.verb}`" + self.listing(q, "entries"))

    def qdefcall(self, v: Node, s: Scope) -> Node:
        """`Q.f (a…)`, `Q[i].f (a…)`, `self.f (a…)` in an expression: a call of the queue's expression
        definition f, its members those of Q[i]."""
        if v.queue == "self" and s.queue is not None and v.qindex is None:
            # this queue's own: the index is passed only if the definition reads it (see def_call)
            q, qindex = s.queue, None
        else:
            q, qindex = self.queue_of(v.queue, v.qindex, v.pos, s)
        f = v.fname
        if f in q.defs:
            return self.def_call(q, f, qindex, v.args, v.pos, s)
        spelled = self.spelled(q, v.queue, f)
        if f in q.entries:
            raise self.err(v.fname_pos, f"`{f}` is an entry of queue `{q.name}` (a statement): call it as "
                                        f"`{spelled} (…);`")
        if f in q.members and q.members[f][0] == "engine":
            raise self.err(v.fname_pos, f"a request to queue `{q.name}`'s engine `{f}` is a statement "
                                        f"(`{spelled} (…);`), not a value")
        if f in q.members or f in q.consts:
            what = f"a {q.members[f][0]}" if f in q.members else "a constant"
            raise self.err(v.fname_pos, f"`{f}` is {what} of queue `{q.name}`, not a definition: it takes no "
                                        f"arguments (`{spelled}`)")
        raise self.err(v.fname_pos, f"queue `{q.name}` has no definition `{f}`" + self.listing(q, "definitions"))

    def entry_call(self, q: Queue, qindex: Node | None, e: Entry, args: list, source: Node | None, at: Node,
                   s: Scope) -> Node:
        """The call of entry e's definition: the queue's index, the source's members, the arguments."""
        if len(args) != len(e.params):
            raise self.err(at.pos, f"entry `{q.name}.{e.name}` takes {len(e.params)} argument(s), got {len(args)}")
        if e.sources and source is None:
            raise self.err(at.pos, f"entry `{q.name}.{e.name}` reads `source.{e.sources[0]}`: name the queue it takes "
                                   f"the KV from, `{q.name}{'[i]' if q.size else ''}.{e.name}(…) from S[k];`")
        pass_on: list = []
        if source is not None:
            if not e.sources:
                raise self.err(source.pos, f"entry `{q.name}.{e.name}` reads nothing of a source: drop `from …`")
            if q.role not in READERS:
                raise self.err(source.pos, f"`from`: queue `{q.name}` is a {q.role} queue; only a decode or agg queue "
                                           "takes the KV from another queue")
            if source.queue == "source" and s.entry is not None and source.qindex is None:
                for m in e.sources:   # the entry's own source, passed on to the entry it calls
                    if m not in s.entry.sources:
                        s.entry.sources.append(m)
                    pass_on.append(Node("name", source.pos, id=SOURCE_PREFIX + m))
            else:
                src, sindex = self.queue_of(source.queue, source.qindex, source.pos, s)
                if src.role not in SOURCES:
                    raise self.err(source.pos, f"`from {source.queue}`: queue `{src.name}` is a {src.role} queue; the KV "
                                               f"comes from a {', '.join(SOURCES[:-1])} or {SOURCES[-1]} queue")
                for m in e.sources:
                    if m not in src.members:
                        raise self.err(source.pos, f"entry `{q.name}.{e.name}` reads `source.{m}`, and queue "
                                                   f"`{src.name}` has no member `{m}`" + self.listing(src, "members"))
                    pass_on.append(self.member(src, m, sindex, None, source.pos, as_ref=False))
        index = [qindex] if q.size is not None else []
        return Node("callstmt", at.pos, fname=e.def_name, fname_pos=at.pos, args=index + pass_on + self.rw(args, s))


def request_params(items: list[Node]) -> list[tuple]:
    """The request parameters of the engines declared in `items`, queues' engines included, in
    order: the linker gives them the first attribute slots (docs/ir.md "Slots")."""
    out = []
    for it in items:
        inner = it.items if it.kind == "queue" else [it]
        for e in inner:
            if e.kind == "engine":
                for sub in e.items:
                    if sub.kind == "request":
                        out.extend(sub.params)
    return out


def refuse_outside_main(node: Node, err: Callable) -> SerqError:
    """A queue member or entry call met outside `fn main` (in a library's or the top level's `def`)."""
    return err(node.pos, "a queue's members and entries are named only inside `fn main`, below the queue's "
                         "declaration")

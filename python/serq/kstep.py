"""K's step stage read as the S engine it spells (docs/language.md §16 "The K spellings").

`stage E : step { budget b; chunk c; granule g; cost e; memory P; state r = v; serve ORDER; }`
becomes the node that S's

    engine E on D { tokens cap b; granule g; state r = v;
                    schedule { advance running ORDER each at most (c); admit waiting each at most (c); }
                    execute (e); }

(`serve exclusive prefill;`: `exclusive prefill each at most (c);` in the advance's place, as
vectors/spec/exclusive_prefill writes it) parses to, so the linker compiles it by the engine's own rules and the IR is the S spelling's
(tests/test_k_dialect.py). An `iteration { … }` item's `set`s and `branch`es come first in that
schedule (`iteration_stmts`): they run as each iteration starts. `stage E[N] : step` is `engine
E[N] on D[j]`, its member index j the new name of `memory P[j]`. D is a device of the stage's own that no declaration can name
(`implicit_device`): it has no capacities and no time functions, and the stage's pools are
free-standing (`pool kv { cap …; }`, `pool slots { cap …; admit via E; }`), as in K.

The parser (`KStepWords`) has already told the item words from names; here each item is checked
once, and the bare engine values of `cost` become `kengval` nodes, which the linker reads as the S
values of K_ENGINE_VALUES unless a name in scope has the same word.
"""

from __future__ import annotations

from typing import Callable

from .ast import Node, rewrite

# K's bare names of the engine values `execute` reads (the reference's §4.5 kernel column)
K_ENGINE_VALUES = {"residents": "running.count", "decoders": "batch.decoding", "tokens": "batch.tokens",
                   "prefilled": "batch.prefilled", "kv_decode": "batch.kv_decode",
                   "kv_prefill": "batch.kv_prefill", "attention": "batch.attention"}
# the same words in the `iteration { … }` block, which runs before anyone is served: the values
# of the residents as the iteration starts (§4.5's kernel names readable in the schedule)
K_ITERATION_VALUES = {"residents": "running.count", "decoders": "running.decoding",
                      "kv_decode": "running.kv_decode", "kv_prefill": "running.kv_prefill"}
ITEM_WORDS = ("budget", "chunk", "granule", "cost", "memory", "serve")
# the member index of a step stage array whose `memory` names no member (`memory kv;` or none): a
# name with a space, which no program can write, so it substitutes nothing
NO_MEMBER_INDEX = "(member index)"
# how the statements an `iteration { … }` block refuses are spelled in its message
STATEMENT_WORDS = {"turn": "`turn;`", "end": "`end;`", "observe": "`observe`", "while": "`while`", "loop": "`loop`",
                   "choose": "`choose`", "hold": "`hold`", "grow": "`grow`", "drop": "`drop`",
                   "release": "`release`", "load": "`load`", "run": "`run`", "flow": "`run` over several stages",
                   "tool": "`tool`", "callstmt": "a call (a `def` statement or a request to an engine)",
                   "fork": "`fork`", "join": "`join;`", "transfer": "`transfer`"}


def implicit_device(stage: str) -> str:
    """The device the sugar places engine `stage` on: a name with a space, which no program can write."""
    return f"{stage} (the device of step stage {stage})"


def engine_of(k: Node, err: Callable[[tuple, str], Exception], where: Callable[[tuple], str]) -> tuple[Node, Node | None]:
    """The S `engine` node of the K step stage `k`, and the pool reference of its `memory` item
    (None without one). `err(pos, message)` makes the error raised at a position."""
    first: dict[str, Node] = {}
    states: list[Node] = []
    for it in k.items:
        if it.kind == "state":
            states.append(it)
            continue
        if it.word in first:
            raise err(it.pos, f"`{it.word}` given twice in step stage `{k.name}` (first at {where(first[it.word].pos)})")
        first[it.word] = it
    for word, spelled in (("budget", "`budget …;` (S: `tokens cap …;`)"), ("cost", "`cost …;` (S: `execute (…);`)")):
        if word not in first:
            raise err(k.pos, f"step stage `{k.name}` needs {spelled}")
    chunk = first["chunk"].expr if "chunk" in first else None
    serve = first.get("serve")
    at = serve.pos if serve is not None else k.pos
    if serve is not None and serve.exclusive:
        # S writes `exclusive prefill; admit waiting;` (vectors/spec/exclusive_prefill): a schedule
        # must reach an admission, though nothing is admitted after `exclusive prefill`
        first_stmt = Node("exclusive", at, each=chunk)
    else:
        first_stmt = Node("advance", at, only=serve.only if serve else None, order=serve.order if serve else None,
                          each=chunk)
    # K admits only while no preemption happened in the iteration: the rule of every `admit
    # waiting` (docs/language.md §11.6), so no `while (running.preempted == 0)` is written here
    stmts = [first_stmt, Node("admit", at, only=None, cond=None, each=chunk, taking=None)]
    schedule_pos = stmts[0].pos
    if "iteration" in first:
        # §16: the block runs first in every iteration's schedule, before anyone is served
        stmts = iteration_stmts(first["iteration"].stmts, k.name, err) + stmts
    items = [Node("tokens", first["budget"].pos, expr=first["budget"].expr)]
    if "granule" in first:
        items.append(Node("granule", first["granule"].pos, expr=first["granule"].expr))
    items += states
    items.append(Node("schedule", schedule_pos, lets=[], stmts=stmts))
    items.append(Node("execute", first["cost"].pos, expr=bare_values(first["cost"].expr)))
    memory = first["memory"].expr if "memory" in first else None
    member = None
    if k.dim is not None:
        # `stage E[N] : step`: `engine E[N] on D[j]` (§6.1) on N devices of its own; `memory P[j]`
        # with a new name j binds the member index, as `on D[j]` does in S (the linker refuses a
        # constant's name there); without it the index is a name nothing can read
        index = memory.index if memory is not None else None
        var = index.id if isinstance(index, Node) and index.kind == "name" else NO_MEMBER_INDEX
        member = Node("name", index.pos if var != NO_MEMBER_INDEX else k.pos, id=var)
    engine = Node("engine", k.pos, name=k.name, dim=k.dim, device=implicit_device(k.name), device_pos=k.pos,
                  member=member, items=items)
    return engine, memory


def iteration_stmts(stmts: list[Node], stage: str, err: Callable[[tuple, str], Exception]) -> list[Node]:
    """The schedule statements of K's `iteration { … }` block (§16): `set` of a register and
    `branch`/`if` over such statements, marked `at_start` (the linker reads them with the values
    known as the iteration starts). Any other statement is refused where it is written."""
    out = []
    for s in stmts:
        if s.kind == "set":
            out.append(Node("sset", s.pos, name=s.name, name_pos=s.name_pos, at_start=True,
                            expr=bare_values(s.expr, K_ITERATION_VALUES, "iteration")))
        elif s.kind == "branch" and not s.coin:
            out.append(Node("sbranch", s.pos, cond=bare_values(s.cond, K_ITERATION_VALUES, "iteration"),
                            then=iteration_stmts(s.then, stage, err),
                            els=iteration_stmts(s.els or [], stage, err), at_start=True))
        elif s.kind == "branch":
            raise err(s.pos, f"`branch with` draws a coin, and the `iteration` block of step stage `{stage}` "
                             "reads no draws (it runs as the iteration starts, in the Budget moment); "
                             "write `branch (…)` on a register or an engine value")
        else:
            what = STATEMENT_WORDS.get(s.kind, f"`{s.kind}`")
            raise err(s.pos, f"{what} cannot be written in the `iteration` block of step stage `{stage}`: the "
                             "block runs in the engine as each iteration starts, not in a session; it may only "
                             "`set` the stage's registers (`state NAME = …;`), under `branch`/`if` "
                             "(docs/language.md §16)")
    return out


def bare_values(e, values: dict[str, str] = K_ENGINE_VALUES, item: str = "cost"):
    """`e` with every name of `values` made a `kengval` node (K's bare engine value) of `item`."""
    return rewrite(e, lambda n: Node("kengval", n.pos, id=n.id, name=values[n.id], item=item)
                   if n.kind == "name" and n.id in values else None)

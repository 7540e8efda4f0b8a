"""The linker: syntax tree of a whole program (with its libraries) -> the IR of docs/ir.md.

One pass over the program in text order (`use` files are read where they are used), with the
checks of docs/language.md §2, §4, §5 and §10 done where the construct is compiled, and the checks that
need the whole program (a value set from live state and read later in a hold header, hidden
attributes read by the scheduler, loop bodies that must let time pass, attributes never set)
done at the end. Every error is a `SerqError` at the source location of the construct.
"""

from __future__ import annotations

import copy
import csv
import io
import os
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Callable

from . import exact, kstep, queues
from .ast import Node, substitute, walk
from .draws import ARITY, MAX_ACCEPT_OUTPUTS
from .errors import SerqError, location_text
from .inputs import DEFAULT_SOURCE, InputLimits, limit_error_text, shown_value
from .parser import Source, decode_source
from .wire import INF, value_from_wire, value_to_wire

BUILTIN_ATTRS = ["serial", "turn_no", "cached", "computed", "new", "out", "think", "more", "forced"]
CTX_VARS = {"now", "waited", "size", "last", "age", "waiting", "present", "position", "computed",
            "demand", "served", "arrived"}
JOB_KEYS = {"decoding", "admission", "remaining"}
FUNCS = {"min": 2, "max": 2, "abs": 1, "floor": 1, "ceil": 1, "sqrt": 1, "exp": 1, "ln": 1, "pow": 2}
# the online estimators of a stage or engine (docs/language.md §4.4): `price(s, s_hit, ds)` takes
# two more arguments; all four mark the stage they read `"estimates": true` in the IR
ESTIMATORS = {"est_lambda": 1, "est_rho": 1, "est_wait": 1, "price": 3}
# running_served / running_chunks: docs/language.md §7.3 (an engine's schedule so far)
STAGE_OBS = {"queue", "busy", "work", "budget_left", "running_served", "running_chunks"} | set(ESTIMATORS)
POOL_OBS = {"used", "free", "cachedin", "holders", "queued"}
BUILTIN_FUNCS = set(FUNCS) | STAGE_OBS | POOL_OBS | {"blocksize"}
LIVE_OBS = STAGE_OBS | POOL_OBS  # "live state" of §10
DISTS = ARITY  # the laws of §4.3 and how many arguments each takes (serq.draws)

EV_TOKENS_CAP = {"running.count", "running.decoding", "running.kv_decode", "running.kv_prefill", "waiting.count"}
EV_SCHEDULE = EV_TOKENS_CAP | {"running.preempted", "waiting.admitted", "batch.tokens", "batch.prefilled"}
EV_EXECUTE = {"running.count", "waiting.count", "batch.tokens", "batch.prefilled", "batch.decoding", "batch.prefilling",
              "batch.kv_decode", "batch.kv_prefill", "batch.attention"}
EV_ALL = EV_SCHEDULE | EV_EXECUTE

# moment -> (attributes readable, context variables readable, draws allowed, observables allowed,
#            per-request keys, scheduler-facing (no hidden attributes))
MOMENTS: dict[str, tuple[bool, frozenset, bool, bool, bool, bool]] = {
    "const": (False, frozenset(), False, False, False, False),
    "session": (True, frozenset({"now"}), True, True, False, False),
    "admit": (True, frozenset({"now"}), False, True, False, True),
    "select": (True, frozenset({"now", "waited"}), False, True, False, True),
    "evict": (True, frozenset({"now", "size", "last", "age", "waiting"}), False, True, False, True),
    "preempt": (True, frozenset({"now", "position", "computed"}), False, True, True, True),
    "ps": (False, frozenset({"now", "present"}), True, True, False, False),
    "tokens": (False, frozenset({"now"}), True, True, False, True),
    "budget": (False, frozenset({"now"}), False, True, False, True),
    "serve": (True, frozenset({"now"}), False, True, True, True),
    "only": (True, frozenset(), False, True, True, True),
    # `admit waiting only (…)` reads a waiting head, which has no run: no per-request keys (§4.5)
    "admit_only": (True, frozenset(), False, True, False, True),
    "guard": (False, frozenset(), False, True, False, True),
    "step": (False, frozenset({"now"}), True, True, False, False),
    "gauge": (False, frozenset(), False, True, False, False),
    # claims (docs/language.md "Claims"): an iteration claim's body is read after the batch is
    # formed (the Step moment: `now`, observables, the engine's `execute` values); `at end`'s after
    # the run, on the final state (no `now`: the engines' ends differ at a horizon); `given` reads
    # what its body reads but not `now` (docs/language.md §4.6)
    "claim": (False, frozenset({"now"}), False, True, False, False),
    "claim_end": (False, frozenset(), False, True, False, False),
    "claim_given": (False, frozenset(), False, True, False, False),
    "arrival": (False, frozenset({"now"}), True, False, False, False),
}
CTX_HOME = {
    "now": "any expression except gauges, `only`, schedule guards, a claim's `given` and `at end`",
    "waited": "queue keys (`queue by`)",
    "size": "eviction keys (`evict by`)", "last": "eviction keys (`evict by`)",
    "age": "eviction keys (`evict by`)", "waiting": "eviction keys (`evict by`)",
    "present": "a ps stage's capacity",
    "position": "preemption keys (`preempt by`)", "computed": "preemption keys (`preempt by`)",
    # named for iteration claims by the reference, which gives them no definition: refused for now
    "demand": "no expression yet (its meaning is undefined)", "served": "no expression yet (its meaning is undefined)",
    "arrived": "no expression yet (its meaning is undefined)",
}
MAX_ERRORS = 20
SETTING_RATIO = re.compile(r"[0-9]+/[0-9]+")  # `--set x=1/3`, ASCII digits only
EACH_MSG = ("`each at most (…)` must select among positive constants: a constant, a schedule `let` "
            "choosing between constants (`c ? k1 : k2`), or `max(k, e)` with a positive constant k")


def setting_value(text: str):
    """The exact value of a setting's text: one optional sign, then a decimal, `p/q` or `inf`;
    ValueError when it is none of these (shared by `--set` and profile files)."""
    t = text.strip()
    sign, body = (-1, t[1:]) if t.startswith("-") else (1, t[1:] if t.startswith("+") else t)
    try:
        if body == "inf":
            return sign * INF
        if SETTING_RATIO.fullmatch(body):
            return sign * Fraction(body)
        if body.startswith(("+", "-")):  # a second sign: `--5` is not 5
            raise ValueError(body)
        return sign * exact.parse_number(body)
    except (ValueError, ZeroDivisionError, exact.Inexact):
        raise ValueError(f"not a number: {text!r}") from None


def num(v: Any) -> dict:
    """A `num` expression holding the exact value v."""
    return {"k": "num", "v": value_to_wire(v)}


def is_num(e: Any) -> bool:
    """Is e a folded constant (`{"k": "num"}`)?"""
    return isinstance(e, dict) and e.get("k") == "num"


def val(e: dict):
    """The exact value of a `num` expression."""
    return value_from_wire(e["v"])


def ir_walk(e: Any):
    """Every dict inside an IR fragment (expressions, statements), depth first, without recursion."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            yield x
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)


# `def` expansions per program: the shipped examples expand at most 4 (docs/frontend.md "Limits")
MAX_EXPANSIONS = 10_000


@dataclass
class Ctx:
    """How an expression is read: its moment and what it may name."""
    moment: str
    where: str
    engine: Any = None                 # EngineInfo when inside an engine
    ev: frozenset = frozenset()        # engine values readable
    locals: dict = field(default_factory=dict)   # schedule lets visible: name -> index
    params: dict = field(default_factory=dict)   # macro parameters: name -> (Node, Ctx)
    defs: dict = field(default_factory=dict)     # definitions visible: name -> DefInfo
    devfns: dict = field(default_factory=dict)   # device time functions visible
    hold: Any = None                   # HoldCtx for a hold body
    record: Any = None                 # list collecting (slot, pos) attribute reads, or None


@dataclass
class HoldCtx:
    """What a hold's body may read: `cached` only with a `cache` clause; not the bindings that read
    live state (§7.2)."""
    has_cache: bool
    impure: dict  # binding name -> pos of the binding that reads live state


@dataclass
class SCtx:
    """Where a statement is: its block kind and its expression context."""
    block: str          # session | server | init | turn
    c: Ctx
    at: Any = None      # call-site position overriding statement positions (macros, engine calls)


@dataclass
class DefInfo:
    """A `def`: its syntax and the definitions visible to its body (no recursion, §2)."""
    node: Node
    scope: dict  # the definitions visible to its body


@dataclass
class EngineInfo:
    """What the linker knows of an engine while lowering its calls (§6, §7.2)."""
    name: str
    index: int
    device: Any
    pos: tuple
    caps: dict = field(default_factory=dict)
    regs: dict = field(default_factory=dict)
    lets: list = field(default_factory=list)
    params: list = field(default_factory=list)
    template: Any = None
    taking_ast: Any = None
    taking: Any = None
    devfns: dict = field(default_factory=dict)
    pending_growing: list = field(default_factory=list)
    device_name: str = ""      # `gpu`, or `gpu[k]` for a member of a device array


class Linker:
    """One program's link: declarations in text order, then the whole-program checks, then `ir()`."""
    def __init__(self, settings: dict[str, str], read_use: Callable,
                 optional: dict[str, str] | None = None):
        self.settings = dict(settings)
        # A profile's settings (`--profile FILE`): bind the inputs the program declares and are
        # no error otherwise (one profile serves programs with different cost inputs).
        self.optional = dict(optional or {})
        self.expansions = 0  # `def` bodies expanded so far (MAX_EXPANSIONS)
        self.read_use = read_use  # (path string, from file id, pos) -> (file id, nodes) or None if already read
        self.sources: list[Source] = []
        self.consts: dict[str, tuple[dict, tuple]] = {}
        self.input_of: dict[str, str] = {}  # local name -> external name
        self.inputs: dict[str, Any] = {}
        self.input_pos: dict[str, tuple] = {}
        self.args_enabled = False
        self.defs: dict[str, DefInfo] = {}
        self.attrs: list[str] = list(BUILTIN_ATTRS)
        self.slot: dict[str, int] = {n: i for i, n in enumerate(BUILTIN_ATTRS)}
        self.written: set[str] = set(BUILTIN_ATTRS)
        self.first_read: dict[str, tuple] = {}
        self.hidden: list[str] = []
        self.hidden_pos: dict[str, tuple] = {}
        self.observes: list[str] = []
        self.pools: list[dict] = []
        self.prefixes: list[dict] = []           # docs/content.md §4, declaration order
        self.prefix_at: dict = {}                # key (exact value) -> (total, pos)
        self.pool_names: dict[str, tuple] = {}   # name -> (base, count, pos)
        self.stages: list[dict] = []
        self.stage_names: dict[str, tuple] = {}  # name -> (base, count, kind, pos)
        # members of an engine array whose estimates a body before them reads (`est_rho(E[1])` in
        # E[0]'s `execute`): marked when the member is declared (`engine_member`)
        self.estimates_ahead: set[int] = set()
        self.devices: dict[str, dict] = {}           # a device array's members as `gpu[0]`, `gpu[1]`, …
        self.device_arrays: dict[str, int] = {}      # device array name -> its size
        self.admit_via: list[tuple] = []            # (pool index, `admit via E` node), resolved after `main`
        self.spills: list[tuple] = []               # (pool index, pool node, `spill` node), resolved after `main`
        self.k_memory: list[tuple] = []             # (engine name, `memory P` pool ref) of K step stages
        self.engine_arrays: dict[str, list] = {}     # engine array name -> its members' names, `E[0]` …
        self.engines: dict[str, EngineInfo] = {}
        self.blocks: list[Any] = []
        self.gauges: list[dict] = []
        self.claims: list[dict] = []
        self.claim_pos: dict[str, tuple] = {}
        self.gauge_pos: dict[str, tuple] = {}
        # docs/language.md §11.14: `share maxmin | bottleneck;` (its position) and whether a run
        # crosses several stages; the IR names the policy only then (a program without flows
        # compiles to the IR it had before)
        self.share: tuple[str, tuple] | None = None
        self.has_flow = False
        self.workload: dict | None = None
        self.workload_parts: dict[str, Any] = {}
        self.server_block: int | None = None
        self.live_sets: dict[int, tuple] = {}    # slot -> pos of a `set` from live state
        self.hidden_params: dict[int, tuple] = {}  # request parameter slot -> (hidden attr, pos) passed to it
        self.copies: list[tuple] = []            # (slot, slots its `set` reads, pos): live state passes through
        self.eos_holds: list[tuple] = []         # (hold IR, pos) of every `eos (…)`: checked in finish
        self.transfers: list[tuple] = []         # (from ref, pos, to ref, pos) of every `transfer`: checked in finish
        self.header_reads: list[tuple] = []      # (slot, pos) read in hold headers / taking
        self.facing_reads: list[tuple] = []      # (slot, pos, where) read by scheduler-facing exprs
        self.loops: list[tuple] = []             # (kind, block index, pos)
        self.tool_refs: list[dict] = []
        self.tool_pos: tuple | None = None
        self.decl_pos: dict[str, tuple] = {}
        self.main_seen = False
        self.engine_name_reads: list[tuple] = []  # (name, pos, engine, what) read where attributes are readable too
        self.errors: list[SerqError] = []
        self.failed: set[str] = set()

    # ------------------------------------------------------------------ errors, positions
    def err(self, pos: tuple, msg: str, about: str | None = None) -> SerqError:
        """A SerqError at a source position; `about` names a declaration whose own failure may explain it."""
        fid, line, col = pos
        e = self.sources[fid].error(msg, line, col)
        e.about = about  # a name whose failed declaration may have caused this error
        return e

    def collect(self, fn, *args, name: str | None = None):
        """Run one item or statement; record its error and go on, so one pass reports several."""
        try:
            try:
                return fn(*args)
            except RecursionError:
                # deeper than the linker's recursion reaches: `def`s expanded into one another, or
                # `use`s each reading the next (the parser bounds one file's syntax, MAX_NESTING)
                node = next((a for a in args if isinstance(a, Node)), None)
                if node is None:
                    raise
                raise self.err(node.pos, "this is nested too deeply to compile (definitions expanded into "
                                         "one another, or a chain of `use`s; docs/frontend.md \"Limits\")") from None
        except SerqError as e:
            if name is not None:
                self.failed.add(name)
            if getattr(e, "about", None) in self.failed:
                return None  # a consequence of an error already reported
            if any(str(e) == str(x) for x in self.errors):
                return None  # the same message at the same place (a body lowered at two call sites)
            self.errors.append(e)
            if len(self.errors) >= MAX_ERRORS:
                raise self.combined() from None
            return None

    def combined(self) -> SerqError:
        """The first error of the pass, carrying the others in `more`."""
        first = self.errors[0]
        first.more = self.errors[1:]
        return first

    def where(self, pos: tuple) -> str:
        """`FILE:LINE:COL` of a position, for messages that point at a second place."""
        fid, line, col = pos
        return location_text(self.sources[fid].name, line, col)

    def at(self, pos: tuple, s: SCtx | None = None) -> list:
        """The `at` triple of a statement: the call site when it comes from a macro or an engine call."""
        p = s.at if (s is not None and s.at is not None) else pos
        return [p[0], p[1], p[2]]

    # ------------------------------------------------------------------ top level
    def link_file(self, nodes: list[Node], fid: int, is_main: bool) -> None:
        """Link one file's top level: `use`/`let`/`def` headers, then `fn main` (main file only, last)."""
        mains = [n for n in nodes if n.kind == "main"]
        if not is_main and mains:
            raise self.err(mains[0].pos, "a library (a file read by `use`) cannot contain `fn main`")
        if len(mains) > 1:
            raise self.err(mains[1].pos, "a second `fn main`: a program has exactly one")
        seen_main = False
        for n in nodes:
            if seen_main:
                raise self.err(n.pos, "nothing may follow `fn main() { … }`")
            if n.kind == "main":
                seen_main = True
                self.link_main(n)
            else:
                self.header(n, fid, in_main=False)
        if is_main and not mains:
            src = self.sources[fid]
            raise src.error("no `fn main() { … }` in this program", max(1, len(src.lines)), 1)

    def header(self, n: Node, fid: int, in_main: bool) -> None:
        """A `use`, `let` or `def` (at the top level or inside `main`; §2)."""
        if n.kind == "use":
            if n.path == "std/args":
                self.args_enabled = True
                return
            got = self.read_use(n.path, fid, n.path_pos)
            if got is not None:
                lib_fid, lib_nodes = got
                self.link_file(lib_nodes, lib_fid, is_main=False)
        elif n.kind == "let":
            self.let(n, in_main)
        elif n.kind == "def":
            if n.name in self.defs:
                raise self.err(n.pos, f"`{n.name}` is already defined at {self.where(self.defs[n.name].node.pos)}")
            self.check_fresh_name(n.name, n.pos, "definition")
            seen = set()
            for p, ppos in n.params:
                if p in seen:
                    raise self.err(ppos, f"parameter `{p}` appears twice")
                seen.add(p)
            self.defs[n.name] = DefInfo(n, dict(self.defs))
        else:  # pragma: no cover - the grammar allows nothing else here
            raise self.err(n.pos, "unexpected declaration")

    def check_fresh_name(self, name: str, pos: tuple, what: str) -> None:
        """A definition or a device's time function: called by name, so it may not hide another callee."""
        if name == "inf":
            raise self.err(pos, "`inf` is the reserved name of +∞")
        if name in BUILTIN_FUNCS:
            raise self.err(pos, f"`{name}` is a built-in function; a {what} may not take its name")
        if name in self.decl_pos:
            raise self.err(pos, f"`{name}` is already declared at {self.where(self.decl_pos[name])}; "
                                f"a {what} may not take its name")

    def check_engine_name(self, info: EngineInfo, name: str, pos: tuple, what: str) -> None:
        """A schedule `let` or a register: it would hide a constant everywhere in the engine (§4.7).

        An attribute of the same name is refused only where an expression reads the name while
        both are visible (`only`, order keys, `taking` amounts; see `finish`): docs/language.md §10's
        own `let n = running.count + waiting.count;` sits beside the seed's attribute `n`.
        """
        if name == "inf" or name in CTX_VARS:
            raise self.err(pos, f"`{name}` is a reserved or context variable name; a {what} may not take it")
        if name in self.consts:
            raise self.err(pos, f"`{name}` is a constant (defined at {self.where(self.consts[name][1])}); a {what} may not share its name")
        if name in info.regs or any(x["name"] == name for x in info.lets):
            raise self.err(pos, f"`{name}` is already a register or schedule `let` of engine `{info.name}`")

    def let(self, n: Node, in_main: bool) -> None:
        """A constant `let`, or an `args.number` input bound by `--set` (§2)."""
        name = n.name
        if name == "inf":
            raise self.err(n.name_pos, "`inf` is the reserved name of +∞ and cannot be redefined")
        if name in CTX_VARS:
            raise self.err(n.name_pos, f"`{name}` is a context variable; a constant may not share its name")
        if name in self.consts:
            raise self.err(n.name_pos, f"constant `{name}` is already defined at {self.where(self.consts[name][1])}")
        if name in self.slot and name not in self.written and name in self.first_read:
            raise self.err(n.name_pos, f"`{name}` is read at {self.where(self.first_read[name])} before this `let` defines it")
        if name in self.slot:
            raise self.err(n.name_pos, f"`{name}` is a session attribute; a constant may not share its name")
        e = n.expr
        if e.kind == "args_call":
            if not in_main:
                raise self.err(e.pos, "`args.number(…)` may only initialise a `let` inside `fn main`")
            if e.id != "args.number":
                raise self.err(e.pos, f"unknown function `{e.id}` (did you mean `args.number`?)")
            if not self.args_enabled:
                raise self.err(e.pos, "`args.number` needs `use \"std/args\";` before it")
            ext = e.ext
            if ext in self.inputs:
                raise self.err(e.ext_pos, f"input \"{ext}\" is already declared at {self.where(self.input_pos[ext])}")
            if e.default is None:
                raise self.err(e.pos, "`args.number(\"NAME\", default)` needs a default value")
            d = self.cx(e.default, Ctx("const", "the default of an input", defs=self.defs))
            if not is_num(d):
                raise self.err(e.default.pos, "the default of an input must be an exact constant")
            v = val(d)
            limits = self.input_limits(e)
            source = DEFAULT_SOURCE
            if ext in self.settings:
                text = self.settings.pop(ext)
                v, source = self.parse_setting(ext, text), f"--set {ext}={text}"
            elif ext in self.optional:
                text = self.optional[ext]
                v, source = self.parse_setting(ext, text), f"the profile's {ext}={text}"
            broken = limits.violation(v)
            if broken is not None:
                raise self.err(broken[0], limit_error_text(ext, v, source, limits, broken[1]))
            self.inputs[ext] = v
            self.input_pos[ext] = e.ext_pos
            self.input_of[name] = ext
            self.consts[name] = (num(v), n.name_pos)
            return
        ir = self.cx(e, Ctx("const", "a constant (`let`)", defs=self.defs, record=None))
        self.consts[name] = (ir, n.name_pos)

    def input_limits(self, call: Node) -> InputLimits:
        """The limits written after an input's default (`in LO to HI`, `whole`; serq/inputs.py),
        each a constant, each at most once, LO ≤ HI."""
        limits = InputLimits()
        for lim in call.limits:
            if lim.kind == "limit_word":
                if lim.word != "whole":
                    raise self.err(lim.pos, f"`{lim.word}` after an input's default: expected `whole` "
                                            "or `in LO to HI` (docs/language.md §2)")
                if limits.whole:
                    raise self.err(lim.pos, "`whole` is given twice")
                limits.whole, limits.whole_at = True, lim.pos
                continue
            if limits.range_at is not None:
                raise self.err(lim.pos, f"an input has one range (`in … to …`); the first is at "
                                        f"{self.where(limits.range_at)}")
            ends = []
            for end, what in ((lim.low, "lower"), (lim.high, "upper")):
                x = self.cx(end, Ctx("const", f"the {what} end of an input's range", defs=self.defs))
                if not is_num(x):
                    raise self.err(end.pos, f"the {what} end of an input's range must be an exact constant")
                ends.append(val(x))
            if ends[0] > ends[1]:
                raise self.err(lim.pos, f"the range {shown_value(ends[0])} to {shown_value(ends[1])} "
                                        "is empty: write the lower end first")
            limits.low, limits.high, limits.range_at = ends[0], ends[1], lim.pos
        return limits

    def parse_setting(self, name: str, text: str):
        """The value of `--set name=text` (setting_value)."""
        try:
            return setting_value(text)
        except ValueError:
            raise SerqError(f"--set {name}={text}: not a number (write a decimal like 0.5 or 2e-5, "
                            "a ratio like 1/3, or inf)") from None

    # ------------------------------------------------------------------ main
    def link_main(self, m: Node) -> None:
        """The items of `fn main`, each checked on its own so one pass reports several errors."""
        self.main_seen = True
        # Slots: request parameters come right after the built-ins (docs/ir.md "Slots"), those of
        # the engines of queues too, in the order of the program text.
        for p, ppos in queues.request_params(m.items):
            self.new_attr(p, ppos, write=True)
        lowering = queues.QueueLowering(self.err, self.where, self.const_index, self.declare_queue,
                                        self.is_declared, self.dim, self.failed)
        handlers = {"device": self.device, "engine": self.engine, "pool": self.pool, "stage": self.stage,
                    "prefix": self.prefix, "workload": self.workload_decl, "server": self.server,
                    "gauge": self.gauge, "claim": self.claim, "share": self.share_decl, "kstep": self.k_step_stage}
        for item in m.items:
            # a queue (docs/language.md §11.16) stands for the items it lowers to; any other item
            # has the queues' members and entry calls it names rewritten
            lowered = self.collect(lowering.lower, item, name=item.name if item.kind == "queue" else None)
            for it in lowered or []:
                k = it.kind
                if k in ("use", "let", "def"):
                    self.collect(self.header, it, it.pos[0], True, name=getattr(it, "name", None) if k != "use" else None)
                else:
                    self.collect(handlers[k], it, name=getattr(it, "name", None) if k not in ("workload", "server", "prefix", "share") else None)
        for pool, o, count in self.admit_via:
            self.collect(self.resolve_admit_via, pool, o, count)
        for pool, node, o in self.spills:
            self.collect(self.resolve_spill, pool, node, o, name=node.name)
        if self.spills and not self.errors:
            self.collect(self.check_tiers)
        for name, ref in self.k_memory:
            if name not in self.failed:
                self.collect(self.check_k_memory, name, ref)
        for eng in self.engines.values():
            if eng.name.split("[")[0] not in self.failed:
                self.collect(self.engine_taking, eng, name=eng.name)
        if self.errors:
            raise self.combined()
        self.finish()

    def declare(self, name: str, pos: tuple, what: str) -> None:
        """Reserve the name of a device, engine, pool or stage (one namespace, no `def` of the same name)."""
        if name in self.decl_pos:
            raise self.err(pos, f"`{name}` is already declared at {self.where(self.decl_pos[name])}")
        if name in self.defs:
            # `E (a, b);` would expand the statement definition instead of calling the engine
            raise self.err(pos, f"`{name}` is already a definition at {self.where(self.defs[name].node.pos)}")
        if name == "inf":
            raise self.err(pos, "`inf` is the reserved name of +∞")
        self.decl_pos[name] = pos

    def declare_queue(self, name: str, pos: tuple) -> None:
        """Reserve a queue's name: one namespace with the devices, engines, pools and stages."""
        self.declare(name, pos, "queue")

    def is_declared(self, name: str) -> bool:
        return name in self.decl_pos

    def const_index(self, e: Node):
        """The value of an index that folds to a constant, else None (it is read at run time)."""
        try:
            ir = self.cx(e, Ctx("const", "an index", defs=self.defs))
        except SerqError:
            return None
        return val(ir) if is_num(ir) else None

    def dim(self, d: Node | None, what: str) -> int | None:
        """The size of an array declaration: a whole constant from 1 to 4096."""
        if d is None:
            return None
        e = self.cx(d, Ctx("const", "an array size", defs=self.defs))
        if not is_num(e) or not exact.whole_in(val(e), 1, 4096):
            raise self.err(d.pos, f"the size of {what} array must be a whole number from 1 to 4096")
        return int(val(e))

    def const_value(self, e: Node, what: str, ctx_where: str | None = None):
        """The exact value of a constant expression; an error if it does not fold to a rational."""
        ir = self.cx(e, Ctx("const", ctx_where or what, defs=self.defs))
        if not is_num(ir):
            raise self.err(e.pos, f"{what} must be an exact constant (it is not a rational number)")
        return val(ir)

    def capacity(self, e: Node, name: str):
        """A capacity (`NAME cap e;` of a device or engine, a pool's `cap e;`): a constant >= 0."""
        cap = self.const_value(e, f"capacity `{name}`")
        if cap < 0:
            raise self.err(e.pos, f"capacity `{name}` cannot be negative, got {value_to_wire(cap)}")
        if exact.beyond_doubles(cap):   # where it is written, not later without a place (both engines refuse it)
            raise self.err(e.pos, exact.constant_beyond_doubles(cap, f"capacity `{name}`")
                           + "; give a capacity in that range, or inf for no limit")
        return cap

    # ------------------------------------------------------------------ devices
    def device(self, d: Node) -> None:
        """`device D { f (x) = e; NAME cap e; }`: time functions (inlined later) and capacities (§6)."""
        self.declare(d.name, d.pos, "device")
        count = self.dim(d.dim, "a device")
        fns, caps = {}, {}
        for it in d.items:
            if it.kind == "dev_fn":
                if it.name in fns or it.name in caps:
                    raise self.err(it.pos, f"`{it.name}` is declared twice in device `{d.name}`")
                self.check_fresh_name(it.name, it.pos, "time function")
                fns[it.name] = DefInfo(Node("def", it.pos, name=it.name, params=it.params, body=it.body, stmt=False),
                                       dict(self.defs))
            else:
                if it.name in fns or it.name in caps:
                    raise self.err(it.pos, f"`{it.name}` is declared twice in device `{d.name}`")
                caps[it.name] = (self.capacity(it.expr, it.name), it.pos)
        if count is None:
            self.devices[d.name] = {"fns": fns, "caps": caps, "pos": d.pos}
            return
        # `device gpu[N]`: N equal devices `gpu[0]` … `gpu[N-1]`, one for each member of an engine
        # array; each its own object, so `E.D` tells the members apart (§6.1)
        for k in range(count):
            self.devices[f"{d.name}[{k}]"] = {"fns": fns, "caps": dict(caps), "pos": d.pos}
        self.device_arrays[d.name] = count

    # ------------------------------------------------------------------ pools
    def pool(self, p: Node) -> None:
        """`pool NAME [on OWNER] { … }`: its capacity and options (§6); arrays become consecutive pools."""
        self.declare(p.name, p.pos, "pool")
        count = self.dim(p.dim, "a pool")
        cap = None
        owned: list[tuple] = []   # (capacity, admitted_by) of each pool on an owner
        if p.owner is not None:
            owner = p.owner
            if p.owner_dev is not None:
                dev, dpos = p.owner_dev
                if owner not in self.engines and owner not in self.engine_arrays:
                    raise self.err(p.owner_pos, f"unknown engine `{owner}` (declare the engine above the pool)")
                if dev not in self.devices and dev not in self.device_arrays:
                    raise self.err(dpos, f"unknown device `{dev}` (declare the device above the pool)")
                for o in self.members(owner, p.owner_pos, p.member, self.engine_arrays, count, "pool")[0]:
                    info = self.engines[o]
                    if info.device_name.split("[")[0] != dev:
                        raise self.err(dpos, f"engine `{owner}` runs on device `{info.device_name.split('[')[0]}`, "
                                             f"not `{dev}` (`{owner}.D` names the device of the engine)")
                    owned.append((self.owner_cap(p, "device", dev, info.device["caps"]), info.index))
            elif owner in self.devices or owner in self.device_arrays:
                for o in self.members(owner, p.owner_pos, p.member, self.device_arrays, count, "pool")[0]:
                    owned.append((self.owner_cap(p, "device", owner, self.devices[o]["caps"]), None))
            elif owner in self.engines or owner in self.engine_arrays:
                for o in self.members(owner, p.owner_pos, p.member, self.engine_arrays, count, "pool")[0]:
                    owned.append((self.owner_cap(p, "engine", owner, self.engines[o].caps), self.engines[o].index))
            else:
                raise self.err(p.owner_pos, f"unknown device or engine `{owner}` (declare the device or the engine above the pool)",
                               about=owner)
            cap = owned[0][0]
        seen: dict[str, tuple] = {}
        admit_via = None
        opts = {"block": None, "evict": {"kind": "lru"}, "preempt": {"kind": "none"}, "queue": {"kind": "fifo"},
                "reserve_held": False, "share": None}
        for o in p.opts:
            key = {"p_cap": "cap", "p_block": "block", "p_evict": "evict", "p_preempt": "preempt",
                   "p_queue": "queue", "p_reserve_held": "reserve held", "p_share": "share",
                   "p_admit_via": "admit via", "p_spill": "spill"}[o.kind]
            if key in seen:
                raise self.err(o.pos, f"pool option `{key}` given twice (first at {self.where(seen[key])})")
            seen[key] = o.pos
            if o.kind == "p_cap":
                if p.owner is not None:
                    raise self.err(o.pos, f"pool `{p.name}` on `{p.owner}` takes its capacity from `{p.owner}`; drop `cap`")
                cap = self.capacity(o.expr, "cap")
            elif o.kind == "p_block":
                b = self.const_value(o.expr, "`block`")
                if not (b > 0) or exact.is_inf(b):
                    raise self.err(o.expr.pos, "`block` must be a positive finite constant")
                if exact.beyond_doubles(b):
                    raise self.err(o.expr.pos, exact.constant_beyond_doubles(b, "`block`")
                                   + "; give a block size in that range")
                opts["block"] = b
            elif o.kind == "p_evict":
                if o.how == "lru":
                    opts["evict"] = {"kind": "lru"}
                else:
                    c = Ctx("evict", "eviction keys", defs=self.defs, record=[])
                    opts["evict"] = {"kind": "by", "keys": [self.cx(k, c) for k in o.keys], "at": self.at(o.pos)}
                    self.note_facing(c)
            elif o.kind == "p_preempt":
                if o.how == "by":
                    c = Ctx("preempt", "preemption keys", defs=self.defs, record=[])
                    opts["preempt"] = {"kind": "by", "keys": [self.cx(k, c) for k in o.keys], "requeue": o.requeue,
                                       "at": self.at(o.pos)}
                    self.note_facing(c)
                else:
                    opts["preempt"] = {"kind": o.how}
            elif o.kind == "p_queue":
                if o.how == "fifo":
                    opts["queue"] = {"kind": "fifo"}
                else:
                    c = Ctx("select", "queue keys", defs=self.defs, record=[])
                    opts["queue"] = {"kind": "by", "keys": [self.cx(k, c) for k in o.keys], "at": self.at(o.pos)}
                    self.note_facing(c)
            elif o.kind == "p_reserve_held":
                opts["reserve_held"] = True
            elif o.kind == "p_share":
                opts["share"] = "content"
            elif o.kind == "p_admit_via":
                # K's `admit via E` (§16): the pool is admitted by engine E, as `pool P on E` is
                if p.owner in self.engines or p.owner in self.engine_arrays:
                    raise self.err(o.pos, f"pool `{p.name}` on engine `{p.owner}` is admitted by it already; "
                                          "drop `admit via`")
                admit_via = o
            elif o.kind == "p_spill":
                if o.word != "when":
                    raise self.err(o.word_pos, f"expected `when` after `spill {o.tier.name} via {o.link.name} (…)`, "
                                               f"found `{o.word}`: write `spill TIER via LINK (work) when (condition);`")
        if cap is None:
            raise self.err(p.pos, f"pool `{p.name}` has no capacity: write `cap …;` or declare it `on` a device or engine")
        owned = owned or [(cap, None)] * (count or 1)
        if opts["share"] == "content":
            for cap, _ in owned:
                self.check_content_pool(p, cap, opts, seen)
        base = len(self.pools)
        for j, (cap, admitted_by) in enumerate(owned):
            name = p.name if p.dim is None else f"{p.name}[{j}]"
            self.pools.append({"name": name, "cap": value_to_wire(cap),
                               "block": None if opts["block"] is None else value_to_wire(opts["block"]),
                               "evict": opts["evict"], "preempt": opts["preempt"], "queue": opts["queue"],
                               "reserve_held": opts["reserve_held"], "admitted_by": admitted_by,
                               "share": opts["share"]})
        self.pool_names[p.name] = (base, len(owned), p.pos, p.dim is not None)
        if "spill" in seen:
            # resolved at the end of `main`: the tier, the link and the holds are known then
            self.spills.append((base, p, next(o for o in p.opts if o.kind == "p_spill")))
        if admit_via is not None:
            # resolved at the end of `main`: in K the engine names this pool as its memory, so
            # it may be declared below it
            self.admit_via.append((base, admit_via, count))

    def k_step_stage(self, k: Node) -> None:
        """K's `stage E : step { … }` (§16): the S engine it spells, on a device of its own."""
        engine, memory = kstep.engine_of(k, self.err, self.where)
        count = self.dim(k.dim, "a step stage")
        if count is None:
            self.devices[engine.device] = {"fns": {}, "caps": {}, "pos": k.pos}
            self.engine(engine)
            if memory is not None:
                self.k_memory.append((k.name, memory))
            return
        # `stage E[N] : step` (§16): `engine E[N] on D[j]` over N devices of its own (§6.1)
        var = engine.member.id
        if var in self.consts or var == "inf":   # `memory kv[c]` with a constant c: every member's memory
            var = kstep.NO_MEMBER_INDEX
            engine = Node("engine", engine.pos, **{**engine.f, "member": Node("name", k.pos, id=var)})
        for j in range(count):
            self.devices[f"{engine.device}[{j}]"] = {"fns": {}, "caps": {}, "pos": k.pos}
        self.device_arrays[engine.device] = count
        self.engine(engine)
        if memory is not None:
            self.k_memory += [(f"{k.name}[{j}]", substitute(memory, var, str(j))) for j in range(count)]

    def check_k_memory(self, name: str, ref: Node) -> None:
        """K's `memory P;` (§16): P is a pool, and every run on the stage that grows a pool grows P
        (the engine's memory is the pool its runs grow, as S infers it)."""
        p = self.ref(ref, "pool", Ctx("const", "the pool of `memory`", defs=self.defs))
        memory = p["base"] + (int(val(p["index"])) if p["index"] is not None else 0)
        engine = self.engines[name].index
        for block in self.blocks:
            for st in block:
                if st.get("op") != "run" or st.get("growing") in (None, memory):
                    continue
                s = st["stage"]
                on = (range(s["base"] + int(val(s["index"])), s["base"] + int(val(s["index"])) + 1)
                      if s["index"] is not None and is_num(s["index"]) else range(s["base"], s["base"] + s["count"]))
                if engine in on:
                    raise self.err(tuple(st["at"]), f"this run grows `{self.pools[st['growing']]['name']}`, but step stage "
                                                    f"`{name}`'s memory is `{self.pools[memory]['name']}` (`memory` at {self.where(ref.pos)})")

    def k_name_conflict(self, n: str, c: Ctx) -> str | None:
        """What else `n`, one of K's bare engine values in a step stage's `cost`, names there."""
        if n in c.params or n in c.locals or (c.engine is not None and n in c.engine.regs):
            return "a parameter, `let` or register"
        if n in self.consts:
            return f"a constant (defined at {self.where(self.consts[n][1])})"
        if n in self.pool_names or n in self.stage_names or n in self.devices or n in self.device_arrays:
            return "a pool, stage or device"
        if n in c.defs or n in c.devfns:
            return "a definition"
        return None

    def resolve_admit_via(self, pool: int, o: Node, count: int | None) -> None:
        """`admit via E;` (§16): E must be an engine; the pool is admitted by it. On a pool array
        of N, `admit via E[j]` with a new name j: pool k is admitted by member k of the engine
        array E of N, as `pool P[N] on E[j]` is (§6.1)."""
        if count is not None:
            size = self.engine_arrays.get(o.ref.name)
            index = o.ref.index
            if (size is None or not isinstance(index, Node) or index.kind != "name" or index.id in self.consts
                    or index.id == "inf"):
                raise self.err(o.pos, f"`admit via` on the pool array `{self.pools[pool]['name'].split('[')[0]}` "
                                      f"needs an engine array and a new name for the member: `admit via E[j]` "
                                      f"(pool k admitted by E[k], §16)")
            if len(size) != count:
                raise self.err(o.ref.pos, f"an array of {count} pools admitted via `{o.ref.name}`, an array of "
                                          f"{len(size)} engines: the sizes must be equal (one pool for each)")
            base = self.stage_names[o.ref.name][0]
            for k in range(count):
                self.pools[pool + k]["admitted_by"] = base + k
            return
        ref = self.ref(o.ref, "stage", Ctx("const", "the engine of `admit via`", defs=self.defs))
        if self.stage_kind(ref) != "step":
            raise self.err(o.ref.pos, f"`admit via {o.ref.name}`: `{o.ref.name}` is not an engine; only an engine "
                                      "admits a pool (declare `engine NAME on DEVICE { … }`)")
        self.pools[pool]["admitted_by"] = ref["base"] + (int(val(ref["index"])) if ref["index"] is not None else 0)

    def resolve_spill(self, pool: int, p: Node, o: Node) -> None:
        """`spill Q via S (w) when (c);` (docs/language.md §11.8.1): Q a pool holding only cache
        entries, S a fifo, ps or delay stage; w and c read per chunk in the eviction-key moment.
        On a pool array `P[N]`, Q is an array of N too and member k spills to Q[k]; S is one
        stage all members share, or an array of N (member k's link is S[k])."""
        c = Ctx("evict", "a `spill` clause", defs=self.defs, record=[])
        count = self.pool_names[p.name][1]
        if p.dim is None:
            tier = self.ref(o.tier, "pool", c)
            if tier["index"] is not None:
                raise self.err(o.tier.pos, f"the tier of `spill` must be a single pool, not the array `{o.tier.name}`")
            tiers = [tier["base"]]
            link = self.ref(o.link, "stage", c)
            if link["index"] is not None:
                raise self.err(o.link.pos, f"the link of `spill` must be a single stage, not the array `{o.link.name}`")
            links = [link["base"]]
        else:
            tiers = self.member_tiers(p, o, count)
            links = self.member_links(p, o, count)
        work = self.cx(o.work, c)
        when = self.cx(o.when, c)
        self.note_facing(c)
        for k, (q, link_base) in enumerate(zip(tiers, links)):
            self.check_spill_pair(pool + k, q, p, o)
            if self.stage_kind({"base": link_base}) not in ("fifo", "ps", "delay"):
                raise self.err(o.link.pos, f"the link of `spill` must be a `fifo`, `ps` or `delay` stage; "
                                           f"`{o.link.name}` is an engine")
            self.pools[pool + k]["spill"] = {"pool": q, "stage": link_base, "work": work, "when": when,
                                             "at": self.at(o.pos)}

    def check_spill_pair(self, pool: int, q: int, p: Node, o: Node) -> None:
        """Pool `pool` (of declaration p) may spill to pool q (§11.8.1 "Link rules")."""
        tier_name = self.pools[q]["name"]
        if q == pool:
            raise self.err(o.tier.pos, f"pool `{p.name}` cannot spill to itself: name a lower tier (a pool that "
                                       "only holds cache entries, e.g. host memory)")
        source_content = self.pools[pool].get("share") == "content"
        if self.pools[q].get("share") == "content" and not source_content:
            raise self.err(o.tier.pos, f"the tier `{o.tier.name}` is a `share content` pool but `{p.name}` is not: "
                                       f"`{p.name}` evicts chunks of a session's entry, a content tier keeps blocks "
                                       f"by their content; declare both `share content` (a content-addressed tier, "
                                       f"docs/content.md §6) or neither")
        if source_content and self.pools[q].get("share") != "content":
            raise self.err(o.tier.pos, f"the tier `{o.tier.name}` of the `share content` pool `{p.name}` must be "
                                       f"`share content` too: `{p.name}` evicts blocks identified by content, which "
                                       f"only a content tier keeps apart; write `share content;` in `{o.tier.name}` "
                                       f"(docs/content.md §6)")
        if self.pools[q].get("admitted_by") is not None or self.pools[pool].get("admitted_by") is not None:
            which = o.tier.name if self.pools[q].get("admitted_by") is not None else p.name
            raise self.err(o.pos, f"pool `{which}` is admitted by an engine (it counts requests, not tokens, and "
                                  "keeps no cache entries): `spill` needs token pools on devices or free-standing")
        if self.pools[q]["block"] != self.pools[pool]["block"]:
            raise self.err(o.tier.pos, f"the tier `{tier_name}` has block {self.pools[q]['block']}, pool "
                                       f"`{self.pools[pool]['name']}` block {self.pools[pool]['block']}: a spilled "
                                       "chunk moves whole blocks, so give both the same `block`")

    def member_tiers(self, p: Node, o: Node, count: int) -> list[int]:
        """The tiers of pool array p's members: the array named by `spill`, of the same size."""
        if o.tier.kind != "ref" or o.tier.index is not None or o.tier.name not in self.pool_names:
            if o.tier.kind == "ref" and o.tier.name not in self.pool_names:
                self.ref(o.tier, "pool", Ctx("evict", "a `spill` clause", defs=self.defs))   # its own error
            raise self.err(o.tier.pos, f"`spill` on the pool array `{p.name}`: name a pool array of {count} "
                                       f"without an index (member k spills to its member k)")
        base, n, _pos, is_array = self.pool_names[o.tier.name]
        if not is_array or n != count:
            raise self.err(o.tier.pos, f"`spill` on the pool array `{p.name}[{count}]` needs a tier array of {count} "
                                       f"(member k spills to member k): `{o.tier.name}` is "
                                       + (f"an array of {n}" if is_array else "a single pool")
                                       + f"; declare `pool {o.tier.name}[{count}] {{ … }}`")
        return [base + k for k in range(count)]

    def member_links(self, p: Node, o: Node, count: int) -> list[int]:
        """The links of pool array p's members: one stage they share, or an array of the same size."""
        if o.link.kind != "ref" or o.link.index is not None:
            raise self.err(o.link.pos, f"`spill` on the pool array `{p.name}`: name one stage (shared by every "
                                       f"member) or a stage array of {count} without an index")
        if o.link.name not in self.stage_names:
            self.ref(o.link, "stage", Ctx("evict", "a `spill` clause", defs=self.defs))   # its own error
        base, n, _kind, _pos, is_array = self.stage_names[o.link.name]
        if not is_array:
            return [base] * count
        if n != count:
            raise self.err(o.link.pos, f"`spill` on the pool array `{p.name}[{count}]`: the link array "
                                       f"`{o.link.name}` has {n} members; give it {count} or name one stage")
        return [base + k for k in range(count)]

    def check_tiers(self) -> None:
        """The tiers of `spill` form chains, not cycles, and a tier only holds cache entries: no
        statement takes it (docs/language.md §11.8.1)."""
        for start, node, o in self.spills:
            seen = [start]
            q = self.pools[start].get("spill", {}).get("pool")
            while q is not None:
                if q in seen:
                    raise self.err(o.pos, "the `spill` tiers form a cycle: " + " → ".join(
                        self.pools[i]["name"] for i in seen + [q]) + "; a tier must be lower than its pool")
                seen.append(q)
                q = self.pools[q].get("spill", {}).get("pool")
        for start, node, o in self.spills:
            q = self.pools[start].get("spill", {}).get("pool")
            if q is not None and self.pools[q].get("share") == "content" and self.pools[q].get("spill") is not None:
                raise self.err(o.tier.pos, f"the content tier `{self.pools[q]['name']}` has a `spill` of its own: a "
                                           "chain of content tiers is not supported; a block evicted from a content "
                                           "tier is dropped (docs/content.md §6), so remove the tier's `spill`")
        tiers = {self.pools[i]["spill"]["pool"]: o for i, _, o in self.spills if "spill" in self.pools[i]}
        for blk in self.blocks:
            for st in blk:
                if st["op"] not in ("hold", "grow", "load", "release"):
                    continue
                refs = [hp["pool"] for hp in st["pools"]] if st["op"] == "hold" else [st["pool"]]
                for ref in refs:
                    for i in range(ref["base"], ref["base"] + ref["count"]):
                        if i in tiers:
                            raise self.err(tuple(st["at"]), f"pool `{self.pools[i]['name']}` is the `spill` tier of "
                                           f"another pool (at {self.where(tuple(tiers[i].pos))}); a tier holds only "
                                           "cache entries, so no statement may hold it")

    def owner_cap(self, p: Node, kind: str, owner: str, caps: dict):
        """The capacity a pool `on OWNER` takes: the owner's capacity of the pool's name (§6)."""
        if p.name not in caps:
            raise self.err(p.pos, f"{kind} `{owner}` declares no capacity `{p.name}` (write `{p.name} cap …;` in it)")
        return caps[p.name][0]

    def check_content_pool(self, p: Node, cap, opts: dict, seen: dict) -> None:
        """`share content;` (docs/content.md §1): B = cap / block physical blocks, LRU free queue."""
        at = seen["share"]
        b = opts["block"]
        if b is None:
            raise self.err(at, f"`share content` needs `block b;` on pool `{p.name}` (its blocks are the unit of sharing)")
        if b.denominator != 1:
            raise self.err(at, f"`share content` needs a whole block size, got {value_to_wire(b)}")
        if exact.is_inf(cap) or (cap / b).denominator != 1:
            raise self.err(at, f"`share content` needs a capacity that is a whole number of blocks: "
                               f"cap {value_to_wire(cap)} is not a multiple of block {value_to_wire(b)}")
        if opts["evict"]["kind"] != "lru":
            raise self.err(seen["evict"], "`evict by (…)` cannot be used with `share content`: a content pool "
                                          "evicts the head of its free queue (vLLM's LRU)")

    # ------------------------------------------------------------------ prefixes (docs/content.md)
    def prefix(self, n: Node) -> None:
        """`prefix KEY (LENGTH) [after PARENT];`: a shared token sequence; `total` folded here."""
        key = self.const_value(n.key, "a prefix key")
        if not exact.whole_in(key, 1, INF) or exact.is_inf(key):
            raise self.err(n.key.pos, f"a prefix key must be a positive whole number, got {value_to_wire(key)}")
        if key in self.prefix_at:
            raise self.err(n.key.pos, f"prefix {value_to_wire(key)} is already declared at "
                                      f"{self.where(self.prefix_at[key][1])}")
        length = self.const_value(n.length, "a prefix length")
        if not exact.whole_in(length, 0, INF) or exact.is_inf(length):
            raise self.err(n.length.pos, f"a prefix length must be a whole number >= 0, got {value_to_wire(length)}")
        total, parent = length, None
        if n.after is not None:
            parent = self.const_value(n.after, "the parent of a prefix (`after`)")
            if parent not in self.prefix_at:
                raise self.err(n.after.pos, f"`after {value_to_wire(parent)}`: no prefix {value_to_wire(parent)} is "
                                            "declared before this one (a parent comes first)")
            total = self.prefix_at[parent][0] + length
        self.prefix_at[key] = (total, n.pos)
        self.prefixes.append({"key": value_to_wire(key), "length": value_to_wire(length),
                              "after": None if parent is None else value_to_wire(parent),
                              "total": value_to_wire(total)})

    def pool_item(self, tk: Node, c: Ctx, ctx_for) -> dict:
        """One pool of a hold or of a `taking` clause: units, then `reserve (…)` and `content (…)`,
        each at most once (docs/ir.md hold, docs/content.md §1). `ctx_for(where)` is the context
        the amounts are read in."""
        ref = self.ref(tk.ref, "pool", c)
        units = self.cx(tk.units, ctx_for("hold units"))
        self.check_units(ref, units, tk.units.pos)
        seen: dict[str, tuple] = {}
        reserve = content = None
        for o in tk.opts:
            if o.kind in seen:
                raise self.err(o.pos, f"`{o.kind} (…)` given twice for one pool (first at {self.where(seen[o.kind])})")
            seen[o.kind] = o.pos
            if o.kind == "reserve":
                reserve = self.cx(o.expr, ctx_for("a reserve"))
                self.check_units(ref, reserve, o.expr.pos)
            else:
                content = self.content_clause(ref, o, ctx_for("a `content` clause"))
        return {"pool": ref, "units": units, "reserve": reserve, "content": content}

    def content_clause(self, ref: dict, o: Node, c: Ctx) -> dict:
        """`content (p, n, h)` on a `share content` pool; constant parts checked here."""
        pool = self.pools[ref["base"]]  # the pools of an array share their options
        if pool.get("share") != "content":
            raise self.err(o.pos, f"`content (…)` needs a `share content` pool; pool `{pool['name'].split('[')[0]}` "
                                  "is not one")
        p, n, h = (self.cx(x, c) for x in (o.prefix, o.length, o.history))
        total = None
        if is_num(p):
            pv = val(p)
            if pv == 0:
                total = Fraction(0)
            elif pv in self.prefix_at:
                total = self.prefix_at[pv][0]
            else:
                raise self.err(o.prefix.pos, f"`content`: {p['v']} is no declared prefix key (and not 0, no prefix)")
        if is_num(n):
            nv = val(n)
            if not exact.whole_in(nv, 0, INF) or exact.is_inf(nv):
                raise self.err(o.length.pos, f"`content`: the shared length must be a whole number >= 0, got {n['v']}")
            if total is not None and nv > total:
                raise self.err(o.length.pos, f"`content`: {n['v']} shared tokens, but prefix {p['v']} has "
                                             f"{value_to_wire(total)}")
        return {"prefix": p, "length": n, "history": h}

    def refuse_on_content_pool(self, k: str, ref: dict, pos: tuple) -> None:
        """`drop` and `load` mean nothing on a `share content` pool (docs/content.md §1)."""
        pool = self.pools[ref["base"]]
        if pool.get("share") != "content":
            return
        name = pool["name"].split("[")[0]
        if k == "drop":
            raise self.err(pos, f"`drop {name};`: pool `{name}` is `share content`, it keeps no per-session "
                                "cache entry to drop")
        raise self.err(pos, f"`load {name} (…);`: pool `{name}` is `share content`; its position is the tokens "
                            "its growing runs schedule, not loaded")

    # ------------------------------------------------------------------ stages
    def stage(self, s: Node) -> None:
        """`stage NAME : fifo(c) | ps(φ) | delay;` (§9)."""
        self.declare(s.name, s.pos, "stage")
        count = self.dim(s.dim, "a stage") or 1
        k = s.skind
        if k.how == "fifo":
            n = Fraction(1)
            if k.expr is not None:
                n = self.const_value(k.expr, "the number of servers")
                if not exact.whole_in(n, 1, INF):
                    raise self.err(k.expr.pos, f"a fifo stage needs a whole, positive number of servers, got "
                                               f"{value_to_wire(n)}; give a whole number >= 1")
            proto = {"kind": "fifo", "servers": int(n)}
        elif k.how == "ps":
            phi = self.cx(k.expr, Ctx("ps", "a ps stage's capacity", defs=self.defs))
            # a constant capacity is checked here, where `serq check` sees it; one that reads
            # `present` or a draw is checked by the engines when they read it (docs/language.md §9)
            if is_num(phi) and not (0 < val(phi) < INF):
                raise self.err(k.expr.pos, f"ps stage {s.name}: capacity must be positive and finite, got "
                                           f"{value_to_wire(val(phi))}; give the work it serves per unit of time "
                                           "alone, a number above 0")
            proto = {"kind": "ps", "capacity": phi, "at": {"capacity": self.at(k.expr.pos)}}
        else:
            proto = {"kind": "delay"}
        base = len(self.stages)
        for j in range(count):
            st = copy.deepcopy(proto)
            st["name"] = s.name if s.dim is None else f"{s.name}[{j}]"
            self.stages.append(st)
        self.stage_names[s.name] = (base, count, proto["kind"], s.pos, s.dim is not None)

    # ------------------------------------------------------------------ engines
    def engine(self, e: Node) -> None:
        """`engine E on D { … }`, or an array `engine E[N] on D[j] { … }`: N engines, member k on
        device D[k], each with its own copy of the body in which j reads k (§6.1)."""
        self.declare(e.name, e.pos, "engine")
        count = self.dim(e.dim, "an engine")
        if e.device not in self.devices and e.device not in self.device_arrays:
            raise self.err(e.device_pos, f"unknown device `{e.device}` (declare the device above the engine)",
                           about=e.device)
        devices, var = self.members(e.device, e.device_pos, e.member, self.device_arrays, count, "engine")
        if var is None:
            self.engine_member(e, e.name, devices[0], False)
            return
        self.check_member_var(var, e)
        # the members are consecutive stages; the array's name is known to their bodies
        # (`budget_left(E[j])`) before the first of them is declared
        self.stage_names[e.name] = (len(self.stages), count, "step", e.pos, True)
        self.engine_arrays[e.name] = [f"{e.name}[{k}]" for k in range(count)]
        for k in range(count):
            member = Node("engine", e.pos, **{**e.f, "items": substitute(e.items, var, str(k))})
            self.engine_member(member, f"{e.name}[{k}]", devices[k], True)

    def members(self, owner: str, pos: tuple, index: Node | None, arrays: dict, count: int | None,
                decl: str) -> tuple[list[str], str | None]:
        """The owners of a declaration `… on OWNER[index]` (§6.1): the owner's name for each of the
        `count` declarations of an array (`count` None: one), and the member index name that an
        array declaration binds (`E[N] on D[j]`, `P[N] on E[j]`), or None."""
        if owner in self.failed:
            raise self.err(pos, f"`{owner}` has an error", about=owner)  # reported already, not again
        size = arrays.get(owner)
        size = len(size) if isinstance(size, list) else size
        if index is None:
            if size is not None:
                raise self.err(pos, f"`{owner}` is an array of {size}: write `{decl} NAME[{size}] on {owner}[j]` "
                                    f"(one {decl} on each member) or `on {owner}[k]` (member k)")
            if count is not None:
                raise self.err(pos, f"an array of {decl}s needs an array to sit on, one member each: "
                                    f"declare `{owner}` as an array and write `on {owner}[j]`")
            return [owner], None
        if size is None:
            raise self.err(index.pos, f"`{owner}` is not an array")
        if count is None:
            k = self.const_value(index, "the member index", "a member index")
            if not exact.whole_in(k, 0, size - 1):
                raise self.err(index.pos, f"index {value_to_wire(k)} is outside `{owner}[0 … {size - 1}]`")
            return [f"{owner}[{int(k)}]"], None
        if index.kind != "name" or index.id in self.consts or index.id == "inf":
            raise self.err(index.pos, f"write `{owner}[j]` with a new name j: member j of this {decl} array sits "
                                      f"on `{owner}[j]`")
        if count != size:
            raise self.err(index.pos, f"an array of {count} {decl}s on `{owner}`, an array of {size}: "
                                      "the sizes must be equal (one member on each)")
        return [f"{owner}[{k}]" for k in range(size)], index.id

    def check_member_var(self, var: str, e: Node) -> None:
        """The member index of an engine array is a constant in each member's body: nothing in the
        body may assign or declare a name it would hide."""
        for n in walk(e.items):
            names = [p for p, _ in n.f.get("params") or []] if n.kind == "request" else []
            names += [b[0] for b in n.f.get("bindings") or [] if isinstance(b, tuple)]
            if n.kind != "ref" and n.f.get("name") == var or n.f.get("var") == var or var in names:
                bound = (f"`memory …[{var}]`" if e.device == kstep.implicit_device(e.name)   # K's step stage array
                         else f"`on {e.device}[{var}]`")
                raise self.err(n.pos, f"`{var}` is the member index of engine array `{e.name}` ({bound}); "
                                      "choose another name for it or for this")

    def engine_member(self, e: Node, name: str, device: str, in_array: bool) -> EngineInfo:
        """One engine: a step stage (budget, cost, registers, schedule) and its request template
        (§6, §11.6); `name` is `E` or, for a member of an array, `E[k]`."""
        dev = self.devices[device]
        index = len(self.stages)
        info = EngineInfo(name, index, dev, e.pos, devfns=dev["fns"], device_name=device)
        stage = {"name": name, "kind": "step", "budget": None, "granule": None, "cost": None, "memory": None,
                 "lag": 0, "registers": [], "lets": [], "schedule": [], "at": {}}
        self.stages.append(stage)
        if index in self.estimates_ahead:
            stage["estimates"] = True
        if not in_array:
            self.stage_names[name] = (index, 1, "step", e.pos, False)
        self.engines[name] = info
        once: dict[str, tuple] = {}
        for it in e.items:
            if it.kind in ("tokens", "granule", "lag", "eng_speculate", "request", "schedule", "execute"):
                if it.kind in once:
                    raise self.err(it.pos, f"`{it.kind}` given twice in engine `{e.name}` (first at {self.where(once[it.kind])})")
                once[it.kind] = it.pos
        for what in ("tokens", "schedule", "execute"):
            if what not in once:
                label = {"tokens": "`tokens cap …;`", "schedule": "`schedule { … }`", "execute": "`execute (…);`"}[what]
                raise self.err(e.pos, f"engine `{e.name}` needs {label}")

        def ectx(moment: str, where: str, ev: frozenset, **kw) -> Ctx:
            return Ctx(moment, where, engine=info, ev=ev, defs=self.defs, devfns=info.devfns, **kw)

        for it in e.items:
            if it.kind == "cap":
                if it.name in info.caps:
                    raise self.err(it.pos, f"capacity `{it.name}` declared twice in engine `{e.name}`")
                info.caps[it.name] = (self.capacity(it.expr, it.name), it.pos)
            elif it.kind == "state":
                self.check_engine_name(info, it.name, it.pos, "register")
                init = self.cx(it.expr, Ctx("const", "a register's initial value", defs=self.defs))
                info.regs[it.name] = len(stage["registers"])
                stage["registers"].append({"name": it.name, "init": init, "at": self.at(it.expr.pos)})
        for it in e.items:
            if it.kind == "tokens":
                c = ectx("tokens", "`tokens cap`", frozenset(EV_TOKENS_CAP), record=[])
                b = self.cx(it.expr, c)
                self.note_facing(c)
                if is_num(b) and val(b) <= 0:
                    raise self.err(it.expr.pos, f"`tokens cap` must be positive, got {b['v']}")
                stage["budget"] = b
                stage["at"]["budget"] = self.at(it.expr.pos)
            elif it.kind == "eng_speculate":
                # docs/language.md §7.3: read with the budget, once per iteration
                sc_ = ectx("tokens", "`speculate (slots, look, limit)`", frozenset(EV_TOKENS_CAP))
                stage["speculate"] = {"slots": self.cx(it.slots, sc_), "lookahead": self.cx(it.lookahead, sc_),
                                      "limit": self.cx(it.limit, sc_), "at": self.at(it.pos)}
            elif it.kind == "granule":
                g = self.cx(it.expr, ectx("budget", "`granule`", frozenset(EV_TOKENS_CAP)))
                if is_num(g) and not (val(g) == INF or exact.whole_in(val(g), 1, INF)):
                    # prefill chunks are rounded down to a multiple of it (§11.6): 0, a negative or a
                    # fractional granule has no multiples to round to
                    raise self.err(it.expr.pos, f"engine {e.name}: `granule` must be a whole number >= 1 (or inf), "
                                                f"got {g['v']}")
                stage["granule"] = g
                stage["at"]["granule"] = self.at(it.expr.pos)
            elif it.kind == "lag":
                lag = self.const_value(it.expr, "`lag`")
                if lag not in (0, 1):
                    # docs/async.md §1: 0 (synchronous) or 1 (an end is applied after the next schedule)
                    raise self.err(it.expr.pos, f"engine {e.name}: `lag` must be 0 or 1, got {value_to_wire(lag)}")
                stage["lag"] = int(lag)
            elif it.kind == "request":
                self.request_block(info, it)
            elif it.kind == "schedule":
                self.schedule(info, it, stage, ectx)
            elif it.kind == "execute":
                stage["cost"] = self.cx(it.expr, ectx("step", "`execute`", frozenset(EV_EXECUTE)))
                stage["at"]["cost"] = self.at(it.expr.pos)
        if info.template is not None:
            try:  # resolve the growing pool now when it is already declared (the usual order)
                self.engine_resolve(info)
            except SerqError:
                pass
        return info

    def schedule(self, info: EngineInfo, sch: Node, stage: dict, ectx) -> None:
        """An engine's `schedule { … }`: lets, statements, and the rules of §10 on `each at most` and paths."""
        for lt in sch.lets:
            self.check_engine_name(info, lt.name, lt.name_pos, "schedule `let`")
            c = ectx("budget", "a schedule `let`", frozenset(EV_SCHEDULE), locals=self.locals_of(info), record=[])
            ir = self.cx(lt.expr, c)
            self.note_facing(c)
            info.lets.append({"name": lt.name, "expr": ir, "at": self.at(lt.expr.pos)})
        stage["lets"] = info.lets
        eaches: list[tuple] = []
        takings: list[Node] = []
        if not sch.stmts:
            raise self.err(sch.pos, "a schedule needs at least one statement (`advance running` or `admit waiting`)")

        def comp(stmts: list[Node]) -> list[dict]:
            out = []
            for s in stmts:
                loc = self.locals_of(info)

                def ctx(moment, where, ev=frozenset(EV_SCHEDULE)):
                    if s.f.get("at_start"):
                        # K's `iteration { … }` block (§16) runs before anyone is served: only the
                        # values `tokens cap` reads are known then (the others read 0)
                        ev = frozenset(EV_TOKENS_CAP)
                        where = f"{where} of K's `iteration {{ … }}` block, which runs before anyone is served"
                    return ectx(moment, where, ev, locals=loc, record=[])

                def x(node, moment, where):
                    if node is None:
                        return None
                    c = ctx(moment, where)
                    r = self.cx(node, c)
                    self.note_facing(c)
                    return r

                def each(node):
                    r = x(node, "budget", "`each at most`")
                    if r is not None:
                        eaches.append((r, node.pos))
                    return r

                if s.kind == "advance":
                    if s.order is None or s.order.how == "admission":
                        order = {"kind": "admission"}
                    elif s.order.how == "decode_first":
                        order = {"kind": "decode_first"}
                    else:
                        c = ctx("serve", "order keys")
                        order = {"kind": "by", "keys": [self.cx(k, c) for k in s.order.keys]}
                        self.note_facing(c)
                    out.append({"op": "advance", "only": x(s.only, "only", "`only (…)`"), "order": order,
                                "each": each(s.each), "at": self.at(s.pos)})
                elif s.kind == "admit":
                    if s.taking is not None:
                        takings.append(s.taking)
                    out.append({"op": "admit", "only": x(s.only, "admit_only", "`admit waiting only (…)`"),
                                "while": x(s.cond, "guard", "a schedule guard (`while`)"), "each": each(s.each),
                                "at": self.at(s.pos)})
                elif s.kind == "exclusive":
                    out.append({"op": "exclusive_prefill", "each": each(s.each), "at": self.at(s.pos)})
                elif s.kind == "sbranch":
                    cond = x(s.cond, "guard", "a schedule guard (`branch`)")
                    self.check_branch_const(cond, s.cond.pos)
                    out.append({"op": "branch", "cond": cond, "then": comp(s.then), "else": comp(s.els),
                                "at": self.at(s.pos)})
                elif s.kind == "sset":
                    if s.name not in info.regs:
                        raise self.err(s.name_pos, f"`{s.name}` is not a register of engine `{info.name}` (declare `state {s.name} = …;`)")
                    out.append({"op": "set", "register": info.regs[s.name],
                                "expr": x(s.expr, "budget", "a register update"), "at": self.at(s.pos)})
            return out

        stage["schedule"] = comp(sch.stmts)

        def reaches(stmts: list[dict]) -> bool:
            for s in stmts:
                if s["op"] in ("advance", "admit"):
                    return True
                if s["op"] == "branch" and reaches(s["then"]) and reaches(s["else"]):
                    return True
            return False

        if not reaches(stage["schedule"]):
            raise self.err(sch.pos, "a path through this schedule reaches neither `advance running` nor `admit waiting`")
        first = None
        for ir, pos in eaches:
            self.check_each(ir, pos, info)
            if first is None:
                first = (ir, pos)
            elif ir != first[0]:
                raise self.err(pos, f"all `each at most (…)` of one schedule must be equal; this one differs from the one at {self.where(first[1])}")
        if len(takings) > 1:
            raise self.err(takings[1].pos, f"a second `taking` clause in the schedule of `{info.name}` (first at {self.where(takings[0].pos)}); an engine call lowers to one hold")
        info.taking_ast = takings[0] if takings else None

    def locals_of(self, info: EngineInfo) -> dict:
        """The schedule `let`s visible so far: name -> index."""
        return {x["name"]: i for i, x in enumerate(info.lets)}

    def check_each(self, ir: dict, pos: tuple, info: EngineInfo) -> None:
        """§10: `each at most (c)` must select among positive constants."""
        def sel(e: dict, depth: int = 0) -> bool:
            if depth > 50:
                return False
            k = e.get("k")
            if k == "num":
                v = val(e)
                if not (v > 0):
                    raise self.err(pos, f"`each at most` must be positive (inf means no cap), got {e['v']}")
                return True
            if k == "local":
                return sel(info.lets[e["index"]]["expr"], depth + 1)
            if k == "cond":
                return sel(e["a"], depth + 1) and sel(e["b"], depth + 1)
            if k == "fn" and e["f"] == "max":
                a, b = e["args"]
                for kk in (a, b):
                    if is_num(kk) and val(kk) > 0:
                        return True
                return False
            return False

        if not sel(ir):
            raise self.err(pos, EACH_MSG)

    def request_block(self, info: EngineInfo, r: Node) -> None:
        """An engine's `request (…) { … }`: the template an engine call is lowered with (§7.2)."""
        params = []
        seen = set()
        for p, ppos in r.params:
            if p in seen:
                raise self.err(ppos, f"parameter `{p}` appears twice")
            seen.add(p)
            params.append(self.slot[p])
        info.params = params
        eoses = [it for it in r.items if it.kind == "req_eos"]
        if len(eoses) > 1:
            raise self.err(eoses[1].pos, "a second `eos (…)` in this request block")
        r = Node(r.kind, r.pos, params=r.params, items=[it for it in r.items if it.kind != "req_eos"])
        adm = [i for i, it in enumerate(r.items) if it.kind == "at_admission"]
        if len(adm) > 1:
            raise self.err(r.items[adm[1]].pos, "a second `at admission { … }` in this request block")
        caches = [it for it in r.items if it.kind == "req_cache"]
        if len(caches) > 1:
            raise self.err(caches[1].pos, "a second `cache (…)` in this request block")
        leases = [it for it in r.items if it.kind == "req_lease"]
        if len(leases) > 1:
            raise self.err(leases[1].pos, "a second `lease P (…)` in this request block")

        split = adm[0] if adm else 0
        pre_items = r.items[:split]
        post_items = r.items[split + 1:] if adm else r.items
        sc = SCtx("server", Ctx("session", "a request block", defs=self.defs, record=[]))
        pre = []
        for it in pre_items:
            if it.kind in ("req_run", "req_cache", "req_lease"):
                raise self.err(it.pos, "`prefill`, `decode`, `cache` and `lease` go after `at admission { … }`")
            pre.extend(self.stmt(it, sc))
        bindings = []
        impure: dict[str, tuple] = {}
        hdr_reads: list = []
        if adm:
            for name, npos, ex in r.items[adm[0]].bindings:
                c = Ctx("admit", "an `at admission` binding", defs=self.defs, record=[])
                e = self.cx(ex, c)
                self.note_facing(c)
                hdr_reads.extend(c.record)
                slot = self.assign(name, npos)
                bindings.append({"slot": slot, "expr": e})
                if any(x.get("k") == "obs" for x in ir_walk(e)):
                    impure[name] = npos
        cache_ir = None
        if caches:
            cache_ir = self.cx(caches[0].expr, Ctx("session", "a `cache` amount", defs=self.defs))
        hc = HoldCtx(has_cache=cache_ir is not None, impure=impure)
        body_ctx = SCtx("server", Ctx("session", "a request block", defs=self.defs, hold=hc, record=[]))
        body = []
        for it in post_items:
            if it.kind in ("req_cache", "req_lease"):
                continue
            if it.kind == "req_run":
                run = {"op": "run", "stage": {"base": info.index, "count": 1, "index": None}, "mode": it.mode,
                       "work": self.cx(it.work, body_ctx.c), "growing": None, "at": None}
                if it.speculate is not None:
                    run["speculate"] = self.speculate_ir(it.speculate, it.growing, body_ctx.c)
                if it.growing is not None:
                    # resolved with the `taking` pools: `pool kv on E.D` can only follow the engine
                    info.pending_growing.append((run, it.growing, body_ctx.c))
                body.append(run)
            else:
                body.extend(self.stmt(it, body_ctx))
        for slot, pos in hdr_reads:
            self.header_reads.append((slot, pos))
        eos_ir = None
        if eoses:
            # read when the request's end happens (docs/async.md §3 item 1), like the body's statements
            eos_ir = self.cx(eoses[0].expr, body_ctx.c)
        info.template = {"params": params, "pre": pre, "bindings": bindings, "body": body, "cache": cache_ir,
                         "eos": eos_ir, "eos_pos": eoses[0].expr.pos if eoses else None, "memory": None,
                         # resolved at each call, when the `taking` pools are known (`lease_clause`)
                         "lease": (leases[0], Ctx("session", "a request block", defs=self.defs)) if leases else None}

    def engine_resolve(self, info: EngineInfo) -> None:
        """Resolve the pools an engine names before they may be declared: its runs' `growing` pool."""
        memory, mem_pos = None, None
        for run, node, c in info.pending_growing:
            growing = self.pool_index(node, c)
            if memory is not None and growing != memory:
                raise self.err(node.pos, f"the runs of engine `{info.name}` grow two different pools (also at {self.where(mem_pos)})")
            memory, mem_pos = growing, node.pos
            run["growing"] = growing
        info.pending_growing = []
        if memory is not None:
            info.template["memory"] = memory
            self.stages[info.index]["memory"] = memory

    def engine_taking(self, info: EngineInfo) -> dict | None:
        """The `taking` clause of an engine, compiled once (at its first call or the end of `main`)."""
        self.engine_resolve(info)
        if info.taking is not None or info.taking_ast is None:
            return info.taking
        t = info.taking_ast
        # The amounts are read at each admission attempt inside the engine's iteration, so they
        # may read the schedule's `let`s (docs/language.md §7.1 caps the chunk with one).
        c = Ctx("admit", "a `taking` amount", engine=info, defs=self.defs, record=[], hold=None,
                locals=self.locals_of(info), devfns=info.devfns)
        pools = [self.pool_item(tk, c, lambda where: c) for tk in t.takes]
        reuse = self.cx(t.reuse, c) if t.reuse is not None else None
        if reuse is not None and (info.template is None or info.template["cache"] is None):
            raise self.err(t.reuse.pos, "`reuse (…)` needs a `cache (…)` in the engine's request block")
        self.note_facing(c)
        for slot, pos in c.record:
            self.header_reads.append((slot, pos))
        info.taking = {"pools": pools, "reuse": reuse}
        return info.taking

    def engine_call(self, info: EngineInfo, s: Node, sc: SCtx) -> list[dict]:
        """`E (a1, a2);` in the server, lowered to sets and one hold (§7.2)."""
        if info.name.split("[")[0] in self.failed:
            return []  # its declaration already reported an error
        if sc.block != "server":
            raise self.err(s.pos, f"a request to engine `{info.name}` is allowed only in the `server` block")
        if info.template is None:
            raise self.err(s.pos, f"engine `{info.name}` has no `request (…) {{ … }}` block, so it cannot be called")
        taking = self.engine_taking(info)
        if taking is None:
            raise self.err(s.pos, f"engine `{info.name}` has no `admit waiting … taking …` clause, so a call cannot be lowered to a hold")
        t = info.template
        if len(s.args) != len(t["params"]):
            raise self.err(s.pos, f"engine `{info.name}` takes {len(t['params'])} argument(s), got {len(s.args)}")
        at = self.at(s.pos, sc)
        out = []
        for slot, a in zip(t["params"], s.args):
            e = self.cx(a, sc.c)
            if e.get("k") == "attr" and self.attrs[e["slot"]] in self.hidden_pos:
                # `E (prompt, o);` with `o` hidden: the parameter holds `o` itself (§8: the
                # scheduler never sees the realised output length, only the run that reads it)
                self.hidden_params.setdefault(slot, (self.attrs[e["slot"]], a.pos))
            out.append({"op": "set", "slot": slot, "expr": e, "at": at})
        for st in t["pre"]:
            out.append(self.restamp(st, at))
        body = self.new_block_ir([self.restamp(st, at) for st in t["body"]])
        req = {"engine": info.index,
               "prompt": {"k": "attr", "slot": t["params"][0]} if len(t["params"]) > 0 else None,
               "output": {"k": "attr", "slot": t["params"][1]} if len(t["params"]) > 1 else None}
        hold = {"op": "hold", "pools": copy.deepcopy(taking["pools"]), "reuse": copy.deepcopy(taking["reuse"]),
                "bindings": copy.deepcopy(t["bindings"]), "body": body, "cache": copy.deepcopy(t["cache"]),
                "eos": copy.deepcopy(t["eos"]), "request": req, "at": at}
        if t["eos"] is not None:
            self.eos_holds.append((hold, t["eos_pos"]))
        if t["lease"] is not None:
            node, lctx = t["lease"]
            lease = self.lease_clause(node, [p["pool"] for p in hold["pools"]], lctx)
            if lease is not None:
                hold["lease"] = lease
        out.append(hold)
        return out

    def array_call(self, name: str, index: Node, s: Node, sc: SCtx) -> list[dict]:
        """`E[i] (a1, a2);` (§6.1): the call of member i. With a run-time i it becomes a branch over
        the members, `i == 0` first, each arm the member's own lowered call (so a session holds the
        pools of the member it called and runs on its engine); an i that is no member reaches a
        reference `E[i]` and stops the run there, as any out-of-range index does (§11.9)."""
        if name in self.failed:
            return []  # its declaration already reported an error
        members = [self.engines[m] for m in self.engine_arrays[name]]
        ie = self.cx(index, replace(sc.c, where="the index of an engine call"))
        if any(x.get("k") == "draw" for x in ir_walk(ie)):
            raise self.err(index.pos, "the index of an engine call is read once for each member it is compared "
                                      "with, so a draw in it would be drawn again: `set x = …;` first, then "
                                      f"`{name}[x] (…);`")
        call = Node("callstmt", s.pos, fname=name, args=s.args, fname_pos=s.fname_pos)
        if is_num(ie):
            if not exact.whole_in(val(ie), 0, len(members) - 1):
                raise self.err(index.pos, f"index {ie['v']} is outside `{name}[0 … {len(members) - 1}]`")
            return self.engine_call(members[int(val(ie))], call, sc)
        at = self.at(s.pos, sc)
        # not reached for a member's index; its work is 1 only so that a loop around the call
        # still lets time pass on every path (§10)
        outside = [{"op": "run", "stage": {"base": members[0].index, "count": len(members), "index": ie},
                    "mode": "plain", "work": num(1), "growing": None, "at": at}]
        chain = outside
        for k in reversed(range(len(members))):
            arm = self.new_block_ir(self.engine_call(members[k], call, sc))
            cond = {"k": "bin", "op": "==", "a": copy.deepcopy(ie), "b": num(k)}
            chain = [{"op": "branch", "cond": cond, "then": arm, "else": self.new_block_ir(chain), "at": at}]
        return chain

    def restamp(self, st: dict, at: list) -> dict:
        """A copy of a template statement carrying the call site's position."""
        st = copy.deepcopy(st)
        st["at"] = list(at)
        return st

    # ------------------------------------------------------------------ workload, server, gauges
    def workload_decl(self, w: Node) -> None:
        """`workload { … }`: arrivals, trace, hidden attributes, `init`, `turn`, `session` (§8)."""
        if self.workload is not None:
            raise self.err(w.pos, "a second `workload` (a program has one)")
        self.workload = {"arrival": {"kind": "none"}, "trace": None, "init": None, "turn": None, "session": None,
                         "server": None}
        once: dict[str, tuple] = {}
        accept_pos = None   # the `turn` block's `accept (n, alpha);`, if it has one
        for it in w.items:
            key = it.kind if it.kind != "wl_block" else it.which
            if key in once and key != "hidden":
                raise self.err(it.pos, f"`{key}` given twice in the workload (first at {self.where(once[key])})")
            once[key] = it.pos
            if it.kind == "arrive":
                self.workload["arrival"] = self.arrival(it)
            elif it.kind == "trace":
                self.workload["trace"] = self.trace(it)
            elif it.kind == "hidden":
                for name, npos in it.names:
                    self.check_attr_name(name, npos)
                    if name in self.hidden_pos:
                        raise self.err(npos, f"`{name}` is already hidden")
                    self.new_attr(name, npos, write=False)
                    self.hidden.append(name)
                    self.hidden_pos[name] = npos
            else:
                which = it.which
                if which in ("init", "turn"):
                    for j, st in enumerate(it.body):
                        if st.kind == "accept" and which == "turn" and j < len(it.body) - 1:
                            raise self.err(st.pos, "`accept (n, alpha);` must be the last statement of the `turn` "
                                           "block: its draws come after the turn's other draws, so adding it "
                                           "moves no other value (docs/language.md §7.3)")
                        if st.kind not in ("set", "observe") and not (st.kind == "accept" and which == "turn"):
                            raise self.err(st.pos, f"only `set` and `observe` are allowed in the `{which}` block"
                                           + (" (`accept` belongs in the `turn` block)" if st.kind == "accept" else ""))
                        if st.kind == "accept":
                            accept_pos = st.pos
                    self.workload[which] = self.block(it.body, SCtx(which, self.session_ctx()))
                else:
                    if not any(n.kind == "turn" for n in walk(it.body)) and not self.has_macro_turn(it.body):
                        raise self.err(it.pos, "the `session` block must contain `turn;`")
                    idx = self.block(it.body, SCtx("session", self.session_ctx()))
                    self.blocks[idx].append({"op": "end", "at": [it.pos[0], it.pos[1], it.pos[2]]})
                    self.workload["session"] = idx
        trace = self.workload["trace"]
        if accept_pos is not None and trace is not None:
            if any(len(row) > 4 for rows in trace["sessions"] for row in rows):   # a row with counts
                raise self.err(accept_pos, f"the trace (at {self.where(once['trace'])}) gives acceptance counts in "
                               "its 7th field, and `accept (n, alpha);` draws them: keep one of the two "
                               "(docs/language.md §7.3)")
        if self.workload["session"] is None:
            idx = len(self.blocks)
            at = [w.pos[0], w.pos[1], w.pos[2]]
            self.blocks.append([{"op": "turn", "at": at}, {"op": "end", "at": at}])
            self.workload["session"] = idx

    def has_macro_turn(self, body: list) -> bool:
        """Does a session body reach `turn;` through a statement definition?"""
        for n in walk(body):
            if n.kind == "callstmt" and n.fname in self.defs:
                d = self.defs[n.fname]
                if d.node.stmt and (any(x.kind == "turn" for x in walk(d.node.body))):
                    return True
        return False

    def session_ctx(self) -> Ctx:
        """The context of session and server statements."""
        return Ctx("session", "a statement", defs=self.defs, record=[])

    def arrival(self, a: Node) -> dict:
        """`arrive poisson | renewal | closed | batch | none` with the constant checks of §10."""
        if a.how == "none":
            return {"kind": "none"}
        if a.how == "renewal":
            return {"kind": "renewal", "gap": self.cx(a.expr, Ctx("arrival", "a renewal gap", defs=self.defs)),
                    "at": self.at(a.expr.pos)}
        v = self.const_value(a.expr, f"the argument of `{a.how}`")
        if a.how == "poisson":
            if not (v > 0) or exact.is_inf(v):
                raise self.err(a.expr.pos, f"`poisson(rate)` needs a positive finite rate, got {value_to_wire(v)}")
            # where the rate is written: an engine that cannot represent it says so there
            return {"kind": "poisson", "rate": value_to_wire(v), "at": self.at(a.expr.pos)}
        if not exact.whole_in(v, 0, 10 ** 6):
            raise self.err(a.expr.pos, f"`{a.how}(n)` needs a whole number n from 0 to 1000000, got {value_to_wire(v)}")
        return {"kind": a.how, "n": int(v)}

    def trace(self, t: Node) -> dict:
        """`trace "f.csv" [ordered];`: the CSV read and inlined into the IR (§11.3)."""
        fid = t.pos[0]
        src = self.sources[fid]
        base = os.path.dirname(src.path) if getattr(src, "path", None) else "."
        path = os.path.join(base, t.path)
        disp = os.path.normpath(os.path.join(os.path.dirname(src.name), t.path))
        from . import inputfile

        if os.path.isdir(path):
            raise self.err(t.pos, f"cannot read trace \"{t.path}\": it is a directory")
        try:
            raw = inputfile.read_bytes(path)
        except inputfile.InputError as e:
            shown = t.path.replace("\0", "\\0")
            raise self.err(t.pos, f"cannot read trace \"{shown}\": {str(e).removeprefix('cannot read: ')}") from None
        tsrc = Source(disp, decode_source(raw, disp))
        sessions: list[list] = []
        last_id = None
        for lineno, line in enumerate(tsrc.lines, 1):
            s = line.strip()
            if not s or s.startswith("#") or s.startswith("session"):
                continue
            try:
                fields = next(csv.reader(io.StringIO(s)))
            except (csv.Error, StopIteration):
                raise tsrc.error("cannot read this CSV row", lineno, 1) from None
            if len(fields) not in (5, 6, 7):
                raise tsrc.error("a trace row has 5 to 7 fields (session,turn,new,out,think[,forced[,accept]]), "
                                 f"this one has {len(fields)}", lineno, 1)
            accept = None
            if len(fields) == 7:
                # speculative decoding's acceptance counts by output number (docs/language.md §7.3)
                accept = self.accept_field(fields.pop(), tsrc, lineno, line)
            vals = []
            col = 1
            offsets = []
            pos_in = 0
            for f in fields:
                idx = line.find(f, pos_in)
                offsets.append(idx + 1 if idx >= 0 else col)
                pos_in = idx + len(f) if idx >= 0 else pos_in
            for j, f in enumerate(fields[2:], start=2):
                try:
                    v = exact.parse_number(f.strip())
                except (ValueError, ZeroDivisionError, exact.Inexact):
                    raise tsrc.error(f"not a number: {f.strip()!r}", lineno, offsets[j]) from None
                vals.append(value_to_wire(v))
            if len(vals) == 3:
                vals.append("0")
            if accept is not None:
                vals.append(accept)
            sid = fields[0].strip()
            if sid != last_id or not sessions:
                sessions.append([])
                last_id = sid
            sessions[-1].append(vals)
        if not sessions:
            raise self.err(t.pos, f"trace \"{t.path}\" has no data row")
        return {"ordered": bool(t.ordered), "sessions": sessions, "at": self.at(t.pos)}

    @staticmethod
    def accept_field(text: str, tsrc: Source, lineno: int, line: str) -> list[int]:
        """A trace row's `accept` field: whole numbers >= 0 separated by spaces, one per output number."""
        counts = []
        for word in text.split():
            if not word.isdigit() or len(word) > 6:
                raise tsrc.error(f"the accept field lists whole numbers of accepted drafts (0 to 999999) "
                                 f"separated by spaces, got {word!r}", lineno, max(1, line.rfind(word) + 1))
            counts.append(int(word))
        return counts

    def accept_count(self, e: Node, c: Ctx) -> dict:
        """The n of `accept (n, alpha);`: a whole number from 0 to MAX_ACCEPT_OUTPUTS, checked here
        when it folds to a constant, else by both engines when the statement runs."""
        out = self.cx(e, c)
        if is_num(out):
            v = val(out)
            if not exact.whole_in(v, 0, MAX_ACCEPT_OUTPUTS):
                raise self.err(e.pos, f"`accept (n, alpha)` needs n, the turn's output count, a whole number from 0 "
                               f"to {MAX_ACCEPT_OUTPUTS}, got {value_to_wire(v)}")
        return out

    def accept_rate(self, e: Node, c: Ctx) -> dict:
        """The alpha of `accept (n, alpha);`: in [0, 1], checked here when it folds to a constant."""
        out = self.cx(e, c)
        if is_num(out):
            v = val(out)
            if exact.is_inf(v) or not 0 <= v <= 1:
                raise self.err(e.pos, "`accept (n, alpha)` needs a per-draft acceptance rate alpha in [0, 1], got "
                               f"{value_to_wire(v)}: alpha is the chance that a draft is accepted")
        return out

    def server(self, s: Node) -> None:
        """The `server { … }` block: no `turn;` or `end;` (§8)."""
        if self.server_block is not None:
            raise self.err(s.pos, "a second `server` block (there is one server per workload)")
        for st in walk(s.body):
            if st.kind in ("turn", "end"):
                raise self.err(st.pos, f"`{st.kind};` is not allowed in the server block")
        self.server_block = self.block(s.body, SCtx("server", self.session_ctx()))

    def share_decl(self, n: Node) -> None:
        """`share maxmin;` or `share bottleneck;` (docs/language.md §11.14): at most one."""
        if self.share is not None:
            raise self.err(n.pos, f"`share {self.share[0]};` is already declared at {self.where(self.share[1])}; "
                                  "a program divides the rates of its flows one way: keep one `share`")
        self.share = (n.policy, n.pos)

    def flow(self, s: Node, c: Ctx, at: list) -> dict:
        """`run a, b, … (w);`: one job over several distinct ps stages (docs/language.md §11.14)."""
        if s.mode is not None:
            raise self.err(s.pos, f"`run … {s.mode}` is not allowed on a run over several stages: a flow is a "
                                  "plain job on ps stages; write the stages' run without `prefill`/`decode`")
        if s.growing is not None:
            raise self.err(s.pos, "`run … growing` is not allowed on a run over several stages: a growing run "
                                  "advances by the tokens an engine serves (docs/language.md §11.6)")
        refs = []
        fixed: dict[int, tuple] = {}   # stages named without a run-time index -> where first named
        for node in s.refs:
            ref = self.ref(node, "stage", c)
            if ref.get("base") is None:   # pragma: no cover - `tool` names no declared stage here
                raise self.err(node.pos, "a run over several stages needs declared ps stages")
            for i in range(ref["base"], ref["base"] + ref["count"]):
                kind = self.stages[i]["kind"]
                if kind != "ps":
                    what = "an engine" if kind == "step" else f"a {kind} stage"
                    raise self.err(node.pos, f"`{self.stages[i]['name']}` is {what}; a run over several stages "
                                             "needs ps stages (declare each `stage NAME : ps(φ);`)")
            index = ref.get("index")
            one = ref["base"] if ref["count"] == 1 else (ref["base"] + int(val(index)) if is_num(index) else None)
            if one is not None:
                if one in fixed:
                    raise self.err(node.pos, f"stage `{self.stages[one]['name']}` is named twice in this run (first "
                                             f"at {self.where(fixed[one])}); a flow crosses distinct stages")
                fixed[one] = node.pos
            refs.append(ref)
        self.has_flow = True
        return {"op": "flow", "stages": refs, "work": self.cx(s.work, c), "at": at}

    def gauge(self, g: Node) -> None:
        """`gauge NAME = e;`, read in the Gauge moment (§5)."""
        if g.name in self.gauge_pos:
            raise self.err(g.pos, f"gauge `{g.name}` is already declared at {self.where(self.gauge_pos[g.name])}")
        self.gauge_pos[g.name] = g.pos
        self.gauges.append({"name": g.name, "expr": self.cx(g.expr, Ctx("gauge", "a gauge", defs=self.defs)),
                            "at": self.at(g.expr.pos)})

    def claim(self, cl: Node) -> None:
        """`claim NAME [given (g)] : every|some iteration of S (e) | at end (e);` (docs/language.md
        "Claims"): S must be an engine (a stage with iterations); no draws, no session attributes."""
        if cl.name in self.claim_pos:
            raise self.err(cl.name_pos, f"claim `{cl.name}` is already declared at {self.where(self.claim_pos[cl.name])}")
        self.claim_pos[cl.name] = cl.pos
        stage, engine, ev = None, None, frozenset()
        if cl.form != "end":
            ref = self.ref(cl.ref, "stage", Ctx("const", "a claim's stage", defs=self.defs))
            if self.stage_kind(ref) != "step":
                raise self.err(cl.ref.pos, f"`{cl.form} iteration of {cl.ref.name}`: `{cl.ref.name}` is not an engine; "
                                           "only an engine has iterations (declare `engine NAME on DEVICE { … }`)")
            if ref["index"] is not None and not is_num(ref["index"]):
                raise self.err(cl.ref.pos, f"`{cl.form} iteration of {cl.ref.name}[…]`: the member of an engine "
                                           "array a claim watches must be a constant index")
            stage = ref["base"] + (int(val(ref["index"])) if ref["index"] is not None else 0)
            engine, ev = next(i for i in self.engines.values() if i.index == stage), frozenset(EV_EXECUTE)
        form = {"every": "`every iteration of …`", "some": "`some iteration of …`", "end": "`at end (…)`"}[cl.form]
        devfns = engine.devfns if engine is not None else {}   # the device's functions, as in `execute`
        body = self.cx(cl.expr, Ctx("claim_end" if cl.form == "end" else "claim", f"a claim's {form}",
                                    engine=engine, ev=ev, defs=self.defs, devfns=devfns))
        given = None
        if cl.given is not None:
            given = self.cx(cl.given, Ctx("claim_given", "a claim's `given (…)`", engine=engine, ev=ev,
                                          defs=self.defs, devfns=devfns))
        self.claims.append({"name": cl.name, "kind": cl.form, "stage": stage, "given": given, "expr": body,
                            "at": list(cl.pos)})

    # ------------------------------------------------------------------ attributes
    def check_attr_name(self, name: str, pos: tuple) -> None:
        """§4.7: an attribute may not share its name with `inf`, a context variable, a constant or a declaration."""
        if name == "inf":
            raise self.err(pos, "`inf` is the reserved name of +∞, not an attribute")
        if name in CTX_VARS and name != "computed":
            raise self.err(pos, f"`{name}` is a context variable; an attribute may not share its name")
        if name in self.consts:
            raise self.err(pos, f"`{name}` is a constant (defined at {self.where(self.consts[name][1])}); an attribute may not share its name")
        if name in self.decl_pos:
            raise self.err(pos, f"`{name}` is a pool, stage, device or engine, not an attribute")

    def new_attr(self, name: str, pos: tuple, write: bool) -> int:
        """The slot of attribute `name`, allocated on first sight; `write` records that something assigns it."""
        self.check_attr_name(name, pos)
        if name not in self.slot:
            self.slot[name] = len(self.attrs)
            self.attrs.append(name)
        if write:
            self.written.add(name)
        return self.slot[name]

    def assign(self, name: str, pos: tuple) -> int:
        """The slot of an attribute that a statement or binding assigns."""
        return self.new_attr(name, pos, write=True)

    def note_facing(self, c: Ctx) -> None:
        """Remember the attributes a scheduler-facing expression read (hidden ones are refused at the end)."""
        if c.record:
            for slot, pos in c.record:
                self.facing_reads.append((slot, pos, c.where))

    # ------------------------------------------------------------------ blocks and statements
    def block(self, stmts: list[Node], sc: SCtx) -> int:
        """Compile a statement list into a new block; returns its index."""
        idx = len(self.blocks)
        self.blocks.append(None)
        out: list[dict] = []
        for s in stmts:
            out.extend(self.collect(self.stmt, s, sc) or [])
        self.blocks[idx] = out
        return idx

    def new_block_ir(self, stmts: list[dict]) -> int:
        """Append an already compiled block; returns its index."""
        self.blocks.append(stmts)
        return len(self.blocks) - 1

    def target(self, name: str, pos: tuple, c: Ctx) -> tuple[str, tuple, Ctx]:
        """A `set`/`choose` target, through macro parameters bound to plain names."""
        while name in c.params:
            arg, actx = c.params[name]
            if arg.kind != "name":
                raise self.err(pos, f"parameter `{name}` is assigned here, so its argument must be a plain name")
            name, pos, c = arg.id, arg.pos, actx
        return name, pos, c

    def stmt(self, s: Node, sc: SCtx) -> list[dict]:
        """One statement of a session, server, `init` or `turn` block -> IR statements."""
        k = s.kind
        c = sc.c
        at = self.at(s.pos, sc)
        if k == "turn":
            if sc.block != "session":
                raise self.err(s.pos, "`turn;` is allowed only in the session block")
            return [{"op": "turn", "at": at}]
        if k == "end":
            if sc.block != "session":
                raise self.err(s.pos, "`end;` is allowed only in the session block")
            return [{"op": "end", "at": at}]
        if k == "set":
            name, npos, _ = self.target(s.name, s.name_pos, c)
            rc = replace(c, record=[])
            e = self.cx(s.expr, rc)
            slot = self.assign(name, npos)
            if any(x.get("k") == "obs" and x.get("f") in LIVE_OBS for x in ir_walk(e)):
                self.live_sets.setdefault(slot, s.pos)
            self.copies.append((slot, {x["slot"] for x in ir_walk(e) if x.get("k") == "attr"}, s.pos))
            return [{"op": "set", "slot": slot, "expr": e, "at": at}]
        if k == "accept":
            if sc.block != "turn":
                raise self.err(s.pos, "`accept (n, alpha);` is allowed only in the workload's `turn` block, as its "
                               "last statement: it draws the turn's acceptance counts (docs/language.md §7.3)")
            return [{"op": "accept", "count": self.accept_count(s.count, c), "rate": self.accept_rate(s.rate, c),
                     "at": at}]
        if k == "observe":
            e = self.cx(s.expr, c)
            if s.name not in self.observes:
                self.observes.append(s.name)
            return [{"op": "observe", "name": self.observes.index(s.name), "expr": e, "at": at}]
        if k == "branch":
            if s.coin:
                p = self.cx(s.cond, c)
                cond = {"k": "draw", "dist": "bernoulli", "args": [p]}
            else:
                cond = self.cx(s.cond, c)
                self.check_branch_const(cond, s.cond.pos)
            then = self.block(s.then, sc)
            els = self.block(s.els, sc) if s.els is not None else None
            return [{"op": "branch", "cond": cond, "then": then, "else": els, "at": at}]
        if k == "while":
            cond = self.cx(s.cond, c)
            body = self.block(s.body, sc)
            self.loops.append(("while", body, s.pos))
            return [{"op": "while", "cond": cond, "body": body, "at": at}]
        if k == "loop":
            body = self.block(s.body, sc)
            self.loops.append(("loop", body, s.pos))
            return [{"op": "loop", "body": body, "at": at}]
        if k == "fork":
            # §11.13: the body is a branch of the session; finish() checks what it may hold
            return [{"op": "fork", "body": self.block(s.body, sc), "at": at}]
        if k == "join":
            return [{"op": "join", "at": at}]
        if k == "choose":
            name, npos, _ = self.target(s.name, s.name_pos, c)
            slot = self.assign(name, npos)
            count = self.cx(s.count, c)
            if is_num(count) and not exact.whole_in(val(count), 1, INF):
                raise self.err(s.count.pos, f"`choose` picks among a whole number n >= 1 of candidates, got {count['v']}")
            return [{"op": "choose", "slot": slot, "count": count,
                     "keys": [self.cx(x, c) for x in s.keys], "at": at}]
        if k == "hold":
            return [self.hold(s, sc, at)]
        if k in ("grow", "load"):
            ref = self.ref(s.ref, "pool", c)
            if k == "load":
                self.refuse_on_content_pool(k, ref, s.pos)
            return [{"op": k, "pool": ref, "units": self.cx(s.units, c), "at": at}]
        if k in ("drop", "release"):
            ref = self.ref(s.ref, "pool", c)
            if k == "drop":
                self.refuse_on_content_pool(k, ref, s.pos)
            return [{"op": k, "pool": ref, "at": at}]
        if k == "run":
            ref = self.ref(s.ref, "stage", c)
            if s.mode != "plain" and self.stage_kind(ref) != "step":
                raise self.err(s.pos, f"`run … {s.mode}` needs an engine (a step stage)")
            if s.growing is not None and self.stage_kind(ref) != "step":
                # a growing run advances its position by the tokens an engine serves (§11.6);
                # a fifo, ps or delay stage serves none
                raise self.err(s.pos, "`run … growing` needs an engine (a step stage): a growing run "
                                      "advances by the tokens an engine serves (docs/language.md §11.6)")
            growing = self.pool_index(s.growing, c) if s.growing is not None else None
            run = {"op": "run", "stage": ref, "mode": s.mode, "work": self.cx(s.work, c), "growing": growing, "at": at}
            if s.speculate is not None:
                if s.mode == "plain":
                    raise self.err(s.speculate.pos, "`speculate` goes on a prefill or decode run (`run E decode (n) "
                                                    "growing P speculate (k)`, docs/language.md §7.3)")
                run["speculate"] = self.speculate_ir(s.speculate, s.growing, c)
            return [run]
        if k == "transfer":
            return self.transfer(s, c, at)
        if k == "flow":
            return [self.flow(s, c, at)]
        if k == "tool":
            work = self.cx(s.work, c)
            if s.where is not None and s.where[0] == "on":
                ref = self.ref(s.where[1], "stage", c)
            else:
                index = None
                if s.where is not None:
                    index = self.cx(s.where[1], c)
                ref = {"base": None, "count": 1, "index": index, "_tool": list(s.pos)}
                self.tool_refs.append(ref)
                if self.tool_pos is None:
                    self.tool_pos = s.pos
            return [{"op": "run", "stage": ref, "mode": "plain", "work": work, "growing": None, "at": at}]
        if k == "callstmt":
            return self.call_stmt(s, sc)
        if k == "qcall":  # every one inside `fn main` was lowered (serq/queues.py)
            raise queues.refuse_outside_main(s, self.err)
        if k in ("req_run", "req_cache", "req_lease", "at_admission"):  # pragma: no cover - grammar keeps them in request blocks
            raise self.err(s.pos, "only inside an engine's request block")
        raise self.err(s.pos, f"unexpected statement `{k}`")  # pragma: no cover

    def transfer(self, s: Node, c: Ctx, at: list) -> list[dict]:
        """`transfer S (w) from P to Q (n);` (docs/language.md §11.15): two IR statements, the copy
        (`transfer`: the holds of P and Q checked, a job of w on S) and its landing (`transfer_end`:
        Q's position + n, then P released), which the copy's job separates as it separates a `run`
        from the statement after it. S is a link (fifo, ps or delay), or several ps links at once
        (`transfer a, b (w) …`: the copy is a flow, §11.14); P and Q two pools."""
        if len(s.stages) > 1:
            # over several links at once (the sender's and the receiver's NIC): a flow's stages, with
            # a flow's checks (distinct ps stages, docs/language.md §11.14)
            flow = self.flow(Node("flow", s.pos, refs=s.stages, mode=None, work=s.work, growing=None), c, at)
            link: dict = {"stages": flow["stages"]}
        else:
            stage = self.ref(s.stages[0], "stage", c)
            for i in range(stage["base"], stage["base"] + stage["count"]):
                if self.stages[i]["kind"] == "step":
                    raise self.err(s.stages[0].pos, f"`transfer` copies over a link (a fifo, ps or delay stage); "
                                                    f"`{self.stages[i]['name'].split('[')[0]}` is an engine")
            link = {"stage": stage}
        src = self.ref(s.src, "pool", c)
        dst = self.ref(s.dst, "pool", c)
        if self.pools[dst["base"]].get("share") == "content":
            name = self.pools[dst["base"]]["name"].split("[")[0]
            raise self.err(s.dst.pos, f"`transfer … to {name}`: pool `{name}` is `share content`; its position is "
                                      "the tokens its growing runs schedule, not loaded")
        if self.same_pool(src, dst):
            member = src["base"] + (int(val(src["index"])) if src["index"] is not None else 0)
            name = self.pools[member]["name"]
            raise self.err(s.dst.pos, f"`transfer` from pool `{name}` to itself: name two pools (the KV's pool "
                                      "now and the pool it moves to)")
        work = self.cx(s.work, c)
        units = self.cx(s.units, c)
        self.transfers.append((src, s.src.pos, dst, s.dst.pos))
        return [{"op": "transfer", **link, "work": work, "from": src, "to": dst, "at": at},
                {"op": "transfer_end", "from": src, "to": dst, "units": units, "at": at}]

    @staticmethod
    def same_pool(a: dict, b: dict) -> bool:
        """Two pool references that name one pool whatever their indices read."""
        if a["base"] != b["base"]:
            return False
        if a["index"] is None:
            return True
        return is_num(a["index"]) and is_num(b["index"]) and val(a["index"]) == val(b["index"])

    def check_transfers(self) -> None:
        """A transfer names pools the session can hold (docs/language.md §11.15): each of P and Q
        (any member of an array) is taken by some hold of the program, a `hold` statement or an
        engine call's (its `taking` pools). Whether the session holds them when the transfer runs
        is a run-time check."""
        held: set[int] = set()
        for blk in self.blocks:
            for st in blk or []:
                if st["op"] == "hold":
                    for hp in st["pools"]:
                        r = hp["pool"]
                        held.update(range(r["base"], r["base"] + r["count"]))
        for src, spos, dst, dpos in self.transfers:
            for ref, pos, role in ((src, spos, "from"), (dst, dpos, "to")):
                if not held & set(range(ref["base"], ref["base"] + ref["count"])):
                    name = self.pools[ref["base"]]["name"].split("[")[0]
                    raise self.err(pos, f"`transfer … {role} {name}`: no hold of this program takes pool `{name}`, so "
                                        "no session can hold it here; take it in a `hold` (with `lease` to keep it "
                                        "past the scope) before the transfer")

    def call_stmt(self, s: Node, sc: SCtx) -> list[dict]:
        """`NAME (…);`: a statement definition expanded in place, or an engine call."""
        name = s.fname
        c = sc.c
        if name in c.defs:
            d = c.defs[name]
            if not d.node.stmt:
                raise self.err(s.pos, f"`{name}` is an expression definition; use it in an expression, not as a statement")
            self.expanding(name, s.pos)
            params = self.bind_params(d, s.args, s.pos, c)
            inner = replace(c, params=params, defs=d.scope)
            sc2 = SCtx(sc.block, inner, at=sc.at if sc.at is not None else s.pos)
            out = []
            for st in d.node.body:
                out.extend(self.stmt(st, sc2))
            return out
        index = s.f.get("index")
        if index is not None:
            if name not in self.engine_arrays:
                raise self.err(s.fname_pos, f"`{name}[…] (…);` is a request to a member of an engine array, and `{name}` "
                                            "is not one (declare `engine NAME[N] on D[j] { … }`)")
            return self.array_call(name, index, s, sc)
        if name in self.engine_arrays:
            raise self.err(s.fname_pos, f"`{name}` is an array of {len(self.engine_arrays[name])} engines: "
                                        f"write `{name}[i] (…);`")
        if name in self.engines:
            return self.engine_call(self.engines[name], s, sc)
        if name in self.defs:
            raise self.err(s.pos, f"`{name}` is defined after this use (a definition sees only earlier ones; no recursion)")
        if name in FUNCS or name in STAGE_OBS or name in POOL_OBS:
            raise self.err(s.pos, f"`{name}(…)` is a value, not a statement")
        raise self.err(s.pos, f"unknown engine or statement definition `{name}`", about=name)

    def hold(self, s: Node, sc: SCtx, at: list) -> dict:
        """`hold …` (§11.4): header read in the Admit moment, body, `cache` clause."""
        c = sc.c
        hc = Ctx("admit", "a hold header", defs=c.defs, params=c.params, record=[])
        pools = [self.pool_item(tk, c, lambda where: replace(hc, where=where)) for tk in s.pools]
        if s.reuse is not None and s.cache is None:
            raise self.err(s.reuse.pos, "`reuse (…)` needs a `cache (…)` clause on the hold")
        reuse = self.cx(s.reuse, replace(hc, where="`reuse`")) if s.reuse is not None else None
        bindings = []
        impure: dict[str, tuple] = {}
        for name, npos, ex in s.bindings:
            name, npos, _ = self.target(name, npos, c)
            e = self.cx(ex, replace(hc, where="an `at admission` binding"))
            slot = self.assign(name, npos)
            bindings.append({"slot": slot, "expr": e})
            if any(x.get("k") == "obs" for x in ir_walk(e)):
                impure[name] = npos
        self.note_facing(hc)
        for slot, pos in hc.record:
            self.header_reads.append((slot, pos))
        cache = self.cx(s.cache, c) if s.cache is not None else None
        inner = replace(c, hold=HoldCtx(has_cache=s.cache is not None, impure=impure))
        body = self.block(s.body, SCtx(sc.block, inner, at=sc.at))
        # read in the session moment when the hold's end happens (docs/async.md §3 item 1)
        eos = self.cx(s.eos, inner) if s.eos is not None else None
        hold = {"op": "hold", "pools": pools, "reuse": reuse, "bindings": bindings, "body": body, "cache": cache,
                "eos": eos, "request": None, "at": at}
        lease = self.lease_clause(s.lease, [p["pool"] for p in pools], c) if s.lease is not None else None
        if lease is not None:
            hold["lease"] = lease
        if eos is not None:
            self.eos_holds.append((hold, s.eos.pos))
        return hold

    def lease_clause(self, node: Node, refs: list, c: Ctx) -> dict | None:
        """`lease P (t)` (docs/language.md §11.4): P is one of the hold's pools; t is read in the Session
        moment when the scope ends (0 = no lease, inf = until `release P` or the session's end).
        The key is present only on a hold with the clause, so other programs' IR is unchanged."""
        ref = self.ref(node.ref, "pool", c)
        if not any(r["base"] == ref["base"] and r.get("index") == ref.get("index") for r in refs):
            raise self.err(node.ref.pos, "`lease P (…)` names a pool the hold does not take; lease one of its pools")
        time = self.cx(node.time, replace(c, where="a lease time"))
        if is_num(time) and val(time) < 0:
            raise self.err(node.time.pos, f"a lease time must be >= 0 seconds (0 = no lease), got {time['v']}")
        if is_num(time) and val(time) == 0:
            return None   # a constant 0 leases nothing: the hold is lowered as without the clause
        return {"pool": ref, "time": time}

    def check_branch_const(self, cond: dict, pos: tuple) -> None:
        """§10: a constant branch condition must be 0 or 1."""
        if is_num(cond) and val(cond) not in (0, 1):
            raise self.err(pos, f"this branch condition is the constant {cond['v']}, not 0 or 1; for a coin write `branch with (p)`")

    def check_units(self, ref: dict, units: dict, pos: tuple) -> None:
        """§10: constant units or reserves above the pool's capacity (rounded up to its block) are an error."""
        if not is_num(units) or (ref.get("index") is not None and not is_num(ref["index"])):
            return
        u = val(units)
        pool = self.pools[ref["base"] + (int(val(ref["index"])) if ref.get("index") is not None else 0)]
        cap = value_from_wire(pool["cap"])
        if u < 0:
            raise self.err(pos, f"a negative amount ({units['v']}) of pool `{pool['name']}`")
        b = value_from_wire(pool["block"]) if pool["block"] is not None else None
        need = u
        if b is not None and not exact.is_inf(u):
            q = u / b
            need = (-(-q.numerator // q.denominator)) * b
        if need > cap:
            raise self.err(pos, f"this asks for {units['v']} units of pool `{pool['name']}`, above its capacity {pool['cap']}: it would always be rejected")

    def stage_kind(self, ref: dict) -> str:
        """The kind of the referenced stage (`delay` for the implicit `tool`)."""
        if ref.get("base") is None:
            return "delay"
        return self.stages[ref["base"]]["kind"]

    def bind_params(self, d: DefInfo, args: list[Node], pos: tuple, c: Ctx) -> dict:
        """Bind a definition's parameters to the call's argument syntax (§2: a draw only to a parameter read once)."""
        params = d.node.params
        if len(args) != len(params):
            raise self.err(pos, f"`{d.node.name}` takes {len(params)} argument(s), got {len(args)}")
        body_nodes = list(walk(d.node.body))
        out = {}
        for (p, ppos), a in zip(params, args):
            if any(n.kind == "draw" for n in walk(a)) or (a.kind == "draw"):
                reads = sum(1 for n in body_nodes if (n.kind == "name" and n.id == p) or (n.kind == "ref" and n.name == p))
                if reads != 1:
                    raise self.err(a.pos, f"an argument with a draw (`~…`) may only go to a parameter read exactly once; `{p}` of `{d.node.name}` is read {reads} time(s)")
            out[p] = (a, c)
        return out

    # ------------------------------------------------------------------ references
    def ref(self, node: Node, kind: str, c: Ctx) -> dict:
        """A reference to a pool or stage: `{base, count, index}` (an index only for arrays)."""
        if node.kind in ("ref", "name", "indexed"):
            name = node.name if node.kind == "ref" else node.id
            index = node.index if node.kind in ("ref", "indexed") else None
        elif node.kind == "qref":  # every one inside `fn main` was lowered (serq/queues.py)
            raise queues.refuse_outside_main(node, self.err)
        else:
            raise self.err(node.pos, f"expected a {kind} name here")
        pos = node.pos
        while name in c.params and index is None:
            arg, actx = c.params[name]
            if arg.kind not in ("name", "indexed"):
                raise self.err(pos, f"parameter `{name}` is used as a {kind}, so its argument must be a {kind} name")
            name, index, pos, c = arg.id, (arg.index if arg.kind == "indexed" else None), arg.pos, actx
        table = self.pool_names if kind == "pool" else self.stage_names
        if name not in table:
            other = self.stage_names if kind == "pool" else self.pool_names
            if name in other:
                raise self.err(pos, f"`{name}` is a {'stage' if kind == 'pool' else 'pool'}, not a {kind}")
            if name == "tool" and kind == "stage":
                raise self.err(pos, "use `tool (…);` for the tool stage, or declare `stage tool : delay;`")
            raise self.err(pos, f"unknown {kind} `{name}`" + (" (declare it above its first use)" if kind == "stage" else ""),
                           about=name)
        entry = table[name]
        base, count, is_array = entry[0], entry[1], entry[-1]
        if index is None:
            if is_array:
                raise self.err(pos, f"`{name}` is an array of {count}; write `{name}[i]`")
            return {"base": base, "count": 1, "index": None}
        if not is_array:
            raise self.err(pos, f"`{name}` is not an array")
        ie = self.cx(index, replace(c, where="an index"))
        if is_num(ie):
            v = val(ie)
            if not exact.whole_in(v, 0, count - 1):
                raise self.err(index.pos, f"index {ie['v']} is outside `{name}[0 … {count - 1}]`")
        return {"base": base, "count": count, "index": ie}

    def speculate_ir(self, node: Node, growing: Any, c: Ctx) -> dict:
        """`speculate (k)` on a prefill or decode (docs/language.md §7.3): read once, when the run starts,
        like its work; it needs a growing pool (the positions the rejected drafts give back are that pool's)."""
        if growing is None:
            raise self.err(node.pos, "`speculate` needs a growing run (`decode (n) growing P speculate (k)`): "
                                     "the drafts' positions are the pool's (docs/language.md §7.3)")
        return {"drafts": self.cx(node.drafts, c), "at": self.at(node.pos)}

    def pool_index(self, node: Node, c: Ctx) -> int:
        """The index of a pool named without a run-time index (a `growing` pool)."""
        r = self.ref(node, "pool", c)
        if r["index"] is None:
            return r["base"]
        if is_num(r["index"]):
            return r["base"] + int(val(r["index"]))
        raise self.err(node.pos, "the pool of `growing` must be a fixed pool (a constant index)")

    # ------------------------------------------------------------------ expressions
    def cx(self, e: Node, c: Ctx) -> dict:
        """Compile an expression in context c: names resolved, moments checked (§4, §5), constants folded."""
        k = e.kind
        attrs_ok, ctx_ok, draws_ok, obs_ok, job_ok, facing = MOMENTS[c.moment]
        if k == "num":
            try:
                return num(exact.parse_number(e.text))
            except exact.Inexact:
                raise self.err(e.pos, f"number {e.text} is out of range") from None
        if k == "name":
            return self.name(e, c)
        if k == "bin":
            a = self.cx(e.a, c)
            b = self.cx(e.b, c)
            if is_num(a) and is_num(b):
                return self.fold(e, lambda: exact.BINOPS[e.op](val(a), val(b)) if e.op in exact.BINOPS
                                 else exact.b2v(exact.truth(val(a)) and exact.truth(val(b))) if e.op == "&&"
                                 else exact.b2v(exact.truth(val(a)) or exact.truth(val(b))),
                                 {"k": "bin", "op": e.op, "a": a, "b": b})
            return {"k": "bin", "op": e.op, "a": a, "b": b}
        if k == "un":
            a = self.cx(e.a, c)
            if is_num(a):
                return self.fold(e, lambda: exact.neg(val(a)) if e.op == "neg" else exact.b2v(not exact.truth(val(a))),
                                 {"k": "un", "op": e.op, "a": a})
            return {"k": "un", "op": e.op, "a": a}
        if k == "cond":
            cc = self.cx(e.c, c)
            a = self.cx(e.a, c)
            b = self.cx(e.b, c)
            if is_num(cc):
                return a if exact.truth(val(cc)) else b
            return {"k": "cond", "c": cc, "a": a, "b": b}
        if k == "call":
            return self.call(e, c)
        if k == "draw":
            if not draws_ok:
                what = "a constant" if c.moment == "const" else c.where
                raise self.err(e.pos, f"a draw (`~{e.dist}`) cannot appear in {what}" +
                               ("" if c.moment == "const" else ": it is re-read there (docs/language.md §4.3)"))
            if e.dist not in DISTS:
                raise self.err(e.dist_pos, f"unknown distribution `~{e.dist}` (known: {', '.join('~' + d for d in DISTS)})")
            if len(e.args) != DISTS[e.dist]:
                raise self.err(e.pos, f"`~{e.dist}` takes {DISTS[e.dist]} argument(s), got {len(e.args)}")
            return {"k": "draw", "dist": e.dist, "args": [self.cx(a, c) for a in e.args]}
        if k == "engval":
            if c.engine is None:
                raise self.err(e.pos, f"`{e.name}` is a value of an engine: it can be read only in an engine's `tokens cap`, schedule or `execute`, "
                                      "or in a claim `every | some iteration of ENGINE (…)`")
            if e.name not in EV_ALL:
                raise self.err(e.pos, f"unknown engine value `{e.name}`")
            if e.name not in c.ev:
                homes = [w for w, s in (("tokens cap", EV_TOKENS_CAP), ("the schedule", EV_SCHEDULE), ("execute", EV_EXECUTE)) if e.name in s]
                raise self.err(e.pos, f"`{e.name}` cannot be read in {c.where} (readable in {', '.join(homes)})")
            return {"k": "eng", "name": e.name}
        if k == "kengval":
            # K's bare engine value in a step stage's `cost` or `iteration` block (§16): the S value,
            # unless the word also names something in scope there, which would be hidden
            other = self.k_name_conflict(e.id, c)
            if other is not None:
                raise self.err(e.pos, f"`{e.id}` in a K step stage's `{e.item}` is the engine value `{e.name}`, but it "
                                      f"also names {other} here: rename that, or write `{e.name}` in an S engine")
            return self.cx(Node("engval", e.pos, name=e.name), c)
        if k == "agg":
            return self.aggregate(e, c)
        if k == "indexed":
            if e.id in self.pool_names or e.id in self.stage_names:
                raise self.err(e.pos, f"`{e.id}[…]` is a pool or stage; only an observable such as `used({e.id}[…])` takes it")
            raise self.err(e.pos, f"`{e.id}` is not an array")
        if k in ("qref", "qdefcall"):  # every one inside `fn main` was lowered (serq/queues.py)
            raise queues.refuse_outside_main(e, self.err)
        if k == "args_call":
            raise self.err(e.pos, "`args.number(…)` must be the whole initializer of a `let` inside `fn main`")
        raise self.err(e.pos, f"unexpected expression `{k}`")  # pragma: no cover

    def fold(self, e: Node, f, unfolded: dict) -> dict:
        """The folded constant, or the unfolded expression when the value is not rational; NaN is an error."""
        try:
            return num(f())
        except exact.NaNError:
            raise self.err(e.pos, "this constant expression is NaN (like 0/0 or inf - inf)") from None
        except exact.Inexact:
            return unfolded
        except (OverflowError, ValueError, ZeroDivisionError):
            return unfolded

    def name(self, e: Node, c: Ctx) -> dict:
        """A name in an expression, in the resolution order of docs/frontend.md (parameters first,
        attributes last)."""
        n = e.id
        if n in c.params:
            arg, actx = c.params[n]
            return self.cx(arg, replace(c, params=actx.params, defs=actx.defs, devfns=actx.devfns,
                                        locals=actx.locals))
        if n == "inf":
            return num(INF)
        attrs_ok = MOMENTS[c.moment][0]
        if n in c.locals:
            if attrs_ok:
                self.engine_name_reads.append((n, e.pos, c.engine.name, "schedule `let`"))
            return {"k": "local", "index": c.locals[n]}
        if c.engine is not None and n in c.engine.regs:
            if attrs_ok:
                self.engine_name_reads.append((n, e.pos, c.engine.name, "register"))
            return {"k": "reg", "stage": c.engine.index, "index": c.engine.regs[n]}
        if n in self.consts:
            return copy.deepcopy(self.consts[n][0])
        attrs_ok, ctx_ok, draws_ok, obs_ok, job_ok, facing = MOMENTS[c.moment]
        if n in CTX_VARS and not (n == "computed" and "computed" not in ctx_ok):
            if n in ctx_ok:
                return {"k": "ctx", "name": n}
            raise self.err(e.pos, f"context variable `{n}` cannot be read in {c.where}; it is readable in {CTX_HOME[n]}")
        if n in JOB_KEYS:
            if job_ok:
                return {"k": "job", "name": n}
            if c.moment == "admit_only":
                raise self.err(e.pos, f"`{n}` (a per-request key) cannot be read in {c.where}: a waiting head has "
                                      "no run (per-request keys are a resident's, docs/language.md §4.5)")
            if n == "admission":
                raise self.err(e.pos, f"`admission` (a per-request key) cannot be read in {c.where}; it is readable in `advance … by (…)`, `only (…)` and preemption keys")
        if n in self.pool_names or n in self.stage_names or n in self.devices or n in self.device_arrays or n == "tool":
            raise self.err(e.pos, f"`{n}` is a pool, stage, device or engine, not a value")
        if n in c.defs or n in c.devfns:
            raise self.err(e.pos, f"`{n}` is a definition; call it as `{n}(…)`")
        if not attrs_ok:
            if c.moment == "const":
                if n in self.slot and n not in BUILTIN_ATTRS[:0]:
                    raise self.err(e.pos, f"`{n}` is a session attribute; a constant cannot read it")
                raise self.err(e.pos, f"unknown constant `{n}`", about=n)
            bare = kstep.K_ENGINE_VALUES.get(n) if c.engine is not None else None
            hint = (f" (`{n}` is the engine value `{bare}` only in a K step stage's `cost`, docs/language.md §16)"
                    if bare and n not in kstep.K_ITERATION_VALUES else "")
            raise self.err(e.pos, f"session attribute `{n}` cannot be read in {c.where}{hint}")
        if n == "cached" and c.hold is not None and not c.hold.has_cache:
            raise self.err(e.pos, "`cached` is read in a hold without a `cache (…)` clause (it would always be 0)")
        if c.hold is not None and n in c.hold.impure:
            raise self.err(e.pos, f"`{n}` is an `at admission` binding that reads live state (at {self.where(c.hold.impure[n])}); the hold's body may not read it (read `cached` instead)")
        slot = self.new_attr(n, e.pos, write=False)
        self.first_read.setdefault(n, e.pos)
        if c.record is not None:
            c.record.append((slot, e.pos))
        return {"k": "attr", "slot": slot}

    def expanding(self, name: str, pos) -> None:
        """Count one expansion of the definition `name` at POS; past MAX_EXPANSIONS a SerqError
        there. Definitions are expanded in place, so one that uses an earlier one twice doubles
        the program per level (40 levels: 2^40 copies, which never finishes)."""
        self.expansions += 1
        if self.expansions > MAX_EXPANSIONS:
            raise self.err(pos, f"expanding `{name}` here passes the limit of {MAX_EXPANSIONS} definition "
                                "expansions in one program (definitions are expanded in place: one that "
                                "uses another twice doubles the program per level; docs/frontend.md \"Limits\")")

    def call(self, e: Node, c: Ctx) -> dict:
        """A call in an expression: a definition, a time function, a built-in function or an observable."""
        f = e.fname
        attrs_ok, ctx_ok, draws_ok, obs_ok, job_ok, facing = MOMENTS[c.moment]
        if f in c.devfns:
            d = c.devfns[f]
            params = self.bind_params(d, e.args, e.pos, c)
            return self.cx(d.node.body, replace(c, params=params, defs=d.scope))
        if f in c.defs:
            d = c.defs[f]
            if d.node.stmt:
                raise self.err(e.pos, f"`{f}` is a statement definition; it cannot be used in an expression")
            self.expanding(f, e.pos)
            params = self.bind_params(d, e.args, e.pos, c)
            return self.cx(d.node.body, replace(c, params=params, defs=d.scope))
        if f in FUNCS:
            if len(e.args) != FUNCS[f]:
                raise self.err(e.pos, f"`{f}` takes exactly {FUNCS[f]} argument(s), got {len(e.args)}")
            args = [self.cx(a, c) for a in e.args]
            unf = {"k": "fn", "f": f, "args": args}
            if all(is_num(a) for a in args):
                vs = [val(a) for a in args]
                if f == "min":
                    return self.fold(e, lambda: min(vs[0], vs[1]), unf)
                if f == "max":
                    return self.fold(e, lambda: max(vs[0], vs[1]), unf)
                if f == "pow":
                    return self.fold(e, lambda: exact.power(vs[0], vs[1]), unf)
                return self.fold(e, lambda: exact.FUNCS1[f](vs[0]), unf)
            return unf
        if f == "blocksize":
            if c.moment == "const":
                raise self.err(e.pos, "`blocksize(…)` cannot be used in a `let` (it is folded where the pool is known)")
            if len(e.args) != 1:
                raise self.err(e.pos, "`blocksize` takes exactly 1 argument (a pool)")
            ref = self.ref(e.args[0], "pool", c)
            pool = self.pools[ref["base"]]
            if pool["block"] is None:
                raise self.err(e.pos, f"`blocksize({pool['name'].split('[')[0]})`: the pool has no `block`")
            return {"k": "num", "v": pool["block"]}
        if f in STAGE_OBS or f in POOL_OBS:
            if not obs_ok:
                what = "a constant" if c.moment == "const" else c.where
                raise self.err(e.pos, f"the observable `{f}(…)` cannot be read in {what}")
            arity = ESTIMATORS.get(f, 1)
            if len(e.args) != arity:
                raise self.err(e.pos, f"`{f}` takes exactly {arity} argument{'s' if arity > 1 else ''}"
                                      + (" (a stage, the service on a hit, the extra service on a miss)"
                                         if f == "price" else ""))
            if f in STAGE_OBS:
                ref = self.ref(e.args[0], "stage", c)
                if f in ("budget_left", "running_served", "running_chunks") and self.stage_kind(ref) != "step":
                    raise self.err(e.args[0].pos, f"`{f}` takes an engine")
                if f in ESTIMATORS:
                    return self.estimator(e, f, ref, c)
                return {"k": "obs", "f": f, "stage": ref}
            return {"k": "obs", "f": f, "pool": self.ref(e.args[0], "pool", c)}
        if f in self.engines or f in self.engine_arrays:
            raise self.err(e.pos, f"a request to engine `{f}` is a statement (`{f} (…);` in the server), not a value")
        if f in self.defs:
            raise self.err(e.pos, f"`{f}` is defined after this use (a definition sees only earlier ones; no recursion)")
        known = sorted(FUNCS) + ["blocksize"] + sorted(STAGE_OBS | POOL_OBS)
        raise self.err(e.pos, f"unknown function `{f}` (known: {', '.join(known)}, and earlier `def`s)", about=f)

    def estimator(self, e: Node, f: str, ref: dict, c: Ctx) -> dict:
        """`est_lambda | est_rho | est_wait (s)`, `price(s, s_hit, ds)` (§4.4): the stages and
        engines they read keep their estimates (IR `"estimates": true`, every stage of an array
        read by index)."""
        for b in range(ref["base"], ref["base"] + ref["count"]):
            if b < len(self.stages):
                self.stages[b]["estimates"] = True
            else:   # a member of the engine array being declared, after this body's own
                self.estimates_ahead.add(b)
        out = {"k": "obs", "f": f, "stage": ref}
        if f == "price":
            out["args"] = [self.cx(a, c) for a in e.args[1:]]
        return out

    def aggregate(self, e: Node, c: Ctx) -> dict:
        """`sum | max | min j in N (e)`: expanded into N copies of e (§3)."""
        if e.count_is_num:
            try:
                n = exact.parse_number(e.count)
            except exact.Inexact:
                n = Fraction(-1)
        else:
            if e.count not in self.consts:
                raise self.err(e.count_pos, f"the count of an aggregate must be a constant; `{e.count}` is not one")
            ir = self.consts[e.count][0]
            n = val(ir) if is_num(ir) else Fraction(-1)
        if not exact.whole_in(n, 1, 4096):
            raise self.err(e.count_pos, "the count of an aggregate must be a whole number from 1 to 4096")
        parts = []
        for j in range(int(n)):
            params = dict(c.params)
            params[e.var] = (Node("num", e.pos, text=str(j)), c)
            parts.append(self.cx(e.body, replace(c, params=params)))
        acc = parts[0]
        for p in parts[1:]:
            if e.op == "sum":
                acc = {"k": "bin", "op": "+", "a": acc, "b": p}
                if is_num(acc["a"]) and is_num(p):
                    acc = self.fold(e, lambda a=acc: exact.add(val(a["a"]), val(a["b"])), acc)
            else:
                acc = {"k": "fn", "f": e.op, "args": [acc, p]}
                if is_num(acc["args"][0]) and is_num(p):
                    fn = max if e.op == "max" else min
                    acc = self.fold(e, lambda a=acc: fn(val(a["args"][0]), val(a["args"][1])), acc)
        return acc

    # ------------------------------------------------------------------ whole-program checks
    def passes_time(self, block: int, seen: set) -> bool:
        """§10: does every path through the block let time pass?"""
        for s in self.blocks[block]:
            op = s["op"]
            if op == "end":
                return True
            if op in ("run", "flow", "transfer") and not (is_num(s["work"]) and val(s["work"]) == 0):
                return True
            if op == "hold" and self.passes_time(s["body"], seen):
                return True
            if op == "branch" and s["else"] is not None and self.passes_time(s["then"], seen) and self.passes_time(s["else"], seen):
                return True
            if op == "loop" and self.passes_time(s["body"], seen):
                return True
            if op == "fork" and self.passes_time(s["body"], seen):
                return True   # its `join;`, which must follow in this block, waits for the branch
            if op == "turn" and self.server_block is not None and self.server_block not in seen:
                if self.passes_time(self.server_block, seen | {self.server_block}):
                    return True
        return False

    def finish(self) -> None:
        """The whole-program checks: unused `--set`s, loops, live state, hidden reads, unknown
        names, the tool stage."""
        if self.settings:
            name = sorted(self.settings)[0]
            if name in self.input_of:
                raise SerqError(f"--set {name}: `{name}` is the local name of the input \"{self.input_of[name]}\"; "
                                f"write --set {self.input_of[name]}=…")
            if name in self.consts:
                raise SerqError(f"--set {name}: `{name}` is a plain `let`, which cannot be set; only `args.number` inputs can"
                                + (f" (known inputs: {', '.join(self.inputs)})" if self.inputs else ""))
            known = ", ".join(self.inputs) if self.inputs else "none: the program declares no `args.number` input"
            raise SerqError(f"--set {name}: unknown input `{name}` (known inputs: {known})")
        for hold, pos in self.eos_holds:
            self.check_eos(hold, pos)
        for n, pos, eng, what in self.engine_name_reads:
            if n in self.slot:
                raise self.err(pos, f"`{n}` is both a {what} of engine `{eng}` and a session attribute, and both "
                                    "can be read here; rename one (docs/language.md §4.7)")
        for kind, body, pos in self.loops:
            if not self.passes_time(body, set()):
                raise self.err(pos, f"the body of this `{kind}` does not let time pass on every path "
                                    "(it needs a `run` with non-zero work, a `hold` whose body does, or `end`)")
        # A value copied from one set from live state is just as frozen: `set f = free(P); set g = f;`.
        changed = True
        while changed:
            changed = False
            for slot, reads, pos in self.copies:
                if slot not in self.live_sets and reads & self.live_sets.keys():
                    self.live_sets[slot] = pos
                    changed = True
        for slot, pos in self.header_reads:
            if slot in self.live_sets:
                name = self.attrs[slot]
                raise self.err(pos, f"`{name}` is set from live state at {self.where(self.live_sets[slot])} and read here in a hold header; compute it in `at admission` instead")
        hidden = {self.slot[h] for h in self.hidden}
        for slot, pos, where in self.facing_reads:
            if slot in hidden:
                raise self.err(pos, f"`{self.attrs[slot]}` is hidden (declared at {self.where(self.hidden_pos[self.attrs[slot]])}); the scheduler cannot read it in {where}")
            if slot in self.hidden_params:
                h, hpos = self.hidden_params[slot]
                raise self.err(pos, f"`{self.attrs[slot]}` is given the hidden `{h}` at {self.where(hpos)}; "
                                    f"the scheduler cannot read it in {where}")
        for name in self.attrs:
            if name not in self.written and name not in self.hidden_pos:
                pos = self.first_read.get(name)
                if pos is not None:
                    bare = kstep.K_ENGINE_VALUES.get(name)
                    where = "`cost` and `iteration` block" if name in kstep.K_ITERATION_VALUES else "`cost`"
                    hint = (f" (`{name}` is the engine value `{bare}` only in a K step stage's {where}, "
                            "docs/language.md §16)") if bare else ""
                    raise self.err(pos, f"unknown name `{name}`: not a constant, and no `set`, `choose`, binding or "
                                        f"request parameter assigns it{hint}")
        tool_index = None
        if self.tool_refs:
            if "tool" in self.stage_names:
                b, cnt, kind, pos, is_arr = self.stage_names["tool"]
                tool_index = b
                for r in self.tool_refs:
                    if is_arr and r["index"] is None:
                        raise self.err(tuple(r["_tool"]), "`tool` is a stage array: write `tool [i] (…);`")
                    if not is_arr and r["index"] is not None:
                        raise self.err(tuple(r["_tool"]), "`tool` is not an array")
                    if is_arr and is_num(r["index"]) and not exact.whole_in(val(r["index"]), 0, cnt - 1):
                        raise self.err(tuple(r["_tool"]), f"index {r['index']['v']} is outside `tool[0 … {cnt - 1}]`")
                    r["count"] = cnt
            else:
                tool_index = len(self.stages)
                self.stages.append({"name": "tool", "kind": "delay"})
                for r in self.tool_refs:
                    if r["index"] is not None:
                        raise self.err(tuple(r["_tool"]), "`tool [i]` needs a declared stage array `tool`")
            for r in self.tool_refs:
                r["base"] = tool_index
                del r["_tool"]
        self.check_transfers()
        self.check_forks()

    # ------------------------------------------------------------------ fork and join (§11.13)
    def check_forks(self) -> None:
        """Every `fork` is joined later in its block, every `join;` has a `fork` before it since the
        previous `join;`; a branch does anything but `turn;` and `end;`; the thread that forked only
        computes, observes and runs on stages that are not engines until its `join;`. A fork whose
        block holds a pool (a sub-agent) is marked `"own"`: its attributes are its own (§11.13).
        (Run after the tool stage is resolved: a `tool` run's stage kind is known only then.)"""
        for blk in self.blocks:
            unjoined = None
            for st in blk:
                if st["op"] == "fork":
                    unjoined = unjoined or st
                    self.check_branch_body(st["body"])
                    if self.holds_in(st["body"]):
                        st["own"] = True
                elif st["op"] == "join":
                    if unjoined is None:
                        raise self.err(tuple(st["at"]), "`join;` without a `fork` before it in this block (since the "
                                                        "previous `join;`): there is no branch to wait for")
                    unjoined = None
                elif unjoined is not None:
                    self.check_waiting_stmt(st)
            if unjoined is not None:
                raise self.err(tuple(unjoined["at"]), "this `fork` is never joined: write `join;` after it in the "
                                                      "same block (docs/language.md §11.13)")

    def check_branch_body(self, block: int) -> None:
        """A branch may do anything a session does but `turn;` and `end;`, at any depth (§11.13)."""
        for st in self.blocks[block]:
            if st["op"] in ("turn", "end"):
                raise self.err(tuple(st["at"]), f"`{st['op']};` is not allowed inside a `fork` block: a branch "
                                                "ends at the end of its block (docs/language.md §11.13)")
            for key in ("then", "else", "body"):
                if isinstance(st.get(key), int):
                    self.check_branch_body(st[key])

    def holds_in(self, block: int) -> bool:
        """Does the block hold a pool (a `hold` or an engine call) at any depth?"""
        return any(st["op"] == "hold" or any(isinstance(st.get(key), int) and self.holds_in(st[key])
                                             for key in ("then", "else", "body"))
                   for st in self.blocks[block])

    def check_waiting_stmt(self, st: dict) -> None:
        """One statement of a thread between its `fork` and its `join;`: §11.13's list."""
        op = st["op"]
        pos = tuple(st["at"])
        where = "between a `fork` and its `join;`"
        if op in ("branch", "while", "loop"):
            for key in ("then", "else", "body"):
                if st.get(key) is not None:
                    for inner in self.blocks[st[key]]:
                        self.check_waiting_stmt(inner)
        elif op == "run":
            ref = st["stage"]
            for i in range(ref["base"], ref["base"] + ref["count"]):
                if self.stages[i].get("kind") == "step":
                    raise self.err(pos, f"a run on engine `{self.stages[i]['name']}` is not allowed {where}: the "
                                        "thread that forked runs only on stages that are not engines until its "
                                        "`join;` (docs/language.md §11.13)")
        elif op not in ("set", "observe", "choose", "join", "fork", "flow"):   # a flow crosses ps stages only
            what = "a `hold` or an engine call" if op == "hold" else f"`{op}`"
            raise self.err(pos, f"{what} is not allowed {where}: the thread that forked only computes, observes, "
                                "runs on stages that are not engines and forks until its `join;`; put it inside a "
                                "`fork` block (docs/language.md §11.13)")

    def check_eos(self, hold: dict, pos: tuple) -> None:
        """docs/async.md §1: `eos (…)` only on an engine request (every pool the hold's first pool
        reference can name is admitted by an engine); under `lag 0` it has no effect, so one
        program can serve both settings of an input-valued `lag`."""
        ref = hold["pools"][0]["pool"]
        for p in range(ref["base"], ref["base"] + ref["count"]):
            if self.pools[p].get("admitted_by") is None:
                raise self.err(pos, f"`eos (…)` needs an engine request: pool `{self.pools[p]['name']}`, where this "
                                    "hold queues, is admitted by no engine")

    def ir(self, files: list[str]) -> dict:
        """The IR of docs/ir.md."""
        wl = self.workload or {"arrival": {"kind": "none"}, "trace": None, "init": None, "turn": None,
                               "session": None, "server": None}
        if wl["session"] is None:
            idx = len(self.blocks)
            self.blocks.append([{"op": "turn", "at": [0, 1, 1]}, {"op": "end", "at": [0, 1, 1]}])
            wl["session"] = idx
        wl["server"] = self.server_block
        return {
            "format": "serq-ir/1",
            "files": files,
            "inputs": {k: value_to_wire(v) for k, v in self.inputs.items()},
            "attrs": list(self.attrs),
            "hidden": [self.slot[h] for h in self.hidden],
            "observes": list(self.observes),
            "pools": self.pools,
            "prefixes": self.prefixes,
            "stages": self.stages,
            "blocks": self.blocks,
            "workload": wl,
            "gauges": self.gauges,
            # only when there are claims: the IR of a program without claims is what it was before
            **({"claims": self.claims} if self.claims else {}),
            # docs/ir.md `share`: only in a program with a flow or a `share` item
            **({"share": self.share[0] if self.share else "maxmin"} if self.share or self.has_flow else {}),
        }

"""The static program: the IR (docs/ir.md) checked for what the spec supports, with named slots.

`Program` never changes during a run. `check_supported` walks the whole IR once and refuses,
with the source location, every construct the spec does not implement yet, so nothing is ever
ignored silently.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Optional, Sequence

from serq.errors import ir_location
from serq.exact import first_constant_beyond_doubles
from serq.wire import Value, WireError, value_from_wire

from .config import ContentState
from .errors import At, NotSupported, SpecError
from .values import Amount, amount, is_inf
from .workload import Workload

# Built-in attribute slots (docs/ir.md "Slots").
SERIAL, TURN_NO, CACHED, COMPUTED, NEW, OUT, THINK, MORE, FORCED = range(9)

STAGE_KINDS = ("fifo", "ps", "delay", "step")
SUPPORTED_OBS = ("queue", "busy", "work", "budget_left", "running_served", "running_chunks", "used", "free", "cachedin", "holders", "queued",
                 "est_lambda", "est_rho", "est_wait", "price")


def v(text: Any) -> Value:
    """An IR value string as an exact value."""
    try:
        return value_from_wire(text)
    except WireError as exc:
        raise SpecError(f"malformed IR value: {exc}")


class Program:
    def __init__(self, ir: dict, name: str = "program", workload: Workload | None = None) -> None:
        """IR as a program named NAME; WORKLOAD is the pre-drawn workload it runs on (a replayed
        sessions file, or the sample's), or None when `serq_spec.sample` draws it later."""
        if not isinstance(ir, dict) or ir.get("format") != "serq-ir/1":
            raise SpecError("not a serq-ir/1 document")
        self.ir = ir
        self.name = name
        self.files = ir.get("files") or [name]
        beyond = first_constant_beyond_doubles(ir)   # refused where loaded, as serq_fast does
        if beyond is not None:
            raise SpecError(beyond[0], beyond[1], self.files)  # type: ignore[arg-type]
        self.attrs = ir["attrs"]
        self.nslots = len(self.attrs)
        self.observes = ir.get("observes", [])
        self.blocks = ir["blocks"]
        self.pools = ir["pools"]
        self.stages = ir["stages"]
        self.workload = ir["workload"]
        self.gauges = ir.get("gauges", [])
        self.claims = ir.get("claims", [])
        self.workload_data: Workload = workload  # type: ignore[assignment]  # None until sampled
        self.warmup: Value = Fraction(0)          # run settings (not in the IR): warm-up and horizon
        self.horizon: Value = float("inf")
        self.emit_gauges = False           # `serq spec --gauges`: gauge values in every record
        caps = [v(p["cap"]) for p in self.pools]
        self.block: list[Optional[Amount]] = []
        # pool amounts are exact rationals: whole ones stay ints (docs/spec.md "Non-whole pool amounts")
        for p in self.pools:
            b = p.get("block")
            if b is None:
                self.block.append(None)
            else:
                bv = v(b)
                if is_inf(bv) or bv <= 0:
                    raise SpecError(f"pool {p['name']}: block must be positive and finite, got {b}")
                self.block.append(amount(bv))
        self.caps: list[Value] = [c if is_inf(c) else amount(c) for c in caps]
        # pools each engine admits, in declaration order
        self.admitted_pools = {i: [j for j, p in enumerate(self.pools) if p.get("admitted_by") == i]
                               for i, s in enumerate(self.stages) if s["kind"] == "step"}
        self.engines = [i for i, s in enumerate(self.stages) if s["kind"] == "step"]
        # docs/content.md: prefix key -> (parent key or None, total tokens); content pools' blocks
        self.prefixes: dict[Value, tuple[Optional[Value], int]] = {}
        for x in ir.get("prefixes") or []:
            parent = None if x.get("after") is None else v(x["after"])
            self.prefixes[v(x["key"])] = (parent, int(v(x["total"])))
        self.content_blocks = [self.content_pool(i) for i in range(len(self.pools))]
        self.memory_of = {i: s.get("memory") for i, s in enumerate(self.stages) if s["kind"] == "step"}
        self.infer_memory()
        # docs/language.md §11.14: the policy that divides rates, and the ps stages some run over
        # several stages can name; these keep each job's remaining work (stages.py), the others
        # their virtual clock
        self.share: str = ir.get("share") or "maxmin"
        self.shared_stages = frozenset(i for b in self.blocks for st in b for ref in st.get("stages") or []
                                       for i in range(ref["base"], ref["base"] + ref.get("count", 1)))
        self.check_supported()

    def content_pool(self, i: int) -> Optional[int]:
        """B = cap / block for a `share content` pool (docs/content.md §1), else None."""
        p = self.pools[i]
        if p.get("share") is None:
            return None
        if p["share"] != "content":
            raise self.unsupported(f"share {p['share']} on pool {p['name']}")
        b, cap = self.block[i], self.caps[i]
        if not isinstance(b, int) or is_inf(cap) or cap % b != 0:
            raise SpecError(f"pool {p['name']}: `share content` needs a block and a cap that is a whole "
                            "number of blocks")
        if (p.get("evict") or {}).get("kind") != "lru":
            raise SpecError(f"pool {p['name']}: `share content` evicts by LRU only")
        return int(cap / b)

    def new_content(self, i: int) -> Optional[ContentState]:
        """The initial block pool of pool i (all blocks free, in id order), or None."""
        count, block = self.content_blocks[i], self.block[i]
        return None if count is None or not isinstance(block, int) else ContentState.empty(block, count)

    def content_block(self, i: int) -> int:
        """The block size of `share content` pool i: a whole number (`content_pool` checked it)."""
        b = self.block[i]
        if not isinstance(b, int) or self.content_blocks[i] is None:
            raise SpecError(f"internal: pool {self.pools[i]['name']} is no `share content` pool")
        return b

    def is_content(self, i: int) -> bool:
        return self.content_blocks[i] is not None

    def tiers_below(self, i: int) -> list[int]:
        """The `spill` tiers under pool i, nearest first (docs/language.md §11.8.1; the linker
        refuses cycles): where the rest of a session's prefix on i may be."""
        out: list[int] = []
        spill = self.pools[i].get("spill")
        while spill is not None:
            out.append(spill["pool"])
            spill = self.pools[spill["pool"]].get("spill")
        return out

    def infer_memory(self) -> None:
        """An engine without a `request` block gets `memory: null` from the front-end; its memory
        is then the pool its `growing` runs grow (docs/ir.md: "the pool its growing runs grow")."""
        for b in self.blocks:
            for st in b:
                if st["op"] == "run" and st.get("growing") is not None:
                    base = st["stage"]["base"]
                    for e in range(base, base + st["stage"].get("count", 1)):
                        if e in self.memory_of and self.memory_of[e] is None:
                            self.memory_of[e] = st["growing"]

    # ----------------------------------------------------------------------------------------
    def stmt(self, ref: Sequence[int]) -> dict:
        return self.blocks[ref[0]][ref[1]]

    def loc(self, at: At) -> str:
        return ir_location(at, self.files)

    def unsupported(self, construct: str, at: At = None) -> NotSupported:
        return NotSupported(construct, at, self.files)

    def check_supported(self) -> None:
        """Refuse, with its location, every construct the spec does not implement (docs/spec.md)."""
        for i, p in enumerate(self.pools):
            for key in ("evict", "preempt", "queue"):
                kind = (p.get(key) or {}).get("kind")
                if kind not in ("lru", "none", "lifo", "by", "fifo"):
                    raise self.unsupported(f"{key} {kind} on pool {p['name']}")
                for e in (p.get(key) or {}).get("keys", []) or []:
                    self.check_expr(e, None)
        for s in self.stages:
            if s["kind"] not in STAGE_KINDS:
                raise self.unsupported(f"stage kind {s['kind']} ({s['name']})")
            if s["kind"] == "step":
                for e in (s["budget"], s["cost"], s.get("granule")):
                    if e is not None:
                        self.check_expr(e, None)
                for let in s.get("lets", []):
                    self.check_expr(let["expr"], None)
                for r in s.get("registers", []):
                    self.check_expr(r["init"], None)
                self.check_schedule(s["schedule"], s["name"])
            if s["kind"] == "ps":
                self.check_expr(s["capacity"], None)
        for b in self.blocks:
            for k, st in enumerate(b):
                self.check_stmt(st)
                nxt = b[k + 1]["op"] if k + 1 < len(b) else None
                prev = b[k - 1]["op"] if k > 0 else None
                if (st["op"] == "transfer") != (nxt == "transfer_end") or (st["op"] == "transfer_end") != (prev == "transfer"):
                    # docs/ir.md: the copy and its landing are one source statement, always adjacent
                    raise SpecError("a `transfer` statement of the IR must be followed by its `transfer_end`",
                                    st.get("at"), self.files)
        for g in self.gauges:
            self.check_expr(g["expr"], None)
        for c in self.claims:
            self.check_expr(c["expr"], None)
            if c["given"] is not None:
                self.check_expr(c["given"], None)
        arrival = self.workload["arrival"]["kind"]
        if arrival not in ("poisson", "renewal", "closed", "batch", "none"):
            raise self.unsupported(f"arrival {arrival}")

    def check_schedule(self, stmts: list, name: str) -> None:
        """Refuse unsupported schedule statements."""
        for s in stmts:
            op = s["op"]
            if op == "branch":
                self.check_schedule(s["then"], name)
                self.check_schedule(s.get("else") or [], name)
            elif op not in ("advance", "admit", "set", "exclusive_prefill"):
                raise self.unsupported(f"schedule statement {op} in engine {name}", self.sched_at(s))
            if op == "admit" and s.get("only") is not None and reads_job(s["only"]):
                # docs/language.md §4.5: the per-request keys are those of a resident's run
                raise SpecError(f"a per-request key (`decoding`, `admission`, `remaining`) in `admit "
                                f"waiting only (…)` of engine {name}: a waiting head has no run",
                                self.sched_at(s), self.files)
            for k in ("only", "while", "each", "expr", "cond"):
                if s.get(k) is not None:
                    self.check_expr(s[k], s.get("at"))
            for e in ((s.get("order") or {}).get("keys") or []):
                self.check_expr(e, s.get("at"))

    def sched_at(self, s: dict) -> list:
        """A schedule statement's `at`; an IR file written without one falls back to the main file."""
        return s.get("at") or [0, "?", "?"]

    def check_stmt(self, st: dict) -> None:
        """Refuse unsupported statements, and a `growing` run on a non-step stage: a growing run
        advances a position by the tokens an engine serves (§11.6); a fifo, ps or delay stage
        serves no tokens (docs/spec.md "Ambiguities resolved")."""
        op = st["op"]
        at = st.get("at")
        if op == "run" and st.get("growing") is not None:
            ref = st["stage"]
            if any(self.stages[i]["kind"] != "step" for i in range(ref["base"], ref["base"] + ref.get("count", 1))):
                raise SpecError(f"`growing` needs an engine (a step stage), not stage "
                                f"{self.stages[ref['base']]['name']}", at, self.files)
        if op == "transfer" and "stage" in st:   # a copy over several stages is checked as a flow below
            ref = st["stage"]
            if any(self.stages[i]["kind"] == "step" for i in range(ref["base"], ref["base"] + ref.get("count", 1))):
                raise SpecError(f"`transfer` over the engine {self.stages[ref['base']]['name']}: a transfer "
                                "copies over a link (a fifo, ps or delay stage)", at, self.files)
        if op not in ("set", "observe", "turn", "end", "branch", "while", "loop", "choose", "hold",
                      "run", "grow", "load", "drop", "release", "fork", "join", "flow", "transfer", "transfer_end",
                      "accept"):
            raise self.unsupported(f"statement {op}", at)
        if op == "flow" or (op == "transfer" and "stages" in st):
            if self.share not in ("maxmin", "bottleneck"):
                raise self.unsupported(f"share {self.share}", at)
            for ref in st["stages"]:
                for i in range(ref["base"], ref["base"] + ref.get("count", 1)):
                    if self.stages[i]["kind"] != "ps":
                        raise SpecError(f"a run over several stages needs ps stages, not stage "
                                        f"{self.stages[i]['name']}", at, self.files)
        if op == "hold" and st.get("lease") is not None:
            self.check_expr(st["lease"]["time"], at)
        for k in ("expr", "cond", "count", "rate", "work", "units", "reuse", "cache", "eos"):
            if isinstance(st.get(k), dict):
                self.check_expr(st[k], at)
        for k in ("keys",):
            for e in st.get(k) or []:
                self.check_expr(e, at)
        if op == "hold":
            for hp in st["pools"]:
                self.check_expr(hp["units"], at)
                if hp.get("reserve") is not None:
                    self.check_expr(hp["reserve"], at)
                if hp.get("content") is not None:
                    ref = hp["pool"]
                    if not all(self.is_content(j) for j in range(ref["base"], ref["base"] + ref.get("count", 1))):
                        raise SpecError(f"`content` on pool {self.pools[ref['base']]['name']}, which is not "
                                        "`share content`", at, self.files)
                    for key in ("prefix", "length", "history"):
                        self.check_expr(hp["content"][key], at)
        if op in ("drop", "load", "transfer_end"):
            ref = st["pool"] if op != "transfer_end" else st["to"]
            if any(self.is_content(j) for j in range(ref["base"], ref["base"] + ref.get("count", 1))):
                raise SpecError(f"`{'transfer … to' if op == 'transfer_end' else op}` on the `share content` pool {self.pools[ref['base']]['name']} "
                                "(docs/content.md §1)", at, self.files)
        for b in st.get("bindings", []):   # a hold's `at admission` bindings
            self.check_expr(b["expr"], at)

    def check_expr(self, e: dict, at: At) -> None:
        """Refuse unsupported observables and context variables."""
        k = e.get("k")
        if k == "obs" and e["f"] not in SUPPORTED_OBS:
            raise self.unsupported(f"observable {e['f']}()", at)
        if k == "ctx" and e["name"] not in ("now", "waited", "size", "last", "age", "waiting",
                                             "present", "position", "computed"):
            raise self.unsupported(f"context variable {e['name']}", at)
        for key in ("a", "b", "c"):
            if isinstance(e.get(key), dict):
                self.check_expr(e[key], at)
        for a in e.get("args", []) or []:
            self.check_expr(a, at)
        for ref_key in ("stage", "pool"):
            r = e.get(ref_key)
            if isinstance(r, dict) and isinstance(r.get("index"), dict):
                self.check_expr(r["index"], at)


def reads_job(e: Any) -> bool:
    """True if `e` reads a per-request key (`job` node) anywhere."""
    if not isinstance(e, dict):
        return False
    if e.get("k") == "job":
        return True
    if any(reads_job(e.get(key)) for key in ("a", "b", "c")):
        return True
    if any(reads_job(a) for a in e.get("args", []) or []):
        return True
    return any(isinstance(e.get(r), dict) and reads_job(e[r].get("index")) for r in ("stage", "pool"))


def static_expr(e: dict, static_slots: set) -> bool:
    """True if `e` reads only numbers and attributes in `static_slots` (hold rejection, §11.4)."""
    k = e["k"]
    if k == "num":
        return True
    if k == "attr":
        return e["slot"] in static_slots
    if k in ("un", "bin", "cond", "fn"):
        subs = [e[x] for x in ("a", "b", "c") if isinstance(e.get(x), dict)] + list(e.get("args", []) or [])
        return all(static_expr(s, static_slots) for s in subs)
    return False


def zero_attrs(n: int) -> list[Value]:
    return [Fraction(0)] * n

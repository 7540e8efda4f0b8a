"""Session blocks specialised to Python (issue 15 item 1; docs/fast.md speed trick 5).

The interpreter (`sessions.SessionInterpreter._interpret`) walks a block's statements one at a time: per
statement a tuple unpack, a chain of `op` comparisons and the program-counter bookkeeping. Here
each block of the IR whose statements are all of the covered forms becomes the source of one
Python function, straight-line code in statement order, with the expressions' generated source
(`expr._Gen`) inlined and the block's stages, holds and constants bound as names:

    def _blk(sim, s, fr, cx, attrs, frames):
        pc = fr[1]
        if pc <= 0:            # entry point: a block is resumed after a run, a hold, a nested block
            cx.at = _a0
            attrs[16] = <expr>
        if pc <= 1:
            ...

The function runs from the frame's program counter to the first statement after which the
interpreter would leave the block (a run, a hold, a branch / while / loop / turn that pushes a
frame, `end`) or to the block's end, leaving `fr[1]` and the frames exactly as the interpreter
leaves them at that point, and `cx.at` on the statement being run (errors name it). It returns
2 × (statements run) + 1 if the session's execution stops there (a run that yields, `end`), else
2 × (statements run): the caller keeps the §11.9 budget of statements without blocking exact by
calling a block function only when the budget left covers the whole block.

`turn;` is inlined (its counters, the workload's turn block drawn from the turn stream, the
server frame), except for trace workloads, which call `Sim._exec_turn`.

Covered: set, observe, branch, while, loop, run, hold, turn, end, choose, release, grow, load,
drop — every statement form of docs/ir.md the interpreter runs. Not covered (the block is left
to the interpreter, `covered` says so): any form this module does not know (a future IR form).

Cache: the compiled code of a block's source is kept in an in-process dict keyed by the SHA-256
of the IR's canonical JSON, the block index and the seeded faults, so another Sim of the same
program (a sweep, lockstep, the random-program tests) skips `compile`; the names the code reads
(this Sim's stages, holds, expression helpers) are bound per Sim.

serq_spec counterpart: none — a speed trick (5); the semantics it keeps is
`serq_spec/sessions.py` (`exec_stmt`, `exec_turn`, `exec_run`).
"""

from __future__ import annotations

import hashlib
import json
import math

from serq.exact import negative_work, work_not_finite
from serq_fast.expr import RunError, _Gen, at_text
from serq_fast.growth import grow
from serq_fast.pools import find_part, release_early
from serq_fast.stages import speculate_drafts

COVERED = frozenset({"set", "observe", "branch", "while", "loop", "run", "hold", "turn", "end", "choose",
                     "release", "grow", "load", "drop"})

# (IR hash, block index, faults) -> code object of the block's module source
_CODE_CACHE: dict = {}


def ir_hash(ir: dict) -> str:
    return hashlib.sha256(json.dumps(ir, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def covered(block: list) -> bool:
    """Whether the generator covers every statement of this IR block."""
    return all(st["op"] in COVERED for st in block)


def _bad_guard(what: str, v: float, where: str) -> None:
    raise RunError(f"a {what} guard must be 0 or 1, got {v} at {where}")


def _bad_work(stage, w: float, where: str) -> None:
    """The interpreter's checks of a run's work (sessions.SessionInterpreter._exec_run), in its order."""
    if w < 0:
        raise RunError(f"{negative_work(w)} at {where}")
    if w != w or math.isinf(w):
        raise RunError(f"{work_not_finite(w)} at {where}")
    raise RunError(f"engine {stage.name}: run work must be a whole number of tokens, got {w!r} "
                   f"at {where}")


class _BlockGen:
    """The source of one block's function; names it reads go to `self.g.ns`."""

    def __init__(self, sim, index: int, faults: set) -> None:
        self.sim = sim
        self.index = index
        self.g = _Gen(sim)
        self.g.attrs_local = True
        self.g.ns.update({"RunError": RunError, "_bad_guard": _bad_guard, "_bad_work": _bad_work,
                          "_floor": math.floor, "_blocks": sim.blocks,
                          "_release_early": release_early, "_find_part": find_part, "_grow": grow,
                          "_speculate_drafts": speculate_drafts})
        self.lines: list = []
        # seeded fault (docs/fast.md): a while whose guard holds leaves the frame's pc after the
        # loop, so its body runs once
        self.fault_while = "spec_while_once" in faults

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def source(self) -> str:
        blk = self.sim.ir["blocks"][self.index]
        compiled = self.sim.blocks[self.index]
        n = len(blk)
        self.emit(0, f"def _blk{self.index}(sim, s, fr, cx, attrs, frames):")
        self.emit(1, "pc = fr[1]")
        for k, st in enumerate(blk):
            self.emit(1, f"if pc <= {k}:")
            self.emit(2, f"cx.at = {self.g.name(st.get('at'))}")
            self.statement(k, st, compiled[k])
        self.emit(1, f"fr[1] = {n}")
        self.emit(1, f"return {2 * n} - 2 * pc")
        return "\n".join(self.lines) + "\n"

    def expr(self, e: dict) -> str:
        return self.g.expr(e, 1)

    def statement(self, k: int, st: dict, cst: tuple) -> None:
        op = st["op"]
        ran = f"{2 * (k + 1)} - 2 * pc"  # twice the statements run, entered at pc, up to k
        where = self.g.name(at_text(st.get("at")))
        e = self.emit
        if op == "set":
            e(2, f"attrs[{int(st['slot'])}] = {self.expr(st['expr'])}")
        elif op == "observe":
            e(2, f"sim.observe({int(st['name'])}, {self.expr(st['expr'])}, s)")
        elif op == "branch":
            e(2, f"v = {self.expr(st['cond'])}")
            e(2, f"if v != 0 and v != 1: _bad_guard('branch', v, {where})")
            e(2, f"fr[1] = {k + 1}")
            for test, target in (("v == 1", st["then"]), ("v != 1", st.get("else"))):
                if target is not None:
                    e(2, f"if {test}:")
                    e(3, f"frames.append([_blocks[{int(target)}], 0, 'branch', None])")
                    e(3, f"return {ran}")
        elif op == "while":
            e(2, f"v = {self.expr(st['cond'])}")
            e(2, f"if v != 0 and v != 1: _bad_guard('while', v, {where})")
            e(2, "if v == 1:")
            e(3, f"fr[1] = {k + 1 if self.fault_while else k}")
            e(3, f"frames.append([_blocks[{int(st['body'])}], 0, 'while', None])")
            e(3, f"return {ran}")
        elif op == "loop":
            e(2, f"fr[1] = {k}")
            e(2, f"frames.append([_blocks[{int(st['body'])}], 0, 'loop', None])")
            e(2, f"return {ran}")
        elif op == "run":
            ref = st["stage"]
            if ref.get("index") is None:
                stage = self.sim.stages[ref["base"]]
                e(2, f"stage = {self.g.name(stage)}")
                whole = stage.kind == "step"
                step_test = "" if not whole else " or w != _floor(w)"
            else:
                e(2, f"stage = sim.stages[{self.g.name(cst[1])}(cx)]")
                step_test = " or (stage.kind == 'step' and w != _floor(w))"
            e(2, f"w = {self.expr(st['work'])}")
            e(2, f"if not (0.0 <= w < _INF){step_test}: _bad_work(stage, w, {where})")
            e(2, f"fr[1] = {k}")
            if st.get("speculate") is None:
                e(2, f"stage.submit(s, w, {st['mode']!r}, {st.get('growing')!r})")
            else:   # docs/language.md §7.3: the decode's drafts per step
                e(2, f"stage.submit(s, w, {st['mode']!r}, {st.get('growing')!r}, "
                     f"_speculate_drafts({self.expr(st['speculate']['drafts'])}, "
                     f"{self.g.name(st['speculate'].get('at') or st.get('at'))}))")   # serq_spec's place
            e(2, f"fr[1] = {k + 1}")
            e(2, "if s.status == 0:  # READY: zero work completed at once, the session yields")
            e(3, "sim.make_ready(s)")
            e(2, f"return {ran} + 1")
        elif op == "hold":
            e(2, f"fr[1] = {k}")
            e(2, f"{self.g.name(cst[1])}.execute(s)  # leaves pc on the hold until its scope ends")
            e(2, f"return {ran}")
        elif op == "turn":
            e(2, f"fr[1] = {k + 1}")
            self.turn()
            if self.sim.wl_server is not None:  # the turn pushed the server block's frame
                e(2, f"return {ran}")
        elif op == "choose":
            slot = int(st["slot"])
            keys = ", ".join(self.expr(x) for x in st["keys"]) + ","
            e(2, f"n = {self.expr(st['count'])}")
            e(2, "best = bestk = None")
            e(2, f"saved = attrs[{slot}]")
            e(2, "for j in range(int(n)):")
            e(3, f"attrs[{slot}] = float(j)")
            e(3, f"key = ({keys})")
            e(3, "if bestk is None or key < bestk:")
            e(4, "best, bestk = j, key")
            e(2, "if best is None:")
            e(3, f"attrs[{slot}] = saved")
            e(3, f"raise RunError('choose over an empty range at ' + {where})")
            e(2, f"attrs[{slot}] = float(best)")
        elif op == "release":
            e(2, f"fr[1] = {k + 1}")
            e(2, f"_release_early(sim, s, sim.pools[{self.g.name(cst[1])}(cx)])")
            e(2, f"if s.status != 0: return {ran}")
        elif op == "grow":
            e(2, f"pool = sim.pools[{self.g.name(cst[1])}(cx)]")
            e(2, f"d = {self.expr(st['units'])}")
            e(2, f"if d < 0: raise RunError(f'negative growth {{d}} at ' + {where})")
            e(2, f"fr[1] = {k + 1}")
            e(2, "part = _find_part(s, pool)")
            e(2, "if part is None:")
            e(3, f"raise RunError(f'grow {{pool.name}}: the session holds no {{pool.name}} at ' + {where})")
            e(2, "res = _grow(pool, part, d, None)")
            e(2, f"if res == 'stalled' or res == 'preempted': return {ran} + 1  # the interpreter returns")
            e(2, f"if s.status != 0: return {ran}")
        elif op == "load":
            e(2, f"pool = sim.pools[{self.g.name(cst[1])}(cx)]")
            e(2, f"n = {self.expr(st['units'])}")
            e(2, f"if n < 0: raise RunError(f'negative load {{n}} at ' + {where})")
            e(2, "part = _find_part(s, pool)")
            e(2, "if part is None and s.tid in pool.leases:")
            e(3, "part = pool.leases[s.tid].part  # a leased allocation keeps its position")
            e(2, "if part is None:")
            e(3, "raise RunError(f'load {pool.name}: the session holds no {pool.name}')")
            e(2, "if part.pos + n > part.alloc + 1e-9:")
            e(3, "raise RunError(f'load {pool.name}: position {part.pos + n} beyond the allocation {part.alloc}')")
            e(2, "part.pos += n")
            e(2, "part.advanced = True")
        elif op == "drop":
            e(2, f"sim.pools[{self.g.name(cst[1])}(cx)].drop_entry(s.tid)")
        elif op == "end":
            e(2, "sim.end_session(s)")
            e(2, f"return {ran} + 1")
        else:  # covered() keeps other forms away
            raise AssertionError(op)


    def turn(self) -> None:
        """`turn;` (sessions.SessionInterpreter._exec_turn) inlined: the turn's counters, the trace row, the
        workload's turn block (its `set`s and `observe`s drawn from the turn stream) and the
        server block's frame. A turn block with another statement (a run-time error of the
        interpreter) and trace workloads call the interpreter's `_exec_turn`."""
        sim, e = self.sim, self.emit
        tb = sim.wl_turn
        stmts = sim.ir["blocks"][tb] if tb is not None else []
        if sim.trace is not None or any(st["op"] not in ("set", "observe") for st in stmts):
            e(2, "sim._exec_turn(s)")
            return
        e(2, "turn_no = attrs[1] = attrs[1] + 1.0")
        e(2, "s.turn_t = sim.now")
        e(2, "s.turn_warm = measuring = sim.measuring")
        e(2, "s.turn_called = False")
        e(2, "if measuring:")
        e(3, "sim.turns += 1")
        if tb is not None:
            # sessions.SessionInterpreter._run_wblock: the turn stream is the draw source while the block runs
            e(2, "src = sim._turn_source(s, int(turn_no))")
            e(2, "cx.draw = src")
            e(2, "try:")
            for st in stmts:
                e(3, f"cx.at = {self.g.name(st.get('at'))}")   # errors name the block's statement
                if st["op"] == "set":
                    e(3, f"attrs[{int(st['slot'])}] = {self.expr(st['expr'])}")
                else:
                    e(3, f"sim.observe({int(st['name'])}, {self.expr(st['expr'])}, s)")
            e(2, "finally:")
            e(3, "cx.draw = s.src")
            e(2, "if sim.replay is not None:")
            e(3, "s.turn_used[int(turn_no)] = src.i")
            e(2, "cx.attrs, cx.sess = attrs, s")
        if sim.wl_server is not None:
            e(2, f"frames.append([_blocks[{int(sim.wl_server)}], 0, 'server', None])")


def specialise(sim, faults: set) -> list:
    """One function per IR block (None where a statement is not covered), compiled once per
    program (the code cached by IR hash) and bound to this Sim."""
    key = ir_hash(sim.ir)
    tag = ",".join(sorted(f for f in faults if f.startswith("spec_")))
    fns: list = []
    for i, blk in enumerate(sim.ir["blocks"]):
        if not covered(blk):
            fns.append(None)
            continue
        gen = _BlockGen(sim, i, faults)
        src = gen.source()
        ck = (key, i, tag)
        code = _CODE_CACHE.get(ck)
        if code is None:
            code = _CODE_CACHE[ck] = compile(src, f"<serq block {i}>", "exec")
        exec(code, gen.g.ns)
        fns.append(gen.g.ns[f"_blk{i}"])
    return fns

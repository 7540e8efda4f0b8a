"""The configuration: the whole dynamic state of a run as plain data (docs/language.md §11.1).

Everything `step` reads or writes is here, including every tie-break counter (event sequence,
admission number, release order, dead-entry keys), so `step` is a function of the Config alone.
The static part — the program (IR) and the pre-drawn workload — is referenced by `program` and
is not part of the serialised state. `to_json` gives the canonical JSON of the dynamic part.

Conventions: times and attribute values are exact values (Fraction, ±inf); tokens, units,
blocks, positions and counters are ints.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Optional, Union

from serq.claimreport import ClaimTally
from serq.wire import Value, canonical_json, value_from_wire

from .errors import SpecError
from .values import INF as V_INF, Amount, amount_from_wire as amt_in, amount_wire as amt, wire

if TYPE_CHECKING:   # the one import above this layer: a type only (docs/architecture.md)
    from .program import Program

# Session statuses (docs/language.md §11.1): ("ready",), ("queued", pool), ("stage", stage),
# ("growing", pool), ("joining",) (waiting at `join;` for its branches, §11.13), ("ended",)
READY = ("ready",)
ENDED = ("ended",)
JOINING = ("joining",)

# A thread of execution (docs/language.md §11.13): a session, named by its serial, or a branch
# of one, named "s.k" (the k-th branch session s forked). Ready queues, jobs and `finish` events
# name threads.
Tid = Union[int, str]

# A spilled chunk's copy over its link is a job of no session (docs/language.md §11.8.1), named
# "spill.n" (the n-th copy of the run): no thread resumes when it finishes.
COPY_PREFIX = "spill."


def is_copy(tid: Tid) -> bool:
    """Is `tid` the name of a spill copy job rather than of a thread?"""
    return isinstance(tid, str) and tid.startswith(COPY_PREFIX)


@dataclass
class Event:
    """A pending event; the heap order is (time, seq)."""
    time: Value        # a time: an exact value (an event beyond every horizon may be at inf)
    seq: int
    kind: str          # "arrive" | "finish" | "iter_end" | "ends" | "lease_end" | "warmup_end"
    arg: Any           # arrive: serial; finish: [stage, serial]; iter_end, ends: stage;
    #                    lease_end: [pool, serial]; warmup_end: None

    def key(self) -> tuple[Value, int]:
        return (self.time, self.seq)

    def to_json(self, names: Any = None) -> list:
        arg = self.arg
        return [wire(self.time), self.seq, self.kind, list(arg) if isinstance(arg, tuple) else arg]


@dataclass
class Frame:
    """A running block: statements of `block` from `pc`; `kind` says what happens at its end."""
    block: int
    pc: int
    kind: str                  # "plain" | "while" | "loop" | "hold" | "server" (a turn's server block)
    stmt: Optional[tuple]      # (block, pc) of the while/loop/hold statement owning this frame
    stream: tuple              # ("session",) | ("init",) | ("turn", k): where its draws come from

    def to_json(self) -> list:
        return [self.block, self.pc, self.kind, list(self.stmt) if self.stmt else None, list(self.stream)]


@dataclass
class HoldState:
    """An admitted hold (docs/language.md §11.4): per pool its allocation and position."""
    stmt: tuple                # (block, pc) of the hold statement
    pools: list                # pool indices, in the hold's order
    alloc: list                # allocated units per pool (block-rounded)
    position: list             # position per pool (starts at the consumed prefix)
    advanced: list             # whether a growing run or `load` advanced the position
    admission: int             # admission number of this hold
    depth: int                 # index of its body frame in the session's frames
    stream: tuple              # draw stream of the frame that executed the hold statement
    reserved: list = field(default_factory=list)   # per pool: the block-rounded reserve on a
    #   `reserve held` pool (0 elsewhere, or without reserve); [] = all 0 (docs/spec.md)
    blocks: list = field(default_factory=list)     # per pool: its physical blocks, block 0 first, on a
    #   `share content` pool ([] elsewhere); [] = no content pool (docs/content.md)
    content: list = field(default_factory=list)    # per pool: (p, n, h) of its `content` clause, or None

    def blocks_of(self, i: int) -> list:
        """The block list of pool slot i (empty when the pool is no content pool)."""
        while len(self.blocks) <= i:
            self.blocks.append([])
        return self.blocks[i]

    def content_of(self, i: int) -> Optional[tuple]:
        """(p, n, h) of pool slot i, or None."""
        return self.content[i] if i < len(self.content) else None

    def held(self, i: int) -> Amount:
        """The reservation of pool slot i (0 when none)."""
        return self.reserved[i] if i < len(self.reserved) else 0

    def to_json(self) -> dict:
        d: dict[str, Any] = {"stmt": list(self.stmt), "pools": self.pools, "alloc": [amt(x) for x in self.alloc],
             "position": [amt(x) for x in self.position], "advanced": self.advanced,
             "admission": self.admission, "depth": self.depth, "stream": list(self.stream)}
        if any(self.reserved):   # present only with a `reserve held` reservation
            d["reserved"] = [amt(x) for x in self.reserved]
        if any(self.blocks) or any(c is not None for c in self.content):   # only on a content pool
            d["blocks"] = self.blocks
            d["content"] = [None if c is None else [wire(x) for x in c] for c in self.content]
        return d


@dataclass
class Request:
    """The client-metric mark of an engine call (docs/ir.md `request`): submit, first token, output."""
    stmt: tuple
    engine: int
    submit: Value
    output: Any
    first: Optional[Value] = None

    def to_json(self) -> dict:
        return {"stmt": list(self.stmt), "engine": self.engine, "submit": wire(self.submit),
                "output": None if self.output is None else wire(self.output), "first": None if self.first is None else wire(self.first)}


@dataclass
class Job:
    """A run on a stage (docs/language.md §11.5, §11.6). `left` is work (tokens on a step engine).
    `serial` names the thread that runs it: a branch's id on a stage that is not an engine."""
    serial: Tid
    stage: int
    mode: str                  # "plain" | "prefill" | "decode"
    left: Any                  # int on a step engine, an exact value elsewhere
    growing: Optional[int]     # pool index the run grows, or None
    admission: int             # the owner's admission number when the job was created
    start_order: int = 0       # stage-local start counter (ps ties, delay order)
    pending: bool = False      # a pending resident of a `lag 1` engine (docs/async.md)
    drafts: int = 0            # a speculative decode's k (docs/language.md §7.3); 0: one token a step
    # On a ps stage a flow crosses (docs/language.md §11.14): `left` is the work remaining at time
    # `since`, served at `rate` since then; `stages` lists a flow's stages (None: one stage).
    shared: bool = False
    rate: Value = Fraction(0)
    since: Value = Fraction(0)
    stages: Optional[list] = None

    def stages_of(self) -> list:
        """The stages the job is present at: a flow's stages, else its one stage."""
        return self.stages if self.stages is not None else [self.stage]

    def to_json(self) -> dict:
        d: dict[str, Any] = {"serial": self.serial, "stage": self.stage, "mode": self.mode,
             "left": self.left if isinstance(self.left, int) else wire(self.left),
             "growing": self.growing, "admission": self.admission, "start_order": self.start_order}
        if self.pending:
            d["pending"] = True
        if self.drafts:
            d["drafts"] = self.drafts
        if self.shared:   # only on a stage a flow crosses: other programs serialise as before
            d.update(shared=True, rate=wire(self.rate), since=wire(self.since), stages=self.stages)
        return d


@dataclass
class Session:
    serial: int
    attrs: list                # values by slot
    frames: list               # Frame stack (innermost last)
    status: tuple
    holds: list = field(default_factory=list)       # HoldState stack (innermost last)
    pending: Optional[tuple] = None                 # (block, pc, stream) of the hold waiting in a queue
    adm_seq: Optional[int] = None
    preempt_pos: dict = field(default_factory=dict) # pool -> position at its last preemption
    stuck: bool = False
    trace: Optional[list] = None                    # [corpus session, next turn index]
    cursors: dict = field(default_factory=dict)     # draw cursors: "init", "session", "turn:k"
    turns: int = 0                                  # turn blocks started (turn stream count)
    turn_start: Value = Fraction(0)              # when the current turn's `turn;` ran
    turn_warm: bool = False                         # ... after the warm-up: its client metrics count
    turn_called: bool = False                       # its server made an engine call
    request: Optional[Request] = None
    job: Optional[Job] = None
    growth: Optional[list] = None                   # [pool, target units] of a stalled growth
    # docs/language.md §11.13. A branch is a Session object with its session's serial whose
    # `cursors` are its session's very object, and whose `attrs` are the forking thread's very
    # object — or, for a fork whose block holds a pool (`own`), a copy of them. A branch makes no
    # turns; its holds, queue places, cache entries and leases are its own, named by its id.
    branch: Optional[str] = None                    # a branch: its id "s.k"; None for the session
    parent: Optional[Tid] = None                    # a branch: the thread that forked it
    own: bool = False                               # a branch: its attributes are its own (a sub-agent)
    live_branches: int = 0                          # branches this thread forked that have not finished
    forks: int = 0                                  # the session: branches forked so far (numbers them)
    accept: Optional[list] = None                   # the turn's acceptance counts by output (§7.3)
    # lag 1 (docs/async.md §8): the outcome of the session's last step that the engine's next
    # schedule has not yet seen, [pool, rejected drafts, verified position, position known at
    # schedule, whether it ended the run through accepted drafts]; its last run's drafts
    unseen: Optional[list] = None
    spec_drafts: int = 0
    # the load-backs of its newest hold still to run after the one on its link, in the hold's
    # pool order: [(pool, units)] (docs/language.md §11.8.1, a hold of two pools with `spill`)
    loads: list = field(default_factory=list)

    @property
    def tid(self) -> Tid:
        """The thread's name: the branch id, else the serial."""
        return self.branch if self.branch is not None else self.serial

    def to_json(self) -> dict:
        # the branch keys only when in use: a program without `fork` serialises as before
        extra: dict[str, Any] = {k: v for k, v in (("live_branches", self.live_branches), ("forks", self.forks)) if v}
        if self.branch is not None:
            extra.update(branch=self.branch, parent=self.parent, **({"own": True} if self.own else {}))
        if self.accept is not None:
            extra["accept"] = list(self.accept)
        # async speculative decoding's state (docs/async.md §8) only while set: other programs
        # serialise as before
        if self.unseen is not None:
            extra["unseen"] = [self.unseen[0]] + [amt(x) for x in self.unseen[1:4]] + [self.unseen[4]]
        if self.spec_drafts:
            extra["spec_drafts"] = self.spec_drafts
        if self.loads:   # only while one is pending: a program without it serialises as before
            extra["loads"] = [[p, amt(u)] for p, u in self.loads]
        return {**extra, "serial": self.serial, "attrs": [wire(a) for a in self.attrs],
                "frames": [f.to_json() for f in self.frames], "status": list(self.status),
                "holds": [h.to_json() for h in self.holds],
                "pending": None if self.pending is None else [self.pending[0], self.pending[1], list(self.pending[2])],
                "adm_seq": self.adm_seq,
                "preempt_pos": [[p, amt(v)] for p, v in sorted(self.preempt_pos.items())],
                "stuck": self.stuck, "trace": self.trace,
                "cursors": {k: v for k, v in sorted(self.cursors.items())}, "turns": self.turns,
                "turn": [wire(self.turn_start), self.turn_warm, self.turn_called],
                "request": None if self.request is None else self.request.to_json(),
                "job": None if self.job is None else self.job.to_json(),
                "growth": None if self.growth is None else [self.growth[0], amt(self.growth[1])]}


def hold_of(session: Session, p: int) -> Optional[HoldState]:
    """The innermost active hold of the session that holds pool p."""
    for h in reversed(session.holds):
        if p in h.pools:
            return h
    return None


def hold_on(session: Session, p: int) -> HoldState:
    """`hold_of` where the session is known to hold p (a resident growing p, a victim or a grower
    of p): a missing hold is a defect of the spec, said as one."""
    h = hold_of(session, p)
    if h is None:
        raise SpecError(f"internal: thread {session.tid} holds no pool {p}")
    return h


def thread(cfg: "Config", tid: Tid) -> Session:
    """The session or branch named `tid` (docs/language.md §11.13)."""
    return cfg.branches[tid] if isinstance(tid, str) else cfg.sessions[tid]


def job_of(session: Session) -> Job:
    """The session's job, where it is known to have one (a resident, a victim on a stage)."""
    if session.job is None:
        raise SpecError(f"internal: session {session.serial} has no job")
    return session.job


def admission_of(session: Session) -> int:
    """The session's latest admission number, where it is known to have been admitted (a holder)."""
    if session.adm_seq is None:
        raise SpecError(f"internal: session {session.serial} was never admitted")
    return session.adm_seq


@dataclass
class Entry:
    """A cache entry: owner thread (negative for a dead entry), size, release time, release order."""
    owner: Tid
    size: Amount
    last: Value
    rel: int

    def to_json(self) -> list:
        return [self.owner, amt(self.size), wire(self.last), self.rel]


@dataclass
class QueueItem:
    serial: Tid                # the thread whose hold waits
    joined: Value
    head: bool                 # requeued at the head after a preemption

    def to_json(self) -> list:
        return [self.serial, wire(self.joined), self.head]


@dataclass
class Lease:
    """`lease P (t)` (docs/language.md §11.4): the part on P of a hold whose scope ended, kept by its
    session — counted in P's `used`, not a holder (so never a preemption victim), not a cache
    entry (so never evicted) — until `release P`, its `lease_end` event (`ends_at`) or `end`."""
    serial: Tid
    part: HoldState            # the hold reduced to the leased pool (its stmt and stream read `cache`)
    ends_at: Optional[Value] # the time of its `lease_end` event; None for t = inf

    def to_json(self) -> list:
        return [self.serial, self.part.to_json(), None if self.ends_at is None else wire(self.ends_at)]


@dataclass
class ContentState:
    """The physical blocks of a `share content` pool (docs/content.md §3): per block its reference
    count and identity (a tuple, or None), the free queue (head first) and the identity map
    (identity -> the blocks holding it, in insertion order; a key with no block is removed)."""
    block: int
    refs: list
    ident: list
    free_queue: list
    idmap: dict

    @classmethod
    def empty(cls, block: int, count: int) -> ContentState:
        return cls(block, [0] * count, [None] * count, list(range(count)), {})

    def to_json(self) -> dict:
        return {"block": self.block, "refs": self.refs,
                "ident": [None if x is None else list(x) for x in self.ident],
                "free_queue": self.free_queue,
                "idmap": [[list(k), v] for k, v in self.idmap.items()]}


@dataclass
class PoolState:
    used: Amount = 0
    entries: list = field(default_factory=list)
    holders: list = field(default_factory=list)
    queue: list = field(default_factory=list)
    growers: list = field(default_factory=list)
    admissions: int = 0
    preemptions: int = 0
    rejected: int = 0
    stuck: int = 0
    evicted_units: Amount = 0
    content: Optional[ContentState] = None   # a `share content` pool's blocks (docs/content.md)
    leases: list = field(default_factory=list)   # Lease, in the order they began
    spills: int = 0                          # chunks this pool's evictions moved to its `spill` tier
    tier_hits: int = 0                       # blocks a content pool loaded back from its tier (docs/content.md §6)

    def cached(self) -> Amount:
        if self.content is not None:   # b × identified blocks that nobody references
            cs = self.content
            return cs.block * sum(1 for r, x in zip(cs.refs, cs.ident) if r == 0 and x is not None)
        return sum(e.size for e in self.entries)

    def to_json(self) -> dict:
        d: dict[str, Any] = {"used": amt(self.used), "entries": [e.to_json() for e in self.entries],
             "holders": self.holders, "queue": [q.to_json() for q in self.queue],
             "growers": self.growers, "admissions": self.admissions,
             "preemptions": self.preemptions, "rejected": self.rejected, "stuck": self.stuck,
             "evicted_units": amt(self.evicted_units)}
        if self.content is not None:
            d["content"] = self.content.to_json()
        if self.leases:   # only while a lease is held: a program without leases serialises as before
            d["leases"] = [x.to_json() for x in self.leases]
        if self.spills:   # only once a chunk spilled: a program without `spill` serialises as before
            d["spills"] = self.spills
        if self.tier_hits:   # only once a content tier was hit (docs/content.md §6)
            d["tier_hits"] = self.tier_hits
        return d


@dataclass
class Assign:
    """One entry of an iteration's batch: tokens of a resident, its position before the chunk."""
    serial: Tid
    mode: str
    tokens: int
    pos_before: Optional[Amount]
    pending: bool = False      # the EOS token of a pending resident: discarded (docs/async.md §3)

    def to_json(self) -> list:
        out = [self.serial, self.mode, self.tokens, None if self.pos_before is None else amt(self.pos_before)]
        return out + [True] if self.pending else out


class IterCtx:
    """The iteration being formed (docs/language.md §11.6): budget left, served residents, the
    batch, its counts. Not part of the Config: it lives while one engine's schedule runs."""

    def __init__(self, engine: int) -> None:
        self.engine = engine
        self.locals: list[Value] = []
        self.each: dict[int, Value] = {}   # id() of an `each at most` statement -> its cap
        self.granule: Optional[Value] = None
        self.left: Value = 0
        self.served: set[Tid] = set()
        self.assign: list[Assign] = []
        self.preempted = 0
        self.admitted = 0
        self.stopped = False      # the budget is spent, or a grower preempted itself
        self.no_admit = False     # a granule rounded a prefill to 0
        self.fresh: set[Tid] = set()   # the requests admitted in this iteration
        self.slots = 0            # drafting slots each served request costs (docs/language.md §7.3)
        self.lookahead = 0        # units every growth reserves past its chunk (§7.3)
        self.limit: Value = V_INF  # positions a chunk leaves below it, room for the sampled token (§7.3)


@dataclass
class Estimates:
    """The online estimates of a stage the program reads them of (docs/language.md §4.4, IR
    `"estimates": true`): exponentially weighted means (weight 1/100 on each new sample, the first
    sample taken whole) of the gaps between successive starts, of the work of each started job,
    and of each job's wait before its service. None = no sample yet."""
    last: Optional[Value] = None      # the time of the latest start
    gap: Optional[Value] = None       # mean gap between starts
    service: Optional[Value] = None   # mean work of a started job
    wait: Optional[Value] = None      # mean wait before service
    joined: dict = field(default_factory=dict)   # fifo: serial -> join time, jobs still waiting

    def to_json(self) -> dict:
        def w(x: Optional[Value]) -> Optional[str]:
            return None if x is None else wire(x)
        return {"last": w(self.last), "gap": w(self.gap), "service": w(self.service), "wait": w(self.wait),
                "joined": [[serial, wire(t)] for serial, t in self.joined.items()]}


@dataclass
class EngineEstimates:
    """The online estimates of an engine the program reads them of (docs/language.md §4.4, IR
    `"estimates": true`), with the stages' rule (weight 1/100, the first sample whole): the gaps
    between successive admissions and each admitted request's wait in the queue (from its latest
    join, as `waited`), for λ̂ and Ŵ; and per cycle (an iteration's start to the next one's) the
    cycle's length and the part of it the iteration ran, for ρ̂ = mean busy / mean cycle."""
    last: Optional[Value] = None      # the time of the latest admission
    gap: Optional[Value] = None       # mean gap between admissions
    wait: Optional[Value] = None      # mean wait from joining the queue to admission
    started: Optional[Value] = None   # the start of the latest iteration
    cost: Optional[Value] = None      # its duration (`execute`)
    cycle: Optional[Value] = None     # mean time from an iteration's start to the next one's
    busy: Optional[Value] = None      # mean duration of the iteration that opens a cycle

    def fields(self) -> tuple:
        """The state line's `est` of an engine (docs/state.md STAGE), in this order."""
        return (self.last, self.gap, self.wait, self.started, self.cost, self.cycle, self.busy)

    def to_json(self) -> dict:
        return {"engine": [None if x is None else wire(x) for x in self.fields()]}


@dataclass
class StageState:
    kind: str
    jobs: list = field(default_factory=list)      # step: residents (admission order); delay/ps/fifo: active
    waiting: list = field(default_factory=list)   # fifo: waiting jobs
    finish: dict = field(default_factory=dict)    # fifo/delay: serial -> finish time
    tags: dict = field(default_factory=dict)      # ps: serial -> finish tag
    v: Value = Fraction(0)                     # ps virtual clock
    t_last: Value = Fraction(0)                # ps: time v was last advanced
    dirty: bool = False                           # ps: job set changed since the last reschedule
    iteration: Optional[dict] = None              # step: {"end", "seq", "assign": [Assign]}
    registers: list = field(default_factory=list)
    next_start: int = 0
    pending: list = field(default_factory=list)   # step, lag 1: ends waiting for the next schedule
    due: list = field(default_factory=list)       # step, lag 1: ends the next `ends` event applies
    unseen: list = field(default_factory=list)    # step, lag 1: sessions whose last step's outcome the next schedule has not seen
    # step: the iteration whose schedule is running (running_served reads it; never serialised:
    # no state line falls inside a schedule)
    forming: Optional[IterCtx] = None
    est: Optional[Estimates | EngineEstimates] = None   # a stage or engine whose estimates are read

    def stage_est(self) -> Optional[Estimates]:
        """The estimates of a fifo, ps or delay stage whose estimates are read, else None."""
        return self.est if isinstance(self.est, Estimates) else None

    def engine_est(self) -> Optional[EngineEstimates]:
        """The estimates of an engine whose estimates are read, else None."""
        return self.est if isinstance(self.est, EngineEstimates) else None

    def to_json(self) -> dict:
        it = None
        if self.iteration is not None:
            it = {"end": wire(self.iteration["end"]), "seq": self.iteration["seq"],
                  "assign": [a.to_json() for a in self.iteration["assign"]]}
        return {"kind": self.kind, "jobs": [j.to_json() for j in self.jobs],
                "waiting": [j.to_json() for j in self.waiting],
                "finish": [[s, wire(t)] for s, t in self.finish.items()],
                "tags": [[s, wire(t)] for s, t in self.tags.items()],
                "v": wire(self.v), "t_last": wire(self.t_last), "dirty": self.dirty,
                "iteration": it, "registers": [wire(r) for r in self.registers],
                # async scheduling's lists (docs/async.md) only while in use: a program without
                # `lag 1` serialises exactly as before
                "next_start": self.next_start, **({"pending": self.pending, "due": self.due}
                                                    if self.pending or self.due else {}),
                **({"unseen": self.unseen} if self.unseen else {}),
                # only on a stage whose estimates are read: other programs serialise as before
                **({"est": self.est.to_json()} if self.est is not None else {})}


@dataclass
class Counters:
    next_seq: int = 0          # event sequence (ties of equal-time events)
    next_adm: int = 0          # admission numbers (residents' order, lifo victims)
    next_rel: int = 0          # release order (LRU ties)
    next_dead: int = 1         # dead entries get owner −next_dead
    next_serial: int = 0       # sessions spawned
    machine: int = 0           # machine-stream draws consumed
    next_copy: int = 0         # spill copy jobs started (names them, docs/language.md §11.8.1)

    def to_json(self) -> dict:
        return {"next_seq": self.next_seq, "next_adm": self.next_adm, "next_rel": self.next_rel,
                "next_dead": self.next_dead, "next_serial": self.next_serial, "machine": self.machine,
                # only once a copy started: a program without `spill` serialises as before
                **({"next_copy": self.next_copy} if self.next_copy else {})}


class Config:
    """The dynamic state plus a reference to the static program (not serialised)."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.now: Value = Fraction(0)
        self.events: list[Event] = []
        self.sessions: list[Session] = []
        self.branches: dict[str, Session] = {}   # live branches by id, in the order they were forked (§11.13)
        self.ready: list[Tid] = []
        self.pools = [PoolState(content=program.new_content(p)) for p in range(len(program.pools))]
        self.stages = [StageState(kind=st["kind"], est=new_estimates(st))
                       for st in program.stages]
        self.counters = Counters()
        self.warm = False
        self.steps = 0
        self.records = new_records()
        self.claims = [ClaimTally() for _ in program.claims]   # docs/language.md "Claims"
        self.attempt: Optional[tuple[Tid, dict[int, int]]] = None   # (thread, {pool: cachedin}) during an admission attempt; not state

    def __deepcopy__(self, memo: dict) -> Config:
        other = Config.__new__(Config)
        for k, v in self.__dict__.items():
            setattr(other, k, v if k == "program" else copy.deepcopy(v, memo))
        return other

    def to_json(self) -> dict:
        return {"now": wire(self.now), "events": [e.to_json() for e in self.events],
                "sessions": [s.to_json() for s in self.sessions], "ready": self.ready,
                **({"branches": [b.to_json() for b in self.branches.values()]} if self.branches else {}),
                "pools": [p.to_json() for p in self.pools],
                "stages": [s.to_json() for s in self.stages],
                "counters": self.counters.to_json(), "warm": self.warm, "steps": self.steps,
                **({"claims": [t.counts() + [None if x is None else wire(x) for x in (t.first_held, t.first_violated)]
                               for t in self.claims]} if self.claims else {})}

    def canonical(self) -> str:
        return canonical_json(self.to_json())


def new_records() -> dict:
    """The per-step output channel (docs/state.md RECORDS); not part of the state."""
    return {"admitted": [], "preempted": [], "released": [], "evicted": [], "iterations": [],
            "observations": [], "finished": [], "rejected": []}


# -- decoding: the inverse of `Config.to_json` ---------------------------------------------------

def _v(s: Any) -> Any:
    """A wire value (its field says which kind: a time is never infinite)."""
    return value_from_wire(s)


def _tup(x: Optional[list]) -> Optional[tuple]:
    return None if x is None else tuple(x)


def _job(d: dict) -> Job:
    left = d["left"] if isinstance(d["left"], int) else _v(d["left"])
    job = Job(d["serial"], d["stage"], d["mode"], left, d["growing"], d["admission"], d["start_order"],
              d.get("pending", False), d.get("drafts", 0))
    if d.get("shared"):
        job.shared, job.rate, job.since, job.stages = True, _v(d["rate"]), _v(d["since"]), d["stages"]
    return job


def new_estimates(st: dict) -> Optional[Estimates | EngineEstimates]:
    """A stage's estimates when the program reads them (IR `"estimates": true`), else None."""
    if not st.get("estimates"):
        return None
    return EngineEstimates() if st["kind"] == "step" else Estimates()


def _estimates(d: dict) -> Estimates | EngineEstimates:
    if "engine" in d:
        return EngineEstimates(*(None if x is None else _v(x) for x in d["engine"]))
    def v(x: Optional[str]) -> Optional[Value]:
        return None if x is None else _v(x)
    return Estimates(v(d["last"]), v(d["gap"]), v(d["service"]), v(d["wait"]),
                     {serial: _v(t) for serial, t in d["joined"]})


def _hold(h: dict) -> HoldState:
    return HoldState(tuple(h["stmt"]), h["pools"], [amt_in(x) for x in h["alloc"]],
                     [amt_in(x) for x in h["position"]], h["advanced"],
                     h["admission"], h["depth"], tuple(h["stream"]),
                     [amt_in(x) for x in h.get("reserved") or []], [list(b) for b in h.get("blocks") or []],
                     [None if c is None else tuple(_v(x) for x in c) for c in h.get("content") or []])


def _session(d: dict) -> Session:
    s = Session(serial=d["serial"], attrs=[_v(a) for a in d["attrs"]],
                frames=[Frame(f[0], f[1], f[2], _tup(f[3]), tuple(f[4])) for f in d["frames"]],
                status=tuple(d["status"]))
    s.holds = [_hold(h) for h in d["holds"]]
    p = d["pending"]
    s.pending = None if p is None else (p[0], p[1], tuple(p[2]))
    s.adm_seq = d["adm_seq"]
    s.preempt_pos = {k: amt_in(v) for k, v in d["preempt_pos"]}
    s.stuck = d["stuck"]
    s.trace = d["trace"]
    s.cursors = dict(d["cursors"])
    s.turns = d["turns"]
    if d.get("turn") is not None:
        s.turn_start, s.turn_warm, s.turn_called = _v(d["turn"][0]), d["turn"][1], d["turn"][2]
    r = d["request"]
    if r is not None:
        s.request = Request(tuple(r["stmt"]), r["engine"], _v(r["submit"]),
                            None if r["output"] is None else _v(r["output"]),
                            None if r["first"] is None else _v(r["first"]))
    s.job = None if d["job"] is None else _job(d["job"])
    s.growth = None if d["growth"] is None else [d["growth"][0], amt_in(d["growth"][1])]
    s.branch, s.parent, s.own = d.get("branch"), d.get("parent"), d.get("own", False)
    s.live_branches, s.forks = d.get("live_branches", 0), d.get("forks", 0)
    s.loads = [(p, amt_in(u)) for p, u in d.get("loads") or []]
    s.accept = d.get("accept")
    u = d.get("unseen")
    s.unseen = None if u is None else [u[0]] + [amt_in(x) for x in u[1:4]] + [u[4]]
    s.spec_drafts = d.get("spec_drafts", 0)
    return s


def from_json(program: Program, d: dict) -> Config:
    """The Config whose `to_json` is `d` (for the given static program): a complete round trip."""
    cfg = Config(program)
    cfg.now = _v(d["now"])
    cfg.events = [Event(_v(t), seq, kind, tuple(arg) if isinstance(arg, list) else arg)
                  for t, seq, kind, arg in d["events"]]
    cfg.sessions = [_session(s) for s in d["sessions"]]
    cfg.ready = list(d["ready"])
    for b in d.get("branches", []):
        branch = _session(b)
        branch.cursors = cfg.sessions[branch.serial].cursors   # shared, as when forked (§11.13)
        if not branch.own:   # the forking thread's, which was forked before it (listed earlier)
            branch.attrs = thread(cfg, branch.parent).attrs if branch.parent is not None else branch.attrs
        cfg.branches[b["branch"]] = branch
    cfg.pools = []
    for p in d["pools"]:
        ps = PoolState(used=amt_in(p["used"]), holders=list(p["holders"]), growers=list(p["growers"]),
                       admissions=p["admissions"], preemptions=p["preemptions"], rejected=p["rejected"],
                       stuck=p["stuck"], evicted_units=amt_in(p["evicted_units"]), spills=p.get("spills", 0),
                       tier_hits=p.get("tier_hits", 0))
        ps.entries = [Entry(o, amt_in(size), _v(last), rel) for o, size, last, rel in p["entries"]]
        ps.queue = [QueueItem(serial, _v(joined), head) for serial, joined, head in p["queue"]]
        ps.leases = [Lease(serial, _hold(h), None if until is None else _v(until))
                     for serial, h, until in p.get("leases", [])]
        c = p.get("content")
        if c is not None:
            ps.content = ContentState(c["block"], list(c["refs"]),
                                      [None if x is None else tuple(x) for x in c["ident"]],
                                      list(c["free_queue"]), {tuple(k): list(v) for k, v in c["idmap"]})
        cfg.pools.append(ps)
    cfg.stages = []
    for s in d["stages"]:
        st = StageState(kind=s["kind"], jobs=[_job(j) for j in s["jobs"]], waiting=[_job(j) for j in s["waiting"]],
                        finish={serial: _v(t) for serial, t in s["finish"]},
                        tags={serial: _v(t) for serial, t in s["tags"]},
                        v=_v(s["v"]), t_last=_v(s["t_last"]), dirty=s["dirty"],
                        registers=[_v(r) for r in s["registers"]], next_start=s["next_start"],
                        pending=list(s.get("pending", [])), due=list(s.get("due", [])),
                        unseen=list(s.get("unseen", [])),
                        est=_estimates(s["est"]) if "est" in s else None)
        it = s["iteration"]
        if it is not None:
            st.iteration = {"end": _v(it["end"]), "seq": it["seq"],
                            "assign": [Assign(a[0], a[1], a[2], None if a[3] is None else amt_in(a[3]),
                                              len(a) > 4 and a[4]) for a in it["assign"]]}
        cfg.stages.append(st)
    # a session's job is the very object its stage holds (a flow's: one object at all its stages)
    for st in cfg.stages:
        for k, j in enumerate(st.jobs):
            if j.stages is not None and thread(cfg, j.serial).job is not None:
                st.jobs[k] = thread(cfg, j.serial).job
        for j in st.jobs + st.waiting:
            if not is_copy(j.serial):
                thread(cfg, j.serial).job = j
    c = d["counters"]
    cfg.counters = Counters(c["next_seq"], c["next_adm"], c["next_rel"], c["next_dead"], c["next_serial"], c["machine"],
                            c.get("next_copy", 0))
    cfg.warm = d["warm"]
    for t, row in zip(cfg.claims, d.get("claims", [])):
        t.iterations, t.checked, t.held, t.violated = row[:4]
        t.first_held, t.first_violated = (None if x is None else _v(x) for x in row[4:6])
    cfg.steps = d["steps"]
    return cfg

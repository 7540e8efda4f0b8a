/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Pool

/-!
# The configuration (python/serq_spec/config.py)

The whole dynamic state of a run as plain data, every tie-break counter included, mirroring the
dataclasses of config.py field by field (snake_case fields become lowerCamelCase:
`adm_seq` ↦ `admSeq`). `Entry`, `QueueItem` and `PoolState` live in `SerqLang.Pool`. The
canonical JSON of each type (config.py `to_json`) is in `SerqLang.Json`.

Conventions (config.py): times and attribute values are exact values (`Rat`, `Value`); pool
amounts (units, allocations, positions, reservations) are exact rationals (`Rat`, docs/spec.md
"Non-whole pool amounts"); tokens, block ids and counters are naturals.
-/

namespace SerqLang

/-- Where a frame's draws come from: `("session",)`, `("init",)`, `("turn", k)`. -/
inductive DrawStream where
  | session
  | init
  | turn (k : Nat)
  deriving Inhabited, DecidableEq

/-- The argument of an event: arrive → serial; finish → [stage, thread]; iter_end → stage;
lease_end → [pool, thread]; warmup_end → null. -/
inductive EventArg where
  | none
  | serial (n : Nat)
  | stageSerial (stage : Nat) (thread : Tid)
  | stage (i : Nat)
  | poolSerial (pool : Nat) (thread : Tid)
  deriving Inhabited, DecidableEq

/-- config.py `Event`: a pending event; the list order is `(time, seq)`. -/
structure Event where
  time : Rat
  seq : Nat
  kind : String
  arg : EventArg
  deriving Inhabited

/-- config.py `Event.key`, compared lexicographically. -/
def Event.before (a b : Event) : Bool :=
  decide (a.time < b.time) || (decide (a.time = b.time) && decide (a.seq < b.seq))

/-- config.py `Frame`: statements of `block` from `pc`; `kind` ∈ plain, while, loop, hold. -/
structure Frame where
  block : Nat
  pc : Nat
  kind : String
  stmt : Option (Nat × Nat)
  stream : DrawStream
  deriving Inhabited

/-- config.py `HoldState`: an admitted hold, per pool its allocation and position (pool amounts:
exact rationals, docs/spec.md "Non-whole pool amounts"). -/
structure HoldState where
  stmt : Nat × Nat
  pools : List Nat
  alloc : List Rat
  position : List Rat
  advanced : List Bool
  admission : Nat
  depth : Nat
  stream : DrawStream
  /-- per pool: the block-rounded reserve on a `reserve held` pool (0 elsewhere); `[]` = all 0 -/
  reserved : List Rat := []
  /-- per pool: its physical blocks, block 0 first, on a `share content` pool (`[]` elsewhere;
  config.py pads it with `[]` up to the slot it touches) -/
  blocks : List (List Nat) := []
  /-- per pool: `(p, n, h)` of its `content` clause, or none -/
  content : List (Option Content.Clause) := []
  deriving Inhabited

/-- config.py `HoldState.held`: the reservation of pool slot i (0 when none). -/
def HoldState.held (h : HoldState) (i : Nat) : Rat := h.reserved.getD i 0

/-- `blocks` padded with `[]` up to slot `i` (config.py `blocks_of` appends them as it reads). -/
def padBlocks (bs : List (List Nat)) (i : Nat) : List (List Nat) :=
  bs ++ List.replicate (i + 1 - bs.length) []

/-- config.py `HoldState.blocks_of`: the block list of pool slot i, the hold padded up to it. -/
def HoldState.blocksOf (h : HoldState) (i : Nat) : HoldState × List Nat :=
  let bs := padBlocks h.blocks i
  ({ h with blocks := bs }, bs.getD i [])

/-- Set the block list of pool slot i (padding first, as `blocks_of` does). -/
def HoldState.setBlocks (h : HoldState) (i : Nat) (b : List Nat) : HoldState :=
  { h with blocks := (padBlocks h.blocks i).set i b }

/-- config.py `HoldState.content_of`: `(p, n, h)` of pool slot i, or none. -/
def HoldState.contentOf (h : HoldState) (i : Nat) : Option Content.Clause := (h.content.getD i none)

/-- config.py `Lease` (docs/language.md §11.4 `lease P (t)`): the part on pool `pool` of a hold whose
scope ended, kept by thread `serial` (a session, or a branch: docs/language.md §11.13) — in the pool's `used`, not a holder, not a cache entry —
until `release P`, its `lease_end` event at `endsAt` (none for t = inf) or the session's end.
config.py keeps a pool's leases in its `PoolState`; here `Config.leases` holds every pool's, each
with its pool index (`PoolState` lives in `SerqLang.Pool`, below `HoldState`). -/
structure Lease where
  pool : Nat
  serial : Tid
  part : HoldState
  endsAt : Option Rat
  deriving Inhabited

/-- config.py `Request`: the client-metric mark of an engine call. -/
structure Request where
  stmt : Nat × Nat
  engine : Nat
  submit : Rat
  output : Option Value
  first : Option Rat := none
  deriving Inhabited

/-- A job's work left: tokens on a step engine, an exact value elsewhere. -/
inductive Work where
  | tokens (n : Nat)
  | value (v : Value)
  deriving Inhabited

/-- config.py `Job`: a run on a stage. `serial` is the owner session's serial; a branch's job
also carries its branch number (config.py names the job's thread in `serial`). -/
structure Job where
  serial : Nat
  stage : Nat
  mode : String
  left : Work
  growing : Option Nat
  /-- The owner's admission number when the job was created (−1 if it never was admitted). -/
  admission : Int
  startOrder : Nat := 0
  /-- a pending resident of a `lag 1` engine (docs/async.md §3) -/
  pending : Bool := false
  /-- a speculative run's drafts per step (docs/language.md §7.3); 0: one token a step -/
  drafts : Nat := 0
  /-- the job of branch k of its session (docs/language.md §11.13): a sub-agent's runs an engine too -/
  branch : Option Nat := none
  /-- the n-th copy of a spilled chunk (docs/language.md §11.8.1): a job of no thread -/
  copy : Option Nat := none
  /-- On a ps stage a flow crosses (docs/language.md §11.14): `left` is the work remaining at
  `since`, served at `rate` since then; `stages` lists a flow's stages (none: one stage). -/
  shared : Bool := false
  rate : Rat := 0
  since : Rat := 0
  stages : Option (List Nat) := none
  deriving Inhabited

/-- config.py `Job.stages_of`: the stages the job is present at. -/
def Job.stagesOf (j : Job) : List Nat := j.stages.getD [j.stage]

/-- The thread that runs the job. -/
def Job.tid (j : Job) : Tid :=
  match j.copy, j.branch with
  | some n, _ => .copy n
  | none, some k => .branch j.serial k
  | none, none => .session j.serial

/-- Session statuses (config.py): ready, queued in a pool, on a stage, growing in a pool, ended. -/
inductive Status where
  | ready
  | queued (pool : Nat)
  | stage (stage : Nat)
  | growing (pool : Nat)
  | ended
  /-- the end of a lagged hold is pending or due on this `lag 1` engine (docs/async.md) -/
  | ending (stage : Nat)
  /-- at a `join;`, waiting for its branches (docs/language.md §11.13) -/
  | joining
  deriving Inhabited, DecidableEq

/-- config.py `Session`. -/
structure Session where
  serial : Nat
  attrs : List Value
  frames : List Frame
  status : Status
  holds : List HoldState := []
  pending : Option (Nat × Nat × DrawStream) := none
  admSeq : Option Nat := none
  /-- pool ↦ position at its last preemption, sorted by pool. -/
  preemptPos : List (Nat × Rat) := []
  stuck : Bool := false
  /-- `[corpus session, next turn index]`. -/
  trace : Option (Nat × Nat) := none
  /-- draw cursors `"init"`, `"session"`, `"turn:k"`, sorted by name. -/
  cursors : List (String × Nat) := []
  turns : Nat := 0
  /-- when the current turn's `turn;` ran -/
  turnStart : Rat := 0
  /-- … after the warm-up: its client metrics count -/
  turnWarm : Bool := false
  /-- its server made an engine call -/
  turnCalled : Bool := false
  request : Option Request := none
  /-- the turn's acceptance counts by output number (docs/language.md §7.3) -/
  accept : Option (List Nat) := none
  /-- `lag 1` (docs/async.md §8): the outcome of its last step that the engine's next schedule
  has not seen: (pool, rejected drafts, verified position, position known at schedule, whether
  it ended the run through accepted drafts) -/
  unseen : Option (Nat × Nat × Rat × Rat × Bool) := none
  /-- the drafts of its last run with `speculate` on a `lag 1` engine -/
  specDrafts : Nat := 0
  /-- the load-backs of its newest hold still to run after the one on its link, in the hold's
  pool order: `(pool, units)` (docs/language.md §11.8.1, a hold of two pools with `spill`) -/
  loads : List (Nat × Rat) := []
  job : Option Job := none
  /-- `[pool, target units]` of a stalled growth. -/
  growth : Option (Nat × Rat) := none
  /-- docs/language.md §11.13: a branch's number k (it is thread `serial.k`; its attributes and
  draw cursors are its session's, which SerqLang reads from the session itself) -/
  branch : Option Nat := none
  /-- a branch: the thread that forked it -/
  parent : Option Tid := none
  /-- a branch whose fork's block holds a pool (a sub-agent): its attributes are its own, a copy
  of the forking thread's (config.py `Session.own`) -/
  own : Bool := false
  /-- branches this thread forked that have not finished -/
  liveBranches : Nat := 0
  /-- the session: branches forked so far (they are numbered from 1) -/
  forks : Nat := 0
  deriving Inhabited

/-- config.py `Session.tid`. -/
def Session.tid (s : Session) : Tid :=
  match s.branch with
  | some k => .branch s.serial k
  | none => .session s.serial

/-- config.py `Assign`: one entry of an iteration's batch. -/
structure Assign where
  /-- the resident's thread (a sub-agent's request is its branch's, docs/language.md §11.13) -/
  serial : Tid
  mode : String
  tokens : Nat
  posBefore : Option Rat
  /-- the EOS token of a pending resident: discarded at IterEnd (docs/async.md §3) -/
  pending : Bool := false
  deriving Inhabited

/-- The iteration in flight on a step engine. -/
structure Iteration where
  «end» : Rat
  seq : Nat
  assign : List Assign
  deriving Inhabited

/-- The cycle half of config.py `EngineEstimates` (docs/spec.md "Online estimates"): an engine's
iterations, each cycle running from one iteration's start to the next one's. -/
structure EngineCycles where
  /-- the start of the engine's latest iteration -/
  started : Option Rat := none
  /-- its duration (`execute`) -/
  cost : Option Rat := none
  /-- mean time from an iteration's start to the next one's -/
  cycle : Option Rat := none
  /-- mean duration of the iteration that opens a cycle -/
  busy : Option Rat := none
  deriving Inhabited

/-- config.py `Estimates`: the online estimates of a stage the program reads them of
(docs/spec.md "Online estimates"); `none` = no sample yet. `joined`: the join time of each fifo
job still waiting (an insertion-ordered association list, as a Python dict).
An engine's estimates (config.py `EngineEstimates`) are an `Estimates` whose `engine` is `some`:
`last`, `gap` and `wait` are those of its admissions (the latest, the mean gap, the mean wait in
the queue), `service` and `joined` stay empty, and `engine` holds its iteration cycles. -/
structure Estimates where
  last : Option Rat := none
  gap : Option Rat := none
  service : Option Rat := none
  wait : Option Rat := none
  joined : List (Tid × Rat) := []
  engine : Option EngineCycles := none
  deriving Inhabited

/-- config.py `StageState`. `finish` and `tags` are association lists in insertion order (the
order of Python's dicts). -/
structure StageState where
  kind : String
  jobs : List Job := []
  waiting : List Job := []
  finish : List (Tid × Rat) := []
  tags : List (Tid × Rat) := []
  v : Rat := 0
  tLast : Rat := 0
  dirty : Bool := false
  iteration : Option Iteration := none
  registers : List Value := []
  nextStart : Nat := 0
  /-- step, `lag 1`: the ends waiting for the engine's next schedule (docs/async.md §3) -/
  pending : List Tid := []
  /-- step, `lag 1`: the ends the next `ends` event applies -/
  due : List Tid := []
  /-- step, `lag 1`: the threads whose last step's outcome the next schedule has not seen, in the
  order the steps ended (docs/async.md §8) -/
  unseen : List Tid := []
  /-- a stage or engine whose estimates the program reads (config.py `StageState.est`) -/
  est : Option Estimates := none
  deriving Inhabited

/-- config.py `Counters`. -/
structure Counters where
  nextSeq : Nat := 0
  nextAdm : Nat := 0
  nextRel : Nat := 0
  nextDead : Nat := 1
  nextSerial : Nat := 0
  machine : Nat := 0
  /-- spill copy jobs started (names them, docs/language.md §11.8.1) -/
  nextCopy : Nat := 0
  deriving Inhabited

/-- serq/claimreport.py `ClaimTally`: one claim's points met, checked (`given` 1), held and
violated, and the time of the first held and violated point. -/
structure ClaimTally where
  iterations : Nat := 0
  checked : Nat := 0
  held : Nat := 0
  violated : Nat := 0
  firstHeld : Option Rat := none
  firstViolated : Option Rat := none
  deriving Inhabited

/-- serq/claimreport.py `ClaimTally.point`: count one point at `now`. -/
def ClaimTally.point (t : ClaimTally) (now : Rat) (checked held : Bool) : ClaimTally :=
  if !checked then { t with iterations := t.iterations + 1 }
  else if held then
    { t with iterations := t.iterations + 1, checked := t.checked + 1, held := t.held + 1,
             firstHeld := t.firstHeld.orElse fun _ => some now }
  else
    { t with iterations := t.iterations + 1, checked := t.checked + 1, violated := t.violated + 1,
             firstViolated := t.firstViolated.orElse fun _ => some now }

/-- serq/claimreport.py `result`. -/
def ClaimTally.result (kind : String) (t : ClaimTally) : String :=
  if t.iterations == 0 then "not_evaluated"
  else if t.checked == 0 then "out_of_scope"
  else if kind == "some" then (if t.held > 0 then "witnessed" else "not_witnessed")
  else if t.violated > 0 then "fails" else "holds"

/-- config.py `Config`: the dynamic state (the program is passed separately). -/
structure Config where
  now : Rat := 0
  events : List Event := []
  sessions : List Session := []
  /-- the live branches, in the order they were forked (docs/language.md §11.13) -/
  branches : List Session := []
  ready : List Tid := []
  pools : List PoolState := []
  stages : List StageState := []
  counters : Counters := {}
  warm : Bool := false
  steps : Nat := 0
  /-- every pool's leases (config.py `PoolState.leases`), each pool's in the order they began -/
  leases : List Lease := []
  /-- config.py `Config.claims`: one tally per IR claim (docs/language.md §11.9) -/
  claims : List ClaimTally := []
  deriving Inhabited

/-- Follow a thread up its forks to the thread whose attribute list it uses (`attrThread`);
`fuel` bounds the walk (a branch's parent was forked before it, so the number of branches plus
one suffices). -/
def attrThreadIn (branches : List Session) : Nat → Tid → Tid
  | 0, t => t
  | f + 1, t =>
    match branches.find? (·.tid == t) with
    | some b =>
      if b.own then t
      else
        match b.parent with
        | some p => attrThreadIn branches f p
        | none => t
    | none => t

/-- The thread whose attribute list thread `t` reads and writes (config.py shares the list
object, docs/language.md §11.13): a session's own; a sub-agent's (`own`) own copy; any other
branch's is its forking thread's, followed up the forks. -/
def Config.attrThread (c : Config) (t : Tid) : Tid :=
  attrThreadIn c.branches (c.branches.length + 1) t

/-- config.py `thread` as a lookup: the session or live branch named `t`, if any. -/
def Config.threadOf? (c : Config) (t : Tid) : Option Session :=
  match t with
  | .session n => c.sessions[n]?
  | .branch _ _ => c.branches.find? (·.tid == t)
  | _ => none

end SerqLang

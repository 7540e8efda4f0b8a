/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Step

/-!
# Invariants checked after every step (python/serq_spec/invariants.py)

`checkInvariants prog cfg previousNow` returns the violated properties of a configuration, in
invariants.py's order and with its messages (empty when all hold); `checkOrRaise` turns a
non-empty list into invariants.py's `InvariantViolation` text — the step, the problems joined by
`"; "`, and the state line of that step. Step.py's `run(check=True)` checks after step 0 (with
`previous_now = 0`) and after every step (with the time before it); so do `Ffi.initCore`,
`Ffi.runCore` and `serq-vectors` (`SerqLang/Exe/Vectors.lean`), while `Ffi.stepCore` is step.py's
`step`, which checks nothing. They are checks, not proofs: a violated one is a bug of this mirror (or of a hand-made state), reported
with the whole state. Pool amounts print as Python prints them (`Rat`'s `toString` is `str` of an
int or a `Fraction`), lists as Python's `repr` of a list of ints (`toString` of a `List Nat` /
`List Int`), and places and statuses as Python's tuples (`placeRepr`).
-/

namespace SerqLang
namespace Invariants

/-- Python's `repr` of a session place or status tuple: `('ready',)`, `('queued', 0)`. -/
def placeRepr : Status → String
  | .ready => "('ready',)"
  | .queued p => s!"('queued', {p})"
  | .stage i => s!"('stage', {i})"
  | .growing p => s!"('growing', {p})"
  | .ended => "('ended',)"
  | .ending i => s!"('ending', {i})"
  | .joining => "('joining',)"

/-- Python's `repr` of a list of places. -/
def placesRepr (ps : List Status) : String :=
  "[" ++ ", ".intercalate (ps.map placeRepr) ++ "]"

/-- Does a list hold a value twice? -/
def hasDup {α : Type} [BEq α] : List α → Bool
  | [] => false
  | x :: xs => xs.contains x || hasDup xs

/-- `sorted(a) == sorted(b)`: the same elements, counted. -/
def sameElems {α : Type} [BEq α] (a b : List α) : Bool :=
  a.length == b.length && a.all (fun x => a.count x == b.count x)

/-- Is a list in non-decreasing order of `le`? (`xs == sorted(xs)`: every neighbour in order) -/
def isSorted {α : Type} (le : α → α → Bool) (xs : List α) : Bool :=
  (xs.zip xs.tail).all fun (a, b) => le a b

/-- Python's tuple order on `(admission, thread)`: by admission; the thread is never compared,
since every hold has its own admission number (Python could not compare an int with a branch's
name anyway). -/
def pairLt (a b : Nat × Tid) : Bool :=
  decide (a.1 < b.1)

/-- Insert into a list sorted by `pairLt`, after its equals. -/
def insPair (x : Nat × Tid) : List (Nat × Tid) → List (Nat × Tid)
  | [] => [x]
  | y :: ys => if pairLt x y then x :: y :: ys else y :: insPair x ys

/-- `sorted(order)` of `(admission, thread)` pairs (insertion sort). -/
def sortPairs (ps : List (Nat × Tid)) : List (Nat × Tid) :=
  ps.foldl (fun acc x => insPair x acc) []

/-- Python's `repr` of a thread: a serial, or a branch's quoted name (`'0.1'`). -/
def tidRepr : Tid → String
  | .session n => toString n
  | t => s!"'{t.text}'"

/-- Python's `repr` of a list of threads (`[0, '0.1']`). -/
def tidsRepr (ts : List Tid) : String := "[" ++ ", ".intercalate (ts.map tidRepr) ++ "]"

/-- The work left is negative (a step engine's tokens are naturals: never). -/
def workNegative : Work → Bool
  | .tokens _ => false
  | .value v => Value.lt v Value.zero

/-- A pool's cached units as config.py's `PoolState.cached()` counts them: the entries, or on a
`share content` pool `b ×` its identified unreferenced blocks. -/
def cachedUnits (st : PoolState) : Rat := st.cached + st.contentCached

/-- invariants.py `content_invariants`: a `share content` pool (docs/content.md §3) — reference
counts = the hold and lease lists holding each block; the free queue = the blocks with no reference, each
once, every unidentified one before every identified one; the identity map and the blocks'
identities agree; used = b × referenced blocks; a hold's allocation = b × its blocks. -/
def contentInvariants (prog : Program) (cfg : Config) (p : Nat) : List String := Id.run do
  let st := cfg.pools.getD p default
  let some cs := st.content | return []
  let name := ((prog.ir.pools[p]?).map (·.name)).getD ""
  let mut bad : List String := []
  let mut count : List Nat := List.replicate cs.refs.length 0
  for s in cfg.sessions ++ cfg.branches do   -- invariants.py `threads`: the threads that may hold
    for h in s.holds do
      if h.pools.contains p then
        let i := h.slot p
        let blocks := (h.blocksOf i).2
        let alloc := h.alloc.getD i 0
        if alloc != ((cs.block * blocks.length : Nat) : Rat) then
          bad := bad ++ [s!"pool {name}: session {s.serial} holds {blocks.length} blocks but allocation {alloc}"]
        for b in blocks do
          count := count.set b (count.getD b 0 + 1)
  -- a leased part keeps its blocks referenced (docs/content.md §3)
  for l in cfg.leases.filter (·.pool == p) do
    let blocks := (l.part.blocksOf 0).2
    let alloc := l.part.alloc.getD 0 0
    if alloc != ((cs.block * blocks.length : Nat) : Rat) then
      bad := bad ++ [s!"pool {name}: the lease of session {l.serial.text} holds {blocks.length} blocks but allocation {alloc}"]
    for b in blocks do
      count := count.set b (count.getD b 0 + 1)
  if count != cs.refs then
    bad := bad ++ [s!"pool {name}: reference counts {cs.refs} != hold and lease lists containing each block {count}"]
  if hasDup cs.free then
    bad := bad ++ [s!"pool {name}: a block appears twice in the free queue {cs.free}"]
  -- set(free_queue) == {b | refs[b] == 0}
  let unreferenced := (List.range cs.refs.length).filter fun b => cs.refs.getD b 0 == 0
  if !(cs.free.all unreferenced.contains && unreferenced.all cs.free.contains) then
    bad := bad ++ [s!"pool {name}: the free queue {cs.free} is not the blocks with no reference"]
  let kinds := cs.free.map fun b => (Content.nthId cs.ident b).isSome
  if !isSorted (fun a b => !a || b) kinds then
    bad := bad ++ [s!"pool {name}: an unidentified block follows an identified one in the free queue {cs.free}"]
  -- mapped = {b: k for k, blocks in idmap for b in blocks}; with no block listed twice, it equals
  -- {b: ident[b] | ident[b] set} iff every listed block carries its key and as many are identified
  let listed := cs.idmap.flatMap (·.2)
  let identified := (List.range cs.ident.length).filter fun b => (Content.nthId cs.ident b).isSome
  if hasDup listed || cs.idmap.any (·.2.isEmpty)
      || !(cs.idmap.all fun (k, bs) => bs.all fun b => Content.nthId cs.ident b == some k)
      || listed.length != identified.length then
    bad := bad ++ [s!"pool {name}: the identity map and the blocks' identities disagree"]
  let referenced := (cs.refs.filter (fun r => decide (r > 0))).length
  let want : Rat := ((cs.block * referenced : Nat) : Rat)
  if st.used != want then
    bad := bad ++ [s!"pool {name}: used {st.used} != block × referenced blocks {want}"]
  return bad

/-- Where a session is listed, in invariants.py's order: each pool's queue then its growers (pools
in order), then the stages' residents and waiting jobs, then the ready list. -/
def placesOf (cfg : Config) (serial : Tid) : List Status :=
  let pools := (List.range cfg.pools.length).zip cfg.pools |>.flatMap fun (p, st) =>
    (st.queue.filter (fun q => q.serial == serial)).map (fun _ => Status.queued p)
      ++ (st.growers.filter (fun g => g == serial)).map (fun _ => Status.growing p)
  let stages := (List.range cfg.stages.length).zip cfg.stages |>.flatMap fun (i, st) =>
    -- a flow is placed once, at its first stage (docs/language.md §11.14)
    ((st.jobs ++ st.waiting).filter (fun j => j.tid == serial && (j.stages.isNone || j.stage == i))).map
      (fun _ => Status.stage i)
  let ready := (cfg.ready.filter (· == serial)).map (fun _ => Status.ready)
  pools ++ stages ++ ready

/-- invariants.py `branch_invariants` (docs/language.md §11.13): a joining thread is listed
nowhere and waits for a branch; a thread's count of running branches is the number of live
branches it forked; a live branch has not ended. -/
def branchInvariants (cfg : Config) : List String := Id.run do
  let mut bad : List String := []
  for b in cfg.branches do
    if b.status == .ended then
      bad := bad ++ [s!"branch {b.tid.text} ended but is still listed"]
  for s in cfg.sessions ++ cfg.branches do
    let here := placesOf cfg s.tid
    if s.status == .joining && (!here.isEmpty || s.liveBranches == 0) then
      bad := bad ++ [s!"session {s.tid.text} is joining but is in {placesRepr here} with {s.liveBranches} branch(es) running"]
    let forked := (cfg.branches.filter (·.parent == some s.tid)).length
    if s.liveBranches != forked then
      bad := bad ++ [s!"session {s.tid.text} counts {s.liveBranches} running branch(es), {forked} are live"]
  return bad

/-- invariants.py `shared_invariants` (docs/language.md §11.14): a job on a stage a flow crosses
is present at exactly its stages, with its remaining work never negative and, once the step is
over, a positive rate. -/
def sharedInvariants (prog : Program) (cfg : Config) : List String := Id.run do
  let mut bad : List String := []
  let n := cfg.stages.length
  for i in (List.range n).filter (prog.ir.sharedStages.contains ·) do
    let st := cfg.stages.getD i default
    for j in st.jobs do
      let name := ((prog.ir.stages[i]?).map (·.name)).getD ""
      let here := (List.range n).filter fun x => ((cfg.stages[x]?).map (·.jobs.any (·.tid == j.tid))).getD false
      let want := (List.range n).filter (j.stagesOf.contains ·)
      if here != want then
        bad := bad ++ [s!"stage {name}: the job of {j.tid.text} is present at stages {here}, not at its stages {j.stagesOf}"]
      if !j.shared || decide (remaining cfg.now j < 0) then
        bad := bad ++ [s!"stage {name}: the job of {j.tid.text} has negative work left or no remaining-work form"]
      if decide (j.rate ≤ 0) && !st.dirty then
        bad := bad ++ [s!"stage {name}: the job of {j.tid.text} has no rate"]
  return bad

/-- invariants.py `check_invariants`: the violated invariants of `cfg` (empty when all hold);
`previousNow` checks that time never decreases. -/
def checkInvariants (prog : Program) (cfg : Config) (previousNow : Option Rat) : List String := Id.run do
  let mut bad : List String := []
  -- time never decreases; every pending event is at or after now, in (time, seq) order
  if let some prev := previousNow then
    if decide (cfg.now < prev) then
      bad := bad ++ [s!"time went back from {prev} to {cfg.now}"]
  if !isSorted (fun a b => !(Event.before b a)) cfg.events then
    bad := bad ++ ["the event list is not in (time, seq) order"]
  if cfg.events.any (fun e => decide (e.time < cfg.now)) then
    bad := bad ++ ["an event is pending in the past"]
  let seqs := cfg.events.map (·.seq)
  if hasDup seqs || seqs.any (fun q => decide (q ≥ cfg.counters.nextSeq)) then
    bad := bad ++ ["event sequence numbers are not unique or exceed the counter"]
  -- pools: used + cached ≤ cap; used = Σ holders' allocations; holders in admission order
  for (p, st) in (List.range cfg.pools.length).zip cfg.pools do
    let name := ((prog.ir.pools[p]?).map (·.name)).getD ""
    let cap := (prog.caps[p]?).getD Value.posInf
    let cached := cachedUnits st
    if decide (st.used < 0) || decide (cached < 0) || st.entries.any (fun e => decide (e.size ≤ 0)) then
      bad := bad ++ [s!"pool {name}: a negative quantity (used {st.used}, cached {cached}) or an empty entry"]
    if Value.lt cap (.fin (st.used + cached)) then
      bad := bad ++ [s!"pool {name}: used {st.used} + cached {cached} > cap {cap.toWire}"]
    let mut held : Rat := 0
    let mut order : List (Nat × Tid) := []
    for s in cfg.sessions ++ cfg.branches do   -- invariants.py `threads`
      for h in s.holds do
        if h.pools.contains p then
          let i := h.slot p
          held := held + h.alloc.getD i 0
          order := order ++ [(h.admission, s.tid)]
          if decide (h.alloc.getD i 0 < 0) || decide (h.position.getD i 0 < 0) then
            bad := bad ++ [s!"pool {name}: thread {s.tid.text} has a negative allocation or position"]
    -- a lease (§11.4): its units stay in `used`; its session is live and no holder
    let mine := cfg.leases.filter (·.pool == p)
    let mut leased : Rat := 0
    for l in mine do
      leased := leased + l.part.alloc.getD 0 0
      -- a finished branch is no thread any more: Python's `thread` would raise, not report
      let ended := match (cfg.threadOf? l.serial).map (·.status) with
        | some .ended => true
        | _ => false
      if l.part.pools != [p] || ended then
        bad := bad ++ [s!"pool {name}: the lease of session {l.serial.text} is not a live session's lease of this pool"]
      let pending := (cfg.events.filter (fun e => e.kind == "lease_end" && e.arg == .poolSerial p l.serial)).map (·.time)
      if pending != (match l.endsAt with | none => [] | some t => [t]) then
        bad := bad ++ [s!"pool {name}: the lease of session {l.serial.text} has the lease_end events {pending}"]
    if cfg.events.any (fun e => e.kind == "lease_end" && match e.arg with
        | .poolSerial q n => q == p && !(mine.any (fun l => l.serial == n && l.endsAt.isSome))
        | _ => true) then
      bad := bad ++ [s!"pool {name}: a pending lease_end event of no timed lease"]
    if hasDup (mine.map (·.serial)) then
      bad := bad ++ [s!"pool {name}: a session holds two leases of it"]
    if st.content.isSome then
      bad := bad ++ contentInvariants prog cfg p
    else if held + leased != st.used then
      bad := bad ++ [s!"pool {name}: used {st.used} != sum of holders' allocations and leases {held + leased}"]
    if (sortPairs order).map (·.2) != st.holders then
      bad := bad ++ [s!"pool {name}: holders {tidsRepr st.holders} are not the holding sessions in admission order"]
    if hasDup (st.entries.map (·.owner)) then
      bad := bad ++ [s!"pool {name}: two cache entries with one owner"]
  -- step engines: residents in admission order; work never negative
  for (i, st) in (List.range cfg.stages.length).zip cfg.stages do
    let name := ((prog.ir.stages[i]?).map (·.name)).getD ""
    if st.kind == "step" then
      let adm := st.jobs.map (·.admission)
      if !isSorted (fun a b => decide (a ≤ b)) adm then
        bad := bad ++ [s!"engine {name}: residents are not in admission order {adm}"]
      let serials := st.jobs.map (·.tid)
      if let some it := st.iteration then
        if it.assign.any (fun a => !serials.contains a.serial && !a.pending) then
          bad := bad ++ [s!"engine {name}: the iteration in flight serves a session that is no resident"]
      for j in st.jobs do
        let s := (cfg.threadOf? j.tid).getD default
        let growingNow := match s.status with
          | .growing _ => true
          | _ => false
        match j.growing with
        | none => pure ()
        | some g =>
          if !growingNow then
            match s.holds.reverse.find? (·.pools.contains g) with
            | none => bad := bad ++ [s!"engine {name}: session {j.tid.text} grows a pool it does not hold"]
            | some h =>
              let k := h.slot g
              if h.advanced.getD k false && decide (h.position.getD k 0 > h.alloc.getD k 0) then
                bad := bad ++ [s!"engine {name}: session {j.tid.text}'s position is beyond its allocation"]
    for j in st.jobs ++ st.waiting do
      if workNegative j.left then
        bad := bad ++ [s!"stage {name}: session {j.tid.text} has negative work left"]
  bad := bad ++ sharedInvariants prog cfg
  -- every session in exactly one place
  for s in cfg.sessions ++ cfg.branches do
    let here := placesOf cfg s.tid
    match s.status with
    | .joining => pure ()   -- branchInvariants
    | .ended =>
      if !here.isEmpty then
        bad := bad ++ [s!"session {s.serial} ended but is still in {placesRepr here}"]
      if !s.holds.isEmpty then
        bad := bad ++ [s!"session {s.serial} ended holding pools"]
    | .growing p =>
      -- a stalled engine resident is also listed on its engine
      let expect := [Status.growing p] ++ (match s.job with
        | some j => [Status.stage j.stage]
        | none => [])
      if !sameElems here expect then
        bad := bad ++ [s!"session {s.serial} is growing but is in {placesRepr here}"]
    | .ending i =>
      -- docs/async.md: a pending resident is on its engine; a preempted one is nowhere
      let expect := if s.job.isSome then [Status.stage i] else []
      if here != expect then
        bad := bad ++ [s!"session {s.serial} is ending but is in {placesRepr here}"]
    | other =>
      if here != [other] then
        bad := bad ++ [s!"session {s.serial} has status {placeRepr other} but is in {placesRepr here}"]
  if !cfg.branches.isEmpty || cfg.sessions.any (·.status == .joining) then
    bad := bad ++ branchInvariants cfg
  return bad

/-- invariants.py `check_or_raise`: an error with the step, the problems and the state line of
the step (errors.py `InvariantViolation`) if an invariant is violated. -/
def checkOrRaise (prog : Program) (w : Workload) (cfg : Config) (recs : Records) (ev : Option Event)
    (step : Nat) (previousNow : Option Rat) : Res Unit := do
  let bad := checkInvariants prog cfg previousNow
  if bad.isEmpty then return
  let line ← stateLine prog w cfg recs ev step
  throw s!"serq: error: invariant violated after step {step}: {"; ".intercalate bad}\nstate: {line.render}"

end Invariants
end SerqLang

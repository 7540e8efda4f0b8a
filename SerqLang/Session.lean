/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Growth

/-!
# Sessions (python/serq_spec/sessions.py, docs/language.md §11.3–§11.4)

Spawn, statement execution, holds, `turn`, `end`, settle. A thread (a session or a branch,
docs/language.md §11.13) runs its statements in zero time until it blocks (queued in a pool, a
job on a stage, a stalled growth) or ends. Python passes the `Session` object and mutates it;
here a thread is named by its `Tid` and read again from the configuration after every call that
may have changed it. Holds, queue places, cache entries, leases and growths are the thread's;
attributes are those of the list it uses (`attrThread`); draws, turns and the turn's client
records are its session's.
-/

namespace SerqLang

/-- sessions.py `STATEMENT_LIMIT`. -/
def STATEMENT_LIMIT : Nat := 1000000
/-- sessions.py `READY_LIMIT`. -/
def READY_LIMIT : Nat := 1000

/-- sessions.py `eval_in_session`. -/
def evalInSession (th : Tid) (e : Expr) (stream : DrawStream) (loc : Option Loc) : M Value :=
  evaluate { session := some th, stream, loc } e

/-- values.py `truth` with the statement's location. -/
def truthAt (v : Value) (what : String) (loc : Option Loc) : M Bool := do
  match Value.truth v what with
  | .ok b => return b
  | .error e => specError e loc

/-- `s.attrs[slot] = v` in the attribute list thread `th` uses. -/
def setAttr (th : Tid) (slot : Nat) (v : Value) : M Unit :=
  setThreadAttr th slot v

/-- Frames and the ready queue belong to a thread: a session or a branch (docs/language.md §11.13). -/
def pushFrame (th : Tid) (f : Frame) : M Unit :=
  modifyThread th fun s => { s with frames := s.frames ++ [f] }

def popFrame (th : Tid) : M Unit :=
  modifyThread th fun s => { s with frames := s.frames.dropLast }

def pushReady (th : Tid) : M Unit :=
  modifyCfg fun c => { c with ready := c.ready ++ [th] }

/-- sessions.py `unjoined_at`: the position of the `fork` whose body is the bottom frame of the
first live branch `s` forked. -/
def unjoinedAt (s : Session) : M (Option Loc) := do
  let prog ← getProg
  let cfg ← getCfg
  let some b := cfg.branches.find? (·.parent == some s.tid) | return none
  let some f := b.frames.head? | return none
  return prog.blocks.findSome? fun blk =>
    (blk.find? fun st => match st.stmt with
      | .fork body _ => body == f.block
      | _ => false).map (·.loc)

/-- sessions.py `unjoined`: a thread ends with branches still running (only a hand-edited IR
gets here: the linker refuses it), located at the `fork` of its first running branch. -/
def unjoined {α : Type} (s : Session) : M α := do
  let kind := if s.branch.isSome then "branch" else "session"
  specError s!"{kind} {s.tid.text} ended with {s.liveBranches} branch(es) still running: every `fork` needs a `join;` later in its block (docs/language.md §11.13)" (← unjoinedAt s)

/-! ## Spawn and end -/

/-- sessions.py `spawn`: serial, zero attributes, trace pick, `init`, then the session block. -/
def spawn : M Nat := do
  let prog ← getProg
  let cfg ← getCfg
  let serial := cfg.counters.nextSerial
  setCfg { cfg with counters := { cfg.counters with nextSerial := serial + 1 } }
  let attrs := (List.replicate prog.ir.attrs.length Value.zero).set SERIAL (Value.ofNat serial)
  let mut trace : Option (Nat × Nat) := none
  if let some tr := prog.ir.workload.trace then
    let n := tr.sessions.length
    if tr.ordered then trace := some (serial % n, 0)
    else
      let picks := (← getWork).tracePicks
      match picks[serial]? with
      | some pick =>
        if pick < n then trace := some (pick, 0)
        else sessionsFileError s!"the sessions file has no valid trace pick for session {serial}"
      | none => sessionsFileError s!"the sessions file has no valid trace pick for session {serial}"
  let w := prog.ir.workload
  let frames := [{ block := w.session, pc := 0, kind := "plain", stmt := none, stream := .session : Frame }]
  let frames := match w.init with
    | some b => frames ++ [{ block := b, pc := 0, kind := "plain", stmt := none, stream := .init }]
    | none => frames
  modifyCfg fun c => { c with sessions := c.sessions ++ [{ serial, attrs, frames, status := .ready, trace }] }
  pushReady serial
  return serial

/-- workload.py `check_consumed`: at a session's end every value of its streams was used. -/
def checkConsumed (serial : Nat) : M Unit := do
  let s ← session serial
  let some draws := (← getWork).sessions[serial]? | return
  let c (k : String) : Nat := (List.lookup k s.cursors).getD 0
  let mut problems : List String := []
  if c "init" != draws.init.length then
    problems := problems ++ [s!"init stream: used {c "init"} of {draws.init.length}"]
  if s.turns != draws.turns.length then
    problems := problems ++ [s!"ran {s.turns} turns, the file has {draws.turns.length}"]
  let mut k := 1
  for t in draws.turns do
    let tk := s!"turn:{k}"
    if c tk != t.length && decide (k ≤ s.turns) then
      problems := problems ++ [s!"turn {k} stream: used {c tk} of {t.length}"]
    k := k + 1
  if c "session" != draws.session.length then
    problems := problems ++ [s!"session stream: used {c "session"} of {draws.session.length}"]
  if !problems.isEmpty then
    sessionsFileError s!"the sessions file does not fit the program: session {serial} ended with {"; ".intercalate problems}"

/-- workload.py `check_machine_consumed`: at the end of a replay that no horizon or step limit
cut, every value of the machine stream was used (docs/sessions.md "Unused values"; the message is
serq/sessionsfile.py `unused_machine_draws`). step.py `run` calls it; `Ffi.runCore`, which runs
k steps and does not know whether the run is over, does not. -/
def checkMachineConsumed : M Unit := do
  let held := (← getWork).machine.length
  let used := (← getCfg).counters.machine
  if used < held then
    sessionsFileError (s!"the sessions file does not fit the program: the run ended with {held - used} " ++
      s!"unused draw(s) of the machine stream (it used {used} of {held})")

/-- sessions.py `branch_left`: a branch has ended (`endSession`: its block ended, or a hold of it
was rejected): it leaves, and a joining parent whose last branch it was becomes ready (at the
back of the ready queue). Its cache entries stay under its name, as a session's do (§11.13). -/
def branchLeft (b : Session) : M Unit := do
  modifyCfg fun c => { c with branches := c.branches.filter (·.tid != b.tid) }
  let some p := b.parent | internalError s!"internal: branch {b.tid.text} has no parent"
  let parent ← thread p
  let parent := { parent with liveBranches := parent.liveBranches - 1 }
  if parent.liveBranches == 0 && parent.status == .joining then
    setSession { parent with status := .ready }
    pushReady p
  else setSession parent

/-- sessions.py `end_session`: release every hold, cache entries stay; `closed` respawns. A
branch ends the same way when its block ends or a hold of it is rejected, then leaves (§11.13). -/
def endSession (th : Tid) : M Unit := do
  let s ← thread th
  if s.liveBranches > 0 then unjoined s
  for h in s.holds.reverse do
    releaseHold th h false
  modifyThread th fun s => { s with holds := [] }
  -- then its leases, in pool order (§11.3 `end`)
  for p in List.range (← getCfg).pools.length do
    if (← leaseOf p th).isSome then endLease th p
  modifyThread th fun s => { s with holds := [], frames := [], request := none, status := .ended }
  let s ← thread th
  if s.branch.isSome then
    branchLeft s
    return
  let serial := th.owner
  checkConsumed serial
  let prog ← getProg
  if let .closed _ := prog.ir.workload.arrival then
    if (← getCfg).counters.nextSerial < (← getWork).count then
      discard spawn

/-! ## Holds -/

/-- sessions.py `reject`: a hold that can never fit in pool `p` is rejected: `p`'s `rejected`
count, the record, `end`. -/
def reject (th : Tid) (p : Nat) : M Unit := do
  let ps ← pool p
  setPool p { ps with rejected := ps.rejected + 1 }
  let name ← poolName p
  modifyRec fun r => { r with rejected := r.rejected.push (.arr [th.toJson, .str name]) }
  endSession th

/-- sessions.py `hold_rejected`: a unit or reserve reading only attributes and numbers above
its pool's cap → rejected, the session ends. -/
def holdRejected (th : Tid) (h : Hold) (stream : DrawStream) (loc : Option Loc) : M Bool := do
  let prog ← getProg
  let saved ← threadAttrs th
  let mut static := List.range prog.ir.attrs.length
  for bnd in h.bindings do
    if staticExpr bnd.expr static then
      setAttr th bnd.slot (← evalInSession th bnd.expr stream loc)
    else static := static.erase bnd.slot
  for hp in h.pools do
    let p ← resolveRef { session := some th, stream, loc } hp.pool.base hp.pool.count hp.pool.index
    let cap ← capOf p
    let blk ← blockOf p
    for e? in [some hp.units, hp.reserve] do
      if let some e := e? then
        if staticExpr e static then
          let x ← evalInSession th e stream loc
          -- rounded up to a whole block (exact for a non-whole amount)
          let x ← match x with
            | .fin q => if decide (0 ≤ q) then pure (Value.fin (roundupBlock q blk)) else pure x
            | _ => pure x
          if Value.lt cap x then
            setThreadAttrs th saved
            reject th p
            return true
  setThreadAttrs th saved
  return false

/-- sessions.py `record_client`: a client metric (ttft, tpot, response) of the session's current
turn, recorded when known iff the turn counts in `turns` (its `turn;` ran after the warm-up). A
branch's request is its session's turn's (§11.13); the turn number is the thread's attribute. -/
def recordClient (name : String) (th : Tid) (value : Value) : M Unit := do
  if (← session th.owner).turnWarm then
    let now := (← getCfg).now
    let turn := (← threadAttrs th).getD TURN_NO Value.zero
    modifyRec fun r => { r with observations := r.observations.push
      (.arr [.str name, .nat th.owner, .int (intOf turn), ratJ now, CJ.val value]) }

/-- sessions.py `server_done`: a turn's server block ended; a turn that made no engine call
records its response. -/
def serverDone (serial : Nat) : M Unit := do
  let s ← session serial
  if !s.turnCalled then
    recordClient "response" (Tid.session serial) (.fin ((← getCfg).now - s.turnStart))

/-- sessions.py `exec_hold`: reject what can never fit, else queue in the first pool. -/
def execHold (th : Tid) (h : Hold) (ref : Nat × Nat) (stream : DrawStream) (loc : Option Loc) : M Unit := do
  if let some req := h.request then
    -- a branch's request is its session's turn's (§11.13)
    modifySession th.owner fun s => { s with turnCalled := true }
    let out ← match req.output with
      | some e => some <$> evalInSession th e stream loc
      | none => pure none
    let now := (← getCfg).now
    modifyThread th fun s => { s with request := some { stmt := ref, engine := req.engine, submit := now, output := out } }
  if (← holdRejected th h stream loc) then return
  let some hp := h.pools.head? | specError "a hold with no pool" loc
  let first ← resolveRef { session := some th, stream, loc } hp.pool.base hp.pool.count hp.pool.index
  modifyThread th fun s => { s with pending := some (ref.1, ref.2, stream) }
  enqueue first th

/-- sessions.py `load_back`: the part of an admitted prefix that came from pool `p`'s `spill`
tiers is copied back over p's link before the body starts (docs/language.md §11.8.1): the
session's own job on the link, of p's `spill` work read with `size` = the units loaded back,
`last` = now, `age` = 0, `waiting` = 0. Zero work takes no time (false: no job). -/
def loadBack (th : Tid) (p : Nat) (loaded : Rat) : M Bool := do
  let some sp := (← poolDecl p).spill | return false
  let now := (← getCfg).now
  let what := s!"pool {← poolName p}: `spill`"
  let env : EnvM := { session := some th, loc := some sp.loc, what,
                      ctx := [("size", .fin loaded), ("last", .fin now), ("age", Value.zero),
                              ("waiting", Value.zero)] }
  let w ← linkWork p sp env
  if !Value.nz w then return false
  let s ← thread th
  let admission : Int := match s.admSeq with
    | some a => (a : Int)
    | none => -1
  let job : Job := { serial := th.owner, stage := sp.link, mode := "plain", left := .value w, growing := none,
                     admission, branch := s.branch }
  setSession { s with job := some job, status := .stage sp.link }
  startJob job
  syncJob sp.link th
  return true

/-- sessions.py `next_load`: start the thread's next load-back (docs/language.md §11.8.1), the
hold's pools in their order, one job at a time, each read when it starts; zero work takes no time
and the next follows at once. True when a job started, false when none is left. -/
def nextLoad (th : Tid) : M Bool := do
  for _ in (← thread th).loads do
    match (← thread th).loads with
    | [] => return false
    | (p, l) :: rest =>
      modifyThread th fun s => { s with loads := rest }
      if (← loadBack th p l) then return true
  return false

/-- sessions.py `admit`: consume the own prefix, make room, allocate, number the admission,
enter the body. -/
def admit (th : Tid) (h : Hold) (ref : Nat × Nat) (stream : DrawStream) (pools : List Nat)
    (units : List Rat) (env : EnvM) (reserved : List Rat := [])
    (plan : List (Option (Option Content.Clause × Nat × Nat)) := [])
    (reuseRead : Option (Option Value) := none) : M Unit := do
  let hasCache := h.cache.isSome
  -- `reuse` is read once per admission: by the attempt when the hold has a content pool
  let reuse ← match reuseRead with
    | some r => pure r
    | none =>
      match h.reuse with
      | none => pure none
      | some r => do return some (← evaluate env r)
  leaveQueue (pools.headD 0) th
  let depth := (← thread th).frames.length
  let mut hold : HoldState := { stmt := ref, pools := [], alloc := [], position := [], advanced := [],
                                admission := 0, depth, stream }
  let mut largest : Rat := 0
  let mut loads : List (Nat × Rat) := []   -- (pool, units) of each prefix loaded back from a tier
  let mut j := 0
  for (p, u) in pools.zip units do
    let mut consumed : Rat := 0
    let mut alloc : Rat := 0
    match plan.getD j none with
    | some (c, onPool, fromTier) =>
      -- a `share content` pool: touch the hit blocks on the pool, allocate the rest from the free
      -- queue, identify the blocks of the first u tokens (docs/content.md §3); its block b is
      -- whole. The `fromTier` blocks after them come from its content tier (§6): refreshed there
      -- first, new blocks here identified at once, loaded back over the link
      let r := onPool + fromTier
      let b := (← ContentPool.contentOf p).block
      let (h1, bl) := hold.blocksOf j
      let bl ← match c with
        | some c => ContentPool.touch p c onPool bl
        | none => pure bl
      if fromTier > 0 then
        if let (some c, some sp) := (c, (← poolDecl p).spill) then
          ContentPool.tierTouch sp.tier c onPool fromTier
        let ps ← pool p
        setPool p { ps with tierHits := ps.tierHits + fromTier }
        loads := loads ++ [(p, ((fromTier * b : Nat) : Rat))]
      -- `max(0, roundup_block(u, b) // b − R)`: Nat subtraction
      let (bl, copies) ← allocateBlocks p (fromTier + ((roundupBlock u (some (b : Rat)) / (b : Rat)).floor.toNat - r)) bl
      startCopies copies
      ContentPool.identify p c bl ((r * b : Nat) : Rat)
      -- an engine that speculates counts its lookahead (and a pad's placeholder drafts) in u:
      -- the run's first step identifies its verified tokens instead (docs/language.md §7.3)
      let speculates := match env.ictx with
        | some ic => ic.slots != 0 || ic.lookahead != 0
        | none => false
      if !speculates then ContentPool.identify p c bl u
      hold := { (h1.setBlocks j bl) with
                content := h1.content ++ List.replicate (j - h1.content.length) none ++ [c] }
      consumed := ((r * b : Nat) : Rat)
      alloc := ((bl.length * b : Nat) : Rat)
    | none =>
      let (c, l) ← if hasCache && (← cachesIn p) then consumeOwnPrefix p th reuse else pure (0, 0)
      consumed := c
      if l > 0 then loads := loads ++ [(p, l)]
      alloc := roundupBlock u (← blockOf p)
      startCopies (← makeRoom p alloc)
      let ps ← pool p
      setPool p { ps with used := ps.used + alloc }
    largest := max largest consumed
    let ps ← pool p
    setPool p { ps with holders := ps.holders ++ [th], admissions := ps.admissions + 1 }
    j := j + 1
    hold := { hold with pools := hold.pools ++ [p], alloc := hold.alloc ++ [alloc],
                        position := hold.position ++ [consumed], advanced := hold.advanced ++ [false],
                        reserved := hold.reserved ++ [reserved.getD hold.reserved.length 0] }
    let name ← poolName p
    modifyRec fun r => { r with admitted := r.admitted.push (.arr [th.toJson, .str name, CJ.amt alloc, CJ.amt consumed]) }
  let cfg ← getCfg
  let adm := cfg.counters.nextAdm
  setCfg { cfg with counters := { cfg.counters with nextAdm := adm + 1 } }
  let hold := { hold with admission := adm }
  -- the largest consumed prefix, in the attribute list the thread uses (a sub-agent's own)
  setAttr th CACHED (.fin largest)
  modifyThread th fun s =>
    { s with admSeq := some adm, holds := s.holds ++ [hold], pending := none,
             frames := s.frames ++ [{ block := h.body, pc := 0, kind := "hold", stmt := some ref, stream }],
             status := .ready, loads }
  let _ ← nextLoad th

/-- The hold statement a session is queued with. -/
def pendingHold (th : Tid) : M (Hold × (Nat × Nat) × DrawStream × Option Loc) := do
  let s ← thread th
  let some (bi, pc, stream) := s.pending | specError s!"internal: session {th.text} has no queued hold to admit"
  let st ← stmtAt (bi, pc)
  match st.stmt with
  | .hold h => return (h, (bi, pc), stream, some st.loc)
  | _ => specError s!"internal: session {th.text} is pending on a statement that is no hold"

/-- sessions.py `ADMITTED`, `BLOCKED`, `REJECTED`: the outcomes of an admission attempt. -/
inductive Attempt where
  | admitted
  | blocked
  | rejected
  deriving DecidableEq, Inhabited

/-- sessions.py `content_hits`: per pool item of the hold, its `content (p, n, h)` read now,
before the bindings, its hit `k` and the `t` blocks after it on the pool's content tier
(docs/content.md §6; 0 without one); `cachedin` reads `(k + t)·b` during the attempt;
`(none, 0, 0)` for an item without a `content` clause. -/
def contentHits (h : Hold) (env : EnvM) (loc : Option Loc) : M (List (Option Content.Clause × Nat × Nat)) := do
  let mut out : List (Option Content.Clause × Nat × Nat) := []
  for hp in h.pools do
    match hp.content with
    | none => out := out ++ [(none, 0, 0)]
    | some cd =>
      let p ← resolveRef env hp.pool.base hp.pool.count hp.pool.index
      let cp ← evaluate env cd.«prefix»
      let cn ← evaluate env cd.length
      let ch ← evaluate env cd.history
      let c : Content.Clause := (cp, cn, ch)
      ContentPool.checkContent p c loc
      let k ← ContentPool.hit p (some c)
      let t ← match (← poolDecl p).spill with
        | some sp => ContentPool.tierHit sp.tier c k
        | none => pure 0
      let b := (← ContentPool.contentOf p).block
      modify fun st => { st with attempt := st.attempt.map fun (who, hits) =>
        (who, (p, (k + t) * b) :: hits.filter (·.1 != p)) }
      out := out ++ [(some c, k, t)]
  return out

/-- sessions.py `reused_blocks`: R = min(k, ⌊ρ/b⌋); ρ absent or +inf: k; ρ below one block: 0. -/
def reusedBlocks (k : Nat) (reuse : Option Value) (b : Nat) : Nat :=
  match reuse with
  | none => k
  | some .posInf => k
  | some .negInf => 0
  | some (.fin q) =>
    let f := (q / (b : Rat)).floor
    if f < 0 then 0 else min k f.toNat

/-- sessions.py `attempt`: the body of `try_admit`, with the attempt's hits set for `cachedin`. -/
def attempt (th : Tid) (h : Hold) (ref : Nat × Nat) (stream : DrawStream) (loc : Option Loc)
    (env : EnvM) : M Attempt := do
  let prog ← getProg
  let hits ← contentHits h env loc
  let saved ← threadAttrs th
  -- the slots a static amount may read: attributes, and bindings of static expressions
  let mut static := List.range prog.ir.attrs.length
  for bnd in h.bindings do
    setAttr th bnd.slot (← evaluate env bnd.expr)
    if !staticExpr bnd.expr static then static := static.erase bnd.slot
  let mut pools : List Nat := []
  let mut units : List Rat := []
  let mut amounts : List (List (Expr × Rat)) := []
  let mut reserved : List Rat := []
  for hp in h.pools do
    let p ← resolveRef env hp.pool.base hp.pool.count hp.pool.index
    let name ← poolName p
    let u ← unitsInt (← evaluate env hp.units) s!"units of pool {name}" loc s!"a negative amount for pool {name}"
    let mut mine : List (Expr × Rat) := [(hp.units, u)]
    let mut r : Rat := 0
    if let some re := hp.reserve then
      r ← unitsInt (← evaluate env re) s!"reserve of pool {name}" loc s!"a negative amount for pool {name}"
      mine := mine ++ [(re, r)]
    pools := pools ++ [p]
    units := units ++ [u]
    amounts := amounts ++ [mine]
    let rh := if (← poolDecl p).reserveHeld && decide (r > 0) then roundupBlock r (← blockOf p) else 0
    reserved := reserved ++ [rh]
  for (p, mine) in pools.zip amounts do
    let cap ← capOf p
    let blk ← blockOf p
    if mine.any (fun (e, x) => Value.lt cap (.fin (roundupBlock x blk)) && staticExpr e static) then
      setThreadAttrs th saved
      leaveQueue (pools.headD 0) th
      modifyThread th fun s => { s with pending := none }
      reject th p
      return .rejected
  let mut reuseRead : Option (Option Value) := none
  let mut onContent := false
  for p in pools do
    if (← isContent p) then onContent := true
  if onContent then
    reuseRead := some (← match h.reuse with
      | none => pure none
      | some r => do return some (← evaluate env r))
  let reuse := reuseRead.getD none
  let mut plan : List (Option (Option Content.Clause × Nat × Nat)) := []
  for ((p, mine), (c, k, t)) in (pools.zip amounts).zip hits do
    let need := (mine.map (·.2)).foldl max 0
    if (← isContent p) then
      -- vLLM's get_num_blocks_to_allocate against get_num_free_blocks: the R reused blocks that
      -- nobody references (E) leave the free queue too; the block b of a content pool is whole;
      -- with `reserve held`, the blocks the holders reserved and have not allocated are not free
      let b := (← ContentPool.contentOf p).block
      -- of the R reused blocks the first min(k, R) are on the pool, the rest come from its
      -- content tier and take new blocks (docs/content.md §6)
      let r := reusedBlocks (k + t) reuse b
      let onPool := min k r
      let e ← match c with
        | some c => ContentPool.unreferencedHits p c onPool
        | none => pure 0
      let n := (roundupBlock need (some (b : Rat)) / (b : Rat)).floor.toNat - r + (r - onPool)
      let held ← if (← poolDecl p).reserveHeld then heldReservations p else pure 0
      let reservedBlocks := (held / (b : Rat)).floor.toNat
      plan := plan ++ [some (c, onPool, r - onPool)]
      if n + e + reservedBlocks > (← ContentPool.freeBlocks p) then return .blocked
    else
      plan := plan ++ [none]
      let held ← if (← poolDecl p).reserveHeld then heldReservations p else pure 0
      if Value.lt (← capOf p) (.fin ((← pool p).used + held + roundupBlock need (← blockOf p))) then
        return .blocked   -- cached units never block
  admit th h ref stream pools units env reserved plan reuseRead
  return .admitted

/-- sessions.py `try_admit`: bindings, units, reserves read now; `admitted` if every pool fits,
else `blocked` (it waits at the head) — or `rejected` when some pool's need exceeds the pool's
cap and the exceeding amount reads only attributes, bindings and numbers (the test of
`holdRejected`): it can never fit (docs/spec.md "A hold that can never fit").
Inside engine E's admission (`ictx`) `budget_left(E)` is the budget left and the schedule's
`let`s are visible. -/
def tryAdmit (th : Tid) (ictx : Option IterCtx := none) : M Attempt := do
  let (h, ref, stream, loc) ← pendingHold th
  let env : EnvM := match ictx with
    | some ic => { session := some th, stream, loc, engine := some ic.engine, ictx := some ic,
                   -- the budget left minus the drafting slots (docs/language.md §7.3)
                   -- (an `exclusive prefill` admits with a budget > 0 that may not cover them: then
                   -- it is negative, sessions.py's `ictx.left - ictx.slots`)
                   admitLeft := some (ic.engine, match ic.left with
                     | .inf => Value.posInf
                     | .n l => Value.ofInt ((l : Int) - (ic.slots : Int))) }
    | none => { session := some th, stream, loc }
  -- `cachedin` of a content pool reads this attempt's hits (config.py `Config.attempt`)
  modify fun st => { st with attempt := some (th, []) }
  let out ← attempt th h ref stream loc env
  modify fun st => { st with attempt := none }
  return out

/-- sessions.py `first_token`: the first completion of a prefill run inside the request's hold. -/
def firstToken (th : Tid) : M Unit := do
  let s ← thread th
  if let some r := s.request then
    if r.first.isNone && s.holds.any (·.stmt == r.stmt) then
      let now := (← getCfg).now
      setSession { s with request := some { r with first := some now } }
      recordClient "ttft" th (.fin (now - r.submit))

/-- sessions.py `end_scope`: what a scope end does besides the release — `computed` := 0, the
preemption memory of the hold's `pools` is cleared, the client records of the request made by
statement `stmt` (an async end whose hold a preemption released already comes here directly,
docs/async.md §3 item 5). -/
def endScope (th : Tid) (stmt : Nat × Nat) (pools : List Nat) : M Unit := do
  setAttr th COMPUTED Value.zero
  modifyThread th fun s => { s with preemptPos := s.preemptPos.filter (fun pp => !pools.contains pp.1) }
  let s ← thread th
  if let some r := s.request then
    if r.stmt == stmt then
      let now := (← getCfg).now
      let response := now - r.submit
      recordClient "response" th (.fin response)
      if let some first := r.first then
        if let some (.fin out) := r.output then
          if out > 1 then
            let ttft := first - r.submit
            recordClient "tpot" th (.fin ((response - ttft) / (out - 1)))
      modifyThread th fun s => { s with request := none }

/-- sessions.py `lease_clause`: the hold's `lease P (t)` read at its scope end (Session moment):
`(p, endsAt)`, endsAt = now + t or none for t = inf; none without a clause, with t = 0, or when
the hold no longer holds P. -/
def leaseClause (th : Tid) (hold : HoldState) : M (Option (Nat × Option Rat)) := do
  let st ← stmtAt hold.stmt
  let some l := (match st.stmt with | .hold h => h.lease | _ => none) | return none
  let env : EnvM := { session := some th, stream := hold.stream, loc := some st.loc }
  let t ← evaluate env l.time
  if Value.lt t Value.zero then
    specError s!"a lease time must be >= 0 seconds, got {t.toWire}" (some st.loc)
  let p ← resolveRef env l.pool.base l.pool.count l.pool.index
  -- nothing to lease: P was released early (`release P;`), or is not the hold's
  if !hold.pools.contains p then return none
  match t with
  | .fin q => if q == 0 then return none else return some (p, some ((← getCfg).now + q))
  | _ => return some (p, none)   -- +inf (−inf was refused above)

/-- sessions.py `scope_end`: release (a leased pool's part stays with the session), reset
`computed`, clear preemption memory, client records. -/
def scopeEnd (th : Tid) : M Unit := do
  let s ← thread th
  let some hold := s.holds.getLast? | specError s!"internal: scope end of session {th.text} without a hold"
  setSession { s with holds := s.holds.dropLast }
  let pools := hold.pools
  let mut rest := hold
  let clause ← leaseClause th hold
  if let some (p, endsAt) := clause then
    let loc := (← stmtAt hold.stmt).loc
    rest ← startLease th hold p endsAt (some loc)
  releaseHold th rest false
  endScope th hold.stmt pools

/-- sessions.py `make_pending`: the end of a lagged hold's body (docs/async.md §3 item 1) — a pending
resident on engine `e` (a decode wanting one EOS token if the hold's `eos (…)` is non-zero, else
none), the session ending, its serial in the engine's pending list; nothing is released. -/
def makePending (th : Tid) (e : Nat) : M Unit := do
  let prog ← getProg
  let s ← thread th
  let some hold := s.holds.getLast? | specError s!"internal: a lagged end of session {th.text} without a hold"
  let st ← stmtAt hold.stmt
  let mut eos : Nat := 0
  if let .hold h := st.stmt then
    if let some x := h.eos then
      eos := if Value.nz (← evalInSession th x hold.stream (some st.loc)) then 1 else 0
  let growing : Option Nat := match (prog.memoryOf[e]?).getD none with
    | some m => if hold.pools.contains m then some m else none
    | none => none
  -- one more step when vLLM cannot know the request stopped (docs/async.md §8 item 5)
  let (left, drafts) ← pendingWant th eos
  let job : Job := { serial := th.owner, stage := e, mode := "decode", left := .tokens left, growing,
                     admission := (hold.admission : Int), pending := true, branch := s.branch, drafts }
  modifyThread th fun s => { s with job := some job, status := .ending e }
  addResident e job
  let est ← stage e
  setStage e { est with pending := est.pending ++ [th] }

/-- sessions.py `apply_ends`: the `ends` event (docs/async.md §3 item 5) — each due end of engine `e`,
in order: its hold frame is popped, its pending resident (if not preempted) leaves the engine and
the hold's scope ends as without lag (a preempted one's hold is released already: only the rest
of the scope end), and the session becomes ready. -/
def applyEnds (e : Nat) : M Unit := do
  let est ← stage e
  setStage e { est with due := [] }
  for serial in est.due do
    let s ← thread serial
    let some f := s.frames.getLast? | specError s!"internal: an end of session {serial.text} without a frame"
    popFrame serial
    match s.job with
    | some _ =>
      let st ← stage e
      setStage e { st with jobs := st.jobs.filter (·.tid != serial) }
      modifyThread serial fun s => { s with job := none }
      scopeEnd serial
    | none =>
      let some ref := f.stmt | specError s!"internal: the hold frame of session {serial.text} has no statement"
      endScope serial ref []
    modifyThread serial fun s => { s with status := .ready }
    pushReady serial

/-! ## Statements -/

/-- sessions.py `exec_choose`: the index with the least keys, ties to the smallest. -/
def execChoose (th : Tid) (slot : Nat) (count : Expr) (keys : List Expr) (env : EnvM) (loc : Option Loc) : M Unit := do
  let nv ← evaluate env count
  let n ← match Value.asInt nv "choose count" with
    | .ok i => pure i
    | .error e => specError e loc
  if n < 1 then specError "choose over an empty range" loc
  let mut best := 0
  let mut bestKey : Option (List Value) := none
  for j in List.range n.toNat do
    setAttr th slot (Value.ofNat j)
    let key ← keys.mapM (evaluate env)
    match bestKey with
    | none =>
      best := j
      bestKey := some key
    | some bk =>
      if lexLt key bk then
        best := j
        bestKey := some key
  setAttr th slot (Value.ofNat best)

/-- sessions.py `exec_accept` (docs/language.md §7.3), the `turn` block's last statement: the
turn's acceptance counts, n values of the acceptance law from the turn's stream (`take`), one per
output number, in place of a trace row's. `serq sample` drew them (serq/draws.py `accept_count`);
a replay checks each is a whole count. Values in messages are wire text (docs/lean.md). -/
def execAccept (th : Tid) (count rate : Expr) (env : EnvM) (loc : Option Loc) : M Unit := do
  let nv ← evaluate env count
  let n ← match nv with
    | .fin q =>
      if q.den == 1 && decide (0 ≤ q.num) && decide (q.num ≤ 1000000) then pure q.num.toNat
      else specError s!"`accept (n, alpha)` needs n, the turn's output count, a whole number from 0 to 1000000, got {nv.toWire}" loc
    | _ => specError s!"`accept (n, alpha)` needs n, the turn's output count, a whole number from 0 to 1000000, got {nv.toWire}" loc
  let alpha ← evaluate env rate
  -- serq/draws.py `check_args` of the acceptance law, also when n = 0
  if let some msg := drawArgsError "accept" [alpha] then specError msg loc
  let mut counts : List Nat := []
  for _ in List.range n do
    let v ← take env "accept" [alpha]
    match v with
    | .fin q =>
      if q.den == 1 && decide (0 ≤ q.num) && decide (q.num ≤ 999999) then
        counts := counts ++ [q.num.toNat]
      else
        specError s!"an acceptance count of `accept (n, alpha)` is a whole number from 0 to 999999, got {v.toWire}: the sessions file does not fit the program" loc
    | _ =>
      specError s!"an acceptance count of `accept (n, alpha)` is a whole number from 0 to 999999, got {v.toWire}: the sessions file does not fit the program" loc
  modifyThread th fun s => { s with accept := some counts }

/-- sessions.py `exec_turn`: turn_no += 1, load the next trace turn, run `turn` then the server. -/
def execTurn (serial : Nat) : M Unit := do
  let prog ← getProg
  let s ← session serial
  let tn ← liftRes (Value.add (s.attr TURN_NO) Value.one)
  let cfg ← getCfg
  let mut s := { (s.setAttr TURN_NO tn) with turns := s.turns + 1, turnStart := cfg.now,
                                             turnWarm := cfg.warm, turnCalled := false }
  if let some tr := prog.ir.workload.trace then
    if let some (pick, k) := s.trace then
      let rows := tr.sessions.getD pick []
      match rows[k]? with
      | some row =>
        s := s.setAttr NEW row.new |>.setAttr OUT row.out |>.setAttr THINK row.think |>.setAttr FORCED row.forced
        -- speculative decoding's acceptance counts, when the row has them (docs/language.md §7.3)
        s := { s with accept := row.accept }
        s := s.setAttr MORE (Value.ofBool (decide (k + 1 < rows.length)))
        s := { s with trace := some (pick, k + 1) }
      | none => s := s.setAttr MORE Value.zero
  setSession s
  let w := prog.ir.workload
  if let some b := w.server then
    pushFrame serial { block := b, pc := 0, kind := "server", stmt := none, stream := .session }
  if let some b := w.turn then
    pushFrame serial { block := b, pc := 0, kind := "plain", stmt := none, stream := .turn s.turns }

/-- serq/exact.py `negative_work`, `work_not_finite`, `negative_transfer_amount`: a run's work
and a transfer's amount out of their range, with the value and what to do (both engines' words;
here the value is its wire text, docs/lean.md). -/
def negativeWork (w : Value) : String :=
  s!"negative work {w.toWire}: a run's work is an amount of service >= 0; keep the expression from going below 0 (e.g. max(0, …))"

def workNotFinite (w : Value) : String :=
  s!"work {w.toWire} is not finite: a run's work must be a finite amount of service; bound the expression (e.g. min(…, LIMIT)) or look for a division by 0 in it"

def negativeTransferAmount (pool : String) : String :=
  "negative transfer amount {}: n is the tokens the copy lands in pool " ++ pool ++
    ", a number >= 0; keep the expression from going below 0 (e.g. max(0, …))"

/-- sessions.py `exec_run`: a job on the stage; zero work completes at once and yields. `th` is
the thread that runs it (a branch runs on stages that are not engines). -/
def execRun (th : Tid) (sref : Ref) (mode : RunMode) (workE : Expr) (growing : Option Nat)
    (draftsE : Option (Expr × Option Loc)) (env : EnvM) (loc : Option Loc) : M Bool := do
  let serial := th.owner
  let stg ← resolveRef env sref.base sref.count sref.index
  let d ← stageDecl stg
  let w ← evaluate env workE
  let q ← match w with
    | .fin q => pure q
    | .negInf => specError (negativeWork w) loc
    | _ => specError (workNotFinite w) loc
  if q < 0 then specError (negativeWork w) loc
  let modeStr := match mode with
    | .plain => "plain"
    | .prefill => "prefill"
    | .decode => "decode"
  let isStep := d.isStep
  let mut left : Work := .value w
  let me ← thread th
  if isStep && me.liveBranches != 0 then
    specError s!"a run on engine {d.name} before the `join;` of a fork: the linker refuses this (docs/language.md §11.13)" loc
  if isStep then
    -- tokens are whole, like `tokens cap` and `each at most`
    if q.den != 1 then specError s!"engine {d.name}: run work must be a whole number of tokens, got {w.toWire}" loc
    left := .tokens q.num.toNat
    if let some g := growing then
      if (holdOf (← thread th) g).isNone then
        specError s!"a run growing pool {← poolName g} outside a hold of it" loc
  -- sessions.py exec_run: `speculate (k)`, a whole number >= 0 (docs/language.md §7.3), read
  -- also when the work is 0
  let drafts : Nat ← match draftsE with
    | none => pure 0
    | some (de, dloc) => do
      -- read and located at the clause (`st["speculate"].get("at") or at`)
      let sat := dloc.orElse fun _ => loc
      match (← evaluate { env with loc := sat } de) with
      | .fin k =>
        if k < 0 || k.den != 1 then specError s!"speculate: the drafts per step must be a whole number >= 0, got {(Value.fin k).toWire}" sat
        pure k.num.toNat
      | v => specError s!"speculate: the drafts per step must be a whole number >= 0, got {v.toWire}" sat
  if draftsE.isSome then
    if let .step sd := d.kind then
      -- a pending resident's wasted step has them (docs/async.md §8 item 5)
      if sd.lag == 1 then modifyThread th fun s => { s with specDrafts := drafts }
  if q == 0 then
    modifyRec fun r => { r with finished := r.finished.push (.arr [.str d.name, th.toJson]) }
    if mode == .prefill then firstToken th
    pushReady th
    return true
  let s ← thread th
  let admission : Int := match s.admSeq with
    | some a => (a : Int)
    | none => -1
  let job : Job := { serial, stage := stg, mode := modeStr, left, growing, admission, branch := s.branch, drafts }
  setSession { s with job := some job, status := .stage stg }
  if isStep then addResident stg job else startJob job
  syncJob stg th
  return false

/-- sessions.py `exec_flow`: `run a, b, … (w)` (docs/language.md §11.14): one job present at
all the stages at once; zero work completes at once at every stage and yields. -/
def execFlow (th : Tid) (refs : List Ref) (workE : Expr) (env : EnvM) (loc : Option Loc) : M Bool := do
  let mut stages : List Nat := []
  for r in refs do
    let x ← resolveRef env r.base r.count r.index
    stages := stages ++ [x]
  let w ← evaluate env workE
  let q ← match w with
    | .fin q => pure q
    | .negInf => specError (negativeWork w) loc
    | _ => specError (workNotFinite w) loc
  if q < 0 then specError (negativeWork w) loc
  startFlow th stages w

/-! ## `transfer` (docs/language.md §11.15) -/

/-- sessions.py `held_part`: the session's allocation of pool `p` that `load` advances, its
innermost hold of `p`, else its lease of `p` (a leased allocation keeps its position, §11.4). -/
def heldPart (serial : Tid) (p : Nat) : M (Option HoldState) := do
  if let some h := holdOf (← thread serial) p then return some h
  return (← leaseOf p serial).map (·.part)

/-- `load p (n)` on that allocation (sessions.py's `load` branch of `exec_stmt`, and
`exec_transfer_end`): `missing` words a session that holds no allocation of `p`, `beyond` the
position beyond the allocation (given both). -/
def loadUnits (serial : Tid) (p : Nat) (n : Rat) (missing : String) (beyond : Rat → Rat → String)
    (loc : Option Loc) : M Unit := do
  let s ← thread serial
  match holdIndex s p with
  | some k =>
    let h := s.holds.getD k default
    let i := h.slot p
    if h.position.getD i 0 + n > h.alloc.getD i 0 then
      specError (beyond (h.position.getD i 0 + n) (h.alloc.getD i 0)) loc
    let h := { h with position := h.position.set i (h.position.getD i 0 + n),
                      advanced := h.advanced.set i true }
    setSession { s with holds := s.holds.set k h }
  | none =>
    -- a leased allocation keeps its position (§11.4)
    let some l ← leaseOf p serial | specError missing loc
    let h := l.part
    if h.position.getD 0 0 + n > h.alloc.getD 0 0 then
      specError (beyond (h.position.getD 0 0 + n) (h.alloc.getD 0 0)) loc
    let h := { h with position := h.position.set 0 (h.position.getD 0 0 + n), advanced := h.advanced.set 0 true }
    modifyCfg fun c => { c with leases := c.leases.map (fun x =>
      if x.pool == p && x.serial == serial then { x with part := h } else x) }

/-- sessions.py `exec_transfer`: the copy of `transfer S (w) from P to Q (n);`. The session holds
P and Q (a hold or a lease of each) and runs w on the link S as `run S (w);` does (on several
links as `run a, b, … (w);`, `execFlow`); the landing
is the next statement, run when the session resumes after the job. -/
def execTransfer (th : Tid) (link : Ref ⊕ List Ref) (workE : Expr) (src dst : Ref) (env : EnvM)
    (loc : Option Loc) : M Bool := do
  let p ← resolveRef env src.base src.count src.index
  let q ← resolveRef env dst.base dst.count dst.index
  if p == q then
    specError s!"transfer from pool {← poolName p} to itself: the two pool indices name one pool; name the KV's pool and another" loc
  for (pool, role) in [(p, "from"), (q, "to")] do
    if (← heldPart th pool).isNone then
      specError s!"transfer {role} pool {← poolName pool}: the session holds no allocation of it (a hold or a lease); take it in a `hold` around the transfer, or keep it with `lease`" loc
  match link with
  | .inl sref => execRun th sref .plain workE none none env loc
  | .inr refs => execFlow th refs workE env loc   -- over several links at once (§11.14)

/-- sessions.py `exec_transfer_end`: the landing, once the copy's job has completed — Q's
position + n exactly as `load Q (n);`, then P released exactly as `release P;`. (Serq_spec
prints the two numbers of the last error as doubles, this mirror exactly.) -/
def execTransferEnd (serial : Tid) (src dst : Ref) (unitsE : Expr) (env : EnvM) (loc : Option Loc) : M Unit := do
  let p ← resolveRef env src.base src.count src.index
  let q ← resolveRef env dst.base dst.count dst.index
  let name ← poolName q
  let n ← unitsInt (← evaluate env unitsE) "transfer amount" loc (negativeTransferAmount name)
  loadUnits serial q n
    s!"transfer to pool {name}: the session no longer holds it when the copy ends (its lease ran out during the copy); lease it for longer"
    (fun pos alloc => s!"transfer to pool {name}: position {(Value.fin pos).toWire} beyond the allocation {(Value.fin alloc).toWire}; hold at least the position plus n")
    loc
  releasePoolEarly serial p loc

/-! ## Branches: `fork` and `join` (docs/language.md §11.13) -/

/-- sessions.py `exec_fork`: a new branch of the session, at the back of the ready queue; the
forking thread goes on at once; a fork inside a hold is allowed (the parent keeps its holds).
The branch draws with its session's cursors and uses the forking thread's attributes
(`attrThread` follows `parent`) — unless the fork's block holds a pool (`own`): a sub-agent's
attributes are its own, a copy of the forking thread's taken now (§11.13). -/
def execFork (th : Tid) (body : Nat) (own : Bool) (stream : DrawStream) (_loc : Option Loc) : M Unit := do
  let copied ← threadAttrs th
  let root ← session th.owner
  let k := root.forks + 1
  setSession { root with forks := k }
  let b : Session := { serial := th.owner, attrs := if own then copied else [], status := .ready,
                       branch := some k, parent := some th, own,
                       frames := [{ block := body, pc := 0, kind := "plain", stmt := none, stream }] }
  modifyThread th fun s => { s with liveBranches := s.liveBranches + 1 }
  modifyCfg fun c => { c with branches := c.branches ++ [b] }
  pushReady (.branch th.owner k)

/-- sessions.py `exec_join`: wait while a branch this thread forked is running. -/
def execJoin (th : Tid) : M Unit := do
  let s ← thread th
  if s.liveBranches > 0 then setSession { s with status := .joining }

/-- sessions.py `exec_stmt`; `true` = the thread yields. `th` is the thread (a session or a
branch): its holds, entries and leases are its own, its attributes those it uses
(`attrThread`), its draws its session's. -/
def execStmt (th : Tid) (st : Located) (ref : Nat × Nat) (stream : DrawStream) : M Bool := do
  let prog ← getProg
  let serial := th.owner
  let loc := some st.loc
  let env : EnvM := { session := some th, stream, loc }
  let me ← thread th
  if (me.liveBranches != 0 && !branchMay st.stmt) || (me.branch.isSome && !branchBodyMay st.stmt) then
    specError s!"`{st.stmt.op}` in a branch, or before the `join;` of a fork: the linker refuses this (docs/language.md §11.13)" loc
  match st.stmt with
  | .set slot e => setAttr th slot (← evaluate env e)
  | .observe name e =>
    let v ← evaluate env e
    -- the thread's serial and its turn number (the attribute list it uses)
    let me := { (← thread th) with attrs := (← threadAttrs th) }
    recordObservation ((prog.ir.observes[name]?).getD s!"observe{name}") (some me) v
  | .accept n a => execAccept th n a env loc
  | .branch c t el =>
    if (← truthAt (← evaluate env c) "a branch guard" loc) then
      pushFrame th { block := t, pc := 0, kind := "plain", stmt := none, stream }
    else if let some e := el then
      pushFrame th { block := e, pc := 0, kind := "plain", stmt := none, stream }
  | .while_ c body =>
    if (← truthAt (← evaluate env c) "a while guard" loc) then
      pushFrame th { block := body, pc := 0, kind := "while", stmt := some ref, stream }
  | .loop body => pushFrame th { block := body, pc := 0, kind := "loop", stmt := some ref, stream }
  | .choose slot count keys => execChoose th slot count keys env loc
  | .turn => execTurn serial
  | .end_ => endSession th
  | .hold h => execHold th h ref stream loc
  | .run r mode w g k => return (← execRun th r mode w g k env loc)
  | .flow refs w => return (← execFlow th refs w env loc)
  | .grow r u =>
    let p ← resolveRef env r.base r.count r.index
    let d ← unitsInt (← evaluate env u) "grow amount" loc "negative growth {}"
    if (holdOf (← thread th) p).isNone then
      specError s!"grow of pool {← poolName p} outside a hold of it" loc
    discard (grow th p d none)
  | .load r u =>
    let p ← resolveRef env r.base r.count r.index
    let n ← unitsInt (← evaluate env u) "load amount" loc "negative load {}"
    loadUnits th p n s!"load of pool {← poolName p} outside a hold or lease of it"
      (fun _ _ => "load beyond the allocation") loc
  | .drop r =>
    let p ← resolveRef env r.base r.count r.index
    dropEntry p th
  | .release r =>
    let p ← resolveRef env r.base r.count r.index
    releasePoolEarly th p loc
  | .transfer s w src dst => return (← execTransfer th s w src dst env loc)
  | .transferEnd src dst u => execTransferEnd th src dst u env loc
  | .fork body own => execFork th body own stream loc
  | .join => execJoin th
  return false

/-- sessions.py `end_frame`. -/
def endFrame (th : Tid) (f : Frame) : M Unit := do
  let serial := th.owner
  if f.kind == "while" then
    let some sref := f.stmt | specError "internal: a while frame without its statement"
    let st ← stmtAt sref
    match st.stmt with
    | .while_ c _ =>
      let v ← evalInSession th c f.stream (some st.loc)
      if (← truthAt v "a while guard" (some st.loc)) then
        modifyThread th fun s => { s with frames := s.frames.dropLast ++ [{ f with pc := 0 }] }
        return
      popFrame th
    | _ => specError "internal: a while frame whose statement is no while"
  else if f.kind == "loop" then
    modifyThread th fun s => { s with frames := s.frames.dropLast ++ [{ f with pc := 0 }] }
  else if f.kind == "hold" then
    let some hold := (← thread th).holds.getLast?
      | specError s!"internal: a hold frame of session {th.text} without a hold"
    match (← lagEngine hold) with
    | some e => makePending th e   -- the frame stays until the `ends` event (docs/async.md)
    | none =>
      popFrame th
      scopeEnd th
  else if f.kind == "server" then
    popFrame serial
    serverDone serial
  else popFrame th

/-- sessions.py `run_session`: execute statements in zero time until the thread (a session or a
branch) blocks, yields or ends. -/
def runSession (th : Tid) : M Unit := do
  -- back from a load-back with another pending: that one starts first (docs/language.md §11.8.1)
  if !(← thread th).loads.isEmpty then
    if (← nextLoad th) then return
  let prog ← getProg
  let mut count := 0
  repeat
    let s ← thread th
    if s.status != .ready then break
    match s.frames.getLast? with
    | none =>
      endSession th   -- a branch's end too (§11.13)
      break
    | some f =>
      let block := prog.ir.blocks.getD f.block []
      match block[f.pc]? with
      | none => endFrame th f
      | some st =>
        modifyThread th fun s => { s with frames := s.frames.dropLast ++ [{ f with pc := f.pc + 1 }] }
        count := count + 1
        if count > STATEMENT_LIMIT then
          specError s!"session {th.text} ran {STATEMENT_LIMIT} statements without blocking" (some st.loc)
        if (← execStmt th st (f.block, f.pc) f.stream) then break

/-! ## Settle -/

/-- sessions.py `retry_growers`: stalled growths in FIFO order; the head blocks the rest. -/
def retryGrowers (p : Nat) : M Unit := do
  repeat
    let st ← pool p
    let some serial := st.growers.head? | break
    let s ← thread serial
    let some (_, target) := s.growth | specError s!"internal: grower {serial.text} of pool {← poolName p} has no growth"
    let some k := holdIndex s p | specError s!"internal: thread {serial.text} holds no pool {p}"
    let h := s.holds.getD k default
    let i := h.slot p
    let need := target - h.alloc.getD i 0
    if Value.lt (← capOf p) (.fin (st.used + need)) then break
    startCopies (← addUnits p serial k i need)
    let st ← pool p
    setPool p { st with growers := st.growers.drop 1 }
    let s ← thread serial
    let s := { s with growth := none }
    match s.job with
    | some j => setSession { s with status := .stage j.stage }
    | none =>
      setSession { s with status := .ready }
      pushReady serial

/-- sessions.py `settle`: run ready sessions in FIFO order; retry growers and admit heads of
non-engine pools; repeat until nothing is ready. -/
def settle : M Unit := do
  let prog ← getProg
  let mut readied : List (Tid × Nat) := []
  repeat
    repeat
      let cfg ← getCfg
      let some th := cfg.ready.head? | break
      setCfg { cfg with ready := cfg.ready.drop 1 }
      let s ← thread th
      if s.status == .ready then
        let n := (List.lookup th readied).getD 0 + 1
        readied := (th, n) :: readied.filter (·.1 != th)
        if n > READY_LIMIT then
          specError s!"session {th.text} became ready {READY_LIMIT} times in one instant"
        runSession th
    for p in List.range prog.ir.pools.length do
      retryGrowers p
      if (← poolDecl p).admittedBy.isNone then
        repeat
          let some head ← selectHead p | break
          match (← tryAdmit head.serial) with
          | .blocked => break
          | .admitted => pushReady head.serial
          | .rejected => pure ()   -- the next head is tried
    if (← getCfg).ready.isEmpty then break

end SerqLang

/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Lag

/-!
# Growth and preemption (python/serq_spec/growth.py, docs/language.md §11.7)

`grow` adds whole blocks to a hold; when the pool is full it preempts a victim chosen by the
pool's `preempt` rule, or stalls. In a pool that is no engine's memory every holder not in a
delay is a candidate (§11.7). The iteration being formed (config.py `IterCtx`) is threaded
explicitly: a preempted victim already served in it leaves the batch.
-/

namespace SerqLang

/-- The memory pool of a step engine. -/
def StageDecl.memory? (d : StageDecl) : Option Nat :=
  match d.kind with
  | .step sd => sd.memory
  | _ => none

/-- Insert or replace `(k, v)` in a list sorted by `k`. -/
def upsertNat {β : Type} (k : Nat) (v : β) : List (Nat × β) → List (Nat × β)
  | [] => [(k, v)]
  | (k', v') :: rest =>
    if k' == k then (k, v) :: rest
    else if k < k' then (k, v) :: (k', v') :: rest
    else (k', v') :: upsertNat k v rest

/-- The engines whose memory is pool `p`. -/
def enginesOf (p : Nat) : M (List Nat) := do
  let prog ← getProg
  return prog.engines.filter fun e => (prog.memoryOf[e]?).getD none == some p

/-- growth.py `stall`: no room and no victim — the thread waits in p's growers. -/
def stall (serial : Tid) (p : Nat) (target : Rat) : M Unit := do
  modifyThread serial fun s => { s with status := .growing p, growth := some (p, target) }
  let st ← pool p
  setPool p { st with growers := st.growers ++ [serial] }

/-- growth.py `in_delay`: is the session a job of a delay stage? -/
def inDelay (s : Session) : M Bool := do
  match s.status with
  | .stage k =>
    match (← stageDecl k).kind with
    | .delay => return true
    | _ => return false
  | _ => return false

/-- growth.py `preemption_candidates`: holders of p that are residents of an engine whose
memory is p; for a pool that is no engine's memory, every holder of p except one sitting in a
delay stage; an ending session only by `isCandidate` (docs/async.md §3 item 3). A thread with
branches running is none: its hold cannot go back to its statement under them (§11.13). -/
def preemptionCandidates (p : Nat) : M (List Session) := do
  let engines ← enginesOf p
  let mut out : List Session := []
  for serial in (← pool p).holders do
    let s ← thread serial
    if s.liveBranches != 0 then continue
    let excluded := match s.status with
      | .ending _ => !isCandidate s p
      | _ => false
    if excluded then continue
    if engines.isEmpty then
      if !(← inDelay s) then out := out ++ [s]
    else if let some j := s.job then
      if engines.contains j.stage then out := out ++ [s]
  return out

/-- Is the session's job a resident of a step engine? -/
def residentJob (s : Session) : M (Option Job) := do
  match s.job with
  | some j => return if (← getProg).engines.contains j.stage then some j else none
  | none => return none

/-- growth.py `choose_victim`: `lifo` = the latest admitted candidate; `by (k…)` = least keys,
ties to the latest admitted. -/
def chooseVictim (p : Nat) : M (Option Tid) := do
  match (← poolDecl p).preempt with
  | .none => return none
  | .lifo =>
    let cands ← preemptionCandidates p
    let mut best : Option Session := none
    for s in cands do
      match best with
      | none => best := some s
      | some b => if (s.admSeq.getD 0) > (b.admSeq.getD 0) then best := some s
    return best.map (·.tid)
  | .keyed keys _ =>
    let cands ← preemptionCandidates p
    let mut best : Option (Tid × List Value) := none
    for s in cands do
      let some h := holdOf s p | specError s!"internal: candidate {s.tid.text} holds no {p}"
      let i := h.slot p
      let rj ← residentJob s
      let env : EnvM := { session := some s.tid, engine := rj.map (·.stage), job := rj,
                          loc := (← poolDecl p).preemptAt,   -- growth.py: at the clause
                          what := some s!"pool {← poolName p}: a preemption key",
                          ctx := [("position", .fin (h.position.getD i 0)),
                                  ("computed", (← threadAttrs s.tid).getD COMPUTED Value.zero)] }
      let key := (← keys.mapM (evaluate env)) ++ [Value.ofInt (-((s.admSeq.getD 0 : Nat) : Int))]
      match best with
      | none => best := some (s.tid, key)
      | some (_, bk) => if lexLt key bk then best := some (s.tid, key)
    return best.map (·.1)

/-- Restore a hold position of the thread (the hold holding `p`). -/
def setPosition (serial : Tid) (p : Nat) (pos : Rat) : M Unit := do
  let s ← thread serial
  match holdIndex s p with
  | none => pure ()
  | some k =>
    let h := s.holds.getD k default
    let h := { h with position := h.position.set (h.slot p) pos }
    setSession { s with holds := s.holds.set k h }

/-- growth.py `detach_free`: a victim that is no engine resident — a ready session leaves
`ready`, one queued for a nested hold leaves that queue, a job of a fifo or ps stage leaves it
(`withdrawJob`; a delay job is no candidate). -/
def detachFree (v : Tid) : M Unit := do
  let s ← thread v
  match s.status with
  | .ready => modifyCfg fun c => { c with ready := c.ready.erase v }
  | .queued q =>
    leaveQueue q v
    modifyThread v fun s => { s with pending := none }
  | .stage _ =>
    match s.job with
    | some j => withdrawJob j
    | none => internalError s!"internal: session {v.text} on a stage without a job"
    modifyThread v fun s => { s with job := none }
  | _ => pure ()

/-- growth.py `leave_batch`: remove v's (first) assignment from a batch, its position back to
before its chunk; the batch without it and the assignment removed, if any. -/
def leaveBatch (v : Tid) (job : Job) (assign : List Assign) : M (List Assign × Option Assign) := do
  match assign.findIdx? (·.serial == v) with
  | none => return (assign, none)
  | some idx =>
    let a := assign.getD idx default
    if let some pb := a.posBefore then
      if let some g := job.growing then setPosition v g pb
    return (assign.eraseIdx idx, some a)

/-- growth.py `detach_resident`: an engine resident victim leaves the batch it is in. A victim
already served in the iteration being formed returns its tokens to the budget; a resident of an
iteration in flight leaves that batch, whose cost and end stay. Either way its position goes
back to before its chunk. -/
def detachResident (v : Tid) (job : Job) (ictx : Option IterCtx) : M (Option IterCtx) := do
  match ictx with
  | some ic =>
    if ic.engine == job.stage then
      let (rest, a?) ← leaveBatch v job ic.assign.toList
      let left := match a?, ic.left with
        | some a, .n l => Tok.n (l + a.tokens + ic.slots)   -- and its drafting slots (§7.3)
        | _, l => l
      let ic := { ic with assign := rest.toArray, left }
      noteForming ic   -- `running_served` reads the batch without it
      return some ic
  | none => pure ()
  let est ← stage job.stage
  if let some it := est.iteration then
    let (rest, _) ← leaveBatch v job it.assign
    let est ← stage job.stage
    setStage job.stage { est with iteration := some { it with assign := rest } }
  return ictx

/-- growth.py `preempt_pending` (docs/async.md §3 item 3): a pending resident is released as in a
preemption (caching to its position, `computed`, the records and counters) but not requeued; it
keeps no preemption memory, and its end stays pending (or due). -/
def preemptPending (v : Tid) (p : Nat) (ictx : Option IterCtx) : M (Option IterCtx) := do
  let s ← thread v
  let some job := s.job | specError s!"internal: preempting the pending resident of {v.text}, which has none"
  let ictx ← detachResident v job ictx
  -- its last outcome is never seen (docs/async.md §8 item 4)
  let rejected ← dropOutcome v p
  -- the lagged hold again, its position restored by the detach
  let s ← thread v
  let some h0 := s.holds.getLast? | specError s!"internal: the pending resident {v.text} holds nothing"
  -- growth.py lowers the hold's own position (`h.position[i] -= …`), so the release below caches
  -- up to the verified position, not past the rejected drafts
  let i := h0.slot p
  let h := { h0 with position := h0.position.set i (h0.position.getD i 0 - (rejected : Rat)) }
  let computed := h.position.getD i 0
  setSession { s with job := none, holds := s.holds.dropLast,
                      preemptPos := s.preemptPos.filter (fun pp => !h.pools.contains pp.1) }
  setThreadAttr v COMPUTED (.fin computed)
  let est ← stage job.stage
  setStage job.stage { est with jobs := est.jobs.filter (·.tid != v) }
  releaseHold v h true
  let ps ← pool p
  setPool p { ps with preemptions := ps.preemptions + 1 }
  let name ← poolName p
  modifyRec fun r => { r with preempted := r.preempted.push (.arr [v.toJson, .str name, CJ.amt computed]) }
  return ictx.map fun ic => { ic with preempted := ic.preempted + 1 }

/-- growth.py `preempt`: computed, stuck, detach, release caching to the position, requeue (a
pending resident: `preemptPending`). -/
def preempt (v : Tid) (p : Nat) (ictx : Option IterCtx) : M (Option IterCtx) := do
  -- the load-backs of a hold it gives up (docs/language.md §11.8.1): a re-admission reads them again
  modifyThread v fun s => { s with loads := [] }
  let s ← thread v
  if s.job.any (·.pending) then return (← preemptPending v p ictx)
  let some _ := holdOf s p | specError s!"internal: preempting {v.text}, which holds no pool {p}"
  let rj ← residentJob s
  let ictx ← match rj with
    | some job => detachResident v job ictx
    | none => do
      detachFree v
      pure ictx
  -- lag 1: the drafts an unseen outcome rejected are not computed (docs/async.md §8 item 4)
  let rejected ← dropOutcome v p
  -- the hold again, after a possible position restore
  let s ← thread v
  let some k := holdIndex s p | specError s!"internal: {v.text} lost its hold of {p}"
  let h0 := s.holds.getD k default
  let h := { h0 with position := h0.position.set (h0.slot p) (h0.position.getD (h0.slot p) 0 - (rejected : Rat)) }
  let computed := h.position.getD (h.slot p) 0
  let mut s := { s with holds := s.holds.set k h }
  match List.lookup p s.preemptPos with
  | some prev =>
    if decide (computed ≤ prev) && !s.stuck then
      s := { s with stuck := true }
      let ps ← pool p
      setPool p { ps with stuck := ps.stuck + 1 }
  | none => pure ()
  let pp := upsertNat p computed s.preemptPos
  s := { s with preemptPos := pp }
  if let some job := rj then
    s := { s with job := none }
    let est ← stage job.stage
    setStage job.stage { est with jobs := est.jobs.eraseIdx ((est.jobs.findIdx? (·.tid == v)).getD est.jobs.length) }
  if let .growing q := s.status then
    let qs ← pool q
    setPool q { qs with growers := qs.growers.erase v }
    s := { s with growth := none }
  setSession s
  -- `computed` in the attribute list the victim uses (a sub-agent's own, docs/language.md §11.13)
  setThreadAttr v COMPUTED (.fin computed)
  for inner in (s.holds.drop k).reverse do
    releaseHold v inner true
  let s ← thread v
  setSession { s with holds := s.holds.take k, frames := s.frames.take h.depth,
                      pending := some (h.stmt.1, h.stmt.2, h.stream) }
  let requeueHead := match (← poolDecl p).preempt with
    | .keyed _ head => head
    | _ => true
  let st ← stmtAt h.stmt
  let first ← match st.stmt with
    | .hold hd => match hd.pools.head? with
      | some hp =>
        resolveRef { session := some v, stream := h.stream, loc := some st.loc }
          hp.pool.base hp.pool.count hp.pool.index
      | none => pure (h.pools.headD p)
    | _ => pure (h.pools.headD p)
  enqueue first v requeueHead
  let ps ← pool p
  setPool p { ps with preemptions := ps.preemptions + 1 }
  let name ← poolName p
  modifyRec fun r => { r with preempted := r.preempted.push (.arr [v.toJson, .str name, CJ.amt computed]) }
  return ictx.map fun ic => { ic with preempted := ic.preempted + 1 }

/-- growth.py `grow`: grow the thread's hold on p by `d` units, rounded up to the block;
`true` on success. -/
partial def grow (serial : Tid) (p : Nat) (d : Rat) (ictx : Option IterCtx) : M (Bool × Option IterCtx) := do
  let s ← thread serial
  let some h := holdOf s p | specError s!"internal: grow of {p} outside a hold"
  let i := h.slot p
  let target := roundupBlock (h.alloc.getD i 0 + d) (← blockOf p)
  growLoop serial p i target ictx
where
  growLoop (serial : Tid) (p i : Nat) (target : Rat) (ictx : Option IterCtx) : M (Bool × Option IterCtx) := do
    let s ← thread serial
    let some k := holdIndex s p | return (false, ictx)
    let h := s.holds.getD k default
    let need := target - h.alloc.getD i 0
    let st ← pool p
    if Value.le (.fin (st.used + need)) (← capOf p) then
      startCopies (← addUnits p serial k i need)
      return (true, ictx)
    match (← chooseVictim p) with
    | none =>
      -- an EOS token that would stall is not served (docs/async.md §3 item 2)
      if let .ending _ := (← thread serial).status then return (false, ictx)
      stall serial p target
      return (false, ictx)
    | some victim =>
      let ictx ← preempt victim p ictx
      if victim == serial then return (false, ictx)
      growLoop serial p i target ictx

end SerqLang

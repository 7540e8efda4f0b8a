/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Stages

/-!
# Async scheduling (python/serq_spec/lag.py, docs/async.md)

A session reaching the end of a lagged hold's body (a request of a `lag 1` engine) leaves a
*pending resident* on the engine: it still holds every unit; an `eos (…)` one wants one more,
discarded, token. The engine's next schedule makes the pending ends *due* and schedules an
`ends` event at the end of the iteration it starts (at `now` when it starts none), just before
that iteration's `iter_end`; the event applies them in order.

lag.py's functions that need only what is below the sessions live here (`lagEngine`, `makeDue`,
`identifies`, `isCandidate`, and the speculative outcomes of docs/async.md §8: `deferOutcome`,
`settleOutcomes`, `dropOutcome`, `knownUpto`, `pendingWant`). The others call functions of modules that import this one, and a
Lean module cannot import its importers: `makePending` and `applyEnds` are in
`SerqLang/Session.lean` (they call `evalInSession`, `scopeEnd`, `endScope`), `preemptPending`
in `SerqLang/Growth.lean` (it calls `detachResident`).
-/

namespace SerqLang

/-- lag.py `lag_engine`: the `lag 1` engine whose request `hold` is (its first pool is admitted
by it), or none. -/
def lagEngine (hold : HoldState) : M (Option Nat) := do
  -- a hold whose every pool a `release P;` in its body released early is no engine's request
  let some p := hold.pools.head? | return none
  let some e := (← poolDecl p).admittedBy | return none
  match (← stageDecl e).kind with
  | .step sd => return if sd.lag == 1 then some e else none
  | _ => return none

/-- lag.py `make_due`: after engine `e`'s schedule built its batch (docs/async.md §3 item 4) the
pending ends become due, and an `ends` event at `time` (the iteration's end, or `now`) will apply
them; the caller schedules it before the iteration's own `iter_end`, so it is handled first.
`retry`: an empty schedule settled step outcomes (§8), so the event comes even with no end due
and the engine is tried again at once. -/
def makeDue (e : Nat) (time : Rat) (retry : Bool := false) : M Unit := do
  let st ← stage e
  if st.pending.isEmpty && !retry then return
  setStage e { st with due := st.due ++ st.pending, pending := [] }
  let (cfg, _) ← liftRes (scheduleEvent (← getCfg) time "ends" (.stage e))
  setCfg cfg

/-- lag.py `identifies`: do the tokens a resident is given identify blocks on a content pool? Not
a pending resident's EOS token: its output is never processed (docs/async.md §3 item 2). -/
def identifies (job : Job) : Bool := !job.pending

/-- lag.py `is_candidate`: an ending session is a preemption candidate of pool p only while its
pending resident is resident (it still has a job) and only for the pools its lagged hold (the
innermost) holds (docs/async.md §3 item 3): an outer hold's pool, or a session whose pending
resident was preempted, has no victim to give, since the session is not requeued. -/
def isCandidate (s : Session) (p : Nat) : Bool :=
  s.job.isSome &&
    (match s.holds.getLast? with
     | some h => h.pools.contains p
     | none => false)

/-- lag.py `defer_outcome`: at IterEnd of a `lag 1` engine, a step with drafts on pool `p`: its
outcome is not seen by the next schedule (docs/async.md §8 item 1). The rejected drafts keep
their positions; the session records (p, rejected, verified, known), the positions read from the
verified position before the step (its current position minus its tokens). -/
def deferOutcome (e : Nat) (th : Tid) (p tokens done rejected : Nat) (decode draftEnd : Bool) : M Unit := do
  let s ← thread th
  let some h := holdOf s p | specError s!"internal: {th.text} holds no pool {p}"
  let before : Rat := h.position.getD (h.slot p) 0 - (tokens : Rat)
  let known : Rat := before + (if decode then 1 else (done : Rat))
  setSession { s with unseen := some (p, rejected, before + (done : Rat), known, draftEnd) }
  let st ← stage e
  setStage e { st with unseen := st.unseen ++ [th] }

/-- lag.py `settle_outcomes`: after engine `e`'s schedule, each unseen outcome in order gives its
rejected drafts' positions back and identifies the blocks up to its verified position (§8 item
2); true if any was applied. -/
def settleOutcomes (e : Nat) : M Bool := do
  let st ← stage e
  setStage e { st with unseen := [] }
  let mut settled := false
  for th in st.unseen do
    let s ← thread th
    let some (p, rejected, verified, _, _) := s.unseen | continue
    setSession { s with unseen := none }
    let some k := holdIndex s p | continue
    let h := s.holds.getD k default
    let i := h.slot p
    let h := { h with position := h.position.set i (h.position.getD i 0 - (rejected : Rat)) }
    modifyThread th fun s => { s with holds := s.holds.set k h }
    ContentPool.identify p (h.contentOf i) (h.blocksOf i).2 verified
    settled := true
  return settled

/-- lag.py `drop_outcome`: a preempted session's unseen outcome is dropped; the drafts it
rejected on pool `p`, which the position recorded at the preemption must not count (§8 item 4). -/
def dropOutcome (th : Tid) (p : Nat) : M Nat := do
  let s ← thread th
  let some (q, rejected, _, _, _) := s.unseen | return 0
  setSession { s with unseen := none }
  return if q == p then rejected else 0

/-- lag.py `known_upto`: how far a speculative decode step of a `lag 1` engine identifies blocks:
its own token, not past the known position of the session's unseen outcome (§8 item 3). -/
def knownUpto (s : Session) (posBefore : Rat) : Rat :=
  match s.unseen with
  | some (_, _, _, known, _) => min (posBefore + 1) known
  | none => posBefore + 1

/-- lag.py `pending_want`: a pending resident's `left` and drafts (§8 item 5): one more step of
1 + the drafts of the session's last run when vLLM cannot know the request stopped (an `eos`
stop, or an unseen step that ended the run through accepted drafts), else nothing. -/
def pendingWant (th : Tid) (eos : Nat) : M (Nat × Nat) := do
  let s ← thread th
  let draftEnd := match s.unseen with
    | some (_, _, _, _, d) => d
    | none => false
  let wasted : Nat := if eos > 0 || draftEnd then 1 else 0
  return (wasted, if wasted > 0 then s.specDrafts else 0)

end SerqLang

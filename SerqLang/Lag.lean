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
`identifies`, `isCandidate`). The others call functions of modules that import this one, and a
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
them; the caller schedules it before the iteration's own `iter_end`, so it is handled first. -/
def makeDue (e : Nat) (time : Rat) : M Unit := do
  let st ← stage e
  if st.pending.isEmpty then return
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

end SerqLang

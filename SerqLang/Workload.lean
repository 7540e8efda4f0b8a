/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Wire

/-!
# The pre-drawn workload (python/serq_spec/workload.py, docs/sessions.md)

`Workload.replay` mirrors workload.py's `Workload.replay`: it reads a `serq-sessions/1` file
and checks it the same way (finite draws, every arrival ≥ 0 and not before the one before it, trace picks ≥ 0, serials
`0 … K−1`), with the same messages. The values are served by cursors kept in the Config
(`Session.cursors`, `Counters.machine`).
-/

open Lean (Json)

namespace SerqLang

/-- The draws of one session: the `init` block, each turn block, the session/server statements. -/
structure SessionDraws where
  init : List Rat
  turns : List (List Rat)
  session : List Rat
  deriving Inhabited

/-- workload.py `Workload` (replay mode). -/
structure Workload where
  seed : Option Nat
  count : Nat
  arrivals : List Rat
  tracePicks : List Nat
  machine : List Rat
  sessions : List SessionDraws
  deriving Inhabited

namespace Workload
open Wire

/-- workload.py `FORMAT`. -/
def format : String := "serq-sessions/1"

/-- workload.py `_val`: a finite wire value. -/
def val (j : Json) (where_ : String) : Res Rat :=
  match value j with
  | .ok (.fin q) => .ok q
  | .ok _ => .error s!"sessions file: {where_}: a draw cannot be infinite"
  | .error e => .error s!"sessions file: {where_}: {e}"

/-- workload.py `_list`. -/
def lst (j : Option Json) (where_ : String) : Res (List Json) :=
  match j with
  | none => .ok []
  | some x =>
    match x.getArr? with
    | .ok a => .ok a.toList
    | .error _ => .error s!"sessions file: {where_} must be a list"

/-- The values of a list, each checked by `val`. -/
def vals (j : Option Json) (where_ : String) : Res (List Rat) := do
  (← lst j where_).mapM (fun x => val x where_)

/-- `vals` naming each element by its index in errors (`arrivals[3]`, `machine[0]`), as
workload.py does for those two lists. -/
def valsIndexed (j : Option Json) (where_ : String) : Res (List Rat) := do
  let xs ← lst j where_
  ((List.range xs.length).zip xs).mapM (fun (i, x) => val x s!"{where_}[{i}]")

/-- The first arrival that is negative or before the one before it (serq_spec a42dbf2: every
arrival is checked, a lone one too), with its index. -/
def badArrival (xs : List Rat) : Option (Nat × Rat) :=
  go 0 none xs
where
  go : Nat → Option Rat → List Rat → Option (Nat × Rat)
    | _, _, [] => none
    | i, prev, a :: rest =>
      if decide (a < 0) || (match prev with | some b => decide (a < b) | none => false) then some (i, a)
      else go (i + 1) (some a) rest

/-- workload.py `Workload.replay`. -/
def replay (j : Json) : Res Workload := do
  let fmt := (getOpt j "format").bind (fun x => x.getStr?.toOption)
  if !isObj j || fmt != some format then throw s!"not a {format} sessions file"
  let sessionsJ ← match getOpt j "sessions" with
    | some x => lst (some x) "sessions"
    | none => throw "sessions file: sessions must be a list"
  let arrivals ← valsIndexed (getOpt j "arrivals") "arrivals"
  if let some (i, a) := badArrival arrivals then
    throw s!"sessions file: arrivals[{i}] = {a} must be >= 0 and not before the arrival before it"
  let picksJ ← lst (getOpt j "trace_picks") "trace_picks"
  let picks ← picksJ.mapM (fun p => match p.getNat? with
    | .ok n => .ok n
    | .error _ => .error "sessions file: trace_picks must be non-negative integers")
  let machine ← valsIndexed (getOpt j "machine") "machine"
  let mut sessions : Array SessionDraws := #[]
  let mut i := 0
  for s in sessionsJ do
    let serialOk := match getOpt s "serial" with
      | some x => x.getNat?.toOption == some i
      | none => false
    if !isObj s || !serialOk then throw s!"sessions file: sessions[{i}] must have serial {i}"
    let init ← vals (getOpt s "init") s!"sessions[{i}].init"
    let turnsJ ← lst (getOpt s "turns") s!"sessions[{i}].turns"
    let mut turns : Array (List Rat) := #[]
    let mut k := 0
    for t in turnsJ do
      turns := turns.push (← vals (some t) s!"sessions[{i}].turns[{k}]")
      k := k + 1
    let sess ← vals (getOpt s "session") s!"sessions[{i}].session"
    sessions := sessions.push { init, turns := turns.toList, session := sess }
    i := i + 1
  let seed := (getOpt j "seed").bind (fun x => x.getNat?.toOption)
  return { seed, count := sessionsJ.length, arrivals, tracePicks := picks, machine,
           sessions := sessions.toList }

end Workload

end SerqLang

/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang

/-!
# `lake exe serq-vectors DIR` — replay the committed vectors through the Lean `step`

For every directory under DIR (e.g. `vectors/`, searched recursively) that holds `ir.json`,
`sessions.json` and `expected.json`: run `initial`, then `step` until no event is left, and
compare with `expected.json` what tests/test_spec_vectors.py compares — the observations per
name as `[serial, time, value]` in chronological order and per session (`values_by_serial`), the
iterations by start, the `admitted`/`preempted`/`released` rows (each expected row present), the
`evicted` and `rejected` rows (all, in order), the preemptions and rejections per pool, the final
cache entries per pool, and the docs/content.md §5 keys of content pools at given times
(`content_at`). The vectors carry `program.sq`, not its IR: generate `ir.json` first with
the front-end, `serq ir DIR/program.sq > DIR/ir.json` (docs/lean.md). A directory without
`ir.json` is reported as skipped. Exit status 1 if a vector fails or none ran.

This module is the executable's root: it is not imported by `SerqLang.lean`, so its `main`
stays out of the shared library.
-/

open Lean (Json)
open SerqLang

/-- `[serial, time, value]` with the time parsed, for the chronological sort. -/
structure ObsRow where
  serial : Nat
  time : Rat
  value : String

def ObsRow.before (a b : ObsRow) : Bool :=
  decide (a.time < b.time) || (a.time == b.time && decide (a.serial < b.serial))

def sortRows (rows : List ObsRow) : List ObsRow :=
  let rec ins (r : ObsRow) : List ObsRow → List ObsRow
    | [] => [r]
    | x :: xs => if ObsRow.before r x then r :: x :: xs else x :: ins r xs
  rows.foldl (fun acc r => ins r acc) []

def ObsRow.toJson (r : ObsRow) : CJ := .arr [.nat r.serial, ratJ r.time, .str r.value]

/-- Expected rows of one observation name. -/
def expectedRows (j : Json) : Res (List ObsRow) := do
  Wire.list (fun x => do
    match (← Wire.arr x).toList with
    | [s, t, v] => return { serial := ← Wire.nat s, time := ← Decode.rat t, value := ← Wire.str v }
    | _ => throw "expected [serial, time, value]") j

/-- A `Lean.Json` made of arrays, strings, integers, booleans and null as a `CJ` (rendered the
way the state line is); `none` for anything else (objects are never enumerated here). -/
partial def cjOfJson (j : Json) : Option CJ :=
  match j with
  | Json.null => some .null
  | Json.bool b => some (.bool b)
  | Json.str s => some (.str s)
  | Json.arr a => (a.toList.mapM cjOfJson).map CJ.arr
  | Json.num _ =>
    match j.getInt? with
    | .ok i => some (.int i)
    | .error _ => none
  | _ => none

/-- The canonical text of an expected value (`"?"` when it is not a plain value). -/
def expectedText (j : Json) : String :=
  match cjOfJson j with
  | some c => c.render
  | none => "?"

/-- The elements of a `CJ` array. -/
def SerqLang.CJ.items : CJ → List CJ
  | .arr xs => xs
  | _ => []

/-- The value of a key of a `CJ` object. -/
def SerqLang.CJ.get? (c : CJ) (k : String) : Option CJ :=
  match c with
  | .obj kvs => List.lookup k kvs
  | _ => none

/-- Run a vector; `none` = passed, `some why` = failed. -/
def replayVector (irText sessionsText expectedText : String) : Res (Option String) := do
  let irJ ← Wire.parse "ir.json" irText
  let sJ ← Wire.parse "sessions.json" sessionsText
  let exp ← Wire.parse "expected.json" expectedText
  let ir ← Ir.ofJson irJ
  let prog ← Program.ofIr ir
  let w ← Workload.replay sJ
  let (cfg0, rec0) ← initial prog w
  -- step.py `run(check=True)`, as the vectors were made: the invariants after step 0 and every step
  Invariants.checkOrRaise prog w cfg0 rec0 none 0 (some 0)
  -- the docs/content.md §5 keys of every content pool at the end of a step (tests/test_spec_vectors.py
  -- `content_lines`), by pool name
  let contentLines (c : Config) : List (String × CJ) :=
    ((List.range c.pools.length).zip c.pools).filterMap fun (p, st) =>
      match st.content with
      | some cs => some ((((prog.ir.pools[p]?).map (·.name)).getD ""), CJ.obj (contentJson c p st cs))
      | none => none
  let mut cfg := cfg0
  let mut recs : Array Records := #[rec0]
  let mut timed : Array (Rat × Records × List (String × CJ)) := #[(cfg0.now, rec0, contentLines cfg0)]
  let mut going := true
  let mut fuel := 10000000
  while going && decide (fuel > 0) do
    fuel := fuel - 1
    match (← step prog w cfg) with
    | none => going := false
    | some (cfg', rd, ev) =>
      Invariants.checkOrRaise prog w cfg' rd (some ev) cfg'.steps (some cfg.now)
      cfg := cfg'
      recs := recs.push rd
      timed := timed.push (cfg'.now, rd, contentLines cfg')
  -- observations: every name the program observes plus the client records
  let names := ir.observes ++ ["ttft", "response", "tpot"]
  let mut problems : List String := []
  if let some expObs := Wire.getOpt exp "observations" then
    for name in names do
      let want ← match Wire.getOpt expObs name with
        | some rows => expectedRows rows
        | none => pure []
      let mut got : List ObsRow := []
      for r in recs do
        for o in r.observations do
          match o with
          | .arr [.str n, .nat s, _, .str t, .str v] =>
            if n == name then
              match Value.ofWire t with
              | .ok (.fin tq) => got := got ++ [{ serial := s, time := tq, value := v }]
              | _ => pure ()
          | _ => pure ()
      let wantJ := (CJ.arr ((sortRows want).map ObsRow.toJson)).render
      let gotJ := (CJ.arr ((sortRows got).map ObsRow.toJson)).render
      if wantJ != gotJ then problems := problems ++ [s!"observations {name}: expected {wantJ}, got {gotJ}"]
  if let some expPre := Wire.getOpt exp "preemptions" then
    for (d, st) in ir.pools.zip cfg.pools do
      if let some n := Wire.getOpt expPre d.name then
        if (← Wire.nat n) != st.preemptions then
          problems := problems ++ [s!"preemptions {d.name}: expected {(← Wire.nat n)}, got {st.preemptions}"]
  if let some expRej := Wire.getOpt exp "rejected_counts" then
    for (d, st) in ir.pools.zip cfg.pools do
      if let some n := Wire.getOpt expRej d.name then
        if (← Wire.nat n) != st.rejected then
          problems := problems ++ [s!"rejected {d.name}: expected {(← Wire.nat n)}, got {st.rejected}"]
  if let some expEnt := Wire.getOpt exp "final_entries" then
    for (d, st) in ir.pools.zip cfg.pools do
      if let some es := Wire.getOpt expEnt d.name then
        let want := (CJ.arr ((← Wire.list Decode.entry es).map Entry.toJson)).render
        let got := (CJ.arr ((sortEntries st.entries).map Entry.toJson)).render
        if want != got then problems := problems ++ [s!"final entries {d.name}: expected {want}, got {got}"]
  -- the rest of what tests/test_spec_vectors.py compares
  let t (q : Rat) : CJ := .str (toString q)
  let rows (f : Records → Array CJ) : List CJ :=
    timed.toList.foldl (fun acc (now, r, _) => acc ++ (f r).toList.map fun x => CJ.arr (t now :: x.items)) []
  for key in ["admitted", "preempted", "released"] do
    let got := rows (fun r => if key == "admitted" then r.admitted else if key == "preempted" then r.preempted else r.released)
    let gotTexts := got.map CJ.render
    if let some xs := Wire.getOpt exp key then
      for row in (← Wire.arr xs).toList do
        if !gotTexts.contains (expectedText row) then
          problems := problems ++ [s!"{key} {expectedText row} not in {(CJ.arr got).render}"]
  for key in ["evicted", "rejected"] do
    if let some xs := Wire.getOpt exp key then
      let got := (CJ.arr (rows (fun r => if key == "evicted" then r.evicted else r.rejected))).render
      if got != expectedText xs then problems := problems ++ [s!"{key}: expected {expectedText xs}, got {got}"]
  if let some its := Wire.getOpt exp "iterations" then
    for it in (← Wire.arr its).toList do
      match (← Wire.arr it).toList with
      | [start, assign] =>
        -- the last iteration that started then (a dict keyed by start in the test)
        let mut got : Option String := none
        for (_, r, _) in timed.toList do
          for x in r.iterations.toList do
            if (x.get? "start").map CJ.render == some (expectedText start) then
              let pairs := ((x.get? "assign").map CJ.items).getD [] |>.map fun a =>
                match a.items with
                | [s, _, n] => CJ.arr [s, n]
                | _ => a
              got := some (CJ.arr pairs).render
        if got != some (expectedText assign) then
          problems := problems ++ [s!"iteration at {expectedText start}: expected {expectedText assign}, got {got.getD "none"}"]
      | _ => problems := problems ++ ["iterations: expected [start, assign] rows"]
  if let some vbs := Wire.getOpt exp "values_by_serial" then
    for name in names do
      if let some perSerial := Wire.getOpt vbs name then
        for serial in List.range (cfg.sessions.length + 1) do
          if let some want := Wire.getOpt perSerial (toString serial) then
            let mut got : List CJ := []
            for r in recs do
              for o in r.observations do
                match o with
                | .arr [.str n, .nat s, _, _, v] => if n == name && s == serial then got := got ++ [v]
                | _ => pure ()
            if (CJ.arr got).render != expectedText want then
              problems := problems ++ [s!"{name} of session {serial}: expected {expectedText want}, got {(CJ.arr got).render}"]
  if let some cat := Wire.getOpt exp "content_at" then
    for row in (← Wire.arr cat).toList do
      match (← Wire.arr row).toList with
      | [time, poolJ, keys] =>
        let pname ← Wire.str poolJ
        -- the content pools at the end of the last step at that time
        let mut state : Option CJ := none
        for (now, _, lines) in timed.toList do
          if (t now).render == expectedText time then
            state := List.lookup pname lines
        for k in ["free_queue", "blocks", "idmap", "held"] do
          if let some want := Wire.getOpt keys k then
            let got := (state.bind (·.get? k)).map CJ.render
            if got != some (expectedText want) then
              problems := problems ++ [s!"{pname} {k} at {expectedText time}: expected {expectedText want}, got {got.getD "none"}"]
      | _ => problems := problems ++ ["content_at: expected [time, pool, keys] rows"]
  return if problems.isEmpty then none else some ("; ".intercalate problems)

/-- Every directory under `root` (itself included). -/
partial def directories (root : System.FilePath) : IO (List System.FilePath) := do
  let mut out := [root]
  for entry in (← root.readDir) do
    if (← entry.path.isDir) then
      out := out ++ (← directories entry.path)
  return out

def main (args : List String) : IO UInt32 := do
  let root : System.FilePath := args.headD "vectors"
  if !(← root.isDir) then
    IO.eprintln s!"serq-vectors: {root} is not a directory"
    return 1
  let mut passed := 0
  let mut failed := 0
  let mut skipped := 0
  for dir in (← directories root) do
    let ir := dir / "ir.json"
    let sessions := dir / "sessions.json"
    let expected := dir / "expected.json"
    if !(← expected.pathExists) || !(← sessions.pathExists) then continue
    if !(← ir.pathExists) then
      IO.println s!"SKIP {dir}: no ir.json (generate it: serq ir {dir / "program.sq"} > {ir})"
      skipped := skipped + 1
      continue
    let r := replayVector (← IO.FS.readFile ir) (← IO.FS.readFile sessions) (← IO.FS.readFile expected)
    match r with
    | .ok none =>
      IO.println s!"PASS {dir}"
      passed := passed + 1
    | .ok (some why) =>
      IO.println s!"FAIL {dir}: {why}"
      failed := failed + 1
    | .error e =>
      IO.println s!"FAIL {dir}: {e}"
      failed := failed + 1
  IO.println s!"serq-vectors: {passed} passed, {failed} failed, {skipped} skipped (no ir.json)"
  return if failed == 0 && passed > 0 then 0 else 1

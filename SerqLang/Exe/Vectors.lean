/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang

/-!
# `lake exe serq-vectors DIR` — replay the committed vectors through the Lean `step`

For every directory under DIR (e.g. `vectors/`, searched recursively) that holds `ir.json`,
`sessions.json` and `expected.json`: run `initial`, then `step` until no event is left, and
compare with `expected.json` what tests/test_spec_vectors.py compares — the observations per
name as `[serial, time, value]` in chronological order, the preemptions and rejections per pool,
and the final cache entries per pool. The vectors carry `program.sq`, not its IR: generate `ir.json` first with
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

/-- Run a vector; `none` = passed, `some why` = failed. -/
def replayVector (irText sessionsText expectedText : String) : Res (Option String) := do
  let irJ ← Wire.parse "ir.json" irText
  let sJ ← Wire.parse "sessions.json" sessionsText
  let exp ← Wire.parse "expected.json" expectedText
  let ir ← Ir.ofJson irJ
  let prog ← Program.ofIr ir
  let w ← Workload.replay sJ
  let (cfg0, rec0) ← initial prog w
  let mut cfg := cfg0
  let mut recs : Array Records := #[rec0]
  let mut going := true
  let mut fuel := 10000000
  while going && decide (fuel > 0) do
    fuel := fuel - 1
    match (← step prog w cfg) with
    | none => going := false
    | some (cfg', rd, _) =>
      cfg := cfg'
      recs := recs.push rd
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

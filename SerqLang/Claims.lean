/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Session

/-!
# Claims (serq_spec/claims.py)

docs/language.md §11.9 "Claims": an iteration claim (`every` / `some iteration of E (e)`) is read
at each iteration of engine E once its batch is formed, in the environment `execute` is read in;
an `at end` claim once, after the run, on the final state. `given (g)` decides whether a point
is checked. The tallies are part of the Config (`Config.claims`) and of the state line.

Written without a Lean toolchain; not compiled here (docs/lean.md).
-/

namespace SerqLang

/-- claims.py `tally`: count one point of claim `c` at the current time, its expressions read
in `env`. -/
def tally (c : Nat) (env : EnvM) : M Unit := do
  let prog ← getProg
  let some cl := prog.ir.claims[c]? | specError s!"internal: no claim {c}"
  let what := s!"claim {cl.name}"
  let checked ← match cl.given with
    | none => pure true
    | some g => truthAt (← evaluate env g) s!"{what}: `given`" (some cl.loc)
  let held ← if checked then truthAt (← evaluate env cl.expr) what (some cl.loc) else pure false
  let cfg ← getCfg
  setCfg { cfg with claims := cfg.claims.set c ((cfg.claims.getD c {}).point cfg.now checked held) }

/-- claims.py `check_iteration`: at an iteration of engine `e` that starts (`env` is the
`execute` environment). -/
def checkIteration (e : Nat) (env : EnvM) : M Unit := do
  let prog ← getProg
  for c in List.range prog.ir.claims.length do
    if ((prog.ir.claims[c]?).bind (·.stage)) == some e then tally c env

/-- claims.py `check_end`: every `at end` claim not yet read, on the final state (no session, no
engine). -/
def checkEnd : M Unit := do
  let prog ← getProg
  for c in List.range prog.ir.claims.length do
    let some cl := prog.ir.claims[c]? | continue
    if cl.kind == "end" && ((← getCfg).claims.getD c {}).iterations == 0 then
      tally c { what := some s!"claim {cl.name}" }

end SerqLang

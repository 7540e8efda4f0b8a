/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Json
import SerqLang.Step
import SerqLang.Invariants

/-!
# Exported entry points (docs/lean.md "FFI contract")

JSON text in, JSON text out; every failure comes back as `{"error": message}`, never a panic.

* `serq_init(ir, sessions)` → `{"state": STATE, "line": LINE}` (step 0 done);
* `serq_step(state)` → `{"state": STATE, "line": LINE}`, or `{"state": STATE, "line": null}`
  on a final state (no pending event);
* `serq_run(state, k)` → `{"state": STATE, "lines": [LINE, …]}`: up to `k` steps in one call.

`STATE` = `{"ir": IR, "sessions": SESSIONS, "config": CONFIG}`: the program and the sessions
file travel with the configuration, so a step is a function of its argument alone. `CONFIG` is
config.py's `Config.to_json`; `LINE` is the per-step line of docs/state.md.

Signatures take owned `String`s: an `@[export]` function may not mark parameters borrowed
(`@&` is ignored and, since lean4#13017, refused for exports), so the C shim hands each argument
over and does not release it. The C symbols are exactly the names in `@[export …]`.
-/

open Lean (Json)

namespace SerqLang
namespace Ffi

def errorJson (msg : String) : String := (CJ.error msg).render

/-- Decode the static part of a state (or of `serq_init`'s arguments). -/
def loadProgram (irJ sessionsJ : Json) : Res (Program × Workload) := do
  let ir ← Wire.at_ "ir" (Ir.ofJson irJ)
  let prog ← Program.ofIr ir
  let w ← Wire.at_ "sessions" (Workload.replay sessionsJ)
  return (prog, w)

/-- A state as JSON text. -/
def stateJson (irJ sessionsJ : Json) (cfg : Config) : CJ :=
  .obj [("ir", .raw irJ.compress), ("sessions", .raw sessionsJ.compress), ("config", cfg.toJson)]

def initCore (irText sessionsText : String) : Res String := do
  let irJ ← Wire.parse "ir" irText
  let sJ ← Wire.parse "sessions" sessionsText
  let (prog, w) ← loadProgram irJ sJ
  let (cfg, rd) ← initial prog w
  -- step.py `run(check=True)`: the invariants after step 0
  Invariants.checkOrRaise prog w cfg rd none 0 (some 0)
  let line ← stateLine prog w cfg rd none 0
  return (CJ.obj [("state", stateJson irJ sJ cfg), ("line", line)]).render

def decodeState (text : String) : Res (Json × Json × Program × Workload × Config) := do
  let j ← Wire.parse "state" text
  let irJ ← Wire.get j "ir"
  let sJ ← Wire.get j "sessions"
  let (prog, w) ← loadProgram irJ sJ
  let cfg ← Wire.field j "config" Decode.config
  return (irJ, sJ, prog, w, cfg)

def stepCore (text : String) : Res String := do
  let (irJ, sJ, prog, w, cfg) ← decodeState text
  match (← step prog w cfg) with
  | none => return (CJ.obj [("state", stateJson irJ sJ cfg), ("line", .null)]).render
  | some (cfg', rd, ev) =>
    let line ← stateLine prog w cfg' rd (some ev) cfg'.steps
    return (CJ.obj [("state", stateJson irJ sJ cfg'), ("line", line)]).render

def runCore (text : String) (k : Nat) : Res String := do
  let (irJ, sJ, prog, w, cfg) ← decodeState text
  let mut cfg := cfg
  let mut lines : Array CJ := #[]
  for _ in [0:k] do
    match (← step prog w cfg) with
    | none => break
    | some (cfg', rd, ev) =>
      -- step.py `run(check=True)`: the invariants after every step, time monotone from `cfg.now`
      Invariants.checkOrRaise prog w cfg' rd (some ev) cfg'.steps (some cfg.now)
      lines := lines.push (← stateLine prog w cfg' rd (some ev) cfg'.steps)
      cfg := cfg'
  return (CJ.obj [("state", stateJson irJ sJ cfg), ("lines", .arr lines.toList)]).render

def answer (r : Res String) : String :=
  match r with
  | .ok s => s
  | .error e => errorJson e

/-- `serq_init(ir, sessions)`. -/
@[export serq_init]
def initJson (ir sessions : String) : String := answer (initCore ir sessions)

/-- `serq_step(state)`. -/
@[export serq_step]
def stepJson (state : String) : String := answer (stepCore state)

/-- `serq_run(state, k)`. -/
@[export serq_run]
def runJson (state : String) (k : Nat) : String := answer (runCore state k)

end Ffi
end SerqLang

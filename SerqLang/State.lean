/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Json
import SerqLang.Program
import SerqLang.Workload

/-!
# The step monad

serq_spec mutates one `Config` in place; SerqLang threads it through
`M := ReaderT Ctx (StateT St (Except String))`: the static program and the pre-drawn workload are
read-only (`Ctx`), the configuration and the step's records are the state (`St`; config.py keeps
the records on the Config as `cfg.records`, outside its JSON), and a run-time error of the
semantics (errors.py `SpecError`) is the exception, carried as its message.

Also here: config.py `new_records`, the built-in slots of program.py, the iteration context of
config.py (`IterCtx`), and accessors that read and write one session, pool or stage by index.
-/

namespace SerqLang

/-- program.py built-in attribute slots. -/
def SERIAL : Nat := 0
def TURN_NO : Nat := 1
def CACHED : Nat := 2
def COMPUTED : Nat := 3
def NEW : Nat := 4
def OUT : Nat := 5
def THINK : Nat := 6
def MORE : Nat := 7
def FORCED : Nat := 8

/-- config.py `new_records`: the per-step output channel, already in docs/state.md form. -/
structure Records where
  admitted : Array CJ := #[]
  preempted : Array CJ := #[]
  released : Array CJ := #[]
  evicted : Array CJ := #[]
  iterations : Array CJ := #[]
  observations : Array CJ := #[]
  finished : Array CJ := #[]
  rejected : Array CJ := #[]
  deriving Inhabited

/-- What never changes during a run. -/
structure Ctx where
  prog : Program
  work : Workload
  deriving Inhabited

/-- The state a step transforms. -/
structure St where
  cfg : Config
  records : Records := {}
  /-- config.py `Config.attempt`: during an admission attempt, the thread and per content pool
  the hit it reads as `cachedin` (docs/content.md §3); not part of the state -/
  attempt : Option (Tid × List (Nat × Nat)) := none
  /-- engine.py: the threads the forming iteration of an engine admitted (`IterCtx.fresh`), and,
  while that engine's schedule runs (engine.py `StageState.forming`), (engine, running_served,
  running_chunks) of its batch, kept in step with it (`noteForming`) for every moment of the
  schedule — its admissions and the statements the admitted threads run then included
  (docs/language.md §7.3); not part of the state -/
  fresh : List Tid := []
  forming : Option (Nat × Nat × Nat) := none
  deriving Inhabited

/-- The classes of errors.py: `SpecError` itself, its subclasses `NotSupported` and
`SessionsFileError`, and SerqLang's own internal errors (a broken configuration; Python would
raise a `KeyError` or an `IndexError`). -/
inductive ErrKind where
  | spec
  | notSupported
  | sessionsFile
  | internal
  deriving DecidableEq, Inhabited

/-- errors.py `SpecError` as data: the message, the source location if known, and whether
expr.py `evaluate` already named it (`named`). `evaluate` gives a plain `SpecError` without a
location the location of the statement being evaluated, or the name of what was evaluated. -/
structure SpecErr where
  kind : ErrKind := .spec
  message : String
  loc : Option Loc := none
  named : Bool := false
  deriving Inhabited

/-- errors.py `where`: `file:line:col` of a location, the file named by the IR's `files`. -/
def whereIn (files : List String) (loc : Option Loc) : String :=
  match loc with
  | none => "<unknown location>"
  | some l =>
    let name := (files[l.file]?).getD ("<file " ++ toString l.file ++ ">")
    s!"{name}:{l.line}:{l.col}"

/-- errors.py `SpecError.render` (`NotSupported` too), serq/errors.py's one renderer:
`FILE:LINE:COLUMN: error: message`, `serq: error: message` without a location. -/
def SpecErr.render (files : List String) (e : SpecErr) : String :=
  let message := match e.kind with
    | .notSupported => "not supported by serq_spec yet: " ++ e.message
    | _ => e.message
  match e.kind, e.loc with
  | .internal, _ => e.message
  | _, none => s!"serq: error: {message}"
  | _, some _ => s!"{whereIn files e.loc}: error: {message}"

abbrev M := ReaderT Ctx (StateT St (Except SpecErr))

/-- An error of SerqLang itself: a configuration that breaks an invariant of the semantics. -/
def internalError {α : Type} (msg : String) : M α := throw ({ kind := .internal, message := msg } : SpecErr)

instance {α : Type} : Inhabited (M α) := ⟨internalError "unreachable: a partial function was given no value"⟩

/-- A token amount or no limit (engine.py: ints and `inf`). -/
inductive Tok where
  | n (k : Nat)
  | inf
  deriving Inhabited, DecidableEq

def Tok.toValue : Tok → Value
  | .n k => Value.ofNat k
  | .inf => .posInf

/-- config.py `IterCtx`: the iteration being formed. `each` is indexed by the pre-order position
of a schedule statement (engine.py keys it by the statement object). -/
structure IterCtx where
  engine : Nat
  locals : Array Value := #[]
  each : Array (Option Tok) := #[]
  granule : Option Nat := none
  left : Tok := .n 0
  served : List Tid := []
  assign : Array Assign := #[]
  preempted : Nat := 0
  admitted : Nat := 0
  stopped : Bool := false
  noAdmit : Bool := false
  /-- docs/language.md §7.3: drafting slots per served request, lookahead units, the limit -/
  slots : Nat := 0
  lookahead : Nat := 0
  limit : Tok := .inf
  deriving Inhabited

/-- engine.py `st.forming = ictx` as the counts it is read for: the batch entries of the
iteration being formed whose request it did not admit, and of those the ones serving a prefill
or plain run. Called as the schedule starts and whenever the batch changes (a serve, a victim
leaving it), so `running_served(E)` reads the batch as it stands. -/
def noteForming (ic : IterCtx) : M Unit :=
  modify fun st =>
    let running := ic.assign.toList.filter (!st.fresh.contains ·.serial)
    { st with forming := some (ic.engine, running.length, (running.filter (·.mode != "decode")).length) }

/-! ## Accessors -/

def getCfg : M Config := do return (← get).cfg
def setCfg (c : Config) : M Unit := modify fun st => { st with cfg := c }
def modifyCfg (f : Config → Config) : M Unit := modify fun st => { st with cfg := f st.cfg }
def modifyRec (f : Records → Records) : M Unit := modify fun st => { st with records := f st.records }
def getProg : M Program := do return (← read).prog
def getWork : M Workload := do return (← read).work

def session (serial : Nat) : M Session := do
  match (← getCfg).sessions[serial]? with
  | some s => return s
  | none => internalError s!"internal: no session {serial}"

/-- config.py `thread`: the session or branch named `t` (docs/language.md §11.13). -/
def thread (t : Tid) : M Session := do
  match t with
  | .session n => session n
  | .branch _ _ =>
    match (← getCfg).branches.find? (·.tid == t) with
    | some b => return b
    | none => internalError s!"internal: no branch {t.text}"
  | .copy _ => internalError s!"internal: {t.text} is a copy job, no thread"
  | .dead _ => internalError s!"internal: {t.text} owns a dead entry, no thread"

/-- Store a session, or a branch (by its name), back into the configuration. -/
def setSession (s : Session) : M Unit :=
  match s.branch with
  | none => modifyCfg fun c => { c with sessions := c.sessions.set s.serial s }
  | some _ => modifyCfg fun c => { c with branches := c.branches.map fun b => if b.tid == s.tid then s else b }

def modifySession (serial : Nat) (f : Session → Session) : M Unit := do
  setSession (f (← session serial))

def modifyThread (t : Tid) (f : Session → Session) : M Unit := do
  setSession (f (← thread t))

/-- The thread whose attribute list thread `t` uses (`Config.attrThread`: config.py shares the
list object between a branch and its forking thread unless the branch is a sub-agent). -/
def attrThread (t : Tid) : M Tid := do
  return (← getCfg).attrThread t

def pool (p : Nat) : M PoolState := do
  match (← getCfg).pools[p]? with
  | some st => return st
  | none => internalError s!"internal: no pool {p}"

def setPool (p : Nat) (st : PoolState) : M Unit :=
  modifyCfg fun c => { c with pools := c.pools.set p st }

def stage (i : Nat) : M StageState := do
  match (← getCfg).stages[i]? with
  | some st => return st
  | none => internalError s!"internal: no stage {i}"

def setStage (i : Nat) (st : StageState) : M Unit :=
  modifyCfg fun c => { c with stages := c.stages.set i st }

def poolDecl (p : Nat) : M PoolDecl := do
  match (← getProg).ir.pools[p]? with
  | some d => return d
  | none => internalError s!"no pool {p}"

def stageDecl (i : Nat) : M StageDecl := do
  match (← getProg).ir.stages[i]? with
  | some d => return d
  | none => internalError s!"no stage {i}"

def poolName (p : Nat) : M String := do return (← poolDecl p).name
def stageName (i : Nat) : M String := do return (← stageDecl i).name

def capOf (p : Nat) : M Value := do
  match (← getProg).caps[p]? with
  | some c => return c
  | none => internalError s!"no pool {p}"

def blockOf (p : Nat) : M (Option Rat) := do
  match (← getProg).block[p]? with
  | some b => return b
  | none => internalError s!"no pool {p}"

/-- The statement at `(block, pc)`. -/
def stmtAt (ref : Nat × Nat) : M Located := do
  match (← getProg).stmt ref with
  | some st => return st
  | none => internalError s!"internal: no statement {ref.1}:{ref.2}"

/-- program.py `Program.loc` (serq/errors.py `ir_location`): `file:line:col` of a location. -/
def whereOf (loc : Option Loc) : M String := do
  return whereIn (← getProg).ir.files loc

/-- Raise errors.py `SpecError` (rendered by `SpecErr.render`). -/
def specError {α : Type} (msg : String) (loc : Option Loc := none) : M α :=
  throw ({ message := msg, loc } : SpecErr)

/-- Raise errors.py `NotSupported`. -/
def notSupported {α : Type} (construct : String) (loc : Option Loc := none) : M α :=
  throw ({ kind := .notSupported, message := construct, loc } : SpecErr)

/-- Raise errors.py `SessionsFileError` (a sessions file that does not fit the program). -/
def sessionsFileError {α : Type} (msg : String) (loc : Option Loc := none) : M α :=
  throw ({ kind := .sessionsFile, message := msg, loc } : SpecErr)

/-- An attribute of a session (0 past the end). -/
def Session.attr (s : Session) (slot : Nat) : Value := s.attrs.getD slot Value.zero

def Session.setAttr (s : Session) (slot : Nat) (v : Value) : Session :=
  { s with attrs := s.attrs.set slot v }

/-- The attribute list thread `t` uses (its own, or the one it shares: `attrThread`). -/
def threadAttrs (t : Tid) : M (List Value) := do
  return (← thread (← attrThread t)).attrs

/-- Replace the attribute list thread `t` uses (a restore after an attempt or a rejection). -/
def setThreadAttrs (t : Tid) (attrs : List Value) : M Unit := do
  modifyThread (← attrThread t) fun s => { s with attrs }

/-- Set one attribute of thread `t`, in the list it uses (config.py `s.attrs[slot] = v`). -/
def setThreadAttr (t : Tid) (slot : Nat) (v : Value) : M Unit := do
  modifyThread (← attrThread t) fun s => s.setAttr slot v

/-- The first index (in the given order) of a hold holding `p`. -/
def findHold (p : Nat) : List (Nat × HoldState) → Option Nat
  | [] => none
  | (k, h) :: rest => if h.pools.contains p then some k else findHold p rest

/-- The index of the innermost active hold of the session that holds pool `p`. -/
def holdIndex (s : Session) (p : Nat) : Option Nat :=
  findHold p ((List.range s.holds.length).zip s.holds).reverse

/-- config.py `hold_of`: the innermost active hold of the session that holds pool `p`. -/
def holdOf (s : Session) (p : Nat) : Option HoldState :=
  (holdIndex s p).bind (fun k => s.holds[k]?)

/-- The position of `x` in a list. -/
def indexIn (x : Nat) : List Nat → Option Nat
  | [] => none
  | y :: ys => if y == x then some 0 else (indexIn x ys).map (· + 1)

/-- The index of `p` in a hold's pools (`h.pools.index(p)`). -/
def HoldState.slot (h : HoldState) (p : Nat) : Nat := (indexIn p h.pools).getD 0

/-- The integer part of a value (Python's `int` on a whole number; 0 for an infinity). -/
def intOf (v : Value) : Int :=
  match v with
  | .fin q => if q.num < 0 then -((-q).floor) else q.floor
  | _ => 0

/-- sessions.py `record_observation`: only after warm-up. -/
def recordObservation (name : String) (s : Option Session) (value : Value) : M Unit := do
  let cfg ← getCfg
  if cfg.warm then
    let turn : Int := match s with
      | some x => intOf (x.attr TURN_NO)
      | none => 0
    let who : CJ := match s with
      | some x => .nat x.serial
      | none => .null
    modifyRec fun r => { r with observations := r.observations.push
      (.arr [.str name, who, .int turn, ratJ cfg.now, CJ.val value]) }

end SerqLang

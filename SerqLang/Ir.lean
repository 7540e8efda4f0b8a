/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Wire

/-!
# The IR (`serq-ir/1`, docs/ir.md)

The kernel language as Lean data, and its decoder from `Lean.Json`. Blocks refer to each other
by index, so statements are a flat (non-recursive) type; expressions and schedule statements
are nested through `List`/`Option`. Names follow docs/ir.md; Lean keywords get a trailing `_`
(`end_`, `while_`, `then_`, `else_`) and `local` is `loc`.

The decoder checks shapes and kinds and reports the path of the first error
(`blocks[2][0].expr.args[1]: unknown expression kind "fo"`); it does not check references
(block, slot, pool indices); `Config.ofIr` does.
-/

open Lean (Json)

namespace SerqLang

/-- Expressions (`E` of docs/ir.md). A pool or stage reference inside `obs` is spelled out as
`base`, `count`, `index` (see `Ref`); a stage observable's `args` are `price`'s `[s_hit, ds]`
(empty for the others). -/
inductive Expr where
  | num (v : Value)
  | attr (slot : Nat)
  | loc (index : Nat)
  | reg (stage index : Nat)
  | ctx (name : String)
  | un (op : String) (a : Expr)
  | bin (op : String) (a b : Expr)
  | cond (c a b : Expr)
  | fn (f : String) (args : List Expr)
  | draw (dist : String) (args : List Expr)
  | obsStage (f : String) (base count : Nat) (index : Option Expr) (args : List Expr)
  | obsPool (f : String) (base count : Nat) (index : Option Expr)
  | eng (name : String)
  | job (name : String)

instance : Inhabited Expr := ⟨.num Value.zero⟩

/-- `{"base", "count", "index"}`: the pool or stage `base + index`. -/
structure Ref where
  base : Nat
  count : Nat
  index : Option Expr
  deriving Inhabited

inductive EvictRule where
  | lru
  | keyed (keys : List Expr)
  deriving Inhabited

inductive PreemptRule where
  | none
  | lifo
  | keyed (keys : List Expr) (requeueHead : Bool)
  deriving Inhabited

inductive QueueRule where
  | fifo
  | keyed (keys : List Expr)
  deriving Inhabited

structure Loc where
  file : Nat
  line : Nat
  col : Nat
  deriving Inhabited

/-- A pool's `spill Q via S (w) when (c);` (docs/language.md §11.8.1, docs/ir.md `spill`): the
tier Q, the link S (a fifo, ps or delay stage), the copy work w and the condition c, both read in
the eviction-key moment, and the clause's position. -/
structure SpillDecl where
  tier : Nat
  link : Nat
  work : Expr
  «when» : Expr
  loc : Loc
  deriving Inhabited

structure PoolDecl where
  name : String
  cap : Value
  block : Option Value
  evict : EvictRule
  preempt : PreemptRule
  queue : QueueRule
  reserveHeld : Bool
  admittedBy : Option Nat
  /-- `share content;` (docs/content.md): physical blocks, a free queue, an identity map -/
  shareContent : Bool := false
  /-- `spill …;` (docs/language.md §11.8.1); absent without the clause -/
  spill : Option SpillDecl := none
  /-- the positions of the `evict`, `preempt` and `queue` clauses (their `"at"`, docs/ir.md
  "Positions"), where pools.py and growth.py locate an error of their keys -/
  evictAt : Option Loc := none
  preemptAt : Option Loc := none
  queueAt : Option Loc := none
  deriving Inhabited

/-- `prefix KEY (LENGTH) [after PARENT];` (docs/content.md §1): a shared token sequence; `total`
is `length` plus the parent's total (folded by the linker). -/
structure PrefixDecl where
  key : Value
  length : Value
  after : Option Value
  total : Value
  deriving Inhabited

inductive Order where
  | admission
  | decodeFirst
  | keyed (keys : List Expr)
  deriving Inhabited

/-- Schedule statements (`S` of docs/ir.md). -/
inductive Sched where
  | advance (only : Option Expr) (order : Order) (each : Option Expr)
  | admit (only : Option Expr) (while_ : Option Expr) (each : Option Expr)
  | exclusivePrefill (each : Option Expr)
  | branch (cond : Expr) (then_ else_ : List Sched)
  | set (register : Nat) (expr : Expr)

instance : Inhabited Sched := ⟨.exclusivePrefill none⟩

structure Named where
  name : String
  expr : Expr
  /-- the position of its expression (docs/ir.md "Positions": a register, a schedule `let`) -/
  loc : Option Loc := none
  deriving Inhabited

/-- The number of schedule statements of `s`'s subtree, itself included (its pre-order size). -/
partial def Sched.size : Sched → Nat
  | .branch _ t e => 1 + (t.map Sched.size).foldl (· + ·) 0 + (e.map Sched.size).foldl (· + ·) 0
  | _ => 1

/-- docs/language.md §7.3: an engine's `speculate (slots, lookahead, limit)`. -/
structure SpecDecl where
  slots : Expr
  lookahead : Expr
  limit : Expr
  /-- the clause's position (its `"at"`), where expr.py locates an error of the three -/
  loc : Option Loc := none
  deriving Inhabited

structure StepDecl where
  budget : Expr
  granule : Option Expr
  cost : Expr
  memory : Option Nat
  registers : List Named
  lets : List Named
  schedule : List Sched
  /-- docs/async.md §4: `lag 1` (async scheduling) or 0, the default (absent in older IR) -/
  lag : Nat := 0
  /-- docs/language.md §7.3: speculative decoding (absent: no slots, no lookahead, no limit) -/
  speculate : Option SpecDecl := none
  /-- the schedule statements' positions in pre-order (`flatSchedule`'s order, the index
  `runSchedule` keeps), none where the IR gives none -/
  schedAt : List (Option Loc) := []
  deriving Inhabited

inductive StageKind where
  | fifo (servers : Nat)
  | ps (capacity : Expr)
  | delay
  | step (decl : StepDecl)
  deriving Inhabited

structure StageDecl where
  name : String
  kind : StageKind
  /-- IR `"estimates": true`: the stage keeps online estimates (docs/language.md §4.4) -/
  estimates : Bool := false
  /-- the stage's `"at"` object (docs/ir.md "Positions"): the position of each expression field
  (`budget`, `granule`, `cost`, `capacity`) that has one, where serq_spec locates its run-time
  errors (serq/irfile.py `field_at`); empty in an IR written without positions -/
  fieldAt : List (String × Loc) := []
  deriving Inhabited

/-- serq/irfile.py `field_at`: the position of expression field `k` of a stage, if the IR has one. -/
def StageDecl.posOf (d : StageDecl) (k : String) : Option Loc := d.fieldAt.lookup k

/-- `content (p, n, h)` of a hold item on a content pool (docs/content.md §1). -/
structure ContentDecl where
  «prefix» : Expr
  length : Expr
  history : Expr
  deriving Inhabited

structure HoldPool where
  pool : Ref
  units : Expr
  reserve : Option Expr
  content : Option ContentDecl := none
  deriving Inhabited

structure Binding where
  slot : Nat
  expr : Expr
  deriving Inhabited

structure RequestDecl where
  engine : Nat
  -- none when the request block has fewer parameters (docs/ir.md `request`): no `tpot` then
  prompt : Option Expr
  output : Option Expr
  deriving Inhabited

inductive RunMode where
  | plain
  | prefill
  | decode
  deriving DecidableEq, Inhabited

/-- docs/ir.md hold `lease`: `lease P (t)` (docs/language.md §11.4), the pool and the time read at the
scope's end. -/
structure LeaseDecl where
  pool : Ref
  time : Expr
  deriving Inhabited

structure Hold where
  pools : List HoldPool
  reuse : Option Expr
  bindings : List Binding
  body : Nat
  cache : Option Expr
  request : Option RequestDecl
  /-- The `lease P (t)` clause, present only on a hold that has one. -/
  lease : Option LeaseDecl := none
  /-- docs/async.md §4: the `eos (e)` clause of a lagged engine request (absent in older IR) -/
  eos : Option Expr := none
  deriving Inhabited

inductive Stmt where
  | set (slot : Nat) (expr : Expr)
  | observe (name : Nat) (expr : Expr)
  | turn
  | end_
  | branch (cond : Expr) (then_ : Nat) (else_ : Option Nat)
  | while_ (cond : Expr) (body : Nat)
  | loop (body : Nat)
  | choose (slot : Nat) (count : Expr) (keys : List Expr)
  | hold (h : Hold)
  /-- `drafts`: a `speculate (k)` clause's expression and its own position (docs/language.md §7.3) -/
  | run (stage : Ref) (mode : RunMode) (work : Expr) (growing : Option Nat) (drafts : Option (Expr × Option Loc))
  | grow (pool : Ref) (units : Expr)
  | load (pool : Ref) (units : Expr)
  | drop (pool : Ref)
  | release (pool : Ref)
  /-- docs/language.md §11.15: the copy of `transfer S (w) from P to Q (n);`, `src` and `dst`
  held: a run of `work` on the link (`.inl`, the IR's `stage`), or a flow over several links
  (`.inr`, the IR's `stages`) -/
  | transfer (link : Ref ⊕ List Ref) (work : Expr) (src dst : Ref)
  /-- its landing, the next statement: `load dst (units); release src;` -/
  | transferEnd (src dst : Ref) (units : Expr)
  /-- docs/language.md §11.13: a branch of the session running block `body`; `own`: the block holds
  a pool (a sub-agent, IR `"own"`), so the branch's attributes are a copy of the forking thread's -/
  | fork (body : Nat) (own : Bool)
  | join
  /-- docs/language.md §11.14: one job over several ps stages at once (a flow) -/
  | flow (stages : List Ref) (work : Expr)
  /-- docs/language.md §7.3: `accept (n, alpha);`, the `turn` block's last statement: the turn's
  acceptance counts of speculative decoding, `count` draws of the acceptance law at per-draft
  rate `rate` -/
  | accept (count : Expr) (rate : Expr)
  deriving Inhabited

/-- The IR `op` of a statement (docs/ir.md "Statements"). -/
def Stmt.op : Stmt → String
  | .set .. => "set"
  | .observe .. => "observe"
  | .turn => "turn"
  | .end_ => "end"
  | .branch .. => "branch"
  | .while_ .. => "while"
  | .loop .. => "loop"
  | .choose .. => "choose"
  | .hold .. => "hold"
  | .run .. => "run"
  | .grow .. => "grow"
  | .load .. => "load"
  | .drop .. => "drop"
  | .release .. => "release"
  | .transfer .. => "transfer"
  | .transferEnd .. => "transfer_end"
  | .fork .. => "fork"
  | .join => "join"
  | .flow .. => "flow"
  | .accept .. => "accept"

/-- sessions.py `BRANCH_OPS`: what a thread may execute between its `fork` and its `join;`
(docs/language.md §11.13). -/
def branchMay (st : Stmt) : Bool :=
  ["set", "observe", "branch", "while", "loop", "choose", "run", "fork", "join", "flow"].contains st.op

/-- What a branch may execute (sessions.py `exec_stmt`): everything but `turn;` and `end;`. -/
def branchBodyMay (st : Stmt) : Bool :=
  !["turn", "end"].contains st.op

/-- Source location `[FILE, LINE, COLUMN]` (file = index into `files`). -/
structure Located where
  stmt : Stmt
  loc : Loc
  deriving Inhabited

/-- A claim (docs/ir.md `claims`, docs/language.md §11.9 "Claims"): `kind` is `every`, `some`
(an iteration claim on engine `stage`) or `end`. -/
structure ClaimDecl where
  name : String
  kind : String
  stage : Option Nat
  given : Option Expr
  expr : Expr
  loc : Loc
  deriving Inhabited

inductive Arrival where
  | poisson (rate : Value)
  | renewal (gap : Expr)
  | closed (n : Nat)
  | batch (n : Nat)
  | none
  deriving Inhabited

/-- One trace turn: `[new, out, think, forced]`, and optionally speculative decoding's acceptance
counts by output number (docs/language.md §7.3). -/
structure TraceTurn where
  new : Value
  out : Value
  think : Value
  forced : Value
  accept : Option (List Nat) := none
  deriving Inhabited

structure Trace where
  ordered : Bool
  sessions : List (List TraceTurn)
  deriving Inhabited

structure WorkloadDecl where
  arrival : Arrival
  trace : Option Trace
  init : Option Nat
  turn : Option Nat
  session : Nat
  server : Option Nat
  deriving Inhabited

structure Ir where
  files : List String
  attrs : List String
  hidden : List Nat
  observes : List String
  pools : List PoolDecl
  /-- docs/content.md §4: in declaration order (`[]` when none) -/
  prefixes : List PrefixDecl := []
  stages : List StageDecl
  blocks : List (List Located)
  workload : WorkloadDecl
  gauges : List Named
  /-- docs/ir.md: present only when the program declares a claim -/
  claims : List ClaimDecl := []
  /-- docs/ir.md `share` (docs/language.md §11.14): `maxmin` when absent -/
  share : String := "maxmin"
  deriving Inhabited

/-- program.py `shared_stages`: the ps stages some run over several stages can name (every member
of every reference of a `flow`, or of a `transfer` over several links), in the order met. -/
def Ir.sharedStages (ir : Ir) : List Nat :=
  ir.blocks.foldl (fun acc b => b.foldl (fun acc l =>
    match l.stmt with
    | .flow refs _ | .transfer (.inr refs) _ _ _ => refs.foldl (fun acc r => acc ++ (List.range r.count).map (r.base + ·)) acc
    | _ => acc) acc) []

/-! ## Decoding -/

namespace Ir
open Wire

/-- `k` of an object (a string). -/
private def kind (j : Json) (key : String := "kind") : Res String := field j key str

mutual
  partial def exprOf (j : Json) : Res Expr := do
    let k ← kind j "k"
    match k with
    | "num" => return .num (← field j "v" value)
    | "attr" => return .attr (← field j "slot" nat)
    | "local" => return .loc (← field j "index" nat)
    | "reg" => return .reg (← field j "stage" nat) (← field j "index" nat)
    | "ctx" => return .ctx (← field j "name" str)
    | "un" => return .un (← field j "op" str) (← field j "a" exprOf)
    | "bin" => return .bin (← field j "op" str) (← field j "a" exprOf) (← field j "b" exprOf)
    | "cond" => return .cond (← field j "c" exprOf) (← field j "a" exprOf) (← field j "b" exprOf)
    | "fn" => return .fn (← field j "f" str) (← field j "args" (list exprOf))
    | "draw" => return .draw (← field j "dist" str) (← field j "args" (list exprOf))
    | "obs" => obsOf j (← field j "f" str)
    | "eng" => return .eng (← field j "name" str)
    | "job" => return .job (← field j "name" str)
    | other => .error s!"unknown expression kind \"{other}\""

  partial def refParts (j : Json) : Res (Nat × Nat × Option Expr) := do
    return ((← field j "base" nat), (← field j "count" nat), (← fieldOpt j "index" exprOf))

  partial def obsOf (j : Json) (f : String) : Res Expr := do
    match getOpt j "stage", getOpt j "pool" with
    | some r, _ =>
      let (b, c, i) ← at_ "stage" (refParts r)
      return .obsStage f b c i ((← fieldOpt j "args" (list exprOf)).getD [])
    | none, some r =>
      let (b, c, i) ← at_ "pool" (refParts r)
      return .obsPool f b c i
    | none, none => throw "obs: needs \"stage\" or \"pool\""
end

def refOf (j : Json) : Res Ref := do
  let (b, c, i) ← refParts j
  return { base := b, count := c, index := i }

def exprsOf (j : Json) : Res (List Expr) := list exprOf j

def evictOf (j : Json) : Res EvictRule := do
  match (← kind j) with
  | "lru" => return .lru
  | "by" => return .keyed (← field j "keys" exprsOf)
  | o => .error s!"unknown evict kind \"{o}\""

def preemptOf (j : Json) : Res PreemptRule := do
  match (← kind j) with
  | "none" => return .none
  | "lifo" => return .lifo
  | "by" =>
    let keys ← field j "keys" exprsOf
    let rq := ((← fieldOpt j "requeue" str).getD "head")
    if rq == "head" then return .keyed keys true
    else if rq == "tail" then return .keyed keys false
    else .error s!"requeue: expected \"head\" or \"tail\", got \"{rq}\""
  | o => .error s!"unknown preempt kind \"{o}\""

def queueOf (j : Json) : Res QueueRule := do
  match (← kind j) with
  | "fifo" => return .fifo
  | "by" => return .keyed (← field j "keys" exprsOf)
  | o => .error s!"unknown queue kind \"{o}\""

/-- A pool's `share`: `"content"` or null (absent in IR written before the extension). -/
def shareOf (j : Option Json) : Res Bool :=
  match j with
  | none => .ok false
  | some Json.null => .ok false
  | some (Json.str "content") => .ok true
  | some _ => .error "share: expected \"content\" or null"

def prefixOf (j : Json) : Res PrefixDecl := do
  return { key := ← field j "key" value, length := ← field j "length" value,
           after := ← fieldOpt j "after" value, total := ← field j "total" value }

def contentOf (j : Json) : Res ContentDecl := do
  return { «prefix» := ← field j "prefix" exprOf, length := ← field j "length" exprOf,
           history := ← field j "history" exprOf }

def locOf (j : Json) : Res Loc := do
  match (← list nat j) with
  | [f, l, c] => return { file := f, line := l, col := c }
  | _ => .error "expected [FILE, LINE, COLUMN]"

def spillOf (j : Json) : Res SpillDecl := do
  return { tier := ← field j "pool" nat, link := ← field j "stage" nat, work := ← field j "work" exprOf,
           «when» := ← field j "when" exprOf, loc := ← field j "at" locOf }

def poolOf (j : Json) : Res PoolDecl := do
  return {
    name := ← field j "name" str
    cap := ← field j "cap" value
    block := ← fieldOpt j "block" value
    evict := ← field j "evict" evictOf
    preempt := ← field j "preempt" preemptOf
    queue := ← field j "queue" queueOf
    reserveHeld := ← field j "reserve_held" bool
    admittedBy := ← fieldOpt j "admitted_by" nat
    shareContent := ← shareOf (getOpt j "share")
    spill := ← fieldOpt j "spill" spillOf
    evictAt := ← field j "evict" (fieldOpt · "at" locOf)
    preemptAt := ← field j "preempt" (fieldOpt · "at" locOf)
    queueAt := ← field j "queue" (fieldOpt · "at" locOf) }

def orderOf (j : Json) : Res Order := do
  match (← kind j) with
  | "admission" => return .admission
  | "decode_first" => return .decodeFirst
  | "by" => return .keyed (← field j "keys" exprsOf)
  | o => .error s!"unknown order kind \"{o}\""

partial def schedOf (j : Json) : Res Sched := do
  match (← field j "op" str) with
  | "advance" =>
    return .advance (← fieldOpt j "only" exprOf) (← field j "order" orderOf) (← fieldOpt j "each" exprOf)
  | "admit" =>
    return .admit (← fieldOpt j "only" exprOf) (← fieldOpt j "while" exprOf) (← fieldOpt j "each" exprOf)
  | "exclusive_prefill" => return .exclusivePrefill (← fieldOpt j "each" exprOf)
  | "branch" =>
    return .branch (← field j "cond" exprOf) (← field j "then" (list schedOf)) (← field j "else" (list schedOf))
  | "set" => return .set (← field j "register" nat) (← field j "expr" exprOf)
  | o => .error s!"unknown schedule statement \"{o}\""

def namedOf (exprKey : String) (j : Json) : Res Named := do
  return { name := ← field j "name" str, expr := ← field j exprKey exprOf, loc := ← fieldOpt j "at" locOf }

/-- The positions of a list of schedule statements and of the statements inside them, in
pre-order (`Sched.size`, `flatSchedule`). -/
partial def schedPositions (stmts : List Json) : Res (List (Option Loc)) := do
  let mut out : List (Option Loc) := []
  for st in stmts do
    out := out ++ [← fieldOpt st "at" locOf]
    if (← field st "op" str) == "branch" then
      out := out ++ (← schedPositions (← field st "then" arr).toList)
      out := out ++ (← schedPositions (← field st "else" arr).toList)
  return out

def stageKindOf (j : Json) : Res StageKind := do
  match (← kind j) with
  | "fifo" => return .fifo (← field j "servers" nat)
  | "ps" => return .ps (← field j "capacity" exprOf)
  | "delay" => return .delay
  | "step" =>
    let d : StepDecl := {
      budget := ← field j "budget" exprOf
      granule := ← fieldOpt j "granule" exprOf
      cost := ← field j "cost" exprOf
      memory := ← fieldOpt j "memory" nat
      registers := ← field j "registers" (list (namedOf "init"))
      lets := ← field j "lets" (list (namedOf "expr"))
      schedule := ← field j "schedule" (list schedOf)
      schedAt := ← field j "schedule" (fun a => do schedPositions (← arr a).toList)
      lag := (← fieldOpt j "lag" nat).getD 0
      speculate := ← fieldOpt j "speculate" fun s => do
        return { slots := ← field s "slots" exprOf, lookahead := ← field s "lookahead" exprOf,
                 limit := ← field s "limit" exprOf, loc := ← fieldOpt s "at" locOf } }
    return .step d
  | o => .error s!"unknown stage kind \"{o}\""

/-- A stage's `"at"` object read as `field ↦ position` (irfile.py `field_at`: anything but an
object gives no position). -/
def fieldPositions (j : Json) : Res (List (String × Loc)) := do
  match getOpt j "at" with
  | some a =>
    if isObj a then
      ["budget", "granule", "cost", "capacity"].foldlM (fun acc k => do
        match (← fieldOpt a k locOf) with
        | some l => return acc ++ [(k, l)]
        | none => return acc) []
    else return []
  | none => return []

def stageOf (j : Json) : Res StageDecl := do
  return { name := ← field j "name" str, kind := ← stageKindOf j,
           estimates := (← fieldOpt j "estimates" bool).getD false,
           fieldAt := ← at_ "at" (fieldPositions j) }

def holdPoolOf (j : Json) : Res HoldPool := do
  return { pool := ← field j "pool" refOf, units := ← field j "units" exprOf,
           reserve := ← fieldOpt j "reserve" exprOf, content := ← fieldOpt j "content" contentOf }

def bindingOf (j : Json) : Res Binding := do
  return { slot := ← field j "slot" nat, expr := ← field j "expr" exprOf }

def leaseOf (j : Json) : Res LeaseDecl := do
  return { pool := ← field j "pool" refOf, time := ← field j "time" exprOf }

def requestOf (j : Json) : Res RequestDecl := do
  return { engine := ← field j "engine" nat, prompt := ← fieldOpt j "prompt" exprOf,
           output := ← fieldOpt j "output" exprOf }

def modeOf (j : Json) : Res RunMode := do
  match (← str j) with
  | "plain" => return .plain
  | "prefill" => return .prefill
  | "decode" => return .decode
  | o => .error s!"unknown run mode \"{o}\""

def stmtOf (j : Json) : Res Stmt := do
  match (← field j "op" str) with
  | "set" => return .set (← field j "slot" nat) (← field j "expr" exprOf)
  | "observe" => return .observe (← field j "name" nat) (← field j "expr" exprOf)
  | "accept" => return .accept (← field j "count" exprOf) (← field j "rate" exprOf)
  | "turn" => return .turn
  | "end" => return .end_
  | "branch" => return .branch (← field j "cond" exprOf) (← field j "then" nat) (← fieldOpt j "else" nat)
  | "while" => return .while_ (← field j "cond" exprOf) (← field j "body" nat)
  | "loop" => return .loop (← field j "body" nat)
  | "choose" => return .choose (← field j "slot" nat) (← field j "count" exprOf) (← field j "keys" exprsOf)
  | "hold" =>
    return .hold {
      pools := ← field j "pools" (list holdPoolOf)
      reuse := ← fieldOpt j "reuse" exprOf
      bindings := ← field j "bindings" (list bindingOf)
      body := ← field j "body" nat
      cache := ← fieldOpt j "cache" exprOf
      request := ← fieldOpt j "request" requestOf
      lease := ← fieldOpt j "lease" leaseOf
      eos := ← fieldOpt j "eos" exprOf }
  | "run" =>
    return .run (← field j "stage" refOf) (← field j "mode" modeOf) (← field j "work" exprOf)
      (← fieldOpt j "growing" nat)
      (← fieldOpt j "speculate" fun s => do return (← field s "drafts" exprOf, ← fieldOpt s "at" locOf))
  | "grow" => return .grow (← field j "pool" refOf) (← field j "units" exprOf)
  | "load" => return .load (← field j "pool" refOf) (← field j "units" exprOf)
  | "drop" => return .drop (← field j "pool" refOf)
  | "release" => return .release (← field j "pool" refOf)
  | "transfer" => do
    let link : Ref ⊕ List Ref ← match (← fieldOpt j "stages" (list refOf)) with
      | some refs => pure (.inr refs)
      | none => pure (.inl (← field j "stage" refOf))
    return .transfer link (← field j "work" exprOf) (← field j "from" refOf) (← field j "to" refOf)
  | "transfer_end" => return .transferEnd (← field j "from" refOf) (← field j "to" refOf) (← field j "units" exprOf)
  | "fork" => return .fork (← field j "body" nat) ((← fieldOpt j "own" bool).getD false)
  | "join" => return .join
  | "flow" => return .flow (← field j "stages" (list refOf)) (← field j "work" exprOf)
  | o => .error s!"unknown statement \"{o}\""

def locatedOf (j : Json) : Res Located := do
  return { stmt := ← stmtOf j, loc := ← field j "at" locOf }

def arrivalOf (j : Json) : Res Arrival := do
  match (← kind j) with
  | "poisson" => return .poisson (← field j "rate" value)
  | "renewal" => return .renewal (← field j "gap" exprOf)
  | "closed" => return .closed (← field j "n" nat)
  | "batch" => return .batch (← field j "n" nat)
  | "none" => return .none
  | o => .error s!"unknown arrival kind \"{o}\""

def traceTurnOf (j : Json) : Res TraceTurn := do
  match (← arr j).toList with
  | [n, o, t, f] => return { new := ← value n, out := ← value o, think := ← value t, forced := ← value f }
  | [n, o, t, f, a] =>
    -- speculative decoding's acceptance counts by output number (docs/language.md §7.3)
    return { new := ← value n, out := ← value o, think := ← value t, forced := ← value f,
             accept := some (← list nat a) }
  | _ => .error "expected [new, out, think, forced] or [new, out, think, forced, accept]"

def traceOf (j : Json) : Res Trace := do
  return { ordered := ← field j "ordered" bool,
           sessions := ← field j "sessions" (list (list traceTurnOf)) }

def workloadOf (j : Json) : Res WorkloadDecl := do
  return {
    arrival := ← field j "arrival" arrivalOf
    trace := ← fieldOpt j "trace" traceOf
    init := ← fieldOpt j "init" nat
    turn := ← fieldOpt j "turn" nat
    session := ← field j "session" nat
    server := ← fieldOpt j "server" nat }

def claimOf (j : Json) : Res ClaimDecl := do
  return { name := ← field j "name" str, kind := ← field j "kind" str, stage := ← fieldOpt j "stage" nat,
           given := ← fieldOpt j "given" exprOf, expr := ← field j "expr" exprOf, loc := ← field j "at" locOf }

/-- Decode an IR document (already parsed). -/
def ofJson (j : Json) : Res Ir := do
  let fmt ← field j "format" str
  if fmt != "serq-ir/1" then
    throw s!"format: expected \"serq-ir/1\", got \"{fmt}\""
  return {
    files := ← field j "files" (list str)
    attrs := ← field j "attrs" (list str)
    hidden := ← field j "hidden" (list nat)
    observes := ← field j "observes" (list str)
    pools := ← field j "pools" (list poolOf)
    prefixes := (← fieldOpt j "prefixes" (list prefixOf)).getD []
    stages := ← field j "stages" (list stageOf)
    blocks := ← field j "blocks" (list (list locatedOf))
    workload := ← field j "workload" workloadOf
    gauges := ← field j "gauges" (list (namedOf "expr"))
    claims := (← fieldOpt j "claims" (list claimOf)).getD []
    share := (← fieldOpt j "share" str).getD "maxmin" }

/-- Decode an IR from its JSON text. -/
def parse (text : String) : Res Ir := do
  ofJson (← Wire.parse "IR" text)

end Ir

end SerqLang

/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Expr
import SerqLang.Config

/-!
# The static program (python/serq_spec/program.py) and events (python/serq_spec/events.py)

`Program.ofIr` mirrors program.py's `Program.__init__` and `check_supported`: block sizes and
caps as exact values (a rational, `+inf` or `-inf`, any sign, as program.py keeps them), the
engines, their memory pools and admitted pools, and a refusal — with the source location — of
every construct serq_spec does not implement.
-/

namespace SerqLang

/-- program.py `SUPPORTED_OBS`. -/
def supportedObs : List String :=
  ["queue", "busy", "work", "budget_left", "running_served", "running_chunks", "used", "free", "cachedin", "holders", "queued",
   "est_lambda", "est_rho", "est_wait", "price"]

/-- The context variables program.py `check_expr` accepts. -/
def supportedCtx : List String :=
  ["now", "waited", "size", "last", "age", "waiting", "present", "position", "computed"]

/-- program.py `Program` (run settings `warmup` and `horizon` included). -/
structure Program where
  ir : Ir
  /-- program.py `caps`: each pool's cap, any value (`+inf`: nothing is ever too big; a negative
  one or `-inf`: nothing fits) -/
  caps : List Value
  block : List (Option Rat)
  engines : List Nat
  /-- program.py `memory_of`: each stage's memory pool (engines only), inferred from the pool
  its `growing` runs grow when the IR gives none (`infer_memory`). -/
  memoryOf : List (Option Nat) := []
  /-- program.py `prefixes`: key ↦ (parent key, total tokens) (docs/content.md §1) -/
  prefixes : Content.Prefixes := []
  /-- program.py `content_blocks`: B = cap / block of each `share content` pool, none elsewhere -/
  contentBlocks : List (Option Nat) := []
  warmup : Rat := 0
  horizon : Value := .posInf
  deriving Inhabited

/-- Is this stage a step engine? -/
def StageDecl.isStep (s : StageDecl) : Bool :=
  match s.kind with
  | .step _ => true
  | _ => false

namespace Program

/-- The error of a construct serq_spec does not implement (errors.py `NotSupported.render`). -/
def unsupported (ir : Ir) (construct : String) (loc : Option Loc := none) : String :=
  let place := match loc with
    | none => "<unknown location>"
    | some l =>
      let f := (ir.files[l.file]?).getD s!"<file {l.file}>"
      s!"{f}:{l.line}:{l.col}"
  s!"error: not supported by serq_spec yet: {construct} at {place}"

/-- program.py `sched_at`'s fallback: a schedule statement of an IR written without positions;
errors name the main file (errors.py `where` with line "?"). -/
def unsupportedSched (ir : Ir) (construct : String) : String :=
  let main := (ir.files[0]?).getD "<file 0>"
  s!"error: not supported by serq_spec yet: {construct} at {main} (the IR gives no line for this construct)"

/-- A `SpecError` located by program.py `sched_at`: at the statement's `"at"`, else in the main
file (errors.py `where` with line "?"). -/
def schedError (ir : Ir) (msg : String) (loc : Option Loc := none) : String :=
  match loc with
  | some l =>
    let name := (ir.files[l.file]?).getD ("<file " ++ toString l.file ++ ">")
    s!"{name}:{l.line}:{l.col}: error: {msg}"
  | none =>
    let main := (ir.files[0]?).getD "<file 0>"
    s!"{main} (the IR gives no line for this construct): error: {msg}"

/-- program.py `check_expr`. -/
partial def checkExpr (ir : Ir) (e : Expr) (loc : Option Loc) : Res Unit := do
  match e with
  | .obsStage f _ _ i args =>
    if !supportedObs.contains f then throw (unsupported ir s!"observable {f}()" loc)
    for a in args do checkExpr ir a loc
    if let some ie := i then checkExpr ir ie loc
  | .obsPool f _ _ i =>
    if !supportedObs.contains f then throw (unsupported ir s!"observable {f}()" loc)
    if let some ie := i then checkExpr ir ie loc
  | .ctx name =>
    if !supportedCtx.contains name then throw (unsupported ir s!"context variable {name}" loc)
  | .un _ a => checkExpr ir a loc
  | .bin _ a b => do checkExpr ir a loc; checkExpr ir b loc
  | .cond c a b => do checkExpr ir c loc; checkExpr ir a loc; checkExpr ir b loc
  | .fn _ args | .draw _ args => for a in args do checkExpr ir a loc
  | _ => pure ()

/-- program.py `reads_job`: does `e` read a per-request key anywhere? -/
partial def readsJob (e : Expr) : Bool :=
  match e with
  | .job _ => true
  | .un _ a => readsJob a
  | .bin _ a b => readsJob a || readsJob b
  | .cond c a b => readsJob c || readsJob a || readsJob b
  | .fn _ args | .draw _ args => args.any readsJob
  | .obsStage _ _ _ i args => args.any readsJob ||
    match i with
    | some ie => readsJob ie
    | none => false
  | .obsPool _ _ _ i =>
    match i with
    | some ie => readsJob ie
    | none => false
  | _ => false

/-- program.py `check_schedule`: each statement's expressions checked at its position
(`positions`, pre-order as `StepDecl.schedAt`; `base` the pre-order index of the first). -/
partial def checkSchedule (ir : Ir) (stmts : List Sched) (name : String)
    (positions : List (Option Loc) := []) (base : Nat := 0) : Res Unit := do
  let mut idx := base
  for s in stmts do
    let loc := (positions[idx]?).getD none
    match s with
    | .exclusivePrefill each => do
      if let some x := each then checkExpr ir x loc
    | .branch c t e => do
      checkExpr ir c loc
      checkSchedule ir t name positions (idx + 1)
      checkSchedule ir e name positions (idx + 1 + (t.map Sched.size).foldl (· + ·) 0)
    | .advance only order each => do
      if let some x := only then checkExpr ir x loc
      if let some x := each then checkExpr ir x loc
      if let .keyed keys := order then for k in keys do checkExpr ir k loc
    | .admit only wh each => do
      if let some x := only then
        if readsJob x then
          -- docs/language.md §4.5: the per-request keys are those of a resident's run
          throw (schedError ir (s!"a per-request key (`decoding`, `admission`, `remaining`) in " ++
            s!"`admit waiting only (…)` of engine {name}: a waiting head has no run") loc)
        checkExpr ir x loc
      if let some x := wh then checkExpr ir x loc
      if let some x := each then checkExpr ir x loc
    | .set _ x => checkExpr ir x loc
    idx := idx + s.size

def optCheck (ir : Ir) (e : Option Expr) (loc : Option Loc) : Res Unit :=
  match e with
  | none => .ok ()
  | some x => checkExpr ir x loc

/-- errors.py `SpecError.render` of an error with a location, for the static checks. -/
def located (ir : Ir) (msg : String) (loc : Option Loc) : String :=
  match loc with
  | none => s!"error: {msg}"
  | some l =>
    let name := (ir.files[l.file]?).getD ("<file " ++ toString l.file ++ ">")
    s!"{name}:{l.line}:{l.col}: error: {msg}"

/-- Is every pool of a reference's range a `share content` pool? (program.py `is_content`) -/
def allContent (contentBlocks : List (Option Nat)) (r : Ref) : Bool :=
  (List.range r.count).all fun k => ((contentBlocks.getD (r.base + k) none).isSome)

def anyContent (contentBlocks : List (Option Nat)) (r : Ref) : Bool :=
  (List.range r.count).any fun k => ((contentBlocks.getD (r.base + k) none).isSome)

/-- program.py `check_stmt`'s test of the stages of a `flow` (and of a `transfer` over several
links): the program's `share` is known, every stage a reference can name is ps (docs/language.md
§11.14). -/
def checkFlowStages (ir : Ir) (refs : List Ref) (loc : Option Loc) : Res Unit := do
  if ir.share != "maxmin" && ir.share != "bottleneck" then
    throw (unsupported ir s!"share {ir.share}" loc)
  for r in refs do
    for k in List.range r.count do
      let isPs := match (ir.stages[r.base + k]?).map (·.kind) with
        | some (.ps _) => true
        | _ => false
      if !isPs then
        let sname := ((ir.stages[r.base + k]?).map (·.name)).getD ""
        throw (located ir s!"a run over several stages needs ps stages, not stage {sname}" loc)

/-- program.py `check_stmt`. -/
def checkStmt (ir : Ir) (contentBlocks : List (Option Nat)) (st : Located) : Res Unit := do
  let loc := some st.loc
  let poolName (i : Nat) : String := ((ir.pools[i]?).map (·.name)).getD ""
  match st.stmt with
  | .set _ e | .observe _ e => checkExpr ir e loc
  | .accept n a => do checkExpr ir n loc; checkExpr ir a loc
  | .branch c _ _ | .while_ c _ => checkExpr ir c loc
  | .choose _ n keys => do checkExpr ir n loc; for k in keys do checkExpr ir k loc
  | .hold h => do
    if let some l := h.lease then
      checkExpr ir l.time loc
    optCheck ir h.reuse loc
    optCheck ir h.cache loc
    optCheck ir h.eos loc
    for hp in h.pools do
      checkExpr ir hp.units loc
      optCheck ir hp.reserve loc
      if let some c := hp.content then
        if !allContent contentBlocks hp.pool then
          throw (located ir s!"`content` on pool {poolName hp.pool.base}, which is not `share content`" loc)
        checkExpr ir c.«prefix» loc
        checkExpr ir c.length loc
        checkExpr ir c.history loc
    for bd in h.bindings do checkExpr ir bd.expr loc
  | .run r _ w g _ => do
    -- a growing run advances a position by the tokens an engine serves: it needs a step stage
    if g.isSome then
      if (List.range r.count).any (fun k => !(((ir.stages[r.base + k]?).map StageDecl.isStep).getD false)) then
        let sname := ((ir.stages[r.base]?).map (·.name)).getD ""
        throw (located ir s!"`growing` needs an engine (a step stage), not stage {sname}" loc)
    checkExpr ir w loc
  | .flow refs w => do
    checkFlowStages ir refs loc
    checkExpr ir w loc
  | .grow _ u => checkExpr ir u loc
  | .load r u => do
    checkExpr ir u loc
    if anyContent contentBlocks r then
      throw (located ir s!"`load` on the `share content` pool {poolName r.base} (docs/content.md §1)" loc)
  | .drop r =>
    if anyContent contentBlocks r then
      throw (located ir s!"`drop` on the `share content` pool {poolName r.base} (docs/content.md §1)" loc)
  | .transfer link w _ _ => do
    match link with
    | .inl s =>
      -- a transfer copies over a link, never an engine (docs/language.md §11.15)
      if (List.range s.count).any (fun k => ((ir.stages[s.base + k]?).map StageDecl.isStep).getD false) then
        let sname := ((ir.stages[s.base]?).map (·.name)).getD ""
        throw (located ir s!"`transfer` over the engine {sname}: a transfer copies over a link (a fifo, ps or delay stage)" loc)
    | .inr refs => checkFlowStages ir refs loc   -- over several links: a flow's stages
    checkExpr ir w loc
  | .transferEnd _ q u => do
    checkExpr ir u loc
    if anyContent contentBlocks q then
      throw (located ir s!"`transfer … to` on the `share content` pool {poolName q.base} (docs/content.md §1)" loc)
  | _ => pure ()

/-- program.py: statement k of a block is a `transfer` exactly when the next is a `transfer_end`,
and a `transfer_end` exactly when the one before is a `transfer` (docs/ir.md: one source
statement, always adjacent). -/
def checkTransferPair (ir : Ir) (blk : List Located) (k : Nat) (st : Located) : Res Unit := do
  let nxt := (blk[k + 1]?).map (·.stmt.op)
  let prev := if k == 0 then none else (blk[k - 1]?).map (·.stmt.op)
  let op := st.stmt.op
  if (op == "transfer") != (nxt == some "transfer_end") || (op == "transfer_end") != (prev == some "transfer") then
    throw (located ir "a `transfer` statement of the IR must be followed by its `transfer_end`" (some st.loc))

/-- A positive finite block size, any rational (program.py since 84aea69); program.py's error
otherwise. -/
def blockOf (p : PoolDecl) : Res (Option Rat) :=
  match p.block with
  | none => .ok none
  | some v =>
    match v with
    | .fin q =>
      if q ≤ 0 then .error s!"error: pool {p.name}: block must be positive and finite, got {v.toWire}"
      else .ok (some q)
    | _ => .error s!"error: pool {p.name}: block must be positive and finite, got {v.toWire}"

/-- program.py `caps`: the cap as the IR gives it, never refused — a negative cap or `-inf`
admits nothing (every guard compares an amount ≥ 0 with it), `+inf` never blocks. -/
def capOf (p : PoolDecl) : Value := p.cap

/-- program.py `infer_memory`: an engine without a memory pool in the IR gets the pool its
`growing` runs grow. -/
def inferMemory (ir : Ir) : List (Option Nat) := Id.run do
  let mut mem : List (Option Nat) := ir.stages.map fun s =>
    match s.kind with
    | .step sd => sd.memory
    | _ => none
  for blk in ir.blocks do
    for st in blk do
      if let .run r _ _ (some g) _ := st.stmt then
        for e in List.range r.count do
          let e := r.base + e
          let isStep := ((ir.stages[e]?).map StageDecl.isStep).getD false
          if isStep && (mem.getD e none).isNone then
            mem := mem.set e (some g)
  return mem

/-- program.py `content_pool`: B = cap / block for a `share content` pool (docs/content.md §1),
none elsewhere; a content pool needs a block, a cap that is a whole number of blocks, `evict lru`,
and no `reserve held`. -/
def contentPool (p : PoolDecl) (block : Option Rat) (capV : Value) : Res (Option Nat) :=
  if !p.shareContent then .ok none
  else
    match block, capV with
    | none, _ | some _, .posInf | some _, .negInf =>
      .error s!"error: pool {p.name}: `share content` needs a block and a cap that is a whole number of blocks"
    | some b, .fin cap =>
      -- program.py: the block a whole number, the cap a whole number of blocks
      if b.den != 1 || (cap / b).den != 1 then
        .error s!"error: pool {p.name}: `share content` needs a block and a cap that is a whole number of blocks"
      else
        match p.evict with
        | .keyed _ => .error s!"error: pool {p.name}: `share content` evicts by LRU only"
        | .lru =>
          -- a negative cap: Python's `int(cap / b)` < 0 makes an empty block pool
          -- (`[0] * B` is `[]`), as `toNat`'s 0 does
          .ok (some (cap / b).num.toNat)

/-- program.py `prefixes`: each declared key with its parent and its total (a whole number). -/
def prefixesOf (ir : Ir) : Res Content.Prefixes :=
  ir.prefixes.mapM fun x =>
    match x.total with
    | .fin q =>
      if q.den == 1 && decide (0 ≤ q.num) then .ok (x.key, x.after, q.num.toNat)
      else .error s!"error: malformed IR value: prefix total {q}"
    | v => .error s!"error: malformed IR value: prefix total {v.toWire}"

/-- program.py `Program.__init__` with `check_supported`. -/
def ofIr (ir : Ir) : Res Program := do
  let block ← ir.pools.mapM blockOf
  let caps := ir.pools.map capOf
  let prefixes ← prefixesOf ir
  let contentBlocks ← ((ir.pools.zip block).zip caps).mapM fun ((p, b), c) => contentPool p b c
  for p in ir.pools do
    match p.evict with
    | .keyed keys => for k in keys do checkExpr ir k none
    | .lru => pure ()
    match p.preempt with
    | .keyed keys _ => for k in keys do checkExpr ir k none
    | _ => pure ()
    match p.queue with
    | .keyed keys => for k in keys do checkExpr ir k none
    | .fifo => pure ()
  for s in ir.stages do
    match s.kind with
    | .step d => do
      checkExpr ir d.budget none
      checkExpr ir d.cost none
      optCheck ir d.granule none
      for l in d.lets do checkExpr ir l.expr none
      for r in d.registers do checkExpr ir r.expr none
      checkSchedule ir d.schedule s.name d.schedAt
    | .ps c => checkExpr ir c none
    | _ => pure ()
  for blk in ir.blocks do
    for (st, k) in blk.zip (List.range blk.length) do
      checkStmt ir contentBlocks st
      checkTransferPair ir blk k st
  for g in ir.gauges do checkExpr ir g.expr none
  for cl in ir.claims do
    checkExpr ir cl.expr none
    optCheck ir cl.given none
  let engines := (List.range ir.stages.length).filter fun i =>
    ((ir.stages[i]?).map StageDecl.isStep).getD false
  return { ir, caps, block, engines, memoryOf := inferMemory ir, prefixes, contentBlocks }

/-- program.py `tiers_below`: the `spill` tiers under pool `i`, nearest first (docs/language.md
§11.8.1). The front-end refuses cycles; the walk is bounded by the number of pools all the same. -/
def tiersBelow (prog : Program) (i : Nat) : List Nat :=
  let rec go : Nat → Nat → List Nat
    | 0, _ => []
    | fuel + 1, p =>
      match (prog.ir.pools[p]?).bind (·.spill) with
      | none => []
      | some s => s.tier :: go fuel s.tier
  go prog.ir.pools.length i

/-- The statement at `(block, pc)`. -/
def stmt (prog : Program) (ref : Nat × Nat) : Option Located :=
  (prog.ir.blocks[ref.1]?).bind (fun b => b[ref.2]?)

end Program

/-- The `kind` string of a stage (config.py `StageState.kind`). -/
def stageKindName : StageKind → String
  | .fifo _ => "fifo"
  | .ps _ => "ps"
  | .delay => "delay"
  | .step _ => "step"

/-- config.py `Config.__init__`: the empty configuration of a program (before step 0). -/
def Config.new (prog : Program) : Config :=
  { pools := (List.range prog.ir.pools.length).map (fun p =>
      ({ content := ((prog.contentBlocks.getD p none).map fun B =>
            -- a content pool's block is whole (`contentPool`)
            Content.CState.init ((prog.block.getD p none).getD 0).num.toNat B) } : PoolState))
    stages := prog.ir.stages.map fun s =>
      ({ kind := stageKindName s.kind, est := if s.estimates then some (newEstimates s.kind) else none } : StageState)
    claims := prog.ir.claims.map fun _ => ({} : ClaimTally) }

/-- config.py `new_estimates`: an engine's carry its iteration cycles. -/
def newEstimates : StageKind → Estimates
  | .step _ => { engine := some {} }
  | _ => {}

/-! ## Events (events.py) -/

/-- Insert keeping `(time, seq)` order: after every event not later than it. -/
def insertEvent (ev : Event) : List Event → List Event
  | [] => [ev]
  | e :: es => if Event.before ev e then ev :: e :: es else e :: insertEvent ev es

/-- events.py `schedule_event`: insert an event at `time` with the next sequence number;
same-time events keep their order. An event in the past is an error. -/
def scheduleEvent (cfg : Config) (time : Rat) (kind : String) (arg : EventArg) : Res (Config × Event) :=
  if time < cfg.now then .error s!"an event scheduled in the past ({time} < {cfg.now})"
  else
    let ev : Event := ⟨time, cfg.counters.nextSeq, kind, arg⟩
    .ok ({ cfg with events := insertEvent ev cfg.events,
                    counters := { cfg.counters with nextSeq := cfg.counters.nextSeq + 1 } }, ev)

/-- events.py `withdraw_event`: remove the pending events of this kind and argument. -/
def withdrawEvent (cfg : Config) (kind : String) (arg : EventArg) : Config :=
  { cfg with events := cfg.events.filter (fun e => !(e.kind == kind && e.arg == arg)) }

/-- events.py `pending_at_now`: is an event pending at the current instant? -/
def pendingAtNow (cfg : Config) : Bool :=
  match cfg.events with
  | [] => false
  | e :: _ => e.time == cfg.now

end SerqLang

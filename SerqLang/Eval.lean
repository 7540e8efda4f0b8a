/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.State

/-!
# Evaluation in a configuration (expr.py `evaluate`/`observable`, the engine values and the
budget moment, `present`/`busy`/`work`/`ps_rate`/`advance_virtual_clock`, all in expr.py;
workload.py `take`)

These read (and, for draws and the `ps` virtual clock, advance) the configuration, so they live
in the step monad. They are mutually recursive as in serq_spec: an observable `work(s)` of a
`ps` stage advances its clock, which evaluates the stage's capacity; `budget_left(E)` evaluates
E's budget moment.
-/

namespace SerqLang

/-- expr.py `Env`: the moment an expression is read in. `ictx` is a snapshot of the iteration
being formed (engine.py passes the object; nothing evaluates while changing it). -/
structure EnvM where
  /-- the thread whose moment this is (expr.py `Env.session`: a session or a branch, whose
  attributes are those it uses, `attrThread`; its draws are its session's) -/
  session : Option Tid := none
  stream : DrawStream := .session
  loc : Option Loc := none
  engine : Option Nat := none
  ictx : Option IterCtx := none
  job : Option Job := none
  ctx : List (String × Value) := []
  /-- inside engine E's admission: E and `budget_left(E)`, the budget left minus the drafting
  slots (negative when the slots exceed it, as expr.py's int) -/
  admitLeft : Option (Nat × Value) := none
  /-- expr.py `Env.what`: names the expression in errors when there is no location -/
  what : Option String := none
  deriving Inhabited

/-- The value of an attribute slot (0 outside a session). -/
def attrOf (env : EnvM) (slot : Nat) : M Value := do
  if let some th := env.session then
    let attrs ← threadAttrs th
    if slot < attrs.length then return attrs.getD slot Value.zero
    else internalError s!"internal: attribute slot {slot} out of range"
  else return Value.zero

/-- Insert or replace a key of a sorted association list (cursors). -/
def upsertSorted (k : String) (v : Nat) : List (String × Nat) → List (String × Nat)
  | [] => [(k, v)]
  | (k', v') :: rest =>
    if k' == k then (k, v) :: rest
    else if decide (k < k') then (k, v) :: (k', v') :: rest
    else (k', v') :: upsertSorted k v rest

/-- serq/draws.py `check_args`, as workload.py `_check_args` applies it to a replayed draw:
arguments outside the law (infinite, a negative mean, too many Erlang phases, an acceptance rate
outside [0, 1]) are the error a live draw gives (docs/language.md §4.3); `~det` of an exact value is any finite one. serq_spec reads
the arguments as doubles: here they stay exact, so one beyond the doubles is not refused as
infinite, and a value in the message is its wire text (docs/lean.md). -/
def drawArgsError (dist : String) (args : List Value) : Option String :=
  let shown := ", ".intercalate (args.map Value.toWire)
  let outside (reason : String) : String :=
    s!"~{dist}({shown}): arguments outside what the draw can sample ({reason})"
  if dist == "det" then
    if (args.headD Value.zero).isFinite then none
    else some s!"~det needs a finite value, got {(args.headD Value.zero).toWire}"
  else if dist == "accept" then   -- `accept (n, alpha)`'s counts (docs/language.md §7.3): alpha in [0, 1]
    let alpha := args.headD Value.zero
    if !Value.lt alpha Value.zero && !Value.lt Value.one alpha && alpha.isFinite then none
    else some (s!"`accept (n, alpha)` needs a per-draft acceptance rate alpha in [0, 1], got {alpha.toWire}: " ++
      "alpha is the chance that a draft is accepted")
  else if args.any (fun a => !a.isFinite) then some (outside "the arguments must be finite")
  else
    let mean := if dist == "erlang" then args.getD 1 Value.zero else args.headD Value.zero
    if (dist == "exp" || dist == "erlang" || dist == "h2") && Value.lt mean Value.zero then
      some (s!"~{dist} needs a mean >= 0, got {mean.toWire}; a mean is a time or an amount: keep the " ++
        "expression (or the input it reads) from going below 0")
    else if dist == "erlang" && Value.lt (Value.ofNat 1000000) (args.headD Value.zero) then
      some (outside "at most 1000000 phases")
    else none

/-- serq/sessionsfile.py `missing_draw`: a replay needs draw `number` of `stream` for a `~dist`
and the file holds only `held`. -/
def missingDraw (stream : String) (number : Nat) (dist : String) (held : Nat) : String :=
  s!"the sessions file does not fit the program: {stream} needs draw #{number} (~{dist}) but the file has only {held}"

/-- workload.py `Workload.take` (replay): the next value of the stream for the session (the
machine stream outside a session); the cursors advance in the configuration. The draw's
arguments are checked first (`drawArgsError`); a value the file does not hold is the located
`SessionsFileError` of `missingDraw` (a turn the file has no list for: an empty one). -/
def take (env : EnvM) (dist : String) (args : List Value) : M Value := do
  let w ← getWork
  let cfg ← getCfg
  let (lst, i, stream) ← match env.session with
    | none => do
      let i := cfg.counters.machine
      setCfg { cfg with counters := { cfg.counters with machine := i + 1 } }
      pure (w.machine, i, "the machine stream")
    | some th => do
      -- a branch draws from its session's streams, with its session's cursors (§11.13)
      let serial := th.owner
      let s ← session serial
      let some draws := w.sessions[serial]?
        | sessionsFileError s!"the sessions file does not fit the program: no draws for session {serial}" env.loc
      -- serq/sessionsfile.py `stream_name`
      let (lst, ckey, stream) := match env.stream with
        | .init => (draws.init, "init", s!"session {serial}'s init stream")
        | .session => (draws.session, "session", s!"session {serial}'s session stream")
        | .turn k =>   -- turns count from 1; one the file has no list for reads an empty one
          ((if k == 0 then [] else (draws.turns[k - 1]?).getD []), s!"turn:{k}", s!"session {serial}'s turn {k} stream")
      let i := (List.lookup ckey s.cursors).getD 0
      setSession { s with cursors := upsertSorted ckey (i + 1) s.cursors }
      pure (lst, i, stream)
  if let some msg := drawArgsError dist args then specError msg env.loc
  match lst[i]? with
  | some x => return .fin x
  | none => sessionsFileError (missingDraw stream (i + 1) dist lst.length) env.loc

/-- expr.py `memory_alloc`: units the job's owner holds in the engine's memory pool. -/
def memoryAlloc (e : Nat) (job : Job) : M Rat := do
  let mem := ((← getProg).memoryOf[e]?).getD none
  match mem with
  | none => return 0
  | some p =>
    let s ← thread job.tid
    match holdOf s p with
    | none => return 0
    | some h => return h.alloc.getD (h.slot p) 0

/-- The pools engine `e` admits, in declaration order (program.py `admitted_pools`). -/
def admittedPools (e : Nat) : M (List Nat) := do
  let pools := (← getProg).ir.pools
  return (List.range pools.length).filter fun p =>
    ((pools[p]?).bind (·.admittedBy)) == some e

/-- Σ of a list of naturals. -/
def sumNat (xs : List Nat) : Nat := xs.foldl (· + ·) 0

/-- Σ of a list of pool amounts. -/
def sumRat (xs : List Rat) : Rat := xs.foldl (· + ·) 0

/-- expr.py `engine_value`: `running.*`, `waiting.*`, `batch.*` of the engine being read. -/
def engineValue (env : EnvM) (name : String) : M Value := do
  let some e := env.engine | specError s!"engine value {name} read outside an engine" env.loc
  let jobs := (← stage e).jobs
  let assign := (env.ictx.map (·.assign.toList)).getD []
  let ofN (n : Nat) : Value := Value.ofNat n
  if name == "running.count" then return ofN jobs.length
  else if name == "running.decoding" then return ofN (jobs.filter (·.mode == "decode")).length
  else if name == "running.kv_decode" then
    return .fin (sumRat (← (jobs.filter (·.mode == "decode")).mapM (memoryAlloc e)))
  else if name == "running.kv_prefill" then
    -- a plain run counts as a prefill
    return .fin (sumRat (← (jobs.filter (·.mode != "decode")).mapM (memoryAlloc e)))
  else if name == "running.preempted" then return ofN ((env.ictx.map (·.preempted)).getD 0)
  else if name == "waiting.count" then
    let ps ← admittedPools e
    let mut n := 0
    for p in ps do n := n + (← pool p).queue.length
    return ofN n
  else if name == "waiting.admitted" then return ofN ((env.ictx.map (·.admitted)).getD 0)
  else if name == "batch.tokens" then return ofN (sumNat (assign.map (·.tokens)))
  else if name == "batch.prefilled" then
    return ofN (sumNat ((assign.filter (·.mode != "decode")).map (·.tokens)))
  else if name == "batch.decoding" then return ofN (assign.filter (·.mode == "decode")).length
  else if name == "batch.prefilling" then return ofN (assign.filter (·.mode != "decode")).length
  else if name == "batch.kv_decode" || name == "batch.kv_prefill" then
    let decode := name == "batch.kv_decode"
    -- modes by serial: the last assignment of a serial wins (a dict in engine.py)
    let mut total : Rat := 0
    let mut seen : List Tid := []
    for a in assign.reverse do
      if !seen.contains a.serial then
        seen := a.serial :: seen
        if (a.mode == "decode") == decode then
          if let some j := jobs.find? (·.tid == a.serial) then
            total := total + (← memoryAlloc e j)
    return .fin total
  else if name == "batch.attention" then
    let mut total : Rat := 0
    for a in assign do
      if a.mode != "decode" then
        let k : Rat := a.posBefore.getD 0
        let t : Rat := ((a.tokens : Nat) : Rat)
        total := total + t * (k + t / 2)
    return .fin total
  else specError s!"unknown engine value {name}" env.loc

/-- expr.py `job_value`: per-request keys `decoding`, `admission`, `remaining`. -/
def jobValue (env : EnvM) (name : String) : M Value := do
  let some j := env.job | specError s!"per-request key `{name}` read outside a resident" env.loc
  if name == "decoding" then return Value.ofBool (j.mode == "decode")
  else if name == "admission" then return Value.ofInt j.admission
  else if name == "remaining" then
    match j.left with
    | .tokens n => return Value.ofNat n
    | .value v => return v
  else specError s!"unknown per-request key {name}" env.loc

/-- expr.py `present`: jobs present. -/
def present (s : Nat) : M Nat := do
  let st ← stage s
  return st.jobs.length + st.waiting.length

/-- expr.py `busy`: jobs in service. -/
def busy (s : Nat) : M Nat := do
  let st ← stage s
  if st.kind == "step" then return (st.iteration.map (·.assign.length)).getD 0
  else return st.jobs.length

/-- A value as a natural token count or `inf` (expr.py `whole_or_inf`, refusing what it
refuses; a negative whole number is returned as an error here, see docs/lean.md). -/
def wholeOrInf (v : Value) (what : String) (loc : Option Loc := none) : M (Option Int) := do
  match v with
  | .posInf => return none
  | .negInf => specError s!"{what} is -inf" loc
  | .fin q =>
    if q.den != 1 then specError s!"{what} must be a whole number of tokens, got {v.toWire}" loc
    else return some q.num

/-- The flat (pre-order) list of schedule statements (expr.py `flat_schedule`). -/
partial def flatSchedule (stmts : List Sched) : List Sched :=
  stmts.foldr (fun s acc =>
    match s with
    | .branch _ t e => s :: (flatSchedule t ++ flatSchedule e ++ acc)
    | _ => s :: acc) []

/-- The `each` clause of a schedule statement. -/
def Sched.each? : Sched → Option Expr
  | .advance _ _ e => e
  | .admit _ _ e => e
  | .exclusivePrefill e => e
  | _ => none

/-- A job's work left as a rational (an infinite amount never exists: exec_run refuses it). -/
def workLeft (j : Job) : Rat :=
  match j.left with
  | .tokens n => (n : Rat)
  | .value (.fin q) => q
  | .value _ => 0

def jobsLeftRat (jobs : List Job) : Rat := jobs.foldl (fun acc j => acc + workLeft j) 0

/-- The stage of a `finish` event's argument. -/
def EventArg.stageOf? : EventArg → Option Nat
  | .stageSerial s _ => some s
  | _ => none

/-- A `Res` of values.py as a run-time error of the semantics (values.py raises `SpecError`
without a location). -/
def liftRes {α : Type} (r : Res α) : M α :=
  match r with
  | .ok a => pure a
  | .error e => specError e

/-! ## The online estimates (expr.py `est_lambda` … `price`; docs/spec.md "Online estimates") -/

/-- expr.py `RHO_CAP`. -/
def rhoCap : Rat := 99 / 100

/-- expr.py `ESTIMATE_GRID`: every estimate is read on the grid of multiples of 1/2^32. -/
def estimateGrid : Nat := 2 ^ 32

/-- expr.py `on_grid`: `x` rounded to the nearest multiple of 2^-32, ties to the even multiple
(Python's `round` of a `Fraction`: the floor, plus one when the rest is above 1/2, or exactly
1/2 with an odd floor). -/
def onGrid (x : Rat) : Rat :=
  let y := x * (estimateGrid : Rat)
  let f := y.floor
  let rest := y - (f : Rat)
  let n := if decide (rest < 1 / 2) then f
    else if decide (rest > 1 / 2) then f + 1
    else if f % 2 == 0 then f else f + 1
  (n : Rat) / (estimateGrid : Rat)

/-- expr.py `unrounded_lambda`: λ̂ unrounded, 1 / the mean gap between starts; 0 before a
positive mean gap. -/
def unroundedLambda (e : Estimates) : Rat :=
  match e.gap with
  | some g => if g == 0 then 0 else 1 / g
  | none => 0

/-- expr.py `unrounded_rho`: ρ̂ unrounded and uncapped, λ̂ · Ŝ, Ŝ = 0 before the first start; an
engine's: mean busy / mean cycle. -/
def unroundedRho (e : Estimates) : Rat :=
  match e.engine with
    | none => unroundedLambda e * e.service.getD 0
    -- an engine's: mean busy / mean cycle, 0 before a cycle or while the mean cycle is 0
    | some c => match c.cycle, c.busy with
      | some cy, some b => if cy == 0 then 0 else b / cy
      | _, _ => 0

/-- expr.py `est_lambda`: the reading of λ̂, on the grid. -/
def estLambda (e : Estimates) : Rat := onGrid (unroundedLambda e)

/-- expr.py `est_rho`: the reading of ρ̂, on the grid, then capped at 99/100 (values.py `min_v`),
so a saturated ρ̂ reads 99/100 exactly. -/
def estRho (e : Estimates) : Rat :=
  let r := onGrid (unroundedRho e)
  if decide (r ≤ rhoCap) then r else rhoCap

/-- expr.py `est_wait`: the mean wait before service, 0 before the first; its reading on the grid. -/
def estWait (e : Estimates) : Rat := match e.wait with
  | some w => onGrid w
  | none => 0

-- conjecture: `onGrid x` is within 2^-33 of `x`, and `(onGrid x).den` divides 2^32 (so an
-- estimate that feeds a time adds at most 32 bits to the times' denominators); not proved here.

/-- expr.py `price`: ds + λ̂(s_m² − s_hit²)/(2(1 − ρ̂)) + λ̂·Ŵ·ds/(1 − ρ̂), s_m = s_hit + ds, from
the readings (on the grid) of λ̂, ρ̂ and Ŵ, in values.py's arithmetic (its errors for ±inf
arguments included). -/
def price (e : Estimates) (sHit ds : Value) : Res Value := do
  let lam := Value.fin (estLambda e)
  let idle := Value.fin (1 - estRho e)
  let sMiss ← Value.add sHit ds
  let spread ← Value.sub (← Value.mul sMiss sMiss) (← Value.mul sHit sHit)
  let queueing ← Value.div (← Value.mul lam spread) (← Value.mul (.fin 2) idle)
  let waiting ← Value.div (← Value.mul (← Value.mul lam (.fin (estWait e))) ds) idle
  Value.add (← Value.add ds queueing) waiting

/-- expr.py `remaining`: the work a job on a stage a flow crosses has left at `now`, served at
its rate since `since` (docs/language.md §11.14). -/
def remaining (now : Rat) (j : Job) : Rat := workLeft j - j.rate * (now - j.since)

/-- serq/exact.py `index_not_in_range`: an array index that names no member, with what to do
(both engines' words; the index as its wire text here, docs/lean.md). -/
def indexNotInRange (i : Value) (count : Nat) : String :=
  s!"index {i.toWire} is not a whole number in 0..{count - 1}: an array's member is named by a whole number from 0 to {count - 1}; round the index (floor(…)) and keep it in range (e.g. min(floor(…), {count - 1}))"

/-- serq/exact.py `speculate_not_whole`: `speculate (slots, lookahead, limit)` read as anything
but a whole number >= 0 (the limit may be inf), with what to do (the value as its wire text here). -/
def speculateNotWhole (engine key : String) (v : Value) : String :=
  let orInf := if key == "limit" then " or inf" else ""
  s!"engine {engine}: speculate {key} must be a whole number >= 0{orInf}, got {v.toWire}; it counts tokens: round it (floor(…)) and keep it >= 0"

/-- expr.py `running_served` (docs/language.md §7.3): the batch entries of engine `e`'s
iteration being formed whose request it did not admit (`running_served(E)`), or of those the
ones serving a prefill or plain run (`running_chunks(E)`), as `noteForming` keeps them while its
schedule runs; 0 outside E's schedule. -/
def runningServed (e : Nat) (chunks : Bool) : M Value := do
  match (← get).forming with
  | some (eng, served, ch) =>
    if eng == e then return Value.ofNat (if chunks then ch else served)
    else return Value.zero
  | none => return Value.zero

mutual

/-- expr.py `evaluate`: the value of `e` in `env`. A plain `SpecError` not yet named, raised
without a location or while evaluating something named (`what`: engine items, keys, capacities),
is prefixed with that name — once: an error already named by an inner evaluation keeps its name —
and, if it has no location, gets the location of the statement or declaration (`env.loc`). Both,
when the environment has both (expr.py: `exc.at is None or env.what`, then each in turn). -/
partial def evaluate (env : EnvM) (e : Expr) : M Value :=
  tryCatch (evaluateCore env e) fun err =>
    if err.kind == .spec && !err.named && (err.loc.isNone || env.what.isSome) then
      let err : SpecErr := match env.what with
        | some w => { err with message := s!"{w}: {err.message}", named := true }
        | none => err
      throw (if err.loc.isNone then { err with loc := env.loc } else err)
    else throw err

/-- expr.py `_evaluate`: one node; sub-expressions go through `evaluate`. -/
partial def evaluateCore (env : EnvM) (e : Expr) : M Value := do
  match e with
  | .num v => return v
  | .attr slot => attrOf env slot
  | .bin op x y =>
    if op == "&&" then
      let a ← evaluate env x
      if Value.nz a then return Value.ofBool (Value.nz (← evaluate env y))
      else return Value.ofBool false
    else if op == "||" then
      let a ← evaluate env x
      if Value.nz a then return Value.ofBool true
      else return Value.ofBool (Value.nz (← evaluate env y))
    else
      let a ← evaluate env x
      let c ← evaluate env y
      liftRes (bin op a c)
  | .un op x =>
    let a ← evaluate env x
    if op == "neg" then return Value.neg a else return Value.ofBool (!Value.nz a)
  | .cond c x y =>
    let t ← evaluate env c
    if Value.nz t then evaluate env x else evaluate env y
  | .fn f args =>
    let vs ← args.mapM (evaluate env)
    liftRes (fnValue f vs)
  | .ctx name =>
    if name == "now" then return .fin (← getCfg).now
    else
      match List.lookup name env.ctx with
      | some v => return v
      | none => specError s!"context variable `{name}` read outside its moment" env.loc
  | .draw dist args =>
    take env dist (← args.mapM (evaluate env))
  | .loc i =>
    let some ic := env.ictx | specError "a schedule `let` read outside its schedule" env.loc
    match ic.locals[i]? with
    | some v => return v
    | none => specError s!"schedule `let` {i} read before it is computed" env.loc
  | .reg s i =>
    match (← stage s).registers[i]? with
    | some v => return v
    | none => specError s!"register {i} of stage {s} out of range" env.loc
  | .eng name => engineValue env name
  | .job name => jobValue env name
  | .obsStage f base count index args => observable env f false base count index args
  | .obsPool f base count index => observable env f true base count index []

/-- expr.py `resolve_ref`. -/
partial def resolveRef (env : EnvM) (base count : Nat) (index : Option Expr) : M Nat := do
  match index with
  | none => return base
  | some ie =>
    let i ← evaluate env ie
    match i with
    | .fin q =>
      if q.den == 1 && decide (0 ≤ q.num) && decide (q.num < (count : Int)) then
        return base + q.num.toNat
      else specError (indexNotInRange i count) env.loc
    | _ => specError (indexNotInRange i count) env.loc

/-- expr.py `observable`. -/
partial def observable (env : EnvM) (f : String) (onPool : Bool) (base count : Nat)
    (index : Option Expr) (args : List Expr) : M Value := do
  if onPool then
    let p ← resolveRef env base count index
    let st ← pool p
    if f == "used" then return .fin st.used
    else if f == "free" then liftRes (Value.sub (← capOf p) (.fin st.used))   -- ±inf under an infinite cap
    else if f == "cachedin" then
      match env.session with
      | none => return Value.zero
      | some th =>
        if st.content.isSome then
          -- the hit of this thread's admission attempt, else 0 (docs/content.md §3)
          match (← get).attempt with
          | some (who, hits) =>
            if who == th then return Value.ofNat ((List.lookup p hits).getD 0)
            else return Value.zero
          | none => return Value.zero
        else
          -- the session's prefix on p and, contiguous with it, the rest on p's `spill` tiers
          -- (docs/language.md §11.8.1)
          let mut total : Rat := 0
          for q in p :: (← getProg).tiersBelow p do
            total := total + sumRat (((← pool q).entries.filter (·.owner == th)).map (·.size))
          return .fin total
    else if f == "holders" then return Value.ofNat st.holders.length
    else if f == "queued" then return Value.ofNat st.queue.length
    else specError s!"observable {f}() is not supported" env.loc
  else
    let s ← resolveRef env base count index
    if f == "queue" then return Value.ofNat (← present s)
    else if f == "busy" then return Value.ofNat (← busy s)
    else if f == "work" then work s
    else if f == "est_lambda" || f == "est_rho" || f == "est_wait" || f == "price" then
      let name ← stageName s
      let some est := (← stage s).est
        | specError s!"{f}({name}): the stage keeps no estimates" env.loc
      if f == "est_lambda" then return .fin (estLambda est)
      else if f == "est_rho" then return .fin (estRho est)
      else if f == "est_wait" then return .fin (estWait est)
      else
        let sHit ← evaluate env ((args[0]?).getD default)
        let ds ← evaluate env ((args[1]?).getD default)
        liftRes (price est sHit ds)
    else if f == "budget_left" then
      match env.admitLeft with
      | some (e, left) =>
        if e == s then return left else budgetLeftOutsideChecked env s
      | none => budgetLeftOutsideChecked env s
    else if f == "running_served" || f == "running_chunks" then
      runningServed s (f == "running_chunks")
    else specError s!"observable {f}() is not supported" env.loc

/-- expr.py `observable` for `budget_left(E)` outside E's admission: refused when E's Budget
moment draws (re-reading it would consume a machine draw per read, docs/language.md §4.3). -/
partial def budgetLeftOutsideChecked (env : EnvM) (s : Nat) : M Value := do
  let d ← stageDecl s
  if let .step sd := d.kind then
    if budgetDraws sd then
      specError (s!"budget_left({d.name}) outside its admission re-reads the engine's `tokens cap` " ++
        "and `let`s, which draw: draws are forbidden where the machine re-reads an expression " ++
        "(docs/language.md §4.3)") env.loc
  budgetLeftOutside s

/-- expr.py `ps_rate`: each of `n` present jobs gets φ(n)/n. -/
partial def psRate (s n : Nat) : M Rat := do
  return (← psCapacity s n) / (n : Rat)

/-- expr.py `ps_capacity`: φ(n), the total rate of ps stage s with n jobs present (Ps moment: φ
may read `present`). -/
partial def psCapacity (s n : Nat) : M Rat := do
  let d ← stageDecl s
  let cap := match d.kind with
    | .ps c => c
    | _ => Expr.num Value.one
  let capAt := d.posOf "capacity"   -- expr.py `field_at(…, "capacity")`
  let phi ← evaluate { ctx := [("present", Value.ofNat n)], loc := capAt, what := some s!"ps stage {d.name}: capacity" } cap
  match phi with
  | .fin q =>
    if q ≤ 0 then specError s!"ps stage {d.name}: capacity must be positive and finite, got {phi.toWire}" capAt
    else return q
  | _ => specError s!"ps stage {d.name}: capacity must be positive and finite, got {phi.toWire}" capAt

/-- expr.py `current_rate`: the per-job rate in effect since `t_last`, the one the pending
departure was scheduled with, recovered exactly from that `finish` event as
(tag − v)/(time − t_last); the capacity is evaluated again only when no departure is pending
(not reached in a run). -/
partial def currentRate (s : Nat) : M Rat := do
  let st ← stage s
  let pending := (← getCfg).events.find? fun ev =>
    ev.kind == "finish" && ev.arg.stageOf? == some s && decide (ev.time > st.tLast)
  match pending with
  | some ev =>
    match ev.arg with
    | .stageSerial _ serial =>
      return ((List.lookup serial st.tags).getD st.v - st.v) / (ev.time - st.tLast)
    | _ => psRate s st.jobs.length
  | none => psRate s st.jobs.length

/-- expr.py `advance_virtual_clock`: v += rate·(now − t_last) with the rate of the jobs
present since t_last (`currentRate`). -/
partial def advanceVirtualClock (s : Nat) : M Unit := do
  let st ← stage s
  let now := (← getCfg).now
  if !st.jobs.isEmpty && decide (now > st.tLast) then
    let rate ← currentRate s
    let st ← stage s
    setStage s { st with v := st.v + rate * (now - st.tLast), tLast := now }
  else
    setStage s { st with tLast := now }

/-- expr.py `work`: unfinished work at a stage. -/
partial def work (s : Nat) : M Value := do
  let st ← stage s
  if st.kind == "step" then return .fin (jobsLeftRat st.jobs)
  else if (← getProg).ir.sharedStages.contains s then   -- a stage a flow crosses (§11.14)
    let now := (← getCfg).now
    return .fin (st.jobs.foldl (fun acc j => acc + remaining now j) (0 : Rat))
  else if st.kind == "ps" then
    advanceVirtualClock s
    let st ← stage s
    let total := st.jobs.foldl (fun acc j => acc + ((List.lookup j.tid st.tags).getD st.v - st.v)) (0 : Rat)
    return .fin total
  else
    let now := (← getCfg).now
    let total := jobsLeftRat st.waiting +
      st.jobs.foldl (fun acc j => acc + ((List.lookup j.tid st.finish).getD now - now)) (0 : Rat)
    return .fin total

/-- expr.py `budget_moment`: `tokens cap`, the `let`s and the `each at most` values, read once
as the iteration starts. -/
partial def budgetMoment (ictx : IterCtx) : M IterCtx := do
  let d ← stageDecl ictx.engine
  let .step sd := d.kind | specError s!"budget moment of a non-engine stage {d.name}"
  -- expr.py's `what` and `at` of each item: the stage's field positions (irfile.py `field_at`)
  -- for `tokens cap` and `granule`, the clause's for `speculate`; the IR decoded here keeps no
  -- position of a `let` or a schedule statement
  let envOf (ic : IterCtx) (item : String) (loc : Option Loc) : EnvM :=
    { engine := some ic.engine, ictx := some ic, loc, what := some s!"engine {d.name}: {item}" }
  let name := d.name
  let budgetAt := d.posOf "budget"
  let mut ic := ictx
  let b ← wholeOrInf (← evaluate (envOf ic "tokens cap" budgetAt) sd.budget) s!"engine {name}: tokens cap" budgetAt
  match b with
  | none => ic := { ic with left := .inf }
  | some k =>
    if k < 0 then specError s!"engine {name}: tokens cap is negative ({k})" budgetAt
    ic := { ic with left := .n k.toNat }
  -- docs/language.md §7.3: `speculate (slots, lookahead, limit)`, whole numbers >= 0 (limit: or
  -- inf), read right after the budget and before the `let`s, as expr.py reads them
  if let some sp := sd.speculate then
    -- expr.py: each read as a whole number >= 0 (the limit may be inf), one message for every way
    -- it is not (serq/exact.py `speculate_not_whole`)
    let whole (e : Expr) (key : String) : M (Option Int) := do
      let v ← evaluate (envOf ic s!"speculate {key}" sp.loc) e
      match v with
      | .posInf => if key == "limit" then return none else specError (speculateNotWhole name key v) sp.loc
      | .negInf => specError (speculateNotWhole name key v) sp.loc
      | .fin q =>
        if q.den != 1 || decide (q < 0) then specError (speculateNotWhole name key v) sp.loc
        else return some q.num
    let some sl ← whole sp.slots "slots" | specError (speculateNotWhole name "slots" .posInf) sp.loc
    let some lk ← whole sp.lookahead "lookahead" | specError (speculateNotWhole name "lookahead" .posInf) sp.loc
    let lim ← whole sp.limit "limit"
    ic := { ic with slots := sl.toNat, lookahead := lk.toNat,
                    limit := match lim with
                      | none => .inf
                      | some k => .n k.toNat }
  for l in sd.lets do
    let v ← evaluate (envOf ic s!"schedule `let {l.name}`" l.loc) l.expr
    ic := { ic with locals := ic.locals.push v }
  let mut each : Array (Option Tok) := #[]
  for s in flatSchedule sd.schedule do
    -- read at its statement's position (expr.py `st.get("at")`; `each`'s index is the pre-order
    -- one `StepDecl.schedAt` keeps)
    let eachAt := (sd.schedAt[each.size]?).getD none
    match s.each? with
    | none => each := each.push none
    | some ee =>
      let c ← wholeOrInf (← evaluate (envOf ic "each at most" eachAt) ee) s!"engine {name}: each at most" eachAt
      match c with
      | none => each := each.push (some .inf)
      | some k =>
        if k ≤ 0 then specError s!"engine {name}: each at most must be positive, got {k}" eachAt
        each := each.push (some (.n k.toNat))
  ic := { ic with each }
  if let some ge := sd.granule then
    let granuleAt := d.posOf "granule"
    let g ← wholeOrInf (← evaluate (envOf ic "granule" granuleAt) ge) s!"engine {name}: granule" granuleAt
    match g with
    | none => ic := { ic with granule := none }
    | some k =>
      -- a run-time guard (§11.9): a granule is a positive number of tokens (inf: none)
      if k ≤ 0 then specError s!"engine {name}: granule must be positive, got {k}" granuleAt
      ic := { ic with granule := some k.toNat }
  return ic

/-- expr.py `budget_left_outside`: B − Σ want over residents, floored at 0. -/
partial def budgetLeftOutside (e : Nat) : M Value := do
  let ic ← budgetMoment { engine := e }
  let d ← stageDecl e
  let sched := match d.kind with
    | .step sd => sd.schedule
    | _ => []
  -- the cap of the first `advance` statement in pre-order
  let flat := flatSchedule sched
  let idx := ((List.range flat.length).zip flat).find? fun (_, s) =>
    match s with
    | .advance _ _ _ => true
    | _ => false
  let cap : Tok := match idx with
    | some (i, _) => ((ic.each[i]?).getD none).getD .inf
    | none => .inf
  let mut want := 0
  for j in (← stage e).jobs do
    let left := match j.left with
      | .tokens n => n
      | .value _ => 0
    if j.mode == "decode" then want := want + min 1 left
    else
      match cap with
      | .inf => want := want + left
      | .n c => want := want + min left c
  match ic.left with
  | .inf => return .posInf
  | .n l => return Value.ofNat (l - want)

end

end SerqLang

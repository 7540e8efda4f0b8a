/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Claims

/-!
# The step engine (python/serq_spec/engine.py, docs/language.md §11.6)

One iteration hands one token budget to the residents in serving order — a decode takes one
token, a prefill up to the per-run cap — then to waiting requests admitted with the budget that
is left. Growth happens as positions advance; a growth that cannot be had preempts (§11.7).
The iteration context is threaded explicitly; schedule statements are identified by their
pre-order position (engine.py uses the statement objects).

Python shares one `Job` object between the engine's residents and `Session.job`; here they are
two copies kept equal (`syncJob`).
-/

namespace SerqLang

/-- engine.py `has_work`: residents, or a waiting head in a pool the engine admits. -/
def hasWork (e : Nat) : M Bool := do
  if !(← stage e).jobs.isEmpty then return true
  for p in (← admittedPools e) do
    if !(← pool p).queue.isEmpty then return true
  return false

/-- The number of statements of a schedule statement's subtree (pre-order size). -/
def schedSize (s : Sched) : Nat := (flatSchedule [s]).length

/-- A resident's work left in tokens. -/
def tokensLeft (j : Job) : Nat :=
  match j.left with
  | .tokens n => n
  | .value _ => 0

/-- The position of the schedule statement of engine `e` at pre-order index `idx` (its `"at"`:
engine.py reads a statement's expressions there), none where the IR gives none. -/
def schedLoc (e idx : Nat) : M (Option Loc) := do
  match (← stageDecl e).kind with
  | .step sd => return (sd.schedAt[idx]?).getD none
  | _ => return none

/-- engine.py `next_unserved`: the first resident in the serving order not yet served; `loc`: the
position of the `advance` statement, where a key is read. -/
def nextUnserved (ic : IterCtx) (order : Option Order) (loc : Option Loc := none) : M (Option Job) := do
  let jobs := (← stage ic.engine).jobs
  let cands := ((List.range jobs.length).zip jobs).filter fun (_, j) => !ic.served.contains j.tid
  match cands with
  | [] => return none
  | (_, first) :: _ =>
    match order with
    | none => return some first
    | some .admission => return some first
    | some .decodeFirst =>
      -- least (0 if decoding else 1, index): the first decoding resident, else the first
      match cands.find? (fun c => c.2.mode == "decode") with
      | some c => return some c.2
      | none => return some first
    | some (.keyed keys) =>
      let mut best : Option (Job × List Value) := none
      for (i, j) in cands do
        let env : EnvM := { session := some j.tid, engine := some ic.engine, ictx := some ic, job := some j, loc,
                            what := some s!"engine {← stageName ic.engine}: a serving-order key" }
        let key := (← keys.mapM (evaluate env)) ++ [Value.ofNat i]
        match best with
        | none => best := some (j, key)
        | some (_, bk) => if lexLt key bk then best := some (j, key)
      return best.map (·.1)

/-- engine.py `wanted`: what a resident asks of one iteration — a decode one token (1 + k with k
drafts, cut by the per-run cap like a chunk), a prefill its work left, with its placeholder drafts,
up to the per-run cap (docs/language.md §7.3). -/
def wanted (job : Job) (cap : Tok) : Nat :=
  let left := tokensLeft job
  let capped (w : Nat) : Nat := match cap with
    | .inf => w
    | .n c => min w c
  if job.mode == "decode" then
    if job.drafts > 0 && left > 0 then capped (1 + job.drafts) else min 1 left
  else capped (left + job.drafts)

/-- engine.py `verified_upto`: the position up to which a step's tokens are verified (§7.3). -/
def verifiedUpto (job : Job) (posBefore : Rat) (tokens : Nat) : Rat :=
  if job.drafts == 0 then posBefore + (tokens : Rat)
  else posBefore + ((min tokens (if job.mode == "decode" then 1 else tokensLeft job) : Nat) : Rat)

/-- engine.py `serve`: one resident's turn; `loc`: the position of the statement whose `only`
is read. -/
def serve (ic : IterCtx) (job : Job) (only : Option Expr) (cap : Tok) (loc : Option Loc := none) : M IterCtx := do
  let mut ic := { ic with served := ic.served ++ [job.tid] }
  let s ← thread job.tid
  if let some o := only then
    let env : EnvM := { session := some job.tid, engine := some ic.engine, ictx := some ic, job := some job, loc,
                        what := some s!"engine {← stageName ic.engine}: `only`" }
    if !Value.nz (← evaluate env o) then return ic
  let decoding := job.mode == "decode"
  let left := tokensLeft job
  let mut want : Nat := wanted job cap
  if job.drafts > 0 then
    if let (some gp, .n lim) := (job.growing, ic.limit) then
      -- a step's positions stay below the limit, room for the token it samples (§7.3)
      if let some h := holdOf s gp then
        let pos := h.position.getD (h.slot gp) 0
        want := min want ((lim : Int) - 1 - pos.floor).toNat
  if ic.slots > 0 then
    if let .n l := ic.left then
      -- no budget left beyond the drafting slots: the iteration is full (§7.3)
      if l ≤ ic.slots then return { ic with stopped := true }
  let mut tokens : Nat := match ic.left with
    | .inf => want
    | .n l => min want (l - ic.slots)
  if !decoding && tokens < left then
    if let some g := ic.granule then
      if g > 0 then
        tokens := tokens / g * g
        if tokens == 0 then ic := { ic with noAdmit := true }
  if tokens == 0 then return ic
  let mut posBefore : Option Rat := none
  if let some gp := job.growing then
    if let .growing _ := s.status then return ic
    let some h := holdOf s gp | specError s!"internal: resident {job.tid.text} holds no pool {gp}"
    let i := h.slot gp
    -- the lookahead units past the chunk, never past the limit (§7.3)
    let chunkEnd : Rat := h.position.getD i 0 + (tokens : Rat)
    let reach : Rat := match ic.limit with
      | .inf => chunkEnd + (ic.lookahead : Rat)
      | .n lim => min (chunkEnd + (ic.lookahead : Rat)) (max (lim : Rat) chunkEnd)
    let need : Rat := reach - h.alloc.getD i 0
    if need > 0 then
      let (ok, ic') ← grow job.tid gp need (some ic)
      ic := ic'.getD ic
      if !ok then
        -- a grower that preempted itself ends the running loop: requeued, or a pending resident
        -- whose own preemption cleared its job (engine.py: `s.job is not job`)
        let s' ← thread job.tid
        let requeued := match s'.status with
          | .queued _ => true
          | _ => false
        if requeued || (job.pending && s'.job.isNone) then ic := { ic with stopped := true }
        return ic
    let s ← thread job.tid
    let some k := holdIndex s gp | specError s!"internal: resident {job.tid.text} lost its hold"
    let h := s.holds.getD k default
    let pos := h.position.getD i 0
    posBefore := some pos
    let h := { h with position := h.position.set i (pos + (tokens : Rat)), advanced := h.advanced.set i true }
    setSession { s with holds := s.holds.set k h }
    if (← pool gp).content.isSome && identifies job then
      -- the blocks these tokens fill are identified as they are scheduled (vLLM's
      -- cache_blocks(request, num_computed + num_new); docs/content.md §3)
      -- a speculative step's drafts are not verified yet (§7.3); under lag 1 not past the
      -- outputs still in flight (docs/async.md §8 item 3)
      let lagged := match (← stageDecl ic.engine).kind with
        | .step sd => sd.lag == 1
        | _ => false
      let upto := if lagged && job.drafts > 0 && job.mode == "decode" then knownUpto s pos
                  else verifiedUpto job pos tokens
      ContentPool.identify gp (h.contentOf i) (h.blocksOf i).2 upto
  ic := { ic with assign := ic.assign.push { serial := job.tid, mode := job.mode, tokens, posBefore,
                                              pending := job.pending } }
  noteForming ic
  match ic.left with
  | .inf => pure ()
  | .n l =>
    ic := { ic with left := .n (l - tokens - ic.slots) }
    if l - tokens - ic.slots ≤ ic.slots then ic := { ic with stopped := true }
  return ic

/-- engine.py `serve_running`: serve every resident once, in serving order, while budget is left. -/
partial def serveRunning (ic : IterCtx) (order : Order) (only : Option Expr) (cap : Tok)
    (loc : Option Loc := none) : M IterCtx := do
  if ic.stopped then return ic
  match (← nextUnserved ic (some order) loc) with
  | none => return ic
  | some job =>
    let ic ← serve ic job only cap loc
    serveRunning ic order only cap loc

/-- engine.py `admit_one`: the first admitted pool with a head; admit it if it fits, run it. A
head rejected because it can never fit has left its queue: the next head is tried in its place,
as if it had not been there. `only` (from `admit waiting only (e)`): a head for which e is 0
is not tried and stops admission like a head that does not fit (head of line). A head whose
admission consumes a prefix from a `spill` tier is admitted and waits on the link (`admit` ends
with `loadBack`): `runSession` returns at once and the head is no resident until its load ends
(docs/language.md §11.8.1 "Inside an engine's admission"). -/
def admitOne (ic : IterCtx) (only : Option Expr := none) (loc : Option Loc := none) : M Bool := do
  for p in (← admittedPools ic.engine) do
    repeat
      match (← selectHead p) with
      | none => break
      | some head =>
        if let some o := only then
          let env : EnvM := { session := some head.serial, engine := some ic.engine, ictx := some ic, loc,
                              what := some s!"engine {← stageName ic.engine}: `admit waiting only`" }
          if !Value.nz (← evaluate env o) then return false   -- excluded head: head-of-line
        match (← tryAdmit head.serial (some ic)) with
        | .rejected => pure ()
        | .blocked => return false   -- head-of-line: admission stops for this iteration
        | .admitted =>
          modify fun st => { st with fresh := st.fresh ++ [head.serial] }
          -- before the session runs on (engine.py): what it reads includes this admission
          let st ← stage ic.engine
          let now := (← getCfg).now
          setStage ic.engine { st with est := st.est.map (estimateAdmission · head.joined now) }
          runSession head.serial
          return true
  return false

/-- Serve the residents not yet served (after an admission), in admission order. -/
partial def serveUnserved (ic : IterCtx) (cap : Tok) : M IterCtx := do
  if ic.stopped then return ic
  match (← nextUnserved ic none) with
  | none => return ic
  | some job =>
    let ic ← serve ic job none cap
    serveUnserved ic cap

/-- engine.py `admit_waiting`: while budget is left and nothing was preempted, admit one and
serve it. -/
partial def admitWaiting (ic : IterCtx) (only wh : Option Expr) (cap : Tok) (loc : Option Loc := none) :
    M IterCtx := do
  if ic.stopped then return ic
  -- no budget beyond the drafting slots (engine.py `ictx.left <= ictx.slots`, docs/language.md §7.3)
  let exhausted := match ic.left with
    | .inf => false
    | .n l => l ≤ ic.slots
  if exhausted || ic.preempted > 0 || ic.noAdmit then return ic
  if let some w := wh then
    let c ← evaluate { engine := some ic.engine, ictx := some ic, loc } w
    if !(← truthAt c "an admit while guard" loc) then return ic
  if !(← admitOne ic only loc) then return ic
  let ic := { ic with admitted := ic.admitted + 1 }
  let ic ← serveUnserved ic cap
  admitWaiting ic only wh cap loc

/-- The first resident prefill not served yet and not stalled in a growth. -/
def firstPrefill (ic : IterCtx) : M (Option Job) := do
  for j in (← stage ic.engine).jobs do
    if j.mode != "decode" && !ic.served.contains j.tid then
      match (← thread j.tid).status with
      | .growing _ => pure ()
      | _ => return some j
  return none

/-- The first resident decode not served yet, read from the residents as they stand now. -/
def firstDecode (ic : IterCtx) : M (Option Job) := do
  return (← stage ic.engine).jobs.find? fun j => j.mode == "decode" && !ic.served.contains j.tid

/-- The decode part of engine.py `exclusive_prefill` (serq_spec abf86fe): serve the first
unserved decode of the residents as they stand after the previous one was served, not of a
snapshot — an earlier decode's growth may preempt a later one, which then is no resident and is
not served. Ends because every `serve` adds its job to `served`. -/
partial def serveDecodes (ic : IterCtx) (cap : Tok) : M IterCtx := do
  if ic.stopped then return ic
  match (← firstDecode ic) with
  | none => return ic
  | some j => serveDecodes (← serve ic j none cap) cap

/-- engine.py `exclusive_prefill`: a resident prefill runs alone (decodes stall); otherwise the
decodes are chosen tentatively and a waiting request that fits with the full budget replaces
them and takes the whole budget. After this statement nothing more is admitted. -/
def exclusivePrefill (ic : IterCtx) (cap : Tok) : M IterCtx := do
  let mut ic := { ic with noAdmit := true }
  let mut prefill ← firstPrefill ic
  let hasLeft := match ic.left with
    | .inf => true
    | .n l => decide (l > 0)
  if prefill.isNone && hasLeft && ic.preempted == 0 then
    if (← admitOne ic) then
      ic := { ic with admitted := ic.admitted + 1 }
      prefill ← firstPrefill ic
  if let some j := prefill then
    ic ← serve ic j none cap
    return { ic with stopped := true }
  serveDecodes ic cap

/-- engine.py `run_schedule`; `base` is the pre-order index of the first statement. -/
partial def runSchedule (ic : IterCtx) (stmts : List Sched) (base : Nat) : M IterCtx := do
  let mut ic := ic
  let mut idx := base
  for s in stmts do
    if ic.stopped then return ic
    let cap : Tok := ((ic.each[idx]?).getD none).getD .inf
    -- engine.py reads each statement's expressions at its position (`s.get("at")`)
    let loc ← schedLoc ic.engine idx
    match s with
    | .advance only order _ => ic ← serveRunning ic order only cap loc
    | .admit only wh _ => ic ← admitWaiting ic only wh cap loc
    | .set reg e =>
      let v ← evaluate { engine := some ic.engine, ictx := some ic, loc } e
      let st ← stage ic.engine
      setStage ic.engine { st with registers := st.registers.set reg v }
    | .branch c t el =>
      let cv ← evaluate { engine := some ic.engine, ictx := some ic, loc } c
      if (← truthAt cv "a schedule branch guard" loc) then
        ic ← runSchedule ic t (idx + 1)
      else
        ic ← runSchedule ic el (idx + 1 + (t.map schedSize).foldl (· + ·) 0)
    | .exclusivePrefill _ => ic ← exclusivePrefill ic cap
    idx := idx + schedSize s
  return ic

/-- engine.py `start_iteration`: form the batch; start it if it has tokens or preempted.

K's `iteration { … }` block of a step stage (docs/language.md §16) reaches this mirror as the
leading `.set`/`.branch` statements of `sd.schedule`: the front-end writes it so, and nothing
here knows the spelling. They run after `budgetMoment` and before any serve, and
`registersBefore` undoes them when the attempt forms no iteration.
Conjecture (not proved here): for a schedule `.set r e :: rest` whose attempt forms an
iteration, `registers[r]` after `startIteration` is `e` evaluated on the state after
`budgetMoment` (no earlier statement can change what `e` reads), unless `rest` sets `r` again. -/
def startIteration (e : Nat) : M Bool := do
  let st ← stage e
  if st.iteration.isSome then return false
  if !(← hasWork e) then return false
  let d ← stageDecl e
  let .step sd := d.kind | specError s!"start_iteration on a non-engine stage {d.name}"
  let registersBefore := st.registers
  let ic ← budgetMoment { engine := e }
  -- engine.py: `st.forming = ictx` while the schedule runs (after the budget moment), then None
  modify fun st => { st with fresh := [] }
  noteForming ic
  let ic ← runSchedule ic sd.schedule 0
  modify fun st => { st with fresh := [], forming := none }
  let lagged := sd.lag == 1
  -- the outputs in flight are processed after this schedule (docs/async.md §8 item 2)
  let settled ← if lagged then settleOutcomes e else pure false
  if ic.assign.isEmpty && ic.preempted == 0 then
    let st ← stage e
    setStage e { st with registers := registersBefore }
    -- vLLM's empty call processes the output at once (docs/async.md §3 item 4), and the
    -- engine is tried again when it settled outcomes (§8 item 6)
    if lagged then makeDue e (← getCfg).now settled
    return false
  -- engine.py: read at the position of `execute` (irfile.py `field_at(spec, "cost")`)
  let costAt := d.posOf "cost"
  let env : EnvM := { engine := some e, ictx := some ic, loc := costAt, what := some s!"engine {d.name}: execute" }
  let cost ← evaluate env sd.cost
  -- the batch is formed: iteration claims read what `execute` reads (claims.py)
  checkIteration e env
  let tokens := sumNat (ic.assign.toList.map (·.tokens))
  -- serq/exact.py `iteration_cost_out_of_range`, in engine.py's words (the value as its wire text here)
  let costMsg := s!"engine {d.name}: execute: iteration cost {cost.toWire} is not a finite value >= 0; it is the iteration's time: keep the expression (or the inputs it reads) finite and >= 0 (e.g. max(0, …))"
  let c ← match cost with
    | .fin q =>
      if q < 0 then specError costMsg costAt else pure q
    | _ => specError costMsg costAt
  if decide (tokens > 0) && c == 0 then
    specError s!"engine {d.name}: execute: an iteration with {tokens} tokens costs 0" costAt
  let now := (← getCfg).now
  -- the iteration is formed: its cycle opens (stages.py `estimate_iteration`)
  let st ← stage e
  setStage e { st with est := st.est.map (estimateIteration · now c) }
  -- scheduled before iter_end: the ends are handled first (docs/async.md §3 item 4)
  if lagged then makeDue e (now + c)
  let (cfg, ev) ← liftRes (scheduleEvent (← getCfg) (now + c) "iter_end" (.stage e))
  setCfg cfg
  let st ← stage e
  setStage e { st with iteration := some { «end» := ev.time, seq := ev.seq, assign := ic.assign.toList } }
  let assignJ := ic.assign.toList.map fun a => CJ.arr [a.serial.toJson, .str a.mode, .nat a.tokens]
  modifyRec fun r => { r with iterations := r.iterations.push (.obj [
    ("stage", .str d.name), ("start", ratJ now), ("end", ratJ ev.time), ("assign", .arr assignJ),
    ("preempted", .nat ic.preempted), ("admitted", .nat ic.admitted)]) }
  return true

/-- engine.py `verified`: after a step of a run with drafts, the work it did and its rejected
drafts. A decode accepts the turn's count at its output number (the count's length minus the
outputs left), capped by the drafts scheduled; a prefill's drafts past its work are placeholders,
none accepted (docs/language.md §7.3). Without drafts: all its tokens, none rejected. -/
def verified (job : Job) (a : Assign) : M (Nat × Nat) := do
  if job.drafts == 0 then return (a.tokens, 0)
  -- the turn's counts, so a branch's request reads its session's (docs/language.md §11.13)
  let counts := (← session job.serial).accept.getD []
  let left := tokensLeft job
  let (done, drafts, accepted) :=
    if job.mode == "decode" then
      let acc := if left ≤ counts.length && left > 0 then min (counts.getD (counts.length - left) 0) (a.tokens - 1) else 0
      (min (1 + acc) left, a.tokens - 1, acc)
    else
      let d := min a.tokens left
      (d, a.tokens - d, 0)
  return (done, drafts - accepted)

/-- engine.py `iteration_end` (no lag): the rejected drafts give their positions back at once. -/
def giveBack (job : Job) (rejected : Nat) : M Unit := do
  let s ← thread job.tid
  if let some gp := job.growing then
    if let some k := holdIndex s gp then
      let h := s.holds.getD k default
      let i := h.slot gp
      let h := { h with position := h.position.set i (h.position.getD i 0 - (rejected : Rat)) }
      setSession { s with holds := s.holds.set k h }

/-- engine.py `iteration_end`: assigned jobs lose their tokens; finished ones leave in
assignment order and their sessions become ready. -/
def iterationEnd (e : Nat) : M Unit := do
  let st ← stage e
  let some it := st.iteration | specError s!"internal: iteration end of {e} with no iteration"
  -- a pending resident's EOS token is discarded: its end was applied before this IterEnd
  let assign := it.assign.filter (!·.pending)
  let lagged := match (← stageDecl e).kind with
    | .step sd => sd.lag == 1
    | _ => false
  let mut jobs := st.jobs
  for a in assign do
    let some j := jobs.find? (·.tid == a.serial) | continue
    -- a run with drafts did the work `verified` says (§7.3)
    let (done, rejected) ← verified j a
    if lagged && j.drafts > 0 then
      -- the next schedule does not see this outcome yet (docs/async.md §8 item 1); one that
      -- ended the run through accepted drafts takes one more step (§8 item 5)
      if let some gp := j.growing then
        deferOutcome e j.tid gp a.tokens done rejected (j.mode == "decode")
          (j.mode == "decode" && tokensLeft j > 1 && done == tokensLeft j)
    else if rejected > 0 then
      giveBack j rejected
    jobs := jobs.map fun x => if x.tid == a.serial then { x with left := .tokens (tokensLeft x - done) } else x
  setStage e { (← stage e) with iteration := none, jobs }
  for j in jobs do syncJob e j.tid
  let name ← stageName e
  for a in assign do
    let st ← stage e
    if let some job := st.jobs.find? (·.tid == a.serial) then
      if tokensLeft job == 0 then
        setStage e { st with jobs := st.jobs.filter (·.tid != a.serial) }
        modifyThread job.tid fun s => { s with job := none }
        modifyRec fun r => { r with finished := r.finished.push (.arr [.str name, job.tid.toJson]) }
        if job.mode == "prefill" then firstToken job.tid
        let s ← thread job.tid
        if s.status == .stage e then
          setSession { s with status := .ready }
          pushReady job.tid

end SerqLang

/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Holds

/-!
# Non-step stages (python/serq_spec/stages.py) and engine residents (stages.py `add_resident`)

`fifo(c)`, `delay`, and `ps(φ)` with an exact virtual clock; `present`, `busy`, `work`,
`ps_rate`, `advance_virtual_clock` are in `SerqLang.Eval` (observables read them).
-/

namespace SerqLang

/-- Set or add `serial ↦ t` in an insertion-ordered association list (a Python dict keyed by
thread). -/
def dictSet (serial : Tid) (t : Rat) (d : List (Tid × Rat)) : List (Tid × Rat) :=
  if d.any (·.1 == serial) then d.map (fun x => if x.1 == serial then (serial, t) else x)
  else d ++ [(serial, t)]

/-- Remove a key from an insertion-ordered association list. -/
def dictDel (serial : Tid) (d : List (Tid × Rat)) : List (Tid × Rat) := d.filter (·.1 != serial)

/-- The jobs without the first one of thread `t`. -/
def removeJobOf (t : Tid) (jobs : List Job) : List Job :=
  jobs.eraseIdx ((jobs.findIdx? (·.tid == t)).getD jobs.length)

/-- A job's work as a rational time (non-step stages). -/
def jobTime (j : Job) : Rat := workLeft j

/-! ## The online estimates (stages.py; docs/spec.md "Online estimates") -/

/-- stages.py `EWMA_WEIGHT`. -/
def ewmaWeight : Rat := 1 / 100

/-- stages.py `ewma`: the first sample whole, then mean + (x − mean)/100. -/
def ewma (mean : Option Rat) (x : Rat) : Rat :=
  match mean with
  | none => x
  | some m => m + ewmaWeight * (x - m)

/-- stages.py `estimate_start`: a job joins the stage: a gap sample (from the latest start, if
any) and a service sample, its work. -/
def estimateStart (e : Estimates) (now : Rat) (job : Job) : Estimates :=
  let gap := match e.last with
    | some l => some (ewma e.gap (now - l))
    | none => e.gap
  { e with gap, last := some now, service := some (ewma e.service (jobTime job)) }

/-- stages.py `estimate_admission`: an engine admits a request: a gap sample (from the latest
admission, if any) and a wait sample, the time since the request last joined the queue. -/
def estimateAdmission (e : Estimates) (joined now : Rat) : Estimates :=
  let gap := match e.last with
    | some l => some (ewma e.gap (now - l))
    | none => e.gap
  { e with gap, last := some now, wait := some (ewma e.wait (now - joined)) }

/-- stages.py `estimate_iteration`: an engine starts an iteration of duration `cost`; the
previous iteration's cycle is complete: a cycle sample (its length, idle time included) and a
busy sample (the previous iteration's duration). The first iteration opens the first cycle. -/
def estimateIteration (e : Estimates) (now cost : Rat) : Estimates :=
  match e.engine with
  | none => e
  | some c =>
    let c := match c.started, c.cost with
      | some s, some k => { c with cycle := some (ewma c.cycle (now - s)), busy := some (ewma c.busy k) }
      | _, _ => c
    { e with engine := some { c with started := some now, cost := some cost } }

/-- stages.py `estimate_service`: a job enters service: a wait sample. -/
def estimateService (e : Estimates) (joined now : Rat) : Estimates :=
  { e with wait := some (ewma e.wait (now - joined)) }

/-- stages.py `add_resident`: residents ordered by their owner's latest admission number. -/
def addResident (e : Nat) (job : Job) : M Unit := do
  let st ← stage e
  -- scan from the end past the residents admitted later, insert there (engine.py)
  let rev := st.jobs.reverse
  let later := rev.takeWhile (fun j => decide (j.admission > job.admission))
  let earlier := (rev.drop later.length).reverse
  setStage e { st with jobs := earlier ++ [job] ++ later.reverse }

/-- Make the thread's `job` equal to its copy on the stage (Python shares one `Job` object
between the stage and `Session.job`; SerqLang keeps two equal copies). A spill copy
(`Tid.copy`) is no thread's job: nothing to sync (`rescheduleShared` meets one on a link that
flows cross, docs/language.md §11.8.1). -/
def syncJob (e : Nat) (t : Tid) : M Unit := do
  if let .copy _ := t then return
  let st ← stage e
  match st.jobs.find? (·.tid == t), st.waiting.find? (·.tid == t) with
  | some j, _ => modifyThread t fun s => { s with job := some j }
  | none, some j => modifyThread t fun s => { s with job := some j }
  | none, none => pure ()

/-- stages.py `begin_fifo_service`. -/
def beginFifoService (s : Nat) (job : Job) : M Unit := do
  let now := (← getCfg).now
  let fin := now + jobTime job
  let st ← stage s
  let est := st.est.map fun e =>
    estimateService { e with joined := dictDel job.tid e.joined } ((List.lookup job.tid e.joined).getD now) now
  setStage s { st with jobs := st.jobs ++ [job], finish := dictSet job.tid fin st.finish, est }
  let (cfg, _) ← liftRes (scheduleEvent (← getCfg) fin "finish" (.stageSerial s job.tid))
  setCfg cfg

/-! ## Stages a flow crosses (docs/language.md §11.14)

A job there is `shared`: its work left at `since` and its `rate`. Python keeps one `Job` object at
all the stages of a flow and in its thread; SerqLang keeps equal copies, updated together. -/

/-- stages.py `check_flow_stages`: the stages of a run over several stages are distinct ps stages
a flow may cross, whatever its work. -/
def checkFlowStages (stages : List Nat) : M Unit := do
  let prog ← getProg
  if stages.any (fun x => (stages.filter (· == x)).length > 1) then
    let names := ", ".intercalate (← stages.mapM stageName)
    specError s!"a run over several stages names one stage twice ({names}); a flow crosses distinct stages"
  for x in stages do
    if !prog.ir.sharedStages.contains x then
      specError s!"stage {← stageName x} is not a ps stage a flow may cross"

/-- stages.py `start_shared`: the job joins each of its stages with its whole work and no rate
yet; each stage counts a start and takes the estimates' samples (wait 0). -/
def startShared (job : Job) : M Unit := do
  let stages := job.stagesOf
  checkFlowStages stages
  let now := (← getCfg).now
  let first ← stage job.stage
  -- a flow's place in ties: its first stage's start order
  let job := { job with shared := true, rate := 0, since := now, startOrder := first.nextStart }
  for x in stages do
    let st ← stage x
    let est := st.est.map fun e => estimateService (estimateStart e now job) now now
    setStage x { st with nextStart := st.nextStart + 1, est, jobs := st.jobs ++ [job], dirty := true }
  -- a spill copy on a link that flows cross is no thread's job (docs/language.md §11.8.1)
  if job.copy.isNone then modifyThread job.tid fun s => { s with job := some job }

/-- stages.py `leave_shared`: the job leaves every stage it is present at. -/
def leaveShared (job : Job) : M Unit := do
  for x in job.stagesOf do
    let st ← stage x
    setStage x { st with jobs := removeJobOf job.tid st.jobs, dirty := true }

/-- stages.py `start_job`: a job with positive work joins its stage, or a flow all its stages. -/
def startJob (job : Job) : M Unit := do
  if job.stages.isSome || (← getProg).ir.sharedStages.contains job.stage then
    startShared job
    return
  let s := job.stage
  let st ← stage s
  let d ← stageDecl s
  let job := { job with startOrder := st.nextStart }
  let now := (← getCfg).now
  let st := { st with nextStart := st.nextStart + 1, est := st.est.map (estimateStart · now job) }
  setStage s st
  match d.kind with
  | .delay =>
    let st := { st with est := st.est.map (estimateService · now now) }
    let fin := now + jobTime job
    setStage s { st with jobs := st.jobs ++ [job], finish := dictSet job.tid fin st.finish }
    let (cfg, _) ← liftRes (scheduleEvent (← getCfg) fin "finish" (.stageSerial s job.tid))
    setCfg cfg
  | .fifo servers =>
    let st := { st with est := st.est.map fun e => { e with joined := dictSet job.tid now e.joined } }
    setStage s st
    if st.jobs.length < servers then beginFifoService s job
    else setStage s { st with waiting := st.waiting ++ [job] }
  | .ps _ =>
    setStage s { st with est := st.est.map (estimateService · now now) }
    advanceVirtualClock s
    let st ← stage s
    setStage s { st with jobs := st.jobs ++ [job], tags := dictSet job.tid (st.v + jobTime job) st.tags,
                         dirty := true }
  | .step _ => specError s!"start_job on a {st.kind} stage"

/-- stages.py `start_copies`: the copies of spilled chunks (`makeRoom`), in order: each with
positive work is a job of no thread on its link, named `spill.n` (docs/language.md §11.8.1);
zero work takes no time. -/
def startCopies (copies : List (Nat × Value)) : M Unit := do
  for (stg, w) in copies do
    if Value.nz w then
      let n := (← getCfg).counters.nextCopy
      modifyCfg fun c => { c with counters := { c.counters with nextCopy := n + 1 } }
      startJob { serial := 0, stage := stg, mode := "plain", left := .value w, growing := none,
                 admission := -1, copy := some n }

/-- stages.py `finish_job`: the job leaves its stage and its thread (a session or a branch,
docs/language.md §11.13) becomes ready. -/
def finishJob (s : Nat) (serial : Tid) : M Unit := do
  let st ← stage s
  let name ← stageName s
  if (st.jobs.find? (·.tid == serial)).isNone then
    specError s!"finish of a job that is not on stage {name}"
  if (← getProg).ir.sharedStages.contains s then
    -- docs/language.md §11.14: the job leaves all its stages, each records its end
    let job := (st.jobs.find? (·.tid == serial)).getD default
    leaveShared job
    for x in job.stagesOf do
      let n ← stageName x
      modifyRec fun r => { r with finished := r.finished.push (.arr [.str n, serial.toJson]) }
    -- a spill copy on a link that flows cross: no thread waits for it (docs/language.md §11.8.1)
    if let .copy _ := serial then return
    let sess ← thread serial
    if sess.status == .stage job.stage then
      setSession { sess with job := none, status := .ready }
      modifyCfg fun c => { c with ready := c.ready ++ [serial] }
    else
      setSession { sess with job := none }
    return
  if st.kind == "ps" then
    -- v is advanced to now before the job leaves (defect 1): the departure was scheduled for the
    -- moment v reaches the job's tag, so v is that tag now (its event has just been taken, so
    -- `currentRate` could not recover the rate; stages.py sets v = tag directly)
    let now := (← getCfg).now
    let tag := (List.lookup serial st.tags).getD st.v
    let v := if !st.jobs.isEmpty && decide (now > st.tLast) then tag else st.v
    let v := if v < tag then tag else v
    setStage s { st with tags := dictDel serial st.tags, tLast := now,
                         jobs := removeJobOf serial st.jobs, v, dirty := true }
  else
    let st := { st with jobs := removeJobOf serial st.jobs, finish := dictDel serial st.finish }
    setStage s st
    if st.kind == "fifo" then
      match st.waiting with
      | [] => pure ()
      | w :: rest =>
        setStage s { st with waiting := rest }
        beginFifoService s w
  modifyRec fun r => { r with finished := r.finished.push (.arr [.str name, serial.toJson]) }
  if let .copy _ := serial then return   -- a spill copy: no thread waits for it
  let sess ← thread serial
  if sess.status == .stage s then
    setSession { sess with job := none, status := .ready }
    modifyCfg fun c => { c with ready := c.ready ++ [serial] }
  else
    setSession { sess with job := none }

/-- Remove the first job of thread `serial` (Python's `list.remove`). -/
def removeJob (serial : Tid) (jobs : List Job) : List Job := removeJobOf serial jobs

/-- stages.py `withdraw_job`: a preempted holder leaves its fifo or ps stage (§11.7); its work is
dropped. fifo: a waiting job leaves the queue; a job in service leaves it, its `finish` is
withdrawn and the server takes the next waiting job. ps: the clock is advanced to now with the
rate in effect, the job and its tag go, and the stage reschedules at the end of the step. -/
def withdrawJob (job : Job) : M Unit := do
  let s := job.stage
  let st ← stage s
  if (← getProg).ir.sharedStages.contains s then   -- a flow leaves every stage it crosses (§11.14)
    leaveShared job
  else if st.kind == "fifo" then
    if st.waiting.any (·.tid == job.tid) then
      -- it never entered service: no wait sample
      setStage s { st with waiting := removeJob job.tid st.waiting,
                           est := st.est.map fun e => { e with joined := dictDel job.tid e.joined } }
    else
      let st := { st with jobs := removeJob job.tid st.jobs, finish := dictDel job.tid st.finish }
      setStage s st
      modifyCfg fun c => withdrawEvent c "finish" (.stageSerial s job.tid)
      match st.waiting with
      | [] => pure ()
      | w :: rest =>
        setStage s { st with waiting := rest }
        beginFifoService s w
  else if st.kind == "ps" then
    advanceVirtualClock s
    let st ← stage s
    setStage s { st with jobs := removeJob job.tid st.jobs, tags := dictDel job.tid st.tags,
                         dirty := true }
  else specError s!"withdraw_job on a {st.kind} stage"

/-- stages.py `start_flow`: thread `th` runs one job of work `w` ≥ 0 over the distinct ps
stages `stages` (docs/language.md §11.14), the entry of every statement that runs a job over
several stages. Zero work completes at once at every stage and the thread is ready again at the
back (true); otherwise it waits on the flow (false). -/
def startFlow (th : Tid) (stages : List Nat) (w : Value) : M Bool := do
  checkFlowStages stages   -- before zero work completes (§11.14)
  if w == .fin 0 then
    for x in stages do
      let n ← stageName x
      modifyRec fun r => { r with finished := r.finished.push (.arr [.str n, th.toJson]) }
    modifyCfg fun c => { c with ready := c.ready ++ [th] }
    return true
  let s ← thread th
  let admission : Int := match s.admSeq with
    | some a => (a : Int)
    | none => -1
  let first := stages.headD 0
  let job : Job := { serial := th.owner, stage := first, mode := "plain", left := .value w, growing := none,
                     admission, branch := s.branch, stages := some stages }
  setSession { s with job := some job, status := .stage first }
  startJob job
  syncJob first th
  return false

/-- stages.py `reschedule_ps`: withdraw the stage's pending departure, schedule the next one. -/
def reschedulePs (s : Nat) : M Unit := do
  modifyCfg fun c => { c with events := c.events.filter fun e =>
    !(e.kind == "finish" && e.arg.stageOf? == some s) }
  let st ← stage s
  setStage s { st with dirty := false }
  if st.jobs.isEmpty then return
  advanceVirtualClock s
  let rate ← psRate s st.jobs.length
  let st ← stage s
  -- the least (tag, start order)
  let mut best : Option (Job × Rat) := none
  for j in st.jobs do
    let tag := (List.lookup j.tid st.tags).getD st.v
    match best with
    | none => best := some (j, tag)
    | some (b, bt) =>
      if decide (tag < bt) || (tag == bt && decide (j.startOrder < b.startOrder)) then
        best := some (j, tag)
  let some (nxt, tag) := best | return
  let delta := tag - st.v
  let delta := if delta < 0 then 0 else delta
  let now := (← getCfg).now
  let (cfg, _) ← liftRes (scheduleEvent (← getCfg) (now + delta / rate) "finish" (.stageSerial s nxt.tid))
  setCfg cfg

/-- The closure of `connectedStages`: `todo` still to visit, `seen` so far. -/
partial def connectedFrom (cfg : Config) (seen todo : List Nat) : List Nat :=
  match todo with
  | [] => seen
  | x :: rest =>
    let jobs := ((cfg.stages[x]?).map (·.jobs)).getD []
    let near := jobs.foldl (fun acc j => acc ++ j.stagesOf.filter (fun y => !seen.contains y && !acc.contains y)) []
    connectedFrom cfg (seen ++ near) (rest ++ near)

/-- stages.py `connected_stages`: the stages linked to `start` through the flows present, in
index order. -/
def connectedStages (cfg : Config) (start : List Nat) : List Nat :=
  let seen := connectedFrom cfg start start
  (List.range cfg.stages.length).filter (seen.contains ·)

/-- The maxmin fill of `shareRates`: `free` is each stage's capacity not taken by fixed jobs,
`unfixed` its jobs still rising. Every round fixes, at the least level, the jobs of each stage
whose level equals it. -/
partial def maxminFill (free : List (Nat × Rat)) (unfixed : List (Nat × List Job))
    (rates : List (Tid × Rat)) : List (Tid × Rat) :=
  let rising := unfixed.filter (fun (_, js) => !js.isEmpty)
  match rising with
  | [] => rates
  | (x0, js0) :: _ =>
    let levelOf := fun (x : Nat) (js : List Job) => (free.lookup x).getD 0 / (js.length : Rat)
    let level := rising.foldl (fun m (x, js) => if levelOf x js < m then levelOf x js else m) (levelOf x0 js0)
    let full := rising.filter (fun (x, js) => levelOf x js == level)
    let fixed := full.foldl (fun acc (_, js) => acc ++ js.filter (fun j => !acc.any (·.tid == j.tid))) []
    let rates := fixed.foldl (fun r j => dictSet j.tid level r) rates
    let free := free.map fun (x, c) =>
      (x, c - level * ((fixed.filter (fun j => j.stagesOf.contains x)).length : Rat))
    let unfixed := unfixed.map fun (x, js) => (x, js.filter (fun j => !fixed.any (·.tid == j.tid)))
    maxminFill free unfixed rates

/-- stages.py `share_rates`: the rate of every job present at the stages of `members` (stage ↦
its jobs, in stage order), given each stage's capacity C_s = φ_s(n_s). bottleneck: the least
C_s/n_s over the job's stages; maxmin: progressive filling (`maxminFill`). -/
def shareRates (policy : String) (members : List (Nat × List Job)) (capacity : List (Nat × Rat)) :
    List (Tid × Rat) :=
  if policy == "bottleneck" then
    members.foldl (fun rates (x, jobs) =>
      let share := (capacity.lookup x).getD 0 / (jobs.length : Rat)
      jobs.foldl (fun rates j =>
        match rates.lookup j.tid with
        | some r => if share < r then dictSet j.tid share rates else rates
        | none => dictSet j.tid share rates) rates) []
  else maxminFill capacity members []

/-- stages.py `reschedule_shared`: at the end of a step that changed the job set of a stage a
flow crosses, bring the jobs of the connected stages to now at their old rates, evaluate the
capacities in stage order and divide the rates again; then withdraw the one departure among all
such stages and schedule the next: the least finish time, ties to the job whose first stage comes
first, then to the earlier start there. -/
def rescheduleShared : M Unit := do
  let prog ← getProg
  let shared := prog.ir.sharedStages
  let cfg ← getCfg
  let dirty := shared.filter fun x => ((cfg.stages[x]?).map (·.dirty)).getD false
  if dirty.isEmpty then return
  let now := cfg.now
  let mut members : List (Nat × List Job) := []
  for x in connectedStages cfg dirty do
    let st ← stage x
    let jobs := st.jobs.map fun j =>
      if j.since != now then { j with left := .value (.fin (remaining now j)), since := now } else j
    setStage x { st with dirty := false, jobs }
    if !jobs.isEmpty then members := members ++ [(x, jobs)]
  let mut capacity : List (Nat × Rat) := []
  for (x, jobs) in members do
    let c ← psCapacity x jobs.length
    capacity := capacity ++ [(x, c)]
  let rates := shareRates prog.ir.share members capacity
  for (x, _) in members do
    let st ← stage x
    setStage x { st with jobs := st.jobs.map fun j => { j with rate := (rates.lookup j.tid).getD j.rate } }
  for (x, jobs) in members do
    for j in jobs do
      if j.stage == x then syncJob x j.tid
  modifyCfg fun c => { c with events := c.events.filter fun e =>
    !(e.kind == "finish" && (match e.arg.stageOf? with
      | some s => shared.contains s
      | none => false)) }
  let cfg ← getCfg
  let mut best : Option (Rat × Nat × Nat × Tid) := none
  for x in (List.range cfg.stages.length).filter (shared.contains ·) do
    for j in ((cfg.stages[x]?).map (·.jobs)).getD [] do
      if j.stage == x then   -- a flow once, at its first stage
        let left := workLeft j
        let t := j.since + (if left < 0 then 0 else left) / j.rate
        let better := match best with
          | none => true
          | some (bt, bs, bo, _) =>
            decide (t < bt) || (t == bt && (decide (j.stage < bs) || (j.stage == bs && decide (j.startOrder < bo))))
        if better then best := some (t, j.stage, j.startOrder, j.tid)
  if let some (t, s, _, tid) := best then
    let (cfg, _) ← liftRes (scheduleEvent (← getCfg) t "finish" (.stageSerial s tid))
    setCfg cfg

end SerqLang

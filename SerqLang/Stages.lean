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
between the stage and `Session.job`; SerqLang keeps two equal copies). -/
def syncJob (e : Nat) (t : Tid) : M Unit := do
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

/-- stages.py `start_job`: a job with positive work joins its stage. -/
def startJob (job : Job) : M Unit := do
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
  if st.kind == "fifo" then
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

end SerqLang

/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Engine

/-!
# One event per step (python/serq_spec/step.py) and the observable line (trace.py)

    step = pop the least (time, seq) event; now := its time; handle it; settle;
           if no other event is pending at now: start iterations of idle engines;
           reschedule the departures of ps stages whose job set changed.

`step prog w cfg` is a function: it returns the next configuration, the step's records and the
event handled, or `none` for a final configuration. `stateLine` is trace.py's `state_line`, the
docs/state.md line compared byte for byte across engines.
-/

namespace SerqLang

/-- step.py `SETTLE_ROUNDS`. -/
def SETTLE_ROUNDS : Nat := 100000

/-- Run a computation of the step monad from a configuration. -/
def runM {α : Type} (prog : Program) (w : Workload) (cfg : Config) (x : M α) : Res (α × St) :=
  match (x.run { prog, work := w }).run { cfg } with
  | .ok r => .ok r
  | .error e => .error (SpecErr.render prog.ir.files e)

/-- Schedule an event (events.py `schedule_event`) in the monad. -/
def scheduleEventM (time : Rat) (kind : String) (arg : EventArg) : M Unit := do
  let (cfg, _) ← liftRes (scheduleEvent (← getCfg) time kind arg)
  setCfg cfg

/-- step.py `after_event`: settle; start iterations when nothing else is pending now;
reschedule ps departures. -/
def afterEvent : M Unit := do
  let prog ← getProg
  let mut done := false
  for _ in [0:SETTLE_ROUNDS] do
    settle
    if !pendingAtNow (← getCfg) then
      for e in prog.engines do
        discard (startIteration e)
    if (← getCfg).ready.isEmpty then
      done := true
      break
  if !done then specError "settle did not reach a fixed point"
  let shared := (← getProg).ir.sharedStages
  for i in List.range (← getCfg).stages.length do
    let st ← stage i
    if st.kind == "ps" && st.dirty && !shared.contains i then reschedulePs i
  rescheduleShared   -- the stages flows cross, after the others (docs/language.md §11.14)

/-- step.py `initial` (step 0): warm-up event, first arrival or the closed/batch sessions, settle. -/
def initialM : M Unit := do
  let prog ← getProg
  let w ← getWork
  for i in prog.engines do
    let d ← stageDecl i
    if let .step sd := d.kind then
      let mut regs : List Value := []
      for r in sd.registers do
        regs := regs ++ [← evaluate { engine := some i, loc := r.loc,
                                      what := some s!"engine {d.name}: a register's initial value" } r.expr]
      let st ← stage i
      setStage i { st with registers := regs }
  if prog.warmup > 0 then scheduleEventM prog.warmup "warmup_end" .none
  else modifyCfg fun c => { c with warm := true }
  match prog.ir.workload.arrival with
  | .poisson _ | .renewal _ =>
    if w.arrivals.length != w.count then
      sessionsFileError s!"the sessions file has {w.count} sessions but {w.arrivals.length} arrival times"
    if w.count > 0 then scheduleEventM (w.arrivals.headD 0) "arrive" (.serial 0)
  | .closed n | .batch n =>
    let kind := match prog.ir.workload.arrival with
      | .batch _ => "batch"
      | _ => "closed"
    if kind == "batch" && w.count != n then
      sessionsFileError s!"the program spawns batch({n}) sessions but the sessions file has {w.count}"
    if !w.arrivals.isEmpty then
      sessionsFileError s!"a {kind} workload takes no arrival times, the sessions file has {w.arrivals.length}"
    for _ in [0:min n w.count] do
      discard spawn
  | .none =>
    if w.count != 0 then
      sessionsFileError s!"the program has no arrivals but the sessions file has {w.count} sessions"
  afterEvent

/-- step.py `handle`: apply one event. -/
def handle (ev : Event) : M Unit := do
  let w ← getWork
  if ev.kind == "arrive" then
    match ev.arg with
    | .serial k =>
      if k + 1 < w.count then scheduleEventM ((w.arrivals[k + 1]?).getD 0) "arrive" (.serial (k + 1))
      discard spawn
    | _ => specError "an arrive event without a serial"
  else if ev.kind == "finish" then
    match ev.arg with
    | .stageSerial s serial => finishJob s serial
    | _ => specError "a finish event without [stage, serial]"
  else if ev.kind == "iter_end" then
    match ev.arg with
    | .stage e => iterationEnd e
    | _ => specError "an iter_end event without a stage"
  else if ev.kind == "ends" then
    match ev.arg with
    | .stage e => applyEnds e
    | _ => specError "an ends event without a stage"
  else if ev.kind == "lease_end" then
    match ev.arg with
    | .poolSerial p serial => endLease serial p
    | _ => specError "a lease_end event without [pool, thread]"
  else if ev.kind == "warmup_end" then modifyCfg fun c => { c with warm := true }
  else specError s!"unknown event kind {ev.kind}"

/-- step.py `step_in_place`: handle the next event; `none` if there is none or it is past the
horizon. -/
def stepInPlace : M (Option Event) := do
  let prog ← getProg
  let cfg ← getCfg
  match cfg.events with
  | [] => return none
  | ev :: rest =>
    if Value.lt prog.horizon (.fin ev.time) then return none
    setCfg { cfg with events := rest, now := ev.time }
    modify fun st => { st with records := {} }
    handle ev
    afterEvent
    modifyCfg fun c => { c with steps := c.steps + 1 }
    return some ev

/-- step.py `initial`: the configuration after step 0 and its records. -/
def initial (prog : Program) (w : Workload) : Res (Config × Records) := do
  let (_, st) ← runM prog w (Config.new prog) initialM
  return (st.cfg, st.records)

/-- step.py `step`: `Config → Config × record`; a final configuration gives `none`. -/
def step (prog : Program) (w : Workload) (cfg : Config) : Res (Option (Config × Records × Event)) := do
  let (ev?, st) ← runM prog w cfg stepInPlace
  match ev? with
  | none => return none
  | some ev => return some (st.cfg, st.records, ev)

/-! ## The observable line (trace.py) -/

/-- trace.py `event_json`. -/
def eventJson (prog : Program) (ev : Option Event) : CJ :=
  match ev with
  | none => .null
  | some e =>
    let name (i : Nat) : String := ((prog.ir.stages[i]?).map (·.name)).getD (toString i)
    let arg : CJ := match e.arg with
      | .stageSerial s n => .arr [.str (name s), n.toJson]
      | .stage s => .str (name s)
      | .serial n => .nat n
      -- the thread (a `Tid` since the thread keys: a session's serial, or a branch's "s.k")
      | .poolSerial p n => .arr [.str (((prog.ir.pools[p]?).map (·.name)).getD (toString p)), n.toJson]
      | .none => .null
    .obj [("kind", .str e.kind), ("time", ratJ e.time), ("seq", .nat e.seq), ("arg", arg)]

/-- trace.py `status_json`. -/
def statusJson (prog : Program) (s : Session) : String :=
  let pname (p : Nat) : String := ((prog.ir.pools[p]?).map (·.name)).getD (toString p)
  let sname (i : Nat) : String := ((prog.ir.stages[i]?).map (·.name)).getD (toString i)
  match s.status with
  | .ready => "ready"
  | .ended => "ended"
  | .queued p => s!"queued:{pname p}"
  | .growing p => s!"growing:{pname p}"
  | .stage i =>
    match s.job.bind (·.stages) with   -- a flow: all its stages (docs/language.md §11.14)
    | some xs => "stage:" ++ ",".intercalate (xs.map sname)
    | none => s!"stage:{sname i}"
  | .ending i => s!"ending:{sname i}"   -- docs/async.md §5
  | .joining => "joining"               -- docs/language.md §11.13

/-- Entries in `lru` order: by `(last, rel)`. -/
def sortEntries (es : List Entry) : List Entry :=
  let rec ins (e : Entry) : List Entry → List Entry
    | [] => [e]
    | x :: xs => if Pool.before e x then e :: x :: xs else x :: ins e xs
  es.foldl (fun acc e => ins e acc) []

/-- Insert into a list sorted by its string key. -/
def insertByKey (kv : String × CJ) : List (String × CJ) → List (String × CJ)
  | [] => [kv]
  | x :: xs => if decide (kv.1 < x.1) then kv :: x :: xs else x :: insertByKey kv xs

/-- trace.py `content_json`: the keys of a `share content` pool (docs/content.md §5) — the free
queue, every block referenced or identified, the identity map sorted by the canonical JSON of the
identity, and every holder's block list (a session holding the pool in nested holds is listed
once per hold, outermost first). -/
def contentJson (cfg : Config) (p : Nat) (st : PoolState) (cs : Content.CState) : List (String × CJ) :=
  let blocks := (((List.range cs.refs.length).zip (cs.refs.zip cs.ident)).filter
      (fun (_, r, x) => decide (r > 0) || x.isSome)).map
      (fun (b, r, x) => CJ.arr [.nat b, .nat r, CJ.opt Content.Ident.toJson x])
  let idmap := ((cs.idmap.map fun (k, v) => ((k.toJson).render, CJ.arr [k.toJson, CJ.nats v])).foldl
      (fun acc kv => insertByKey kv acc) []).map (·.2)
  let held := (st.holders.foldl (fun (acc : List CJ × List (Tid × Nat)) serial =>
      let k := (List.lookup serial acc.2).getD 0
      let seen := (serial, k + 1) :: acc.2.filter (·.1 != serial)
      let holds := ((cfg.threadOf? serial).getD default).holds.filter (·.pools.contains p)
      let bl := match holds[k]? with
        | some h => (h.blocksOf (h.slot p)).2
        | none => []
      (acc.1 ++ [CJ.arr [serial.toJson, CJ.nats bl]], seen)) ([], [])).1
  [("free_queue", CJ.nats cs.free), ("blocks", .arr blocks), ("idmap", .arr idmap), ("held", .arr held)]

/-- trace.py `pool_json` (`rejected` present only when > 0, docs/state.md POOL; the content keys
on a `share content` pool). -/
def poolJson (prog : Program) (cfg : Config) (p : Nat) (st : PoolState) : CJ :=
  .obj ([("name", .str (((prog.ir.pools[p]?).map (·.name)).getD "")), ("used", CJ.amt st.used),
         ("cached", CJ.amt (st.cached + st.contentCached)), ("queue", .arr (st.queue.map (·.serial.toJson))),
         ("holders", .arr (st.holders.map Tid.toJson)), ("growers", .arr (st.growers.map Tid.toJson)),
         ("entries", .arr ((sortEntries st.entries).map Entry.toJson)),
         ("preemptions", .nat st.preemptions)]
        ++ (if st.rejected > 0 then [("rejected", .nat st.rejected)] else [])
        -- trace.py: on a pool with `spill` (docs/language.md §11.8.1)
        ++ (if ((prog.ir.pools[p]?).bind (·.spill)).isSome then [("spills", .nat st.spills)] else [])
        -- trace.py: blocks loaded back from a content tier, on a content pool with `spill` (docs/content.md §6)
        ++ (if ((prog.ir.pools[p]?).bind (·.spill)).isSome && st.content.isSome
            then [("tier_hits", .nat st.tierHits)] else [])
        -- trace.py: present while a lease is held, `[serial, allocation, ends_at | null]`
        ++ (let mine := cfg.leases.filter (·.pool == p)
            if mine.isEmpty then []
            else [("leases", .arr (mine.map fun l =>
                    CJ.arr [l.serial.toJson, CJ.amt (l.part.alloc.getD 0 0), CJ.opt ratJ l.endsAt]))])
        ++ (match st.content with
            | some cs => contentJson cfg p st cs
            | none => []))

/-- trace.py `ps_line_rate`: the per-job rate of ps stage `i` since its clock was last
advanced, for the line only (printing a line never changes the state). A capacity that cannot
change the configuration (`Expr.readsState`) is evaluated; otherwise the rate is recovered from
the pending departure, and is 0 when none is pending (the clock is shown where it stands). -/
def psLineRate (i : Nat) : M Rat := do
  let d ← stageDecl i
  let st ← stage i
  let capacity := match d.kind with
    | .ps c => c
    | _ => Expr.num Value.one
  if !capacity.readsState then return (← psRate i st.jobs.length)
  let pending := (← getCfg).events.find? fun ev => ev.kind == "finish" && ev.arg.stageOf? == some i
  match pending with
  | some ev =>
    if ev.time ≤ st.tLast then return 0
    match ev.arg with
    | .stageSerial _ serial => return ((List.lookup serial st.tags).getD st.v - st.v) / (ev.time - st.tLast)
    | _ => return 0
  | none => return 0

/-- trace.py `stage_json` (a `ps` stage's remaining work with its clock advanced to now; the
line is computed on a copy of the configuration, see `stateLine`). -/
def stageJson (i : Nat) : M CJ := do
  let cfg ← getCfg
  let d ← stageDecl i
  let st ← stage i
  -- the online estimates, only on a stage whose estimates are read (trace.py `stage_json`)
  let estKey : List (String × CJ) := match st.est with
    | none => []
    | some e => [("est", .arr (match e.engine with
        | some c => [CJ.opt ratJ e.last, CJ.opt ratJ e.gap, CJ.opt ratJ e.wait, CJ.opt ratJ c.started,
                     CJ.opt ratJ c.cost, CJ.opt ratJ c.cycle, CJ.opt ratJ c.busy]
        | none => [CJ.opt ratJ e.last, CJ.opt ratJ e.gap, CJ.opt ratJ e.service, CJ.opt ratJ e.wait]))]
  let base : List (String × CJ) := [("name", .str d.name), ("kind", .str st.kind)]
  match d.kind with
  | .step sd =>
    let mut res : List CJ := []
    for j in st.jobs do
      let mut pos : CJ := .null
      let mut alloc : CJ := .null
      if let some g := j.growing then
        let s ← thread j.tid
        if let some h := holdOf s g then
          let k := h.slot g
          pos := CJ.amt (h.position.getD k 0)
          alloc := CJ.amt (h.alloc.getD k 0)
      res := res ++ [.obj ([("serial", j.tid.toJson), ("mode", .str j.mode), ("remaining", j.left.toJson),
                            ("admission", .int j.admission), ("position", pos), ("allocation", alloc)] ++
                           (if j.pending then [("pending", .bool true)] else []))]
    let it : CJ := match st.iteration with
      | none => .null
      | some it => .obj [("end", ratJ it.«end»), ("seq", .nat it.seq),
                         ("assign", .arr (it.assign.map fun a => CJ.arr [a.serial.toJson, .nat a.tokens]))]
    -- docs/async.md §5: the pending and due lists, only on a `lag 1` engine
    let lagKeys : List (String × CJ) :=
      if sd.lag == 1 then [("pending", .arr (st.pending.map Tid.toJson)), ("due", .arr (st.due.map Tid.toJson))] else []
    -- an engine's estimates too (trace.py adds `est` after every kind of stage)
    return .obj (base ++ [("residents", .arr res), ("iteration", it),
                          ("registers", .arr (st.registers.map CJ.val))] ++ lagKeys ++ estKey)
  | .fifo _ =>
    return .obj (base ++ [
      ("waiting", .arr (st.waiting.map fun j => CJ.arr [j.tid.toJson, j.left.toJson])),
      ("active", .arr (st.jobs.map fun j =>
        CJ.arr [j.tid.toJson, ratJ ((List.lookup j.tid st.finish).getD 0)]))] ++ estKey)
  | .delay =>
    return .obj (base ++ [("active", .arr (st.jobs.map fun j =>
        CJ.arr [j.tid.toJson, ratJ ((List.lookup j.tid st.finish).getD 0)]))] ++ estKey)
  | .ps _ =>
    if (← getProg).ir.sharedStages.contains i then   -- a stage a flow crosses: remaining work and rates
      return .obj (base ++ [("active", .arr (st.jobs.map fun j => CJ.arr [j.tid.toJson, ratJ (remaining cfg.now j)])),
                            ("rates", .arr (st.jobs.map fun j => CJ.arr [j.tid.toJson, ratJ j.rate]))] ++ estKey)
    let mut v := st.v
    if !st.jobs.isEmpty && decide (cfg.now > st.tLast) then
      v := v + (← psLineRate i) * (cfg.now - st.tLast)
    return .obj (base ++ [("active", .arr (st.jobs.map fun j =>
        CJ.arr [j.tid.toJson, ratJ ((List.lookup j.tid st.tags).getD v - v)]))] ++ estKey)

/-- trace.py `records_json` (`rejected` present only when non-empty, docs/state.md RECORDS). -/
def recordsJson (r : Records) : CJ :=
  .obj ([("admitted", .arr r.admitted.toList), ("preempted", .arr r.preempted.toList),
         ("released", .arr r.released.toList), ("evicted", .arr r.evicted.toList),
         ("finished", .arr r.finished.toList), ("iterations", .arr r.iterations.toList),
         ("observations", .arr r.observations.toList)]
        ++ (if r.rejected.isEmpty then [] else [("rejected", .arr r.rejected.toList)]))

/-- trace.py `state_line`: the docs/state.md line of step `k`. -/
def stateLine (prog : Program) (w : Workload) (cfg : Config) (recs : Records) (ev : Option Event)
    (k : Nat) : Res CJ := do
  let (stages, _) ← runM prog w cfg ((List.range cfg.stages.length).mapM stageJson)
  let pools := (List.range cfg.pools.length).zip cfg.pools |>.map fun (p, st) => poolJson prog cfg p st
  -- trace.py: the claims' counts, only in a program with claims (docs/state.md)
  let claims : List (String × CJ) := if cfg.claims.isEmpty then []
    else [("claims", .arr (cfg.claims.map fun t => CJ.nats [t.iterations, t.checked, t.held, t.violated]))]
  return .obj ([("step", .nat k), ("event", eventJson prog ev), ("now", ratJ cfg.now),
               ("pools", .arr pools), ("stages", .arr stages),
               ("sessions", .arr (cfg.sessions.map fun s => CJ.arr [.nat s.serial, .str (statusJson prog s)])),
               ("records", recordsJson recs)] ++ claims
               -- the live branches (docs/language.md §11.13), only while there are some
               ++ (if cfg.branches.isEmpty then []
                   else [("branches", .arr (cfg.branches.map fun b => CJ.arr [b.tid.toJson, .str (statusJson prog b)]))]))

end SerqLang

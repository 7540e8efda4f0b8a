/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Config
import SerqLang.Wire

/-!
# The Config codec (config.py `to_json`, docs/state.md conventions)

`toJson` gives, for every configuration type, the same JSON value as the `to_json` method of
the config.py dataclass of the same name; `Config.canonical` is config.py `Config.canonical`
(canonical JSON text: sorted keys, no whitespace, values as `"p/q"` strings). The `ofJson`
decoders read that JSON back (`Lean.Json`), with the path of the first error.
-/

open Lean (Json)

namespace SerqLang

/-! ## Encoding -/

def ratJ (q : Rat) : CJ := .str (toString q)
def pairJ (p : Nat × Nat) : CJ := .arr [.nat p.1, .nat p.2]
/-- `[pool, amount]`: a `preempt_pos` item, a stalled `growth`. -/
def poolAmtJ (p : Nat × Rat) : CJ := .arr [.nat p.1, CJ.amt p.2]

def DrawStream.toJson : DrawStream → CJ
  | .session => .arr [.str "session"]
  | .init => .arr [.str "init"]
  | .turn k => .arr [.str "turn", .nat k]

/-- config.py `Tid` on the wire: a serial, or `"s.k"` for a branch (docs/language.md §11.13). -/
def Tid.toJson : Tid → CJ
  | .session n => .nat n
  | .branch n k => .str s!"{n}.{k}"
  | .copy n => .str s!"spill.{n}"
  | .dead n => .int (-(n : Int))

def EventArg.toJson : EventArg → CJ
  | .none => .null
  | .serial n => .nat n
  | .stageSerial s n => .arr [.nat s, n.toJson]
  | .stage i => .nat i
  | .poolSerial p n => .arr [.nat p, n.toJson]

def Event.toJson (e : Event) : CJ :=
  .arr [ratJ e.time, .nat e.seq, .str e.kind, e.arg.toJson]

def Frame.toJson (f : Frame) : CJ :=
  .arr [.nat f.block, .nat f.pc, .str f.kind, CJ.opt pairJ f.stmt, f.stream.toJson]

/-- content.py `key_json`: a prefix or history key in an identity — a JSON int when whole, else
its wire text. -/
def keyJson (v : Value) : CJ :=
  match v with
  | .fin q => if q.den == 1 then .int q.num else .str v.toWire
  | _ => .str v.toWire

/-- An identity as a JSON list (`["p", a, j]`, `["h", h, j]`). -/
def Content.Ident.toJson : Content.Ident → CJ
  | .pre a j => .arr [.str "p", keyJson a, .nat j]
  | .hist h j => .arr [.str "h", keyJson h, .nat j]

/-- `(p, n, h)` of a `content` clause as wire values. -/
def clauseJson (c : Content.Clause) : CJ := .arr [CJ.val c.1, CJ.val c.2.1, CJ.val c.2.2]

def HoldState.toJson (h : HoldState) : CJ :=
  .obj ([("stmt", pairJ h.stmt), ("pools", CJ.nats h.pools), ("alloc", CJ.amts h.alloc),
        ("position", CJ.amts h.position), ("advanced", .arr (h.advanced.map CJ.bool)),
        ("admission", .nat h.admission), ("depth", .nat h.depth), ("stream", h.stream.toJson)] ++
        (if h.reserved.any (fun x => decide (x > 0)) then [("reserved", CJ.amts h.reserved)] else []) ++
        -- present only on a content pool (config.py: any non-empty block list or any clause)
        (if h.blocks.any (fun b => !b.isEmpty) || h.content.any (·.isSome) then
          [("blocks", .arr (h.blocks.map CJ.nats)), ("content", .arr (h.content.map (CJ.opt clauseJson)))]
         else []))

def Request.toJson (r : Request) : CJ :=
  .obj [("stmt", pairJ r.stmt), ("engine", .nat r.engine), ("submit", ratJ r.submit),
        ("output", CJ.opt CJ.val r.output), ("first", CJ.opt ratJ r.first)]

def Work.toJson : Work → CJ
  | .tokens n => .nat n
  | .value v => CJ.val v

def Job.toJson (j : Job) : CJ :=
  .obj ([("serial", j.tid.toJson), ("stage", .nat j.stage), ("mode", .str j.mode),
        ("left", j.left.toJson), ("growing", CJ.opt CJ.nat j.growing),
        ("admission", .int j.admission), ("start_order", .nat j.startOrder)] ++
        -- present only on a pending resident (docs/async.md)
        (if j.pending then [("pending", .bool true)] else []) ++
        -- present only on a run with drafts (docs/language.md §7.3)
        (if j.drafts > 0 then [("drafts", .nat j.drafts)] else []) ++
        -- present only on a stage a flow crosses (docs/language.md §11.14)
        (if j.shared then [("shared", .bool true), ("rate", ratJ j.rate), ("since", ratJ j.since),
                           ("stages", CJ.opt CJ.nats j.stages)] else []))

def Status.toJson : Status → CJ
  | .ready => .arr [.str "ready"]
  | .queued p => .arr [.str "queued", .nat p]
  | .stage s => .arr [.str "stage", .nat s]
  | .growing p => .arr [.str "growing", .nat p]
  | .ended => .arr [.str "ended"]
  | .ending e => .arr [.str "ending", .nat e]
  | .joining => .arr [.str "joining"]

/-- config.py `Session.to_json`; the branch keys only when in use (docs/language.md §11.13). -/
def Session.toJson (s : Session) : CJ :=
  .obj ((if s.liveBranches > 0 then [("live_branches", CJ.nat s.liveBranches)] else []) ++
        (if s.forks > 0 then [("forks", CJ.nat s.forks)] else []) ++
        (match s.branch with
         | some _ => [("branch", s.tid.toJson), ("parent", (s.parent.getD (.session s.serial)).toJson)] ++
                     (if s.own then [("own", CJ.bool true)] else [])
         | none => []) ++
        -- the turn's acceptance counts, only when the trace row has them (docs/language.md §7.3)
        (match s.accept with
         | some a => [("accept", .arr (a.map CJ.nat))]
         | none => []) ++
        -- async speculative decoding's state only while set (docs/async.md §8)
        (match s.unseen with
         | some (p, r, v, k, d) => [("unseen", .arr [.nat p, .nat r, CJ.amt v, CJ.amt k, .bool d])]
         | none => []) ++
        (if s.specDrafts > 0 then [("spec_drafts", CJ.nat s.specDrafts)] else []) ++
        -- the pending load-backs, only while there are some (docs/language.md §11.8.1)
        (if s.loads.isEmpty then [] else [("loads", .arr (s.loads.map poolAmtJ))]) ++
        [("serial", .nat s.serial), ("attrs", .arr (s.attrs.map CJ.val)),
        ("frames", .arr (s.frames.map Frame.toJson)), ("status", s.status.toJson),
        ("holds", .arr (s.holds.map HoldState.toJson)),
        ("pending", CJ.opt (fun (p : Nat × Nat × DrawStream) =>
          CJ.arr [.nat p.1, .nat p.2.1, p.2.2.toJson]) s.pending),
        ("adm_seq", CJ.opt CJ.nat s.admSeq),
        ("preempt_pos", .arr (s.preemptPos.map poolAmtJ)),
        ("stuck", .bool s.stuck), ("trace", CJ.opt pairJ s.trace),
        ("cursors", .obj (s.cursors.map fun (k, n) => (k, CJ.nat n))), ("turns", .nat s.turns),
        ("turn", .arr [ratJ s.turnStart, .bool s.turnWarm, .bool s.turnCalled]),
        ("request", CJ.opt Request.toJson s.request), ("job", CJ.opt Job.toJson s.job),
        ("growth", CJ.opt poolAmtJ s.growth)])

def Entry.toJson (e : Entry) : CJ := .arr [e.owner.toJson, CJ.amt e.size, ratJ e.last, .nat e.rel]

def QueueItem.toJson (q : QueueItem) : CJ := .arr [q.serial.toJson, ratJ q.joined, .bool q.head]

/-- config.py `ContentState.to_json`. -/
def Content.CState.toJson (cs : Content.CState) : CJ :=
  .obj [("block", .nat cs.block), ("refs", CJ.nats cs.refs),
        ("ident", .arr (cs.ident.map (CJ.opt Content.Ident.toJson))),
        ("free_queue", CJ.nats cs.free),
        ("idmap", .arr (cs.idmap.map fun (k, v) => CJ.arr [k.toJson, CJ.nats v]))]

/-- config.py `Lease.to_json`: `[serial, part, ends_at | null]`. -/
def Lease.toJson (l : Lease) : CJ :=
  .arr [l.serial.toJson, l.part.toJson, CJ.opt ratJ l.endsAt]

/-- config.py `PoolState.to_json`, with the pool's leases (`leases`: present only while one is
held, so a program without leases serialises as before). -/
def PoolState.toJson (p : PoolState) (leases : List Lease := []) : CJ :=
  .obj ([("used", CJ.amt p.used), ("entries", .arr (p.entries.map Entry.toJson)),
        ("holders", .arr (p.holders.map Tid.toJson)), ("queue", .arr (p.queue.map QueueItem.toJson)),
        ("growers", .arr (p.growers.map Tid.toJson)), ("admissions", .nat p.admissions),
        ("preemptions", .nat p.preemptions), ("rejected", .nat p.rejected),
        ("stuck", .nat p.stuck), ("evicted_units", CJ.amt p.evictedUnits)] ++
        -- only once a chunk spilled (config.py): a program without `spill` serialises as before
        (if p.spills > 0 then [("spills", .nat p.spills)] else []) ++
        -- only once a content tier was hit (docs/content.md §6)
        (if p.tierHits > 0 then [("tier_hits", .nat p.tierHits)] else []) ++
        (match p.content with
         | some cs => [("content", cs.toJson)]
         | none => []) ++
        (if leases.isEmpty then [] else [("leases", .arr (leases.map Lease.toJson))]))

/-- The pools of a configuration, pool `i` with the leases of pool `i`. -/
def poolsJson (leases : List Lease) : Nat → List PoolState → List CJ
  | _, [] => []
  | i, p :: ps => p.toJson (leases.filter (·.pool == i)) :: poolsJson leases (i + 1) ps

def Assign.toJson (a : Assign) : CJ :=
  .arr ([a.serial.toJson, .str a.mode, .nat a.tokens, CJ.opt CJ.amt a.posBefore] ++
        (if a.pending then [.bool true] else []))

def Iteration.toJson (it : Iteration) : CJ :=
  .obj [("end", ratJ it.«end»), ("seq", .nat it.seq), ("assign", .arr (it.assign.map Assign.toJson))]

/-- config.py `Estimates.to_json`, and `EngineEstimates.to_json` for an engine's (its `fields`
in order under the one key `engine`). -/
def Estimates.toJson (e : Estimates) : CJ :=
  match e.engine with
  | some c => .obj [("engine", .arr [CJ.opt ratJ e.last, CJ.opt ratJ e.gap, CJ.opt ratJ e.wait,
                                     CJ.opt ratJ c.started, CJ.opt ratJ c.cost, CJ.opt ratJ c.cycle,
                                     CJ.opt ratJ c.busy])]
  | none => .obj [("last", CJ.opt ratJ e.last), ("gap", CJ.opt ratJ e.gap), ("service", CJ.opt ratJ e.service),
        ("wait", CJ.opt ratJ e.wait), ("joined", .arr (e.joined.map fun (n, t) => CJ.arr [n.toJson, ratJ t]))]

def StageState.toJson (s : StageState) : CJ :=
  .obj ([("kind", .str s.kind), ("jobs", .arr (s.jobs.map Job.toJson)),
        ("waiting", .arr (s.waiting.map Job.toJson)),
        ("finish", .arr (s.finish.map fun (n, t) => CJ.arr [n.toJson, ratJ t])),
        ("tags", .arr (s.tags.map fun (n, t) => CJ.arr [n.toJson, ratJ t])),
        ("v", ratJ s.v), ("t_last", ratJ s.tLast), ("dirty", .bool s.dirty),
        ("iteration", CJ.opt Iteration.toJson s.iteration),
        ("registers", .arr (s.registers.map CJ.val)), ("next_start", .nat s.nextStart)] ++
        -- async scheduling's lists only while in use (config.py): a program without `lag 1`
        -- serialises as before
        (if s.pending.isEmpty && s.due.isEmpty then []
         else [("pending", .arr (s.pending.map Tid.toJson)), ("due", .arr (s.due.map Tid.toJson))]) ++
        (if s.unseen.isEmpty then [] else [("unseen", .arr (s.unseen.map Tid.toJson))]) ++
        -- only on a stage whose estimates are read (config.py)
        (match s.est with
         | none => []
         | some e => [("est", e.toJson)]))

def Counters.toJson (c : Counters) : CJ :=
  .obj [("next_seq", .nat c.nextSeq), ("next_adm", .nat c.nextAdm), ("next_rel", .nat c.nextRel),
        ("next_dead", .nat c.nextDead), ("next_serial", .nat c.nextSerial),
        ("machine", .nat c.machine)] ++
        -- only once a copy started (config.py)
        (if c.nextCopy > 0 then [("next_copy", .nat c.nextCopy)] else [])

/-- config.py `Config.to_json`'s claims row: the four counts, then the first times (or null). -/
def ClaimTally.toJson (t : ClaimTally) : CJ :=
  .arr [.nat t.iterations, .nat t.checked, .nat t.held, .nat t.violated,
        CJ.opt ratJ t.firstHeld, CJ.opt ratJ t.firstViolated]

/-- A branch as config.py writes it: its draw cursors are its session's, its attributes those of
the thread it shares them with (`Config.attrThread`: its own for a sub-agent; the very objects,
in Python). -/
def Config.branchView (c : Config) (b : Session) : Session :=
  let attrs := ((c.threadOf? (c.attrThread b.tid)).map (·.attrs)).getD b.attrs
  match c.sessions[b.serial]? with
  | some s => { b with attrs, cursors := s.cursors }
  | none => b

def Config.toJson (c : Config) : CJ :=
  .obj ([("now", ratJ c.now), ("events", .arr (c.events.map Event.toJson)),
        ("sessions", .arr (c.sessions.map Session.toJson)), ("ready", .arr (c.ready.map Tid.toJson)),
        ("pools", .arr (poolsJson c.leases 0 c.pools)),
        ("stages", .arr (c.stages.map StageState.toJson)),
        ("counters", c.counters.toJson), ("warm", .bool c.warm), ("steps", .nat c.steps)]
        -- present only in a program with claims, as config.py writes it
        ++ (if c.claims.isEmpty then [] else [("claims", .arr (c.claims.map ClaimTally.toJson))])
        -- present only while a branch lives (docs/language.md §11.13)
        ++ (if c.branches.isEmpty then []
            else [("branches", .arr (c.branches.map fun b => (c.branchView b).toJson))]))

/-- config.py `Config.canonical`. -/
def Config.canonical (c : Config) : String := c.toJson.render

/-! ## Decoding -/

namespace Decode
open Wire

def rat (j : Json) : Res Rat := do
  match (← value j) with
  | .fin q => return q
  | v => throw s!"expected a finite time, got {v.toWire}"

def int (j : Json) : Res Int :=
  match j.getInt? with
  | .ok i => .ok i
  | .error _ => .error "expected an integer"

def pair (j : Json) : Res (Nat × Nat) := do
  match (← list nat j) with
  | [a, b] => return (a, b)
  | _ => throw "expected [int, int]"

/-- values.py `amount_from_wire`: a pool amount, a JSON int or a finite wire text `"p/q"`. -/
def amt (j : Json) : Res Rat :=
  match j with
  | Json.str _ => do
    match (← value j) with
    | .fin q => return q
    | v => throw s!"expected a finite pool amount, got {v.toWire}"
  | _ => (int j).map (fun i => (i : Rat))

/-- `[pool, amount]` (`preempt_pos` items, `growth`). -/
def poolAmt (j : Json) : Res (Nat × Rat) := do
  match (← arr j).toList with
  | [p, v] => return ((← nat p), (← amt v))
  | _ => throw "expected [pool, amount]"

def stream (j : Json) : Res DrawStream := do
  let a ← arr j
  match a.toList with
  | [Json.str "session"] => return .session
  | [Json.str "init"] => return .init
  | [Json.str "turn", k] => return .turn (← nat k)
  | _ => throw "expected [\"session\"], [\"init\"] or [\"turn\", k]"

/-- A thread: a serial, or `"s.k"` (config.py `Tid`). -/
def tid (j : Json) : Res Tid :=
  match j with
  | Json.str t =>
    match t.splitOn "." with
    | [a, b] =>
      match a.toNat?, b.toNat? with
      | some n, some k => .ok (.branch n k)
      | _, some n => if a == "spill" then .ok (.copy n) else .error s!"expected a thread \"s.k\", got {t}"
      | _, _ => .error s!"expected a thread \"s.k\", got {t}"
    | _ => .error s!"expected a thread \"s.k\", got {t}"
  | _ => (nat j).map Tid.session

/-- The owner of a cache entry: a thread, or a negative number for a dead entry (pools.py
`is_dead`). -/
def owner (j : Json) : Res Tid :=
  match j with
  | Json.str _ => tid j
  | _ => do
    let i ← int j
    return (if i < 0 then Tid.dead (-i).toNat else Tid.session i.toNat)

/-- A lease_end argument `[pool, thread]`. -/
def poolThread (j : Json) : Res (Nat × Tid) := do
  let a ← arr j
  match a.toList with
  | [p, t] => return (← nat p, ← tid t)
  | _ => throw "expected [pool, thread]"

/-- The branch number of a thread (none for a session). -/
def branchNo : Tid → Option Nat
  | .branch _ k => some k
  | .session _ => none
  | .copy _ => none
  | .dead _ => none

def eventArg (j : Json) : Res EventArg := do
  match j with
  | Json.null => return .none
  | Json.arr a =>
    match a.toList with
    | [s, n] => return .stageSerial (← nat s) (← tid n)
    | _ => throw "expected [stage, thread]"
  | _ => return .serial (← nat j)

def event (j : Json) : Res Event := do
  let a ← arr j
  match a.toList with
  | [t, s, k, x] =>
    let kind ← str k
    let arg ← if kind == "iter_end" then (do return EventArg.stage (← nat x))
      else if kind == "lease_end" then (do let (p, n) ← poolThread x; return EventArg.poolSerial p n)
      else eventArg x
    return { time := ← rat t, seq := ← nat s, kind, arg }
  | _ => throw "expected [time, seq, kind, arg]"

def frame (j : Json) : Res Frame := do
  let a ← arr j
  match a.toList with
  | [b, pc, k, st, sm] =>
    let stmt ← match st with
      | Json.null => pure none
      | _ => (do return some (← pair st))
    return { block := ← nat b, pc := ← nat pc, kind := ← str k, stmt, stream := ← stream sm }
  | _ => throw "expected [block, pc, kind, stmt, stream]"

/-- A `content` clause `[p, n, h]` of wire values, or null. -/
def clauseOpt (j : Json) : Res (Option Content.Clause) := do
  match j with
  | Json.null => return none
  | _ =>
    match (← list value j) with
    | [p, n, h] => return some (p, n, h)
    | _ => throw "expected [prefix, length, history]"

/-- A key written by `keyJson`: a JSON integer or a wire value. -/
def key (j : Json) : Res Value :=
  match j with
  | Json.str _ => value j
  | _ => (int j).map Value.ofInt

/-- An identity `["p", a, j]` / `["h", h, j]`. -/
def ident (j : Json) : Res Content.Ident := do
  match (← arr j).toList with
  | [Json.str "p", k, b] => return .pre (← key k) (← nat b)
  | [Json.str "h", k, b] => return .hist (← key k) (← nat b)
  | _ => throw "expected an identity [\"p\" or \"h\", key, block]"

def identOpt (j : Json) : Res (Option Content.Ident) :=
  match j with
  | Json.null => .ok none
  | _ => (ident j).map some

def idmapEntry (j : Json) : Res (Content.Ident × List Nat) := do
  match (← arr j).toList with
  | [k, v] => return ((← ident k), (← list nat v))
  | _ => throw "expected [identity, [block, …]]"

/-- config.py `ContentState` as written by `to_json`. -/
def contentState (j : Json) : Res Content.CState := do
  return {
    block := ← field j "block" nat
    refs := ← field j "refs" (list nat)
    ident := ← field j "ident" (list identOpt)
    free := ← field j "free_queue" (list nat)
    idmap := ← field j "idmap" (list idmapEntry) }

def hold (j : Json) : Res HoldState := do
  return {
    stmt := ← field j "stmt" pair
    pools := ← field j "pools" (list nat)
    alloc := ← field j "alloc" (list amt)
    position := ← field j "position" (list amt)
    advanced := ← field j "advanced" (list bool)
    admission := ← field j "admission" nat
    depth := ← field j "depth" nat
    stream := ← field j "stream" stream
    reserved := (← fieldOpt j "reserved" (list amt)).getD []
    blocks := (← fieldOpt j "blocks" (list (list nat))).getD []
    content := (← fieldOpt j "content" (list clauseOpt)).getD [] }

def request (j : Json) : Res Request := do
  return {
    stmt := ← field j "stmt" pair
    engine := ← field j "engine" nat
    submit := ← field j "submit" rat
    output := ← fieldOpt j "output" value
    first := ← fieldOpt j "first" rat }

def work (j : Json) : Res Work :=
  match j with
  | Json.str _ => (value j).map Work.value
  | _ => (nat j).map Work.tokens

def job (j : Json) : Res Job := do
  let t ← field j "serial" tid
  return {
    serial := t.owner
    branch := branchNo t
    copy := match t with
      | .copy n => some n
      | _ => none
    stage := ← field j "stage" nat
    mode := ← field j "mode" str
    left := ← field j "left" work
    growing := ← fieldOpt j "growing" nat
    admission := ← field j "admission" int
    startOrder := ← field j "start_order" nat
    pending := (← fieldOpt j "pending" bool).getD false
    drafts := (← fieldOpt j "drafts" nat).getD 0
    shared := (← fieldOpt j "shared" bool).getD false
    rate := (← fieldOpt j "rate" rat).getD 0
    since := (← fieldOpt j "since" rat).getD 0
    stages := ← fieldOpt j "stages" (list nat) }

def status (j : Json) : Res Status := do
  let a ← arr j
  match a.toList with
  | [Json.str "ready"] => return .ready
  | [Json.str "ended"] => return .ended
  | [Json.str "joining"] => return .joining
  | [Json.str "queued", p] => return .queued (← nat p)
  | [Json.str "stage", s] => return .stage (← nat s)
  | [Json.str "growing", p] => return .growing (← nat p)
  | [Json.str "ending", e] => return .ending (← nat e)
  | _ => throw "expected a status like [\"ready\"] or [\"queued\", pool]"

def pending (j : Json) : Res (Nat × Nat × DrawStream) := do
  let a ← arr j
  match a.toList with
  | [b, pc, sm] => return ((← nat b), (← nat pc), (← stream sm))
  | _ => throw "expected [block, pc, stream]"

/-- The cursors object, read through the keys config.py writes: `init`, `session` and
`turn:k` for the turns `k ≤ turns` the session started (the object's own key set is not
enumerated: `Lean.Json`'s object representation differs across releases). -/
def cursors (turns : Nat) (j : Json) : Res (List (String × Nat)) := do
  if !isObj j then throw "expected an object"
  let keys := ["init", "session"] ++ (List.range (turns + 1)).map (fun k => s!"turn:{k}")
  let mut out : List (String × Nat) := []
  for k in keys do
    match getOpt j k with
    | some v => out := insertSorted (k, ← at_ k (nat v)) out
    | none => pure ()
  return out
where
  insertSorted (kv : String × Nat) : List (String × Nat) → List (String × Nat)
    | [] => [kv]
    | x :: xs => if decide (kv.1 < x.1) then kv :: x :: xs else x :: insertSorted kv xs

/-- config.py's session field `turn`: `[turn_start, turn_warm, turn_called]` (absent in older
states: the defaults). -/
def turnState (j : Option Json) : Res (Rat × Bool × Bool) := do
  match j with
  | none => return (0, false, false)
  | some x =>
    match (← arr x).toList with
    | [t, w, c] => return ((← rat t), (← bool w), (← bool c))
    | _ => throw "turn: expected [start, warm, called]"

/-- config.py `Session.unseen`: `[pool, rejected, verified, known, draft_end]` (docs/async.md §8). -/
def unseenOutcome (j : Json) : Res (Nat × Nat × Rat × Rat × Bool) := do
  match (← arr j).toList with
  | [p, r, v, k, d] => return ((← nat p), (← nat r), (← amt v), (← amt k), (← bool d))
  | _ => throw "unseen: expected [pool, rejected, verified, known, draft_end]"

def session (j : Json) : Res Session := do
  let turns ← field j "turns" nat
  let (turnStart, turnWarm, turnCalled) ← at_ "turn" (turnState (getOpt j "turn"))
  return {
    serial := ← field j "serial" nat
    attrs := ← field j "attrs" (list value)
    frames := ← field j "frames" (list frame)
    status := ← field j "status" status
    holds := ← field j "holds" (list hold)
    pending := ← fieldOpt j "pending" pending
    admSeq := ← fieldOpt j "adm_seq" nat
    preemptPos := ← field j "preempt_pos" (list poolAmt)
    stuck := ← field j "stuck" bool
    trace := ← fieldOpt j "trace" pair
    cursors := ← field j "cursors" (cursors turns)
    turns
    turnStart
    turnWarm
    turnCalled
    request := ← fieldOpt j "request" request
    job := ← fieldOpt j "job" job
    growth := ← fieldOpt j "growth" poolAmt
    branch := (← fieldOpt j "branch" tid).bind branchNo
    parent := ← fieldOpt j "parent" tid
    own := (← fieldOpt j "own" bool).getD false
    liveBranches := (← fieldOpt j "live_branches" nat).getD 0
    forks := (← fieldOpt j "forks" nat).getD 0
    accept := ← fieldOpt j "accept" (list nat)
    unseen := ← fieldOpt j "unseen" unseenOutcome
    specDrafts := (← fieldOpt j "spec_drafts" nat).getD 0
    loads := (← fieldOpt j "loads" (list poolAmt)).getD [] }

def entry (j : Json) : Res Entry := do
  let a ← arr j
  match a.toList with
  | [o, s, l, r] => return { owner := ← owner o, size := ← amt s, last := ← rat l, rel := ← nat r }
  | _ => throw "expected [owner, size, last, rel]"

def queueItem (j : Json) : Res QueueItem := do
  let a ← arr j
  match a.toList with
  | [s, t, h] => return { serial := ← tid s, joined := ← rat t, head := ← bool h }
  | _ => throw "expected [serial, joined, head]"

/-- A lease `[serial, part, ends_at | null]` of pool `p` (config.py `Lease`). -/
def lease (p : Nat) (j : Json) : Res Lease := do
  let a ← arr j
  match a.toList with
  | [s, h, t] =>
    let endsAt ← match t with
      | Json.null => pure none
      | _ => (do return some (← rat t))
    return { pool := p, serial := ← tid s, part := ← hold h, endsAt }
  | _ => throw "expected [serial, part, ends_at]"

/-- A pool (config.py `PoolState.to_json`) with its leases (`leases`, absent when none), which
the Lean keeps in `Config.leases` with the pool's index `i`. -/
def pool (i : Nat) (j : Json) : Res (PoolState × List Lease) := do
  let leases ← match getOpt j "leases" with
    | none => pure []
    | some l => do
      let a ← arr l
      a.toList.mapM (lease i)
  let st : PoolState := {
    used := ← field j "used" amt
    entries := ← field j "entries" (list entry)
    holders := ← field j "holders" (list tid)
    queue := ← field j "queue" (list queueItem)
    growers := ← field j "growers" (list tid)
    admissions := ← field j "admissions" nat
    preemptions := ← field j "preemptions" nat
    rejected := ← field j "rejected" nat
    stuck := ← field j "stuck" nat
    evictedUnits := ← field j "evicted_units" amt
    content := ← fieldOpt j "content" contentState
    spills := (← fieldOpt j "spills" nat).getD 0
    tierHits := (← fieldOpt j "tier_hits" nat).getD 0 }
  return (st, leases)

/-- The pools of a configuration, pool `i` first. -/
def pools : Nat → List Json → Res (List (PoolState × List Lease))
  | _, [] => return []
  | i, j :: js => do return (← pool i j) :: (← pools (i + 1) js)

def assign (j : Json) : Res Assign := do
  let a ← arr j
  match a.toList with
  | s :: m :: t :: p :: rest =>
    let posBefore ← match p with
      | Json.null => pure none
      | _ => (do return some (← amt p))
    -- a fifth element `true` marks a pending resident's EOS token (docs/async.md)
    let pending ← match rest with
      | [] => pure false
      | [x] => bool x
      | _ => throw "expected [serial, mode, tokens, pos_before(, pending)]"
    return { serial := ← tid s, mode := ← str m, tokens := ← nat t, posBefore, pending }
  | _ => throw "expected [serial, mode, tokens, pos_before(, pending)]"

def iteration (j : Json) : Res Iteration := do
  return { «end» := ← field j "end" rat, seq := ← field j "seq" nat,
           assign := ← field j "assign" (list assign) }

def timed (j : Json) : Res (Tid × Rat) := do
  let a ← arr j
  match a.toList with
  | [s, t] => return ((← tid s), (← rat t))
  | _ => throw "expected [serial, time]"

/-- A rational or `null` (an estimate with no sample yet). -/
def ratOpt (j : Json) : Res (Option Rat) :=
  match j with
  | Json.null => .ok none
  | _ => (rat j).map some

/-- config.py `_estimates`: an engine's under the key `engine` (config.py `EngineEstimates`),
a stage's by field. -/
def estimates (j : Json) : Res Estimates := do
  match (← fieldOpt j "engine" (list ratOpt)) with
  | some [last, gap, wait, started, cost, cycle, busy] =>
    return { last, gap, wait, engine := some { started, cost, cycle, busy } }
  | some _ => throw "an engine's estimates: expected 7 values"
  | none => pure ()
  return {
    last := ← fieldOpt j "last" rat
    gap := ← fieldOpt j "gap" rat
    service := ← fieldOpt j "service" rat
    wait := ← fieldOpt j "wait" rat
    joined := ← field j "joined" (list timed) }

def stage (j : Json) : Res StageState := do
  return {
    kind := ← field j "kind" str
    jobs := ← field j "jobs" (list job)
    waiting := ← field j "waiting" (list job)
    finish := ← field j "finish" (list timed)
    tags := ← field j "tags" (list timed)
    v := ← field j "v" rat
    tLast := ← field j "t_last" rat
    dirty := ← field j "dirty" bool
    iteration := ← fieldOpt j "iteration" iteration
    registers := ← field j "registers" (list value)
    nextStart := ← field j "next_start" nat
    pending := (← fieldOpt j "pending" (list tid)).getD []
    due := (← fieldOpt j "due" (list tid)).getD []
    unseen := (← fieldOpt j "unseen" (list tid)).getD []
    est := ← fieldOpt j "est" estimates }

def counters (j : Json) : Res Counters := do
  return {
    nextSeq := ← field j "next_seq" nat
    nextAdm := ← field j "next_adm" nat
    nextRel := ← field j "next_rel" nat
    nextDead := ← field j "next_dead" nat
    nextSerial := ← field j "next_serial" nat
    machine := ← field j "machine" nat
    nextCopy := (← fieldOpt j "next_copy" nat).getD 0 }

/-- A claims row of config.py `Config.to_json`: four counts, two times or null. -/
def claimTally (j : Json) : Res ClaimTally := do
  let xs ← arr j
  let n (i : Nat) : Res Nat := nat (xs.getD i .null)
  let t (i : Nat) : Res (Option Rat) := match xs.getD i .null with
    | .null => .ok none
    | v => (rat v).map some
  return { iterations := ← n 0, checked := ← n 1, held := ← n 2, violated := ← n 3,
           firstHeld := ← t 4, firstViolated := ← t 5 }

/-- A configuration as written by config.py `Config.to_json`. -/
def config (j : Json) : Res Config := do
  let ps ← field j "pools" (fun x => do pools 0 (← arr x).toList)
  return {
    now := ← field j "now" rat
    events := ← field j "events" (list event)
    sessions := ← field j "sessions" (list session)
    ready := ← field j "ready" (list tid)
    branches := (← fieldOpt j "branches" (list session)).getD []
    pools := ps.map (·.1)
    stages := ← field j "stages" (list stage)
    counters := ← field j "counters" counters
    warm := ← field j "warm" bool
    steps := ← field j "steps" nat
    leases := ps.foldl (fun acc x => acc ++ x.2) []
    claims := (← fieldOpt j "claims" (list claimTally)).getD [] }

end Decode

end SerqLang

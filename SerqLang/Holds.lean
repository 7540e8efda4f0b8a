/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.ContentPool

/-!
# Pools in the step monad (python/serq_spec/pools.py)

The functions of pools.py that read or write the configuration: queues (with `queue by` keys),
`make_room` (with `evict by` keys; the `lru` case is `Pool.makeRoom`, whose invariant is proved),
`insert_entry`, `drop_entry`, `consume_own_prefix` (advancing `next_rel` / `next_dead`),
`units_int`, `caches_in`, `release_hold`; offload tiers (`spill`, docs/language.md §11.8.1):
`spill_chunk`, `link_work`, `consume_entry`, and `make_room` returning the copies to start.
-/

namespace SerqLang

/-- Lexicographic order of key tuples (Python's tuple `<` on values). -/
def lexLt : List Value → List Value → Bool
  | [], [] => false
  | [], _ :: _ => true
  | _ :: _, [] => false
  | a :: as, b :: bs => Value.lt a b || (a == b && lexLt as bs)

/-- pools.py `enqueue`: join the queue (at the head after a preemption); the thread is queued. -/
def enqueue (p : Nat) (th : Tid) (head : Bool := false) : M Unit := do
  let now := (← getCfg).now
  setPool p (Pool.enqueue (← pool p) th now head)
  modifyThread th fun s => { s with status := .queued p }

/-- The keys of a queue item under `queue by` (pools.py `select_head`). -/
def queueKeys (p : Nat) (keys : List Expr) (item : QueueItem) : M (List Value) := do
  let now := (← getCfg).now
  let what := s!"pool {← poolName p}: a queue key"
  let loc := (← poolDecl p).queueAt   -- pools.py `select_head`: at the clause
  keys.mapM (evaluate { session := some item.serial, ctx := [("waited", .fin (now - item.joined))], loc, what })

/-- pools.py `select_head`: a head-requeued hold first, else `fifo` order or the least keys. -/
def selectHead (p : Nat) : M (Option QueueItem) := do
  let q := (← pool p).queue
  match q with
  | [] => return none
  | first :: _ =>
    if first.head then return some first
    match (← poolDecl p).queue with
    | .fifo => return some first
    | .keyed keys =>
      let mut best : Option (QueueItem × List Value) := none
      for item in q do
        let key ← queueKeys p keys item
        match best with
        | none => best := some (item, key)
        | some (_, bk) => if lexLt key bk then best := some (item, key)
      return best.map (·.1)

/-- pools.py `leave_queue`. -/
def leaveQueue (p : Nat) (serial : Tid) : M Unit := do
  setPool p (Pool.leaveQueue (← pool p) serial)

/-- pools.py `entry_owner`: the thread an entry belongs to — a session (ended ones included), a
live branch; none for a dead entry, or for the entry of a branch that has finished (its context
is nobody's now, as a dead entry's: docs/language.md §11.13). -/
def entryOwner (owner : Tid) : M (Option Session) := do
  match owner with
  | .session n => return some (← session n)
  | .branch _ _ => return (← getCfg).branches.find? (·.tid == owner)
  | _ => return none

/-- The index of the `evict by` victim: least keys, then release order. -/
def keyedVictim (p : Nat) (keys : List Expr) (entries : List Entry) : M (Option Nat) := do
  let now := (← getCfg).now
  let what := s!"pool {← poolName p}: an eviction key"
  let loc := (← poolDecl p).evictAt   -- pools.py `eviction_victim`: at the clause
  let mut best : Option (Nat × List Value) := none
  let mut i := 0
  for e in entries do
    let owner? ← entryOwner e.owner
    let waiting := match owner?.map (·.status) with
      | some (.queued _) => true
      | _ => false
    let env : EnvM := { session := owner?.map (·.tid), loc, what,
                        ctx := [("size", .fin e.size), ("last", .fin e.last),
                                ("age", .fin (now - e.last)), ("waiting", Value.ofBool waiting)] }
    let key := (← keys.mapM (evaluate env)) ++ [Value.ofNat e.rel]
    match best with
    | none => best := some (i, key)
    | some (_, bk) => if lexLt key bk then best := some (i, key)
    i := i + 1
  return best.map (·.1)

/-- pools.py `eviction_env`: the eviction-key moment (docs/language.md §4.6) of a chunk of
`owner`'s entry — `size`, `last`, `age`, `waiting` and the owner's attributes (none for a dead
entry). Eviction keys and `spill` clauses read it. -/
def evictionEnv (owner : Tid) (size last : Rat) (loc : Option Loc) (what : String) : M EnvM := do
  let now := (← getCfg).now
  let owner? ← entryOwner owner
  let waiting := match owner?.map (·.status) with
    | some (.queued _) => true
    | _ => false
  return { session := owner?.map (·.tid), loc, what,
           ctx := [("size", .fin size), ("last", .fin last), ("age", .fin (now - last)),
                   ("waiting", Value.ofBool waiting)] }

/-- pools.py `link_work`: the work of pool `p`'s `spill` clause in `env`, finite and ≥ 0. -/
def linkWork (p : Nat) (sp : SpillDecl) (env : EnvM) : M Value := do
  let w ← evaluate env sp.work
  match w with
  | .fin q =>
    if q < 0 then specError s!"pool {← poolName p}: the work of `spill` must be finite and >= 0, got {w.toWire}" (some sp.loc)
    return w
  | _ => specError s!"pool {← poolName p}: the work of `spill` must be finite and >= 0, got {w.toWire}" (some sp.loc)

mutual

/-- pools.py `make_room`: evict until `used + cached + need ≤ cap`, one tail block at a time; the
evictions go to the step's records. A pool with `spill` evicts through `makeRoomSpilling`; the
others as before. Returns the copies of spilled chunks (link stage, work), in order, for the
caller to start (`startCopies`). -/
partial def makeRoom (p : Nat) (need : Rat) : M (List (Nat × Value)) := do
  let name ← poolName p
  let cap ← capOf p
  let block ← blockOf p
  if let some sp := (← poolDecl p).spill then
    return (← makeRoomSpilling p sp need)
  match (← poolDecl p).evict with
  | .lru =>
    -- `Pool.makeRoom` is over a rational cap (its proofs, Thm/Pool.lean, are); an infinite cap
    -- is settled here as pools.py's loop settles it: `+inf` never needs room, and under `-inf`
    -- the loop empties the cache and raises (the evictions die with the run)
    match cap with
    | .posInf => return []
    | .negInf => specError s!"make_room in pool {name}: no room even with an empty cache"
    | .fin capR =>
      match Pool.makeRoom capR block (← pool p) need with
      | .error e => specError s!"make_room in pool {name}: {e}"
      | .ok (st, evs) =>
        setPool p st
        modifyRec fun r => { r with evicted := evs.foldl (fun acc ev =>
          acc.push (.arr [ev.owner.toJson, .str name, CJ.amt ev.units])) r.evicted }
        return []
  | .keyed keys =>
    let st ← pool p
    if Value.le (.fin (st.used + st.cached + need)) cap then return []
    if st.entries.isEmpty then
      specError s!"make_room in pool {name}: no room even with an empty cache"
    let some i ← keyedVictim p keys st.entries | specError s!"make_room in pool {name}: no victim"
    let e := st.entries.getD i default
    let k := Pool.evictAmount block e.size
    setPool p { st with entries := Pool.shrinkAt k i st.entries, evictedUnits := st.evictedUnits + k }
    modifyRec fun r => { r with evicted := r.evicted.push (.arr [e.owner.toJson, .str name, CJ.amt k]) }
    makeRoom p need

/-- `make_room` on a pool with `spill` (docs/language.md §11.8.1): the same evictions, block by
block (LRU or `evict by` keys), each chunk of a session's entry handed to `spillChunk`. -/
partial def makeRoomSpilling (p : Nat) (sp : SpillDecl) (need : Rat) : M (List (Nat × Value)) := do
  let name ← poolName p
  let st ← pool p
  if Value.le (.fin (st.used + st.cached + need)) (← capOf p) then return []
  if st.entries.isEmpty then
    specError s!"make_room in pool {name}: no room even with an empty cache"
  let i? ← match (← poolDecl p).evict with
    | .lru => pure ((Pool.lruPick st.entries).map (·.1))
    | .keyed keys => keyedVictim p keys st.entries
  let some i := i? | specError s!"make_room in pool {name}: no victim"
  let e := st.entries.getD i default
  let k := Pool.evictAmount (← blockOf p) e.size
  setPool p { st with entries := Pool.shrinkAt k i st.entries, evictedUnits := st.evictedUnits + k }
  modifyRec fun r => { r with evicted := r.evicted.push (.arr [e.owner.toJson, .str name, CJ.amt k]) }
  let copies ← if !e.owner.isDead then spillChunk p sp e.owner k e.last else pure []
  return copies ++ (← makeRoomSpilling p sp need)

/-- pools.py `spill_chunk`: a chunk of `take` units just evicted from the tail of `owner`'s entry
on `p`. When `when` holds and the chunk fits the tier at all, the tier makes room by its own
policy, the chunk joins the front of owner's entry there (release time now, next release
order) and its copy is returned; otherwise the chunk is dropped. -/
partial def spillChunk (p : Nat) (sp : SpillDecl) (owner : Tid) (take last : Rat) : M (List (Nat × Value)) := do
  let env ← evictionEnv owner take last (some sp.loc) s!"pool {← poolName p}: `spill`"
  if !Value.nz (← evaluate env sp.«when») then return []
  let q := sp.tier
  if !Value.le (.fin take) (← capOf q) then return []
  let w ← linkWork p sp env
  let copies ← makeRoom q take
  let cfg ← getCfg
  let st ← pool q
  let size := take + ((st.entries.find? (·.owner == owner)).map (·.size)).getD 0
  setPool q { st with entries := Pool.removeOwner owner st.entries ++ [⟨owner, size, cfg.now, cfg.counters.nextRel⟩] }
  modifyCfg fun c => { c with counters := { c.counters with nextRel := c.counters.nextRel + 1 } }
  let ps ← pool p
  setPool p { ps with spills := ps.spills + 1 }
  return copies ++ [(sp.link, w)]

end

/-- pools.py `drop_entry`: `drop P;` removes the session's own entry now, and its rest on P's
`spill` tiers (docs/language.md §11.8.1). -/
def dropEntry (p : Nat) (owner : Tid) : M Unit := do
  for q in p :: (← getProg).tiersBelow p do
    setPool q (Pool.dropEntry (← pool q) owner)

/-- pools.py `insert_entry`: a fresh entry with the next release order; the owner's entries on
the tiers continued the old prefix, not this one: they go. -/
def insertEntry (p : Nat) (owner : Tid) (size : Rat) : M Unit := do
  dropEntry p owner
  let cfg ← getCfg
  setPool p (Pool.insertEntry (← pool p) owner size cfg.now cfg.counters.nextRel)
  modifyCfg fun c => { c with counters := { c.counters with nextRel := c.counters.nextRel + 1 } }

/-- pools.py `consume_entry`: remove `owner`'s entry from `p`, keep at most `limit` of it (none:
all), the rest a dead entry with the entry's age; the units kept. -/
def consumeEntry (p : Nat) (serial : Tid) (limit : Option Rat) : M Rat := do
  let cfg ← getCfg
  match Pool.entryOf (← pool p) serial with
  | none => return 0
  | some e =>
    let (entries, kept, dead) := Pool.consumeWith serial cfg.counters.nextDead (← pool p).entries e limit
    setPool p { (← pool p) with entries }
    if dead then
      modifyCfg fun c => { c with counters := { c.counters with nextDead := c.counters.nextDead + 1 } }
    return kept

/-- pools.py `consume_own_prefix`: the session's prefix on `p`, then its rest on p's `spill`
tiers in order, `reuse (ρ)` limiting the whole. Returns (consumed, the part loaded back from
the tiers). -/
def consumeOwnPrefix (p : Nat) (serial : Tid) (reuseLimit : Option Value) : M (Rat × Rat) := do
  let limit := Pool.reuseUnits (← blockOf p) reuseLimit
  let consumed ← consumeEntry p serial limit
  let mut loaded : Rat := 0
  for q in (← getProg).tiersBelow p do
    loaded := loaded + (← consumeEntry q serial (limit.map (· - consumed - loaded)))
  return (consumed + loaded, loaded)

/-- pools.py `spill_block`: a block of identity `id` just evicted from the `share content` pool
`p` (docs/content.md §6). With `when` holding — read with `size` = b, `last` = now, `age` = 0,
`waiting` = 0 and no session (a block is nobody's: attributes read 0) — the identity moves to
the content tier unless the tier has it already (nothing copied) or has no block; its copy is
returned. Otherwise the block is dropped. -/
def spillBlock (p : Nat) (sp : SpillDecl) (id : Content.Ident) : M (List (Nat × Value)) := do
  let b := (← ContentPool.contentOf p).block
  let now := (← getCfg).now
  let env : EnvM := { session := none, loc := some sp.loc, what := s!"pool {← poolName p}: `spill`",
                      ctx := [("size", .fin (b : Rat)), ("last", .fin now), ("age", Value.zero),
                              ("waiting", Value.zero)] }
  if !Value.nz (← evaluate env sp.«when») then return []
  let tier ← ContentPool.contentOf sp.tier
  if !(Content.blocksOf tier.idmap id).isEmpty then return []   -- the tier has this content
  if tier.refs.isEmpty then return []   -- a tier of no block keeps nothing
  let w ← linkWork p sp env
  ContentPool.tierStore sp.tier id
  let ps ← pool p
  setPool p { ps with spills := ps.spills + 1 }
  return [(sp.link, w)]

/-- pools.py `allocate_blocks`: `count` new blocks of content pool `p`, one at a time; each
identified head evicted may move to p's content tier (`spillBlock`) before the next is taken.
content.py `allocate` returns the evicted identities; here the head's identity is read before
`ContentPool.allocate` takes it. Returns the blocks and the copies. -/
def allocateBlocks (p count : Nat) (blocks : List Nat) : M (List Nat × List (Nat × Value)) := do
  let mut bl := blocks
  let mut copies : List (Nat × Value) := []
  for _ in List.range count do
    let cs ← ContentPool.contentOf p
    let evicted := match cs.free with
      | hd :: _ => Content.nthId cs.ident hd
      | [] => none
    bl ← ContentPool.allocate p 1 bl
    if let (some id, some sp) := (evicted, (← poolDecl p).spill) then
      copies := copies ++ (← spillBlock p sp id)
  return (bl, copies)

/-- program.py `is_content`: is pool `p` a `share content` pool? -/
def isContent (p : Nat) : M Bool := do
  return ((← getProg).contentBlocks.getD p none).isSome

/-- pools.py `caches_in`: a hold's `cache` clause applies to its pools not admitted by an engine,
nor to a `share content` pool (its released blocks keep their content). -/
def cachesIn (p : Nat) : M Bool := do
  return (← poolDecl p).admittedBy.isNone && !(← isContent p)

/-- pools.py `add_units`: grow slot `i` of the thread's hold `k` (on pool `p`) by `need` units
that fit: on a `share content` pool `need / b` blocks from the free queue, elsewhere `make_room`
and `used += need`; the slot's allocation grows by `need`. Returns the copies of chunks the
room-making spilled. -/
def addUnits (p : Nat) (th : Tid) (k i : Nat) (need : Rat) : M (List (Nat × Value)) := do
  let mut copies : List (Nat × Value) := []
  match (← pool p).content with
  | some cs =>
    let s ← thread th
    let (h, bl) := (s.holds.getD k default).blocksOf i
    -- `need // b`: a content pool's `need` is a whole number of its whole blocks
    let (bl, spilled) ← allocateBlocks p (need / (cs.block : Rat)).floor.toNat bl
    copies := spilled
    let s ← thread th
    setSession { s with holds := s.holds.set k (h.setBlocks i bl) }
  | none =>
    copies ← makeRoom p need
    let st ← pool p
    setPool p { st with used := st.used + need }
  let s ← thread th
  let h := s.holds.getD k default
  setSession { s with holds := s.holds.set k { h with alloc := h.alloc.set i (h.alloc.getD i 0 + need) } }
  return copies

/-- pools.py `units_int`. -/
def unitsInt (v : Value) (what : String) (loc : Option Loc) (negative : String := "") : M Rat := do
  match Pool.unitsInt v what negative with
  | .ok n => return n
  | .error e => specError e loc

/-- pools.py `cache_amount`: ℓ of the hold's `cache (ℓ)` clause read now (Session moment), or none. -/
def cacheAmount (serial : Tid) (hold : HoldState) : M (Option Value) := do
  let st ← stmtAt hold.stmt
  let cacheExpr := match st.stmt with
    | .hold h => h.cache
    | _ => none
  match cacheExpr with
  | none => return none
  | some ce => return some (← evaluate { session := some serial, stream := hold.stream, loc := some st.loc } ce)

/-- pools.py `release_slots`: each pool's allocation leaves `used` and, with ℓ, a fresh entry of
round_down(min(ℓ, computed)) is cached; the holders lists are the caller's (a lease is no holder). -/
def releaseSlots (serial : Tid) (hold : HoldState) (ell : Option Value) (preempted : Bool) : M Unit := do
  let mut i := 0
  for p in hold.pools do
    let alloc := hold.alloc.getD i 0
    if (← pool p).content.isSome then
      -- `used` drops per block reaching no reference (content.py `release`)
      ContentPool.release p (hold.blocksOf i).2
    else
      let ps ← pool p
      setPool p { ps with used := ps.used - alloc }
    let mut kept : Rat := 0
    if let some ell := ell then
      if (← cachesIn p) then
        -- the position capped by the allocation (serq_spec ae9b5fe): a consumed prefix the units
        -- did not allocate starts the position above the allocation, and what has no units cannot
        -- be kept (docs/spec.md "A position above the allocation")
        let computed := if hold.advanced.getD i false || preempted then min (hold.position.getD i 0) alloc else alloc
        -- −inf when ℓ is −inf: nothing kept; else rounded down to a whole block
        let amount := Value.minV ell (.fin computed)
        let blk ← blockOf p
        -- −inf when ℓ is −inf: nothing kept (`amount ≤ 0`); `+inf` is impossible (computed is finite)
        kept := match amount with
          | .fin q => if q ≤ 0 then 0 else rounddownBlock q blk
          | _ => 0
        if kept > 0 then insertEntry p serial kept
    let name ← poolName p
    modifyRec fun r => { r with released := r.released.push (.arr [serial.toJson, .str name, CJ.amt kept]) }
    i := i + 1

/-- pools.py `release_hold`: release every pool of the hold, caching per its `cache` clause. -/
def releaseHold (serial : Tid) (hold : HoldState) (preempted : Bool) : M Unit := do
  let ell ← cacheAmount serial hold
  for p in hold.pools do
    let ps ← pool p
    setPool p { ps with holders := ps.holders.erase serial }
  releaseSlots serial hold ell preempted

/-- Remove the `i`-th element of a list. -/
def dropAt {α : Type} (l : List α) (i : Nat) : List α := l.eraseIdx i

/-- pools.py `split_part`: pool slot `i` of `hold` as a one-pool hold (same statement, stream and
admission: its `cache` clause still applies), and the hold without it. `blocks_of(i)` pads the
hold's block lists up to slot i before the part is cut out. -/
def splitPart (hold : HoldState) (i : Nat) : HoldState × HoldState :=
  let p := hold.pools.getD i 0
  let (hold, bl) := hold.blocksOf i
  let part : HoldState := { hold with pools := [p], alloc := [hold.alloc.getD i 0],
                                      position := [hold.position.getD i 0],
                                      advanced := [hold.advanced.getD i false],
                                      reserved := [hold.held i], blocks := [bl],
                                      content := [hold.contentOf i] }
  let rest := { hold with pools := dropAt hold.pools i, alloc := dropAt hold.alloc i,
                          position := dropAt hold.position i, advanced := dropAt hold.advanced i,
                          reserved := dropAt hold.reserved i, blocks := dropAt hold.blocks i,
                          content := dropAt hold.content i }
  (part, rest)

/-! ## Leases (docs/language.md §11.4 `lease P (t)`) -/

/-- pools.py `lease_of`: the thread's lease on pool `p` (at most one per pool). -/
def leaseOf (p : Nat) (serial : Tid) : M (Option Lease) := do
  return (← getCfg).leases.find? (fun l => l.pool == p && l.serial == serial)

/-- pools.py `start_lease`: the scope of `hold` ends with `lease P (t)`, t > 0: its part on `p`
leaves the hold and `p`'s holders but stays in `used`; `lease_end` is scheduled at `endsAt`
(none: t = inf). Returns the hold without the part, which the scope end then releases. -/
def startLease (serial : Tid) (hold : HoldState) (p : Nat) (endsAt : Option Rat) (loc : Option Loc) :
    M HoldState := do
  if (← leaseOf p serial).isSome then
    specError s!"session {serial.text} leases pool {← poolName p} while its earlier lease of it is held; `release` the first before the second scope ends" loc
  let (part, rest) := splitPart hold (hold.slot p)
  let ps ← pool p
  setPool p { ps with holders := ps.holders.erase serial }
  modifyCfg fun c => { c with leases := c.leases ++ [{ pool := p, serial, part, endsAt }] }
  if let some t := endsAt then
    let (cfg, _) ← liftRes (scheduleEvent (← getCfg) t "lease_end" (.poolSerial p serial))
    setCfg cfg
  return rest

/-- pools.py `end_lease`: the lease on `p` ends (`release P`, its `lease_end` event, the session's
end): the units leave `used` and the hold's `cache` clause applies now (ℓ read now). -/
def endLease (serial : Tid) (p : Nat) : M Unit := do
  let some l ← leaseOf p serial | specError s!"internal: session {serial.text} holds no lease of pool {p}"
  modifyCfg fun c => { c with leases := c.leases.filter (fun x => !(x.pool == p && x.serial == serial)) }
  if l.endsAt.isSome then
    -- pending unless this is its own event (already popped)
    modifyCfg fun c => withdrawEvent c "lease_end" (.poolSerial p serial)
  releaseSlots serial l.part (← cacheAmount serial l.part) false

/-- pools.py `release_pool_early`: `release P;` ends the session's lease on P if it has one; else
it releases the innermost hold's allocation on P now, caching per the hold's `cache` clause (the
rest of the hold stays until its scope ends); with neither it does nothing (a lease of t seconds
may have ended before the program releases it). -/
def releasePoolEarly (serial : Tid) (p : Nat) (_loc : Option Loc) : M Unit := do
  if (← leaseOf p serial).isSome then
    endLease serial p
    return
  let s ← thread serial
  let some k := holdIndex s p | return
  let (part, rest) := splitPart (s.holds.getD k default) ((s.holds.getD k default).slot p)
  releaseHold serial part false
  let s ← thread serial
  setSession { s with holds := s.holds.set k rest }

/-- pools.py `held_reservations` (`reserve held`, §11.4): Σ over P's holders of
max(0, r_j − alloc_j), r_j the block-rounded reserve the holder was admitted with. -/
def heldReservations (p : Nat) : M Rat := do
  let mut total : Rat := 0
  for serial in (← pool p).holders do
    if let some h := holdOf (← thread serial) p then
      let i := h.slot p
      total := total + max 0 (h.held i - h.alloc.getD i 0)
  return total

end SerqLang

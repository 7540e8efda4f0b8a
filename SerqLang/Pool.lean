/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Value
import SerqLang.Content

/-!
# Pools: queues, the prefix cache, LRU eviction (python/serq_spec/pools.py)

Mirrors `pools.py` function by function (names in lowerCamelCase: `make_room` ↦ `makeRoom`).
Python mutates `cfg.pools[p]`; here each function takes the pool's static `cap`/`block` and its
`PoolState` and returns the new state plus what Python appends to the step's records
(`Evicted`) or returns (units consumed). Counters that live in the Config (`next_rel`,
`next_dead`) are passed in; the caller advances them.

Pool amounts (units, `used`, entry sizes, allocations, the cap and the block size) are exact
rationals (`Rat`), as in serq_spec since 84aea69 (docs/spec.md "Non-whole pool amounts"); every
amount the step makes is ≥ 0. The cap here is a rational: an infinite one (program.py keeps
`±inf`) never reaches this file — `Holds.makeRoom` settles it, and the guards compare with
`Value.lt`/`Value.le`.

The memory invariant `Inv cap st := st.used + st.cached ≤ cap` is proved preserved by
`makeRoom`, admission, growth, consumption, release and `drop` in `SerqLang/Thm/Pool.lean`.
-/

namespace SerqLang

/-- config.py `Tid`: a thread (docs/language.md §11.13), a session by its serial or the k-th
branch its session forked (`"s.k"` on the wire). A serial is a thread wherever one is expected. -/
inductive Tid where
  | session (serial : Nat)
  | branch (serial k : Nat)
  /-- config.py `is_copy`: the n-th copy job of a spilled chunk, `"spill.n"` on the wire
  (docs/language.md §11.8.1); no thread, so nothing resumes when it finishes -/
  | copy (n : Nat)
  /-- the owner of a dead cache entry (nobody's), `-n` on the wire: config.py keeps it as a
  negative int in the same `Tid` (pools.py `is_dead`) -/
  | dead (n : Nat)
  deriving Inhabited, DecidableEq

instance : Coe Nat Tid := ⟨Tid.session⟩

/-- The serial of the session the thread belongs to. -/
def Tid.owner : Tid → Nat
  | .session n => n
  | .branch n _ => n
  | .copy _ => 0   -- never asked: a copy job is nobody's (`finishJob` stops before `thread`)
  | .dead _ => 0   -- never asked: a dead entry is nobody's (`entryOwner` is none)

/-- The thread's name in messages: the serial, or `s.k`. -/
def Tid.text : Tid → String
  | .session n => toString n
  | .branch n k => s!"{n}.{k}"
  | .copy n => s!"spill.{n}"
  | .dead n => s!"-{n}"

/-- pools.py `is_dead`: the owner of a dead entry (nobody's); a branch's name is not one. -/
def Tid.isDead : Tid → Bool
  | .dead _ => true
  | _ => false

/-- config.py `Entry`: owner thread (`Tid.dead` for a dead entry; docs/language.md §11.13: a
branch's entries are its own), size, release time `last`, release order `rel`. -/
structure Entry where
  owner : Tid
  size : Rat
  last : Rat
  rel : Nat
  deriving Inhabited, DecidableEq

/-- The same entry with another size. -/
def Entry.withSize (e : Entry) (s : Rat) : Entry := ⟨e.owner, s, e.last, e.rel⟩

@[simp] theorem Entry.withSize_size (e : Entry) (s : Rat) : (e.withSize s).size = s := rfl

/-- config.py `QueueItem`: who, when it joined, whether it was requeued at the head. -/
structure QueueItem where
  /-- the thread whose hold waits (config.py names it `serial`) -/
  serial : Tid
  joined : Rat
  head : Bool
  deriving Inhabited, DecidableEq

/-- config.py `PoolState`. -/
structure PoolState where
  used : Rat := 0
  entries : List Entry := []
  /-- threads, in admission order (docs/language.md §11.13: a branch holds in its own name) -/
  holders : List Tid := []
  queue : List QueueItem := []
  growers : List Tid := []
  admissions : Nat := 0
  preemptions : Nat := 0
  rejected : Nat := 0
  stuck : Nat := 0
  evictedUnits : Rat := 0
  /-- config.py `PoolState.content`: a `share content` pool's blocks (docs/content.md) -/
  content : Option Content.CState := none
  /-- config.py `PoolState.spills`: chunks moved to the `spill` tier (docs/language.md §11.8.1) -/
  spills : Nat := 0
  /-- config.py `PoolState.tier_hits`: blocks a content pool loaded back from its content tier
  (docs/content.md §6) -/
  tierHits : Nat := 0
  deriving Inhabited

/-- One eviction step as recorded (`[owner, pool, units]`, the pool name added by the caller). -/
structure Evicted where
  owner : Tid
  units : Rat
  deriving Inhabited

namespace PoolState

/-- Σ entry sizes. -/
def cachedOf : List Entry → Rat
  | [] => 0
  | e :: es => e.size + cachedOf es

/-- config.py `PoolState.cached`. -/
def cached (st : PoolState) : Rat := cachedOf st.entries

/-- The cached units of a `share content` pool: `b ×` its identified blocks that nobody
references (config.py `PoolState.cached` on a content pool; 0 elsewhere, where the cache is the
entries, `cached`; a content pool has no entries). -/
def contentCached (st : PoolState) : Rat :=
  match st.content with
  | some cs => ((cs.block * Content.identifiedFree cs.refs cs.ident : Nat) : Rat)
  | none => 0

/-- The memory invariant of a pool. -/
def Inv (cap : Rat) (st : PoolState) : Prop := st.used + st.cached ≤ cap

end PoolState

namespace Pool
open PoolState

/-- pools.py `entry_of`: the cache entry of `owner`, if any. -/
def entryOf (st : PoolState) (owner : Tid) : Option Entry :=
  st.entries.find? (fun e => e.owner == owner)

/-- pools.py `cached_units`. -/
def cachedUnits (st : PoolState) : Rat := st.cached

/-! ## Queues -/

/-- pools.py `enqueue` (the pool part; the session's status is set by the caller): join at the
tail, or at the head after a preemption. -/
def enqueue (st : PoolState) (serial : Tid) (now : Rat) (head : Bool) : PoolState :=
  let item : QueueItem := ⟨serial, now, head⟩
  if head then { st with queue := item :: st.queue } else { st with queue := st.queue ++ [item] }

/-- pools.py `select_head` for a `fifo` queue: the queue's first item (a head-requeued hold is
first by construction). `queue by` keys read expressions of the session; they are outside this
fragment (an error says so). -/
def selectHead (st : PoolState) (fifo : Bool) : Res (Option QueueItem) :=
  match st.queue with
  | [] => .ok none
  | q :: _ =>
    if q.head || fifo then .ok (some q)
    else .error "not supported by SerqLang yet: queue by (keys)"

/-- pools.py `leave_queue`. -/
def leaveQueue (st : PoolState) (serial : Tid) : PoolState :=
  { st with queue := st.queue.filter (fun q => q.serial != serial) }

/-! ## Eviction -/

/-- Strictly earlier in `lru` order: least `last`, ties by release order. -/
def before (a b : Entry) : Bool :=
  decide (a.last < b.last) || (decide (a.last = b.last) && decide (a.rel < b.rel))

/-- One step of `lruPick`: the head entry against the best pick of the tail. -/
def pickStep (e : Entry) : Option (Nat × Entry) → Option (Nat × Entry)
  | none => if 0 < e.size then some (0, e) else none
  | some (j, x) =>
    if 0 < e.size then
      if before x e = true then some (j + 1, x) else some (0, e)
    else some (j + 1, x)

/-- Index and entry of the least `(last, rel)` among entries of positive size, the first of
equals (Python's `min`; entries of size 0 never exist in a valid state). -/
def lruPick : List Entry → Option (Nat × Entry)
  | [] => none
  | e :: es => pickStep e (lruPick es)

/-- pools.py `eviction_victim` for `lru` (`evict by` keys are outside this fragment). -/
def evictionVictim (st : PoolState) : Option Entry := (lruPick st.entries).map (·.2)

/-- Size of the entry at index `i` (0 past the end). -/
def sizeAt : Nat → List Entry → Rat
  | _, [] => 0
  | 0, e :: _ => e.size
  | i + 1, _ :: es => sizeAt i es

/-- Remove `k` units from the tail of the entry at index `i`; an entry left empty is dropped. -/
def shrinkAt (k : Rat) : Nat → List Entry → List Entry
  | _, [] => []
  | 0, e :: es => if e.size ≤ k then es else e.withSize (e.size - k) :: es
  | i + 1, e :: es => e :: shrinkAt k i es

/-- Units one eviction step takes from an entry of size `s`: `min(block, s)`, the whole entry
without a block size. (The `0 < b` test changes nothing for the positive block sizes
`Config.ofIr` admits; it makes "every step takes a positive amount from a victim of positive
size" true by construction.) -/
def evictAmount (block : Option Rat) (s : Rat) : Rat :=
  match block with
  | none => s
  | some b => if 0 < b then (if b ≤ s then b else s) else s

/-- Apply a pick: shrink the victim, count the evicted units. -/
def evictWith (block : Option Rat) (st : PoolState) : Option (Nat × Entry) → Option (PoolState × Evicted)
  | none => none
  | some (i, e) =>
    let k := evictAmount block e.size
    some ({ st with entries := shrinkAt k i st.entries, evictedUnits := st.evictedUnits + k },
      ⟨e.owner, k⟩)

/-- One eviction step (none when nothing is cached). -/
def evictOne (block : Option Rat) (st : PoolState) : Option (PoolState × Evicted) :=
  evictWith block st (lruPick st.entries)

/-- `makeRoom` with fuel. -/
def makeRoomGo (cap : Rat) (block : Option Rat) (need : Rat) :
    Nat → PoolState → List Evicted → Res (PoolState × List Evicted)
  | 0, _, _ => .error "make_room: out of fuel"
  | f + 1, st, acc =>
    if st.used + st.cached + need ≤ cap then .ok (st, acc.reverse)
    else
      match evictOne block st with
      | none => .error "no room even with an empty cache"
      | some (q, ev) => makeRoomGo cap block need f q (ev :: acc)

/-- pools.py `make_room`: evict in `lru` order, one tail block at a time, until
`used + cached + need ≤ cap`; an error when the cache is empty and there is still no room.
Every step either removes a whole entry or takes a whole block `b` from one, so `fuel` rounds
suffice: one per entry plus `⌈size/b⌉` per entry (the "out of fuel" error is unreachable; stated
in docs/lean.md as a conjecture, not proved here). -/
def makeRoom (cap : Rat) (block : Option Rat) (st : PoolState) (need : Rat) :
    Res (PoolState × List Evicted) :=
  makeRoomGo cap block need (fuel block st.entries) st []
where
  /-- An upper bound on the eviction steps that can empty `es`. -/
  fuel (block : Option Rat) (es : List Entry) : Nat :=
    es.foldl (fun n e => n + 1 + (match block with
      | some b => (e.size / b).ceil.toNat
      | none => 0)) 1

/-! ## Entries -/

/-- Entries without those of `owner`. -/
def removeOwner (o : Tid) : List Entry → List Entry
  | [] => []
  | e :: es => if e.owner = o then removeOwner o es else e :: removeOwner o es

/-- pools.py `insert_entry`: replace `owner`'s entry with a fresh one (`last = now`, release
order `rel` = the Config's `next_rel`, which the caller then advances). -/
def insertEntry (st : PoolState) (owner : Tid) (size : Rat) (now : Rat) (rel : Nat) : PoolState :=
  { st with entries := removeOwner owner st.entries ++ [⟨owner, size, now, rel⟩] }

/-- pools.py `drop_entry`: `drop P;` removes the session's own entry now. -/
def dropEntry (st : PoolState) (owner : Tid) : PoolState :=
  { st with entries := removeOwner owner st.entries }

/-- Remove the first entry of `owner` (pools.py's `entries.remove(e)` for `e = entry_of(…)`). -/
def removeFirstOwner (o : Tid) : List Entry → List Entry
  | [] => []
  | e :: es => if e.owner = o then es else e :: removeFirstOwner o es

/-- The limit a `reuse (ρ)` clause puts on the consumed prefix: none without a clause or for
ρ = inf, else `rounddown_block(max(0, ρ))`, exact (pools.py since 84aea69); −inf keeps nothing. -/
def reuseUnits (block : Option Rat) : Option Value → Option Rat
  | none => none
  | some (.fin q) => some (rounddownBlock (max 0 q) block)
  | some .posInf => none
  | some .negInf => some 0

/-- Entries, units consumed and "a dead entry was made", once the own entry `e` is found. -/
def consumeWith (serial : Tid) (nextDead : Nat) (entries : List Entry) (e : Entry) :
    Option Rat → List Entry × Rat × Bool
  | none => (removeFirstOwner serial entries, e.size, false)
  | some l =>
    if 0 < e.size - min e.size l then
      (removeFirstOwner serial entries ++ [⟨Tid.dead nextDead, e.size - min e.size l, e.last, e.rel⟩],
        min e.size l, true)
    else (removeFirstOwner serial entries, min e.size l, false)

/-- pools.py `consume_own_prefix`: remove the session's entry; with a finite `reuse` limit ρ keep
at most `rounddown_block(max(0, ρ))` of it and append the rest as a dead entry (owner
`Tid.dead nextDead`, `-nextDead` on the wire, the entry's age and release order). Returns the state, the units consumed, and
whether a dead entry was made (the caller then advances `next_dead`). -/
def consumeOwnPrefix (block : Option Rat) (st : PoolState) (serial : Tid) (reuseLimit : Option Value)
    (nextDead : Nat) : PoolState × Rat × Bool :=
  match entryOf st serial with
  | none => (st, 0, false)
  | some e =>
    let r := consumeWith serial nextDead st.entries e (reuseUnits block reuseLimit)
    ({ st with entries := r.1 }, r.2.1, r.2.2)

/-- pools.py `units_int`: a pool amount must be finite and not negative; it is kept exact
(non-whole amounts included, serq_spec 84aea69; the name dates from whole amounts). `negative`
words a negative amount as serq_fast does (`{}` the value). -/
def unitsInt (v : Value) (what : String) (negative : String := "") : Res Rat :=
  let neg : String :=
    if negative.isEmpty then s!"{what} is negative ({v.toWire})" else negative.replace "{}" v.toWire
  match v with
  | .fin q =>
    if q < 0 then .error neg
    else .ok q
  | .negInf => .error neg
  | _ => .error s!"{what} is infinite"

/-! ## Allocation and release (the pool part of sessions.py `admit`, growth.py `grow`,
pools.py `release_hold`) -/

/-- After `make_room`: allocate `alloc` units to `serial` (sessions.py `admit`). -/
def allocate (st : PoolState) (serial : Tid) (alloc : Rat) : PoolState :=
  { st with used := st.used + alloc, holders := st.holders ++ [serial], admissions := st.admissions + 1 }

/-- The pool part of an admission: `make_room(alloc)`, then allocate. The caller has checked
the guard `used + roundup_block(max(units, reserve)) ≤ cap` over every pool of the hold. -/
def admitPool (cap : Rat) (block : Option Rat) (st : PoolState) (serial : Tid) (alloc : Rat) :
    Res (PoolState × List Evicted) :=
  match makeRoom cap block st alloc with
  | .error e => .error e
  | .ok (q, ev) => .ok (allocate q serial alloc, ev)

/-- The pool part of a successful growth (growth.py `grow`, after `used + need ≤ cap`). -/
def growPool (cap : Rat) (block : Option Rat) (st : PoolState) (need : Rat) :
    Res (PoolState × List Evicted) :=
  match makeRoom cap block st need with
  | .error e => .error e
  | .ok (q, ev) => .ok ({ q with used := q.used + need }, ev)

/-- Give back `alloc` units and leave the holders. -/
def giveBack (st : PoolState) (serial : Tid) (alloc : Rat) : PoolState :=
  { st with used := st.used - alloc, holders := st.holders.erase serial }

/-- The pool part of pools.py `release_hold`: give back `alloc` units, leave the holders, and
cache `kept` units (already `rounddown_block(min(ℓ, computed))`) when positive. -/
def releasePool (st : PoolState) (serial : Tid) (alloc kept : Rat) (now : Rat) (rel : Nat) : PoolState :=
  if 0 < kept then insertEntry (giveBack st serial alloc) serial kept now rel
  else giveBack st serial alloc

end Pool

end SerqLang

/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Value

/-!
# Pools: allocation, the prefix cache and LRU eviction (language.md §11.4, §11.8)

A pool's state in whole units (`Nat`; docs/state.md: the spec refuses non-integer pool units):
`used` (allocated units), cache `entries` `(owner, size, last, release)`, `holders` (admission
order), the admission `queue`, the stalled `growers`, and the preemption counter. `cap` and
`block` are copied from the static configuration so the invariant is a statement about one
value:

  `Inv p := p.used + cached p ≤ p.cap`          (proved preserved in `SerqLang/Thm/Pool.lean`)

Eviction is block-level LRU: the victim is the entry with the least `(last, release)` among
entries of positive size; one eviction step removes `min(block, size)` units from the victim's
tail (the whole entry for a pool without block size); the victim is chosen again after each
step (`makeRoom`). Written as small structurally recursive functions over lists so that the
proofs are inductions closed by `omega`.
-/

namespace SerqLang

/-- A cache entry. `owner` is a session serial, or a negative number for a dead entry
(−1, −2, … in order of creation). `release` is the global release counter at insertion (a dead
entry keeps the number of the entry it came from). -/
structure Entry where
  owner : Int
  size : Nat
  last : Rat
  release : Nat
  deriving Inhabited

/-- The same entry with another size. -/
def Entry.withSize (e : Entry) (s : Nat) : Entry := ⟨e.owner, s, e.last, e.release⟩

@[simp] theorem Entry.withSize_size (e : Entry) (s : Nat) : (e.withSize s).size = s := rfl

/-- A pool's dynamic state (plus its static `cap` and `block`). -/
structure Pool where
  cap : Nat
  block : Option Nat
  used : Nat
  entries : List Entry
  holders : List Nat
  queue : List Nat
  growers : List Nat
  preemptions : Nat
  deriving Inhabited

/-- One eviction step, as recorded: `[owner, pool, units]`. -/
structure Evicted where
  owner : Int
  units : Nat
  deriving Inhabited

namespace Pool

/-- Σ entry sizes. -/
def cachedOf : List Entry → Nat
  | [] => 0
  | e :: es => e.size + cachedOf es

/-- Cached units of a pool. -/
def cached (p : Pool) : Nat := cachedOf p.entries

/-- The memory invariant. -/
def Inv (p : Pool) : Prop := p.used + p.cached ≤ p.cap

/-- Admission and growth guard: allocated units only; cached units never block. -/
def fits (p : Pool) (need : Nat) : Bool := decide (p.used + need ≤ p.cap)

/-! ## LRU victim -/

/-- Strictly earlier in eviction order: least `last`, ties by `release`. -/
def before (a b : Entry) : Bool :=
  decide (a.last < b.last) || (decide (a.last = b.last) && decide (a.release < b.release))

/-- One step of `lruPick`: combine the head entry with the best pick of the tail. -/
def pickStep (e : Entry) : Option (Nat × Entry) → Option (Nat × Entry)
  | none => if 0 < e.size then some (0, e) else none
  | some (j, x) =>
    if 0 < e.size then
      if before x e = true then some (j + 1, x) else some (0, e)
    else some (j + 1, x)

/-- The index and entry of the LRU victim among entries of positive size (the first of equals). -/
def lruPick : List Entry → Option (Nat × Entry)
  | [] => none
  | e :: es => pickStep e (lruPick es)

/-- Size of the entry at index `i` (0 past the end). -/
def sizeAt : Nat → List Entry → Nat
  | _, [] => 0
  | 0, e :: _ => e.size
  | i + 1, _ :: es => sizeAt i es

/-- Remove `k` units from the tail of the entry at index `i`; an entry left empty is dropped. -/
def shrinkAt (k : Nat) : Nat → List Entry → List Entry
  | _, [] => []
  | 0, e :: es => if e.size ≤ k then es else e.withSize (e.size - k) :: es
  | i + 1, e :: es => e :: shrinkAt k i es

/-- Units removed by one eviction step from an entry of size `s`: one block (at least one unit),
or the whole entry for a pool without block size. -/
def evictAmount (block : Option Nat) (s : Nat) : Nat :=
  match block with
  | none => s
  | some b => max 1 (min b s)

/-- Apply a pick. -/
def evictWith (p : Pool) : Option (Nat × Entry) → Option (Pool × Evicted)
  | none => none
  | some (i, e) =>
    let k := evictAmount p.block e.size
    some ({ p with entries := shrinkAt k i p.entries }, ⟨e.owner, k⟩)

/-- One eviction step (none when the cache is empty). -/
def evictOne (p : Pool) : Option (Pool × Evicted) := evictWith p (lruPick p.entries)

/-- `makeRoom` with fuel; stops when `used + cached + need ≤ cap` or the cache is empty. -/
def makeRoomGo (need : Nat) : Nat → Pool → List Evicted → Pool × List Evicted
  | 0, p, acc => (p, acc.reverse)
  | f + 1, p, acc =>
    if p.used + p.cached + need ≤ p.cap then (p, acc.reverse)
    else
      match evictOne p with
      | none => (p, acc.reverse)
      | some (q, ev) => makeRoomGo need f q (ev :: acc)

/-- Evict in LRU order until `used + cached + need ≤ cap` (or nothing is cached). Each step
removes at least one unit, so `cached + 1` rounds always suffice (`Thm.makeRoom_room`). -/
def makeRoom (p : Pool) (need : Nat) : Pool × List Evicted :=
  makeRoomGo need (p.cached + 1) p []

/-! ## Operations -/

/-- Allocate `alloc` units (already block-rounded) to session `sid` after the guard
`fits p need` with `need ≥ alloc` succeeded: make room, then `used += alloc`, append the
holder. -/
def admit (p : Pool) (sid : Nat) (alloc : Nat) : Pool × List Evicted :=
  let r := makeRoom p alloc
  ({ r.1 with used := r.1.used + alloc, holders := r.1.holders ++ [sid] }, r.2)

/-- A successful growth by `need` units (after `fits p need`): make room, `used += need`. -/
def grow (p : Pool) (need : Nat) : Pool × List Evicted :=
  let r := makeRoom p need
  ({ r.1 with used := r.1.used + need }, r.2)

/-- Entries without those of `owner`. -/
def removeOwner (o : Int) : List Entry → List Entry
  | [] => []
  | e :: es => if e.owner = o then removeOwner o es else e :: removeOwner o es

/-- Size of the first entry of `owner` (0 if none). -/
def ownSize (o : Int) : List Entry → Nat
  | [] => 0
  | e :: es => if e.owner = o then e.size else ownSize o es

/-- Replace the first entry of `owner` by a dead entry `dead` of size `size − taken` (dropped
when empty), keeping its age and release number. -/
def replaceOwn (o dead : Int) (taken : Nat) : List Entry → List Entry
  | [] => []
  | e :: es =>
    if e.owner = o then
      (if e.size - taken = 0 then es else ⟨dead, e.size - taken, e.last, e.release⟩ :: es)
    else e :: replaceOwn o dead taken es

/-- Consume the session's own prefix at admission (only for a hold with a `cache` clause):
take at most `limit` units of its entry (all of it without `reuse`), leave the rest as a dead
entry `dead` (usable by nobody, evicted normally). Returns the pool and the units consumed. -/
def consume (p : Pool) (sid : Nat) (limit : Option Nat) (dead : Int) : Pool × Nat :=
  let e := ownSize sid p.entries
  let taken := match limit with
    | none => e
    | some l => min e l
  ({ p with entries := replaceOwn sid dead taken p.entries }, taken)

/-- Release `alloc` units held by `sid`, caching `keep` units (already `rounddownBlock
(min(ℓ, position))`) as a fresh entry with age `now` and release number `rel`; the session's
previous entry, if any, is replaced. -/
def release (p : Pool) (sid : Nat) (alloc keep : Nat) (now : Rat) (rel : Nat) : Pool :=
  let es := removeOwner sid p.entries
  let es := if 0 < keep then es ++ [⟨sid, keep, now, rel⟩] else es
  { p with used := p.used - alloc, holders := p.holders.erase sid, entries := es }

/-- `drop P;`: remove the session's own entry. -/
def drop (p : Pool) (sid : Nat) : Pool :=
  { p with entries := removeOwner sid p.entries }

end Pool

end SerqLang

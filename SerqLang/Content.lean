/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Value

/-!
# Content pools: physical blocks, the free queue, the identity map (docs/content.md §3)

A pool declared `share content` is `B = cap / b` physical blocks, each with a reference count
(`refs`) and an identity (`ident`, or none); the **free queue** lists block ids, head first
(initially `0 … B−1`); the **identity map** lists, per identity, the physical blocks holding it in
insertion order. The four operations of docs/content.md §3 on that state:

* `reference` — a block is referenced once more (it leaves the free queue if it had no
  reference): a hit block when touched, a new block when allocated;
* `allocOne` — a new block is the free-queue head: its identity (if any) evicted
  (`evictIdent`), then referenced;
* `releaseOne` / `releaseHeadOne` (both `releaseBy`) — one reference fewer; an identified block reaching 0 joins
  the free-queue tail, an unidentified one its head (vLLM reuses never-hit blocks first);
* `identifyOne` — a full block gets its identity, appended to the map's list for it.

Lists indexed by block id are read with `nth` / `nthId` and written with `upd` (defined here,
with their lemmas in `SerqLang/Thm/Content.lean`, so the proofs rest on nothing but these
definitions). Membership in the free queue is `inQ`. The invariants proved there:
`referenced + identifiedFree ≤ B` (so `used + cached ≤ cap`, `b` units a block) for every state,
and "every block is referenced or in the free queue" preserved by each operation.
-/

namespace SerqLang
namespace Content

/-- A block's identity (docs/content.md §2): `["p", a, j]` — block `j` inside prefix `a`'s
sequence — or `["h", h, j]` — block `j` of history `h`. -/
inductive Ident where
  | pre (a : Value) (j : Nat)
  | hist (h : Value) (j : Nat)
  deriving DecidableEq, Inhabited

/-- The state of a content pool. `refs` and `ident` are indexed by block id and have length `B`. -/
structure CState where
  /-- units per block (`b`) -/
  block : Nat := 0
  refs : List Nat
  ident : List (Option Ident)
  free : List Nat
  idmap : List (Ident × List Nat)
  deriving Inhabited

/-! ## Lists indexed by block id -/

/-- The `i`-th element of a list of naturals (0 past the end). -/
def nth : List Nat → Nat → Nat
  | [], _ => 0
  | x :: _, 0 => x
  | _ :: xs, i + 1 => nth xs i

/-- The `i`-th identity (none past the end). -/
def nthId : List (Option Ident) → Nat → Option Ident
  | [], _ => none
  | x :: _, 0 => x
  | _ :: xs, i + 1 => nthId xs i

/-- The list with position `i` replaced by `v` (unchanged past the end). -/
def upd {α : Type} : List α → Nat → α → List α
  | [], _, _ => []
  | _ :: xs, 0, v => v :: xs
  | x :: xs, i + 1, v => x :: upd xs i v

/-- `n` zeros. -/
def zeros : Nat → List Nat
  | 0 => []
  | n + 1 => 0 :: zeros n

/-- `s, s+1, …, s+n−1`. -/
def seqFrom : Nat → Nat → List Nat
  | _, 0 => []
  | s, n + 1 => s :: seqFrom (s + 1) n

/-- `i` occurs in the queue. -/
def inQ (i : Nat) : List Nat → Prop
  | [] => False
  | x :: xs => i = x ∨ inQ i xs

/-- The queue without the first occurrence of `i` (Python's `list.remove`). -/
def removeQ (i : Nat) : List Nat → List Nat
  | [] => []
  | x :: xs => if x = i then xs else x :: removeQ i xs

/-! ## The identity map -/

/-- The blocks holding an identity, in insertion order (`[]` when none). -/
def blocksOf (m : List (Ident × List Nat)) (id : Ident) : List Nat :=
  match m.find? (fun e => e.1 == id) with
  | some e => e.2
  | none => []

/-- The map's first physical block for an identity (a lookup takes the first). -/
def firstBlock (m : List (Ident × List Nat)) (id : Ident) : Option Nat := (blocksOf m id).head?

/-- Append block `i` to the list of `id` (a new identity goes at the end). -/
def mapAppend (m : List (Ident × List Nat)) (id : Ident) (i : Nat) : List (Ident × List Nat) :=
  if m.any (fun e => e.1 == id) then m.map (fun e => if e.1 == id then (e.1, e.2 ++ [i]) else e)
  else m ++ [(id, [i])]

/-- Remove block `i` from the list of `id`; an identity left with no block leaves the map. -/
def mapRemove (m : List (Ident × List Nat)) (id : Ident) (i : Nat) : List (Ident × List Nat) :=
  (m.map (fun e => if e.1 == id then (e.1, removeQ i e.2) else e)).filter (fun e => !e.2.isEmpty)

/-! ## The state and its operations -/

/-- config.py `ContentState.empty`: a fresh content pool of `B` blocks of `b` units: nothing referenced, nothing identified, the free queue
`0 … B−1`. -/
def CState.init (b B : Nat) : CState :=
  { block := b, refs := zeros B, ident := (zeros B).map (fun _ => none), free := seqFrom 0 B,
    idmap := [] }

/-- Blocks with `refs > 0`. -/
def referenced : List Nat → Nat
  | [] => 0
  | r :: rs => (if 0 < r then 1 else 0) + referenced rs

/-- Identified blocks with `refs = 0` (the cache). -/
def identifiedFree : List Nat → List (Option Ident) → Nat
  | [], _ => 0
  | _ :: _, [] => 0
  | _ :: rs, none :: ids => identifiedFree rs ids
  | r :: rs, some _ :: ids => (if r = 0 then 1 else 0) + identifiedFree rs ids

/-- content.py `reference`: one more reference to block `i`; a block that had none leaves the
free queue (the first occurrence, Python's `list.remove`). -/
def reference (st : CState) (i : Nat) : CState :=
  { st with refs := upd st.refs i (nth st.refs i + 1),
            free := if nth st.refs i = 0 then removeQ i st.free else st.free }

/-- The eviction half of content.py `allocate`: block `i` forgets its identity, which leaves the
map (an identity left with no block is removed). -/
def evictIdent (st : CState) (i : Nat) : CState :=
  match nthId st.ident i with
  | some id => { st with ident := upd st.ident i none, idmap := mapRemove st.idmap id i }
  | none => st

/-- One step of content.py `allocate`: the free queue's head is evicted (if identified) and
referenced; also whether an identity was evicted. `none` when the queue is empty. -/
def allocOne (st : CState) : Option (CState × Nat × Bool) :=
  match st.free with
  | [] => none
  | hd :: _ => some (reference (evictIdent st hd) hd, hd, (nthId st.ident hd).isSome)

/-- One step of content.py `release`: a reference fewer; a block reaching 0 is put in the free
queue by `push` (its identity kept until it is popped). -/
def releaseBy (push : Nat → List Nat → List Nat) (st : CState) (i : Nat) : CState :=
  { st with refs := upd st.refs i (nth st.refs i - 1),
            free := if nth st.refs i - 1 = 0 then push i st.free else st.free }

/-- For an identified block: it joins the free queue's tail (cached blocks leave in LRU order). -/
def releaseOne (st : CState) (i : Nat) : CState := releaseBy (fun i l => l ++ [i]) st i

/-- For a block without identity: it joins the free queue's head (it can never be a hit, so it
is reused first). -/
def releaseHeadOne (st : CState) (i : Nat) : CState := releaseBy (fun i l => i :: l) st i

/-- One step of content.py `identify`: block `i` gets identity `id`, appended to the map's list. -/
def identifyOne (st : CState) (i : Nat) (id : Ident) : CState :=
  { st with ident := upd st.ident i (some id), idmap := mapAppend st.idmap id i }

/-! ## Content, identities and hits (content.py `identity`, `hit`, `unreferenced_hits`,
`free_blocks`) -/

/-- program.py `prefixes`: per declared prefix key, its parent key and its total length. -/
abbrev Prefixes := List (Value × Option Value × Nat)

/-- The parent and total of prefix `k`. -/
def prefixOf? (pre : Prefixes) (k : Value) : Option (Option Value × Nat) :=
  (pre.find? (fun x => x.1 == k)).map (·.2)

/-- `k, parent(k), parent(parent(k)), …` (the fuel bounds the walk; parents are declared before
their children, so the chain is never longer than the declarations). -/
def chainOf (pre : Prefixes) : Nat → Value → List Value
  | 0, _ => []
  | f + 1, k =>
    k :: (match prefixOf? pre k with
      | some (some parent, _) => chainOf pre f parent
      | _ => [])

/-- `content (p, n, h)` as read at an admission attempt. -/
abbrev Clause := Value × Value × Value

/-- content.py `identity`: block `j` (of `b` units) of a hold with content `(p, n, h)` is
`["p", a, j]` when it lies inside the shared part (`(j+1)·b ≤ n`), `a` the root-most prefix on
`p`'s chain whose total reaches `(j+1)·b`; else `["h", h, j]`. -/
def identity (pre : Prefixes) (c : Clause) (j b : Nat) : Ident :=
  let (p, n, h) := c
  -- the root-most prefix on p's chain that reaches block j (`none` is not reached:
  -- `check_content` made n ≤ total(p))
  let root := (chainOf pre (pre.length + 1) p).reverse.find? fun x =>
    decide ((j + 1) * b ≤ ((prefixOf? pre x).map (·.2)).getD 0)
  if Value.le (Value.ofNat ((j + 1) * b)) n then
    (match root with
     | some a => .pre a j
     | none => .hist h j)
  else .hist h j

/-- The count of leading blocks `k, k+1, …` whose identities are all in the map. -/
def hitGo (pre : Prefixes) (st : CState) (c : Clause) : Nat → Nat → Nat
  | 0, k => k
  | f + 1, k =>
    if (blocksOf st.idmap (identity pre c k st.block)).isEmpty then k else hitGo pre st c f (k + 1)

/-- content.py `hit`: `k`, the number of leading blocks of `content` whose identities are all in
the map (0 without a `content` clause). Identities of distinct blocks differ, so `k` never exceeds
the map's size, the fuel. -/
def hit (pre : Prefixes) (st : CState) (c : Option Clause) : Nat :=
  match c with
  | none => 0
  | some c => hitGo pre st c (st.idmap.length + 1) 0

/-! ## A content tier (content.py `tier_hit`, `tier_touch`, `tier_store`; docs/content.md §6)

A tier's blocks are never referenced: all of them sit in its free queue, the identified ones in
LRU order behind the free ones. -/

/-- The count of consecutive blocks `k, k+1, …` whose identities are in the map (the fuel is the
map's size + 1: identities of distinct blocks differ). -/
def tierHitGo (pre : Prefixes) (st : CState) (c : Clause) (k : Nat) : Nat → Nat → Nat
  | 0, t => t
  | f + 1, t =>
    if (blocksOf st.idmap (identity pre c (k + t) st.block)).isEmpty then t else tierHitGo pre st c k f (t + 1)

/-- content.py `tier_hit`: `t`, how many consecutive blocks `k, k+1, …` of the content the tier
holds (the source's hit stopped at block `k`). -/
def tierHit (pre : Prefixes) (st : CState) (c : Clause) (k : Nat) : Nat :=
  tierHitGo pre st c k (st.idmap.length + 1) 0

/-- Block `i` moves to the free queue's tail (the first occurrence removed, as `list.remove`). -/
def toTail (st : CState) (i : Nat) : CState := { st with free := removeQ i st.free ++ [i] }

/-- content.py `tier_touch`: blocks `k … k+t−1` were loaded back; each stays and moves to the
tail, last block first, so the tier evicts a prefix's tail before its head. -/
def tierTouch (pre : Prefixes) (c : Clause) (k t : Nat) (st : CState) : CState :=
  ((List.range t).reverse).foldl (fun acc i =>
    toTail acc ((firstBlock acc.idmap (identity pre c (k + i) acc.block)).getD 0)) st

-- conjecture (not proved): on a tier none of whose blocks is referenced, `tierTouch` and
-- `tierStore` keep the rules `Invariants.contentInvariants` checks after every step (the free
-- queue is every unreferenced block once, unidentified ones ahead of identified ones; the map
-- lists each identified block under its identity and no other); serq_spec checks them at run
-- time (vector `spill_content_tier`).

/-- content.py `tier_store`: the free queue's head forgets its identity (evicted, dropped) and
keeps `id`, then joins the tail; also whether an identity was evicted. `none` when the tier has
no block. -/
def tierStore (st : CState) (id : Ident) : Option (CState × Bool) :=
  match st.free with
  | [] => none
  | hd :: _ => some (toTail (identifyOne (evictIdent st hd) hd id) hd, (nthId st.ident hd).isSome)

/-- content.py `unreferenced_hits`: of the first `r` hit blocks, those whose first physical block
has no reference. -/
def unreferencedHits (pre : Prefixes) (st : CState) (c : Clause) (r : Nat) : Nat :=
  ((List.range r).filter fun j =>
    nth st.refs ((firstBlock st.idmap (identity pre c j st.block)).getD 0) == 0).length

/-- content.py `free_blocks`: `B − referenced`, the blocks a new allocation may take. -/
def freeBlocks (st : CState) : Nat := st.refs.length - referenced st.refs

/-! ## Several blocks at once (content.py `touch`, `allocate`, `identify`, `release`), with what
the caller books: blocks newly referenced (`used += b` each), evictions, blocks freed -/

/-- content.py `touch`: reference the first `r` hit blocks in block order, each the map's first
for its identity, appending them to the hold's list; also how many had no reference. -/
def touchBlocks (pre : Prefixes) (c : Clause) : Nat → Nat → CState → List Nat → Nat →
    CState × List Nat × Nat
  | 0, _, st, blocks, fresh => (st, blocks, fresh)
  | f + 1, j, st, blocks, fresh =>
    let block := (firstBlock st.idmap (identity pre c j st.block)).getD 0
    let fresh := if nth st.refs block = 0 then fresh + 1 else fresh
    touchBlocks pre c f (j + 1) (reference st block) (blocks ++ [block]) fresh

/-- content.py `allocate`: `count` new blocks, each the free queue's head (`allocOne`), appended
to the hold's list; also per block whether it evicted an identity and whether it had no
reference. `none` when the free queue runs out. -/
def allocateBlocks : Nat → CState → List Nat → List (Bool × Bool) → Option (CState × List Nat × List (Bool × Bool))
  | 0, st, blocks, acc => some (st, blocks, acc)
  | n + 1, st, blocks, acc =>
    match allocOne st with
    | none => none
    | some (st', hd, evicted) =>
      allocateBlocks n st' (blocks ++ [hd]) (acc ++ [(evicted, nth st.refs hd == 0)])

/-- content.py `identify`: blocks `j < ⌊pos/b⌋` of the hold without an identity get theirs. -/
def identifyBlocks (pre : Prefixes) (c : Clause) (blocks : List Nat) (st : CState) (pos : Nat) :
    CState :=
  let upto := min (pos / st.block) blocks.length
  (List.range upto).foldl (fun acc j =>
    let block := blocks.getD j 0
    match nthId acc.ident block with
    | some _ => acc
    | none => identifyOne acc block (identity pre c j acc.block)) st

/-- content.py `release`: the hold's blocks lose a reference; also how many reached 0 (`used −=
b` each). content.py walks the blocks once in reverse order and makes the queue `U ++ free ++ I`
(`U`, `I`: the unidentified / identified blocks reaching 0, in that order). Here in two passes of
one-block steps (a release changes no identity, so each block is in exactly one pass): the
identified blocks in reverse order, each to the tail (`free ++ I`); then the unidentified ones
in block order, each to the head, so the last pushed — the first in reverse order — ends first
(`U ++ …`). -/
def releaseBlocks (st : CState) (blocks : List Nat) : CState × Nat :=
  let tail := blocks.reverse.foldl (fun (acc : CState × Nat) block =>
    match nthId acc.1.ident block with
    | some _ =>
      let st' := releaseOne acc.1 block
      (st', if nth st'.refs block = 0 then acc.2 + 1 else acc.2)
    | none => acc) (st, 0)
  blocks.foldl (fun (acc : CState × Nat) block =>
    match nthId acc.1.ident block with
    | none =>
      let st' := releaseHeadOne acc.1 block
      (st', if nth st'.refs block = 0 then acc.2 + 1 else acc.2)
    | some _ => acc) tail

/-- The memory invariant's structural half: every block is referenced or in the free queue. -/
def Inv (st : CState) : Prop := ∀ i, i < st.refs.length → 0 < nth st.refs i ∨ inQ i st.free

/-- No block occurs twice in the queue. -/
def Nodup : List Nat → Prop
  | [] => True
  | x :: xs => ¬ inQ x xs ∧ Nodup xs

/-- The free queue's half: every queued block is unreferenced, and none is queued twice. -/
def FreeInv (st : CState) : Prop := (∀ i, inQ i st.free → nth st.refs i = 0) ∧ Nodup st.free

end Content
end SerqLang

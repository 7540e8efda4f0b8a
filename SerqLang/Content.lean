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
* `releaseOne` — one reference fewer; a block reaching 0 joins the free-queue tail;
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

/-- A fresh content pool of `B` blocks: nothing referenced, nothing identified, the free queue
`0 … B−1`. -/
def CState.init (B : Nat) : CState :=
  { refs := zeros B, ident := (zeros B).map (fun _ => none), free := seqFrom 0 B, idmap := [] }

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

/-- One step of content.py `release`: a reference fewer; a block reaching 0 joins the free
queue's tail, its identity kept until it is popped. -/
def releaseOne (st : CState) (i : Nat) : CState :=
  { st with refs := upd st.refs i (nth st.refs i - 1),
            free := if nth st.refs i - 1 = 0 then st.free ++ [i] else st.free }

/-- One step of content.py `identify`: block `i` gets identity `id`, appended to the map's list. -/
def identifyOne (st : CState) (i : Nat) (id : Ident) : CState :=
  { st with ident := upd st.ident i (some id), idmap := mapAppend st.idmap id i }

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

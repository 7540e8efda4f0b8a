/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Eval

/-!
# Content pools in the step monad (python/serq_spec/content.py, docs/content.md §2–§3)

The functions of content.py that read or write the configuration. Each is the pure operation of
`SerqLang.Content` (whose invariants `SerqLang.Thm.Content` proves) applied to the pool's block
state, plus what content.py books beside it: `used` (`b` per block whose references leave or
reach 0), `evicted_units` and the `evicted` record (`[null, pool, b]`) per evicted identity.
A hold's block list is passed in and returned (content.py appends to the hold's own list).
-/

namespace SerqLang
namespace ContentPool

/-- The block state of content pool `p`. -/
def contentOf (p : Nat) : M Content.CState := do
  match (← pool p).content with
  | some cs => return cs
  | none => internalError s!"internal: pool {p} is no content pool"

def setContent (p : Nat) (cs : Content.CState) : M Unit := do
  setPool p { (← pool p) with content := some cs }

/-- content.py `identity`. -/
def identity (c : Content.Clause) (j b : Nat) : M Content.Ident := do
  return Content.identity (← getProg).prefixes c j b

/-- content.py `check_content`: `p` a declared key or 0; `n` whole, `0 ≤ n ≤ total(p)` — a
run-time guard. -/
def checkContent (p : Nat) (c : Content.Clause) (loc : Option Loc) : M Unit := do
  let prog ← getProg
  let (pk, n, _) := c
  let name ← poolName p
  let declared := Content.prefixOf? prog.prefixes pk
  if pk != Value.zero && declared.isNone then
    specError s!"pool {name}: content prefix {pk.toWire} is no declared prefix key (nor 0)" loc
  let total : Nat := if pk == Value.zero then 0 else (declared.map (·.2)).getD 0
  let ok : Bool := match n with
    | .fin q => q.den == 1 && decide (0 ≤ q) && decide (q ≤ (total : Rat))
    | _ => false
  if !ok then
    specError (s!"pool {name}: content length {n.toWire} is not a whole number from 0 to {total} " ++
      s!"(the tokens of prefix {pk.toWire})") loc

/-- content.py `hit`. -/
def hit (p : Nat) (c : Option Content.Clause) : M Nat := do
  match c with
  | none => return 0
  | some _ => return Content.hit (← getProg).prefixes (← contentOf p) c

/-- content.py `unreferenced_hits`. -/
def unreferencedHits (p : Nat) (c : Content.Clause) (r : Nat) : M Nat := do
  return Content.unreferencedHits (← getProg).prefixes (← contentOf p) c r

/-- content.py `free_blocks`. -/
def freeBlocks (p : Nat) : M Nat := do
  return Content.freeBlocks (← contentOf p)

/-- content.py `touch`: reference the first `r` hit blocks (each the map's first for its
identity), appended to the hold's list; `used` grows by `b` per block that had no reference. -/
def touch (p : Nat) (c : Content.Clause) (r : Nat) (blocks : List Nat) : M (List Nat) := do
  let cs ← contentOf p
  let (cs', blocks', fresh) := Content.touchBlocks (← getProg).prefixes c r 0 cs blocks 0
  setContent p cs'
  let st ← pool p
  setPool p { st with used := st.used + fresh * cs.block }
  return blocks'

/-- content.py `allocate`: `count` new blocks from the free queue's head, appended to the
hold's list; an identified head is evicted (`evicted_units += b`, the record `[null, pool, b]`). -/
def allocate (p count : Nat) (blocks : List Nat) : M (List Nat) := do
  let cs ← contentOf p
  let name ← poolName p
  match Content.allocateBlocks count cs blocks [] with
  | none => specError s!"pool {name}: no free block to allocate"
  | some (cs', blocks', info) =>
    setContent p cs'
    let st ← pool p
    let evicted := (info.filter (·.1)).length
    let fresh := (info.filter (·.2)).length
    setPool p { st with used := st.used + fresh * cs.block,
                        evictedUnits := st.evictedUnits + evicted * cs.block }
    for (ev, _) in info do
      if ev then
        modifyRec fun r => { r with evicted := r.evicted.push (.arr [.null, .str name, CJ.amt cs.block]) }
    return blocks'

/-- content.py `tier_hit`: the blocks `k, k+1, …` of the content that tier `q` holds. -/
def tierHit (q : Nat) (c : Content.Clause) (k : Nat) : M Nat := do
  return Content.tierHit (← getProg).prefixes (← contentOf q) c k

/-- content.py `tier_touch`: the `t` blocks after `k`, loaded back, move to tier `q`'s tail. -/
def tierTouch (q : Nat) (c : Content.Clause) (k t : Nat) : M Unit := do
  setContent q (Content.tierTouch (← getProg).prefixes c k t (← contentOf q))

/-- content.py `tier_store`: tier `q` keeps `id` in its free queue's head block, which joins the
tail; an identity it held is evicted (`evicted_units += b`, the record `[null, tier, b]`). -/
def tierStore (q : Nat) (id : Content.Ident) : M Unit := do
  let cs ← contentOf q
  let name ← poolName q
  match Content.tierStore cs id with
  | none => specError s!"pool {name}: a content tier of no block keeps nothing"
  | some (cs', evicted) =>
    setContent q cs'
    if evicted then
      let st ← pool q
      setPool q { st with evictedUnits := st.evictedUnits + cs.block }
      modifyRec fun r => { r with evicted := r.evicted.push (.arr [.null, .str name, CJ.amt cs.block]) }

/-- content.py `identify`: the hold's blocks `j < ⌊pos/b⌋` without an identity get theirs. The
position is a pool amount (`Rat`); `⌊⌊pos⌋/b⌋ = ⌊pos/b⌋` for the whole block `b` of a content
pool, so the pure part counts on `⌊pos⌋`. -/
def identify (p : Nat) (c : Option Content.Clause) (blocks : List Nat) (pos : Rat) : M Unit := do
  match c with
  | none => pure ()
  | some c => setContent p (Content.identifyBlocks (← getProg).prefixes c blocks (← contentOf p) pos.floor.toNat)

/-- content.py `release`: the hold's blocks in reverse order lose a reference; at 0 an identified
block joins the free queue's tail, an unidentified one its head (`Content.releaseBlocks`), and
`used` drops by `b`. -/
def release (p : Nat) (blocks : List Nat) : M Unit := do
  let cs ← contentOf p
  let (cs', freed) := Content.releaseBlocks cs blocks
  setContent p cs'
  let st ← pool p
  setPool p { st with used := st.used - freed * cs.block }

end ContentPool
end SerqLang

/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Pool

/-!
# The memory invariant of a pool

`PoolState.Inv cap st := st.used + st.cached ≤ cap` (docs/language.md §11.1, docs/state.md):

* `evictOne_some`: an eviction step keeps `used` and strictly shrinks the cache;
  `evictOne_none`: no step is possible only when nothing is cached;
* `makeRoom_ok`: a successful `makeRoom cap block st need` ends with
  `used + cached + need ≤ cap`, the same `used`, and no more cache than before;
  `makeRoom_inv`: so it preserves the invariant;
* `admitPool_inv`, `growPool_inv`: a successful admission or growth ends in a state satisfying
  the invariant — whatever the state before (make_room made room for exactly what is allocated);
* `consumeOwnPrefix_inv`, `dropEntry_inv`: taking or dropping the own prefix preserves it;
* `releasePool_inv`: releasing `alloc ≥ 0` units and caching `kept ≤ alloc` preserves it.

Pool amounts are rationals (`Rat`, as serq_spec's since 84aea69), so the arithmetic steps are
closed by `grind`, whose linear-arithmetic solver (`linarith`) decides linear facts over any
ordered additive group it finds instances for; core has them for `Rat` (lean4#10077: the
`Lean.Grind.Field`/`OrderedRing` instances, #10107: `AddCommGroup`). Where a sum of entry sizes
must not grow when entries are removed, the entries' sizes are assumed ≥ 0 (`SizesNonneg`,
a hypothesis here; that the step keeps it is conjecture 7 of docs/lean.md).

Core tactics only (`induction`, `cases`, `rw`, `injection`, `subst`, `grind`). No `sorry`, no
axiom of ours, no `native_decide`.
-/

namespace SerqLang
namespace Pool
open PoolState

/-! ## Lemmas on entry lists -/

/-- Every entry has a size ≥ 0 (what the step makes: positive kept amounts and dead rests,
sizes shrunk only while positive). -/
def SizesNonneg : List Entry → Prop
  | [] => True
  | e :: es => 0 ≤ e.size ∧ SizesNonneg es

theorem sizesNonneg_cons {e : Entry} {es : List Entry} :
    SizesNonneg (e :: es) ↔ 0 ≤ e.size ∧ SizesNonneg es := Iff.rfl

theorem sizesNonneg_append : ∀ (l : List Entry) (e : Entry), SizesNonneg l → 0 ≤ e.size →
    SizesNonneg (l ++ [e])
  | [], e, _, he => by
    show 0 ≤ e.size ∧ True
    exact ⟨he, trivial⟩
  | x :: xs, e, h, he => by
    show 0 ≤ x.size ∧ SizesNonneg (xs ++ [e])
    exact ⟨(sizesNonneg_cons.mp h).1, sizesNonneg_append xs e (sizesNonneg_cons.mp h).2 he⟩

theorem cachedOf_nil : cachedOf [] = 0 := rfl

theorem cachedOf_cons (e : Entry) (es : List Entry) :
    cachedOf (e :: es) = e.size + cachedOf es := rfl

theorem cachedOf_append (l : List Entry) (e : Entry) :
    cachedOf (l ++ [e]) = cachedOf l + e.size := by
  induction l with
  | nil => simp only [List.nil_append, cachedOf_cons, cachedOf_nil] <;> grind
  | cons x xs ih => simp only [List.cons_append, cachedOf_cons, ih] <;> grind

theorem shrinkAt_le (k : Rat) (hk : 0 ≤ k) : ∀ (i : Nat) (l : List Entry),
    0 ≤ sizeAt i l → cachedOf (shrinkAt k i l) ≤ cachedOf l := by
  intro i l
  induction l generalizing i with
  | nil => intro _; cases i <;> exact Rat.le_refl
  | cons e es ih =>
    cases i with
    | zero =>
      intro hs
      have hs' : 0 ≤ e.size := hs
      show cachedOf (if e.size ≤ k then es else e.withSize (e.size - k) :: es) ≤ cachedOf (e :: es)
      by_cases h : e.size ≤ k
      · rw [if_pos h, cachedOf_cons]; grind
      · rw [if_neg h, cachedOf_cons, cachedOf_cons, Entry.withSize_size]; grind
    | succ j =>
      intro hs
      have hs' : 0 ≤ sizeAt j es := hs
      show cachedOf (e :: shrinkAt k j es) ≤ cachedOf (e :: es)
      rw [cachedOf_cons, cachedOf_cons]
      have := ih j hs'
      grind

theorem shrinkAt_lt (k : Rat) (hk : 0 < k) : ∀ (i : Nat) (l : List Entry),
    0 < sizeAt i l → cachedOf (shrinkAt k i l) < cachedOf l := by
  intro i l
  induction l generalizing i with
  | nil =>
    intro hs
    cases i <;> exact absurd hs (Rat.not_lt.mpr Rat.le_refl)
  | cons e es ih =>
    cases i with
    | zero =>
      intro hs
      have hs' : 0 < e.size := hs
      show cachedOf (if e.size ≤ k then es else e.withSize (e.size - k) :: es) < cachedOf (e :: es)
      by_cases h : e.size ≤ k
      · rw [if_pos h, cachedOf_cons]; grind
      · rw [if_neg h, cachedOf_cons, cachedOf_cons, Entry.withSize_size]; grind
    | succ j =>
      intro hs
      have hs' : 0 < sizeAt j es := hs
      show cachedOf (e :: shrinkAt k j es) < cachedOf (e :: es)
      rw [cachedOf_cons, cachedOf_cons]
      have := ih j hs'
      grind

/-- The pick is an entry of positive size, found at the index returned. -/
theorem lruPick_spec : ∀ (l : List Entry) (i : Nat) (x : Entry),
    lruPick l = some (i, x) → sizeAt i l = x.size ∧ 0 < x.size := by
  intro l
  induction l with
  | nil =>
    intro i x h
    first
      | exact Option.noConfusion h
      | simp [lruPick] at h
  | cons e es ih =>
    intro i x h
    have h0 : pickStep e (lruPick es) = some (i, x) := h
    cases hr : lruPick es with
    | none =>
      rw [hr] at h0
      have h1 : (if 0 < e.size then some (0, e) else none) = some (i, x) := h0
      by_cases hc : 0 < e.size
      · rw [if_pos hc] at h1
        injection h1 with h2
        injection h2 with h3 h4
        subst h3; subst h4
        exact ⟨rfl, hc⟩
      · rw [if_neg hc] at h1
        first
          | exact Option.noConfusion h1
          | cases h1
          | simp at h1
    | some q =>
      obtain ⟨j, y⟩ := q
      rw [hr] at h0
      have h1 : (if 0 < e.size then
          (if before y e = true then some (j + 1, y) else some (0, e))
        else some (j + 1, y)) = some (i, x) := h0
      have hy := ih j y hr
      by_cases hc : 0 < e.size
      · rw [if_pos hc] at h1
        by_cases hb : before y e = true
        · rw [if_pos hb] at h1
          injection h1 with h2
          injection h2 with h3 h4
          subst h3; subst h4
          exact hy
        · rw [if_neg hb] at h1
          injection h1 with h2
          injection h2 with h3 h4
          subst h3; subst h4
          exact ⟨rfl, hc⟩
      · rw [if_neg hc] at h1
        injection h1 with h2
        injection h2 with h3 h4
        subst h3; subst h4
        exact hy

/-- No pick means nothing is cached: no entry has a positive size. -/
theorem lruPick_none : ∀ (l : List Entry), lruPick l = none → cachedOf l ≤ 0 := by
  intro l
  induction l with
  | nil => intro _; exact Rat.le_refl
  | cons e es ih =>
    intro h
    have h0 : pickStep e (lruPick es) = none := h
    cases hr : lruPick es with
    | none =>
      rw [hr] at h0
      have h1 : (if 0 < e.size then some (0, e) else none) = none := h0
      by_cases hc : 0 < e.size
      · rw [if_pos hc] at h1
        first
          | exact Option.noConfusion h1
          | cases h1
          | simp at h1
      · have he := ih hr
        have hc' : e.size ≤ 0 := Rat.not_lt.mp hc
        rw [cachedOf_cons]
        grind
    | some q =>
      obtain ⟨j, y⟩ := q
      rw [hr] at h0
      have h1 : (if 0 < e.size then
          (if before y e = true then some (j + 1, y) else some (0, e))
        else some (j + 1, y)) = none := h0
      by_cases hc : 0 < e.size
      · rw [if_pos hc] at h1
        by_cases hb : before y e = true
        · rw [if_pos hb] at h1
          first
            | exact Option.noConfusion h1
            | cases h1
            | simp at h1
        · rw [if_neg hb] at h1
          first
            | exact Option.noConfusion h1
            | cases h1
            | simp at h1
      · rw [if_neg hc] at h1
        first
          | exact Option.noConfusion h1
          | cases h1
          | simp at h1
theorem evictAmount_pos (block : Option Rat) (s : Rat) (hs : 0 < s) :
    0 < evictAmount block s := by
  cases block with
  | none => exact hs
  | some b =>
    show 0 < (if 0 < b then (if b ≤ s then b else s) else s)
    by_cases hb : 0 < b
    · rw [if_pos hb]
      by_cases hbs : b ≤ s
      · rw [if_pos hbs]; exact hb
      · rw [if_neg hbs]; exact hs
    · rw [if_neg hb]; exact hs

theorem removeOwner_le (o : Tid) : ∀ (l : List Entry), SizesNonneg l →
    cachedOf (removeOwner o l) ≤ cachedOf l := by
  intro l
  induction l with
  | nil => intro _; exact Rat.le_refl
  | cons e es ih =>
    intro hnn
    have he : 0 ≤ e.size := (sizesNonneg_cons.mp hnn).1
    have := ih (sizesNonneg_cons.mp hnn).2
    show cachedOf (if e.owner = o then removeOwner o es else e :: removeOwner o es) ≤
      cachedOf (e :: es)
    by_cases h : e.owner = o
    · rw [if_pos h, cachedOf_cons]; grind
    · rw [if_neg h, cachedOf_cons, cachedOf_cons]; grind

/-- Removing the first entry of `o` removes exactly the size of `entryOf`'s entry. -/
theorem removeFirstOwner_le (o : Tid) : ∀ (l : List Entry), SizesNonneg l →
    cachedOf (removeFirstOwner o l) ≤ cachedOf l := by
  intro l
  induction l with
  | nil => intro _; exact Rat.le_refl
  | cons e es ih =>
    intro hnn
    have he : 0 ≤ e.size := (sizesNonneg_cons.mp hnn).1
    have := ih (sizesNonneg_cons.mp hnn).2
    show cachedOf (if e.owner = o then es else e :: removeFirstOwner o es) ≤ cachedOf (e :: es)
    by_cases h : e.owner = o
    · rw [if_pos h, cachedOf_cons]; grind
    · rw [if_neg h, cachedOf_cons, cachedOf_cons]; grind

/-! ## Entry sizes stay ≥ 0 (`SizesNonneg`, the hypothesis of the lemmas above) -/

theorem removeOwner_nonneg (o : Tid) : ∀ (l : List Entry), SizesNonneg l →
    SizesNonneg (removeOwner o l)
  | [], _ => trivial
  | e :: es, h => by
    have ⟨he, hs⟩ := sizesNonneg_cons.mp h
    show SizesNonneg (if e.owner = o then removeOwner o es else e :: removeOwner o es)
    by_cases hc : e.owner = o
    · rw [if_pos hc]; exact removeOwner_nonneg o es hs
    · rw [if_neg hc]; exact sizesNonneg_cons.mpr ⟨he, removeOwner_nonneg o es hs⟩

theorem removeFirstOwner_nonneg (o : Tid) : ∀ (l : List Entry), SizesNonneg l →
    SizesNonneg (removeFirstOwner o l)
  | [], _ => trivial
  | e :: es, h => by
    have ⟨he, hs⟩ := sizesNonneg_cons.mp h
    show SizesNonneg (if e.owner = o then es else e :: removeFirstOwner o es)
    by_cases hc : e.owner = o
    · rw [if_pos hc]; exact hs
    · rw [if_neg hc]; exact sizesNonneg_cons.mpr ⟨he, removeFirstOwner_nonneg o es hs⟩

/-- Shrinking an entry leaves it out or positive. -/
theorem shrinkAt_nonneg (k : Rat) : ∀ (i : Nat) (l : List Entry), SizesNonneg l →
    SizesNonneg (shrinkAt k i l) := by
  intro i l
  induction l generalizing i with
  | nil => intro _; cases i <;> trivial
  | cons e es ih =>
    intro h
    have ⟨he, hs⟩ := sizesNonneg_cons.mp h
    cases i with
    | zero =>
      show SizesNonneg (if e.size ≤ k then es else e.withSize (e.size - k) :: es)
      by_cases hk : e.size ≤ k
      · rw [if_pos hk]; exact hs
      · rw [if_neg hk]
        have hlt : k < e.size := Rat.not_le.mp hk
        have hpos : 0 ≤ (e.withSize (e.size - k)).size := by rw [Entry.withSize_size]; grind
        exact sizesNonneg_cons.mpr ⟨hpos, hs⟩
    | succ j =>
      show SizesNonneg (e :: shrinkAt k j es)
      exact sizesNonneg_cons.mpr ⟨he, ih j hs⟩

/-- Removing the first entry of `o` removes exactly the entry `find?` returns. -/
theorem removeFirstOwner_find (o : Tid) : ∀ (l : List Entry) (e : Entry),
    l.find? (fun x => x.owner == o) = some e →
    cachedOf (removeFirstOwner o l) + e.size = cachedOf l := by
  intro l
  induction l with
  | nil => intro e h; first | exact Option.noConfusion h | cases h | simp at h
  | cons x xs ih =>
    intro e h
    by_cases hx : x.owner = o
    · have hb : (x.owner == o) = true := by simp [hx]
      have hxe : x = e := by
        first
          | (rw [List.find?_cons_of_pos (p := fun y => y.owner == o) (h := hb)] at h; exact Option.some.inj h)
          | (simp [List.find?, hx] at h; exact h)
      rw [← hxe, removeFirstOwner, if_pos hx, cachedOf_cons]
      grind
    · have hb : ¬ (x.owner == o) = true := by simp [hx]
      have h' : xs.find? (fun y => y.owner == o) = some e := by
        first
          | (rw [List.find?_cons_of_neg (p := fun y => y.owner == o) (h := hb)] at h; exact h)
          | (simp [List.find?, hx] at h; exact h)
      have := ih e h'
      rw [removeFirstOwner, if_neg hx, cachedOf_cons, cachedOf_cons]
      grind

/-- `consumeWith` never adds cache: the dead rest is at most the entry removed (an entry of size
≥ 0, a limit ≥ 0). -/
theorem consumeWith_le (serial : Tid) (nextDead : Nat) (entries : List Entry) (e : Entry)
    (hsum : cachedOf (removeFirstOwner serial entries) + e.size = cachedOf entries)
    (he : 0 ≤ e.size) :
    ∀ (lim : Option Rat), (∀ l, lim = some l → 0 ≤ l) →
      cachedOf (consumeWith serial nextDead entries e lim).1 ≤ cachedOf entries := by
  intro lim hlim
  cases lim with
  | none =>
    show cachedOf (removeFirstOwner serial entries) ≤ cachedOf entries
    grind
  | some l =>
    have hl : 0 ≤ l := hlim l rfl
    have hm : 0 ≤ min e.size l := by
      first
        | (rw [Rat.min_def]; split <;> assumption)
        | grind
        | (show 0 ≤ (if e.size ≤ l then e.size else l); split <;> assumption)
    by_cases hp : 0 < e.size - min e.size l
    · have h0 : (consumeWith serial nextDead entries e (some l)).1 =
          removeFirstOwner serial entries ++
            [⟨Tid.dead nextDead, e.size - min e.size l, e.last, e.rel⟩] := by
        first
          | (rw [consumeWith, if_pos hp] <;> rfl)
          | simp only [consumeWith, if_pos hp]
      rw [h0, cachedOf_append]
      show cachedOf (removeFirstOwner serial entries) + (e.size - min e.size l) ≤
        cachedOf entries
      grind
    · have h0 : (consumeWith serial nextDead entries e (some l)).1 =
          removeFirstOwner serial entries := by
        first
          | (rw [consumeWith, if_neg hp] <;> rfl)
          | simp only [consumeWith, if_neg hp]
      rw [h0]
      grind

/-- The consumed prefix's dead rest is inserted only when positive. -/
theorem consumeWith_nonneg (serial : Tid) (nextDead : Nat) (entries : List Entry) (e : Entry)
    (hn : SizesNonneg entries) :
    ∀ (lim : Option Rat), SizesNonneg (consumeWith serial nextDead entries e lim).1 := by
  intro lim
  cases lim with
  | none => exact removeFirstOwner_nonneg serial entries hn
  | some l =>
    by_cases hp : 0 < e.size - min e.size l
    · have h0 : (consumeWith serial nextDead entries e (some l)).1 =
          removeFirstOwner serial entries ++
            [⟨Tid.dead nextDead, e.size - min e.size l, e.last, e.rel⟩] := by
        first
          | (rw [consumeWith, if_pos hp] <;> rfl)
          | simp only [consumeWith, if_pos hp]
      rw [h0]
      exact sizesNonneg_append _ _ (removeFirstOwner_nonneg serial entries hn) (Rat.le_of_lt hp)
    · have h0 : (consumeWith serial nextDead entries e (some l)).1 =
          removeFirstOwner serial entries := by
        first
          | (rw [consumeWith, if_neg hp] <;> rfl)
          | simp only [consumeWith, if_neg hp]
      rw [h0]
      exact removeFirstOwner_nonneg serial entries hn

/-! ## Eviction and make_room -/

/-- An eviction step keeps `used` and strictly shrinks the cache. -/
theorem evictOne_some (block : Option Rat) (st q : PoolState) (ev : Evicted)
    (h : evictOne block st = some (q, ev)) : q.used = st.used ∧ q.cached < st.cached := by
  have h0 : evictWith block st (lruPick st.entries) = some (q, ev) := h
  cases hr : lruPick st.entries with
  | none =>
    rw [hr] at h0
    first
      | exact Option.noConfusion h0
      | cases h0
      | simp at h0
  | some r =>
    obtain ⟨i, e⟩ := r
    rw [hr] at h0
    have h1 : some ({ st with entries := shrinkAt (evictAmount block e.size) i st.entries,
        evictedUnits := st.evictedUnits + evictAmount block e.size },
        (⟨e.owner, evictAmount block e.size⟩ : Evicted)) = some (q, ev) := h0
    injection h1 with h2
    injection h2 with h3 h4
    subst h3
    have hs := lruPick_spec st.entries i e hr
    refine ⟨rfl, ?_⟩
    show cachedOf (shrinkAt (evictAmount block e.size) i st.entries) < cachedOf st.entries
    apply shrinkAt_lt _ (evictAmount_pos block e.size hs.2)
    rw [hs.1]
    exact hs.2

/-- An eviction step keeps entry sizes ≥ 0. -/
theorem evictOne_nonneg (block : Option Rat) (st q : PoolState) (ev : Evicted)
    (h : evictOne block st = some (q, ev)) (hn : SizesNonneg st.entries) : SizesNonneg q.entries := by
  have h0 : evictWith block st (lruPick st.entries) = some (q, ev) := h
  cases hr : lruPick st.entries with
  | none =>
    rw [hr] at h0
    first
      | exact Option.noConfusion h0
      | cases h0
      | simp at h0
  | some r =>
    obtain ⟨i, e⟩ := r
    rw [hr] at h0
    have h1 : some ({ st with entries := shrinkAt (evictAmount block e.size) i st.entries,
        evictedUnits := st.evictedUnits + evictAmount block e.size },
        (⟨e.owner, evictAmount block e.size⟩ : Evicted)) = some (q, ev) := h0
    injection h1 with h2
    injection h2 with h3 h4
    subst h3
    exact shrinkAt_nonneg (evictAmount block e.size) i st.entries hn

/-- No eviction step is possible only when nothing is cached. -/
theorem evictOne_none (block : Option Rat) (st : PoolState) (h : evictOne block st = none) :
    st.cached ≤ 0 := by
  have h0 : evictWith block st (lruPick st.entries) = none := h
  cases hr : lruPick st.entries with
  | none => exact lruPick_none st.entries hr
  | some r =>
    obtain ⟨i, e⟩ := r
    rw [hr] at h0
    first
      | exact Option.noConfusion h0
      | cases h0
      | simp at h0
/-- What a successful `makeRoomGo` guarantees. -/
theorem makeRoomGo_ok (cap : Rat) (block : Option Rat) (need : Rat) :
    ∀ (f : Nat) (st : PoolState) (acc : List Evicted) (q : PoolState) (evs : List Evicted),
      makeRoomGo cap block need f st acc = .ok (q, evs) →
      q.used + q.cached + need ≤ cap ∧ q.used = st.used ∧ q.cached ≤ st.cached ∧
      (SizesNonneg st.entries → SizesNonneg q.entries) := by
  intro f
  induction f with
  | zero =>
    intro st acc q evs h
    have h0 : (Except.error "make_room: out of fuel" : Res (PoolState × List Evicted)) =
        .ok (q, evs) := h
    first
      | exact Except.noConfusion h0
      | cases h0
      | simp at h0
  | succ f ih =>
    intro st acc q evs h
    by_cases hroom : st.used + st.cached + need ≤ cap
    · have h0 : (Except.ok (st, acc.reverse) : Res (PoolState × List Evicted)) = .ok (q, evs) := by
        rw [makeRoomGo, if_pos hroom] at h
        exact h
      injection h0 with h1
      injection h1 with h2 h3
      subst h2
      exact ⟨hroom, rfl, Rat.le_refl, id⟩
    · cases he : evictOne block st with
      | none =>
        have h0 : (Except.error "no room even with an empty cache" :
            Res (PoolState × List Evicted)) = .ok (q, evs) := by
          rw [makeRoomGo, if_neg hroom, he] at h
          exact h
        first
          | exact Except.noConfusion h0
          | cases h0
          | simp at h0
      | some r =>
        obtain ⟨st', ev⟩ := r
        have h0 : makeRoomGo cap block need f st' (ev :: acc) = .ok (q, evs) := by
          rw [makeRoomGo, if_neg hroom, he] at h
          exact h
        have ⟨hu, hlt⟩ := evictOne_some block st st' ev he
        have ⟨hroom', hu', hle', hn'⟩ := ih st' (ev :: acc) q evs h0
        refine ⟨hroom', ?_, ?_, fun hn => hn' (evictOne_nonneg block st st' ev he hn)⟩ <;> grind

theorem makeRoom_ok (cap : Rat) (block : Option Rat) (st : PoolState) (need : Rat)
    (q : PoolState) (evs : List Evicted) (h : makeRoom cap block st need = .ok (q, evs)) :
    q.used + q.cached + need ≤ cap ∧ q.used = st.used ∧ q.cached ≤ st.cached ∧
      (SizesNonneg st.entries → SizesNonneg q.entries) :=
  makeRoomGo_ok cap block need (makeRoom.fuel block st.entries) st [] q evs h

/-- `make_room` preserves the invariant (it never touches `used` and never adds cache). -/
theorem makeRoom_inv (cap : Rat) (block : Option Rat) (st : PoolState) (need : Rat)
    (q : PoolState) (evs : List Evicted) (hinv : Inv cap st)
    (h : makeRoom cap block st need = .ok (q, evs)) : Inv cap q := by
  have ⟨_, hu, hle, _⟩ := makeRoom_ok cap block st need q evs h
  have hp : st.used + st.cached ≤ cap := hinv
  show q.used + q.cached ≤ cap
  grind

/-! ## Admission, growth, consumption, drop, release -/

/-- A successful admission is `make_room`, then `allocate`. -/
theorem admitPool_eq (cap : Rat) (block : Option Rat) (st : PoolState) (serial : Tid) (alloc : Rat)
    (r : PoolState) (evs : List Evicted) (h : admitPool cap block st serial alloc = .ok (r, evs)) :
    ∃ q, makeRoom cap block st alloc = .ok (q, evs) ∧ r = allocate q serial alloc := by
  cases hm : makeRoom cap block st alloc with
  | error e =>
    have h0 : (Except.error e : Res (PoolState × List Evicted)) = .ok (r, evs) := by
      unfold admitPool at h
      rw [hm] at h
      exact h
    first
      | exact Except.noConfusion h0
      | cases h0
      | simp at h0
  | ok x =>
    obtain ⟨q, ev⟩ := x
    have h0 : (Except.ok (allocate q serial alloc, ev) : Res (PoolState × List Evicted)) =
        .ok (r, evs) := by
      unfold admitPool at h
      rw [hm] at h
      exact h
    injection h0 with h1
    injection h1 with h2 h3
    subst h2
    subst h3
    exact ⟨q, hm, rfl⟩

/-- A successful growth is `make_room`, then `used += need`. -/
theorem growPool_eq (cap : Rat) (block : Option Rat) (st : PoolState) (need : Rat)
    (r : PoolState) (evs : List Evicted) (h : growPool cap block st need = .ok (r, evs)) :
    ∃ q, makeRoom cap block st need = .ok (q, evs) ∧ r = { q with used := q.used + need } := by
  cases hm : makeRoom cap block st need with
  | error e =>
    have h0 : (Except.error e : Res (PoolState × List Evicted)) = .ok (r, evs) := by
      unfold growPool at h
      rw [hm] at h
      exact h
    first
      | exact Except.noConfusion h0
      | cases h0
      | simp at h0
  | ok x =>
    obtain ⟨q, ev⟩ := x
    have h0 : (Except.ok ({ q with used := q.used + need }, ev) : Res (PoolState × List Evicted)) =
        .ok (r, evs) := by
      unfold growPool at h
      rw [hm] at h
      exact h
    injection h0 with h1
    injection h1 with h2 h3
    subst h2
    subst h3
    exact ⟨q, hm, rfl⟩

/-- A successful admission ends in a state satisfying the invariant. -/
theorem admitPool_inv (cap : Rat) (block : Option Rat) (st : PoolState) (serial : Tid) (alloc : Rat)
    (r : PoolState) (evs : List Evicted) (h : admitPool cap block st serial alloc = .ok (r, evs)) :
    Inv cap r := by
  obtain ⟨q, hm, rfl⟩ := admitPool_eq cap block st serial alloc r evs h
  have ⟨hroom, _, _, _⟩ := makeRoom_ok cap block st alloc q evs hm
  show q.used + alloc + q.cached ≤ cap
  grind

/-- A successful growth ends in a state satisfying the invariant. -/
theorem growPool_inv (cap : Rat) (block : Option Rat) (st : PoolState) (need : Rat)
    (r : PoolState) (evs : List Evicted) (h : growPool cap block st need = .ok (r, evs)) :
    Inv cap r := by
  obtain ⟨q, hm, rfl⟩ := growPool_eq cap block st need r evs h
  have ⟨hroom, _, _, _⟩ := makeRoom_ok cap block st need q evs hm
  show q.used + need + q.cached ≤ cap
  grind

/-- Admission keeps entry sizes ≥ 0 (only `make_room` touches the entries). -/
theorem admitPool_nonneg (cap : Rat) (block : Option Rat) (st : PoolState) (serial : Tid) (alloc : Rat)
    (r : PoolState) (evs : List Evicted) (h : admitPool cap block st serial alloc = .ok (r, evs))
    (hn : SizesNonneg st.entries) : SizesNonneg r.entries := by
  obtain ⟨q, hm, rfl⟩ := admitPool_eq cap block st serial alloc r evs h
  exact (makeRoom_ok cap block st alloc q evs hm).2.2.2 hn

/-- Growth keeps entry sizes ≥ 0. -/
theorem growPool_nonneg (cap : Rat) (block : Option Rat) (st : PoolState) (need : Rat)
    (r : PoolState) (evs : List Evicted) (h : growPool cap block st need = .ok (r, evs))
    (hn : SizesNonneg st.entries) : SizesNonneg r.entries := by
  obtain ⟨q, hm, rfl⟩ := growPool_eq cap block st need r evs h
  exact (makeRoom_ok cap block st need q evs hm).2.2.2 hn

/-- Consuming the own prefix never adds cache and never touches `used` (entries of size ≥ 0, a
`reuse` limit ≥ 0: `rounddown_block(max(0, ρ))` with a positive block; conjecture 7). -/
theorem consumeOwnPrefix_none (block : Option Rat) (st : PoolState) (serial : Tid)
    (reuseLimit : Option Value) (nextDead : Nat) (hf : entryOf st serial = none) :
    consumeOwnPrefix block st serial reuseLimit nextDead = (st, 0, false) := by
  unfold consumeOwnPrefix
  rw [hf] <;> rfl

theorem consumeOwnPrefix_some (block : Option Rat) (st : PoolState) (serial : Tid)
    (reuseLimit : Option Value) (nextDead : Nat) (e : Entry) (hf : entryOf st serial = some e) :
    (consumeOwnPrefix block st serial reuseLimit nextDead).1 =
      { st with entries := (consumeWith serial nextDead st.entries e (reuseUnits block reuseLimit)).1 } := by
  unfold consumeOwnPrefix
  rw [hf] <;> rfl

theorem consumeOwnPrefix_cached (block : Option Rat) (st : PoolState) (serial : Tid)
    (reuseLimit : Option Value) (nextDead : Nat) (hnn : SizesNonneg st.entries)
    (hlim : ∀ l, reuseUnits block reuseLimit = some l → 0 ≤ l) :
    (consumeOwnPrefix block st serial reuseLimit nextDead).1.cached ≤ st.cached ∧
    (consumeOwnPrefix block st serial reuseLimit nextDead).1.used = st.used := by
  cases hf : entryOf st serial with
  | none =>
    rw [consumeOwnPrefix_none block st serial reuseLimit nextDead hf]
    exact ⟨Rat.le_refl, rfl⟩
  | some e =>
    have h0 := consumeOwnPrefix_some block st serial reuseLimit nextDead e hf
    have hsum := removeFirstOwner_find serial st.entries e hf
    have hrm := removeFirstOwner_le serial st.entries hnn
    have he : 0 ≤ e.size := by grind
    have hle := consumeWith_le serial nextDead st.entries e hsum he (reuseUnits block reuseLimit) hlim
    rw [h0]
    exact ⟨hle, rfl⟩

theorem consumeOwnPrefix_inv (cap : Rat) (block : Option Rat) (st : PoolState) (serial : Tid)
    (reuseLimit : Option Value) (nextDead : Nat) (hinv : Inv cap st)
    (hnn : SizesNonneg st.entries) (hlim : ∀ l, reuseUnits block reuseLimit = some l → 0 ≤ l) :
    Inv cap (consumeOwnPrefix block st serial reuseLimit nextDead).1 := by
  have ⟨hc, hu⟩ := consumeOwnPrefix_cached block st serial reuseLimit nextDead hnn hlim
  have hp : st.used + st.cached ≤ cap := hinv
  show (consumeOwnPrefix block st serial reuseLimit nextDead).1.used +
    (consumeOwnPrefix block st serial reuseLimit nextDead).1.cached ≤ cap
  grind

/-- Consuming the own prefix keeps entry sizes ≥ 0 (a dead rest is made only when positive). -/
theorem consumeOwnPrefix_nonneg (block : Option Rat) (st : PoolState) (serial : Tid)
    (reuseLimit : Option Value) (nextDead : Nat) (hn : SizesNonneg st.entries) :
    SizesNonneg (consumeOwnPrefix block st serial reuseLimit nextDead).1.entries := by
  cases hf : entryOf st serial with
  | none =>
    rw [consumeOwnPrefix_none block st serial reuseLimit nextDead hf]
    exact hn
  | some e =>
    rw [consumeOwnPrefix_some block st serial reuseLimit nextDead e hf]
    exact consumeWith_nonneg serial nextDead st.entries e hn (reuseUnits block reuseLimit)

theorem dropEntry_nonneg (st : PoolState) (owner : Tid) (hn : SizesNonneg st.entries) :
    SizesNonneg (dropEntry st owner).entries :=
  removeOwner_nonneg owner st.entries hn

theorem dropEntry_inv (cap : Rat) (st : PoolState) (owner : Tid) (hinv : Inv cap st)
    (hnn : SizesNonneg st.entries) : Inv cap (dropEntry st owner) := by
  have hr := removeOwner_le owner st.entries hnn
  have hp : st.used + cachedOf st.entries ≤ cap := hinv
  show st.used + cachedOf (removeOwner owner st.entries) ≤ cap
  grind

/-- Release keeps the invariant when the allocation released is ≥ 0 and what is cached is at
most the allocation (`kept = rounddown(min(ℓ, computed)) ≤ computed ≤ alloc`, since ae9b5fe
`computed = min(position, alloc)` after an advance). Over the rationals `used − alloc` is exact,
so no `alloc ≤ used` is needed. -/
theorem releasePool_inv (cap : Rat) (st : PoolState) (serial : Tid) (alloc kept : Rat) (now : Rat)
    (rel : Nat) (hinv : Inv cap st) (halloc : 0 ≤ alloc) (hkept : kept ≤ alloc)
    (hnn : SizesNonneg st.entries) :
    Inv cap (releasePool st serial alloc kept now rel) := by
  have hp : st.used + cachedOf st.entries ≤ cap := hinv
  have hr := removeOwner_le serial st.entries hnn
  by_cases hk : 0 < kept
  · have h0 : releasePool st serial alloc kept now rel =
        insertEntry (giveBack st serial alloc) serial kept now rel := by
      unfold releasePool
      rw [if_pos hk]
    rw [h0]
    show st.used - alloc + cachedOf (removeOwner serial st.entries ++
      [(⟨serial, kept, now, rel⟩ : Entry)]) ≤ cap
    rw [cachedOf_append]
    show st.used - alloc + (cachedOf (removeOwner serial st.entries) + kept) ≤ cap
    grind
  · have h0 : releasePool st serial alloc kept now rel = giveBack st serial alloc := by
      unfold releasePool
      rw [if_neg hk]
    rw [h0]
    show st.used - alloc + cachedOf st.entries ≤ cap
    grind

/-- Release keeps entry sizes ≥ 0 (it inserts an entry only when the kept amount is positive). -/
theorem releasePool_nonneg (st : PoolState) (serial : Tid) (alloc kept : Rat) (now : Rat) (rel : Nat)
    (hn : SizesNonneg st.entries) : SizesNonneg (releasePool st serial alloc kept now rel).entries := by
  by_cases hk : 0 < kept
  · have h0 : releasePool st serial alloc kept now rel =
        insertEntry (giveBack st serial alloc) serial kept now rel := by
      unfold releasePool
      rw [if_pos hk]
    rw [h0]
    show SizesNonneg (removeOwner serial st.entries ++ [(⟨serial, kept, now, rel⟩ : Entry)])
    exact sizesNonneg_append _ _ (removeOwner_nonneg serial st.entries hn) (Rat.le_of_lt hk)
  · have h0 : releasePool st serial alloc kept now rel = giveBack st serial alloc := by
      unfold releasePool
      rw [if_neg hk]
    rw [h0]
    exact hn

end Pool
end SerqLang

/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Pool

/-!
# The memory invariant of a pool

`Pool.Inv p := p.used + p.cached ≤ p.cap` is preserved by every pool operation:

* `evictOne_inv`, `makeRoom_inv`: eviction never touches `used`, `cap`, and never adds cache;
* `makeRoom_room`: `makeRoom` ends with room for `need` or with an empty cache;
* `admit_inv`, `grow_inv`: after the guard `used + need ≤ cap` (allocated units only — cached
  units never block), allocating `alloc ≤ need` units keeps the invariant;
* `consume_inv`: taking the own prefix (the rest becomes a dead entry) keeps it;
* `release_inv`: releasing an allocation and caching at most that much keeps it;
* `drop_inv`.

Core tactics only (`induction`, `cases`, `omega`, `simp only`, `rw`). Nothing here uses
`sorry`, an axiom of ours or `native_decide`.
-/

namespace SerqLang
namespace Pool

/-! ## Lemmas on entry lists -/

theorem cachedOf_nil : cachedOf [] = 0 := rfl

theorem cachedOf_cons (e : Entry) (es : List Entry) :
    cachedOf (e :: es) = e.size + cachedOf es := rfl

theorem cachedOf_append (l : List Entry) (e : Entry) :
    cachedOf (l ++ [e]) = cachedOf l + e.size := by
  induction l with
  | nil => simp only [List.nil_append, cachedOf_cons, cachedOf_nil] <;> omega
  | cons x xs ih => simp only [List.cons_append, cachedOf_cons, ih] <;> omega

theorem shrinkAt_le (k : Nat) : ∀ (i : Nat) (l : List Entry),
    cachedOf (shrinkAt k i l) ≤ cachedOf l := by
  intro i l
  induction l generalizing i with
  | nil => cases i <;> exact Nat.le_refl 0
  | cons e es ih =>
    cases i with
    | zero =>
      show cachedOf (if e.size ≤ k then es else e.withSize (e.size - k) :: es) ≤ cachedOf (e :: es)
      by_cases h : e.size ≤ k
      · rw [if_pos h, cachedOf_cons]; omega
      · rw [if_neg h, cachedOf_cons, cachedOf_cons, Entry.withSize_size]; omega
    | succ j =>
      show cachedOf (e :: shrinkAt k j es) ≤ cachedOf (e :: es)
      rw [cachedOf_cons, cachedOf_cons]
      have := ih j
      omega

theorem shrinkAt_lt (k : Nat) (hk : 0 < k) : ∀ (i : Nat) (l : List Entry),
    0 < sizeAt i l → cachedOf (shrinkAt k i l) < cachedOf l := by
  intro i l
  induction l generalizing i with
  | nil =>
    intro hs
    cases i <;> exact absurd hs (Nat.lt_irrefl 0)
  | cons e es ih =>
    cases i with
    | zero =>
      intro hs
      have hs' : 0 < e.size := hs
      show cachedOf (if e.size ≤ k then es else e.withSize (e.size - k) :: es) < cachedOf (e :: es)
      by_cases h : e.size ≤ k
      · rw [if_pos h, cachedOf_cons]; omega
      · rw [if_neg h, cachedOf_cons, cachedOf_cons, Entry.withSize_size]; omega
    | succ j =>
      intro hs
      have hs' : 0 < sizeAt j es := hs
      show cachedOf (e :: shrinkAt k j es) < cachedOf (e :: es)
      rw [cachedOf_cons, cachedOf_cons]
      have := ih j hs'
      omega

/-- The pick is an entry of positive size, at the index returned. -/
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
        exact Option.noConfusion h1
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

/-- No pick means nothing is cached. -/
theorem lruPick_none : ∀ (l : List Entry), lruPick l = none → cachedOf l = 0 := by
  intro l
  induction l with
  | nil => intro _; rfl
  | cons e es ih =>
    intro h
    have h0 : pickStep e (lruPick es) = none := h
    cases hr : lruPick es with
    | none =>
      rw [hr] at h0
      have h1 : (if 0 < e.size then some (0, e) else none) = none := h0
      by_cases hc : 0 < e.size
      · rw [if_pos hc] at h1
        exact Option.noConfusion h1
      · have he := ih hr
        rw [cachedOf_cons, he]
        omega
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
          exact Option.noConfusion h1
        · rw [if_neg hb] at h1
          exact Option.noConfusion h1
      · rw [if_neg hc] at h1
        exact Option.noConfusion h1

theorem evictAmount_pos (block : Option Nat) (s : Nat) (hs : 0 < s) :
    0 < evictAmount block s := by
  cases block with
  | none => exact hs
  | some b =>
    show 0 < max 1 (min b s)
    first
      | exact Nat.lt_of_lt_of_le Nat.zero_lt_one (Nat.le_max_left 1 _)
      | omega

/-! ## Eviction -/

/-- An eviction step keeps `used` and `cap` and strictly shrinks the cache. -/
theorem evictOne_some (p q : Pool) (ev : Evicted) (h : evictOne p = some (q, ev)) :
    q.used = p.used ∧ q.cap = p.cap ∧ q.cached < p.cached := by
  have h0 : evictWith p (lruPick p.entries) = some (q, ev) := h
  cases hr : lruPick p.entries with
  | none =>
    rw [hr] at h0
    exact Option.noConfusion h0
  | some r =>
    obtain ⟨i, e⟩ := r
    rw [hr] at h0
    have h1 : some ({ p with entries := shrinkAt (evictAmount p.block e.size) i p.entries },
        (⟨e.owner, evictAmount p.block e.size⟩ : Evicted)) = some (q, ev) := h0
    injection h1 with h2
    injection h2 with h3 h4
    subst h3
    have hs := lruPick_spec p.entries i e hr
    refine ⟨rfl, rfl, ?_⟩
    show cachedOf (shrinkAt (evictAmount p.block e.size) i p.entries) < cachedOf p.entries
    apply shrinkAt_lt _ (evictAmount_pos p.block e.size hs.2)
    rw [hs.1]
    exact hs.2

/-- No eviction step is possible only when nothing is cached. -/
theorem evictOne_none (p : Pool) (h : evictOne p = none) : p.cached = 0 := by
  have h0 : evictWith p (lruPick p.entries) = none := h
  cases hr : lruPick p.entries with
  | none => exact lruPick_none p.entries hr
  | some r =>
    obtain ⟨i, e⟩ := r
    rw [hr] at h0
    exact Option.noConfusion h0

theorem evictOne_inv (p q : Pool) (ev : Evicted) (hp : Inv p) (h : evictOne p = some (q, ev)) :
    Inv q := by
  have ⟨hu, hc, hlt⟩ := evictOne_some p q ev h
  have hp' : p.used + p.cached ≤ p.cap := hp
  show q.used + q.cached ≤ q.cap
  omega

/-- `makeRoomGo` keeps `used` and `cap` and never grows the cache. -/
theorem makeRoomGo_mono (need : Nat) : ∀ (f : Nat) (p : Pool) (acc : List Evicted),
    (makeRoomGo need f p acc).1.used = p.used ∧ (makeRoomGo need f p acc).1.cap = p.cap ∧
    (makeRoomGo need f p acc).1.cached ≤ p.cached := by
  intro f
  induction f with
  | zero => intro p acc; exact ⟨rfl, rfl, Nat.le_refl _⟩
  | succ f ih =>
    intro p acc
    by_cases hroom : p.used + p.cached + need ≤ p.cap
    · have e1 : makeRoomGo need (f + 1) p acc = (p, acc.reverse) := by
        first
          | (rw [makeRoomGo, if_pos hroom])
          | simp only [makeRoomGo, if_pos hroom]
      rw [e1]
      exact ⟨rfl, rfl, Nat.le_refl _⟩
    · cases he : evictOne p with
      | none =>
        have e1 : makeRoomGo need (f + 1) p acc = (p, acc.reverse) := by
          first
            | (rw [makeRoomGo, if_neg hroom, he] <;> rfl)
            | simp only [makeRoomGo, if_neg hroom, he]
        rw [e1]
        exact ⟨rfl, rfl, Nat.le_refl _⟩
      | some r =>
        obtain ⟨q, ev⟩ := r
        have e1 : makeRoomGo need (f + 1) p acc = makeRoomGo need f q (ev :: acc) := by
          first
            | (rw [makeRoomGo, if_neg hroom, he] <;> rfl)
            | simp only [makeRoomGo, if_neg hroom, he]
        rw [e1]
        have ⟨hu, hc, hlt⟩ := evictOne_some p q ev he
        have ⟨hu', hc', hle'⟩ := ih q (ev :: acc)
        refine ⟨?_, ?_, ?_⟩ <;> omega

/-- With enough fuel, `makeRoomGo` ends with room for `need` or with an empty cache. -/
theorem makeRoomGo_room (need : Nat) : ∀ (f : Nat) (p : Pool) (acc : List Evicted),
    p.cached < f →
    (makeRoomGo need f p acc).1.used + (makeRoomGo need f p acc).1.cached + need ≤
        (makeRoomGo need f p acc).1.cap ∨
      (makeRoomGo need f p acc).1.cached = 0 := by
  intro f
  induction f with
  | zero => intro p acc hf; exact absurd hf (Nat.not_lt_zero _)
  | succ f ih =>
    intro p acc hf
    by_cases hroom : p.used + p.cached + need ≤ p.cap
    · have e1 : makeRoomGo need (f + 1) p acc = (p, acc.reverse) := by
        first
          | (rw [makeRoomGo, if_pos hroom])
          | simp only [makeRoomGo, if_pos hroom]
      rw [e1]
      exact Or.inl hroom
    · cases he : evictOne p with
      | none =>
        have e1 : makeRoomGo need (f + 1) p acc = (p, acc.reverse) := by
          first
            | (rw [makeRoomGo, if_neg hroom, he] <;> rfl)
            | simp only [makeRoomGo, if_neg hroom, he]
        rw [e1]
        exact Or.inr (evictOne_none p he)
      | some r =>
        obtain ⟨q, ev⟩ := r
        have e1 : makeRoomGo need (f + 1) p acc = makeRoomGo need f q (ev :: acc) := by
          first
            | (rw [makeRoomGo, if_neg hroom, he] <;> rfl)
            | simp only [makeRoomGo, if_neg hroom, he]
        rw [e1]
        have ⟨_, _, hlt⟩ := evictOne_some p q ev he
        exact ih q (ev :: acc) (by omega)

theorem makeRoom_room (p : Pool) (need : Nat) :
    (makeRoom p need).1.used + (makeRoom p need).1.cached + need ≤ (makeRoom p need).1.cap ∨
      (makeRoom p need).1.cached = 0 :=
  makeRoomGo_room need (p.cached + 1) p [] (Nat.lt_succ_self _)

theorem makeRoom_mono (p : Pool) (need : Nat) :
    (makeRoom p need).1.used = p.used ∧ (makeRoom p need).1.cap = p.cap ∧
      (makeRoom p need).1.cached ≤ p.cached :=
  makeRoomGo_mono need (p.cached + 1) p []

theorem makeRoom_inv (p : Pool) (need : Nat) (hp : Inv p) : Inv (makeRoom p need).1 := by
  have ⟨hu, hc, hle⟩ := makeRoom_mono p need
  have hp' : p.used + p.cached ≤ p.cap := hp
  show (makeRoom p need).1.used + (makeRoom p need).1.cached ≤ (makeRoom p need).1.cap
  omega

/-! ## Admission, growth, consumption, release -/

/-- Admission keeps the invariant when the guard held for (at least) the allocated units. -/
theorem admit_inv (p : Pool) (sid alloc : Nat) (hp : Inv p) (hfit : p.used + alloc ≤ p.cap) :
    Inv (admit p sid alloc).1 := by
  have ⟨hu, hc, _⟩ := makeRoom_mono p alloc
  have hroom := makeRoom_room p alloc
  have hp' : p.used + p.cached ≤ p.cap := hp
  show (makeRoom p alloc).1.used + alloc + (makeRoom p alloc).1.cached ≤ (makeRoom p alloc).1.cap
  rcases hroom with h | h <;> omega

/-- A successful growth keeps the invariant (same argument as admission). -/
theorem grow_inv (p : Pool) (need : Nat) (hp : Inv p) (hfit : p.used + need ≤ p.cap) :
    Inv (grow p need).1 := by
  have ⟨hu, hc, _⟩ := makeRoom_mono p need
  have hroom := makeRoom_room p need
  have hp' : p.used + p.cached ≤ p.cap := hp
  show (makeRoom p need).1.used + need + (makeRoom p need).1.cached ≤ (makeRoom p need).1.cap
  rcases hroom with h | h <;> omega

theorem removeOwner_le (o : Int) : ∀ (l : List Entry), cachedOf (removeOwner o l) ≤ cachedOf l := by
  intro l
  induction l with
  | nil => exact Nat.le_refl 0
  | cons e es ih =>
    show cachedOf (if e.owner = o then removeOwner o es else e :: removeOwner o es) ≤
      cachedOf (e :: es)
    by_cases h : e.owner = o
    · rw [if_pos h, cachedOf_cons]; omega
    · rw [if_neg h, cachedOf_cons, cachedOf_cons]; omega

theorem replaceOwn_le (o dead : Int) (taken : Nat) : ∀ (l : List Entry),
    cachedOf (replaceOwn o dead taken l) ≤ cachedOf l := by
  intro l
  induction l with
  | nil => exact Nat.le_refl 0
  | cons e es ih =>
    show cachedOf (if e.owner = o then
        (if e.size - taken = 0 then es else ⟨dead, e.size - taken, e.last, e.release⟩ :: es)
      else e :: replaceOwn o dead taken es) ≤ cachedOf (e :: es)
    by_cases h : e.owner = o
    · rw [if_pos h]
      by_cases hz : e.size - taken = 0
      · rw [if_pos hz, cachedOf_cons]; omega
      · rw [if_neg hz, cachedOf_cons, cachedOf_cons]
        show e.size - taken + cachedOf es ≤ e.size + cachedOf es
        omega
    · rw [if_neg h, cachedOf_cons, cachedOf_cons]; omega

theorem consume_inv (p : Pool) (sid : Nat) (limit : Option Nat) (dead : Int) (hp : Inv p) :
    Inv (consume p sid limit dead).1 :=
  Nat.le_trans (Nat.add_le_add_left (replaceOwn_le _ _ _ p.entries) p.used) hp

/-- Release keeps the invariant when the allocation released is part of `used` and what is
cached is at most the allocation (`keep = rounddown(min(ℓ, position)) ≤ position ≤ alloc`). -/
theorem release_inv (p : Pool) (sid alloc keep : Nat) (now : Rat) (rel : Nat) (hp : Inv p)
    (halloc : alloc ≤ p.used) (hkeep : keep ≤ alloc) :
    Inv (release p sid alloc keep now rel) := by
  have hp' : p.used + cachedOf p.entries ≤ p.cap := hp
  have hr := removeOwner_le (sid : Int) p.entries
  show p.used - alloc + cachedOf (if 0 < keep then removeOwner (sid : Int) p.entries ++
      [(⟨(sid : Int), keep, now, rel⟩ : Entry)] else removeOwner (sid : Int) p.entries) ≤ p.cap
  by_cases hk : 0 < keep
  · rw [if_pos hk, cachedOf_append]
    show p.used - alloc + (cachedOf (removeOwner (sid : Int) p.entries) + keep) ≤ p.cap
    omega
  · rw [if_neg hk]
    omega

theorem drop_inv (p : Pool) (sid : Nat) (hp : Inv p) : Inv (drop p sid) :=
  Nat.le_trans (Nat.add_le_add_left (removeOwner_le _ p.entries) p.used) hp

end Pool
end SerqLang

/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Content

/-!
# The invariants of a content pool (docs/content.md §3)

For a content pool of `B` blocks of `b` units (`B = refs.length`):

* `counts_le`: `referenced + identifiedFree ≤ B` — the referenced blocks and the identified free
  ones are disjoint sets of blocks — hence `used_add_cached_le`: `b·referenced + b·identifiedFree
  ≤ b·B`, i.e. `used + cached ≤ cap`, for **every** state; the operations keep `B`
  (`reference_length`, `evictIdent_refs`, `releaseOne_length`, `releaseHeadOne_length`,
  `identifyOne_length`).
* `Inv`: every block is referenced or in the free queue. `init_inv`: a fresh pool satisfies it;
  `reference_inv`, `evictIdent_inv`, `allocOne_inv`, `releaseOne_inv`, `releaseHeadOne_inv`,
  `identifyOne_inv`: each operation preserves it.
* `FreeInv`: every block in the free queue is unreferenced and queued once. `init_freeInv`;
  `reference_freeInv`, `evictIdent_freeInv`, `allocOne_freeInv`, `identifyOne_freeInv`, and
  `releaseOne_freeInv`, `releaseHeadOne_freeInv` for a block that is referenced (both instances of
  `releaseBy_inv` / `releaseBy_freeInv`, generic in where the freed block is pushed); `head_free`: the block `allocOne` hands
  out had no reference.
* The several-block operations the step calls (content.py `touch`, `allocate`, `identify`,
  `release`): `touchBlocks_inv`, `allocateBlocks_inv`, `identifyBlocks_inv`, `releaseBlocks_inv`,
  and `touchBlocks_freeInv`, `allocateBlocks_freeInv`, `identifyBlocks_freeInv`.

Core tactics only (`intro`, `cases`, `by_cases`, `rw`, `split`, `omega`, `show`, `refine`,
`obtain`, `simp only`, `dsimp only`),
over the definitions of `SerqLang.Content` and the lemmas below. No `sorry`, no axiom of ours.
-/

namespace SerqLang
namespace Content

/-! ## Lists indexed by block id -/

theorem length_upd {α : Type} : ∀ (l : List α) (i : Nat) (v : α), (upd l i v).length = l.length
  | [], _, _ => rfl
  | _ :: _, 0, _ => rfl
  | x :: xs, i + 1, v => by
    show (upd xs i v).length + 1 = xs.length + 1
    rw [length_upd xs i v]

theorem nth_upd_self : ∀ (l : List Nat) (i v : Nat), i < l.length → nth (upd l i v) i = v
  | [], i, _, h => absurd h (Nat.not_lt_zero i)
  | _ :: _, 0, _, _ => rfl
  | _ :: xs, i + 1, v, h => by
    have h' : i < xs.length := by
      have h2 : i + 1 < xs.length + 1 := h
      omega
    exact nth_upd_self xs i v h'

theorem nth_upd_ne : ∀ (l : List Nat) (i j v : Nat), j ≠ i → nth (upd l i v) j = nth l j
  | [], _, _, _, _ => rfl
  | _ :: _, 0, 0, _, h => (h rfl).elim
  | _ :: _, 0, _ + 1, _, _ => rfl
  | _ :: _, _ + 1, 0, _, _ => rfl
  | _ :: xs, i + 1, j + 1, v, h => nth_upd_ne xs i j v (fun e => h (congrArg Nat.succ e))

theorem length_zeros : ∀ n : Nat, (zeros n).length = n
  | 0 => rfl
  | n + 1 => by
    show (zeros n).length + 1 = n + 1
    rw [length_zeros n]

/-! ## The free queue -/

theorem inQ_snoc_self : ∀ (l : List Nat) (i : Nat), inQ i (l ++ [i])
  | [], _ => Or.inl rfl
  | _ :: xs, i => Or.inr (inQ_snoc_self xs i)

theorem inQ_snoc_of : ∀ (l : List Nat) (i j : Nat), inQ j l → inQ j (l ++ [i])
  | [], _, _, h => False.elim h
  | x :: xs, i, j, h =>
    match (h : j = x ∨ inQ j xs) with
    | Or.inl e => Or.inl e
    | Or.inr h' => Or.inr (inQ_snoc_of xs i j h')

theorem inQ_removeQ : ∀ (l : List Nat) (i j : Nat), j ≠ i → inQ j l → inQ j (removeQ i l)
  | [], _, _, _, h => False.elim h
  | x :: xs, i, j, hne, h => by
    have h2 : j = x ∨ inQ j xs := h
    show inQ j (if x = i then xs else x :: removeQ i xs)
    by_cases hx : x = i
    · rw [if_pos hx]
      cases h2 with
      | inl e => exact absurd (e.trans hx) hne
      | inr h' => exact h'
    · rw [if_neg hx]
      cases h2 with
      | inl e => exact Or.inl e
      | inr h' => exact Or.inr (inQ_removeQ xs i j hne h')

theorem inQ_seqFrom : ∀ (n s i : Nat), s ≤ i → i < s + n → inQ i (seqFrom s n)
  | 0, s, i, h1, h2 => absurd h2 (by omega)
  | n + 1, s, i, h1, h2 => by
    show i = s ∨ inQ i (seqFrom (s + 1) n)
    by_cases e : i = s
    · exact Or.inl e
    · exact Or.inr (inQ_seqFrom n (s + 1) i (by omega) (by omega))

/-! ## `used + cached ≤ cap` for every state -/

theorem counts_le : ∀ (rs : List Nat) (ids : List (Option Ident)),
    referenced rs + identifiedFree rs ids ≤ rs.length
  | [], _ => by
    show 0 + 0 ≤ 0
    omega
  | r :: rs, [] => by
    have ih := counts_le rs []
    show (if 0 < r then 1 else 0) + referenced rs + 0 ≤ rs.length + 1
    split <;> omega
  | r :: rs, none :: ids => by
    have ih := counts_le rs ids
    show (if 0 < r then 1 else 0) + referenced rs + identifiedFree rs ids ≤ rs.length + 1
    split <;> omega
  | r :: rs, some _ :: ids => by
    have ih := counts_le rs ids
    show (if 0 < r then 1 else 0) + referenced rs + ((if r = 0 then 1 else 0) + identifiedFree rs ids)
      ≤ rs.length + 1
    split <;> split <;> omega

/-- `used + cached ≤ cap` with `b` units a block: `used = b·referenced`, `cached =
b·identifiedFree`, `cap = b·B`. -/
theorem used_add_cached_le (b : Nat) (rs : List Nat) (ids : List (Option Ident)) :
    b * referenced rs + b * identifiedFree rs ids ≤ b * rs.length := by
  have h := counts_le rs ids
  have e : b * referenced rs + b * identifiedFree rs ids = b * (referenced rs + identifiedFree rs ids) :=
    (Nat.left_distrib b (referenced rs) (identifiedFree rs ids)).symm
  rw [e]
  first
    | exact Nat.mul_le_mul (Nat.le_refl b) h
    | exact Nat.mul_le_mul_left b h
    | exact Nat.mul_le_mul_left h b

/-! ## The operations keep `B` -/

theorem reference_length (st : CState) (i : Nat) :
    (reference st i).refs.length = st.refs.length :=
  length_upd st.refs i (nth st.refs i + 1)

theorem evictIdent_refs (st : CState) (i : Nat) : (evictIdent st i).refs = st.refs := by
  unfold evictIdent
  first
    | (split <;> rfl)
    | (cases nthId st.ident i <;> rfl)

theorem evictIdent_free (st : CState) (i : Nat) : (evictIdent st i).free = st.free := by
  unfold evictIdent
  first
    | (split <;> rfl)
    | (cases nthId st.ident i <;> rfl)

theorem releaseBy_length (push : Nat → List Nat → List Nat) (st : CState) (i : Nat) :
    (releaseBy push st i).refs.length = st.refs.length :=
  length_upd st.refs i (nth st.refs i - 1)

theorem releaseOne_length (st : CState) (i : Nat) :
    (releaseOne st i).refs.length = st.refs.length :=
  releaseBy_length _ st i

theorem releaseHeadOne_length (st : CState) (i : Nat) :
    (releaseHeadOne st i).refs.length = st.refs.length :=
  releaseBy_length _ st i

theorem identifyOne_length (st : CState) (i : Nat) (id : Ident) :
    (identifyOne st i id).refs.length = st.refs.length := rfl

/-! ## Every block is referenced or in the free queue -/

theorem init_inv (b B : Nat) : Inv (CState.init b B) := by
  intro i hi
  have hB : i < B := by
    have h2 : i < (zeros B).length := hi
    rw [length_zeros B] at h2
    exact h2
  exact Or.inr (inQ_seqFrom B 0 i (Nat.zero_le i) (by omega))

theorem reference_inv (st : CState) (i : Nat) (h : Inv st) : Inv (reference st i) := by
  intro j hj
  have hl : j < st.refs.length := by
    have h2 : j < (upd st.refs i (nth st.refs i + 1)).length := hj
    rw [length_upd] at h2
    exact h2
  show 0 < nth (upd st.refs i (nth st.refs i + 1)) j ∨
    inQ j (if nth st.refs i = 0 then removeQ i st.free else st.free)
  by_cases hji : j = i
  · refine Or.inl ?_
    have hil : i < st.refs.length := by rw [← hji]; exact hl
    have e : nth (upd st.refs i (nth st.refs i + 1)) i = nth st.refs i + 1 :=
      nth_upd_self st.refs i _ hil
    rw [hji]
    omega
  · rw [nth_upd_ne st.refs i j _ hji]
    cases h j hl with
    | inl hp => exact Or.inl hp
    | inr hq =>
      refine Or.inr ?_
      by_cases h0 : nth st.refs i = 0
      · rw [if_pos h0]
        exact inQ_removeQ st.free i j hji hq
      · rw [if_neg h0]
        exact hq

theorem evictIdent_inv (st : CState) (i : Nat) (h : Inv st) : Inv (evictIdent st i) := by
  intro j hj
  rw [evictIdent_refs, evictIdent_free]
  rw [evictIdent_refs] at hj
  exact h j hj

theorem allocOne_inv (st : CState) (h : Inv st) : ∀ r, allocOne st = some r → Inv r.1 := by
  intro r hr
  cases hf : st.free with
  | nil =>
    have e : allocOne st = none := by
      unfold allocOne
      rw [hf]
    rw [e] at hr
    first
      | exact Option.noConfusion hr
      | cases hr
  | cons hd rest =>
    have e : allocOne st = some (reference (evictIdent st hd) hd, hd, (nthId st.ident hd).isSome) := by
      unfold allocOne
      rw [hf]
    rw [e] at hr
    injection hr with hr'
    rw [← hr']
    exact reference_inv (evictIdent st hd) hd (evictIdent_inv st hd h)

/-- A release step keeps `Inv` whatever `push` does, provided the pushed block is in the new
queue and every queued block stays queued. -/
theorem releaseBy_inv (push : Nat → List Nat → List Nat) (hself : ∀ l i, inQ i (push i l))
    (hof : ∀ l i j, inQ j l → inQ j (push i l)) (st : CState) (i : Nat) (h : Inv st) :
    Inv (releaseBy push st i) := by
  intro j hj
  have hl : j < st.refs.length := by
    have h2 : j < (upd st.refs i (nth st.refs i - 1)).length := hj
    rw [length_upd] at h2
    exact h2
  show 0 < nth (upd st.refs i (nth st.refs i - 1)) j ∨
    inQ j (if nth st.refs i - 1 = 0 then push i st.free else st.free)
  by_cases hji : j = i
  · have hil : i < st.refs.length := by rw [← hji]; exact hl
    have e : nth (upd st.refs i (nth st.refs i - 1)) i = nth st.refs i - 1 :=
      nth_upd_self st.refs i _ hil
    rw [hji]
    by_cases h0 : nth st.refs i - 1 = 0
    · refine Or.inr ?_
      rw [if_pos h0]
      exact hself st.free i
    · refine Or.inl ?_
      omega
  · rw [nth_upd_ne st.refs i j _ hji]
    cases h j hl with
    | inl hp => exact Or.inl hp
    | inr hq =>
      refine Or.inr ?_
      by_cases h0 : nth st.refs i - 1 = 0
      · rw [if_pos h0]
        exact hof st.free i j hq
      · rw [if_neg h0]
        exact hq

theorem inQ_cons_self (l : List Nat) (i : Nat) : inQ i (i :: l) :=
  (Or.inl rfl : i = i ∨ inQ i l)

theorem inQ_cons_of (l : List Nat) (i j : Nat) (h : inQ j l) : inQ j (i :: l) :=
  (Or.inr h : j = i ∨ inQ j l)

theorem releaseOne_inv (st : CState) (i : Nat) (h : Inv st) : Inv (releaseOne st i) :=
  releaseBy_inv (fun i l => l ++ [i]) inQ_snoc_self inQ_snoc_of st i h

theorem releaseHeadOne_inv (st : CState) (i : Nat) (h : Inv st) : Inv (releaseHeadOne st i) :=
  releaseBy_inv (fun i l => i :: l) inQ_cons_self inQ_cons_of st i h

theorem identifyOne_inv (st : CState) (i : Nat) (id : Ident) (h : Inv st) :
    Inv (identifyOne st i id) :=
  fun j hj => h j hj

/-! ## The free queue holds unreferenced blocks, each once (`FreeInv`) -/

theorem nth_zeros : ∀ (n i : Nat), nth (zeros n) i = 0
  | 0, _ => rfl
  | _ + 1, 0 => rfl
  | n + 1, i + 1 => nth_zeros n i

theorem lt_of_nth_pos : ∀ (l : List Nat) (i : Nat), 0 < nth l i → i < l.length
  | [], _, h => by
    have h2 : 0 < 0 := h
    exact absurd h2 (Nat.lt_irrefl 0)
  | _ :: _, 0, _ => by
    show 0 < _ + 1
    omega
  | _ :: xs, i + 1, h => by
    have h2 : i < xs.length := lt_of_nth_pos xs i h
    show i + 1 < xs.length + 1
    omega

theorem inQ_of_inQ_removeQ : ∀ (l : List Nat) (i j : Nat), inQ j (removeQ i l) → inQ j l
  | [], _, _, h => False.elim h
  | x :: xs, i, j, h => by
    have h1 : inQ j (if x = i then xs else x :: removeQ i xs) := h
    by_cases hx : x = i
    · rw [if_pos hx] at h1
      exact Or.inr h1
    · rw [if_neg hx] at h1
      have h2 : j = x ∨ inQ j (removeQ i xs) := h1
      cases h2 with
      | inl e => exact Or.inl e
      | inr h' => exact Or.inr (inQ_of_inQ_removeQ xs i j h')

theorem not_inQ_removeQ_self : ∀ (l : List Nat) (i : Nat), Nodup l → inQ i (removeQ i l) → False
  | [], _, _, h => False.elim h
  | x :: xs, i, hn, h => by
    have hn2 : ¬ inQ x xs ∧ Nodup xs := hn
    have h1 : inQ i (if x = i then xs else x :: removeQ i xs) := h
    by_cases hx : x = i
    · rw [if_pos hx] at h1
      rw [hx] at hn2
      exact hn2.1 h1
    · rw [if_neg hx] at h1
      have h2 : i = x ∨ inQ i (removeQ i xs) := h1
      cases h2 with
      | inl e => exact hx e.symm
      | inr h' => exact not_inQ_removeQ_self xs i hn2.2 h'

theorem nodup_removeQ : ∀ (l : List Nat) (i : Nat), Nodup l → Nodup (removeQ i l)
  | [], _, _ => trivial
  | x :: xs, i, hn => by
    have hn2 : ¬ inQ x xs ∧ Nodup xs := hn
    show Nodup (if x = i then xs else x :: removeQ i xs)
    by_cases hx : x = i
    · rw [if_pos hx]
      exact hn2.2
    · rw [if_neg hx]
      show ¬ inQ x (removeQ i xs) ∧ Nodup (removeQ i xs)
      exact And.intro (fun h => hn2.1 (inQ_of_inQ_removeQ xs i x h)) (nodup_removeQ xs i hn2.2)

theorem inQ_snoc_cases : ∀ (l : List Nat) (i j : Nat), inQ j (l ++ [i]) → inQ j l ∨ j = i
  | [], i, j, h => by
    have h2 : j = i ∨ inQ j [] := h
    cases h2 with
    | inl e => exact Or.inr e
    | inr h' => exact False.elim h'
  | x :: xs, i, j, h => by
    have h2 : j = x ∨ inQ j (xs ++ [i]) := h
    cases h2 with
    | inl e => exact Or.inl (Or.inl e)
    | inr h' =>
      cases inQ_snoc_cases xs i j h' with
      | inl h'' => exact Or.inl (Or.inr h'')
      | inr e => exact Or.inr e

theorem nodup_snoc : ∀ (l : List Nat) (i : Nat), Nodup l → ¬ inQ i l → Nodup (l ++ [i])
  | [], i, _, _ => by
    show ¬ inQ i [] ∧ Nodup []
    exact And.intro (fun h => False.elim h) trivial
  | x :: xs, i, hn, hi => by
    have hn2 : ¬ inQ x xs ∧ Nodup xs := hn
    have hi2 : ¬ (i = x ∨ inQ i xs) := hi
    show ¬ inQ x (xs ++ [i]) ∧ Nodup (xs ++ [i])
    refine And.intro ?_ (nodup_snoc xs i hn2.2 (fun h => hi2 (Or.inr h)))
    intro h
    cases inQ_snoc_cases xs i x h with
    | inl h' => exact hn2.1 h'
    | inr e => exact hi2 (Or.inl e.symm)

theorem ge_of_inQ_seqFrom : ∀ (n s i : Nat), inQ i (seqFrom s n) → s ≤ i
  | 0, _, _, h => False.elim h
  | n + 1, s, i, h => by
    have h2 : i = s ∨ inQ i (seqFrom (s + 1) n) := h
    cases h2 with
    | inl e => omega
    | inr h' =>
      have := ge_of_inQ_seqFrom n (s + 1) i h'
      omega

theorem nodup_seqFrom : ∀ (n s : Nat), Nodup (seqFrom s n)
  | 0, _ => trivial
  | n + 1, s => by
    show ¬ inQ s (seqFrom (s + 1) n) ∧ Nodup (seqFrom (s + 1) n)
    refine And.intro ?_ (nodup_seqFrom n (s + 1))
    intro h
    have := ge_of_inQ_seqFrom n (s + 1) s h
    omega

theorem init_freeInv (b B : Nat) : FreeInv (CState.init b B) := by
  show (∀ i, inQ i (seqFrom 0 B) → nth (zeros B) i = 0) ∧ Nodup (seqFrom 0 B)
  exact And.intro (fun i _ => nth_zeros B i) (nodup_seqFrom B 0)

theorem reference_freeInv (st : CState) (i : Nat) (h : FreeInv st) : FreeInv (reference st i) := by
  have h' : (∀ k, inQ k st.free → nth st.refs k = 0) ∧ Nodup st.free := h
  obtain ⟨hz, hn⟩ := h'
  show (∀ j, inQ j (reference st i).free → nth (upd st.refs i (nth st.refs i + 1)) j = 0) ∧
    Nodup (reference st i).free
  by_cases h0 : nth st.refs i = 0
  · have hfree : (reference st i).free = removeQ i st.free := by
      show (if nth st.refs i = 0 then removeQ i st.free else st.free) = removeQ i st.free
      rw [if_pos h0]
    rw [hfree]
    refine And.intro ?_ (nodup_removeQ st.free i hn)
    intro j hj
    have hji : j ≠ i := by
      intro e
      subst e
      exact not_inQ_removeQ_self st.free _ hn hj
    rw [nth_upd_ne st.refs i j _ hji]
    exact hz j (inQ_of_inQ_removeQ st.free i j hj)
  · have hfree : (reference st i).free = st.free := by
      show (if nth st.refs i = 0 then removeQ i st.free else st.free) = st.free
      rw [if_neg h0]
    rw [hfree]
    refine And.intro ?_ hn
    intro j hj
    have hji : j ≠ i := by
      intro e
      subst e
      exact h0 (hz _ hj)
    rw [nth_upd_ne st.refs i j _ hji]
    exact hz j hj

/-- The free queue's head has no reference: the block `allocOne` hands out is a free one. -/
theorem head_free (st : CState) (hd : Nat) (rest : List Nat) (hf : st.free = hd :: rest)
    (h : FreeInv st) : nth st.refs hd = 0 := by
  have h' : (∀ k, inQ k st.free → nth st.refs k = 0) ∧ Nodup st.free := h
  apply h'.1 hd
  rw [hf]
  exact Or.inl rfl

theorem evictIdent_freeInv (st : CState) (i : Nat) (h : FreeInv st) : FreeInv (evictIdent st i) := by
  have h' : (∀ k, inQ k st.free → nth st.refs k = 0) ∧ Nodup st.free := h
  show (∀ k, inQ k (evictIdent st i).free → nth (evictIdent st i).refs k = 0) ∧
    Nodup (evictIdent st i).free
  rw [evictIdent_refs, evictIdent_free]
  exact h'

theorem allocOne_freeInv (st : CState) (h : FreeInv st) :
    ∀ r, allocOne st = some r → FreeInv r.1 := by
  intro r hr
  cases hf : st.free with
  | nil =>
    have e : allocOne st = none := by
      unfold allocOne
      rw [hf]
    rw [e] at hr
    first
      | exact Option.noConfusion hr
      | cases hr
  | cons hd rest =>
    have e : allocOne st = some (reference (evictIdent st hd) hd, hd, (nthId st.ident hd).isSome) := by
      unfold allocOne
      rw [hf]
    rw [e] at hr
    injection hr with hr'
    rw [← hr']
    exact reference_freeInv (evictIdent st hd) hd (evictIdent_freeInv st hd h)

/-- A release step of a referenced block keeps `FreeInv` whatever `push` does, provided the new
queue holds the old one and the pushed block only, and pushing a block not queued keeps `Nodup`. -/
theorem releaseBy_freeInv (push : Nat → List Nat → List Nat)
    (hcases : ∀ l i j, inQ j (push i l) → inQ j l ∨ j = i)
    (hnodup : ∀ l i, Nodup l → ¬ inQ i l → Nodup (push i l))
    (st : CState) (i : Nat) (hpos : 0 < nth st.refs i) (h : FreeInv st) :
    FreeInv (releaseBy push st i) := by
  have h' : (∀ k, inQ k st.free → nth st.refs k = 0) ∧ Nodup st.free := h
  obtain ⟨hz, hn⟩ := h'
  have hil : i < st.refs.length := lt_of_nth_pos st.refs i hpos
  have hiq : ¬ inQ i st.free := by
    intro hq
    have := hz i hq
    omega
  show (∀ j, inQ j (releaseBy push st i).free → nth (upd st.refs i (nth st.refs i - 1)) j = 0) ∧
    Nodup (releaseBy push st i).free
  by_cases h0 : nth st.refs i - 1 = 0
  · have hfree : (releaseBy push st i).free = push i st.free := by
      show (if nth st.refs i - 1 = 0 then push i st.free else st.free) = push i st.free
      rw [if_pos h0]
    rw [hfree]
    refine And.intro ?_ (hnodup st.free i hn hiq)
    intro j hj
    by_cases hji : j = i
    · have e : nth (upd st.refs i (nth st.refs i - 1)) i = nth st.refs i - 1 :=
        nth_upd_self st.refs i _ hil
      rw [hji]
      omega
    · rw [nth_upd_ne st.refs i j _ hji]
      cases hcases st.free i j hj with
      | inl hq => exact hz j hq
      | inr e => exact absurd e hji
  · have hfree : (releaseBy push st i).free = st.free := by
      show (if nth st.refs i - 1 = 0 then push i st.free else st.free) = st.free
      rw [if_neg h0]
    rw [hfree]
    refine And.intro ?_ hn
    intro j hj
    have hji : j ≠ i := by
      intro e
      subst e
      exact hiq hj
    rw [nth_upd_ne st.refs i j _ hji]
    exact hz j hj

theorem inQ_cons_cases (l : List Nat) (i j : Nat) (h : inQ j (i :: l)) : inQ j l ∨ j = i := by
  have h2 : j = i ∨ inQ j l := h
  cases h2 with
  | inl e => exact Or.inr e
  | inr hq => exact Or.inl hq

theorem nodup_cons (l : List Nat) (i : Nat) (hn : Nodup l) (hi : ¬ inQ i l) : Nodup (i :: l) :=
  (And.intro hi hn : ¬ inQ i l ∧ Nodup l)

theorem releaseOne_freeInv (st : CState) (i : Nat) (hpos : 0 < nth st.refs i) (h : FreeInv st) :
    FreeInv (releaseOne st i) :=
  releaseBy_freeInv (fun i l => l ++ [i]) inQ_snoc_cases nodup_snoc st i hpos h

theorem releaseHeadOne_freeInv (st : CState) (i : Nat) (hpos : 0 < nth st.refs i)
    (h : FreeInv st) : FreeInv (releaseHeadOne st i) :=
  releaseBy_freeInv (fun i l => i :: l) inQ_cons_cases nodup_cons st i hpos h

theorem identifyOne_freeInv (st : CState) (i : Nat) (id : Ident) (h : FreeInv st) :
    FreeInv (identifyOne st i id) :=
  h

/-! ## The several-block operations of content.py (what the step calls) -/

theorem foldl_preserves {α β : Type} (P : β → Prop) (f : β → α → β) (hf : ∀ b a, P b → P (f b a)) :
    ∀ (l : List α) (b : β), P b → P (l.foldl f b)
  | [], _, h => h
  | a :: as, b, h => foldl_preserves P f hf as (f b a) (hf b a h)

/-- `touchBlocks` keeps any property of the state that `reference` keeps. -/
theorem touchBlocks_preserves (P : CState → Prop) (hP : ∀ st i, P st → P (reference st i))
    (pre : Prefixes) (c : Clause) : ∀ (f j : Nat) (st : CState) (blocks : List Nat) (fresh : Nat),
    P st → P (touchBlocks pre c f j st blocks fresh).1
  | 0, _, _, _, _, h => h
  | f + 1, j, st, blocks, fresh, h => by
    have h' := hP st ((firstBlock st.idmap (identity pre c j st.block)).getD 0) h
    first
      | (simp only [touchBlocks]; exact touchBlocks_preserves P hP pre c f (j + 1) _ _ _ h')
      | exact touchBlocks_preserves P hP pre c f (j + 1) _ _ _ h'

theorem touchBlocks_inv (pre : Prefixes) (c : Clause) (f j : Nat) (st : CState)
    (blocks : List Nat) (fresh : Nat) (h : Inv st) : Inv (touchBlocks pre c f j st blocks fresh).1 :=
  touchBlocks_preserves Inv reference_inv pre c f j st blocks fresh h

theorem touchBlocks_freeInv (pre : Prefixes) (c : Clause) (f j : Nat) (st : CState)
    (blocks : List Nat) (fresh : Nat) (h : FreeInv st) :
    FreeInv (touchBlocks pre c f j st blocks fresh).1 :=
  touchBlocks_preserves FreeInv reference_freeInv pre c f j st blocks fresh h

/-- `allocateBlocks` keeps any property of the state that `allocOne` keeps. -/
theorem allocateBlocks_preserves (P : CState → Prop)
    (hP : ∀ st, P st → ∀ r, allocOne st = some r → P r.1) : ∀ (n : Nat) (st : CState)
    (blocks : List Nat) (acc : List (Bool × Bool)) (r : CState × List Nat × List (Bool × Bool)),
    P st → allocateBlocks n st blocks acc = some r → P r.1
  | 0, st, blocks, acc, r, h, hr => by
    have e : allocateBlocks 0 st blocks acc = some (st, blocks, acc) := rfl
    rw [e] at hr
    injection hr with hr'
    rw [← hr']
    exact h
  | n + 1, st, blocks, acc, r, h, hr => by
    cases ha : allocOne st with
    | none =>
      simp only [allocateBlocks] at hr
      rw [ha] at hr
      first
        | exact Option.noConfusion hr
        | cases hr
        | simp at hr
    | some q =>
      obtain ⟨st', hd, ev⟩ := q
      simp only [allocateBlocks] at hr
      rw [ha] at hr
      exact allocateBlocks_preserves P hP n st' (blocks ++ [hd]) (acc ++ [(ev, nth st.refs hd == 0)]) r
        (hP st h (st', hd, ev) ha) hr

theorem allocateBlocks_inv (n : Nat) (st : CState) (blocks : List Nat) (acc : List (Bool × Bool))
    (r : CState × List Nat × List (Bool × Bool)) (h : Inv st)
    (hr : allocateBlocks n st blocks acc = some r) : Inv r.1 :=
  allocateBlocks_preserves Inv allocOne_inv n st blocks acc r h hr

theorem allocateBlocks_freeInv (n : Nat) (st : CState) (blocks : List Nat) (acc : List (Bool × Bool))
    (r : CState × List Nat × List (Bool × Bool)) (h : FreeInv st)
    (hr : allocateBlocks n st blocks acc = some r) : FreeInv r.1 :=
  allocateBlocks_preserves FreeInv allocOne_freeInv n st blocks acc r h hr

/-- `identifyBlocks` keeps any property of the state that `identifyOne` keeps. -/
theorem identifyBlocks_preserves (P : CState → Prop) (hP : ∀ st i id, P st → P (identifyOne st i id))
    (pre : Prefixes) (c : Clause) (blocks : List Nat) (st : CState) (pos : Nat) (h : P st) :
    P (identifyBlocks pre c blocks st pos) := by
  unfold identifyBlocks
  apply foldl_preserves P _ _ _ st h
  intro acc j hacc
  try dsimp only
  split
  · exact hacc
  · exact hP _ _ _ hacc

theorem identifyBlocks_inv (pre : Prefixes) (c : Clause) (blocks : List Nat) (st : CState)
    (pos : Nat) (h : Inv st) : Inv (identifyBlocks pre c blocks st pos) :=
  identifyBlocks_preserves Inv identifyOne_inv pre c blocks st pos h

theorem identifyBlocks_freeInv (pre : Prefixes) (c : Clause) (blocks : List Nat) (st : CState)
    (pos : Nat) (h : FreeInv st) : FreeInv (identifyBlocks pre c blocks st pos) :=
  identifyBlocks_preserves FreeInv identifyOne_freeInv pre c blocks st pos h

/-- Both passes of `releaseBlocks` keep `Inv`: each step is `releaseOne`, `releaseHeadOne` or
nothing. -/
theorem releaseBlocks_inv (st : CState) (blocks : List Nat) (h : Inv st) :
    Inv (releaseBlocks st blocks).1 := by
  unfold releaseBlocks
  dsimp only
  apply foldl_preserves (fun acc : CState × Nat => Inv acc.1) _ _ _ _
  · intro acc block hacc
    dsimp only
    split
    · exact releaseHeadOne_inv acc.1 block hacc
    · exact hacc
  · apply foldl_preserves (fun acc : CState × Nat => Inv acc.1) _ _ _ (st, 0) h
    intro acc block hacc
    dsimp only
    split
    · exact releaseOne_inv acc.1 block hacc
    · exact hacc

end Content
end SerqLang

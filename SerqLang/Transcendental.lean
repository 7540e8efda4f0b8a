/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Value

/-!
# Transcendental functions at 40 decimal digits (python/serq_spec/values.py)

values.py computes `sqrt` (of a non-square), `exp`, `ln` and `pow` (with a non-integer exponent)
with Python's `decimal` module — libmpdec — in the context `prec = 40`, `ROUND_HALF_EVEN`,
`Emax = 999999`, `Emin = -999999`, and takes the resulting decimal as an exact rational. This file
computes the same rational with `Nat`/`Int` arithmetic only:

* The argument: `_dec(a)` is the quotient `num / den` correctly rounded (half-even) to 40
  significant digits (`roundDiv`); a decimal is a pair `(c, e)` meaning `c · 10^e`.
* `sqrt`: libmpdec's `mpd_qsqrt` is correctly rounded; here `sqrtDec` takes the integer square
  root (`isqrt`, Newton's iteration) of the 40-digit coefficient scaled by an even power of ten,
  giving exactly 40 digits, and rounds up when the remainder exceeds the root (no ties exist: a
  non-integer square root of an integer is irrational).
* `exp`, `ln`: libmpdec's `mpd_qexp` / `mpd_qln` are correctly rounded (Ziv's loop, `allcr`).
  The exact value of `exp x` / `ln x` for a rational `x ≠ 0` / `x ≠ 1` is irrational, so it is
  never a rounding boundary; here a lower and an upper bound are computed with directed
  integer rounding (series with a proven tail bound, argument reduction by halving/squaring for
  `exp` and by powers of two for `ln`), and when both bounds round to the same 40-digit decimal
  (rounding is monotone) that decimal is the correctly rounded value. Otherwise the working
  precision doubles; after `FUEL` doublings the result is an error, never a guess.
* `pow`: libmpdec's `_mpd_qpow_real` (read in `Modules/_decimal/libmpdec/mpdecimal.c`): with
  `wp = max(digits(base), 40) + 4 + 19 = 63` digits, `ln base` correctly rounded to `wp`, times
  the exponent rounded half-even to `wp`, `exp` of that correctly rounded to `wp`, then rounded
  half-even to 40 digits (a double rounding, reproduced as such). A base whose decimal is 1 gives
  1, as `_qcheck_pow_one` does.

Domain (an error outside it, where values.py would still give a value or raise a decimal
exception): a decimal argument whose adjusted exponent is within ±999999 (values.py's normal
range; beyond it libmpdec overflows or goes subnormal), `|x| ≤ 2000000` for `exp` (results
within 10^±868589), and `|ln x · y| ≤ 2000000` for `pow`; an exponent whose 40-digit decimal is
an integer (libmpdec's integer power) is an error too.

Not compiled (no Lean toolchain here); `tests/test_lean_transcendental_model.py` runs a
transliteration of these functions, step for step, against values.py (docs/lean.md).
-/

namespace SerqLang
namespace Transcendental

/-- values.py `DIGITS`. -/
def DIGITS : Nat := 40
/-- libmpdec's working precision of `_mpd_qpow_real` for a base of at most 40 digits. -/
def POW_DIGITS : Nat := 63
/-- The largest `|x|` whose `exp x` is computed here (and `|ln x · y|` for `pow`). -/
def EXP_MAX : Nat := 2000000
/-- The largest `|adjusted exponent|` of a decimal argument (values.py's `Emax`, `-Emin`). -/
def ADJ_MAX : Nat := 999999
/-- Precision doublings before giving up with an error. -/
def FUEL : Nat := 12

def ceilDiv (a b : Nat) : Nat := (a + b - 1) / b

/-- `n / d ≥ 10 ^ k`. -/
def gePow10 (n d : Nat) (k : Int) : Bool :=
  if 0 ≤ k then decide (d * 10 ^ k.toNat ≤ n) else decide (d ≤ n * 10 ^ (-k).toNat)

/-- An estimate of `⌊log10 (n / d)⌋` within 2 (from the binary logarithms). -/
def log10Guess (n d : Nat) : Int :=
  let a := Nat.log2 n
  let b := Nat.log2 d
  if b ≤ a then Int.ofNat ((a - b) * 30103 / 100000)
  else -Int.ofNat ((b - a) * 30103 / 100000)

def adjDown (n d : Nat) : Nat → Int → Int
  | 0, a => a
  | f + 1, a => if gePow10 n d a then a else adjDown n d f (a - 1)

def adjUp (n d : Nat) : Nat → Int → Int
  | 0, a => a
  | f + 1, a => if gePow10 n d (a + 1) then adjUp n d f (a + 1) else a

/-- `⌊log10 (n / d)⌋` for `n, d > 0`: the adjusted exponent of `n / d`. -/
def adjExp (n d : Nat) : Int := adjUp n d 8 (adjDown n d 8 (log10Guess n d))

/-- `n / d` (both positive) rounded half-even to `prec` significant digits: `(c, e)` with
`c · 10^e`, `10^(prec-1) ≤ c < 10^prec` (libmpdec's correctly rounded division). -/
def roundDiv (n d prec : Nat) : Nat × Int :=
  let e : Int := adjExp n d - Int.ofNat prec + 1
  let num := if e ≤ 0 then n * 10 ^ (-e).toNat else n
  let den := if e ≤ 0 then d else d * 10 ^ e.toNat
  let q := num / den
  let r := num % den
  let q := if decide (den < 2 * r) || (2 * r == den && q % 2 == 1) then q + 1 else q
  if q == 10 ^ prec then (10 ^ (prec - 1), e + 1) else (q, e)

/-- `c · 10^e` as a numerator and a positive denominator (not reduced). -/
def decRat (c : Nat) (e : Int) : Nat × Nat :=
  if 0 ≤ e then (c * 10 ^ e.toNat, 1) else (c, 10 ^ (-e).toNat)

/-- `±c · 10^e` as a rational. -/
def ofDec (neg : Bool) (c : Nat) (e : Int) : Rat :=
  let (n, d) := decRat c e
  mkRat (if neg then -(Int.ofNat n) else Int.ofNat n) d

/-- values.py `_dec` of `|q|` (`q ≠ 0`): its 40-digit decimal, `none` outside the normal range. -/
def decOf (q : Rat) : Option (Nat × Int) :=
  let (c, e) := roundDiv q.num.natAbs q.den DIGITS
  if ADJ_MAX < (e + Int.ofNat DIGITS - 1).natAbs then none else some (c, e)

/-! ## Square root -/

/-- The correctly rounded 40-digit square root of `c · 10^e` (`c` of 40 digits). The exponent
is made even (`c` gets 40 or 41 digits), then `isqrt (c · 10^40)` has 40 or 41 digits; with 41,
`isqrt (c · 10^38)` has 40. The root rounds up when `m - q² > q`, i.e. `√m > q + 1/2`. -/
def sqrtDec (c0 : Nat) (e0 : Int) : Nat × Int :=
  let c := if e0 % 2 == 0 then c0 else c0 * 10
  let e := if e0 % 2 == 0 then e0 else e0 - 1
  let q40 := isqrt (c * 10 ^ 40)
  let t : Nat := if 10 ^ DIGITS ≤ q40 then 38 else 40
  let m := c * 10 ^ t
  let q := if t == 38 then isqrt m else q40
  let q := if q < m - q * q then q + 1 else q
  (q, (e - Int.ofNat t) / 2)

/-! ## Exponential -/

/-- Partial sums of `exp (p/q)`, `0 < p/q ≤ 1/2`, scaled by `2^b`: terms rounded down (`tlo`)
and up (`thi`); once a term's upper bound is at most 1 the rest of the series is below that term
(each ratio is at most 1/2), so it is added to the upper sum. `none` when the fuel runs out. -/
def expSeriesGo (p q : Nat) : Nat → Nat → Nat → Nat → Nat → Nat → Option (Nat × Nat)
  | 0, _, _, _, _, _ => none
  | f + 1, i, tlo, thi, slo, shi =>
    if thi ≤ 1 then some (slo, shi + thi)
    else
      let tlo' := tlo * p / (q * i)
      let thi' := ceilDiv (thi * p) (q * i)
      expSeriesGo p q f (i + 1) tlo' thi' (slo + tlo') (shi + thi')

/-- `exp (p/q)` for `0 < p/q ≤ 1/2` as `[lo, hi] · 2^-b`. -/
def expSeries (p q b : Nat) : Option (Nat × Nat) :=
  let s := 2 ^ b
  expSeriesGo p q (b + 8) 1 s s s s

/-- `j` squarings of `[mlo, mhi] · 2^-s`, keeping about `b` bits (lower bound rounded down,
upper bound up). -/
def squareGo (b : Nat) : Nat → Nat → Nat → Int → Nat × Nat × Int
  | 0, mlo, mhi, s => (mlo, mhi, s)
  | k + 1, mlo, mhi, s =>
    let lo2 := mlo * mlo
    let hi2 := mhi * mhi
    let sh := Nat.log2 hi2 + 1 - b
    squareGo b k (lo2 / 2 ^ sh) (ceilDiv hi2 (2 ^ sh)) (2 * s - Int.ofNat sh)

/-- `m · 2^-s` as a numerator and a denominator. -/
def frac2 (m : Nat) (s : Int) : Nat × Nat :=
  if 0 ≤ s then (m, 2 ^ s.toNat) else (m * 2 ^ (-s).toNat, 1)

/-- The halving count: `n / (d · 2^j) < 1/2`. -/
def expHalvings (n d : Nat) : Nat := Nat.log2 n + 2 - Nat.log2 d

def expDecGo (neg : Bool) (n d prec j : Nat) : Nat → Nat → Option (Nat × Int)
  | 0, _ => none
  | f + 1, b =>
    match expSeries n (d * 2 ^ j) b with
    | none => none
    | some (slo, shi) =>
      let (mlo, mhi, s) := squareGo b j slo shi (Int.ofNat b)
      let (lon, lod) := frac2 mlo s
      let (hin, hid) := frac2 mhi s
      -- exp (-x) = 1 / exp x: the bounds swap
      let r1 := if neg then roundDiv hid hin prec else roundDiv lon lod prec
      let r2 := if neg then roundDiv lod lon prec else roundDiv hin hid prec
      if r1 == r2 then some r1 else expDecGo neg n d prec j f (2 * b)

/-- `exp (±n/d)` (`n, d > 0`) correctly rounded (half-even) to `prec` digits, as `(c, e)`;
`none` if the bounds never agree within `FUEL` doublings. -/
def expDec (neg : Bool) (n d prec : Nat) : Option (Nat × Int) :=
  let j := expHalvings n d
  expDecGo neg n d prec j FUEL (2 * j + 4 * prec + 64)

/-! ## Natural logarithm -/

/-- Partial sums of `atanh (p/q)`, `0 ≤ p/q ≤ 1/3`, scaled by `2^w` (`p2 = p²`, `q2 = q²`):
`wlo`/`whi` bound `z^(2i+1)`; once `whi ≤ 1` the rest of the series is below `whi`
(ratio `z² ≤ 1/9`). -/
def atanhGo (p2 q2 : Nat) : Nat → Nat → Nat → Nat → Nat → Nat → Option (Nat × Nat)
  | 0, _, _, _, _, _ => none
  | f + 1, i, wlo, whi, slo, shi =>
    if whi ≤ 1 then some (slo, shi + whi)
    else
      let wlo' := wlo * p2 / q2
      let whi' := ceilDiv (whi * p2) q2
      atanhGo p2 q2 f (i + 1) wlo' whi' (slo + wlo' / (2 * i + 1)) (shi + ceilDiv whi' (2 * i + 1))

/-- `atanh (p/q)` for `0 ≤ p/q ≤ 1/3` as `[lo, hi] · 2^-w`. -/
def atanhSeries (p q w : Nat) : Option (Nat × Nat) :=
  let s := 2 ^ w
  let wlo := s * p / q
  let whi := ceilDiv (s * p) q
  atanhGo (p * p) (q * q) (w + 8) 1 wlo whi wlo whi

/-- `n / d = 2^k · mn / md` with `mn / md ∈ [1/√2, √2)`. -/
def lnReduce (n d : Nat) : Int × Nat × Nat :=
  let k : Int := Int.ofNat (Nat.log2 n) - Int.ofNat (Nat.log2 d)
  let mn := if 0 ≤ k then n else n * 2 ^ (-k).toNat
  let md := if 0 ≤ k then d * 2 ^ k.toNat else d
  if 2 * (md * md) ≤ mn * mn then (k + 1, mn, md * 2)
  else if 2 * (mn * mn) < md * md then (k - 1, mn * 2, md)
  else (k, mn, md)

/-- `ln (n/d) = k · 2 atanh (1/3) + 2 atanh z`, `z = (mn - md) / (mn + md)`, bounded at scale
`2^w`; rounded when both bounds have one sign and round alike. -/
def lnDecGo (k : Int) (zneg : Bool) (zp zq prec : Nat) : Nat → Nat → Option (Bool × Nat × Int)
  | 0, _ => none
  | f + 1, w =>
    match atanhSeries 1 3 w, atanhSeries zp zq w with
    | some (l2lo, l2hi), some (alo, ahi) =>
      let l2lo' : Int := 2 * Int.ofNat l2lo
      let l2hi' : Int := 2 * Int.ofNat l2hi
      let zlo : Int := if zneg then -(2 * Int.ofNat ahi) else 2 * Int.ofNat alo
      let zhi : Int := if zneg then -(2 * Int.ofNat alo) else 2 * Int.ofNat ahi
      let lo : Int := if 0 ≤ k then k * l2lo' + zlo else k * l2hi' + zlo
      let hi : Int := if 0 ≤ k then k * l2hi' + zhi else k * l2lo' + zhi
      let den := 2 ^ w
      if 0 < lo then
        let r1 := roundDiv lo.toNat den prec
        let r2 := roundDiv hi.toNat den prec
        if r1 == r2 then some (false, r1) else lnDecGo k zneg zp zq prec f (2 * w)
      else if hi < 0 then
        let r1 := roundDiv (-hi).toNat den prec
        let r2 := roundDiv (-lo).toNat den prec
        if r1 == r2 then some (true, r1) else lnDecGo k zneg zp zq prec f (2 * w)
      else lnDecGo k zneg zp zq prec f (2 * w)
    | _, _ => none

/-- `ln (n/d)` (`n, d > 0`, `n ≠ d`) correctly rounded (half-even) to `prec` digits, as
(negative?, c, e); `none` if the bounds never agree within `FUEL` doublings. -/
def lnDec (n d prec : Nat) : Option (Bool × Nat × Int) :=
  let (k, mn, md) := lnReduce n d
  let zneg := decide (mn < md)
  let zp := if mn < md then md - mn else mn - md
  lnDecGo k zneg zp (mn + md) prec FUEL (4 * prec + 64 + Nat.log2 (k.natAbs + 1))

def rangeError (f : String) : String :=
  s!"{f}: argument outside the range the Lean semantics computes at 40 digits (docs/lean.md)"

def precisionError (f : String) : String :=
  s!"{f}: the 40-digit rounding was not decided within the Lean semantics' precision limit"

/-- `x ^ y` for a positive rational `x ≠ 1` and a non-integer rational `y` (libmpdec
`_mpd_qpow_real`, then rounded to 40 digits). -/
def powReal (x y : Rat) : Res Value :=
  match decOf x, decOf y with
  | some (cx, ex), some (cy, ey) =>
    let (n, d) := decRat cx ex
    let (yn, yd) := decRat cy ey
    -- libmpdec `_qcheck_pow_one`: a base whose decimal is 1 gives 1 (before anything else)
    if n == d then .ok Value.one
    else if yn % yd == 0 then .error (rangeError "pow")
    else
        match lnDec n d POW_DIGITS with
        | none => .error (precisionError "pow")
        | some (lneg, cl, el) =>
          let (pc, pe) := roundDiv (cl * cy) 1 POW_DIGITS
          let pneg := lneg != decide (y < 0)
          let (pn, pd) := decRat pc (pe + el + ey)
          if EXP_MAX * pd < pn then .error (rangeError "pow")
          else
            match expDec pneg pn pd POW_DIGITS with
            | none => .error (precisionError "pow")
            | some (c, e) =>
              let (n2, d2) := decRat c e
              let (c3, e3) := roundDiv n2 d2 DIGITS
              .ok (.fin (ofDec false c3 e3))
  | _, _ => .error (rangeError "pow")

end Transcendental

/-- values.py `sqrt_v`: exact for perfect squares (`Value.sqrtV`), else the correctly rounded
40-digit square root of the 40-digit decimal of the argument. -/
def sqrtV (v : Value) : Res Value :=
  match v with
  | .fin q =>
    if 0 < q then
      let n := q.num.toNat
      let rn := isqrt n
      let rd := isqrt q.den
      if rn * rn == n && rd * rd == q.den then Value.sqrtV v
      else
        match Transcendental.decOf q with
        | none => .error (Transcendental.rangeError "sqrt")
        | some (c, e) =>
          let (r, e2) := Transcendental.sqrtDec c e
          .ok (.fin (Transcendental.ofDec false r e2))
    else Value.sqrtV v
  | _ => Value.sqrtV v

/-- values.py `exp_v`: `exp 0 = 1`, the limits at ±inf, 0 below −100000, else correctly rounded
at 40 digits. -/
def expV (a : Value) : Res Value :=
  match a with
  | .posInf => .ok .posInf
  | .negInf => .ok Value.zero
  | .fin q =>
    if q == 0 then .ok Value.one
    else if q < -100000 then .ok Value.zero
    -- e^710 > 1.8e308: beyond the doubles, an error before any series (values.py `_within_doubles`)
    else if 710 < q then .error (Value.beyondDoubles s!"exp({a.toWire})")
    else
      match Transcendental.decOf q with
      | none => .error (Transcendental.rangeError "exp")
      | some (c, e) =>
        let (n, d) := Transcendental.decRat c e
        if Transcendental.EXP_MAX * d < n then .error (Transcendental.rangeError "exp")
        else
          match Transcendental.expDec (decide (q < 0)) n d Transcendental.DIGITS with
          | none => .error (Transcendental.precisionError "exp")
          | some (r, e2) => Value.withinDoubles s!"exp({a.toWire})" (.fin (Transcendental.ofDec false r e2))

/-- values.py `ln_v`: `ln 0 = -inf`, `ln 1 = 0`, `ln inf = inf`, an error below 0, else
correctly rounded at 40 digits (0 when the argument's 40-digit decimal is 1). -/
def lnV (a : Value) : Res Value :=
  match a with
  | .posInf => .ok .posInf
  | .negInf => .error s!"ln of a negative value {a.toWire}"
  | .fin q =>
    if q < 0 then .error s!"ln of a negative value {a.toWire}"
    else if q == 0 then .ok .negInf
    else if q == 1 then .ok Value.zero
    else
      match Transcendental.decOf q with
      | none => .error (Transcendental.rangeError "ln")
      | some (c, e) =>
        let (n, d) := Transcendental.decRat c e
        if n == d then .ok Value.zero
        else
          match Transcendental.lnDec n d Transcendental.DIGITS with
          | none => .error (Transcendental.precisionError "ln")
          | some (neg, r, e2) => .ok (.fin (Transcendental.ofDec neg r e2))

/-- values.py `pow_v`: `Value.powV` for every exact case (integer exponents, zero base, an
infinite operand, `x ^ 0`, `1 ^ y`, a negative base's error); a positive base other than 1 with a
non-integer finite exponent goes through libmpdec's `_mpd_qpow_real` (`Transcendental.powReal`). -/
def powV (x y : Value) : Res Value :=
  match x, y with
  | .fin b, .fin e =>
    if e.den != 1 && decide (0 < b) && b != 1 then
      match Transcendental.powReal b e with
      | .ok v => Value.withinDoubles s!"pow({x.toWire}, {y.toWire})" v
      | err => err
    else Value.powV x y
  | _, _ => Value.powV x y

end SerqLang

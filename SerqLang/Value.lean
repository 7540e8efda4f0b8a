/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/

/-!
# Values: extended rationals

A value of the IR (docs/ir.md, python/serq/wire.py) is an exact rational, `+inf` or `-inf`.
There is no NaN: an operation that would produce one (`inf - inf`, `0 * inf`, `x / 0`) returns
an error naming the operation instead.

Wire codec: `"p"` or `"p/q"` in lowest terms with `q > 0` (core `Rat`'s `toString` is exactly
this spelling, the same as Python's `str(Fraction)`), `"inf"`, `"-inf"`. `ofWire` accepts only
the canonical spelling, as `value_from_wire` does.

Core Lean only: `Rat` lives in `Init` (lean4#9957); no Mathlib, no Batteries.
-/

namespace SerqLang

/-- Results of operations that can fail: the error is a message for the user. -/
abbrev Res := Except String

/-- A step of `isqrt`: Newton's iteration from above; `fuel` only bounds the loop, which stops
as soon as the iterate stops decreasing (after O(log n) rounds). -/
def isqrtGo (n : Nat) : Nat → Nat → Nat
  | 0, x => x
  | f + 1, x =>
    let y := (x + n / x) / 2
    if y < x then isqrtGo n f y else x

/-- The integer square root `⌊√n⌋`. -/
def isqrt (n : Nat) : Nat := if n < 2 then n else isqrtGo n (n + 1) n

/-- An exact value: a rational or one of the two infinities. -/
inductive Value where
  | fin (q : Rat)
  | posInf
  | negInf
  deriving DecidableEq, Inhabited

namespace Value

def zero : Value := .fin 0
def one : Value := .fin 1

/-- The value of a natural number (tokens, units, counters). -/
def ofNat (n : Nat) : Value := .fin (n : Rat)

/-- The value of an integer. -/
def ofInt (i : Int) : Value := .fin (i : Rat)

/-- The value of a truth: 1 or 0 (comparisons and logic give 0 or 1). -/
def ofBool (b : Bool) : Value := if b then one else zero

/-- `"3/10"`, `"7"`, `"-2"`, `"inf"`, `"-inf"`. -/
def toWire : Value → String
  | .fin q => toString q
  | .posInf => "inf"
  | .negInf => "-inf"

instance : ToString Value := ⟨toWire⟩

def isFinite : Value → Bool
  | .fin _ => true
  | _ => false

/-- Non-zero values are true (guards, `&&`, `||`, `cond`). -/
def truthy : Value → Bool
  | .fin q => q != 0
  | _ => true

/-- `-1`, `0` or `1`. -/
def sign : Value → Int
  | .fin q => if q < 0 then -1 else if q == 0 then 0 else 1
  | .posInf => 1
  | .negInf => -1

/-! ## Order -/

/-- Strict order, with `-inf < q < +inf` for every rational `q`. -/
def lt : Value → Value → Bool
  | .negInf, .negInf => false
  | .negInf, _ => true
  | _, .negInf => false
  | .posInf, _ => false
  | .fin _, .posInf => true
  | .fin a, .fin b => decide (a < b)

def le (a b : Value) : Bool := !(lt b a)

instance : LT Value := ⟨fun a b => lt a b = true⟩
instance : LE Value := ⟨fun a b => le a b = true⟩
instance (a b : Value) : Decidable (a < b) := inferInstanceAs (Decidable (lt a b = true))
instance (a b : Value) : Decidable (a ≤ b) := inferInstanceAs (Decidable (le a b = true))

/-- values.py `is_inf`. -/
def isInf (v : Value) : Bool := !v.isFinite

/-- values.py `finite`: the rational of a finite value; infinity is an error. -/
def finite (v : Value) (what : String := "value") : Res Rat :=
  match v with
  | .fin q => .ok q
  | _ => .error s!"{what} is infinite"

/-- values.py `as_int`: tokens, units, counts must be whole numbers. -/
def asInt (v : Value) (what : String) : Res Int :=
  match v with
  | .fin q => if q.den == 1 then .ok q.num else .error s!"{what} must be a whole number, got {toWire v}"
  | _ => .error s!"{what} must be a whole number, got {toWire v}"

/-- `asInt` for quantities that must also be non-negative (units, tokens). -/
def asNat (v : Value) (what : String) : Res Nat := do
  let i ← asInt v what
  if i < 0 then throw s!"{what} must not be negative, got {toWire v}"
  return i.toNat

/-- values.py `truth`: a guard must be 0 or 1. -/
def truth (v : Value) (what : String := "guard") : Res Bool :=
  if v == zero then .ok false
  else if v == one then .ok true
  else .error s!"{what} must be 0 or 1, got {toWire v}"

/-- values.py `nz`: C-like truth, any non-zero value is true. -/
def nz (v : Value) : Bool := v != zero

/-- values.py `min_v`: the first one on ties. -/
def minV (a b : Value) : Value := if le a b then a else b

/-- values.py `max_v`: the first one on ties. -/
def maxV (a b : Value) : Value := if le b a then a else b

/-! ## Arithmetic (values.py; errors instead of NaN) -/

def neg : Value → Value
  | .fin q => .fin (-q)
  | .posInf => .negInf
  | .negInf => .posInf

def add : Value → Value → Res Value
  | .fin a, .fin b => .ok (.fin (a + b))
  | .posInf, .negInf => .error "inf - inf is undefined"
  | .negInf, .posInf => .error "inf - inf is undefined"
  | .posInf, _ => .ok .posInf
  | .negInf, _ => .ok .negInf
  | _, .posInf => .ok .posInf
  | _, .negInf => .ok .negInf

def sub (a b : Value) : Res Value := add a (neg b)

def mul : Value → Value → Res Value
  | .fin a, .fin b => .ok (.fin (a * b))
  | a, b =>
    let s := sign a * sign b
    if s == 0 then .error "0 * inf is undefined"
    else if s > 0 then .ok .posInf else .ok .negInf

/-- values.py `div`: `x / ±inf = 0` for finite `x`; `x / 0 = ±inf` by the sign of `x`;
`0 / 0` and `inf / inf` are errors. -/
def div (a b : Value) : Res Value :=
  if b.isInf then
    if a.isInf then .error "inf / inf is undefined" else .ok zero
  else if b == zero then
    if a == zero then .error "0 / 0 is undefined"
    else if lt zero a then .ok .posInf else .ok .negInf
  else
    match a, b with
    | .fin x, .fin y => .ok (.fin (x / y))
    | _, _ => if sign a * sign b > 0 then .ok .posInf else .ok .negInf

/-- values.py `floor_v` (an infinity is its own floor). -/
def floorV : Value → Value
  | .fin q => .fin (q.floor : Rat)
  | v => v

/-- values.py `ceil_v` (an infinity is its own ceiling). -/
def ceilV : Value → Value
  | .fin q => .fin (q.ceil : Rat)
  | v => v

/-- Whether a value is an odd integer (for `(-inf) ^ y`). -/
def isOddInt : Value → Bool
  | .fin q => q.den == 1 && q.num % 2 == 1
  | _ => false

/-- The least magnitude a double cannot hold: 2^1024 − 2^970, halfway between the largest double
((2^53 − 1)·2^971) and 2^1024, where rounding to a double gives infinity (serq.exact
`beyond_doubles`, Python's `float` of a Fraction). -/
def doubleOverflow : Rat := 2 ^ 1024 - 2 ^ 970

/-- serq.exact `function_beyond_doubles`, CALL written with wire values (values.py writes the
arguments as the doubles nearest them, `2.0`, which this semantics does not print). -/
def beyondDoubles (call : String) : String :=
  s!"{call} is beyond the range of doubles (magnitudes up to about 1.8e308), where both engines keep a program's values"

/-- values.py `_within_doubles`: an `exp` or `pow` result at or above `doubleOverflow` in
magnitude is an error, as in serq_fast (docs/language.md §4.1); a smaller one is kept. -/
def withinDoubles (call : String) (v : Value) : Res Value :=
  match v with
  | .fin q => if decide (doubleOverflow ≤ q) || decide (q ≤ -doubleOverflow) then .error (beyondDoubles call) else .ok v
  | _ => .ok v

/-- values.py `pow_v` wherever its value is exact: an integer exponent (magnitude ≤ 4096,
`EXACT_EXPONENT`) on a finite base, its result within the doubles (`withinDoubles`), `0 ^ -k = inf`,
a zero base, and with an infinite operand the value of IEEE 754
`pow`: `x ^ 0 = 1` and `1 ^ y = 1` for every `x`, `y`; `x ^ ±inf` by whether `|x| > 1`
(`(-1) ^ ±inf = 1`); `(±inf) ^ y` is `inf` for `y > 0` (`-inf` for `-inf` and an odd integer `y`)
and 0 for `y < 0`. A finite non-integer exponent on a positive base has no exact value;
values.py computes it at 40 decimal digits, which this semantics does not implement (an error
says so); so is an integer exponent above 4096 in magnitude, which values.py computes at 40
digits too (libmpdec's integer power). -/
def powV (x y : Value) : Res Value :=
  if y == zero || x == one then .ok one
  else
    let call := s!"pow({x.toWire}, {y.toWire})"
    match x, y with
    | .fin b, .fin e =>
      if e.den == 1 then
        if decide (e.num < 0) && b == 0 then .ok .posInf
        else if e.num.natAbs > 4096 then
          .error "pow with an integer exponent above 4096 in magnitude is computed at 40 digits, which the Lean semantics does not implement"
        else if e.num < 0 then withinDoubles call (.fin (1 / b ^ e.num.natAbs))
        else withinDoubles call (.fin (b ^ e.num.natAbs))
      else if b < 0 then .error s!"{call}: a negative number to a non-integer power"
      else if b == 0 then (if 0 < e then .ok zero else .ok .posInf)
      else .error "pow with a non-integer exponent is not implemented in the Lean semantics (40-digit rounding)"
    | .fin b, _ =>
      -- an infinite exponent on a finite base
      if b == -1 then .ok one
      else
        let big := decide (1 < b) || decide (b < -1)
        if lt zero y then .ok (if big then .posInf else zero) else .ok (if big then zero else .posInf)
    | .negInf, _ =>
      if lt y zero then .ok zero else if y.isOddInt then .ok .negInf else .ok .posInf
    | .posInf, _ => .ok (if lt zero y then .posInf else zero)

/-- values.py `sqrt_v` for what is exact: a perfect square (numerator and denominator). Other
arguments need 40-digit decimal rounding, not implemented here (an error says so). -/
def sqrtV (v : Value) : Res Value :=
  match v with
  | .posInf => .ok .posInf
  | .negInf => .error s!"sqrt of a negative value {v.toWire}"
  | .fin q =>
    if q < 0 then .error s!"sqrt of a negative value {v.toWire}"
    else
      let n := q.num.toNat
      let rn := isqrt n
      let rd := isqrt q.den
      if rn * rn == n && rd * rd == q.den then .ok (.fin (mkRat rn rd))
      else .error "sqrt of a non-square is not implemented in the Lean semantics"

/-! ## Wire codec -/

/-- The inverse of `toWire`; only canonical spellings are accepted (lowest terms, positive
denominator, no `+`, no spaces, no decimal point). -/
def ofWire (s : String) : Res Value :=
  let bad : Res Value := .error s!"not a value (want \"p\", \"p/q\" in lowest terms, \"inf\" or \"-inf\"): \"{s}\""
  let canon (q : Rat) : Res Value :=
    if toString q == s then .ok (.fin q)
    else .error s!"not in lowest terms: \"{s}\" (write \"{toString q}\")"
  if s == "inf" then .ok .posInf
  else if s == "-inf" then .ok .negInf
  else if s.startsWith "+" then bad
  else
    match s.splitOn "/" with
    | [n] => (match n.toInt? with
      | some i => canon (mkRat i 1)
      | none => bad)
    | [n, d] => (match n.toInt?, d.toNat? with
      | some i, some k => if k == 0 then bad else canon (mkRat i k)
      | _, _ => bad)
    | _ => bad

end Value

/-! ## Rounding to blocks (pool amounts, exact rationals; values.py) -/

/-- values.py `roundup_block`: round up to a whole number of blocks, `⌈u/b⌉·b`, exact for any
rational block; `none` = no block size. Pool amounts are exact rationals (docs/spec.md
"Non-whole pool amounts"). -/
def roundupBlock (units : Rat) (block : Option Rat) : Rat :=
  match block with
  | none => units
  | some b => (((units / b).ceil : Int) : Rat) * b

/-- values.py `rounddown_block`: round down to a whole number of blocks, `⌊x/b⌋·b`; `none` = no
block size. -/
def rounddownBlock (units : Rat) (block : Option Rat) : Rat :=
  match block with
  | none => units
  | some b => (((units / b).floor : Int) : Rat) * b

end SerqLang

/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Ir
import SerqLang.Transcendental

/-!
# Expressions (python/serq_spec/expr.py)

The pure part of expr.py: the operators of `_BIN`, the functions of `_FN1` and `min`/`max`/
`pow`, and program.py's `static_expr`. `evaluate` itself reads the configuration (attributes,
observables, draws) and lives in `SerqLang.Eval`.

Transcendental functions with no exact value (`exp`, `ln`, `sqrt` of a non-square, `pow` with a
non-integer exponent) are computed by values.py at 40 decimal digits; `SerqLang.Transcendental`
(`sqrtV`, `expV`, `lnV`, `powV`) reproduces that rounding within a stated domain and reports an
error outside it (docs/lean.md).
-/

namespace SerqLang

/-- `abs` on values. -/
def absV (v : Value) : Value :=
  match v with
  | .fin q => .fin (if q < 0 then -q else q)
  | _ => .posInf

/-- The one-argument functions of expr.py `_FN1`. -/
def fn1 (f : String) (a : Value) : Res Value :=
  if f == "abs" then .ok (absV a)
  else if f == "floor" then .ok a.floorV
  else if f == "ceil" then .ok a.ceilV
  else if f == "sqrt" then sqrtV a
  else if f == "exp" then expV a
  else if f == "ln" then lnV a
  else .error s!"unknown function {f}"

/-- The binary operators of expr.py `_BIN` (not `&&`, `||`, which short-circuit). Comparisons
give 0 or 1 (expr.py `b`, here `Value.ofBool`). -/
def bin (op : String) (x y : Value) : Res Value :=
  if op == "+" then Value.add x y
  else if op == "-" then Value.sub x y
  else if op == "*" then Value.mul x y
  else if op == "/" then Value.div x y
  else if op == "^" then powV x y
  else if op == "<" then .ok (Value.ofBool (Value.lt x y))
  else if op == "<=" then .ok (Value.ofBool (Value.le x y))
  else if op == ">" then .ok (Value.ofBool (Value.lt y x))
  else if op == ">=" then .ok (Value.ofBool (Value.le y x))
  else if op == "==" then .ok (Value.ofBool (x == y))
  else if op == "!=" then .ok (Value.ofBool (x != y))
  else .error s!"unknown operator {op}"

/-- A function call `f(vs)` (expr.py's `fn` branch). -/
def fnValue (f : String) (vs : List Value) : Res Value :=
  match vs with
  | [x, y] =>
    if f == "min" then .ok (Value.minV x y)
    else if f == "max" then .ok (Value.maxV x y)
    else if f == "pow" then powV x y
    else .error s!"{f}: expected 1 argument, got 2"
  | [x] =>
    if f == "min" || f == "max" || f == "pow" then .error s!"{f}: expected 2 arguments, got 1"
    else fn1 f x
  | _ => .error s!"{f}: wrong number of arguments ({vs.length})"

/-- program.py `static_expr`: reads only numbers and the given attribute slots. -/
partial def staticExpr (e : Expr) (staticSlots : List Nat) : Bool :=
  match e with
  | .num _ => true
  | .attr slot => staticSlots.contains slot
  | .un _ a => staticExpr a staticSlots
  | .bin _ x y => staticExpr x staticSlots && staticExpr y staticSlots
  | .cond c x y => staticExpr c staticSlots && staticExpr x staticSlots && staticExpr y staticSlots
  | .fn _ args => args.all (fun a => staticExpr a staticSlots)
  | _ => false

end SerqLang

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

/-- Does the expression contain a node satisfying `p` (sub-expressions and reference indices
included)? -/
partial def Expr.anyNode (p : Expr → Bool) (e : Expr) : Bool :=
  if p e then true else
  match e with
  | .un _ a => a.anyNode p
  | .bin _ a b => a.anyNode p || b.anyNode p
  | .cond c a b => c.anyNode p || a.anyNode p || b.anyNode p
  | .fn _ args | .draw _ args => args.any (·.anyNode p)
  | .obsStage _ _ _ i args => args.any (·.anyNode p) ||
    match i with
    | some ie => ie.anyNode p
    | none => false
  | .obsPool _ _ _ i =>
    match i with
    | some ie => ie.anyNode p
    | none => false
  | _ => false

/-- expr.py `has_draw`: does the expression draw anywhere? -/
def Expr.hasDraw (e : Expr) : Bool :=
  e.anyNode fun
    | .draw _ _ => true
    | _ => false

/-- trace.py `reads_state`: can evaluating the expression change the configuration? A draw
consumes a stream value; an observable may advance a ps clock or evaluate a capacity that
draws. -/
def Expr.readsState (e : Expr) : Bool :=
  e.anyNode fun
    | .draw _ _ | .obsStage _ _ _ _ _ | .obsPool _ _ _ _ => true
    | _ => false

/-- Every expression of a schedule statement (`only`, `while`, `each`, order keys, a branch's
condition and arms, a register update), as expr.py `has_draw` walks the schedule's JSON. -/
partial def Sched.exprs : Sched → List Expr
  | .advance only order each =>
    only.toList ++ (match order with
      | .keyed keys => keys
      | _ => []) ++ each.toList
  | .admit only wh each => only.toList ++ wh.toList ++ each.toList
  | .exclusivePrefill each => each.toList
  | .branch c t e => c :: ((t ++ e).map Sched.exprs).foldr (· ++ ·) []
  | .set _ x => [x]

/-- expr.py `budget_draws`: do the engine's Budget-moment expressions (`tokens cap`, `let`s and
the whole schedule, as expr.py walks it) draw? -/
def budgetDraws (d : StepDecl) : Bool :=
  d.budget.hasDraw || d.lets.any (·.expr.hasDraw) ||
  d.schedule.any (fun s => (Sched.exprs s).any Expr.hasDraw)

end SerqLang

/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Ir

/-!
# Expressions (python/serq_spec/expr.py)

`evaluate e env` mirrors expr.py's `evaluate` for every expression kind that reads only the
moment's environment: numbers, attributes, context variables, schedule `let`s, engine registers,
unary and binary operators (with `&&`/`||` short-circuiting), `cond`, and the pure functions.
The kinds that read the whole configuration — observables (`obs`), engine values (`eng`),
per-request keys (`job`) and draws (`draw`) — are handed to `env.ext`, which the caller
supplies (expr.py calls `observable`, `engine_value`, `job_value`, `Workload.take` there).

Transcendental functions with no exact value (`exp`, `ln`, `sqrt` of a non-square, `pow` with a
non-integer exponent) are computed by values.py at 40 decimal digits; SerqLang does not
implement that rounding and reports an error instead (docs/lean.md).
-/

namespace SerqLang

/-- expr.py `Env`: what an expression can see in its moment. -/
structure Env where
  /-- `cfg.now`. -/
  now : Rat
  /-- The session's attributes by slot (`none` outside a session: attributes read 0). -/
  attrs : Option (Array Value) := none
  /-- Context variables of the moment (`waited`, `size`, `position`, …; not `now`). -/
  ctx : List (String × Value) := []
  /-- The schedule `let`s of the engine being scheduled (`none` outside a schedule). -/
  locals : Option (Array Value) := none
  /-- Every engine's registers, by stage index. -/
  registers : Array (Array Value) := #[]
  /-- Observables, engine values, per-request keys and draws: they read the configuration. -/
  ext : Expr → Res Value := fun _ => .error "this expression reads the configuration, which this environment does not provide"

/-- `abs` on values. -/
def absV (v : Value) : Value :=
  match v with
  | .fin q => .fin (if q < 0 then -q else q)
  | _ => .posInf

/-- values.py `exp_v` where it is exact (`exp 0 = 1`, the limits at ±inf). -/
def expV (a : Value) : Res Value :=
  match a with
  | .posInf => .ok .posInf
  | .negInf => .ok Value.zero
  | .fin q =>
    if q == 0 then .ok Value.one
    else .error "exp of a non-zero number is not implemented in the Lean semantics (40-digit rounding)"

/-- values.py `ln_v` where it is exact (`ln 0 = -inf`, `ln 1 = 0`, `ln inf = inf`). -/
def lnV (a : Value) : Res Value :=
  match a with
  | .posInf => .ok .posInf
  | .negInf => .error "ln of a negative number"
  | .fin q =>
    if q < 0 then .error "ln of a negative number"
    else if q == 0 then .ok .negInf
    else if q == 1 then .ok Value.zero
    else .error "ln of a number other than 0 and 1 is not implemented in the Lean semantics (40-digit rounding)"

/-- The one-argument functions of expr.py `_FN1`. -/
def fn1 (f : String) (a : Value) : Res Value :=
  if f == "abs" then .ok (absV a)
  else if f == "floor" then .ok a.floorV
  else if f == "ceil" then .ok a.ceilV
  else if f == "sqrt" then a.sqrtV
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
  else if op == "^" then Value.powV x y
  else if op == "<" then .ok (Value.ofBool (Value.lt x y))
  else if op == "<=" then .ok (Value.ofBool (Value.le x y))
  else if op == ">" then .ok (Value.ofBool (Value.lt y x))
  else if op == ">=" then .ok (Value.ofBool (Value.le y x))
  else if op == "==" then .ok (Value.ofBool (x == y))
  else if op == "!=" then .ok (Value.ofBool (x != y))
  else .error s!"unknown operator {op}"

/-- An element of an optional array (`none` when absent or out of range). -/
def getSlot (a : Option (Array Value)) (i : Nat) : Option Value :=
  match a with
  | none => none
  | some xs => xs[i]?

/-- The value of a slot (0 outside a session; an error past the last slot). -/
def attrValue (env : Env) (slot : Nat) : Res Value :=
  if env.attrs.isNone then .ok Value.zero
  else
    match getSlot env.attrs slot with
    | some v => .ok v
    | none => .error s!"attribute slot {slot} out of range"

/-- A context variable of the moment (`now` is always there). -/
def ctxValue (env : Env) (name : String) : Res Value :=
  if name == "now" then .ok (.fin env.now)
  else
    match List.lookup name env.ctx with
    | some v => .ok v
    | none => .error s!"context variable `{name}` read outside its moment"

/-- A schedule `let`. -/
def localValue (env : Env) (i : Nat) : Res Value :=
  if env.locals.isNone then .error "a schedule `let` read outside its schedule"
  else
    match getSlot env.locals i with
    | some v => .ok v
    | none => .error s!"schedule `let` {i} out of range"

/-- An engine register. -/
def regValue (env : Env) (stage i : Nat) : Res Value :=
  match getSlot env.registers[stage]? i with
  | some v => .ok v
  | none => .error s!"register {i} of stage {stage} out of range"

/-- A function call `f(vs)` (expr.py's `fn` branch). -/
def fnValue (f : String) (vs : List Value) : Res Value :=
  match vs with
  | [x, y] =>
    if f == "min" then .ok (Value.minV x y)
    else if f == "max" then .ok (Value.maxV x y)
    else if f == "pow" then Value.powV x y
    else .error s!"{f}: expected 1 argument, got 2"
  | [x] =>
    if f == "min" || f == "max" || f == "pow" then .error s!"{f}: expected 2 arguments, got 1"
    else fn1 f x
  | _ => .error s!"{f}: wrong number of arguments ({vs.length})"

/-- expr.py `evaluate`. -/
partial def evaluate (e : Expr) (env : Env) : Res Value :=
  match e with
  | .num v => .ok v
  | .attr slot => attrValue env slot
  | .bin op x y => do
    if op == "&&" then
      let a ← evaluate x env
      if Value.nz a then
        let c ← evaluate y env
        return Value.ofBool (Value.nz c)
      else return Value.ofBool false
    else if op == "||" then
      let a ← evaluate x env
      if Value.nz a then return Value.ofBool true
      else
        let c ← evaluate y env
        return Value.ofBool (Value.nz c)
    else
      let a ← evaluate x env
      let c ← evaluate y env
      bin op a c
  | .un op x => do
    let a ← evaluate x env
    if op == "neg" then return Value.neg a else return Value.ofBool (!Value.nz a)
  | .cond c x y => do
    let t ← evaluate c env
    if Value.nz t then evaluate x env else evaluate y env
  | .fn f args => do
    let vs ← args.mapM (fun a => evaluate a env)
    fnValue f vs
  | .ctx name => ctxValue env name
  | .loc i => localValue env i
  | .reg stage i => regValue env stage i
  | other => env.ext other

/-- expr.py `resolve_ref`: `{base, count, index}` → an index; out of range is an error. -/
def resolveRef (env : Env) (r : Ref) : Res Nat := do
  match r.index with
  | none => return r.base
  | some ie =>
    let i ← evaluate ie env
    match i with
    | .fin q =>
      if q.den == 1 && decide (0 ≤ q.num) && decide (q.num < (r.count : Int)) then
        return r.base + q.num.toNat
      else throw s!"index {i.toWire} out of range 0..{r.count - 1}"
    | _ => throw s!"index {i.toWire} out of range 0..{r.count - 1}"

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

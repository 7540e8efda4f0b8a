/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import Lean.Data.Json
import SerqLang.Value

/-!
# Wire helpers: reading `Lean.Json`, writing canonical JSON

Input is parsed with `Lean.Json.parse` and read only through `Json.getObjVal?`, `getArr?`,
`getStr?`, `getNat?`, `getBool?` (whose object representation changed across releases, so this
file never looks inside an object). Every reader prefixes its error with the path it was
reading, e.g. `blocks[3][0].expr.a: missing key "k"`.

Output is written by `CJ.render`, our own printer of the canonical form of python/serq/wire.py
(`json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)`): sorted keys, no
whitespace, the same string escapes as Python. `Json.compress` is not used for output: its key
order and escapes are not those of Python's `json` (it renders control characters as `\uXXXX`
only and, in the releases read, emits object fields by a right fold).
-/

open Lean (Json)

namespace SerqLang
namespace Wire

/-- Prefix an error with where it happened. -/
def at_ {α : Type} (where_ : String) (r : Res α) : Res α :=
  match r with
  | .ok a => .ok a
  | .error e => .error s!"{where_}: {e}"

def isObj (j : Json) : Bool :=
  match j with
  | .obj _ => true
  | _ => false

/-- The value of key `k` of object `j`; an error if `j` is not an object or has no `k`. -/
def get (j : Json) (k : String) : Res Json :=
  if !isObj j then .error s!"expected an object with key \"{k}\""
  else
    match j.getObjVal? k with
    | .ok v => .ok v
    | .error _ => .error s!"missing key \"{k}\""

/-- The value of key `k`, `none` when it is absent or `null`. -/
def getOpt (j : Json) (k : String) : Option Json :=
  match j.getObjVal? k with
  | .ok Json.null => none
  | .ok v => some v
  | .error _ => none

def nat (j : Json) : Res Nat :=
  match j.getNat? with
  | .ok n => .ok n
  | .error _ => .error "expected a natural number (a JSON integer ≥ 0)"

def str (j : Json) : Res String :=
  match j.getStr? with
  | .ok s => .ok s
  | .error _ => .error "expected a string"

def bool (j : Json) : Res Bool :=
  match j.getBool? with
  | .ok b => .ok b
  | .error _ => .error "expected true or false"

def arr (j : Json) : Res (Array Json) :=
  match j.getArr? with
  | .ok a => .ok a
  | .error _ => .error "expected an array"

/-- A wire value: a JSON string `"p/q"`, `"inf"`, `"-inf"`. A JSON number is refused. -/
def value (j : Json) : Res Value :=
  match j with
  | .str s => Value.ofWire s
  | .num _ => .error "a JSON number where a value string (\"p/q\") was expected"
  | _ => .error "expected a value string (\"p/q\", \"inf\" or \"-inf\")"

/-- Read every element of an array with `f`, naming the index of a failing element. -/
def list {α : Type} (f : Json → Res α) (j : Json) : Res (List α) := do
  let a ← arr j
  let mut out : Array α := #[]
  let mut i := 0
  for x in a do
    out := out.push (← at_ s!"[{i}]" (f x))
    i := i + 1
  return out.toList

/-- `get` then `f`, with the key in the error path. -/
def field {α : Type} (j : Json) (k : String) (f : Json → Res α) : Res α :=
  at_ k (get j k >>= f)

/-- An optional field (absent or `null` gives `none`). -/
def fieldOpt {α : Type} (j : Json) (k : String) (f : Json → Res α) : Res (Option α) :=
  match getOpt j k with
  | none => .ok none
  | some v => at_ k (f v) |>.map some

/-- Parse a whole document. -/
def parse (what text : String) : Res Json :=
  match Json.parse text with
  | .ok j => .ok j
  | .error e => .error s!"{what}: not JSON: {e}"

end Wire

/-! ## Canonical output -/

/-- A JSON document to be printed canonically. Objects are association lists; `render` sorts
their keys. -/
inductive CJ where
  | null
  | bool (b : Bool)
  | nat (n : Nat)
  | int (i : Int)
  | str (s : String)
  | arr (xs : List CJ)
  | obj (kvs : List (String × CJ))
  /-- JSON text inserted as is (already valid JSON). -/
  | raw (text : String)

instance : Inhabited CJ := ⟨.null⟩

namespace CJ

def val (v : Value) : CJ := .str v.toWire
/-- values.py `amount_wire`: a pool amount is a JSON int when whole, else its wire text `"p/q"`
(docs/state.md), so runs with whole amounts print what they printed before 84aea69. -/
def amt (q : Rat) : CJ := if q.den == 1 then .int q.num else .str (Value.fin q).toWire
def amts (xs : List Rat) : CJ := .arr (xs.map amt)
def nats (xs : List Nat) : CJ := .arr (xs.map CJ.nat)
def opt {α : Type} (f : α → CJ) : Option α → CJ
  | none => .null
  | some a => f a

private def hexDigit (n : Nat) : Char :=
  if n < 10 then Char.ofNat (48 + n) else Char.ofNat (87 + n)

/-- Python's `json.dumps(..., ensure_ascii=False)` string escapes. -/
def escapeChar (c : Char) : String :=
  if c == '"' then "\\\""
  else if c == '\\' then "\\\\"
  else if c == '\n' then "\\n"
  else if c == '\r' then "\\r"
  else if c == '\t' then "\\t"
  else if c.toNat == 8 then "\\b"
  else if c.toNat == 12 then "\\f"
  else if c.toNat < 32 then
    let n := c.toNat
    "\\u00" ++ (String.singleton (hexDigit (n / 16))) ++ (String.singleton (hexDigit (n % 16)))
  else String.singleton c

def quote (s : String) : String :=
  "\"" ++ String.join (s.toList.map escapeChar) ++ "\""

/-- Insert into a list sorted by key (keys compared as strings, i.e. by code points). -/
def insertKey (kv : String × CJ) : List (String × CJ) → List (String × CJ)
  | [] => [kv]
  | x :: xs => if decide (kv.1 < x.1) then kv :: x :: xs else x :: insertKey kv xs

def sortKeys (kvs : List (String × CJ)) : List (String × CJ) :=
  kvs.foldl (fun acc kv => insertKey kv acc) []

/-- Canonical JSON text: sorted keys, `,` and `:` separators, no whitespace. -/
partial def render : CJ → String
  | .null => "null"
  | .bool true => "true"
  | .bool false => "false"
  | .nat n => toString n
  | .int i => toString i
  | .str s => quote s
  | .arr xs => "[" ++ ",".intercalate (xs.map render) ++ "]"
  | .raw text => text
  | .obj kvs =>
    "{" ++ ",".intercalate ((sortKeys kvs).map fun kv => quote kv.1 ++ ":" ++ render kv.2) ++ "}"

/-- An error object: `{"error": message}`. -/
def error (msg : String) : CJ := .obj [("error", .str msg)]

end CJ

end SerqLang

/-
Copyright (c) 2026 The serQ authors. Released under the Apache 2.0 license.
-/
import SerqLang.Value
import SerqLang.Transcendental
import SerqLang.Wire
import SerqLang.Ir
import SerqLang.Pool
import SerqLang.Thm.Pool
import SerqLang.Content
import SerqLang.Thm.Content
import SerqLang.Expr
import SerqLang.Config
import SerqLang.Program
import SerqLang.Json
import SerqLang.Workload
import SerqLang.State
import SerqLang.Eval
import SerqLang.ContentPool
import SerqLang.Holds
import SerqLang.Growth
import SerqLang.Stages
import SerqLang.Lag
import SerqLang.Session
import SerqLang.Claims
import SerqLang.Engine
import SerqLang.Step
import SerqLang.Invariants
import SerqLang.Ffi

/-!
# SerqLang

The executable semantics of serQ over exact rationals, mirroring `python/serq_spec/` function by
function (docs/spec-map.md), with the memory invariant of pools proved (`SerqLang.Thm.Pool`) and
the invariants of content pools (`SerqLang.Thm.Content`).
These sources were written without a Lean toolchain in reach and have not been compiled here;
docs/lean.md says how to build and check them.
-/

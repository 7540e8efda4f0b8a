/-
serQ's Lean 4 package: the executable semantics `SerqLang` (core Lean only, no Mathlib, no
Batteries) built as a shared library for the cffi backend (`python/serq_lean/`), and the
`serq-vectors` executable that replays the committed vectors through the Lean `step`.

Facts used here were read in leanprover/lean4 (`tests/lake/examples/reverse-ffi/lib/lakefile.lean`,
`src/lake/Lake/Config/LeanLibConfig.lean`): `defaultFacets := #[LeanLib.sharedFacet]` makes a bare
`lake build` produce `.lake/build/lib/lib<libName>.so`; `libName` is set explicitly because its
default changed across releases (lean4#11082). See docs/lean.md.
-/
import Lake
open Lake DSL

package serq where
  leanOptions := #[⟨`autoImplicit, false⟩, ⟨`relaxedAutoImplicit, false⟩]

@[default_target]
lean_lib SerqLang where
  defaultFacets := #[LeanLib.sharedFacet]
  libName := "serqlang"

/-- `lake exe serq-vectors vectors/` : replay every committed vector through `SerqLang.step`.
Its root lives under `SerqLang/Exe/` and is *not* imported by `SerqLang.lean`, so the `main`
it defines stays out of the shared library. -/
lean_exe «serq-vectors» where
  root := `SerqLang.Exe.Vectors

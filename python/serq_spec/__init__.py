"""serq_spec: the exact executable semantics of serQ over rationals (docs/spec.md).

The reference every other engine is checked against: `step(config) -> (config, record)` handles
one event, with exact `Fraction` arithmetic and every tie-break counter in the configuration.
"""

from __future__ import annotations


def backends() -> list[str]:
    """The executable semantics available here: always `"python"`; `"lean"` too when the Lean
    backend loads (`serq_lean.available()[0]`, docs/lean.md). serq_lean is imported lazily and
    its absence, or any failure to import it, means Python only."""
    try:
        import serq_lean
        ok = serq_lean.available()[0]
    except Exception:
        ok = False
    return ["python", "lean"] if ok else ["python"]

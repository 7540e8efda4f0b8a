"""serq_spec: the exact executable semantics of serQ over rationals (docs/spec.md).

The reference every other engine is checked against: `step(config) -> (config, record)` handles
one event, with exact `Fraction` arithmetic and every tie-break counter in the configuration.
"""

from __future__ import annotations


def backends() -> list[str]:
    """The executable semantics available: the Python one (a Lean backend will be added later)."""
    return ["python"]

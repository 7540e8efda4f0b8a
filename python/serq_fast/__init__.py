"""serq_fast: the production simulator — the semantics of docs/language.md §11 with float time and
live random streams (or a replayed sessions file). See docs/fast.md for the design."""

from serq_fast.step import Sim  # noqa: F401

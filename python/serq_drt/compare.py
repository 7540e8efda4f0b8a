"""The one comparison of the differential harness: two JSON-like values (dicts, lists, numbers,
strings, booleans, None) walked together, the first difference returned with its path.

Every pair the project holds against each other reduces what it compares to such values and
calls `first_difference` with a `Rule` saying how two leaves compare:

* `EXACT` — equal as JSON values; used where both sides speak the wire format (serq_spec and the
  Lean mirror print the same canonical state lines) or where the compared facts are integers and
  identifiers (serQ's vLLM model and the real scheduler's traces, serq_vllm/compare.py);
* `WIRE_VS_FLOAT` — the left side holds exact wire values (`"p/q"` strings, integers), the right
  side binary64 floats: a wire string and a number agree within 1e-9 relative (absolute below 1),
  an integer of the contract must be matched exactly, ±inf only by ±inf (lockstep,
  serq_drt/lockstep.py, docs/state.md).

Standard library only: the real-vLLM drivers load serq_vllm/compare.py, which uses this module.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

REL_TOL = 1e-9


@dataclass(frozen=True)
class Rule:
    """How two leaves compare (`same(a, b)`), and whether a dict's keys are walked sorted (paths
    of the first difference in a stable order) or in the left side's order (fields in the order
    their meaning gives, as the oracle's step view lists them)."""
    name: str
    same: Callable[[Any, Any], bool]
    sorted_keys: bool = True


def _exact(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _fraction(text: str) -> Fraction:
    """`Fraction(text)`, whatever its number of digits: an exact mean of the online estimates, or
    a time that depends on one, may have more digits than Python's default limit for text-to-int
    conversion (4300), which is lifted for this conversion only (as serq_spec's `values.wire`)."""
    try:
        return Fraction(text)
    except ValueError:
        if not hasattr(sys, "set_int_max_str_digits") or not text.replace("/", "").lstrip("-").isdigit():
            raise
        old = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(0)
        try:
            return Fraction(text)
        finally:
            sys.set_int_max_str_digits(old)


def wire_number(x: Any) -> float | None:
    """A wire value as a float: `"inf"`, `"-inf"`, `"p"`, `"p/q"` or a JSON number; None for
    anything else (a name, a boolean). Beyond binary64 it is ±inf, as the fast engine's float is."""
    if isinstance(x, str):
        if x == "inf":
            return math.inf
        if x == "-inf":
            return -math.inf
        try:
            q = _fraction(x)
        except (ValueError, ZeroDivisionError):
            return None
        try:
            return float(q)
        except OverflowError:
            return math.inf if q > 0 else -math.inf
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    return None


def close(a: float, b: float) -> bool:
    """Equal, or within REL_TOL relative (absolute below 1); an infinity only equals itself."""
    if a == b:
        return True
    if math.isinf(a) or math.isinf(b):
        return False
    return abs(a - b) <= REL_TOL * max(1.0, abs(a), abs(b))


def _wire_vs_float(exact: Any, fast: Any) -> bool:
    if exact is None or fast is None:
        return exact is fast
    if isinstance(exact, bool) or isinstance(fast, bool):
        return exact == fast
    if isinstance(exact, int):
        # an integer of the contract: exactly equal (the float side must be whole)
        return isinstance(fast, (int, float)) and fast == exact
    if isinstance(exact, str):
        if isinstance(fast, str):
            return exact == fast
        a, b = wire_number(exact), wire_number(fast)
        return a is not None and b is not None and close(a, b)
    return exact == fast


EXACT = Rule("exact", _exact)
EXACT_IN_ORDER = Rule("exact, fields in order", _exact, sorted_keys=False)
WIRE_VS_FLOAT = Rule("wire vs float (1e-9 relative)", _wire_vs_float)


@dataclass(frozen=True)
class Difference:
    """Where two values first differ: the path (`.pools.kv.free[3]`, `` for the whole value,
    `.x keys` when two dicts have different keys) and the two sides there."""
    path: str
    a: Any
    b: Any

    @property
    def field(self) -> str:
        """The top-level key the path starts with ('' for the whole value)."""
        head = self.path[1:] if self.path.startswith(".") else self.path
        for sep in (".", "[", " "):
            head = head.split(sep, 1)[0]
        return head


def first_difference(a: Any, b: Any, rule: Rule = EXACT, path: str = "") -> Difference | None:
    """None if A and B agree under RULE, else the first difference (depth first)."""
    if isinstance(a, dict):
        if not isinstance(b, dict):
            return Difference(path, a, b)
        if set(a) != set(b):
            return Difference(path + " keys", sorted(a), sorted(b))
        for k in (sorted(a) if rule.sorted_keys else a):
            d = first_difference(a[k], b[k], rule, f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return Difference(path, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, rule, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(b, (dict, list)):
        return Difference(path, a, b)
    return None if rule.same(a, b) else Difference(path, a, b)


def first_divergence(a_steps: list, b_steps: list, rule: Rule = EXACT) -> tuple[int, Difference] | None:
    """Two runs as lists of per-step values: the first step at which they differ and how
    (a step present on one side only differs with the missing side None)."""
    for k, (x, y) in enumerate(zip(a_steps, b_steps)):
        d = first_difference(x, y, rule)
        if d:
            return k, d
    if len(a_steps) != len(b_steps):
        k = min(len(a_steps), len(b_steps))
        return k, Difference("(missing step)", a_steps[k] if k < len(a_steps) else None,
                             b_steps[k] if k < len(b_steps) else None)
    return None

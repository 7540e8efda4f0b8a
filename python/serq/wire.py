"""The wire format shared by the front-end, both Python engines and the Lean semantics.

Values are exact: a finite value is a `fractions.Fraction`, and the two infinities are the floats
`math.inf` / `-math.inf` (Python compares and adds them with Fractions correctly, so no wrapper
type is needed). On the wire a value is a string: `"p"` or `"p/q"` in lowest terms, `"inf"` or
`"-inf"`. NaN never exists; producing one is an error at the place that produced it.

Canonical JSON: sorted keys, no insignificant whitespace, UTF-8. The same value always gives the
same bytes, so configurations and IRs can be compared by string or hash.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from fractions import Fraction
from typing import Any, Union

Value = Union[Fraction, float]  # float only for +inf / -inf

INF = math.inf

# ASCII digits only: `\d` would also match other scripts' digits, which `Fraction` then accepts.
_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
_RATIONAL = re.compile(r"-?[0-9]+(/[0-9]+)?")


class WireError(ValueError):
    """A value or document that does not follow the wire format."""


def is_decimal(text: str) -> bool:
    """Is `text` a decimal literal: optional sign, ASCII digits, optional fraction and exponent?"""
    return _DECIMAL.fullmatch(text) is not None


def parse_decimal(text: str) -> Fraction:
    """The exact rational a decimal literal denotes: `2e-5` -> 1/50000, `0.9` -> 9/10."""
    if not is_decimal(text):
        raise WireError(f"not a decimal number: {text!r}")
    return Fraction(text)


def value_to_wire(v: Any) -> str:
    """`Fraction(3, 10)` -> `"3/10"`, `7` -> `"7"`, `inf` -> `"inf"`. Floats other than ±inf are refused."""
    if isinstance(v, bool):
        raise WireError("a boolean is not a value")
    if isinstance(v, int):
        return str(v)
    if isinstance(v, Fraction):
        return str(v)  # Fraction.__str__ is lowest terms with a positive denominator: "p" or "p/q"
    if isinstance(v, float):
        if v == INF:
            return "inf"
        if v == -INF:
            return "-inf"
        raise WireError(f"a float is not an exact value: {v!r}")
    raise WireError(f"not a value: {v!r}")


def value_from_wire(s: Any) -> Value:
    """The inverse of `value_to_wire`. Accepts only canonical spellings."""
    if not isinstance(s, str):
        raise WireError(f"a value must be a string like \"3/10\" or \"inf\", got {s!r}")
    if s == "inf":
        return INF
    if s == "-inf":
        return -INF
    if not _RATIONAL.fullmatch(s):
        raise WireError(f"not a rational in lowest terms: {s!r}")
    try:
        q = Fraction(s)
    except ZeroDivisionError:
        raise WireError(f"a zero denominator: {s!r}") from None
    except ValueError:  # Python's limit on the digits of an integer string (4300 by default)
        raise WireError(f"a value of {len(s)} characters, more digits than Python converts "
                        f"({getattr(sys, 'get_int_max_str_digits', lambda: 4300)()})") from None
    if str(q) != s:
        raise WireError(f"not in lowest terms: {s!r} (write {str(q)!r})")
    return q


def is_finite(v: Value) -> bool:
    return isinstance(v, Fraction) or (isinstance(v, int) and not isinstance(v, bool))


def is_inf(v: Value) -> bool:
    """Is v one of ±inf? (the only floats a value can be)"""
    return isinstance(v, float)


def canonical_json(obj: Any) -> str:
    """Canonical JSON text (no trailing newline). Floats are refused: they have no exact meaning here."""

    def check(o: Any) -> None:
        if isinstance(o, float):
            raise WireError(f"a float inside a wire document: {o!r}")
        if isinstance(o, dict):
            for k, x in o.items():
                if not isinstance(k, str):
                    raise WireError(f"a non-string key: {k!r}")
                check(x)
        elif isinstance(o, (list, tuple)):
            for x in o:
                check(x)

    check(obj)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_hash(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()

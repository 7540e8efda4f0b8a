"""The limits of a program input: `args.number("NAME", default, in LO to HI, whole)`.

An input whose meaning is a choice (a policy 0, 1 or 2) or a count (servers, blocks) takes
nonsense such as `--set policy=-1` without a word unless the program says what it accepts. The
limits are our extension of the language (docs/language.md §2 and §17): a closed range `in LO to
HI` (either end may be infinite) and `whole` (a finite whole number). The linker checks the
input's value against them whatever set it — the default, `--set`, a profile, a sweep's grid —
and names the limit's own position in the error, so the message points at the declaration.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .wire import INF

# A decimal is shown as one when it has at most this many digits after the point (0.125),
# otherwise as p/q (1/3): the value the linker holds, exactly.
_DECIMAL_DIGITS = 12


def shown_value(v: Any) -> str:
    """An exact input value as a user writes it: `inf`, `-inf`, `3`, `0.5`, `1/3`."""
    if v == INF:
        return "inf"
    if v == -INF:
        return "-inf"
    f = Fraction(v)
    if f.denominator == 1:
        return str(f.numerator)
    den = f.denominator
    twos = fives = 0
    while den % 2 == 0:
        den //= 2
        twos += 1
    while den % 5 == 0:
        den //= 5
        fives += 1
    digits = max(twos, fives)
    if den != 1 or digits > _DECIMAL_DIGITS:
        return f"{f.numerator}/{f.denominator}"
    scaled = abs(f.numerator) * (10 ** digits // f.denominator)
    whole, frac = divmod(scaled, 10 ** digits)
    return f"{'-' if f < 0 else ''}{whole}.{frac:0{digits}d}"


@dataclass
class InputLimits:
    """What an input accepts: LOW ≤ value ≤ HIGH, and a finite whole number when WHOLE. RANGE_AT
    and WHOLE_AT are the positions (FILE index, LINE, COLUMN) of the clauses, None when absent."""
    low: Any = -INF
    high: Any = INF
    whole: bool = False
    range_at: tuple | None = None
    whole_at: tuple | None = None

    def range_text(self) -> str:
        return f"{shown_value(self.low)} to {shown_value(self.high)}"

    def what(self) -> str:
        """The values it accepts, in words: `a whole number from 0 to 2`, `a number >= 0`."""
        kind = "a whole number" if self.whole else "a number"
        if self.range_at is None or (self.low == -INF and self.high == INF):
            return kind
        if self.high == INF:
            return f"{kind} >= {shown_value(self.low)}"
        if self.low == -INF:
            return f"{kind} <= {shown_value(self.high)}"
        return f"{kind} from {self.range_text()}"

    def violation(self, value: Any) -> tuple[tuple | None, str] | None:
        """(the position of the clause VALUE breaks, what is wrong) or None when VALUE fits."""
        if self.range_at is not None and not self.low <= value <= self.high:
            return self.range_at, f"is outside its range {self.range_text()}"
        if self.whole and (value in (INF, -INF) or Fraction(value).denominator != 1):
            return self.whole_at, "is not a whole number, as its `whole` requires"
        return None


DEFAULT_SOURCE = "its default"


def limit_error_text(ext: str, value: Any, source: str, limits: InputLimits, problem: str) -> str:
    """The message of an input whose value breaks its limits: the value, where it came from
    (SOURCE: `its default`, `--set rate=2`, …), the limits, and what to do."""
    todo = ("change the default or the limits" if source == DEFAULT_SOURCE
            else f"give {limits.what()} (--set {ext}=…)")
    return f"input \"{ext}\" = {brief_value(value)} ({source}) {problem}: {todo}"


# a value longer than this is shown by its size (`about 1e400`): SOURCE spells it as it was given
BRIEF_CHARS = 40


def brief_value(v: Any) -> str:
    """shown_value, or for a value of hundreds of digits (`--set n=1e400`, an index of 1e400) its
    order of magnitude."""
    text = shown_value(v)
    if len(text) <= BRIEF_CHARS:
        return text
    f = Fraction(v)
    digits = len(str(abs(f.numerator))) - len(str(f.denominator))
    return f"about {'-' if f < 0 else ''}1e{digits}"

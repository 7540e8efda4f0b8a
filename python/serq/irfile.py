"""Reading a program for an engine: a `.sq` program through the front-end, or an IR file as it is.

The front-end only ever produces well-formed IR, but an IR file on disk may have been written by
hand or by another tool. The engines assume what the linker guarantees (a cap is never negative, a
block is positive, a `share content` pool has whole blocks, an index points at something), so an
IR file is checked here, once, for both engines, and a violation is reported with its JSON path
(`pools[0].cap: …`) instead of surfacing later as an invariant violation or a traceback. The check
covers the declarations (pools, prefixes, stages, workload arrivals); statements and expressions
are checked by the engines as they load them ("not supported yet: statement …").
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from typing import Any, Mapping

from .errors import SerqError
from .wire import INF, WireError, is_decimal, value_from_wire

IR_FORMAT = "serq-ir/1"
STAGE_KINDS = ("fifo", "ps", "delay", "step")


def read_program(path: str, sets: list[str] | Mapping[str, str] = (), profile: str | None = None) -> dict:
    """The IR of FILE: a `.json` IR file, checked, or a `.sq` program compiled with its `--set`s
    and the settings of `--profile PROFILE` (explicit `--set`s win)."""
    if path.endswith(".json"):
        if sets or profile:
            flag = "--set" if sets else "--profile"
            raise SerqError(f"{flag} applies to a .sq program, not to an IR file (bind inputs when "
                            f"producing the IR: serq ir FILE {flag} …)")
        return read_ir_file(path)
    settings = dict(sets) if isinstance(sets, Mapping) else parse_settings(sets)
    return load_with_profile(path, settings, profile)


PROFILE_HELP = ("apply a profile's settings (a file from `serq profile` or `serq fit`, or the name of "
                "a shipped profile) to the inputs the program declares; an explicit --set wins")
SET_HELP = ("bind an `args.number` input (a number or inf); repeatable, the last one wins (with a "
            "note when it changes the value)")


def add_program_args(p: argparse.ArgumentParser, what: str = "a serQ program (.sq) or its IR (.json)") -> None:
    """FILE, `--set NAME=VALUE` (as `args.sets`) and `--profile`: the arguments every command
    that reads a program takes, written once."""
    p.add_argument("file", metavar="FILE", help=what)
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE", help=SET_HELP)
    p.add_argument("--profile", metavar="FILE|NAME", help=PROFILE_HELP)


def load_ir(path: str, sets: list[str] | Mapping[str, str] = (), profile: str | None = None) -> dict:
    """The IR of FILE for any engine or tool: `read_program`, with a file that cannot be read a
    SerqError as well (the one loader of the commands, the API, sweeps and capacity search)."""
    try:
        return read_program(path, sets, profile)
    except SerqError:
        raise
    except (OSError, ValueError) as exc:
        raise SerqError(str(exc)) from None


def load_with_profile(path: str, settings: dict[str, str], profile: str | None) -> dict:
    """load_program(path, settings, optional=the profile's settings); a profile none of whose
    settings is an input of the program is an error (it would silently change nothing)."""
    from .frontend import load_program
    from .profilefile import profile_settings

    if not path.strip():  # a FILE: prefix would be empty (": error: …")
        raise SerqError("the program's path is empty: give a .sq program (or, to an engine, a .json IR file)")
    optional = profile_settings(profile)
    ir = load_program(path, settings, optional)
    if profile and not set(optional) & set(ir.get("inputs", {})):
        inputs = ", ".join(sorted(ir.get("inputs", {}))) or "none"
        raise SerqError(f"--profile {profile}: none of its settings ({', '.join(sorted(optional)) or 'none'}) "
                        f"is an input of this program (its `args.number` inputs: {inputs})", path)
    return ir


def parse_settings(pairs: list[str] | None) -> dict[str, str]:
    """`--set NAME=VALUE` arguments as {name: value text}; the last one of a name wins, with a
    note on standard error when it replaces another value (docs/language.md §14)."""
    out: dict[str, str] = {}
    for p in pairs or []:
        name, sep, value = p.partition("=")
        if not sep or not name.strip():
            raise SerqError(f"--set {p}: expected NAME=VALUE (an `args.number` input and a number or inf)")
        name, value = name.strip(), value.strip()
        if name in out and not same_setting(out[name], value) and _is_number(value):
            # legitimate (an override after a common prefix of flags), but never silent: a
            # forgotten earlier --set would otherwise change the run unseen (a value that is no
            # number is not used: the linker refuses it, and the note would say it is)
            print(f"serq: note: --set {name} is given twice ({out[name]}, then {value}): the last "
                  f"one, {value}, is used", file=sys.stderr)
        out[name] = value
    return out


def _is_number(text: str) -> bool:
    from .linker import setting_value

    try:
        setting_value(text)
        return True
    except ValueError:
        return False


def same_setting(a: str, b: str) -> bool:
    """Do two setting texts mean the same value (`0.5` and `1/2`)? Texts that are not numbers
    are compared as written; the linker refuses them later."""
    from .linker import setting_value

    try:
        return setting_value(a) == setting_value(b)
    except ValueError:
        return a == b


# One rule for every number on the command line, the rule `--set` follows: ASCII digits only
# (argparse's int() and float() also take `1_0`, other scripts' digits such as `٧`, `nan`, and
# round 1e400 to inf).
_INTEGER = re.compile(r"[+-]?[0-9]+")


def integer_option(text: str) -> int:
    """An integer option (`--seed`, `--sessions`, `--max-steps`, …): optional sign, ASCII digits."""
    if not _INTEGER.fullmatch(text) or len(text) > 100:
        raise argparse.ArgumentTypeError(f"expected a whole number in ASCII digits, got {text!r}")
    return int(text)


def number_option(text: str) -> float:
    """A number option (`--horizon`, `--warmup`): a decimal as `--set` takes it (ASCII digits,
    optional fraction and exponent) or inf, within binary64's range."""
    if text in ("inf", "+inf", "-inf"):
        return float(text)
    if not is_decimal(text) or len(text) > 400:
        raise argparse.ArgumentTypeError(f"expected a decimal number in ASCII digits (like 600, 0.5 or "
                                         f"2e-5) or inf, got {text!r}")
    x = float(text)
    if math.isinf(x):
        raise argparse.ArgumentTypeError(f"{text} is beyond binary64's range (about 1.8e308); write inf")
    return x


def field_at(decl: dict, name: str):
    """The position [FILE, LINE, COLUMN] of expression field NAME of a stage (`budget`,
    `granule`, `cost`, `capacity`: the stage's `at` object, docs/ir.md "Positions"), or None
    (an IR file written without positions). Both engines name it in a run-time error."""
    at = decl.get("at")
    return at.get(name) if isinstance(at, dict) else None


def read_ir_file(path: str) -> dict:
    from .sessionsfile import read_json_file

    ir = read_json_file(path, "IR file", "produce IR with `serq ir FILE`")
    try:
        check_ir(ir)
    except _Bad as bad:
        raise SerqError(f"malformed IR: {bad.where}: {bad.what} (produce IR with `serq ir FILE`; "
                        "docs/ir.md gives the format)", path) from None
    return ir


class _Bad(Exception):
    def __init__(self, where: str, what: str):
        super().__init__(f"{where}: {what}")
        self.where = where
        self.what = what


def check_ir(ir: Any) -> None:
    """Raise _Bad(path, problem) for the first declaration the engines could not trust."""
    if not isinstance(ir, dict):
        raise _Bad("(top level)", "an IR is a JSON object")
    if ir.get("format") != IR_FORMAT:
        raise _Bad("format", f"expected {IR_FORMAT!r}, got {ir.get('format')!r}")
    for key, kind in (("attrs", list), ("blocks", list), ("pools", list), ("stages", list),
                      ("workload", dict)):
        if key not in ir:
            raise _Bad(key, "missing")
        if not isinstance(ir[key], kind):
            raise _Bad(key, f"must be a JSON {'list' if kind is list else 'object'}")
    if ir.get("share", "maxmin") not in ("maxmin", "bottleneck"):   # docs/ir.md `share`
        raise _Bad("share", f"expected \"maxmin\" or \"bottleneck\", got {json.dumps(ir['share'])}")
    pools, stages = ir["pools"], ir["stages"]
    for i, p in enumerate(pools):
        _pool(p, f"pools[{i}]", len(stages))
    keys = set()
    for i, x in enumerate(ir.get("prefixes") or []):
        keys.add(_prefix(x, f"prefixes[{i}]", keys))
    for i, s in enumerate(stages):
        _stage(s, f"stages[{i}]", len(pools))
    nblocks = len(ir["blocks"])
    for key in ("init", "turn", "session", "server"):
        b = ir["workload"].get(key)
        if b is not None and not (_is_index(b) and b < nblocks):
            raise _Bad(f"workload.{key}", f"must be a block index below {nblocks} or null, got {b!r}")


def _value(x: Any, where: str):
    if not isinstance(x, str):
        raise _Bad(where, f"a value is a JSON string (\"p\", \"p/q\", \"inf\"), got {x!r}")
    try:
        return value_from_wire(x)
    except WireError as exc:
        raise _Bad(where, str(exc)) from None


def _is_index(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _kind(x: Any, where: str, kinds: tuple) -> str:
    if not isinstance(x, dict) or x.get("kind") not in kinds:
        got = x.get("kind") if isinstance(x, dict) else x
        raise _Bad(where, f"kind must be one of {', '.join(kinds)}, got {got!r}")
    return x["kind"]


def _pool(p: Any, at: str, nstages: int) -> None:
    if not isinstance(p, dict):
        raise _Bad(at, "a pool is a JSON object")
    if not isinstance(p.get("name"), str):
        raise _Bad(f"{at}.name", "missing or not a string")
    cap = _value(p.get("cap"), f"{at}.cap")
    if cap < 0:
        raise _Bad(f"{at}.cap", f"a capacity cannot be negative, got {p['cap']}")
    block = p.get("block")
    if block is not None:
        b = _value(block, f"{at}.block")
        if b <= 0 or b == INF:
            raise _Bad(f"{at}.block", f"must be positive and finite or null, got {block}")
    _kind(p.get("evict"), f"{at}.evict", ("lru", "by"))
    _kind(p.get("preempt"), f"{at}.preempt", ("none", "lifo", "by"))
    _kind(p.get("queue"), f"{at}.queue", ("fifo", "by"))
    by = p.get("admitted_by")
    if by is not None and not (_is_index(by) and by < nstages):
        raise _Bad(f"{at}.admitted_by", f"must be a stage index below {nstages} or null, got {by!r}")
    share = p.get("share")
    if share not in (None, "content"):
        raise _Bad(f"{at}.share", f"must be \"content\" or null, got {share!r}")
    if share == "content":
        if block is None or cap == INF or _value(block, at).denominator != 1 or cap % _value(block, at) != 0:
            raise _Bad(at, "a `share content` pool needs a whole block and a finite cap that is a "
                           "whole number of blocks")
        if p["evict"]["kind"] != "lru":
            raise _Bad(f"{at}.evict", "a `share content` pool evicts by lru")


def _prefix(x: Any, at: str, keys: set):
    if not isinstance(x, dict):
        raise _Bad(at, "a prefix is a JSON object")
    key = _value(x.get("key"), f"{at}.key")
    if key == INF or key <= 0 or key.denominator != 1 or key in keys:
        raise _Bad(f"{at}.key", f"must be a positive whole number, unique, got {x.get('key')}")
    for f in ("length", "total"):
        n = _value(x.get(f), f"{at}.{f}")
        if n == INF or n < 0 or n.denominator != 1:
            raise _Bad(f"{at}.{f}", f"must be a whole number >= 0, got {x.get(f)}")
    after = x.get("after")
    if after is not None and _value(after, f"{at}.after") not in keys:
        raise _Bad(f"{at}.after", f"must be the key of an earlier prefix or null, got {after}")
    return key


def _stage(s: Any, at: str, npools: int) -> None:
    if not isinstance(s, dict):
        raise _Bad(at, "a stage is a JSON object")
    if not isinstance(s.get("name"), str):
        raise _Bad(f"{at}.name", "missing or not a string")
    kind = s.get("kind")
    if kind not in STAGE_KINDS:
        raise _Bad(f"{at}.kind", f"must be one of {', '.join(STAGE_KINDS)}, got {kind!r}")
    if kind == "fifo":
        n = s.get("servers")
        if not (_is_index(n) and n >= 1):
            raise _Bad(f"{at}.servers", f"must be a whole number >= 1, got {n!r}")
    if kind == "step":
        mem = s.get("memory")
        if mem is not None and not (_is_index(mem) and mem < npools):
            raise _Bad(f"{at}.memory", f"must be a pool index below {npools} or null, got {mem!r}")
        if s.get("lag", 0) not in (0, 1):
            raise _Bad(f"{at}.lag", f"must be 0 or 1, got {s.get('lag')!r}")
        for key in ("schedule", "lets", "registers"):
            if not isinstance(s.get(key, []), list):
                raise _Bad(f"{at}.{key}", "must be a JSON list")

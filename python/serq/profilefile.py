"""Step-cost profile files (docs/profiles.md §3): read, check, write, and find by name.

A profile holds the constants of a step-cost model for one GPU, model and parallelism: where
they come from (`kind`, `source`), the coefficients with units (and a 95 % interval when they
were fitted), and the `--set` values that bind them in a program (`set`). `serq profile` writes
roofline profiles, `serq fit` fitted ones, and a published fit ships with serQ under
serq/profiles/. `--profile FILE|NAME` on every command that takes `--set` applies the `set`
entries to the inputs the program declares; an explicit `--set` wins.

A profile file on disk may have been edited by hand, so it is checked once, here, and the first
bad field is reported with its JSON path and the file's name.
"""

from __future__ import annotations

import json
import math
import os
import re
from importlib import resources
from typing import Any

from .outputfile import write_text
from .errors import SerqError

PROFILE_FORMAT = 1
KINDS = ("roofline", "fit", "published-fit")
FIELDS = {"serq_profile", "name", "kind", "source", "cost_model", "coefficients", "set", "derived", "fit"}
# derived: what a roofline computed on the way (KV blocks, …); fit: a measured fit's diagnostics
# (rows, held-out MAPE per step kind), written by `serq fit`
REQUIRED = FIELDS - {"derived", "fit"}
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # an `args.number` input name
ADVICE = "write one with `serq profile` or `serq fit`; docs/profiles.md gives the format"


class _Bad(Exception):
    def __init__(self, where: str, what: str):
        super().__init__(f"{where}: {what}")
        self.where = where
        self.what = what


def read_profile(path: str) -> dict:
    """The profile in PATH, checked; a SerqError naming PATH and the first bad field otherwise."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise SerqError(f"cannot read the profile: {exc.strerror or exc}", path) from None
    except UnicodeDecodeError as exc:
        raise SerqError(f"cannot read the profile: not UTF-8 text ({exc.reason})", path) from None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise SerqError(f"cannot read the profile: not JSON: {exc} ({ADVICE})", path) from None
    try:
        check_profile(data)
    except _Bad as bad:
        raise SerqError(f"malformed profile: {bad.where}: {bad.what} ({ADVICE})", path) from None
    return data


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def write_profile(path: str, profile: dict) -> None:
    """Check PROFILE and write it to PATH atomically as canonical JSON (sorted keys, indent 2,
    a final newline); SerqError for a bad profile or a folder that cannot be written."""
    try:
        check_profile(profile)
    except _Bad as bad:
        raise SerqError(f"refusing to write a malformed profile: {bad.where}: {bad.what}", path) from None
    try:
        write_text(path, profile_text(profile))
    except OSError as exc:
        raise SerqError(f"cannot write the profile: {exc.strerror or exc}", path) from None


def profile_text(profile: dict) -> str:
    """The canonical text of a profile file."""
    return json.dumps(profile, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def check_profile(p: Any) -> None:
    """Raise _Bad(path, problem) for the first field of P that does not follow docs/profiles.md §3."""
    if not isinstance(p, dict):
        raise _Bad("(top level)", "a profile is a JSON object")
    for key in sorted(REQUIRED):
        if key not in p:
            raise _Bad(key, "missing")
    extra = sorted(set(p) - FIELDS)
    if extra:
        raise _Bad(extra[0], f"unknown field (a profile has {', '.join(sorted(FIELDS))})")
    if p["serq_profile"] != PROFILE_FORMAT or isinstance(p["serq_profile"], bool):
        raise _Bad("serq_profile", f"must be {PROFILE_FORMAT} (the format version), got {p['serq_profile']!r}")
    for key in ("name", "source", "cost_model"):
        if not isinstance(p[key], str) or not p[key].strip():
            raise _Bad(key, f"must be a non-empty string, got {p[key]!r}")
    if p["kind"] not in KINDS:
        raise _Bad("kind", f"must be one of {', '.join(KINDS)}, got {p['kind']!r}")
    coefs = p["coefficients"]
    if not isinstance(coefs, dict):
        raise _Bad("coefficients", "must be a JSON object {NAME: {value, unit, ci95}}")
    for name, c in coefs.items():
        _coefficient(c, f"coefficients.{name}")
    sets = p["set"]
    if not isinstance(sets, dict):
        raise _Bad("set", "must be a JSON object {SETTING: \"number text\"}")
    for name, text in sets.items():
        at = f"set.{name}"
        if not NAME.fullmatch(name):
            raise _Bad(at, "a setting is the name of an `args.number` input (letters, digits, _)")
        if not isinstance(text, str):
            raise _Bad(at, f"must be the number as a JSON string (as after --set {name}=), got {text!r}")
        _number_text(text, at)
    for key in ("derived", "fit"):
        if key in p and not isinstance(p[key], dict):
            raise _Bad(key, "must be a JSON object or absent")


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _coefficient(c: Any, at: str) -> None:
    if not isinstance(c, dict):
        raise _Bad(at, "must be a JSON object {value, unit, ci95}")
    extra = sorted(set(c) - {"value", "unit", "ci95"})
    if extra:
        raise _Bad(f"{at}.{extra[0]}", "unknown field (a coefficient has value, unit, ci95)")
    if not _finite(c.get("value")):
        raise _Bad(f"{at}.value", f"must be a finite number, got {c.get('value')!r}")
    if not isinstance(c.get("unit"), str) or not c["unit"].strip():
        raise _Bad(f"{at}.unit", f"must be a non-empty string such as \"s\" or \"s/token\", got {c.get('unit')!r}")
    if "ci95" not in c:
        raise _Bad(f"{at}.ci95", "missing ([lo, hi], or null when there is none)")
    ci = c["ci95"]
    if ci is not None:
        if not (isinstance(ci, list) and len(ci) == 2 and all(_finite(v) for v in ci)):
            raise _Bad(f"{at}.ci95", f"must be [lo, hi] (two finite numbers) or null, got {ci!r}")
        if ci[0] > ci[1]:
            raise _Bad(f"{at}.ci95", f"lo must not exceed hi, got {ci!r}")


def _number_text(text: str, at: str) -> None:
    from .linker import setting_value

    try:
        setting_value(text)
    except ValueError:
        raise _Bad(at, f"not a number: {text!r} (a decimal like 2e-5, a ratio like 1/3, or inf)") from None


# ---------------------------------------------------------------- shipped profiles, by name

def shipped_profiles() -> dict[str, Any]:
    """{name: resource} of the profiles that ship with serQ (serq/profiles/NAME.json)."""
    folder = resources.files("serq").joinpath("profiles")
    out = {}
    if folder.is_dir():
        for entry in folder.iterdir():
            if entry.name.endswith(".json"):
                out[entry.name[: -len(".json")]] = entry
    return dict(sorted(out.items()))


def resolve_profile(arg: str) -> dict:
    """The profile `--profile ARG` names: a file path, or the name of a shipped profile."""
    if os.path.exists(arg):
        return read_profile(arg)
    shipped = shipped_profiles()
    if arg in shipped:
        with resources.as_file(shipped[arg]) as path:
            return read_profile(str(path))
    names = ", ".join(shipped) or "none"
    raise SerqError(f"--profile {arg}: no such file, and not a shipped profile (shipped: {names}); "
                    "write one with `serq profile --gpu G --model M -o FILE`")


def profile_settings(arg: str | None) -> dict[str, str]:
    """The `set` entries of the profile `--profile ARG` names ({} without one)."""
    if not arg:
        return {}
    return dict(resolve_profile(arg)["set"])

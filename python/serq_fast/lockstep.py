"""Lockstep: the exact spec and the fast simulator on one sampled workload (placeholder)."""

from __future__ import annotations

import json


def dump_line(line: dict) -> str:
    return json.dumps(line, sort_keys=True, separators=(",", ":"))


def main(args) -> int:
    print("serq lockstep: serq_spec is not available yet")
    return 2

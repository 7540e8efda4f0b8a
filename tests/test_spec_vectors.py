"""Replay the rule vectors of vectors/spec/: each pins one rule of docs/language.md §11 with numbers
derived by hand in its README.md (docs/language.md §11.12 lists the defects that taught the rules)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from serq.frontend import load_program
from serq_spec.program import Program
from serq_spec.step import run
from serq_spec.trace import content_json, pool_json
from serq_spec.workload import Workload

ROOT = Path(__file__).resolve().parent.parent / "vectors" / "spec"
VECTORS = sorted(p.name for p in ROOT.iterdir() if (p / "program.sq").exists())


def run_vector(d: Path):
    """Run a vector's program on its sessions file; collect the step records and the final Config."""
    prog = Program(load_program(str(d / "program.sq"), {}), "program.sq", workload=Workload.replay(json.loads((d / "sessions.json").read_text())))
    recs = []
    cfg = run(prog, on_step=lambda c, r, k: recs.append((c.now, r, content_lines(c), pool_lines(c))), check=True)
    return cfg, recs


def pool_lines(cfg) -> dict:
    """`used` and `leases` (docs/state.md POOL) of every pool at the end of a step."""
    out = {}
    for p in range(len(cfg.pools)):
        line = pool_json(cfg, p)
        out[line["name"]] = {"used": line["used"], "leases": line.get("leases", [])}
    return out


def content_lines(cfg) -> dict:
    """The docs/content.md §5 keys of every `share content` pool at the end of a step."""
    return {cfg.program.pools[p]["name"]: content_json(cfg, p) for p in range(len(cfg.pools))
            if cfg.pools[p].content is not None}


def summary(cfg, recs) -> dict:
    w = str
    out = {"observations": {}, "iterations": {}, "admitted": [], "preempted": [], "released": [], "evicted": [],
           "rejected": []}
    out["content_at"] = {}   # time -> the content pools at the end of the last step at that time
    out["pools_at"] = {}     # time -> every pool's used and leases at the end of the last step then
    for now, r, content, pools in recs:
        if content:
            out["content_at"][w(now)] = content
        out["pools_at"][w(now)] = pools
        for name, serial, _turn, t, v in r["observations"]:
            out["observations"].setdefault(name, []).append([serial, w(t), w(v)])
        for it in r["iterations"]:
            out["iterations"][w(it["start"])] = [[s, n] for s, _m, n in it["assign"]]
        for key in ("admitted", "preempted", "released", "evicted", "rejected"):
            out[key] += [[w(now)] + list(x) for x in r[key]]
    out["finished"] = [[w(now)] + list(x) for now, r, _c, _p in recs for x in r["finished"]]
    out["spills"] = {cfg.program.pools[i]["name"]: p.spills for i, p in enumerate(cfg.pools)}
    out["tier_hits"] = {cfg.program.pools[i]["name"]: p.tier_hits for i, p in enumerate(cfg.pools)}
    out["preemptions"] = {cfg.program.pools[i]["name"]: p.preemptions for i, p in enumerate(cfg.pools)}
    out["rejected_counts"] = {cfg.program.pools[i]["name"]: p.rejected for i, p in enumerate(cfg.pools)}
    out["final_entries"] = {cfg.program.pools[i]["name"]: [e.to_json() for e in sorted(p.entries, key=lambda e: (e.last, e.rel))]
                            for i, p in enumerate(cfg.pools)}
    return out


def chrono(rows):
    return sorted(rows, key=lambda r: (Fraction(r[1]), r[0]))


@pytest.mark.parametrize("name", VECTORS)
def test_vector(name):
    d = ROOT / name
    assert (d / "README.md").exists(), "every vector carries its hand derivation"
    expected = json.loads((d / "expected.json").read_text())
    got = summary(*run_vector(d))
    for obs_name, rows in expected.get("observations", {}).items():
        assert chrono(got["observations"].get(obs_name, [])) == chrono(rows), obs_name
    for obs_name, per_serial in expected.get("values_by_serial", {}).items():
        for serial, values in per_serial.items():
            got_values = [v for s, _t, v in got["observations"].get(obs_name, []) if s == int(serial)]
            assert got_values == values, f"{obs_name} of session {serial}"
    for pool, n in expected.get("preemptions", {}).items():
        assert got["preemptions"][pool] == n
    for pool, n in expected.get("spills", {}).items():   # chunks moved to the tier (§11.8.1)
        assert got["spills"][pool] == n, f"spills of pool {pool}"
    for pool, n in expected.get("tier_hits", {}).items():   # blocks loaded back from a content tier
        assert got["tier_hits"][pool] == n, f"tier_hits of pool {pool}"
    for stage, rows in expected.get("finished_on", {}).items():   # every job done there, in order
        assert [[t, tid] for t, name, tid in got["finished"] if name == stage] == rows, f"finished on {stage}"
    for start, assign in expected.get("iterations", []):
        assert got["iterations"].get(start) == assign, f"iteration at {start}"
    for key in ("admitted", "preempted", "released"):
        # Exact within the derivation's window: on the pools the expected rows name, between the
        # first and last expected time, the rows are exactly these, in order (an extra or a
        # reordered admission, preemption or release fails, not only a missing one).
        rows = expected.get(key, [])
        if rows:
            lo, hi = min(Fraction(r[0]) for r in rows), max(Fraction(r[0]) for r in rows)
            pools = {r[2] for r in rows}
            window = [r for r in got[key] if lo <= Fraction(r[0]) <= hi and r[2] in pools]
            assert window == rows, f"{key} on {sorted(pools)} in [{lo}, {hi}]: {window} != {rows}"
    if "evicted" in expected:
        assert got["evicted"] == expected["evicted"]
    if "rejected" in expected:   # every rejection, in order: [time, serial, pool]
        assert got["rejected"] == expected["rejected"]
    for pool, n in expected.get("rejected_counts", {}).items():
        assert got["rejected_counts"][pool] == n, f"rejected in pool {pool}"
    for pool, entries in expected.get("final_entries", {}).items():
        assert got["final_entries"][pool] == entries
    for time, pool, keys in expected.get("pools_at", []):   # used / leases at the end of that time
        assert got["pools_at"][time][pool] == keys, f"{pool} at {time}"
    for time, pool, keys in expected.get("content_at", []):   # docs/content.md §5 keys at that time
        state = got["content_at"][time][pool]
        for key, value in keys.items():
            assert state[key] == value, f"{pool} {key} at {time}"


def test_every_vector_is_complete():
    assert len(VECTORS) >= 13
    for name in VECTORS:
        for f in ("program.sq", "sessions.json", "expected.json", "README.md"):
            assert (ROOT / name / f).exists(), f"{name}/{f}"

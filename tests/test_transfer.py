"""`transfer S (w) from P to Q (n);` (docs/language.md §11.15): serq_spec and serq_fast in lockstep on
the vector `transfer_kv_handoff`, the P/D example and a program with drawn amounts; the seeded fault
`transfer_early_release` (docs/fast.md) caught; a transfer is the same run as `run S (w); load Q (n);
release P;`; and its errors, at parse, link and run time, located FILE:LINE:COLUMN."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("serq_spec.step")

from serq.errors import SerqError
from serq.frontend import compile_source, load_program
from serq_drt.lockstep import Divergence, fast_lines, lockstep, sample_sessions
from serq_fast import report
from serq_fast.simulate import RunOptions, simulate
from serq_spec.errors import SpecError
from serq_spec.program import Program
from serq_spec.step import run
from serq_spec.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
VECTOR = ROOT / "vectors" / "spec" / "transfer_kv_handoff" / "program.sq"
EXAMPLE = ROOT / "examples" / "single-turn" / "pd_disagg.sq"

# Drawn prompt lengths and link times; the prefill pool leased for 1000 s (a `lease_end` event pending
# when the transfer ends it) or forever; even sessions copy on from dk into a hold of ek, so
# dk is a destination and a source, and a hold (not only a lease) is released by a transfer.
DRAWN = """\
fn main() {
  pool pk { cap 6; block 2; evict lru; }
  pool dk { cap 9; evict lru; preempt none; }
  pool ek { cap 30; block 2; evict lru; }
  stage pre : fifo;
  stage link : ps(1);
  workload {
    arrive poisson(1);
    turn { set p = 1 + floor(~uniform(0, 4)); set t = ~bernoulli(1/2) ? 1000 : inf; }
    session { turn; turn; }
  }
  server {
    hold pk (p) { run pre (~exp(2)); } cache (p) lease pk (t);
    hold dk (p + 1) {
      transfer link (~uniform(0, 1)) from pk to dk (p);
      branch (serial - 2 * floor(serial / 2) == 0) {
        hold ek (p) { transfer link (1/4) from dk to ek (p); run pre (1/2); }
      }
      run pre (1/4);
    }
  }
}
"""

# Holders of dk in the middle of their copies are preemption victims (dk is no engine's memory, the
# link a ps stage): serial 0's growth preempts the later serials, whose copies are withdrawn and
# start again when their holds of dk are admitted again (docs/spec.md "Transfers").
PREEMPTED = """\
fn main() {
  pool pk { cap 40; }
  pool dk { cap 8; preempt by (-serial); }
  stage pre : fifo;
  stage link : ps(1);
  workload { arrive batch(4); session { turn; } }
  server {
    hold pk (2) { run pre (1/2); } lease pk (inf);
    hold dk (2) {
      transfer link (serial == 0 ? 1 : 3) from pk to dk (2);
      grow dk (serial == 0 ? 4 : 0);
      run pre (1/4);
    }
  }
}
"""

# A copy over the sender's and the receiver's links at once (docs/language.md §11.15: a flow,
# §11.14), beside one-stage jobs on the receiving link, under `share maxmin`.
TWO_LINKS = """\
fn main() {
  pool pk { cap 10; }
  pool dk { cap 10; }
  stage send : ps(1);
  stage recv : ps(2);
  stage work : fifo;
  share maxmin;
  workload { arrive poisson(1); }
  server {
    hold pk (4) { run work (~exp(4)); } lease pk (inf);
    hold dk (4) {
      transfer send, recv (~exp(1)) from pk to dk (3);
      observe t = now;
    }
    branch with (1/2) { run recv (~exp(2)); }
  }
}
"""


def programs():
    yield "vector", load_program(str(VECTOR), {}), 2
    yield "pd-2p2d", compile_source(EXAMPLE.read_text(), str(EXAMPLE), {"R": "2", "lambda": "4"}), 5
    yield "drawn", compile_source(DRAWN, "drawn.sq", {}), 5
    yield "preempted", compile_source(PREEMPTED, "preempted.sq", {}), 4
    yield "two-links", compile_source(TWO_LINKS, "two_links.sq", {}), 6


CASES = list(programs())


@pytest.mark.parametrize("name,ir,k", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("seed", [1, 2])
def test_transfer_programs_agree(name, ir, k, seed):
    assert lockstep(ir, seed, k, name) > 0


def test_a_copy_is_preempted_and_starts_again():
    """Not vacuous: in PREEMPTED serials 3 and 2 lose dk while their copies run on the link (only
    serial 1's stays), start their copies again from the whole work when readmitted, and every
    session releases dk once."""
    _, ir, k = next(c for c in CASES if c[0] == "preempted")
    lines = fast_lines(ir, sample_sessions(ir, 1, k, "preempted"))
    at = next(i for i, line in enumerate(lines) if line["records"]["preempted"])
    assert [r[0] for r in lines[at]["records"]["preempted"]] == [3, 2]
    assert lines[at - 1]["stages"][1]["active"][2:] == [[2, pytest.approx(17 / 6)], [3, 3.0]]
    assert lines[at]["stages"][1]["active"] == [[1, 2.5]]
    assert lines[at + 1]["stages"][1]["active"][1:] == [[2, 3.0], [3, 3.0]]   # the copies again
    released = [r[0] for line in lines for r in line["records"]["released"] if r[1] == "dk"]
    assert sorted(released) == [0, 1, 2, 2, 3, 3]   # twice for the preempted: at preemption, at the end


@pytest.mark.parametrize("name,ir,k", CASES, ids=[c[0] for c in CASES])
def test_seeded_early_release_is_caught(monkeypatch, name, ir, k):
    """`transfer_early_release`: serq_fast releases P as the copy starts, not when it ends."""
    monkeypatch.setenv("SERQ_FAST_FAULT", "transfer_early_release")
    with pytest.raises(Divergence):
        lockstep(ir, 1, k, name)


def three_statements(text: str) -> str:
    """The program with each `transfer S (w) from P to Q (n);` written as its three statements."""
    pattern = re.compile(r"transfer ([^();]+?) \((.*?)\) from (\S+) to (\S+) \((.*?)\);")
    out, count = pattern.subn(r"run \1 (\2); load \4 (\5); release \3;", text)
    assert count, "no transfer in the program"
    return out


def fast_report(ir: dict) -> dict:
    sim = simulate(ir, RunOptions(seed=3, horizon=60, warmup=0), file="p.sq")
    return json.loads(json.dumps(report.build(sim)))


@pytest.mark.parametrize("name,text,settings", [
    ("vector", VECTOR.read_text(), {}),
    ("pd-1p1d", EXAMPLE.read_text(), {"lambda": "2"}),
    ("drawn", DRAWN, {}),
    ("preempted", PREEMPTED, {}),
    ("two-links", TWO_LINKS, {}),
], ids=["vector", "pd-1p1d", "drawn", "preempted", "two-links"])
def test_a_transfer_is_a_run_a_load_and_a_release(name, text, settings):
    """The same report (serq_fast) and the same records of admissions, releases and evictions
    (serq_spec) as `run S (w); load Q (n); release P;`."""
    one = compile_source(text, "p.sq", settings)
    three = compile_source(three_statements(text), "p.sq", settings)
    assert any(st["op"] == "transfer" for b in one["blocks"] for st in b)
    assert not any(st["op"] == "transfer" for b in three["blocks"] for st in b)
    assert fast_report(one) == fast_report(three)
    sessions = sample_sessions(one, 1, {"vector": 2, "preempted": 4}.get(name, 3), name)
    records = []
    for ir in (one, three):
        cfg = run(Program(ir, "p.sq", workload=Workload.replay(sessions)), check=True)
        records.append({k: cfg.records[k] for k in ("admitted", "released", "evicted", "observations")})
    assert records[0] == records[1]


# ---- errors ---------------------------------------------------------------------------------------

BASE = """\
fn main() {
  pool pk { cap 8; }
  pool dk { cap 8; }
  pool kv[2] { cap 8; }
  stage link : fifo;
  stage link2 : ps(1);
  device d { mem cap 8; }
  engine eng on d { tokens cap 8; schedule { advance running; admit waiting; } execute (1); }
  workload { arrive batch(1); session { turn; } }
  server {
    hold pk (4) { run link (1); } lease pk (inf);
    hold dk (4) { run link (1); }
    hold kv[0] (1), kv[1] (1) { run link (1); }
    BODY
  }
}
"""


def located(body: str) -> tuple[str, int, int]:
    """BASE with BODY in the server; `@@` marks the expected error position."""
    text = BASE.replace("BODY", body)
    i = text.index("@@")
    text = text[:i] + text[i + 2:]
    return text, text.count("\n", 0, i) + 1, i - text.rfind("\n", 0, i)


LINK_ERRORS = {
    "syntax: no `to`": ("hold dk (4) { transfer link (1) from pk @@dk (3); }", "expected"),
    "an engine as the link": ("hold dk (4) { transfer @@eng (1) from pk to dk (3); }", "`eng` is an engine"),
    "the same pool": ("hold dk (4) { transfer link (1) from dk to @@dk (3); }", "to itself"),
    "the same array member": ("hold dk (4) { transfer link (1) from kv[1] to @@kv[1] (3); }", "to itself"),
    "an unknown pool": ("hold dk (4) { transfer link (1) from @@pq to dk (3); }", "unknown pool `pq`"),
    "a pool no hold takes": ("hold dk (4) { transfer link (1) from pk to @@free (3); }", "no hold of this program takes"),
    "a fifo among several links": ("hold dk (4) { transfer link2, @@link (1) from pk to dk (3); }",
                                   "`link` is a fifo stage; a run over several stages needs ps stages"),
    "a link named twice": ("hold dk (4) { transfer link2, @@link2 (1) from pk to dk (3); }", "is named twice"),
    "in a fork": ("fork { @@transfer link (1) from pk to dk (3); } join;", "is not allowed inside a `fork` block"),
}


@pytest.mark.parametrize("what", sorted(LINK_ERRORS))
def test_link_errors_are_located(what):
    body, fragment = LINK_ERRORS[what]
    text, line, col = located(body)
    text = text.replace("  pool kv[2]", "  pool free { cap 8; }\n  pool kv[2]") if "free" in body else text
    if "free" in body:
        line += 1
    with pytest.raises(SerqError) as info:
        compile_source(text, "t.sq", {})
    e = info.value
    assert fragment in e.message, e.message
    assert (e.line, e.column) == (line, col), (e.line, e.column, e.message)
    assert e.render().startswith(f"t.sq:{line}:{col}: error: ")


def test_content_pool_is_refused_as_the_destination():
    text, line, col = located("hold dk (4) { transfer link (1) from pk to @@sc (3); }")
    text = text.replace("  pool kv[2]", "  pool sc { cap 8; block 1; share content; }\n  pool kv[2]")
    with pytest.raises(SerqError) as info:
        compile_source(text, "t.sq", {})
    assert "`share content`" in info.value.message
    assert (info.value.line, info.value.column) == (line + 1, col)


RUN_ERRORS = {
    # the lease of pk ends with its first transfer: the second finds no allocation of pk
    "P not held": ("hold dk (4) { transfer link (1) from pk to dk (1); @@transfer link (1) from pk to dk (1); }",
                   "transfer from pool pk: the session holds no allocation of it (a hold or a lease)"),
    "Q not held": ("@@transfer link (1) from pk to dk (3);",
                   "transfer to pool dk: the session holds no allocation of it (a hold or a lease)"),
    "beyond Q's allocation": ("hold dk (4) { @@transfer link (1) from pk to dk (5); }",
                              "transfer to pool dk: position 5.0 beyond the allocation 4"),
    "one pool by its index": ("hold kv[0] (1) { set i = 0; @@transfer link (1) from kv[i] to kv[0] (1); }",
                              "transfer from pool kv[0] to itself"),
    "a negative amount": ("hold dk (4) { @@transfer link (1) from pk to dk (0 - serial - 1); }",
                          "negative transfer amount -1.0"),
}


@pytest.mark.parametrize("what", sorted(RUN_ERRORS))
def test_run_time_errors_are_located_alike_in_both_engines(what):
    """lockstep requires the two engines' located messages to be equal, and raises the spec's."""
    body, fragment = RUN_ERRORS[what]
    text, line, col = located(body)
    ir = compile_source(text, "t.sq", {})
    with pytest.raises(SpecError) as info:
        lockstep(ir, 1, 1, "t.sq")
    rendered = info.value.located(["t.sq"]).render()
    assert rendered.startswith(f"t.sq:{line}:{col}: error: "), rendered
    assert fragment in rendered, rendered

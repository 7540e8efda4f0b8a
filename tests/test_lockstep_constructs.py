"""Lockstep of serq_spec and serq_fast on the constructs the spec gained (tests/test_spec_extensions.py):
`admit waiting only (…)`, `reserve held`, preemption in a pool that is no engine's memory."""

from __future__ import annotations

import pytest

pytest.importorskip("serq_spec.step")

from serq.frontend import compile_source  # noqa: E402
from serq_fast.lockstep import lockstep  # noqa: E402
# The programs are the spec's own (one text, two checks: the hand-derived values there, agreement here).
from test_spec_extensions import ONLY, HELD, PREEMPT  # noqa: E402
from test_scope_spec import FRACTIONAL, PLAIN_BARE, PLAIN_GROWING  # noqa: E402




# session 1 decodes, the others run plain
DECODE_AND_PLAIN = ("branch (serial == 1) { run e decode (3) growing kv; } "
                    "else { run e (serial == 0 ? 6 : 2) growing kv; }")

# two turns: the second consumes at most reuse (ρ) of the own entry, the rest a dead entry
TWO_TURNS = (FRACTIONAL.replace("{ run s (1); } cache (2.9)", "reuse (serial + 0.7) { run s (1); } cache (2.9)")
             .replace("arrive batch(3);", "arrive batch(3); session { turn; tool (1); turn; }"))

CASES = {
    "plain-run-growing": (PLAIN_GROWING, 2),
    # non-whole pool amounts (state-line amounts "p/q" when not whole)
    "fractional-block": (FRACTIONAL, 3),
    "fractional-no-block": (FRACTIONAL.replace(" block 1.5;", ""), 3),
    "fractional-reuse": (TWO_TURNS, 3),
    "fractional-reuse-no-block": (TWO_TURNS.replace(" block 1.5;", ""), 3),
    "fractional-engine-block": (ONLY.replace("ONLY", "1").replace("block 16", "block 2.5"), 3),
    "fractional-preempt": (PREEMPT.replace("PREEMPT", "preempt by (serial);").replace("cap 10;", "cap 10.5;")
                           .replace("hold m (4)", "hold m (4.25)").replace("? 6 : 0", "? 6.5 : 0"), 2),
    "fractional-reserve-held": (HELD.replace("HELD", "reserve held; block 0.5;").replace("cap 10;", "cap 10.25;")
                                .replace("2 : 4) reserve (serial == 0 ? 8", "2.2 : 4) reserve (serial == 0 ? 7.9"), 2),
    "plain-run-bare": (PLAIN_BARE, 1),
    # a plain run under decode-first order, exclusive prefill and a granule, with a decode resident
    "plain-run-decode-first": (PLAIN_GROWING.replace("advance running;", "advance running decode first;")
                               .replace("run e (serial == 0 ? 6 : 1) growing kv;", DECODE_AND_PLAIN).replace("batch(2)", "batch(3)"), 3),
    "plain-run-exclusive": (PLAIN_GROWING.replace("advance running;", "exclusive prefill;")
                            .replace("run e (serial == 0 ? 6 : 1) growing kv;", DECODE_AND_PLAIN).replace("batch(2)", "batch(3)"), 3),
    "plain-run-granule": (PLAIN_GROWING.replace("tokens cap 4;", "tokens cap 5; granule 2;"), 2),
    "only-p<6": (ONLY.replace("ONLY", "p < 6"), 3),
    "only-1": (ONLY.replace("ONLY", "1"), 3),
    "reserve-held": (HELD.replace("HELD", "reserve held;"), 2),
    "reserve-held-reached": (HELD.replace("HELD", "reserve held;").replace("8 : 4", "6 : 4")
                             .replace("3 : 0", "4 : 0"), 2),
    "reserve-not-held": (HELD.replace("HELD", ""), 2),
    "preempt-free-by": (PREEMPT.replace("PREEMPT", "preempt by (serial);"), 2),
    "preempt-free-lifo-delay": (PREEMPT.replace("PREEMPT", "preempt lifo;").replace("serial == 0)", "serial == 5)"), 2),
    # the reserve counts block-rounded: 5 → 8 on block 4 (held 8 − 4 = 4, not 5 − 4 = 1)
    "reserve-held-block": (HELD.replace("HELD", "reserve held;").replace("cap 10;", "cap 14; block 4;")
                           .replace("2 : 4) reserve (serial == 0 ? 8", "2 : 5) reserve (serial == 0 ? 5")
                           .replace("3 : 0", "0 : 0"), 2),
}

FIFO_VICTIM = """
fn main() {
  pool m { cap 10; preempt by (serial); }
  stage s : delay;
  stage f : fifo(1);
  workload { arrive batch(2); }
  server {
    run s (serial);
    hold m (4) {
      grow m (serial == 1 ? 6 : 0);
      run f (10);
    }
    observe t = now;
  }
}"""


def test_fifo_victim_is_refused_by_both():
    """Session 1 grows while session 0 (least serial) holds m in a fifo stage: both refuse."""
    from serq_fast.expr import RunError
    from serq_fast.lockstep import fast_lines, sample_sessions
    from serq_spec.errors import NotSupported

    ir = compile_source(FIFO_VICTIM, "t.sq", {})
    with pytest.raises(NotSupported, match="fifo stage f"):
        lockstep(ir, 0, 2, "t.sq")
    with pytest.raises(RunError, match="not supported: preemption of a holder in fifo stage f"):
        # the sessions file of the same program without the growth (sampling runs the spec)
        quiet = compile_source(FIFO_VICTIM.replace("serial == 1 ? 6 : 0", "0"), "t.sq", {})
        fast_lines(ir, sample_sessions(quiet, 0, 2, "t.sq"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_construct_agrees(name):
    text, n = CASES[name]
    ir = compile_source(text, "t.sq", {})
    assert lockstep(ir, 0, n, "t.sq") > 0

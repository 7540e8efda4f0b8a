"""Lockstep of serq_spec and serq_fast on the constructs the spec gained (tests/test_spec_extensions.py,
tests/test_scope_spec.py): `admit waiting only (…)`, `reserve held`, preemption in a pool that is no
engine's memory (of a ready, fifo or ps holder), of a resident of an iteration in flight, a plain
run on an engine, non-whole pool amounts."""

from __future__ import annotations

import pytest

pytest.importorskip("serq_spec.step")

from serq.frontend import compile_source
from serq_drt.lockstep import lockstep
# The programs are the spec's own (one text, two checks: the hand-derived values there, agreement here).
from spec_helpers import compile_advance_only_into_admit, compile_growing_on_every_run
from test_spec_extensions import EXCLUSIVE_PREEMPT, ONLY, ONLY_REMAINING, HELD, PREEMPT
from test_scope_spec import ABOVE_ALLOC, FRACTIONAL, GROWING_FIFO, IN_FLIGHT, PLAIN_BARE, PLAIN_GROWING, STAGE_VICTIM




# session 1 decodes, the others run plain
DECODE_AND_PLAIN = ("branch (serial == 1) { run e decode (3) growing kv; } "
                    "else { run e (serial == 0 ? 6 : 2) growing kv; }")

# two turns: the second consumes at most reuse (ρ) of the own entry, the rest a dead entry
TWO_TURNS = (FRACTIONAL.replace("{ run s (1); } cache (2.9)", "reuse (serial + 0.7) { run s (1); } cache (2.9)")
             .replace("arrive batch(3);", "arrive batch(3); session { turn; tool (1); turn; }"))

# random amounts on a 0.3 block, preemption (lifo) of ps jobs and of growers, caching of
# preempted holds up to their position, reuse: the float side against the exact side
STRESS = """
fn main() {
  pool m { cap 7.3; block 0.3; preempt lifo; }
  stage s : delay;
  stage f : ps(1.7);
  workload { arrive poisson(1.5); }
  server {
    set x = ~uniform(0.1, 3);
    set g = ~uniform(0, 2);
    hold m (x) reuse (x / 2) { run f (~exp(1)); grow m (g); run s (~exp(1)); } cache (x + g * 0.7)
    observe c = cachedin(m);
  }
}"""

# two engines share kv: plain and prefill/decode runs, lifo victims in the other engine's
# iteration in flight (dozens per run), caching up to the restored position
TWO_ENGINES = """
fn main() {
  device d { kv cap 64; }
  pool kv on d { block 4; preempt lifo; }
  engine a on d { tokens cap 8; schedule { advance running; admit waiting; } execute (1 + batch.tokens / 4); }
  engine b on d { tokens cap 6; schedule { advance running decode first; admit waiting; } execute (0.7 + batch.prefilled / 8); }
  workload { arrive poisson(0.8); }
  server {
    set w = ceil(~uniform(1, 20));
    set k = ~bernoulli(0.5);
    hold kv (cachedin(kv)) {
      branch (k == 1) { run a (w) growing kv; run a decode (3) growing kv; }
      else { run b prefill (w) growing kv; run b decode (4) growing kv; }
    } cache (w)
    observe t = now;
  }
}"""

# explicit growths in an engine's memory pool: the lifo victim is a resident of the engine's
# iteration in flight; a stalled growth is retried at settle without preempting (a retry that
# preempted re-admitted and re-preempted the same victim forever)
GROW_VS_ENGINE = """
fn main() {
  device d { kv cap 48; }
  pool kv on d { block 4; preempt lifo; }
  stage s : delay;
  engine a on d { tokens cap 8; schedule { advance running; admit waiting; } execute (3); }
  workload { arrive poisson(0.6); }
  server {
    set w = ceil(~uniform(1, 20));
    set k = ~bernoulli(0.6);
    branch (k == 1) {
      hold kv (cachedin(kv)) { run a (w) growing kv; } cache (w)
    } else {
      hold kv (4) { run s (~exp(1)); grow kv (w); run s (1); }
    }
    observe t = now;
  }
}"""

# two speculating `lag 1` engines whose iterations end at the same instants: one engine's step
# outcomes are still unseen when the other's iteration end comes next (docs/async.md §8; the
# Config then carries them across a step, which tests/test_lean_codec_fields.py needs to see)
LAG_SPECULATE_ENGINE = """
  engine E on d {
    R cap 4;
    tokens cap BUDGET;
    lag 1;
    speculate (SPECULATE);
    request (p, o) {
      at admission { known = max(p, computed + 1); }
      prefill (known) growing kv;
      decode (o - 1 - (known - p)) growing kv speculate (K);
    }
    schedule { advance running; admit waiting taking R (1), kv (known); }
    execute (1);
  }
  pool R on E { queue fifo; }"""


def lag_speculate_engine(name: str, budget: int, speculate: str, k: int) -> str:
    return (LAG_SPECULATE_ENGINE.replace("BUDGET", str(budget)).replace("SPECULATE", speculate)
            .replace("K)", f"{k})").replace("E ", f"{name} ").replace("R ", f"r{name} "))


LAG_SPECULATE = f"""
fn main() {{
  device d {{ kv cap 256; }}
  pool kv on d {{ block 4; preempt lifo; }}{lag_speculate_engine("a", 8, "0, 1, inf", 2)}{lag_speculate_engine("b", 6, "1, 0, inf", 1)}
  workload {{ arrive batch(4); }}
  server {{
    set w = ceil(~uniform(1, 12));
    branch (serial < 2) {{ a (w, 6); }} else {{ b (w, 5); }}
    observe t = now;
  }}
}}"""

CASES = {
    "stress-grow-vs-engine": (GROW_VS_ENGINE, 40),
    "stress-two-engines": (TWO_ENGINES, 40),
    "lag-speculate-two-engines": (LAG_SPECULATE, 4),
    "stress-fractional-victims": (STRESS, 40),
    "stress-fractional-victims-no-block": (STRESS.replace(" block 0.3;", ""), 40),
    "plain-run-growing": (PLAIN_GROWING, 2),
    # preemption victims: a fifo / ps job (pool of no engine), a resident of an iteration in flight
    "victim-fifo-waiting": (STAGE_VICTIM.replace("KIND", "fifo(1)"), 3),
    "victim-fifo-in-service": (STAGE_VICTIM.replace("KIND", "fifo(2)"), 3),
    "victim-ps": (STAGE_VICTIM.replace("KIND", "ps(1)"), 3),
    "victim-ps-rate": (STAGE_VICTIM.replace("KIND", "ps(present == 1 ? 1 : 1.5)"), 3),
    "victim-in-flight": (IN_FLIGHT, 2),
    "position-above-allocation": (ABOVE_ALLOC, 3),
    "victim-in-flight-cached": (IN_FLIGHT.replace("} else { run a (4) growing kv; }\n    }",
                                                  "} else { run a (4) growing kv; }\n    } cache (3)"), 2),
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
    # a decode preempted by an earlier decode's growth under exclusive prefill is not served
    "exclusive-preempt-decode": (EXCLUSIVE_PREEMPT, 2),
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

# programs both engines stop with an error (docs/spec.md): (program text or IR — hand-written IR
# for what the linker refuses —, a variant to sample the sessions file from, the spec's message,
# the fast engine's)
ERRORS = {
    "growing-fifo": (compile_growing_on_every_run(GROWING_FIFO), GROWING_FIFO,
                     "`growing` needs an engine", "`growing` needs an engine"),
    "engine-work": (PLAIN_BARE.replace("run e (5)", "run e (2.5)"), PLAIN_BARE,
                    "run work must be a whole number of tokens, got 2.5", "run work must be a whole number of tokens, got 2.5"),
    # a `preempt by` key reading `decoding` of a victim that is no engine resident (a fifo job)
    "preempt-key-of-a-fifo-job": (STAGE_VICTIM.replace("KIND", "fifo(2)").replace("by (serial)", "by (decoding)"),
                                  STAGE_VICTIM.replace("KIND", "fifo(2)"), "per-request key `decoding` read outside a resident",
                                  "per-request key `decoding` read outside a resident"),
    "only-per-request-key": (compile_advance_only_into_admit(ONLY_REMAINING), ONLY.replace("ONLY", "1"),
                             "a waiting head has no run", "a waiting head has no run"),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_error_of_both_engines(name):
    from serq_fast.expr import RunError
    from serq_drt.lockstep import fast_lines, sample_sessions
    from serq_spec.errors import NotSupported, SpecError

    text, quiet, spec_msg, fast_msg = ERRORS[name]
    ir = compile_source(text, "t.sq", {}) if isinstance(text, str) else text
    n = 3 if "batch(3)" in quiet else 1
    with pytest.raises(SpecError, match=spec_msg) as e:
        lockstep(ir, 0, n, "t.sq")
    assert not isinstance(e.value, NotSupported)
    sessions = sample_sessions(compile_source(quiet, "t.sq", {}), 0, n, "t.sq")
    with pytest.raises(RunError, match=fast_msg.replace("(", r"\(").replace(")", r"\)")):
        fast_lines(ir, sessions)


@pytest.mark.parametrize("name", sorted(CASES))
def test_construct_agrees(name):
    text, n = CASES[name]
    ir = compile_source(text, "t.sq", {})
    assert lockstep(ir, 0, n, "t.sq") > 0

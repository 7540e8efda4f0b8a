"""`accept (n, alpha);` (docs/language.md §7.3): speculative decoding's acceptance counts drawn live.

The law (serq.draws.accept_count: P(A >= a) = alpha^a, mean alpha / (1 − alpha)), one hand-derived
draw of the worked stream of docs/sessions.md, the same counts in `serq sample` and a live fast
run, the same counts under deployments that differ only in their drafts k, and a located error for
each bad input. Lockstep on random programs that use the form: tests/test_lockstep_random.py.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest

from conftest import compile_err
from serq import draws
from serq.errors import SerqError
from serq.frontend import compile_source, load_program
from test_linker import edit, expect

sample = pytest.importorskip("serq_spec.sample")
from serq_fast.expr import RunError  # noqa: E402
from serq_fast.step import Sim  # noqa: E402
from serq_spec.errors import SpecError  # noqa: E402

VECTOR = Path(__file__).resolve().parents[1] / "vectors" / "spec" / "speculative_accept_draws"


# ---- the law ------------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.3, 0.8])
def test_counts_follow_the_geometric_law(alpha):
    """N counts from one turn stream: the mean within 5 standard errors of alpha / (1 − alpha) and
    each tail P(A >= a), a = 1…4, within 5 binomial standard errors of alpha^a (seeded fault:
    `round` for `int` in accept_count moves the mean by about 1/2: fails)."""
    n = 60_000
    rng = draws.make_stream("turn", 11, 3, 1)
    counts = [draws.accept_count(alpha, rng.random()) for _ in range(n)]
    mean = alpha / (1 - alpha)
    sd = math.sqrt(alpha) / (1 - alpha)
    assert abs(sum(counts) / n - mean) < 5 * sd / math.sqrt(n), (sum(counts) / n, mean)
    for a in range(1, 5):
        p = alpha ** a
        got = sum(c >= a for c in counts) / n
        assert abs(got - p) < 5 * math.sqrt(p * (1 - p) / n), (a, got, p)


def test_a_count_by_hand_from_the_worked_stream():
    """docs/sessions.md's worked stream (seed 7, serial 12, turn 3) has U = 0.7648661118718377,
    0.006382368665870719, 0.256838122693668. At alpha = 1/2, A = floor(ln(1 − U) / ln(1/2)):
    ln(0.23513) / −0.69315 = 2.088 → 2; ln(0.99362) / −0.69315 = 0.0092 → 0;
    ln(0.74316) / −0.69315 = 0.428 → 0. One U per count, exact whole numbers."""
    rng = draws.make_stream("turn", 7, 12, 3)
    got = [draws.draw_exact(draws.ACCEPT_LAW, [Fraction(1, 2)], rng) for _ in range(3)]
    assert got == [2, 0, 0] and all(isinstance(x, Fraction) for x in got)
    # the edges: alpha = 0 accepts nothing, alpha = 1 every draft (the trace field's largest count)
    assert draws.accept_count(0.0, 0.99) == 0
    assert draws.accept_count(1.0, 0.0) == draws.MAX_ACCEPT_COUNT
    assert draws.accept_count(0.999999, 1 - 2 ** -53) == draws.MAX_ACCEPT_COUNT


# ---- the same counts in every engine and deployment -------------------------------------------

PROGRAM = """use "std/args";
fn main() {
  let k = args.number("k", 2);
  device acc { kv cap 512 * 16; }
  pool kv on acc { block 16; preempt lifo; }
  engine eng on acc {
    reqs cap 8;
    tokens cap 256;
    speculate (1, k, inf);
    request (prompt, output) {
      at admission { known = max(prompt, computed + 1); }
      prefill (known) growing kv;
      decode (output - 1 - (known - prompt)) growing kv speculate (k);
    }
    schedule {
      advance running;
      admit waiting while (running.preempted == 0)
        taking reqs (1), kv (min(known, budget_left(eng)) + k);
    }
    execute (0.01 + 1e-4 * batch.tokens);
  }
  pool reqs on eng { queue fifo; }
  workload {
    arrive poisson(4);
    init { set rate = ~uniform(0.5, 0.9); }
    turn {
      set a = ceil(~uniform(10, 60));
      set o = ceil(~uniform(5, 40));
      set more = ~bernoulli(0.5);
      accept (o, rate);
    }
    session { turn; while (more) { tool (~exp(0.2)); turn; } }
  }
  server { eng (a, o); }
}
"""


def _ir(k: int) -> dict:
    return compile_source(PROGRAM, "p.sq", {"k": str(k)})


def test_the_same_counts_under_any_number_of_drafts():
    """`serq sample` of the program at k = 0, 2 and 4 (multi-turn sessions, so later turns start
    at times that depend on k): every turn list is the same, and it ends with exactly `o` counts
    (its second draw, rounded up) after the turn's three other draws; the machine stream is
    unused. A comparison between deployments is thus paired (seeded fault: the counts taken from
    the machine stream, in the order the turns run: fails)."""
    files = {k: sample.sample(_ir(k), 5, 40, "p.sq") for k in (0, 2, 4)}
    turns = {k: [s["turns"] for s in f["sessions"]] for k, f in files.items()}
    assert turns[0] == turns[2] == turns[4]
    assert all(not f["machine"] for f in files.values())
    n_turns = positive = 0
    for session in turns[2]:
        for t in session:
            o = math.ceil(Fraction(t[1]))
            assert len(t) == 3 + o
            positive += sum(Fraction(x) > 0 for x in t[3:])
            n_turns += 1
    assert n_turns > 40 and positive > 100


def test_a_live_run_draws_what_the_sample_holds():
    """The fast engine draws the counts live from the same turn streams `serq sample` records: a
    live run and the replay of the sample agree on every request's TPOT, which the counts set
    (seeded fault: the live counts drawn from the session stream: fails)."""
    ir = _ir(4)
    data = sample.sample(ir, 9, 30, "p.sq")
    live = Sim(ir, seed=9, horizon=math.inf, warmup=0.0, arrivals=30).run()
    replay = Sim(ir, seed=9, horizon=math.inf, warmup=0.0, replay=data).run()
    a, b = live.client["tpot"].exact, replay.client["tpot"].exact
    assert len(a) == len(b) > 30
    assert a == pytest.approx(b, rel=1e-12)


# ---- located errors ----------------------------------------------------------------------------

TURN = "turn { set a = ceil(~uniform(10, 50)); set b = ceil(~exp(20)); }"


def _turn(extra: str) -> str:
    return edit(TURN, "turn { set a = ceil(~uniform(10, 50)); set b = ceil(~exp(20)); " + extra + " }")


@pytest.mark.parametrize("marked, fragment", [
    (_turn("accept (b, @@1.5);"), "alpha in [0, 1], got 3/2"),
    (_turn("accept (b, @@-0.1);"), "alpha in [0, 1], got -1/10"),
    (_turn("accept (b, @@inf);"), "alpha in [0, 1], got inf"),
    (_turn("accept (@@-1, 0.5);"), "a whole number from 0 to 1000000, got -1"),
    (_turn("accept (@@2.5, 0.5);"), "a whole number from 0 to 1000000, got 5/2"),
    (edit("set a = ceil(~uniform(10, 50));", "@@accept (b, 0.5); set a = ceil(~uniform(10, 50));"),
     "must be the last statement of the `turn` block"),
    (edit("server { eng (a, b); }", "server { eng (a, b); @@accept (b, 0.5); }"),
     "allowed only in the workload's `turn` block"),
    (edit("    hidden b;\n", "    hidden b;\n    init { @@accept (3, 0.5); }\n"), "`accept` belongs in the `turn` block"),
    (edit("    hidden b;\n", "    hidden b;\n    session { turn; @@accept (3, 0.5); }\n"),
     "allowed only in the workload's `turn` block"),
    (edit("fn main() {", "def acc_all(m) { @@accept (m, 1); }\nfn main() {").replace(
        "server { eng (a, b); }", "server { eng (a, b); acc_all(b); }"), "allowed only in the workload's `turn` block"),
])
def test_a_misplaced_or_out_of_range_form_is_a_located_link_error(marked, fragment):
    expect(marked, fragment)


def test_accept_is_a_reserved_word():
    e = compile_err(_turn("set accept = 1;"))
    assert "accept" in e.message


def test_a_trace_with_counts_and_the_form_is_refused(tmp_path):
    """One source of counts per program: a trace whose rows give them (7th field) and the form
    are refused at the form; a trace of lengths only goes with it (the vector does)."""
    text = (VECTOR / "program.sq").read_text()
    (tmp_path / "p.sq").write_text(text.replace('"lengths.csv"', '"accept.csv"'))
    (tmp_path / "accept.csv").write_text("a,1,4,6,0,0,0 2 3 1 0 0\nb,1,3,3,0,0\n")
    with pytest.raises(SerqError) as info:
        load_program(str(tmp_path / "p.sq"), {})
    e = info.value
    assert "gives acceptance counts in its 7th field" in e.message and "keep one of the two" in e.message
    assert (e.line, e.column) == (33, 12)
    (tmp_path / "accept.csv").write_text("a,1,4,6,0,0\nb,1,3,3,0,0\n")
    assert load_program(str(tmp_path / "p.sq"), {})["workload"]["turn"] is not None


RUNTIME = PROGRAM.replace('set more = ~bernoulli(0.5);', 'set more = 0;')


@pytest.mark.parametrize("form, message", [
    ("accept (o, rate + 0.5);", "alpha in [0, 1], got 1."),
    ("accept (o, rate - 1);", "alpha in [0, 1], got -0."),
    ("accept (o / 2, rate);", "a whole number from 0 to 1000000, got "),
    ("accept (0, 2 * rate);", "alpha in [0, 1], got 1."),   # checked with no count to draw too
])
def test_a_run_time_value_out_of_range_is_located_in_both_engines(form, message):
    """A value known only when the turn runs: both engines stop at the statement with the same
    words (the count `o / 2` is whole for some turns: the first odd `o` stops the run)."""
    ir = compile_source(RUNTIME.replace("accept (o, rate);", form), "p.sq", {})
    at = next(st["at"] for st in ir["blocks"][ir["workload"]["turn"]] if st["op"] == "accept")
    with pytest.raises(SpecError) as spec:
        sample.sample(ir, 3, 20, "p.sq")
    with pytest.raises(RunError) as fast:
        Sim(ir, seed=3, horizon=math.inf, warmup=0.0, arrivals=20).run()
    assert message in spec.value.message and spec.value.message == fast.value.message
    assert list(spec.value.at) == list(fast.value.at) == at


def test_a_replayed_count_that_is_not_whole_is_refused_by_both_engines():
    """A sessions file edited to hold 7/2 where a count belongs does not fit the program."""
    from serq_spec.program import Program
    from serq_spec.step import run
    from serq_spec.workload import Workload

    ir = load_program(str(VECTOR / "program.sq"), {})
    data = json.loads((VECTOR / "sessions.json").read_text())
    data["sessions"][0]["turns"][0][2] = "7/2"
    with pytest.raises(SpecError) as spec:
        run(Program(ir, "program.sq", workload=Workload.replay(data)))
    data["trace_picks"] = []   # the fast engine checks the file's counts against the program first
    with pytest.raises(RunError) as fast:
        Sim(ir, seed=0, horizon=math.inf, warmup=0.0, replay=data).run()
    assert "got 3.5: the sessions file does not fit the program" in spec.value.message
    assert spec.value.message == fast.value.message

"""Queues (docs/language.md §11.16): `queue NAME[N] : ROLE { … }`, members `Q[i].m` and entry calls
`Q[i].VERB (…) from S[k];`, lowered in the front-end (serq/queues.py). A queue program's IR is the IR
of its twin spelled out by hand (names `Q.m` spelled `Q_m`, source positions aside);
examples/single-turn/pd_queues.sq reports what examples/single-turn/pd_disagg.sq reports; every
malformed form is refused at its location."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

import strategies
from conftest import compile_err, compile_ok
from serq import api
from test_ir import strip_at
from test_linker import locate

ROOT = Path(__file__).resolve().parent.parent
PD_QUEUES = ROOT / "examples" / "single-turn" / "pd_queues.sq"
PD_DISAGG = ROOT / "examples" / "single-turn" / "pd_disagg.sq"


def normal(ir: dict) -> dict:
    """The IR without source positions and file names, a queue member's `Q.m` spelled `Q_m`."""
    out = strip_at(ir)
    out.pop("files")
    for row in out["pools"] + out["stages"]:
        row["name"] = row["name"].replace(".", "_")
    return out


# Queue arrays: a prefill queue whose engine leases its KV, a decode queue whose entry lands it
# `from` the prefill queue over a link queue's wire, an engine request through a member.
ARRAYS = """\
fn main() {
  queue P[2] : prefill {
    device gpu { kv cap 1000; }
    pool kv on gpu { block 2; }
    engine eng on gpu {
      reqs cap 4;
      tokens cap 64;
      request (p, o) {
        at admission { need = p; }
        prefill (p) growing kv;
        lease kv (inf);
      }
      schedule {
        advance running;
        admit waiting taking reqs (1), kv (min(need, budget_left(eng))) reserve (need);
      }
      execute (1/10 + batch.tokens / 100);
    }
    pool reqs on eng { queue fifo; }
  }
  queue D[2] : decode {
    device gpu { kv cap 1000; }
    pool kv on gpu { block 1; evict lru; }
    def pull(n, wire) {
      hold kv (n) { transfer wire (n / 50) from source.kv to kv (n); } cache (n);
      observe landed = used(self.kv);
    }
  }
  queue L[2] : link { stage wire : fifo; }
  workload { arrive poisson(1); turn { set p_in = 1 + floor(~uniform(0, 30)); } }
  server {
    choose i in 2 by (holders(P[i].reqs) + queued(P[i].reqs));
    P[i].eng (p_in, 1);
    D[1 - i].pull (p_in, L[1 - i].wire) from P[i];
    observe q = queued(P[0].reqs) + used(D[1].kv);
  }
}
"""

ARRAYS_TWIN = """\
fn main() {
  device P_gpu[2] { P_kv cap 1000; }
  pool P_kv[2] on P_gpu[j] { block 2; }
  engine P_eng[2] on P_gpu[j] {
    P_reqs cap 4;
    tokens cap 64;
    request (p, o) {
      at admission { need = p; }
      prefill (p) growing P_kv[j];
      lease P_kv[j] (inf);
    }
    schedule {
      advance running;
      admit waiting taking P_reqs[j] (1), P_kv[j] (min(need, budget_left(P_eng[j]))) reserve (need);
    }
    execute (1/10 + batch.tokens / 100);
  }
  pool P_reqs[2] on P_eng[j] { queue fifo; }
  device D_gpu[2] { D_kv cap 1000; }
  pool D_kv[2] on D_gpu[j] { block 1; evict lru; }
  def pull(k, src, n, wire) {
    hold D_kv[k] (n) { transfer wire (n / 50) from src to D_kv[k] (n); } cache (n);
    observe landed = used(D_kv[k]);
  }
  stage L_wire[2] : fifo;
  workload { arrive poisson(1); turn { set p_in = 1 + floor(~uniform(0, 30)); } }
  server {
    choose i in 2 by (holders(P_reqs[i]) + queued(P_reqs[i]));
    P_eng[i] (p_in, 1);
    pull(1 - i, P_kv[i], p_in, L_wire[1 - i]);
    observe q = queued(P_reqs[0]) + used(D_kv[1]);
  }
}
"""

# Single queues: local constants and definitions, a member array, `self`, the queue's own name in
# its body, a bare engine request in an entry, members in a gauge and a claim.
SINGLE = """\
fn main() {
  let base = 2;
  queue G : gateway { stage route : delay; let hop = 1/4; def pass(t) { run route (t * hop); } }
  queue A : agg {
    let slots = 3;
    def work(n) = n / 8 + base;
    device gpu { kv cap 40; }
    pool kv on gpu { block 2; }
    pool side[2] { cap 10; }
    engine eng on gpu {
      reqs cap slots;
      tokens cap 16;
      request (p, o) {
        at admission { need = p + o; }
        prefill (p) growing kv;
        decode (o - 1) growing kv;
      }
      schedule {
        advance running;
        admit waiting taking reqs (1), kv (min(need, budget_left(self.eng))) reserve (need);
      }
      execute (work(batch.tokens));
    }
    pool reqs on eng { queue fifo; }
    def serve(n, s) {
      hold side[s] (1) { run G.route (n); }
      observe waiting_now = queued(A.reqs) + A.slots;
      eng (n, 2);
    }
  }
  gauge busy_kv = used(A.kv);
  claim fits : at end (used(A.side[0]) <= 10);
  workload { arrive poisson(1); turn { set p = 1 + floor(~uniform(0, 6)); } }
  server { G.pass (1); A.serve (p, serial - 2 * floor(serial / 2)); observe w = A.work(p) + A.slots; }
}
"""

SINGLE_TWIN = """\
fn main() {
  let base = 2;
  stage G_route : delay;
  let G_hop = 1/4;
  def G_pass(t) { run G_route (t * G_hop); }
  let A_slots = 3;
  def A_work(n) = n / 8 + base;
  device A_gpu { A_kv cap 40; }
  pool A_kv on A_gpu { block 2; }
  pool A_side[2] { cap 10; }
  engine A_eng on A_gpu {
    A_reqs cap A_slots;
    tokens cap 16;
    request (p, o) {
      at admission { need = p + o; }
      prefill (p) growing A_kv;
      decode (o - 1) growing A_kv;
    }
    schedule {
      advance running;
      admit waiting taking A_reqs (1), A_kv (min(need, budget_left(A_eng))) reserve (need);
    }
    execute (A_work(batch.tokens));
  }
  pool A_reqs on A_eng { queue fifo; }
  def A_serve(n, s) {
    hold A_side[s] (1) { run G_route (n); }
    observe waiting_now = queued(A_reqs) + A_slots;
    A_eng (n, 2);
  }
  gauge busy_kv = used(A_kv);
  claim fits : at end (used(A_side[0]) <= 10);
  workload { arrive poisson(1); turn { set p = 1 + floor(~uniform(0, 6)); } }
  server { G_pass(1); A_serve(p, serial - 2 * floor(serial / 2)); observe w = A_work(p) + A_slots; }
}
"""

# An agg queue array takes the KV from an l2 tier: its entry `pull` calls entry `land` passing its
# own source on (`from source`), and reads the source's pool.
NESTED = """\
fn main() {
  queue T[2] : l2 { pool kv { cap 50; } stage port : fifo; }
  queue A[2] : agg {
    pool kv { cap 50; }
    stage link : ps(1);
    def land(n) { transfer link (n / 4) from source.kv to kv (n); }
    def pull(n) { hold kv (n) { self.land (n) from source; observe got = used(source.kv); } }
  }
  workload { arrive batch(3); turn { set p = 1 + floor(~uniform(0, 4)); } }
  server {
    set a = serial - 2 * floor(serial / 2);
    hold T[a].kv (p) { run T[a].port (1); } lease T[a].kv (inf);
    A[1 - a].pull (p) from T[a];
  }
}
"""

NESTED_TWIN = """\
fn main() {
  pool T_kv[2] { cap 50; }
  stage T_port[2] : fifo;
  pool A_kv[2] { cap 50; }
  stage A_link[2] : ps(1);
  def land(q, src, n) { transfer A_link[q] (n / 4) from src to A_kv[q] (n); }
  def pull(q, src, n) { hold A_kv[q] (n) { land(q, src, n); observe got = used(src); } }
  workload { arrive batch(3); turn { set p = 1 + floor(~uniform(0, 4)); } }
  server {
    set a = serial - 2 * floor(serial / 2);
    hold T_kv[a] (p) { run T_port[a] (1); } lease T_kv[a] (inf);
    pull(1 - a, T_kv[a], p);
  }
}
"""

# A queue's expression definitions called from outside (`P[i].demand ()`, `D[k].room ()`, `P[i].twice (…)`)
# and `self.index`: in an engine's `execute`, in definitions and an entry. A definition that reads
# its queue's members or index takes the index first; one that reads neither (`twice`) does not,
# so a device's body and a pool's options, one for all the queues of the array, may call it. A statement `def`
# of `fn main` begins with an entry call `D[a].pull (…)` (it did not parse before).
INDEXED = """\
fn main() {
  queue P[2] : prefill {
    let width = 4;
    def twice(x) = 2 * x;
    device gpu { kv cap twice(500); }
    pool kv on gpu { block self.twice(1); }
    engine eng on gpu {
      reqs cap 4;
      tokens cap 64;
      request (p, o) {
        at admission { need = p; }
        prefill (p) growing kv;
        lease kv (inf);
      }
      schedule {
        advance running;
        admit waiting taking reqs (1), kv (min(need, budget_left(eng))) reserve (need);
      }
      execute (1/10 * (1 + self.index) + batch.tokens / 100);
    }
    pool reqs on eng { queue fifo; }
    def demand() = holders(reqs) + queued(reqs);
    def slow(n) = n / width * (1 + self.index);
    def score(w) = demand() * w + self.slow(1) + P[0].demand();
  }
  queue D[2] : decode {
    pool kv { cap 50; evict lru; }
    def room() = 50 - used(kv);
    def pull(n, wire) {
      hold kv (n) { transfer wire (n / 50 * (1 + self.index)) from source.kv to kv (n); } cache (n);
      observe picked = P[self.index].demand() + room();
    }
  }
  queue L[2] : link { stage wire : fifo; }
  def land(a, b, n) { D[a].pull (n, L[a].wire) from P[b]; }
  gauge g = P[0].demand() + D[1].room();
  claim c : at end (D[0].room() >= 0);
  workload { arrive poisson(1); turn { set p_in = 1 + floor(~uniform(0, 30)); } }
  server {
    choose i in 2 by (P[i].score(2), -i);
    P[i].eng (p_in, 1);
    choose k in 2 by (-D[k].room());
    land(k, i, p_in);
    observe s = P[1 - i].slow(p_in) + P[i].twice(p_in);
  }
}
"""

INDEXED_TWIN = """\
fn main() {
  let P_width = 4;
  def P_twice(x) = 2 * x;
  device P_gpu[2] { P_kv cap P_twice(500); }
  pool P_kv[2] on P_gpu[j] { block P_twice(1); }
  engine P_eng[2] on P_gpu[j] {
    P_reqs cap 4;
    tokens cap 64;
    request (p, o) {
      at admission { need = p; }
      prefill (p) growing P_kv[j];
      lease P_kv[j] (inf);
    }
    schedule {
      advance running;
      admit waiting taking P_reqs[j] (1), P_kv[j] (min(need, budget_left(P_eng[j]))) reserve (need);
    }
    execute (1/10 * (1 + j) + batch.tokens / 100);
  }
  pool P_reqs[2] on P_eng[j] { queue fifo; }
  def P_demand(q) = holders(P_reqs[q]) + queued(P_reqs[q]);
  def P_slow(q, n) = n / P_width * (1 + q);
  def P_score(q, w) = P_demand(q) * w + P_slow(q, 1) + P_demand(0);
  pool D_kv[2] { cap 50; evict lru; }
  def D_room(q) = 50 - used(D_kv[q]);
  def D_pull(q, src, n, wire) {
    hold D_kv[q] (n) { transfer wire (n / 50 * (1 + q)) from src to D_kv[q] (n); } cache (n);
    observe picked = P_demand(q) + D_room(q);
  }
  stage L_wire[2] : fifo;
  def land(a, b, n) { D_pull(a, P_kv[b], n, L_wire[a]); }
  gauge g = P_demand(0) + D_room(1);
  claim c : at end (D_room(0) >= 0);
  workload { arrive poisson(1); turn { set p_in = 1 + floor(~uniform(0, 30)); } }
  server {
    choose i in 2 by (P_score(i, 2), -i);
    P_eng[i] (p_in, 1);
    choose k in 2 by (-D_room(k));
    land(k, i, p_in);
    observe s = P_slow(1 - i, p_in) + P_twice(p_in);
  }
}
"""

TWINS = {"arrays": (ARRAYS, ARRAYS_TWIN), "single": (SINGLE, SINGLE_TWIN), "nested": (NESTED, NESTED_TWIN),
         "indexed": (INDEXED, INDEXED_TWIN)}


@pytest.mark.parametrize("name", sorted(TWINS))
def test_a_queue_program_is_its_twin_spelled_out(name):
    """The hand-derived vector of the construct: the IR a queue program compiles to is, word for
    word, the IR of the program written without queues (names and positions aside)."""
    program, twin = TWINS[name]
    assert normal(compile_ok(program)) == normal(compile_ok(twin))


def test_the_twins_differ_where_the_programs_do():
    """Not vacuous: a source at the other index, or a member of the other queue, is another IR."""
    program, twin = TWINS["arrays"]
    assert normal(compile_ok(program.replace("from P[i];", "from P[1 - i];"))) != normal(compile_ok(twin))
    assert normal(compile_ok(program.replace("used(D[1].kv)", "used(D[0].kv)"))) != normal(compile_ok(twin))
    program, twin = TWINS["indexed"]
    assert normal(compile_ok(program.replace("(1 + self.index) +", "(2 - self.index) +"))) != normal(compile_ok(twin))
    assert normal(compile_ok(program.replace("P[1 - i].slow", "P[i].slow"))) != normal(compile_ok(twin))


@settings(max_examples=30, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(strategies.pd_queue_pairs())
def test_random_queue_programs_are_their_twins_spelled_out(pair):
    """The same on random programs (tests/strategies.py `pd_queue_pairs`, run in lockstep by
    tests/test_lockstep_random.py): prefill queue arrays or a single queue, decode or agg queue
    arrays, entries direct or nested, every link kind."""
    case, twin = pair
    assert normal(compile_ok(case.text)) == normal(compile_ok(twin))


def test_members_are_named_by_queue():
    ir = compile_ok(ARRAYS)
    assert [p["name"] for p in ir["pools"]] == ["P.kv[0]", "P.kv[1]", "P.reqs[0]", "P.reqs[1]", "D.kv[0]", "D.kv[1]"]
    assert [s["name"] for s in ir["stages"]] == ["P.eng[0]", "P.eng[1]", "L.wire[0]", "L.wire[1]"]


# ---- the example ---------------------------------------------------------------------------------

# pd_queues.sq's members by pd_disagg.sq's names
PD_NAMES = {"P.eng": "pre", "D.eng": "dec", "P.kv": "pkv", "D.kv": "dkv", "P.reqs": "preqs", "D.reqs": "dreqs",
            "L.wire": "link", "L.nic_out": "nic_out", "L.nic_in": "nic_in"}


def pd_name(name: str) -> str:
    base, bracket, rest = name.partition("[")
    return PD_NAMES.get(base, base) + bracket + rest


def pd_report(path: Path, **settings) -> dict:
    run = api.load(str(path), **{"lambda": 0.05, **settings}).run(seed=1, horizon=math.inf, arrivals=40,
                                                                    records=False)
    return json.loads(json.dumps(run.report))


def pd_disagg_in_queue_order() -> str:
    """pd_disagg.sq with its disaggregated side declared in the order pd_queues.sq's queues declare
    it (P's device, pool, engine and slots, then D's), nothing else changed."""
    src = PD_DISAGG.read_text()
    start, end = src.index("  device pgpu[2]"), src.index("  // Decode GPU j's receiving link")
    block = src[start:end]

    def item(head: str) -> str:
        i = block.index(head)
        return block[i:block.index("\n  }\n", i) + 5] if head.startswith("  engine") else block[i:block.index("\n", i) + 1]
    order = ["device pgpu", "pool pkv", "engine pre", "pool preqs", "device dgpu", "pool dkv", "engine dec", "pool dreqs"]
    return src[:start] + "".join(item("  " + h) for h in order) + src[end:]


@pytest.mark.parametrize("settings", [{}, {"R": "2", "nics": "1"}, {"disagg": "0"}], ids=["1P1D", "2P2D-nics", "colocated"])
def test_the_example_is_pd_disagg_spelled_with_queues(settings):
    """pd_queues.sq's IR is pd_disagg.sq's (declared in the queues' order), names mapped and source
    positions aside: the header's claim."""
    def named(ir: dict) -> dict:
        out = strip_at(ir)
        out.pop("files")
        for row in out["pools"] + out["stages"]:
            row["name"] = pd_name(row["name"])
        return out
    queues = compile_ok(PD_QUEUES.read_text(), dict(settings), "pd_queues.sq")
    spelled = compile_ok(pd_disagg_in_queue_order(), dict(settings), "pd_disagg.sq")
    assert named(queues) == named(spelled)


@pytest.mark.parametrize("settings", [dict(R=2), dict(R=1, nics=1), dict(R=2, disagg=0)],
                         ids=["2P2D", "1P1D-nics", "colocated"])
def test_the_example_reports_what_pd_disagg_reports(settings):
    """examples/single-turn/pd_queues.sq's header check: its report is pd_disagg.sq's, every number
    equal, the stage and pool rows once named by pd_disagg.sq's names (pools matched by name: P's two
    pools precede D's there)."""
    queues, spelled = pd_report(PD_QUEUES, **settings), pd_report(PD_DISAGG, **settings)
    for key in spelled:
        if key in ("stages", "pools"):
            continue
        assert queues[key] == spelled[key], key
    assert [{**row, "name": pd_name(row["name"])} for row in queues["stages"]] == spelled["stages"]
    renamed = {pd_name(row["name"]): {**row, "name": pd_name(row["name"])} for row in queues["pools"]}
    assert renamed == {row["name"]: row for row in spelled["pools"]}
    assert spelled["observe"]["e2e"]["count"] == 40


# ---- errors --------------------------------------------------------------------------------------

BASE = """\
fn main() {
  queue P[2] : prefill { pool kv { cap 10; } stage pre : fifo; }
  queue D[2] : decode {
    pool kv { cap 10; }
    stage wire : fifo;
    def pull(n) { hold kv (n) { transfer wire (1) from source.kv to kv (n); } }
    def note(n) { observe seen = n; }
  }
  workload { arrive batch(2); }
  server {
    hold P[0].kv (1) { run P[0].pre (1); } lease P[0].kv (inf);
    D[1].pull (1) from P[0];
  }
}
"""


def edit(old: str, new: str) -> str:
    assert old in BASE, old
    return BASE.replace(old, new, 1)


def in_server(stmt: str) -> str:
    return edit("    D[1].pull (1) from P[0];\n", "    D[1].pull (1) from P[0];\n    " + stmt + "\n")


ERRORS = {
    "unknown-role": (edit(": prefill", ": @@prefil"), "unknown role `prefil`"),
    "duplicate-member": (edit("stage pre : fifo;", "stage pre : fifo; @@pool pre { cap 1; }"),
                         "`pre` is declared twice in queue `P`"),
    "duplicate-constant": (edit("stage pre : fifo;", "stage pre : fifo; let a = 1; @@def a(x) = x;"),
                           "`a` is declared twice in queue `P` (first at t.sq:2:64)"),
    "self-as-member": (edit("stage pre : fifo;", "@@stage self : fifo;"), "`self` names a queue"),
    "unknown-member": (in_server("observe u = used(P[0].@@kvv);"), "queue `P` has no member `kvv`"),
    "unknown-entry": (in_server("D[0].@@push (1);"), "queue `D` has no entry `push`"),
    "arity": (in_server("@@D[0].note (1, 2);"), "entry `D.note` takes 1 argument(s), got 2"),
    "index-out-of-range": (in_server("D[@@2].note (1);"), "index 2 is outside the queue array `D[0 … 1]`"),
    "member-index-out-of-range": (in_server("observe u = used(P[@@7].kv);"), "outside the queue array `P[0 … 1]`"),
    "index-from-a-queue-constant": (edit("stage pre : fifo;", "stage pre : fifo; let last = 2;")
                                    .replace("D[1].pull (1) from P[0];", "D[1].pull (1) from P[@@P.last];"),
                                    "index 2 is outside the queue array `P[0 … 1]`"),
    # an infinite index was an OverflowError in the front-end, a huge one spelled out in 400 digits
    # (hostile-input campaign, branch hostile2)
    "infinite-index": (in_server("observe u = used(P[@@inf].kv);"), "index inf is outside the queue array "
                       "`P[0 … 1]`: a queue of the array is named by a whole number from 0 to 1"),
    "infinite-index-of-a-definition": (edit("stage pre : fifo;", "stage pre : fifo; def fill(x) = used(kv) * x;")
                                       .replace("hold P[0].kv (1)", "observe u = P[@@-1 / 0].fill (1); hold P[0].kv (1)"),
                                       "index -inf is outside the queue array `P[0 … 1]`"),
    "huge-index": (in_server("observe u = used(P[@@1e400].kv);"), "index about 1e400 is outside the queue array"),
    "fractional-index": (in_server("observe u = used(P[@@0.5].kv);"), "index 0.5 is outside the queue array"),
    "array-needs-index": (in_server("@@D.note (1);"), "`D` is an array of 2 queues"),
    "not-an-array": (edit("queue P[2]", "queue P").replace("P[0]", "P").replace("D[1].pull (1) from P;",
                                                                              "D[1].pull (1) from P[@@0];"),
                     "queue `P` is not an array"),
    "unknown-queue": (in_server("observe u = used(@@Q[0].kv);"), "unknown queue `Q`"),
    "not-a-queue": (edit("  workload", "  pool x { cap 1; }\n  workload") .replace(
        "    D[1].pull (1) from P[0];\n", "    D[1].pull (1) from P[0];\n    observe u = used(@@x.kv);\n"),
        "`x` is not a queue"),
    "queue-used-above-its-declaration": (edit("  queue P[2]", "  gauge g = used(@@D[0].kv);\n  queue P[2]"),
                                         "unknown queue `D` (declare the queue above its first use)"),
    "draw-in-index": (in_server("D[@@floor(~uniform(0, 2))].note (1);"), "a draw there would be drawn again"),
    "entry-as-value": (in_server("observe u = D[0].@@note;"), "`note` is an entry of queue `D`"),
    "self-outside": (in_server("observe u = used(@@self.kv);"), "here it is outside every queue"),
    "source-outside": (in_server("observe u = used(@@source.kv);"), "`source` names the queue an entry takes"),
    "member-of-array-is-array": (edit("stage pre : fifo;", "@@stage pre[2] : fifo;"),
                                 "it cannot be an array itself"),
    "on-outside-the-queue-array": (edit("  queue P[2] : prefill { pool kv { cap 10; }",
                                        "  device g { kv cap 10; }\n  queue P[2] : prefill { pool kv on @@g { }"),
                                   "`g` is not a member of the queue array `P`"),
    "binder-named-like-a-member": (edit("def note(n) { observe seen = n; }", "def note(n) { @@set kv = n; }"),
                                   "`kv` is a member of queue `D`"),
    # a parameter `self` was taken, and `self.index` beside it read the queue (hostile2)
    "parameter-named-self": (edit("stage pre : fifo;", "stage pre : fifo; @@def fill(self) = used(self.kv);"),
                             "`self` names a queue inside a queue's body; a parameter or binding may not take it"),
    "binding-named-index": (edit("observe seen = n;", "@@set index = n;"),
                            "`index` is the queue's own index inside its body (`self.index`); a parameter"),
    "parameter-named-like-a-member": (edit("def note(n)", "@@def note(wire)").replace("observe seen = n;",
                                                                                    "observe seen = 1;"),
                                      "`wire` is a member of queue `D`"),
    "k-step-stage-in-a-queue": (edit("stage pre : fifo;", "@@stage pre : step { budget 1; cost 1; }"),
                                "a K step stage cannot be a queue's member"),
    "self-with-an-index": (edit("observe seen = n;", "observe seen = used(self[@@0].kv);"),
                           "`self` is this queue already"),
    "source-with-an-index": (edit("from source.kv to kv", "from source.kv[@@0] to kv"), "it takes no index"),
    "local-definition-outside": (edit("stage pre : fifo;", "stage pre : fifo; def twice(x) = 2 * x;")
                                 .replace("hold P[0].kv (1)", "observe u = P[0].@@twice; hold P[0].kv (1)"),
                                 "`twice` is a definition of queue `P`: call it, `P[i].twice (…)`"),
    "entry-in-an-expression": (edit("observe seen = n;", "observe seen = @@pull(n);"),
                               "`pull` is an entry of queue `D` (a statement)"),
    "from-on-an-engine-request": (edit("  queue D[2]", "  queue E : decode { device g { } engine eng on g { r cap 1; "
                                       "tokens cap 1; request (p) { prefill (p); } schedule { advance running; "
                                       "admit waiting taking r (1); } execute (1); } pool r on eng { } }\n  queue D[2]")
                                  .replace("    D[1].pull (1) from P[0];\n",
                                           "    D[1].pull (1) from P[0];\n    E.eng (1) from @@P[0];\n"),
                                  "`eng` is queue `E`'s engine; `from` goes with an entry"),
    "own-member-in-a-shared-option": (edit("pool kv { cap 10; } stage pre", "pool kv { cap 10; } pool w { cap 1; "
                                           "queue by (holders(@@kv)); } stage pre"),
                                      "in the queue array `P`, a pool's options are one for all its queues"),
    "member-not-an-array": (in_server("hold P[0].kv[@@1] (1) { run P[0].pre (1); }"),
                            "member `kv` of queue `P` is not an array"),
    # ---- a queue's expression definitions called from outside, `self.index`
    "unknown-definition": (in_server("observe u = P[0].@@twice(1);"), "queue `P` has no definition `twice` (it has no "
                                                                        "definitions)"),
    # (the lowered `P.fill` takes the queue's index first: the count is the program's, not that one's)
    "member-called": (in_server("observe u = P[0].@@pre (1);"), "`pre` is a stage of queue `P`, not a definition: "
                                                                 "it takes no arguments (`P[i].pre`)"),
    "definition-arity": (edit("stage pre : fifo;", "stage pre : fifo; def fill(x) = used(kv) * x;")
                         .replace("hold P[0].kv (1)", "observe u = @@P[0].fill(1, 2); hold P[0].kv (1)"),
                         "`P.fill` takes 1 argument(s), got 2"),
    "definition-above-its-declaration": (edit("stage pre : fifo;", "stage pre : fifo; def a() = @@b(); def b() = 1;"),
                                         "`b` of queue `P` is defined at t.sq:2:79, not above this use"),
    "definition-as-a-statement": (edit("stage pre : fifo;", "stage pre : fifo; def twice(x) = 2 * x;")
                                  .replace("    D[1].pull (1) from P[0];\n", "    D[1].pull (1) from P[0];\n"
                                                                           "    P[1].@@twice (1);\n"),
                                  "`twice` is an expression definition of queue `P`, not an entry: use its value, "
                                  "e.g. `set x = P[i].twice (…);`"),
    "own-definition-as-a-statement": (edit("def note(n) { observe seen = n; }",
                                           "def size(n) = n; def note(n) { @@size (n); }"),
                                      "`size` is an expression definition of queue `D`, not an entry: use its value, "
                                      "e.g. `set x = size (…);`"),
    "entry-called-as-a-value": (in_server("observe u = D[0].@@note(1);"),
                                "`note` is an entry of queue `D` (a statement): call it as `D[i].note (…);`"),
    "own-entry-called-as-a-value": (edit("def note(n) { observe seen = n; }",
                                         "def note(n) { observe seen = self.@@pull(n); }"),
                                    "`pull` is an entry of queue `D` (a statement): call it as `self.pull (…);`"),
    "own-entry-named-as-a-value": (edit("def note(n) { observe seen = n; }",
                                        "def note(n) { observe seen = self.@@pull; }"),
                                   "`pull` is an entry of queue `D`: call it as a statement, `self.pull (…);`"),
    "own-definition-as-a-statement-through-self": (edit("def note(n) { observe seen = n; }",
                                                        "def size(n) = n; def note(n) { self.@@size (n); }"),
                                                   "e.g. `set x = self.size (…);`"),
    "engine-called-as-a-value": (edit("  queue D[2]", "  queue E : decode { device g { } engine eng on g { r cap 1; "
                                      "tokens cap 1; request (p) { prefill (p); } schedule { advance running; "
                                      "admit waiting taking r (1); } execute (1); } pool r on eng { } }\n  queue D[2]")
                                 .replace("    D[1].pull (1) from P[0];\n",
                                          "    D[1].pull (1) from P[0];\n    observe u = E.@@eng (1);\n"),
                                 "a request to queue `E`'s engine `eng` is a statement (`E.eng (…);`), not a value"),
    "draw-in-a-definition-call's-index": (edit("stage pre : fifo;", "stage pre : fifo; def twice(x) = 2 * x;")
                                          .replace("hold P[0].kv (1)", "observe u = P[@@floor(~uniform(0, 2))].twice(1); "
                                                                       "hold P[0].kv (1)"),
                                          "a draw there would be drawn again"),
    "own-definition-reading-a-member-in-a-shared-option": (
        edit("pool kv { cap 10; } stage pre", "pool kv { cap 10; } def fill() = used(kv); pool w { cap 1; "
                                              "queue by (@@fill()); } stage pre"),
        "in the queue array `P`, a pool's options are one for all its queues, so it cannot call `fill`, which reads "
        "one queue's own members or `self.index`"),
    "self-index-in-a-shared-option": (edit("stage pre : fifo;", "stage pre : ps(1 + @@self.index);"),
                                      "in the queue array `P`, a stage's capacity is one for all its queues, so it "
                                      "cannot read `self.index`"),
    "self-index-in-a-constant": (edit("stage pre : fifo;", "stage pre : fifo; let c = 2 * @@self.index;"),
                                 "in the queue array `P`, a constant (`let`) is one for all its queues, so it cannot "
                                 "read `self.index`"),
    "self-index-in-a-single-queue": (edit("  workload", "  queue G : gateway { stage s : delay; def t() = "
                                                       "@@self.index; }\n  workload"),
                                     "`self.index`: `G` is a single queue, which has no index"),
    "self-index-as-a-pool": (edit("def note(n) { observe seen = n; }", "def note(n) { hold @@self.index (n) { } }"),
                             "`self.index` is a number, not a pool or stage"),
    "index-outside-the-queue": (in_server("observe u = P[0].@@index;"),
                                "`index` is read inside queue `P`'s body, as `self.index`; here the index of `P[i]` "
                                "is i itself"),
    "source-index": (edit("def pull(n) { hold kv (n) {", "def pull(n) { observe s = source.@@index; hold kv (n) {"),
                     "`source.index`: an entry is not told its source's index"),
    "member-named-index": (edit("stage pre : fifo;", "@@stage index : fifo;"),
                           "`index` is the queue's own index inside its body (`self.index`)"),
    "queue-named-args": (edit("  workload", "  queue @@args : gateway { stage s : delay; }\n  workload"),
                         "`args` names the program's inputs"),
    "queue-named-self": (edit("  workload", "  queue @@self : gateway { stage s : delay; }\n  workload"),
                         "`self` names, inside a queue's body, that queue"),
    "queue-named-source": (edit("  workload", "  queue @@source : gateway { stage s : delay; }\n  workload"),
                           "`source` names, inside an entry, the queue it takes the KV from"),
    # ---- the roles' rules
    "from-needs-a-reader": (edit("queue D[2] : decode", "queue D[2] : prefill").replace("from P[0];", "from @@P[0];"),
                            "only a decode or agg queue"),
    "from-a-decode-queue": (edit("queue P[2] : prefill", "queue P[2] : decode").replace("from P[0];", "from @@P[0];"),
                            "the KV comes from a prefill"),
    "entry-reads-source-without-from": (edit("D[1].pull (1) from P[0];", "@@D[1].pull (1);"),
                                        "reads `source.kv`: name the queue"),
    "from-without-source": (in_server("D[0].note (1) from @@P[0];"), "reads nothing of a source: drop `from"),
    "source-lacks-the-member": (edit("pool kv { cap 10; } stage pre", "pool kq { cap 10; } stage pre")
                                .replace("hold P[0].kv (1) { run P[0].pre (1); } lease P[0].kv (inf);", "")
                                .replace("D[1].pull (1) from P[0];", "D[1].pull (1) from @@P[0];"),
                                "queue `P` has no member `kv`"),
    "link-holds-a-pool": (edit("  workload", "  queue W : link { stage s : fifo; @@pool b { cap 1; } }\n  workload"),
                          "a link queue is a wire"),
    "link-holds-no-stage": (edit("  workload", "  @@queue W : link { let a = 1; }\n  workload"),
                            "link queue `W` holds no stage"),
    "gateway-holds-no-kv": (edit("  workload", "  queue W : gateway { @@pool b { cap 1; } }\n  workload"),
                            "a gateway queue routes requests and holds no KV"),
    "l2-holds-no-engine": (edit("  workload", "  queue W : l2 { device g { } @@engine e on g { tokens cap 1; "
                                "schedule { advance running; } execute (1); } }\n  workload"),
                           "an l2 queue is a KV tier"),
}


def test_the_base_program_compiles():
    compile_ok(BASE)


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_a_malformed_queue_form_is_refused_at_its_location(name):
    marked, fragment = ERRORS[name]
    text, line, col = locate(marked)
    e = compile_err(text)
    assert (e.line, e.column) == (line, col), (e.line, e.column, e.message)
    if fragment is not None:
        assert fragment in e.message, e.message


@pytest.mark.parametrize("library, column", [("def touch() { hold Q.kv (1) { } }", 20),
                                             ("def touch() { observe u = Q.f (1); }", 27)], ids=["member", "definition"])
def test_a_library_cannot_name_a_queue_member(tmp_path, library, column):
    """A definition outside `fn main` is linked before any queue exists: it names neither a queue's
    member nor its definition."""
    (tmp_path / "lib.sq").write_text(library + "\n")
    (tmp_path / "a.sq").write_text('use "lib.sq";\nfn main() { queue Q : decode { pool kv { cap 1; } def f(x) = x; }\n'
                                   "  workload { arrive batch(1); }\n  server { touch(); }\n}\n")
    from serq.errors import SerqError
    from serq.frontend import load_program
    with pytest.raises(SerqError) as info:
        load_program(str(tmp_path / "a.sq"), {})
    assert "only inside `fn main`" in info.value.message
    assert (info.value.line, info.value.column) == (1, column)

"""Hypothesis strategies for small random serQ programs, written as source text (fed through the
front-end), shared by the spec's property test and the spec <-> fast lockstep.

`vllm_programs()` draws a program of the vLLM fragment (docs/spec.md "What the spec is checked against"): one engine with a
paged KV pool, request slots, a token budget, an optional chunk threshold, a unit or affine
rational cost, the seed's request logic with a choice of cache amount, multi-turn sessions with
tool times and staggered starts. Every request fits alone (blocks >= the longest possible known
sequence + 1), so no request preempts itself forever. `queue_programs()` draws fifo / ps / delay
networks. Each draw is a `Case`: the program text, its session count and a sampling seed.
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from fractions import Fraction
from math import ceil

from hypothesis import strategies as st


@dataclass(frozen=True)
class Case:
    text: str
    sessions: int
    seed: int
    name: str = "generated.sq"

    def __repr__(self) -> str:  # pastes into a test as a Python literal
        return f"Case(text={self.text!r}, sessions={self.sessions!r}, seed={self.seed!r})"


RATIONALS = ["1/2", "1/3", "5/7", "1", "2", "3/4"]

# The sessions of the multi-turn templates below: a staggered start, then turns while `more`,
# each extending the conversation `ctx` and calling a tool in between.
SESSION_LOOP = """\
    session {{
      run gate (serial * {stagger});
      turn;
      while (more) {{
        set ctx = ctx + n + o;
        tool (~uniform(0, {think}));
        turn;
      }}
    }}
"""

VLLM = """\
def reusable(x, b) {{ floor((x - 1) / b) * b }}

fn main() {{
{prefixes}  device acc {{ kv cap {blocks} * {bs}; }}
  pool kv on acc {{ block {bs}; evict {evict}; preempt {preempt};{share} }}
  engine eng on acc {{
    reqs cap {slots};
    tokens cap {budget};{granule}{lag}
    request (prompt, output) {{
      set kept = prompt;
      at admission {{
        known = max(kept, computed + 1);
        reused = min(cachedin(kv), reusable(known, blocksize(kv)));
      }}
      set kept = known;
      set c = min(cached, reusable(known, blocksize(kv)));
      observe hit = c;
      observe prefilled = known - c;
      prefill (known - c) growing kv;
      decode (output - 1 - (known - prompt)) growing kv;
      cache ({cache});{eos}{lease}
    }}
    schedule {{
      let lim = running.count + waiting.count > 1 ? {chunk} : inf;
      advance running{order} each at most (lim);
      admit waiting while (running.preempted == 0) each at most (lim)
        taking reqs (1), kv (min(known, reused + budget_left(eng))){content} reserve (known){reuse};
    }}
    execute ({cost});
  }}
  pool reqs on eng {{ queue {queue}; }}
  stage gate : delay;
  workload {{
    arrive {arrival};
    hidden o;
    init {{ set ctx = 0; }}
    turn {{
      set n = 1 + floor(~uniform(0, {maxp}));
      set o = 1 + floor(~uniform(0, {maxo}));
      set more = turn_no < {turns} ? ~bernoulli(1/2) : 0;
    }}
""" + SESSION_LOOP + """  }}
  server {{
    set prompt = {prompt};{release_before}
    eng (prompt, o);{release_after}
  }}
}}
"""


@st.composite
def vllm_programs(draw, content: bool = False, lag: bool = False, arrivals: bool = False,
                  lease: bool = False, claims: bool = False, replicas: bool = False,
                  speculate: bool = False, spill: bool = False, accept: bool = False) -> Case:
    """With `content` the KV pool is `share content` (docs/content.md): a prefix tree of one or two
    shared system prompts, sessions 0 and 1 on the first, the others on the second (its child), the
    rest of each prompt the session's own history. With `lag` the engine is `lag 1` (docs/async.md)
    and its request block may stop by EOS (`eos (…)`: always, never, by the output length or by a
    draw of the session stream). With `arrivals` the workload arrives by `poisson`, `renewal` or
    `closed` instead of `batch` (drawn last). With `lease` the request block leases kv past the
    request (`lease kv (t)`, docs/language.md §11.4: t = inf, 0, a constant or a draw) and the server
    releases it before its next call (a pinned waiting prefix) or right after the call (drawn after
    everything else). With `claims` (drawn last) the program declares one or two iteration
    claims on the engine (`every` / `some`, with or without `given`) and an `at end` claim
    (docs/language.md §11.9 "Claims"). With `speculate` (drawn last) the engine speculates
    (docs/language.md §7.3: `speculate (slots, lookahead, limit)`, the decode's k drafts, a
    one-token prefill's placeholder drafts while some running request was served); with no trace
    every draft is rejected, unless `accept` (with `speculate`, drawn after it) ends the `turn`
    block with `accept (n, alpha);`, which draws the turn's acceptance counts (n the output count
    or another, alpha a constant from 0 to 1, a per-session rate or a draw). With `spill` (drawn last) the KV pool spills evicted blocks to a host
    tier over a link (docs/language.md §11.8.1): a request whose prefix is partly on the tier is
    admitted by `taking` and loaded back before it becomes a resident. Without them the draws and
    the text are exactly those of before (the lockstep tests replay them)."""
    sessions = draw(st.sampled_from([4, 3, 2, 1]))
    bs = draw(st.sampled_from([16, 4, 1]))
    maxp = draw(st.integers(1, 100))
    maxo = draw(st.one_of(st.sampled_from([20, 8]), st.integers(1, 24)))
    turns = draw(st.sampled_from([1, 3, 2]))
    # each turn's prompt extends the conversation (the seed's structure), so a session's cached
    # prefix is always a prefix of its next prompt
    longest = turns * (maxp + maxo)
    shared = ""
    if content:
        roots = draw(st.integers(0, 3 * bs + 2))
        child = draw(st.integers(0, 2 * bs + 1))
        shared = f"(serial < 2 ? {roots} : {roots + child})"
        longest += roots + child
    blocks = ceil(longest / bs) + 1 + draw(st.sampled_from([0, 0, 1, 2, 8]))
    cost = draw(st.one_of(
        st.just("1"),
        st.builds(lambda c0, a, d: f"{c0} + {a} * batch.tokens + {d} * batch.decoding",
                  st.sampled_from(RATIONALS), st.sampled_from(RATIONALS + ["0"]), st.sampled_from(RATIONALS + ["0"])),
        st.builds(lambda c0, a, f: f"{c0} + {a} * batch.prefilled + {f} * batch.prefilling",
                  st.sampled_from(RATIONALS), st.sampled_from(RATIONALS + ["0"]), st.sampled_from(RATIONALS))))
    text = VLLM.format(
        bs=bs, blocks=blocks, slots=draw(st.sampled_from([4, 2, 1, 3])), budget=draw(st.one_of(st.sampled_from([16, 64, 8, 32]), st.integers(1, 64))),
        preempt=draw(st.sampled_from(["lifo", "lifo", "none", "by (-admission)",
                                      "by (decoding ? 0 : 1, -admission) requeue tail"])),
        evict="lru" if content else draw(st.sampled_from(["lru", "by (-size)", "by (size, last)"])),
        granule="{granule}", lag="{lag}", eos="{eos}",
        order=draw(st.sampled_from(["", "", " decode first", " by (remaining)"])),
        queue=draw(st.sampled_from(["fifo", "fifo", "by (prompt)"])),
        chunk=draw(st.one_of(st.just("inf"), st.integers(1, 32).map(str))),
        cache=draw(st.sampled_from(["prompt + output", "prompt + output - 1", "0"])),
        cost=cost, sessions=sessions, arrival="{arrival}",
        maxp=maxp, maxo=maxo, turns=turns, stagger=draw(st.sampled_from(["0", "1/2", "1", "3"])),
        think=draw(st.sampled_from(["0", "1", "5/2"])),
        prompt=f"{shared} + ctx + n" if content else "ctx + n",
        prefixes=f"  prefix 1 ({roots});\n  prefix 2 ({child}) after 1;\n" if content else "",
        share=" share content;" if content else "",
        content=f" content (serial < 2 ? 1 : 2, {shared}, serial)" if content else "",
        reuse=" reuse (reused)" if content else "",
        lease="{lease}", release_before="{release_before}", release_after="{release_after}")
    budget = int(text.split("tokens cap ")[1].split(";")[0])
    # a granule above what the budget can leave a prefill would starve it (docs/language.md §11.6)
    granule = draw(st.sampled_from(["", "", "\n    granule 4;"])) if budget >= 8 else ""
    text = text.replace("{granule}", granule)
    seed = draw(st.integers(0, 2 ** 16))
    lag_text = eos = ""
    if lag:
        lag_text = "\n    lag 1;"
        e = draw(st.sampled_from(["", "1", "0", "output > 4", "~bernoulli(1/2)"]))
        eos = f"\n      eos ({e});" if e else ""
    text = text.replace("{lag}", lag_text).replace("{eos}", eos)
    arrival = draw(arrival_processes(sessions)) if arrivals else f"batch({sessions})"
    lease_text = before = after = ""
    if lease:
        time = draw(st.sampled_from(['inf', '0', '1/2', '2', '~uniform(0, 3)']))
        lease_text = f"\n      lease kv ({time});"
        # with t = 0 (no lease) or a lease that ran out, `release kv;` has nothing to release
        if draw(st.booleans()):
            before = "\n    branch (turn_no > 1) { release kv; }"
        else:
            after = "\n    release kv;"
    text = text.replace("{lease}", lease_text).replace("{release_before}", before).replace("{release_after}", after)
    if claims:
        text = text[:text.rindex("}")] + draw(claim_decls()) + "}\n"
    if replicas:
        text = draw(replicated(text))
    if speculate:
        k = draw(st.integers(1, 4))
        slots = draw(st.sampled_from([0, 1])) if budget > 1 else 0
        look = draw(st.sampled_from([0, k, k + 1]))
        # a limit below a request's length starves its decode (the same in both engines)
        limit = draw(st.sampled_from(["inf", str(maxp + maxo + 2), str(max(3, (maxp + maxo) // 2))]))
        text = text.replace(f"tokens cap {budget};", f"tokens cap {budget};\n    speculate ({slots}, {look}, {limit});", 1)
        text = text.replace("decode (output - 1 - (known - prompt)) growing kv;",
                            f"decode (output - 1 - (known - prompt)) growing kv speculate ({k});")
        text = text.replace("prefill (known - c) growing kv;",
                            f"prefill (known - c) growing kv speculate (known - c == 1 && running_served(eng) > "
                            f"running_chunks(eng) ? {k} : 0);")
        if accept:
            count = draw(st.sampled_from(["o", "o", "o + 3", "o - 1", "0"]))
            alpha = draw(st.sampled_from(["4/5", "1/2", "0", "1", "serial < 2 ? 9/10 : 1/3", "~uniform(0, 1)"]))
            more = text.index("set more = turn_no < ")
            end = text.index(";", more) + 1
            text = text[:end] + f"\n      accept ({count}, {alpha});" + text[end:]
    if spill:
        # a later turn finds its prefix cached (on kv or the tier) in every program
        if turns == 1:
            # that second turn lengthens the conversation by one turn: the pool grows with it, so
            # every request still fits alone (a request that cannot preempts itself forever and
            # sampling runs to its step limit; a lockstep campaign found such programs)
            grown = blocks + ceil((longest + maxp + maxo) / bs) - ceil(longest / bs)
            text = text.replace(f"kv cap {blocks} * {bs};", f"kv cap {grown} * {bs};", 1)
        text = with_host_tier(draw, text.replace("cache (0);", "cache (prompt + output);")
                              .replace("turn_no < 1 ?", "turn_no < 2 ?"), bs)
    return Case(text=text.replace("{arrival}", arrival), sessions=sessions, seed=seed)


def with_host_tier(draw, text: str, bs: int) -> str:
    """The KV pool `kv` of a template spills to a host tier over a fifo, ps or delay link
    (docs/language.md §11.8.1); the copy work and the condition read the chunk and its owner. On
    replicas (`pool kv[r]`) the tier is `host[r]` (member k spills to host[k]) and the link one
    stage they share or an array `link[r]`."""
    work = draw(st.sampled_from(["size / 8", "1/4", "0", "size / 16 + 1/8", "serial + 1/2"]))
    # `age < 29/10`, not `age < 3`: an age of exactly 3 (times on the integer lattice) is a tie the
    # fast engine's float times may decide either way (docs/fast.md "Float time"; a lockstep
    # campaign found two spill_programs ones in 200, minimised in tests/test_lockstep_spill.py)
    when = draw(st.sampled_from(["1", "1", "size >= 2", "age < 29/10", "waiting == 0", "0"]))
    host = draw(st.sampled_from([16, 4, 64, 1, 0])) * bs
    link = draw(st.sampled_from(["fifo", "fifo", "fifo(2)", "ps(1)", "delay"]))
    start = text.index("  pool kv")
    end = text.index(" }\n", start)
    # a `share content` KV pool spills to a content tier (docs/content.md §6)
    share = " share content;" if "share content;" in text[start:end] else ""
    members = ""
    if text.startswith("  pool kv[", start):
        members = "[" + text[start + len("  pool kv["):].split("]")[0] + "]"
    links = members if members and draw(st.booleans()) else ""
    return (text[:end] + f" spill host via link ({work}) when ({when});" + text[end:]).replace(
        "  engine eng", f"  pool host{members} {{ cap {host}; block {bs};{share} }}\n  stage link{links} : {link};\n"
        "  engine eng", 1)


ROUTERS = {
    "round robin": "set x = serial - {r} * floor(serial / {r});",
    "least loaded": "choose x in {r} by (holders(reqs[x]) + queued(reqs[x]));",
    "prefix aware": "choose x in {r} by (cachedin(kv[x]) > 0 ? 0 : 1, holders(reqs[x]) + queued(reqs[x]));",
    "random": "set x = floor(~uniform(0, {r}));",
}


@st.composite
def replicated(draw, text: str) -> str:
    """`text` (a `vllm_programs` program without claims) with its device, engine and pools made
    arrays of 2 or 3 (docs/language.md §6.1) and a router before each call; with a lease, the
    release before a call frees the replica of the call before."""
    r = draw(st.sampled_from([2, 3]))
    router = ROUTERS[draw(st.sampled_from(sorted(ROUTERS)))].format(r=r)
    start, end = text.index("  engine eng on acc {"), text.index("  pool reqs on eng")
    body = text[start:end]
    for old, new in (("engine eng on acc", f"engine eng[{r}] on acc[j]"), ("cachedin(kv)", "cachedin(kv[j])"),
                     ("blocksize(kv)", "blocksize(kv[j])"), ("growing kv", "growing kv[j]"),
                     ("taking reqs (1), kv (", "taking reqs[j] (1), kv[j] ("), ("budget_left(eng)", "budget_left(eng[j])"),
                     ("lease kv (", "lease kv[j] (")):
        body = body.replace(old, new)
    text = text[:start] + body + text[end:]
    for old, new in (("device acc {", f"device acc[{r}] {{"), ("pool kv on acc {", f"pool kv[{r}] on acc[j] {{"),
                     ("pool reqs on eng {", f"pool reqs[{r}] on eng[j] {{"), ("release kv;", "release kv[x];"),
                     ("    eng (prompt, o);", f"    {router}\n    eng[x] (prompt, o);")):
        text = text.replace(old, new)
    return text


# what an iteration claim or its `given` may read (the `execute` values, observables, `now`)
ITERATION_FACTS = ["batch.tokens <= 8", "batch.decoding > 0", "batch.prefilled == batch.tokens",
                   "batch.kv_decode + batch.kv_prefill <= used(kv)", "running.count <= 2",
                   "waiting.count == 0", "now < 3", "queued(reqs) > 0", "batch.attention > 10"]
END_FACTS = ["used(kv) == 0", "queue(eng) == 0", "used(reqs) <= 1", "free(kv) > 0"]


@st.composite
def claim_decls(draw) -> str:
    """One or two iteration claims on `eng` and one `at end` claim (docs/language.md §11.9)."""
    out = ""
    for i in range(draw(st.integers(1, 2))):
        form = draw(st.sampled_from(["every", "some"]))
        given = draw(st.sampled_from([""] + [f" given ({g})" for g in ITERATION_FACTS if "now" not in g]))
        out += f"  claim c{i}{given} : {form} iteration of eng ({draw(st.sampled_from(ITERATION_FACTS))});\n"
    given = draw(st.sampled_from(["", " given (queued(reqs) == 0)"]))
    return out + f"  claim fin{given} : at end ({draw(st.sampled_from(END_FACTS))});\n"


def arrival_processes(sessions: int):
    """An open or closed arrival process for K sampled sessions (docs/sessions.md): `poisson` and
    `renewal` (exact and random gaps; a gap must be positive) draw K arrival times from the arrival
    stream; `closed(n)` starts n sessions at time 0 and one more at each end until K."""
    return st.one_of(
        st.sampled_from(["1/2", "1", "3"]).map(lambda r: f"poisson({r})"),
        st.sampled_from(["1/3", "1", "~uniform(1/2, 2)", "~exp(1)"]).map(lambda g: f"renewal({g})"),
        st.integers(1, sessions).map(lambda n: f"closed({n})"))


QUEUES = """\
fn main() {{
  stage s : {kind};
  stage gate : delay;
  workload {{ arrive {arrival}; }}
  server {{
    run gate ({gap} * serial);
    set t_in = now;
    run s ({work});
    observe sojourn = now - t_in;
  }}
}}
"""


@st.composite
def queue_programs(draw, arrivals: bool = False) -> Case:
    """fifo / ps / delay stages; with `arrivals` an open or closed arrival process (drawn last)."""
    kind = draw(st.sampled_from(["fifo", "fifo(2)", "ps(1)", "ps(2)", "delay"]))
    sessions = draw(st.integers(1, 6))
    text = QUEUES.format(kind=kind, arrival="{arrival}", gap=draw(st.sampled_from(["0", "1/3", "1", "2"])),
                         work=draw(st.sampled_from(["~exp(1)", "~uniform(0, 2)", "1", "~det(3/2)", "0"])))
    seed = draw(st.integers(0, 2 ** 16))
    arrival = draw(arrival_processes(sessions)) if arrivals else f"batch({sessions})"
    return Case(text=text.replace("{arrival}", arrival), sessions=sessions, seed=seed)


ROUTING = """\
fn main() {{
  stage rep[{j}] : {kind};
  stage gate : delay;
  workload {{ arrive {arrival}; }}
  server {{
    run gate ({gap} * serial);
    choose k in {j} by ({key});
    set t_in = now;
    run rep[k] ({work});
    observe sojourn = now - t_in;
    observe replica = k;
  }}
}}
"""


@st.composite
def routing_programs(draw) -> Case:
    """J replicas chosen by `choose` over an observable key (arrays, `choose`, observables)."""
    sessions = draw(st.integers(1, 6))
    text = ROUTING.format(
        j=draw(st.integers(1, 3)), kind=draw(st.sampled_from(["fifo", "ps(1)", "fifo(2)"])),
        arrival=f"batch({sessions})", gap=draw(st.sampled_from(["0", "1/2", "1"])),
        key=draw(st.sampled_from(["queue(rep[k])", "work(rep[k]), k", "busy(rep[k]), -k", "0"])),
        work=draw(st.sampled_from(["~exp(1)", "1 + ~uniform(0, 1)", "3/2"])))
    return Case(text=text, sessions=sessions, seed=draw(st.integers(0, 2 ** 16)))


SCOPE = """\
fn main() {{
  device d {{ kv cap {kvcap}; }}
  pool kv on d {{ block {kvb}; preempt {kvpre}; }}
  engine a on d {{ tokens cap {ta}; schedule {{ advance running; admit waiting; }} execute ({ca}); }}
  engine b on d {{ tokens cap {tb}; schedule {{ advance running; admit waiting; }} execute ({cb}); }}
  pool m {{ cap {mcap};{mblock} preempt {mpre}; }}
  stage w : {kind};
  workload {{
    arrive batch({sessions});
    session {{ turn; tool (~uniform(0, 2)); turn; }}
  }}
  server {{
    hold m (turn_no == 1 ? {u1} : {u2}) {{
      tool (serial == 0 ? {late} : 0);
      grow m (serial == 0 ? {g} : 0);
      observe c = cached;
      run w ({work});
    }} cache ({mcache});
    branch (serial == 0 || serial == 2) {{ {runa} }} else {{ {runb} }}
    observe t = now;
  }}
}}
"""


def _up(x: Fraction, block) -> Fraction:
    """x rounded up to the block (docs/language.md §11.4)."""
    return x if block is None else ceil(x / block) * block


def _engine_run(engine: str, tokens: str, growing: bool) -> str:
    if growing:
        return f"hold kv (0) {{ run {engine} ({tokens}) growing kv; }}"
    return f"run {engine} ({tokens});"


@st.composite
def scope_programs(draw) -> Case:
    """The constructs docs/spec.md admits beyond the vLLM fragment: plain runs on engines (growing
    or holding nothing), two engines sharing one memory pool (victims in an iteration in flight),
    non-whole caps, blocks and units, holds whose pool preempts with their holders in fifo / ps /
    delay stages, and a consumed own prefix above a turn's units (turn 1 and turn 2 allocate
    differently). Only serial 0 grows m and the victims go by `-serial`, so the grower is the last
    candidate and fits alone: no zero-time self-preemption loop. Every engine run fits kv alone."""
    sessions = draw(st.sampled_from([3, 4, 2, 1]))
    kvb = draw(st.sampled_from([1, 2, 4]))
    maxtok = 8
    mb = draw(st.sampled_from([None, Fraction(3, 2), Fraction(1), Fraction(5, 2)]))
    mblock = "" if mb is None else f" block {mb};"
    units = ["1", "5/2", "serial + 1/2", "0", "3/4"]
    kind = draw(st.sampled_from(["fifo", "fifo(2)", "ps(1)", "ps(2)", "delay"]))
    text = SCOPE.format(
        kvcap=kvb * (ceil(maxtok / kvb) + draw(st.sampled_from([0, 0, 1, 3]))),
        kvb=kvb, kvpre=draw(st.sampled_from(["lifo", "none", "by (-admission)"])),
        ta=draw(st.integers(1, 8)), tb=draw(st.integers(1, 8)),
        ca=draw(st.sampled_from(RATIONALS)), cb=draw(st.sampled_from(["1/10"] + RATIONALS)),
        # room for serial 0 alone: its largest units (1/2, 3 or 5/2, rounded up) plus its largest
        # growth (3), rounded up; tight, so that growth preempts
        mcap=str(_up(_up(Fraction(3), mb) + 3, mb) + draw(st.sampled_from([0, 0, 1, 3])) * (mb or 1)),
        mblock=mblock,
        # a holder in a delay is no victim (§11.7): with w a delay, serial 0 would be the only
        # candidate and preempt itself at one instant forever, so m then never preempts
        kind=kind, mpre="none" if kind == "delay" else draw(st.sampled_from(["none", "by (-serial)", "by (-serial) requeue tail"])),
        late=draw(st.sampled_from(["0", "1", "1/2"])),
        # turn 2 mostly allocates less than turn 1 cached: its position starts above its units
        sessions=sessions, u1=draw(st.sampled_from(units[:3] + ["3"])), u2=draw(st.sampled_from(units)),
        g=draw(st.sampled_from(["0", "1", "2", "5/4", "3"])),
        work=draw(st.sampled_from(["~exp(1)", "1", "~uniform(0, 3)", "0", "4"])),
        mcache=draw(st.sampled_from(["inf", "inf", "2", "7/2", "0"])),
        runa=_engine_run("a", draw(st.sampled_from(["1 + serial", "5", "0", str(maxtok)])), draw(st.booleans())),
        runb=_engine_run("b", draw(st.sampled_from(["2", "3 + serial", str(maxtok)])), draw(st.booleans())))
    return Case(text=text, sessions=sessions, seed=draw(st.integers(0, 2 ** 16)))


ESTIMATES = """\
fn main() {{
  stage gate : delay;
  stage rep[2] : {kind};
  pool mem {{ cap 4; block 1; evict by ({evict}); }}
  gauge g_load = est_rho(rep[0]);
  gauge g_price = price(rep[1], 1, 1);
  workload {{
    arrive {arrival};
    session {{ run gate ({gap} * serial); turn; turn; turn; }}
  }}
  server {{
    choose k in 2 by ({key});
    hold mem ({units}) {{
      set c = cached;
      run rep[k] ({work} + (c > 0 ? 0 : 1/2));
    }} cache (2);
    observe lam = est_lambda(rep[k]);
    observe rho = est_rho(rep[k]);
    observe w = est_wait(rep[k]);
    observe p = price(rep[k], {hit}, {ds});
    branch (est_rho(rep[0]) > {thr}) {{ run gate (1/4); }}
  }}
}}
"""


@st.composite
def estimator_programs(draw) -> Case:
    """The online estimators (docs/language.md §4.4) read where a scheduler reads them: a choose
    key, an eviction key, a hold header, gauges, observations and a branch; a separate strategy,
    so the draws of the others stay as they were."""
    sessions = draw(st.integers(1, 6))
    hit, ds = draw(st.sampled_from([("1", "2"), ("c", "1"), ("0", "3/2")]))
    text = ESTIMATES.format(
        # no estimate feeds a time here (a run's work, a ps capacity): `feedback_estimator_programs`
        # adds those to these programs
        kind=draw(st.sampled_from(["fifo", "fifo(2)", "ps(1)", "ps(2)", "delay"])),
        evict=draw(st.sampled_from(["price(rep[0], 1, size)", "-price(rep[1], size, 1)", "age",
                                    "price(rep[0], 0, size) - age"])),
        arrival=draw(arrival_processes(sessions) | st.just(f"batch({sessions})")),
        gap=draw(st.sampled_from(["0", "1/3", "1"])),
        key=draw(st.sampled_from(["est_wait(rep[k])", "price(rep[k], 1, 1), k", "est_lambda(rep[k]), -k",
                                  "queue(rep[k])"])),
        units=draw(st.sampled_from(["1", "2", "est_rho(rep[0]) > 0.6 ? 2 : 1"])),
        work=draw(st.sampled_from(["~exp(1)", "1", "~uniform(0, 2)", "0"])),
        hit=hit, ds=ds, thr=draw(st.sampled_from(["0.37", "0.81"])))
    return Case(text=text, sessions=sessions, seed=draw(st.integers(0, 2 ** 16)))


@st.composite
def content_pin_programs(draw) -> Case:
    """`vllm_programs(content=True)` whose request block leases its `share content` KV pool past the
    request (`lease kv (t)`, released before the next call or right after), whose pool is `reserve
    held` (the admission's reserve kept while the request runs), or both (docs/content.md
    §3 "Lease" and "reserve held"). A `reserve held` pool reserves twice the prompt
    (`reserve (2 * known)`; the output length is hidden), so a running request keeps blocks from
    the next admissions until its decode has grown into them. Drawn after the program's own draws."""
    lease, held = draw(st.sampled_from([(True, False), (False, True), (True, True)]))
    case = draw(vllm_programs(content=True, lease=lease, arrivals=draw(st.booleans())))
    text = case.text
    if held:
        text = text.replace(" share content;", " share content; reserve held;", 1)
        text = text.replace(" reserve (known)", " reserve (2 * known)", 1)
    return Case(text=text, sessions=case.sessions, seed=case.seed)


# what a time reads of an estimate (docs/spec.md "Online estimates": readings on the grid keep the
# exact engine's numbers bounded when they feed back into the times they measure)
STAGE_FEEDBACK = ["est_rho(rep[k])", "est_wait(rep[k]) / 2", "price(rep[k], 1/2, 1/2) / 8", "est_lambda(rep[0]) / 4"]
ENGINE_FEEDBACK = ["est_rho(eng) / 8", "est_wait(eng) / 16", "price(eng, 1, 1) / 64", "est_lambda(eng) / 32"]


@st.composite
def feedback_estimator_programs(draw) -> Case:
    """Estimates read in times: an `estimator_programs` program whose run's work adds an estimate of
    its stage (and whose stages may be `ps(1 + est_rho(gate))`), or an `engine_estimator_programs`
    program whose `execute` adds one of its own engine's, so each time carries the reading into the
    next samples. Drawn after the program's own draws."""
    if draw(st.booleans()):
        case = draw(estimator_programs())
        text = case.text.replace("run rep[k] (", f"run rep[k] ({draw(st.sampled_from(STAGE_FEEDBACK))} + ", 1)
        if draw(st.booleans()):
            text = re.sub(r"stage rep\[2\] : [^;]*;", "stage rep[2] : ps(1 + est_rho(gate));", text, count=1)
    else:
        case = draw(engine_estimator_programs())
        text = case.text.replace("    execute (", f"    execute ({draw(st.sampled_from(ENGINE_FEEDBACK))} + ", 1)
    return Case(text=text, sessions=case.sessions, seed=case.seed)

FORK = """\
fn main() {{
  device acc {{ kv cap {kvcap} * 16; }}
  pool kv on acc {{ block 16; evict lru; preempt lifo; }}
  pool mem {{ cap {memcap}; evict lru; preempt {preempt}; }}
  engine eng on acc {{
    reqs cap {slots};
    tokens cap {budget};
    request (prompt, output) {{
      at admission {{ known = max(prompt, computed + 1); }}
      prefill (known) growing kv;
      decode (output - 1 - (known - prompt)) growing kv;
    }}
    schedule {{
      advance running;
      admit waiting while (running.preempted == 0) taking reqs (1), kv (min(known, budget_left(eng))) reserve (known);
    }}
    execute ({cost});
  }}
  pool reqs on eng {{ queue fifo; }}
  stage s : {kind};
  stage p : ps({rate});
  workload {{
    arrive {arrival};
    turn {{ set n = 1 + floor(~uniform(0, 40)); set o = 1 + floor(~uniform(0, 8)); }}
    session {{ turn; {second} }}
  }}
  server {{
{body}
  }}
}}
"""

# What a branch, or its parent before the join, runs (docs/language.md §11.13); `{w}` a work, `{i}`
# a counter of its own
FORK_STMTS = ["tool ({w});", "run s ({w});", "run p ({w});", "set v = v + {w};", "observe ov = v + now;",
              "branch with (1/2) {{ run s ({w}); }} else {{ tool ({w}); }}",
              "while (k{i} < 2) {{ tool ({w} + 1/4); set k{i} = k{i} + 1; }}"]
FORK_WORKS = ["1", "1/2", "0", "~exp(1)", "~uniform(0, 2)", "serial + 1/3"]
# What only a branch may run (a sub-agent, docs/language.md §11.13): its own engine request, holds
# of the small pool `mem` (cached, grown, leased, released early; `{u}` may exceed its cap: rejected)
FORK_HOLDS = ["eng ({n}, {o});", "hold mem ({u}) {{ run s ({w}); }} cache ({u});",
              "hold mem (1) {{ grow mem (1); tool ({w}); }} cache (2);",
              "hold mem ({u}) {{ observe hit = cached; tool ({w}); }} cache (1) lease mem ({w}); run s (1/2); release mem;",
              "hold mem (1) {{ set v = v + 1; run p ({w}); release mem; tool (1/2); }}"]


@st.composite
def fork_blocks(draw, depth: int, counters: list, holds: tuple = ()) -> str:
    """1-3 statements of a branch: the forms above, the `holds` forms (of FORK_HOLDS) and, above
    depth 0, a nested fork and join."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        if depth > 0 and draw(st.integers(0, 3)) == 0:
            inner = [draw(fork_blocks(depth - 1, counters, holds)) for _ in range(draw(st.integers(1, 2)))]
            out.append(" ".join(f"fork {{ {b} }}" for b in inner) + " join;")
            continue
        if holds and draw(st.integers(0, 2)) == 0:
            out.append(draw(st.sampled_from(holds)).format(
                w=draw(st.sampled_from(FORK_WORKS)), u=draw(st.sampled_from(["1", "2", "v + 3"])),
                n=draw(st.sampled_from(["n", "n + 16", "1 + floor(~uniform(0, 6))"])),
                o=draw(st.sampled_from(["o", "o + 12"]))))
            continue
        i = len(counters)
        form = draw(st.sampled_from(FORK_STMTS))
        if "{i}" in form:
            counters.append(i)
        out.append(form.format(w=draw(st.sampled_from(FORK_WORKS)), i=i))
    return " ".join(out)


@st.composite
def fork_programs(draw) -> Case:
    """An agent turn (docs/language.md §11.13): branches with tool calls, fifo and ps runs, draws,
    shared attributes, loops and nested forks, and sub-agents holding pools (their own engine
    requests, holds of a small pool that may make them wait, preempt them or reject them); the
    parent's own work before the join, the fork region inside a hold of the parent or not; then,
    or not, one engine request after the join; one or two turns per session; batch, open or
    closed arrivals."""
    sessions = draw(st.integers(1, 5))
    counters: list = []
    preempt = draw(st.sampled_from(["none", "lifo", "by (-position)"]))
    # a growth that preempts (`lifo`, `by`) when every other holder is no candidate (a parent waiting
    # for its branches, a holder in the delay stage `tool`) preempts itself again at every
    # re-admission, a loop the engines stop at one instant (§11.9): grow under `preempt none` only
    holds = tuple(f for f in FORK_HOLDS if preempt == "none" or "grow" not in f)
    forks = [draw(fork_blocks(2, counters, holds)) for _ in range(draw(st.integers(1, 3)))]
    parent = draw(st.sampled_from(["", "tool (1/2);", "run s (~exp(1));", "run p (1);", "set v = v * 2;"]))
    lines = ["    set v = 0;"] + [f"    set k{i} = 0;" for i in counters]
    region = [f"    fork {{ {b} }}" for b in forks] + [f"    {parent}" if parent else "", "    join;"]
    if draw(st.booleans()):   # the fork inside a hold of the parent's (its pool stays the parent's)
        region = ["    hold mem (1) {"] + [x for x in region if x] + ["    } cache (1);"]
    lines += region + ["    observe joined = now;"]
    if draw(st.booleans()):
        lines.append("    eng (n, o);")
    lines.append("    observe done = now - v;")
    text = FORK.format(slots=draw(st.integers(1, 4)), budget=draw(st.sampled_from([8, 32, 64])),
                       kvcap=draw(st.sampled_from([200, 3])), memcap=draw(st.sampled_from([2, 3, 6])),
                       preempt=preempt,
                       cost=draw(st.sampled_from(["1", "1/2", "1/100 + batch.tokens / 1000"])),
                       kind=draw(st.sampled_from(["fifo", "fifo(2)", "delay"])),
                       rate=draw(st.sampled_from(["1", "2"])),
                       arrival="{arrival}", second=draw(st.sampled_from(["", "tool (~exp(1)); turn;"])),
                       body="\n".join(x for x in lines if x))
    arrival = draw(st.one_of(st.just(f"batch({sessions})"), arrival_processes(sessions)))
    return Case(text=text.replace("{arrival}", arrival), sessions=sessions, seed=draw(st.integers(0, 2 ** 16)))


@st.composite
def engine_estimator_programs(draw) -> Case:
    """The online estimates of an engine (docs/language.md §4.4): a `vllm_programs` program (with
    its preemptions and head requeues, whose new join Ŵ measures from) that reads `est_lambda`,
    `est_rho`, `est_wait` and `price` of its engine in the server (observations and a branch), and
    by draw in gauges, the admission guard and the queue key. Never in a time here (a run's work,
    the budget, `execute`): `feedback_estimator_programs` adds one to `execute`. Drawn after the
    vLLM program's own draws."""
    case = draw(vllm_programs(arrivals=draw(st.booleans())))
    text = case.text
    thr = draw(st.sampled_from(["1/3", "3/4", "2"]))
    reads = (f"\n    observe lam = est_lambda(eng);\n    observe rho = est_rho(eng);"
             f"\n    observe w = est_wait(eng);\n    observe p = price(eng, 1, 2);"
             f"\n    branch (est_wait(eng) > {thr}) {{ run gate (1/4); }}")
    text = text.replace("\n    eng (prompt, o);", "\n    eng (prompt, o);" + reads, 1)
    if draw(st.booleans()):   # gauges: the whole program runs without the decode fast-forward
        text = text.replace("  stage gate : delay;", "  stage gate : delay;\n  gauge g_rho = est_rho(eng);"
                            "\n  gauge g_price = price(eng, 1/2, 1);", 1)
    if draw(st.booleans()):
        guard = draw(st.sampled_from(["est_rho(eng) < 0.9", "est_lambda(eng) < 3", "est_wait(eng) <= 1"]))
        text = text.replace("while (running.preempted == 0)", f"while (running.preempted == 0 && {guard})", 1)
    if "queue by (prompt)" in text and draw(st.booleans()):
        text = text.replace("queue by (prompt)", "queue by (est_wait(eng) > 1 ? -prompt : prompt, price(eng, 1, prompt))", 1)
    return Case(text=text, sessions=case.sessions, seed=case.seed)


FLOWS = """\
fn main() {{
  stage link[3] : ps({cap});
  stage solo : ps(1);
  stage gate : delay;{share}
  pool m {{ cap {mcap}; preempt {mpre}; }}
  gauge g_work = work(link[1]);
  workload {{
    arrive {arrival};
    session {{ turn; tool (~uniform(0, 2)); turn; }}
  }}
  server {{
    run gate ({gap} * serial);
    hold m (1) {{
      tool (serial == 0 ? {late} : 0);
      grow m (serial == 0 ? {g} : 0);
      {first}
    }}
    {second}
    observe q = queue(link[1]);
    observe w = work(link[0]);
  }}
}}
"""

# the runs of a flow program: one stage, or a flow over two or three links (fixed or by serial)
FLOW_RUNS = ["run link[{k}] ({w});", "run solo ({w});", "run link[0], link[1] ({w});",
             "run link[1], link[2], link[0] ({w});", "run link[serial - 3 * floor(serial / 3)], solo ({w});",
             "branch with (1/2) {{ run link[0], link[2] ({w}); }} else {{ run link[2] ({w}); }}"]
FLOW_WORKS = ["~exp(1)", "1", "~uniform(0, 2)", "0", "1/2"]


@st.composite
def flow_runs(draw, n: int, fork: bool) -> str:
    out = []
    for _ in range(n):
        form = draw(st.sampled_from(FLOW_RUNS))
        out.append(form.format(k=draw(st.integers(0, 2)), w=draw(st.sampled_from(FLOW_WORKS))))
    if fork and draw(st.booleans()):
        return f"fork {{ {out[0]} }} {' '.join(out[1:])} join;"
    return " ".join(out)


@st.composite
def flow_programs(draw) -> Case:
    """Runs over several ps stages (docs/language.md §11.14) among one-stage runs on the same
    stages, under `share maxmin`, `share bottleneck` or the default; capacities that read `present`;
    a flow in a fork's branch; holders preempted inside a flow (serial 0 grows m late and the
    victims go by `-serial`, so the grower fits alone); batch, open or closed arrivals. A separate
    strategy, so the draws of the others stay as they were."""
    sessions = draw(st.integers(1, 6))
    g = draw(st.sampled_from([0, 1, 2]))
    text = FLOWS.format(
        cap=draw(st.sampled_from(["1", "2", "present > 1 ? 3/2 : 1", "1 + present / 4"])),
        share=draw(st.sampled_from(["", "\n  share maxmin;", "\n  share bottleneck;"])),
        mcap=1 + g + draw(st.sampled_from([0, 1, 3, 6])), mpre=draw(st.sampled_from(["none", "by (-serial)"])),
        arrival="{arrival}", gap=draw(st.sampled_from(["0", "1/3", "1"])),
        late=draw(st.sampled_from(["0", "1/2", "1"])), g=g,
        first=draw(flow_runs(draw(st.integers(1, 2)), False)),
        second=draw(flow_runs(draw(st.integers(1, 2)), True)))
    arrival = draw(st.one_of(st.just(f"batch({sessions})"), arrival_processes(sessions)))
    return Case(text=text.replace("{arrival}", arrival), sessions=sessions, seed=draw(st.integers(0, 2 ** 16)))


# The workload and the head of the server of the P/D templates (transfer_programs, pd_queue_programs)
PD_WORKLOAD_SERVER = """\
  workload {{
    arrive {arrival};
    hidden o;
    turn {{ set p = 1 + floor(~uniform(0, {maxp})); set o = 1 + floor(~uniform(0, {maxo})); }}
    session {{ turn;{more} }}
  }}
  server {{
    choose i in {P} by ({pkey});
    choose k in {D} by ({dkey});
"""

TRANSFER = """\
fn main() {{
  device pg[{P}] {{ pkv cap {pcap}; }}
  device dg[{D}] {{ dkv cap {dcap}; }}
  pool pkv[{P}] on pg[j] {{ block {pb}; }}
  pool dkv[{D}] on dg[j] {{ block {db}; evict lru; preempt lifo; }}
  engine pre[{P}] on pg[j] {{
    preqs cap {slots};
    tokens cap {budget};
    request (p, o) {{
      at admission {{ need = p; }}
      prefill (p) growing pkv[j];
      lease pkv[j] ({lease});
    }}
    schedule {{
      advance running;
      admit waiting taking preqs[j] (1), pkv[j] (min(need, budget_left(pre[j]))) reserve (need);
    }}
    execute ({pcost});
  }}
  pool preqs[{P}] on pre[j] {{ queue fifo; }}
  engine dec[{D}] on dg[j] {{
    dreqs cap {slots};
    tokens cap {budget};
    request (p, o) {{
      at admission {{ need = p + 1; hit = min(cachedin(dkv[j]), p); }}
      set took = min(cached, p);
      observe reused = took;
      prefill (need - took) growing dkv[j];
      decode (o - 1) growing dkv[j];
      cache (0);
    }}
    schedule {{
      advance running;
      admit waiting taking dreqs[j] (1), dkv[j] (min(need, hit + budget_left(dec[j]))) reserve (need);
    }}
    execute ({dcost});
  }}
  pool dreqs[{D}] on dec[j] {{ queue fifo; }}
  pool side[{P}] {{ cap {pcap}; block {pb}; }}
  stage prep[{P}] : fifo;
  stage link[{D}] : {link};
  stage send[{P}] : ps(1);
""" + PD_WORKLOAD_SERVER + """{body}
    dec[k] (p, o);
    observe done = now;
  }}
}}
"""

# Where the KV is when the transfer starts: leased on the prefill engine's pool after its request,
# or held by a plain hold of a side pool around the copy (the transfer then releases a hold's part)
TRANSFER_SOURCES = {
    "lease": """\
    pre[i] (p, 1);
    observe ttft = now;
    hold dkv[k] (p{extra}) {{
      transfer {links} ({work}) from pkv[i] to dkv[k] ({n});
      observe landed = now;
    }} cache ({cache});""",
    "hold": """\
    hold side[i] (p) {{
      run prep[i] ({work});
      hold dkv[k] (p{extra}) {{
        transfer {links} ({work}) from side[i] to dkv[k] ({n});
        observe landed = now;
      }} cache ({cache});
      observe settled = now;
    }} cache ({cache});""",
}


def pd_engines(draw, maxp: int, maxo: int, pb: int, db: int) -> dict:
    """The prefill and decode engines' sizes and costs of the P/D templates: a landing (p + 3) and
    a decode (p + o + 1) each fit alone, tight or roomy."""
    return dict(
        pcap=ceil(maxp / pb) * pb + pb * draw(st.sampled_from([0, 1, 8])),
        dcap=ceil((maxp + maxo + 4) / db) * db + db * draw(st.sampled_from([0, 2, 20])),
        slots=draw(st.integers(1, 3)), budget=draw(st.sampled_from([4, 16, 64])),
        lease=draw(st.sampled_from(["inf", "inf", "1000"])),
        pcost=draw(st.sampled_from(["1", "1/2 + batch.tokens / 8", "1/10"])),
        dcost=draw(st.sampled_from(["1", "1/3 + batch.tokens / 16", "1/4"])))


@st.composite
def transfer_programs(draw) -> Case:
    """Prefill/decode disaggregation (docs/language.md §11.15): 1 or 2 prefill engines whose requests
    lease their KV, or a plain hold of a side pool; 1 or 2 decode engines chosen by a key; a landing
    hold of the decode pool around `transfer link[k] (w) from P to dkv[k] (n)` over a fifo, ps or
    delay link, or over the prefill side's ps link and a ps `link[k]` at once, n = p or less, cached or not for the decode request, which reuses what landed; one
    or two turns, batch or open arrivals. Every request fits its pools alone, and nothing waits for
    a pool while holding one another waits for, so no run deadlocks."""
    sessions = draw(st.integers(1, 5))
    P, D = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pb, db = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 4, 2]))
    maxp, maxo = draw(st.integers(1, 24)), draw(st.integers(1, 12))
    extra = draw(st.sampled_from(["", " + 1", " + 3"]))
    source = draw(st.sampled_from(sorted(TRANSFER_SOURCES)))
    link = draw(st.sampled_from(["fifo", "fifo(2)", "ps(1)", "delay"]))
    # over a ps link, the copy may also cross the prefill side's sending link (a flow, §11.14)
    links = draw(st.sampled_from(["link[k]", "send[i], link[k]"])) if link == "ps(1)" else "link[k]"
    body = TRANSFER_SOURCES[source].format(
        extra=extra, links=links, work=draw(st.sampled_from(["0", "1/2", "~exp(1)", "p / 4", "~uniform(0, 2)"])),
        n=draw(st.sampled_from(["p", "p", "p - 1", "floor(p / 2)"])),
        cache=draw(st.sampled_from(["inf", "p", "0"])))
    text = TRANSFER.format(
        P=P, D=D, pb=pb, db=db,
        **pd_engines(draw, maxp, maxo, pb, db),
        link=link,
        arrival=draw(st.one_of(st.just(f"batch({sessions})"), st.just("poisson(1)"))),
        maxp=maxp, maxo=maxo, more=draw(st.sampled_from(["", " tool (~exp(1)); turn;"])),
        pkey=draw(st.sampled_from(["holders(preqs[i]) + queued(preqs[i])", "-i", "0"])),
        dkey=draw(st.sampled_from(["holders(dreqs[k]) + queued(dreqs[k])", "cachedin(dkv[k]), k", "0"])),
        body=body)
    return Case(text=text, sessions=sessions, seed=draw(st.integers(0, 2 ** 16)))


SPILL = """\
def reusable(x, b) {{ floor((x - 1) / b) * b }}

fn main() {{
  device acc {{ kv cap {blocks} * {bs}; }}
  pool kv on acc {{ block {bs}; evict {evict}; preempt {preempt}; spill host via link ({work}) when ({when}); }}
  pool host {{ cap {hostcap}; block {bs}; evict {hostevict};{hostspill} }}{disk}
  stage link : {link};
  stage slow : delay;
  engine eng on acc {{
    tokens cap {budget};
    schedule {{ advance running each at most ({chunk}); }}
    execute ({cost});
  }}
  stage gate : delay;
  workload {{
    arrive {arrival};
    hidden o;
    init {{ set ctx = 0; }}
    turn {{
      set n = {maxp} - floor(~uniform(0, {maxp} / 4));
      set o = {maxo} - floor(~uniform(0, {maxo} / 2));
      set more = turn_no < {turns} ? ~bernoulli({p}) : 0;
    }}
""" + SESSION_LOOP + """  }}
  server {{
    set prompt = ctx + n;
    observe avail = cachedin(kv);{drop}
    hold kv ({units}){reuse} {{
      set c = min(cached, reusable(prompt, {bs}));
      observe hit = c;
      run eng prefill (prompt - c) growing kv;
      run eng decode (o - 1) growing kv;
    }} cache ({cache});
  }}
}}
"""


@st.composite
def flow_spill_programs(draw) -> Case:
    """A `spill_programs` program whose link is a ps stage that runs over several stages cross
    (docs/language.md §11.14): each turn sends over `link` and `net` before its hold (and,
    sometimes, inside it), so copies and load-backs share the link with flows by `share maxmin`
    or `share bottleneck` (docs/language.md §11.8.1)."""
    case = draw(spill_programs())
    text = case.text
    link = text.split("  stage link : ")[1].split(";")[0]
    share = draw(st.sampled_from(["maxmin", "bottleneck"]))
    text = text.replace(f"  stage link : {link};", f"  stage link : ps({draw(st.sampled_from(['1', '2']))});\n"
                        f"  stage net : ps(1);\n  share {share};", 1)
    send = draw(st.sampled_from(["1/2", "~uniform(0, 2)", "prompt / 8", "0"]))
    text = text.replace("    observe avail = cachedin(kv);", f"    run link, net ({send});\n    observe avail = cachedin(kv);", 1)
    if draw(st.booleans()):
        text = text.replace("      run eng decode (o - 1) growing kv;",
                            "      run eng decode (o - 1) growing kv;\n      run net, link (o / 4);", 1)
    return Case(text=text, sessions=case.sessions, seed=case.seed)


@st.composite
def content_spill_programs(draw) -> Case:
    """A `spill_programs` program on `share content` pools (docs/content.md §6): kv and its host
    tier are content pools (no disk tier, LRU, no `drop`), every prompt starts with a shared
    system prompt (prefix 1 for sessions 0 and 1, its child prefix 2 for the others) and goes on
    with the session's own history, so evicted blocks move to host by identity, a lookup goes on
    into host after kv's hit and the request waits for the load-back. kv grows by the shared part,
    so it still fits one session's longest sequence."""
    import re
    case = draw(spill_programs())
    text = case.text
    bs = int(text.split("block ")[1].split(";")[0])
    roots = draw(st.integers(0, 3 * bs + 2))
    child = draw(st.integers(0, 2 * bs + 1))
    shared = f"(serial < 2 ? {roots} : {roots + child})"
    cap = text.split("device acc { kv cap ")[1].split(";")[0]
    blocks = int(cap.split(" * ")[0]) + ceil((roots + child) / bs)
    text = text.replace(f"device acc {{ kv cap {cap};", f"device acc {{ kv cap {blocks} * {bs};", 1)
    text = text.replace("fn main() {\n", f"fn main() {{\n  prefix 1 ({roots});\n  prefix 2 ({child}) after 1;\n", 1)
    text = re.sub(r"(pool kv on acc \{ block \d+; )evict [^;]+;", r"\1share content;", text, count=1)
    text = re.sub(r"pool host \{ cap (\d+); block (\d+); evict [^;]+;[^}]*\}", r"pool host { cap \1; block \2; share content; }",
                  text, count=1)
    text = re.sub(r"\n  pool disk \{[^}]*\}", "", text, count=1)
    text = text.replace("\n    branch (turn_no == 3) { drop kv; }", "")
    text = text.replace("    set prompt = ctx + n;", f"    set prompt = {shared} + ctx + n;", 1)
    text = text.replace("    hold kv (", "    hold kv CONTENT(", 1)
    start = text.index("CONTENT(") + len("CONTENT(")
    end, depth = start, 1   # the parenthesis closing kv's units
    while depth:
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        end += 1
    text = (text[:end] + f" content (serial < 2 ? 1 : 2, {shared}, serial)" + text[end:]).replace("CONTENT(", "(", 1)
    return Case(text=text, sessions=case.sessions, seed=case.seed)


@st.composite
def two_spill_programs(draw) -> Case:
    """A `spill_programs` program whose hold also takes `emb`, a free-standing pool as large as kv
    that spills to `disk` over a link of its own (fifo, ps or delay): a hold of two spilling
    pools, whose load-backs run one after another in the hold's order (docs/language.md
    §11.8.1). Either pool may come first in the hold."""
    case = draw(spill_programs())
    text = case.text
    bs = text.split("block ")[1].split(";")[0]
    cap = text.split("device acc { kv cap ")[1].split(";")[0]
    work = draw(st.sampled_from(["size / 4", "1/3", "0", "size / 8 + 1/4"]))
    link = draw(st.sampled_from(["fifo", "ps(1)", "delay"]))
    disk = draw(st.sampled_from([16, 4, 64])) * int(bs)
    text = text.replace("  stage slow : delay;", f"  stage slow : delay;\n  stage link2 : {link};\n"
                        f"  pool emb {{ cap {cap}; block {bs}; evict lru; spill disk2 via link2 ({work}) when (1); }}\n"
                        f"  pool disk2 {{ cap {disk}; block {bs}; }}", 1)
    start = text.index("    hold kv (")
    end, depth = start + len("    hold kv ("), 1   # the parenthesis closing kv's units
    while depth:
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        end += 1
    end -= 1
    units = text[start + len("    hold kv ("):end]
    # a units expression of kv read again for emb (its own `cachedin` where it reads kv's)
    emb = draw(st.sampled_from(["prompt", units.replace("cachedin(kv)", "cachedin(emb)")]))
    items = [f"kv ({units})", f"emb ({emb})"]
    if draw(st.booleans()):
        items.reverse()
    text = text[:start] + "    hold " + ", ".join(items) + text[end + 1:]
    return Case(text=text, sessions=case.sessions, seed=case.seed)


@st.composite
def spill_programs(draw, arrivals: bool = False) -> Case:
    """Offload tiers (`spill`, docs/language.md §11.8.1): multi-turn sessions whose KV pool (an
    engine's memory, grown by its prefill and decode runs) spills evicted blocks to a host tier
    over a fifo, ps or delay link, the host tier sometimes spilling on to a disk tier; conditions
    and copy work read the chunk's size, age and owner; the hit taken by the units or not, with or
    without `reuse`; an occasional `drop kv;`. The KV pool fits one session's longest sequence,
    so a request never preempts itself forever."""
    sessions = draw(st.sampled_from([4, 3, 5, 2]))
    bs = draw(st.sampled_from([4, 1, 2]))
    maxp = draw(st.integers(1, 24))
    maxo = draw(st.integers(1, 8))
    turns = draw(st.sampled_from([3, 2, 4]))
    longest = turns * (maxp + maxo)
    blocks = ceil(longest / bs) + 1 + draw(st.sampled_from([0, 0, 1, 4]))   # tight: others' entries go
    chain = draw(st.booleans())
    text = SPILL.format(
        bs=bs, blocks=blocks,
        evict=draw(st.sampled_from(["lru", "lru", "by (-size)", "by (last, size)"])),
        preempt=draw(st.sampled_from(["lifo", "none", "by (-admission)"])),
        work=draw(st.sampled_from(["size / 8", "1/4", "0", "size / 16 + 1/8", "serial + 1/2"])),
        when=draw(st.sampled_from(["1", "size >= 2", "1", "age < 29/10", "waiting == 0", "serial - 2 * floor(serial / 2) == 0", "0"])),
        hostcap=draw(st.sampled_from([16, 4, 64, 1, 0])) * bs,
        hostevict=draw(st.sampled_from(["lru", "by (-size)"])),
        hostspill=" spill disk via slow (size / 4) when (1);" if chain else "",
        disk=f"\n  pool disk {{ cap {draw(st.sampled_from([2, 8]))} * {bs}; block {bs}; }}" if chain else "",
        link=draw(st.sampled_from(["fifo", "fifo", "fifo(2)", "ps(1)", "delay"])),
        budget=draw(st.sampled_from([8, 16, 4, 32])),
        chunk=draw(st.sampled_from(["inf", "4", "7"])),
        cost=draw(st.sampled_from(["1", "1/2 + 1/16 * batch.tokens"])),
        arrival="{arrival}", maxp=maxp, maxo=maxo, turns=turns, p=draw(st.sampled_from(["1", "3/4"])),
        stagger=draw(st.sampled_from(["0", "1/2", "2"])), think=draw(st.sampled_from(["8", "5/2", "0"])),
        drop=draw(st.sampled_from(["", "", "\n    branch (turn_no == 3) { drop kv; }"])),
        units=draw(st.sampled_from([f"min(cachedin(kv), reusable(prompt, {bs}))", "0", "1"])),
        reuse=draw(st.sampled_from(["", f" reuse (reusable(prompt, {bs}))", " reuse (2)"])),
        cache=draw(st.sampled_from(["prompt + o", "prompt + o - 1", "prompt"])))
    seed = draw(st.integers(0, 2 ** 16))
    arrival = draw(arrival_processes(sessions)) if arrivals else f"batch({sessions})"
    return Case(text=text.replace("{arrival}", arrival), sessions=sessions, seed=seed)


# Prefill/decode disaggregation written with queues (docs/language.md §11.16): a prefill queue
# array (or a single queue), a decode or agg queue array whose entry `pull` lands the source's KV
# (directly, or through a second entry that `pull` calls with `from source`), a link queue array;
# each queue's definition `demand ()` read by the routing keys from outside, the decode engines'
# cost reading `self.index`.
PD_QUEUES = """\
fn main() {{
  queue P{pdim} : prefill {{
    device gpu {{ kv cap {pcap}; }}
    pool kv on gpu {{ block {pb}; }}
    engine eng on gpu {{
      reqs cap {slots};
      tokens cap {budget};
      request (p, o) {{
        at admission {{ need = p; }}
        prefill (p) growing kv;
        lease kv ({lease});
      }}
      schedule {{
        advance running;
        admit waiting taking reqs (1), kv (min(need, budget_left(eng))) reserve (need);
      }}
      execute ({pcost});
    }}
    pool reqs on eng {{ queue fifo; }}
    def demand() = holders(reqs) + queued(reqs);
  }}
  queue D[{D}] : {drole} {{
    device gpu {{ kv cap {dcap}; }}
    pool kv on gpu {{ block {db}; evict lru; preempt lifo; }}
{entries}
    engine eng on gpu {{
      reqs cap {slots};
      tokens cap {budget};
      request (p, o) {{
        at admission {{ need = p + 1; hit = min(cachedin(kv), p); }}
        set took = min(cached, p);
        observe reused = took;
        prefill (need - took) growing kv;
        decode (o - 1) growing kv;
        cache (0);
      }}
      schedule {{
        advance running;
        admit waiting taking reqs (1), kv (min(need, hit + budget_left(self.eng))) reserve (need);
      }}
      execute ({dcost}{dshift});
    }}
    pool reqs on eng {{ queue fifo; }}
    def demand() = holders(reqs) + queued(reqs);
  }}
  queue L[{D}] : link {{ stage wire : {link}; }}
""" + PD_WORKLOAD_SERVER + """    P{pi}.eng (p, 1);
    observe ttft = now;
    D[k].pull (p, L[k].wire) from P{pi};
    D[k].eng (p, o);
    observe done = now;
  }}
}}
"""

PD_QUEUE_LANDING = """\
      hold kv (n{extra}) {{
        transfer w ({work}) from source.kv to kv ({amount});
        observe landed = now;
      }} cache ({cache});"""

PD_QUEUE_ENTRIES = {
    "direct": "    def pull(n, w) {{\n" + PD_QUEUE_LANDING + "\n    }}",
    "nested": ("    def land(n, w) {{\n" + PD_QUEUE_LANDING + "\n    }}\n"
               "    def pull(n, w) {{ observe asked = n; self.land (n, w) from source; }}"),
}


# The same deployments spelled out without queues, as serq/queues.py lowers them (docs/language.md
# §11.16): member m of queue Q is `Q_m` here (the IR's `Q.m`), an entry a definition whose
# parameters are the decode queue's index, the source's pool, then its own.
PD_QUEUES_TWIN = """\
fn main() {{
  device P_gpu{pdim} {{ P_kv cap {pcap}; }}
  pool P_kv{pdim} on P_gpu{pj} {{ block {pb}; }}
  engine P_eng{pdim} on P_gpu{pj} {{
    P_reqs cap {slots};
    tokens cap {budget};
    request (p, o) {{
      at admission {{ need = p; }}
      prefill (p) growing P_kv{pj};
      lease P_kv{pj} ({lease});
    }}
    schedule {{
      advance running;
      admit waiting taking P_reqs{pj} (1), P_kv{pj} (min(need, budget_left(P_eng{pj}))) reserve (need);
    }}
    execute ({pcost});
  }}
  pool P_reqs{pdim} on P_eng{pj} {{ queue fifo; }}
  def P_demand({pq}) = holders(P_reqs{pqi}) + queued(P_reqs{pqi});
  device D_gpu[{D}] {{ D_kv cap {dcap}; }}
  pool D_kv[{D}] on D_gpu[j] {{ block {db}; evict lru; preempt lifo; }}
{entries}
  engine D_eng[{D}] on D_gpu[j] {{
    D_reqs cap {slots};
    tokens cap {budget};
    request (p, o) {{
      at admission {{ need = p + 1; hit = min(cachedin(D_kv[j]), p); }}
      set took = min(cached, p);
      observe reused = took;
      prefill (need - took) growing D_kv[j];
      decode (o - 1) growing D_kv[j];
      cache (0);
    }}
    schedule {{
      advance running;
      admit waiting taking D_reqs[j] (1), D_kv[j] (min(need, hit + budget_left(D_eng[j]))) reserve (need);
    }}
    execute ({dcost}{dshift});
  }}
  pool D_reqs[{D}] on D_eng[j] {{ queue fifo; }}
  def D_demand(q) = holders(D_reqs[q]) + queued(D_reqs[q]);
  stage L_wire[{D}] : {link};
""" + PD_WORKLOAD_SERVER + """    P_eng{pi} (p, 1);
    observe ttft = now;
    pull(k, P_kv{pi}, p, L_wire[k]);
    D_eng[k] (p, o);
    observe done = now;
  }}
}}
"""

PD_QUEUE_TWIN_LANDING = """\
      hold D_kv[q] (n{extra}) {{
        transfer w ({work}) from src to D_kv[q] ({amount});
        observe landed = now;
      }} cache ({cache});"""

PD_QUEUE_TWIN_ENTRIES = {
    "direct": "  def pull(q, src, n, w) {{\n" + PD_QUEUE_TWIN_LANDING + "\n  }}",
    "nested": ("  def land(q, src, n, w) {{\n" + PD_QUEUE_TWIN_LANDING + "\n  }}\n"
               "  def pull(q, src, n, w) {{ observe asked = n; land(q, src, n, w); }}"),
}


@st.composite
def pd_queue_pairs(draw) -> tuple[Case, str]:
    """A program of pd_queue_programs and its twin spelled out without queues (PD_QUEUES_TWIN)."""
    sessions = draw(st.integers(1, 4))
    P, D = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    single = P == 1 and draw(st.booleans())
    pb, db = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 4, 2]))
    maxp, maxo = draw(st.integers(1, 24)), draw(st.integers(1, 12))
    pi = "" if single else "[i]"
    form = draw(st.sampled_from(sorted(PD_QUEUE_ENTRIES)))
    landing = dict(extra=draw(st.sampled_from(["", " + 1", " + 3"])),
                   work=draw(st.sampled_from(["0", "1/2", "~exp(1)", "n / 4", "~uniform(0, 2)"])),
                   amount=draw(st.sampled_from(["n", "n", "n - 1", "floor(n / 2)"])),
                   cache=draw(st.sampled_from(["inf", "n", "0"])))
    common = dict(
        pdim="" if single else f"[{P}]", pi=pi, pj="" if single else "[j]", P=P, D=D, pb=pb, db=db,
        **pd_engines(draw, maxp, maxo, pb, db),
        drole=draw(st.sampled_from(["decode", "agg"])),
        link=draw(st.sampled_from(["fifo", "fifo(2)", "ps(1)", "delay"])),
        arrival=draw(st.one_of(st.just(f"batch({sessions})"), st.just("poisson(1)"))),
        maxp=maxp, maxo=maxo, more=draw(st.sampled_from(["", " tool (~exp(1)); turn;"])))
    pkey = draw(st.sampled_from([("holders(P{pi}.reqs) + queued(P{pi}.reqs)", "holders(P_reqs{pi}) + queued(P_reqs{pi})"),
                                 ("P{pi}.demand(), -i", "P_demand({i}), -i"), ("-i", "-i"), ("0", "0")]))
    dkey = draw(st.sampled_from([("holders(D[k].reqs) + queued(D[k].reqs)", "holders(D_reqs[k]) + queued(D_reqs[k])"),
                                 ("D[k].demand()", "D_demand(k)"), ("cachedin(D[k].kv), k", "cachedin(D_kv[k]), k"),
                                 ("0", "0")]))
    # a decode queue's cost grows with its index: the engine's copy for member j reads j
    dshift = draw(st.sampled_from([("", ""), (" + self.index / 100", " + j / 100")]))
    text = PD_QUEUES.format(**common, entries=PD_QUEUE_ENTRIES[form].format(**landing),
                            pkey=pkey[0].format(pi=pi), dkey=dkey[0], dshift=dshift[0])
    twin = PD_QUEUES_TWIN.format(**common, entries=PD_QUEUE_TWIN_ENTRIES[form].format(**landing),
                                 pkey=pkey[1].format(pi=pi, i="" if single else "i"), dkey=dkey[1], dshift=dshift[1],
                                 pq="" if single else "q", pqi="" if single else "[q]")
    return Case(text=text, sessions=sessions, seed=draw(st.integers(0, 2 ** 16))), twin


def pd_queue_programs() -> st.SearchStrategy:
    """transfer_programs' deployments written with queues (docs/language.md §11.16): a prefill queue
    array (a single queue when there is one) whose engine leases its KV, a decode or agg queue array
    whose entry `pull` holds its KV pool and copies `source.kv` into it over the link queue's wire
    (a fifo, ps or delay stage), directly or through a second entry; routing keys that call a
    queue's definition from outside, decode costs that read `self.index`; every request fits its
    pools alone, as in transfer_programs."""
    return pd_queue_pairs().map(lambda pair: pair[0])


K_STEP = """\
fn main() {{
  pool kv{dim} {{ cap {kvcap}; block {bs}; preempt {preempt}; }}
  stage eng{dim} : step {{
    budget {budget};{chunk}
    state n = 0;
    state hot = 0;
    iteration {{ {iteration} }}
    cost {cost};
    memory kv{j};{serve}
  }}
  pool slots{dim} {{ cap {slots}; admit via eng{j}; }}
  def serve_on(k) {{
    hold slots{k} (1), kv{k} ({units}) {{
      run eng{k} prefill (prompt) growing kv{k};
      run eng{k} decode (out) growing kv{k};
    }}
  }}
  workload {{
    arrive {arrival};
    session {{ turn; tool (~exp(1)); turn; }}
  }}
  server {{
    set prompt = 1 + floor(~uniform(0, {maxp}));
    set out = 1 + floor(~uniform(0, {maxo}));
    {dispatch}
    observe done = now;
  }}
}}
"""

# the statements of K's `iteration { … }` block (docs/language.md §16): register updates on what
# is known as the iteration starts, some under a branch
K_ITERATION_STMTS = ["set n = n + 1;", "if (residents > 1) {{ set hot = hot + 1; }} else {{ set hot = 0; }}",
                     "set hot = min(hot + decoders, 5);", "branch (waiting.count > {c}) {{ set n = n + 2; }}",
                     "set hot = running.kv_decode > {c} ? hot + 1 : max(hot - 1, 0);", "set n = now > {c} ? 0 : n;",
                     "if (hot > {c}) {{ set n = n + 1; set hot = 0; }} else if (running.kv_prefill > 0) "
                     "{{ set hot = hot + 1; }}"]
K_COSTS = ["1/100 + tokens / 1000", "1/100 * (1 + min(hot, 4)) + tokens / 1000",
           "(1 + min(n, 10)) / 100 + tokens / 500", "1/50 + (hot > 2 ? tokens / 500 : tokens / 1000){jcost}",
           "1/100 + decoders / 200 + prefilled / 1000 + min(n, 3) / 50{jcost}"]
K_SERVES = ["", "\n    serve decode first;", "\n    serve by (hot > 1 ? -admission : admission);",
            "\n    serve by (remaining - min(n, 8), admission);", "\n    serve admission;",
            # prefills wait while hot: an attempt may form no iteration, and its updates are undone
            "\n    serve only (decoding == 1 || hot < 2) decode first;"]


@st.composite
def k_step_programs(draw) -> Case:
    """K's step stage (docs/language.md §16) with an `iteration { … }` block keeping two registers
    that the cost, the serve keys and the budget read; one stage, or an array of 1-3 (`stage
    eng[N] : step`, member index bound by `memory kv[j]`, slots `admit via eng[j]`) behind a
    `choose` and a branch over the members. Each member's pool fits one request's longest
    sequence, so no request preempts itself forever. A separate strategy, so the draws of the
    others stay as they were."""
    sessions = draw(st.sampled_from([3, 4, 2, 5]))
    n = draw(st.sampled_from([None, 2, 1, 3]))
    bs = draw(st.sampled_from([4, 1, 16]))
    maxp, maxo = draw(st.integers(1, 24)), draw(st.integers(1, 8))
    kvcap = (ceil((maxp + maxo) / bs) + draw(st.sampled_from([0, 1, 4]))) * bs
    stmts = draw(st.lists(st.sampled_from(K_ITERATION_STMTS), min_size=0, max_size=3))
    iteration = " ".join(s.format(c=draw(st.sampled_from([0, 1, 3]))) for s in stmts)
    if n is None:
        dim = j = k = ""
        dispatch = "serve_on(0);"
    else:
        dim, j, k = f"[{n}]", "[j]", "[k]"
        route = draw(st.sampled_from(["holders(slots[x]) + queued(slots[x])", "x", "queued(slots[x]), -x",
                                      "used(kv[x]), serial"]))
        dispatch = f"choose x in {n} by ({route});\n    " + "".join(
            f"branch (x == {m}) {{ serve_on({m}); }} else " for m in range(n - 1)) + f"{{ serve_on({n - 1}); }}"
        if n == 1:
            dispatch = f"choose x in 1 by ({route});\n    serve_on(0);"
    text = K_STEP.format(
        dim=dim, j=j, k=k, kvcap=kvcap, bs=bs, preempt=draw(st.sampled_from(["lifo", "none", "by (-admission)"])),
        budget=draw(st.sampled_from(["8 + 8 * min(hot, 2)", "16", "4 + 4 * min(n, 3)", "32"])),
        chunk=draw(st.sampled_from(["", "\n    chunk 4;", "\n    chunk 8;"])), iteration=iteration,
        cost=draw(st.sampled_from(K_COSTS)).format(jcost=" + j / 100" if n is not None else ""),
        serve=draw(st.sampled_from(K_SERVES)), slots=draw(st.sampled_from([1, 2, 4])),
        units=draw(st.sampled_from(["1", "prompt", f"min(prompt, {bs})"])),
        arrival="{arrival}", maxp=maxp, maxo=maxo, dispatch=dispatch)
    arrival = draw(st.one_of(st.just(f"batch({sessions})"), arrival_processes(sessions)))
    return Case(text=text.replace("{arrival}", arrival), sessions=sessions, seed=draw(st.integers(0, 2 ** 16)))

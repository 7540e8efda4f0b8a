"""Programs for the `constructs` fuzz target (tests/test_input_fuzz.py): whole programs drawn
from the constructs of issue 18 and the ones around them, right and wrong.

A program is assembled from parts, each drawn well-formed most of the time and malformed the rest:

- stages: ps stages with ordinary, zero, negative, huge or `present`-reading capacities, a fifo
  and a delay stage, a ps array `link[2]`;
- `share maxmin;` / `share bottleneck;` — none, one, two, or a wrong kind (`share fifo;`);
- flows `run S1, S2, … (w);` over those stages: distinct ps stages, a fifo or delay stage, the same
  stage twice, array members chosen at run time (`link[serial == 0 ? 0 : 1]`), an engine, a pool, an
  unknown name, `prefill`/`decode`/`growing` on a flow, work 0, negative, huge, `inf`, a draw;
- K's `stage eng : step { … }` with any subset of its items (budget, chunk, granule, cost with the
  bare engine values, memory, state, serve in its forms, an `iteration { … }` block of register
  updates or of statements it refuses), each possibly twice or with a wrong value, plus its pools
  (`pool slots { cap 2; admit via eng; }`) and a hold that runs on it; a step stage array
  `stage eng[2] : step { … memory kv[j]; … }` with `pool slots[2] { …; admit via eng[j]; }` behind
  a `choose`, with wrong sizes, member indexes and runs;
  K's item words and the bare engine values written outside the block, as statements or names;
- an engine's and a stage's estimates `est_lambda/est_rho/est_wait(X)` and `price(X, a, b)` in
  gauges and observations, X a ps/fifo stage, the step engine, an array member, a pool, a number,
  an unknown name, with the wrong number of arguments;
- a request block with 0, 1 or 2 parameters on an S engine (the defect of issue 18's brief);
- `transfer S (w) from P to Q (n);` (§11.15) over one link or several, leased or held, with the
  wrong links, pools, amounts and places of §11.15's errors;
- an offload tier `spill Q via S (w) when (c);` (§11.8.1) with holds in `fork` branches (§11.13),
  half of the time between two `share content` pools (a content tier, docs/content.md §6), its
  holds with `content (p, n, h)` over declared prefixes;
- speculative decoding on the S engine: `speculate (s, look, limit);` and `decode … speculate (k)`,
  and the acceptance counts a `turn` block draws, `accept (n, alpha);`, right and wrong (alpha out
  of [0, 1], n not whole, not the block's last statement, in `init`, a missing argument);
- the S engine under async scheduling (`lag 1;`, docs/async.md) and as an engine array
  `engine eng[2] on acc[j]` (§6.1) with its pools `kv[2]`, `reqs[2]` and calls `eng[x] (…)` whose
  index is a constant, a computed member, or (wrong) no whole member or a draw;
- `fork { run a, b (w); } … join;`: flows (and one-stage runs) inside branches (§11.13, §11.14);
- inputs: `let kN = args.number("kN", …);` in place of a flow's or transfer's work, a transfer's
  amount, a spill's copy time, `speculate`'s numbers, `price`'s arguments, `lag`, `accept`'s n and
  alpha and a poisson arrival rate (the last two read by the sampled workload), so that the
  `construct_settings` target can give them hostile `--set` values (`knobs` lists them); every
  other one with limits (`in 0 to inf`, `whole`), which such values break, the rest with none,
  limits that hold only the default or one side of it, or wrong ones (`_limits`).
- queues (§11.16): a prefill queue array leasing its KV, a decode queue whose entry `pull` lands
  it `from` a prefill queue over a link queue's wire, members `P[i].kv` and the definition
  `P[i].fill (x)` (which reads `self.index`) and the single queue's `D.level (x)` read in
  observations, with the wrong roles, members,
  entries, definitions, arities, indices and `from`s of §11.16's errors.

Then up to two byte edits that insert construct words (`,`, `share maxmin;`, `step`, `budget`…)
anywhere, as the `programs` target does for mm1.sq.
"""

from __future__ import annotations

import re

from hypothesis import strategies as st

class _Draw:
    """hypothesis's `draw`, and whether this program may have malformed parts: half of the
    programs have none, so that they are accepted and go on to run on both engines."""

    def __init__(self, draw, faulty: bool):
        self.draw, self.faulty = draw, faulty
        self.names: list[str] = []   # the stages and engine declared: what a right estimate reads
        self.knobs: dict[str, str] = {}   # input name -> its default (`let NAME = args.number(…)`)
        self.limited: dict[str, str] = {}   # input name -> the limits it must have (not drawn)

    def __call__(self, strategy):
        return self.draw(strategy)


def _one(draw: _Draw, good: list, bad: list = ()) -> str:
    """One of `good`, or, in a faulty program, one of `bad` a sixth of the time."""
    return draw(st.sampled_from(list(bad) if bad and draw.faulty and not draw(st.integers(0, 5)) else good))


def _knob(draw: _Draw, value: str) -> str:
    """VALUE, or a third of the time an input `kN` declared `let kN = args.number("kN", VALUE);`
    when VALUE is a plain number (`--set kN=…` changes it; the default keeps the program's meaning)."""
    try:
        float(value)
    except ValueError:
        return value
    if draw(st.integers(0, 2)):
        return value
    name = f"k{len(draw.knobs)}"
    draw.knobs[name] = value
    return name


def _limits(draw: _Draw, name: str, value: str) -> str:
    """The limits (docs/language.md §2) of an input with default VALUE: `in 0 to inf` (and `whole`
    for a whole default) for every other input with a default >= 0; the others none, or limits
    that hold only the default or one side of it (which a hostile `--set` breaks at once), or, in
    a faulty program, wrong ones (a range upside down or not of constants, a default outside it,
    `whole` of a fraction, a limit written twice or half)."""
    if not int(name[1:]) % 2 and float(value) >= 0:
        return ", in 0 to inf" + (", whole" if float(value).is_integer() else "")
    whole = ", whole" if float(value).is_integer() else ""
    return _one(draw, ["", "", f", in {value} to {value}{whole}", f", in -inf to {value}", f", in {value} to inf",
                       f", in -1e300 to 1e300{whole}"],
                [", in 1 to 0", f", in {value} to -inf", f", in 0 to 1{whole}{whole or ', whole'}", ", in serial to 1",
                 ", whole" if not whole else ", in 0.5 to 1, whole", f", in {value}", f", to {value}",
                 f", in {value} + 1 to inf", ", in 0 to 1e400", ", in -inf to -inf", f", in {value} to {value},"])


def knobs(text: str) -> list[str]:
    """The inputs a drawn program declares (`args.number("kN", …)`), in order."""
    return re.findall(r'args\.number\("(k\d+)"', text)


PS_CAPS = (["1", "2", "0.5", "1 + present", "min(present, 2)", "~exp(1)"], ["0", "-1", "1e400", "inf", "1e-300"])
WORKS = (["~exp(1)", "1", "0.5", "0", "~uniform(0, 2)", "(serial == 0 ? 0 : 1)", "1 + est_rho(f)"],
         ["-1", "1e300", "1e400", "inf", "-inf", "serial - 1"])
EST = ["est_lambda", "est_rho", "est_wait"]
EST_TARGETS = (["a", "b", "c", "eng", "eng[0]", "eng[1]", "f", "link[0]", "link[1]"],
               ["link[serial == 0 ? 0 : 1]", "d", "link", "kv", "slots", "nobody", "3", "a, b", "eng[2]"])
PRICE_ARGS = (["1, 2", "0, 0", "0.5, 3"], ["-1, 1e400", "1", "1, 2, 3", "inf, 1", "1, -2"])
K_ITEMS = {   # word: (right values, wrong values)
    "budget": (["budget 32;", "budget budget;", "budget 8 * 2;"],
               ["budget 0;", "budget -1;", "budget 1e400;", "budget inf;", "budget residents;"]),
    "chunk": (["chunk 8;", "chunk 1;"], ["chunk 0;", "chunk -2;", "chunk inf;", "chunk tokens;"]),
    "granule": (["granule 2;", "granule 1;"], ["granule 0;", "granule 1e400;"]),
    "cost": (["cost 1;", "cost 0.001 + 0.0001 * tokens;", "cost 1 + residents / 4 + decoders / 8;",
              "cost 0.01 + prefilled / 16 + kv_decode / 32 + kv_prefill / 64 + attention / 1000;",
              "cost 0.01 + est_rho(eng);", "cost 0.01 * (1 + price(eng, 1, 2));"],
             ["cost 0;", "cost -1;", "cost 1e400;", "cost kv;", "cost tokens / 0;", "cost present;"]),
    "memory": (["memory kv;"], ["memory slots;", "memory eng;", "memory nowhere;", "memory a;"]),
    "state": (["state turns = 0;"], ["state decoders = 0;", "state tokens = 1;"]),
    "serve": (["serve;", "serve decode first;", "serve admission;", "serve by (remaining, -admission);",
               "serve only (decoding == 1) decode first;", "serve exclusive prefill;"],
              ["serve by ();", "serve fifo;", "serve only ();"]),
    # docs/language.md §16: register updates as each iteration starts (a `state turns` is added)
    "iteration": (["iteration { set turns = turns + 1; }", "iteration { }",
                   "iteration { if (running.count > 1) { set turns = turns + 1; } else { set turns = 0; } }",
                   "iteration { branch (waiting.count > turns) { set turns = min(turns + running.decoding, 4); } }"],
                  ["iteration { run a (1); }", "iteration { turn; }", "iteration { set turns = batch.tokens; }",
                   "iteration { set nobody = 1; }", "iteration { branch with (0.5) { set turns = 1; } }",
                   "iteration { set turns = ~exp(1); }", "iteration { hold kv (1) { } }",
                   "iteration { set turns = serial; }", "iteration { observe x = 1; }", "iteration { set turns = 1 }",
                   "iteration set turns = 1;", "iteration { while (turns < 3) { set turns = turns + 1; } }"]),
}
K_WRONG_ITEMS = ["spend 3;", "run a (1);", "budget;", "tokens cap 8;", "cost;"]
K_WORDS_OUTSIDE = ["budget 3;", "chunk 2;", "cost 1;", "memory kv;", "serve decode first;",
                   "set budget = 1;", "set residents = 2;", "observe tokens_seen = residents + decoders;",
                   "observe k = attention;", "set cost = 1; observe c = cost;"]
EDITS = [",", ", a", ", a, a", "share maxmin;", "share bottleneck;", "share;", "step", "budget 1;",
         "est_rho(eng)", "price(a, 1, 2)", "-1", "1e400", "0", ";", "{", "}", "(", ")", "link[", "run a, b (1);",
         "stage z : step { }", "\n", ""]


def _estimate(draw) -> str:
    good = [t for t in EST_TARGETS[0] if t in draw.names or t in ("f", "link[0]", "link[1]")]
    target = _one(draw, good, EST_TARGETS[1])
    if draw(st.booleans()):
        return f"{draw(st.sampled_from(EST))}({target})"
    args = ", ".join(_knob(draw, a) for a in _one(draw, *PRICE_ARGS).split(", "))
    return f"price({target}, {args})"


def _stage_list(draw, ps_names) -> str:
    if not draw.faulty or draw(st.integers(0, 5)):   # a flow over distinct ps stages, or a one-stage run
        good = ps_names + ["link[0]", "link[1]", "link[serial == 0 ? 0 : 1]"]
        k = draw(st.integers(1, min(3, len(good))))
        chosen = draw(st.lists(st.sampled_from(good), min_size=k, max_size=k, unique=True))
        if "link[serial == 0 ? 0 : 1]" in chosen and any(c.startswith("link[") and c[5] != "s" for c in chosen):
            chosen.remove("link[serial == 0 ? 0 : 1]")   # a member that may repeat the other: not a right one
        return ", ".join(chosen or ["a"])
    pool = ps_names + ["link[0]", "link[serial == 0 ? 0 : 1]", "f", "d", "eng", "kv", "nobody", "tool", "link"]
    k = draw(st.integers(2, 4))
    return ", ".join(draw(st.lists(st.sampled_from(pool), min_size=k, max_size=k)))


def _run(draw, ps_names) -> str:
    mode = _one(draw, [""], [" prefill", " decode"])
    growing = _one(draw, [""], [" growing kv"])
    return f"run {_stage_list(draw, ps_names)}{mode} ({_knob(draw, _one(draw, *WORKS))}){growing};"


def _fork(draw, ps_names) -> str:
    """Branches that run flows (§11.13 with §11.14): `fork { run a, b (w); } … join;`; wrong: a
    fork without its `join;`, a `join;` alone, an engine run in a branch or between fork and join."""
    branches = [f"fork {{ {' '.join(_run(draw, ps_names) for _ in range(draw(st.integers(1, 2))))} }}"
                for _ in range(draw(st.integers(1, 3)))]
    between = _one(draw, ["", "run f (0.5); ", "set z = 1; "], ["run eng prefill (4); ", "end; ", "turn; "])
    tail = _one(draw, ["join;"], ["", "join; join;"])
    return " ".join(branches) + f" {between}{tail}"


def _iteration(draw) -> str:
    """K's `iteration { … }` item: in a faulty program a refused one half the time (its many
    wrong forms would be rare at the sixth of `_one`)."""
    good, bad = K_ITEMS["iteration"]
    return draw(st.sampled_from(bad if draw.faulty and draw(st.booleans()) else good))


def _k_step(draw) -> list[str]:
    items = []
    for word, (good, bad) in K_ITEMS.items():
        wanted = 1 if word in ("budget", "cost") else draw(st.integers(0, 1))
        n = _one(draw, [wanted], [0, 2])   # a required item missing, any item twice
        items += [_iteration(draw) if word == "iteration" else _one(draw, good, bad) for _ in range(n)]
    if draw.faulty and not draw(st.integers(0, 5)):
        items.append(draw(st.sampled_from(K_WRONG_ITEMS)))
    if any("turns" in i for i in items if i.startswith("iteration")) and "state turns = 0;" not in items:
        items.append(_one(draw, ["state turns = 0;"], ["state turn = 0;"]))
    items = draw(st.permutations(items))
    head = _one(draw, ["stage eng : step {"], ["stage eng[2] : step {", "stage eng : step"])
    block = "\n".join([head, *("    " + i for i in items), "  }"])   # one declaration, kept whole
    return [block, "pool kv { cap 64 * 16; block 16; preempt lifo; }",
            _one(draw, ["pool slots { cap 2; admit via eng; }"], [
                "pool slots { cap 2; admit via a; }", "pool slots { cap 2; }",
                "pool slots { cap 2; admit via eng; admit via eng; }"])]


def _k_step_array(draw) -> tuple[list[str], str]:
    """K's step stage array (docs/language.md §16): `stage eng[2] : step { … memory kv[j]; … }`,
    its pools `kv[2]` and `slots[2] { admit via eng[j]; }`, the member index in the cost and the
    serve keys, an iteration block, and a server that chooses a member; wrong: a size of 0 or one
    that differs from the pools', `memory` without the member index, `admit via` a single engine
    or a constant's name, a run on a member chosen at run time growing a pool that is not fixed."""
    items = ["budget 32;", _one(draw, ["cost 0.01 + j / 100 + tokens / 1000;", "cost 1;"], ["cost j;", "cost k;"]),
             _one(draw, ["memory kv[j];", "memory kv[j];"], ["memory kv;", "memory kv[2];", "memory kv[budget];"]),
             "state turns = 0;", _iteration(draw),
             _one(draw, ["", "serve by (admission, j);", "serve decode first;"], ["serve by (x);"])]
    head = _one(draw, ["stage eng[2] : step {"], ["stage eng[0] : step {", "stage eng[3] : step {",
                                                  "stage eng[j] : step {"])
    block = "\n".join([head, *("    " + i for i in draw(st.permutations(items)) if i), "  }"])
    slots = _one(draw, ["pool slots[2] { cap 2; admit via eng[j]; }"], [
        "pool slots[2] { cap 2; admit via eng; }", "pool slots[3] { cap 2; admit via eng[j]; }",
        "pool slots[2] { cap 2; admit via eng[budget]; }", "pool slots[2] { cap 2; admit via f[j]; }"])
    decls = ["pool kv[2] { cap 64 * 16; block 16; preempt lifo; }", block, slots]

    def on(k):
        return (f"hold slots[{k}] (1), kv[{k}] (20) {{ run eng[{k}] prefill (20) growing kv[{k}]; "
                f"run eng[{k}] decode (4) growing kv[{k}]; }}")
    route = _one(draw, ["queued(slots[x]) + holders(slots[x])", "x", "used(kv[x]), serial"], ["eng[x]", "kv"])
    server = _one(draw, [f"choose x in 2 by ({route}); branch (x == 0) {{ {on(0)} }} else {{ {on(1)} }}", on(1)],
                  [on("x"), "run eng prefill (4);", on(2), f"choose x in 3 by ({route}); {on(0)}"])
    return decls, server


def _transfer(draw, ps_names) -> tuple[list[str], str]:
    """`transfer S (w) from P to Q (n);` (§11.15): P's KV leased past its hold (or a hold of both
    around the copy), copied over a link — a fifo, delay or ps stage, an array member, several ps
    stages at once — and landed in Q; wrong: an engine or unknown link, one pool twice, a P no hold
    takes or a lease that runs out, n negative, infinite or beyond Q's allocation, a fork around it."""
    links = _one(draw, ["f", "link[0]", "link[1]", "d", ", ".join(ps_names[:2]) or "link[0], link[1]",
                        "link[0], link[1]"], ["eng", "nobody", "link", "f, d", "a, a", "kv"])
    work = _knob(draw, _one(draw, ["16 * 1e-3", "1", "0", "~exp(1)"], ["-1", "inf", "1e300"]))
    n = _knob(draw, _one(draw, ["16", "8", "0"], ["-1", "inf", "100", "16 + serial"]))
    lease = _one(draw, [" lease pk (inf)", " lease pk (5)"], ["", " lease pk (0.001)", " lease dk (inf)"])
    dest = _one(draw, ["dk"], ["pk", "nowhere", "a"])
    copy = f"transfer {links} ({work}) from pk to {dest} ({n});"
    body = _one(draw, [f"{copy} run f (1);"], [f"fork {{ {copy} }} join;", "run f (1);"])
    pools = ["pool pk { cap 64; }", _one(draw, ["pool dk { cap 64; evict lru; }"],
                                          ["pool dk { cap 64; share content; }", "pool dk[2] { cap 64; }"])]
    first = _one(draw, ["hold pk (16) { run f (0.5); }"], ["run f (0.5);", "hold pk (16) { run f (0.5); }"])
    return pools, f"{first}{lease} hold dk (16) {{ {body} }} cache (16);"


def _spill(draw) -> tuple[list[str], str]:
    """An offload tier (§11.8.1): `pool kv { …; spill host via S (w) when (c); }`, evictions that
    move to `host` and hits read back over S, and holds in `fork` branches (§11.13) beside them;
    wrong: an engine, array or unknown link, a different block, the tier held by a statement or
    spilling back (a cycle), a negative or infinite copy time, a condition that is NaN, beyond
    the doubles or a draw (any other value is one: c ≠ 0 keeps the chunk, §11.8.1).
    Half of the time a content tier over declared prefixes (`_content_tier`); otherwise, drawn
    last: both pools `share content` with the holds' `content (0, 0, serial)` (a content tier,
    docs/content.md §6), or, wrong, only one of them."""
    link = _one(draw, ["f", "d", "a" if "a" in draw.names else "f"], ["link", "eng", "nobody", "kv", "link[0], link[1]"])
    w = _knob(draw, _one(draw, ["0.01 + 1e-4 * size", "0", "age", "0.5"], ["-1", "inf", "1e300", "0 / 0"]))
    c = _one(draw, ["1", "waiting == 0", "size > 16", "2", "-1", "now"], ["0 / 0", "1e400", "~uniform(0, 1)"])   # c ≠ 0: kept
    host = _one(draw, ["pool host { cap 256; block 16; }"],
                ["pool host { cap 256; block 8; }", "pool host { cap 256; block 16; spill kv via f (1) when (1); }",
                 "pool host[2] { cap 256; block 16; }"])
    pools = [host, f"pool kv {{ cap 64; block 16; evict lru; spill host via {link} ({w}) when ({c}); }}"]
    n = _one(draw, ["16", "32", "48"], ["-1", "100", "inf"])
    hold = f"hold kv ({n}) {{ run f (0.5); }} cache ({n});"
    prefixed = draw(st.booleans())   # a content tier over declared prefixes (docs/content.md §6)
    if prefixed:
        pools, hold = _content_tier(draw, link, w, c, n)
    body = _one(draw, [hold, f"fork {{ {hold} }} join;", f"fork {{ {hold} }} run f (1); join; {hold}"],
                ["hold host (16) { run f (1); }", f"fork {{ {hold} }}", "join;", f"fork {{ {hold} }} {hold} join;"])
    content = "" if prefixed else _one(draw, ["", "both"], ["kv", "host"])
    if content in ("both", "kv"):
        pools[1] = pools[1].replace("evict lru;", "evict lru; share content;")
        body = body.replace(f"hold kv ({n}) {{", f"hold kv ({n}) content (0, 0, serial) {{")
    if content in ("both", "host"):
        pools[0] = pools[0].replace("block 16;", "block 16; share content;").replace("block 8;", "block 8; share content;")
    return pools, body


def _content_tier(draw, link: str, w: str, c: str, n: str) -> tuple[list[str], str]:
    """`spill` between two `share content` pools (docs/content.md §6): blocks known by their
    prefix and history on both tiers, a lookup that goes on into the tier; wrong: one pool content
    and the other plain, a tier that spills, a `content` clause on a plain pool, a prefix key not
    declared or more of its tokens than it has, a `drop` of a content pool."""
    prefixes = _one(draw, ["prefix 1 (20); prefix 2 (8) after 1;"],
                    ["prefix 1 (20); prefix 2 (8) after 3;", "prefix 1 (-4);", "prefix 1 (20); prefix 1 (8);"])
    host = _one(draw, ["pool host { cap 256; block 16; share content; }"],
                ["pool host { cap 256; block 16; }", "pool host { cap 256; block 16; share content; "
                 "spill kv via f (1) when (1); }", "pool host { cap 250; block 16; share content; }"])
    kv = _one(draw, [f"pool kv {{ cap 64; block 16; share content; spill host via {link} ({w}) when ({c}); }}"],
              [f"pool kv {{ cap 64; block 16; spill host via {link} ({w}) when ({c}); }}",
               f"pool kv {{ cap 64; block 16; share content; evict fifo; spill host via {link} ({w}) when ({c}); }}"])
    # (the last right one is accepted but stops at run time: session 2's key is not declared; so
    # that both engines' run-time checks are reached by programs with no other fault)
    key, length = _one(draw, [("serial < 2 ? 1 : 2", "serial < 2 ? 20 : 28"), ("1", "20"), ("0", "0"), ("2", "16"),
                              ("serial == 2 ? 3 : 1", "20")],
                       [("3", "4"), ("1", "21"), ("0", "4"), ("1", "-1"), ("1", "~uniform(0, 20)"),
                        ("serial", "20"), ("1", "20 + serial"), ("serial == 1 ? 0 : 1", "20")])   # (at run time)
    content = f" content ({key}, {length}, {_one(draw, ['serial', '0'], ['now'])})"
    hold = _one(draw, [f"hold kv ({n}){content} {{ run f (0.5); }} cache ({n});"],
                [f"hold kv ({n}) {{ run f (0.5); }} drop kv;", f"hold host (16){content} {{ run f (0.5); }}",
                 f"hold kv ({n}){content}{content} {{ run f (0.5); }}"])
    return [prefixes, host, kv], hold


def _queues(draw) -> tuple[list[str], str]:
    """Queues (§11.16): `P[2] : prefill` whose KV is leased past its hold, `D : decode` whose entry
    `pull` lands it `from P[i]` over `L[i].wire`, P's definition `fill` called from outside; wrong:
    a role that may not hold what it holds or take `from`, a member declared twice or as an array,
    an unknown member or entry, a wrong arity, an index out of range or drawn, a missing or
    needless `from`, a queue used as a pool, a definition called as a statement or an entry as a
    value, `self.index` in the single queue D."""
    prole = _one(draw, ["prefill", "agg", "l2"], ["decode", "gateway", "link", "prefil"])
    drole = _one(draw, ["decode", "agg"], ["prefill", "link", "l2"])
    extra = _one(draw, ["", " let hop = 1;", " def twice(x) = 2 * x;"],
                 [" pool kv { cap 1; }", " stage pre[2] : fifo;", " stage self : fifo;", " def twice(self) = 2 * self;",
                  " def twice(index) = index;"])
    work = _one(draw, ["n * 1e-3", "0", "~exp(1)"], ["-1", "inf"])
    link = _one(draw, ["stage wire : fifo;", "stage wire : ps(1);", "stage wire : delay;"],
                ["stage wire : fifo; pool x { cap 1; }", "let w = 1;"])
    queues = [f"queue P[2] : {prole} {{ pool kv {{ cap 64; }} stage pre : fifo; def fill(x) = used(kv) * x + "
              f"self.index;{extra} }}",
              f"queue D : {drole} {{ pool kv {{ cap 64; evict lru; }} def pull(n, w) {{ hold kv (n) "
              f"{{ transfer w ({work}) from source.kv to kv (n); }} cache (n); }} def note(n) {{ observe noted = n; }} "
              f"def level(x) = {_one(draw, ['used(kv) + x', 'x * 2'], ['self.index + x', 'level(x)', 'y'])}; }}",
              f"queue L[2] : link {{ {link} }}"]
    i = _one(draw, ["0", "1", "(serial == 0 ? 0 : 1)"], ["2", "-1", "floor(~uniform(0, 2))", "nobody", "inf", "1 / 0",
                                                         "1e400", "0.5", "-inf"])
    first = f"hold P[{i}].kv (16) {{ run P[{i}].pre (0.5); }} lease P[{i}].kv (inf);"
    good = [f"D.pull (16, L[{i}].wire) from P[{i}];",
            f"D.note (used(P[{i}].kv)); D.pull (8, L[0].wire) from P[{i}];",
            f"D.note (P[{i}].fill(2)); D.pull (16, L[{i}].wire) from P[{i}];",
            f"D.note (D.level (P[{i}].fill (1))); D.pull (16, L[{i}].wire) from P[{i}];",
            f"observe lv = D.level (3) + P[{i}].fill (0); D.pull (8, L[{i}].wire) from P[{i}];"]
    bad = [f"D.pull (16, L[{i}].wire);", f"D.pull (16) from P[{i}];", "D.push (16, L[0].wire) from P[0];",
           f"D.pull (16, L[{i}].wire) from D;", f"D.note (1) from P[{i}];", "D[0].note (1);",
           f"D.pull (16, L.wire) from P[{i}];", f"observe u = used(P[{i}].kvv);", "hold P (1) { }",
           f"D.note (P[{i}].fill(1, 2));", f"P[{i}].fill (1);", "D.note (D.note (1));", "D.note (P.fill (1));",
           "D.note (D.self.index);", "D.note (D.index);", "D.note (D.level ());", "D.level (1);",
           "D.note (D[0].level (1));", "D.note (D.level (1, 2));", "D.note (D.levels (1));", "observe q = D.level;",
           f"D.note (P[{i}].level (1));", "D.note (self.index);"]
    # wrong in half of the faulty programs, not a sixth: there are many ways to get the call wrong
    call = draw(st.sampled_from(bad if draw.faulty and draw(st.booleans()) else good))
    return queues, f"{first} {call}"


def _s_engine(draw, array: bool = False) -> tuple[list[str], str]:
    """An S engine with a request block of 0, 1 or 2 parameters, and its call; under `lag 0` or
    `lag 1`; or an array of two (§6.1) on `acc[j]`, its pools `kv[j]` and `reqs[j]`, the call's
    member a constant, a computed one, or (wrong) no whole member, one out of range or a draw."""
    n = draw(st.integers(0, 2))
    params = ["", "p", "p, o"][n]
    args = _one(draw, [["", "8", "8, 3"][n]], ["8, 3, 1", "inf, 2", "8, -1", "1e400"])
    # speculative decoding (§7.3): drafting slots and lookahead on the engine, drafts on a decode
    spec = _one(draw, ["", "", "speculate (1, 2, inf);", "speculate (0, 0, 64);"],
                ["speculate (-1, 0, inf);", "speculate (1.5, 0, inf);", "speculate (64, 0, inf);",
                 "speculate (1, 2);"])
    if spec.count(",") == 2:
        spec = "speculate (" + ", ".join(_knob(draw, a) for a in spec[11:-2].split(", ")) + ");"
    drafts = _one(draw, ["", "", " speculate (2)", " speculate (0)"], [" speculate (-1)", " speculate (inf)"])
    if drafts:
        drafts = f" speculate ({_knob(draw, drafts[12:-1])})"
    # async scheduling (docs/async.md): the engine's output processed after the next schedule
    lag = _one(draw, ["", "", "lag 0;", "lag 1;", "lag 1; "], ["lag 2;", "lag -1;", "lag 0.5;", "lag;"])
    if lag == "lag 1; ":   # an input: `--set kN=2` is refused where the engine is declared
        lag = f"lag {_knob(draw, '1')};"
    j = "[j]" if array else ""
    kv, reqs, eng = f"kv{j}", f"reqs{j}", f"eng{j}"
    cost = _one(draw, ["0.01", f"0.01 + est_rho({eng})", f"0.01 * price({eng}, 1, 2)"], ["0", "-1"])
    body = ("    reqs cap 4;\n    tokens cap 64;\n" + "".join(f"    {x}\n" for x in (spec, lag) if x) +
            f"    request ({params}) {{ prefill ({'p' if params else 8}) growing {kv}; "
            f"decode ({'o' if 'o' in params else 2}) growing {kv}{drafts}; }}\n"
            f"    schedule {{ advance running; admit waiting taking {reqs} (1), {kv} (16); }}\n"
            f"    execute ({cost});\n  }}")
    if not array:
        return ["device acc { kv cap 1024; }", "pool kv on acc { block 16; }", "engine eng on acc {\n" + body,
                "pool reqs on eng { queue fifo; }"], f"eng ({args});"
    head = _one(draw, ["engine eng[2] on acc[j] {"], ["engine eng[3] on acc[j] {", "engine eng[2] on acc {",
                                                      "engine eng[2] on acc[0] {"])
    pools = _one(draw, ["pool kv[2] on acc[j] { block 16; }"], ["pool kv[2] on acc { block 16; }",
                                                              "pool kv on acc[j] { block 16; }"])
    member = _one(draw, ["0", "1", "x"], ["2", "y", "serial / 2", "floor(~uniform(0, 2))", "-1", "inf"])
    chooser = _one(draw, ["set x = serial - 2 * floor(serial / 2);",
                          "choose x in 2 by (holders(reqs[x]) + queued(reqs[x]));"],
                   ["set x = serial;", "choose x in 3 by (queued(reqs[x]));"])
    return (["device acc[2] { kv cap 1024; }", pools, head + "\n" + body, "pool reqs[2] on eng[j] { queue fifo; }"],
            f"set y = serial / 3; {chooser} eng[{member}] ({args});")


@st.composite
def construct_programs(draw, faulty: bool | None = None) -> str:
    """A program; malformed parts in half of them, or as `faulty` says (False: a program meant to
    be accepted, so that what is tested is what else the command is given)."""
    draw = _Draw(draw, draw(st.booleans()) if faulty is None else faulty)
    names = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True))
    kinds = {n: _one(draw, ["ps"], ["fifo", "delay"]) for n in names}
    ps_names = [n for n in names if kinds[n] == "ps"]
    decls = [f"stage {n} : {'ps(' + _one(draw, *PS_CAPS) + ')' if kinds[n] == 'ps' else kinds[n]};" for n in names]
    decls = ["let budget = 32;", *decls, "stage f : fifo;", "stage d : delay;", f"stage link[2] : ps({_one(draw, *PS_CAPS)});"]
    decls += [_one(draw, ["share maxmin;", "share bottleneck;"], ["share fifo;", "share;"])
              for _ in range(_one(draw, [0, 1], [2]))]
    server = []
    engine = draw(st.sampled_from(["none", "k", "k", "s", "s", "array", "transfer", "transfer", "spill", "spill",
                                   "queues", "queues", "k_array"]))
    draw.names = names + {"k": ["eng"], "s": ["eng"], "array": ["eng[0]", "eng[1]"],
                          "k_array": ["eng[0]", "eng[1]"]}.get(engine, [])
    if engine == "k":
        decls += _k_step(draw)
        server.append(_one(draw, [
            "hold slots (1), kv (20) { run eng prefill (20) growing kv; run eng decode (4) growing kv; }",
            "hold slots (1), kv (20) { run eng prefill (20) growing kv; run eng decode (4) growing kv; run a (1); }"],
            ["hold slots (1), kv (20) { run eng prefill (20) growing kv; run eng, a (4); }",
             "hold slots (1) { run eng prefill (20); }", "run eng prefill (4);",
             "hold slots (1), kv (-1) { run eng prefill (1e400) growing kv; }"]))
    else:
        # each part gives its declarations and the server statement that uses them
        part = {"k_array": lambda: _k_step_array(draw), "s": lambda: _s_engine(draw),
                "array": lambda: _s_engine(draw, True), "spill": lambda: _spill(draw),
                "transfer": lambda: _transfer(draw, ps_names), "queues": lambda: _queues(draw)}.get(engine)
        if part is not None:
            lines, statement = part()
            decls += lines
            server.append(statement)
    turn = ""
    if engine in ("s", "array"):   # drawn acceptance counts of speculative decoding (§7.3)
        turn = " " + _one(draw, ["", "", f"turn {{ accept ({_knob(draw, '3')}, {_knob(draw, '0.5')}); }}",
                                 "turn { set q = 2; accept (q, serial == 0 ? 0.9 : 0.2); }"],
                          ["turn { accept (3, 2); }", "turn { accept (-1, 0.5); }", "turn { accept (1e400, 0.5); }",
                           "turn { accept (3, 0.5); set z = 1; }", "init { accept (3, 0.5); }",
                           "turn { accept (3); }", "turn { accept (2, ~exp(1)); }"])
    if draw.faulty and not draw(st.integers(0, 5)):   # a K word among main's declarations
        decls.append(draw(st.sampled_from(K_WORDS_OUTSIDE[:5])))
    for _ in range(draw(st.integers(0, 2))):
        decls.append(f"gauge g{len(decls)} = {_estimate(draw)};")
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["run"] * 6 + ["observe"] * 2 + ["branch"] * 2 + ["fork"] * 3 +
                                    ["k_word"] * draw.faulty))
        if kind == "run":
            server.append(_run(draw, ps_names))
        elif kind == "observe":
            server.append(f"observe o{len(server)} = {_estimate(draw)};")
        elif kind == "branch":
            server.append(f"branch with (0.5) {{ {_run(draw, ps_names)} }} else {{ {_run(draw, ps_names)} }}")
        elif kind == "fork":
            server.append(_fork(draw, ps_names))
        else:
            server.append(draw(st.sampled_from(K_WORDS_OUTSIDE)))
    server = draw(st.permutations(server))
    if draw.faulty and not draw(st.integers(0, 5)):   # names used above their declaration
        decls = draw(st.permutations(decls))
    arrive = draw(st.sampled_from(["poisson(1)", "poisson(3)", "batch(3)", "closed(2)"]))
    if arrive.startswith("poisson"):   # an input the sampled workload reads (docs/sessions.md "Inputs of a replay")
        arrive = f"poisson({_knob(draw, arrive[8:-1])})"
        rate = arrive[8:-1]
        if rate in draw.knobs:   # a rate of 1e300 is ~1e300 sessions a second: a run that cannot end (seed 24004)
            draw.limited[rate] = ", in 0 to 100"
    inputs = [f'let {k} = args.number("{k}", {v}{draw.limited.get(k) or _limits(draw, k, v)});' for k, v in draw.knobs.items()]
    decls = inputs + decls
    text = ('use "std/args";\n' if inputs else "") + "fn main() {\n" + "".join(f"  {d}\n" for d in decls) + \
        f"  workload {{ arrive {arrive};{turn.rstrip()} }}\n  server {{\n" + "".join(f"    {s}\n" for s in server) + "  }\n}\n"
    for _ in range(_one(draw, [0], [1, 2])):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 3))
        text = text[:at] + draw(st.sampled_from(EDITS)) + text[at + cut:]
    return text

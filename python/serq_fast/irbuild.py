"""A tiny builder of `serq-ir/1` values, for tests and benchmarks that must not depend on the
front-end (docs/ir.md). `vllm_ir` builds the lowered seed engine of docs/language.md §6–§7.2.

serq_spec counterpart: none — a test helper; both engines read the IR the front-end
writes (docs/ir.md).
"""

from __future__ import annotations

from fractions import Fraction

BUILTIN = ["serial", "turn_no", "cached", "computed", "new", "out", "think", "more", "forced"]
AT = [0, 1, 1]


def V(x) -> str:
    if x == float("inf"):
        return "inf"
    return str(Fraction(x).limit_denominator(10**15) if isinstance(x, float) else Fraction(x))


def N(x):
    return {"k": "num", "v": V(x)}


def Bin(op, a, b):
    return {"k": "bin", "op": op, "a": a, "b": b}


def Fn(f, *args):
    return {"k": "fn", "f": f, "args": list(args)}


def Ctx(name):
    return {"k": "ctx", "name": name}


def Draw(dist, *args):
    return {"k": "draw", "dist": dist, "args": list(args)}


def Eng(name):
    return {"k": "eng", "name": name}


def Obs(f, pool=None, stage=None):
    d = {"k": "obs", "f": f}
    if pool is not None:
        d["pool"] = ref(pool)
    if stage is not None:
        d["stage"] = ref(stage)
    return d


def Cond(c, a, b):
    return {"k": "cond", "c": c, "a": a, "b": b}


def ref(i):
    return {"base": i, "count": 1, "index": None}


class Program:
    def __init__(self):
        self.attrs = list(BUILTIN)
        self.observes: list = []
        self.pools: list = []
        self.stages: list = []
        self.blocks: list = []
        self.prefixes: list = []

    def A(self, name):
        if name not in self.attrs:
            self.attrs.append(name)
        return {"k": "attr", "slot": self.attrs.index(name)}

    def slot(self, name):
        self.A(name)
        return self.attrs.index(name)

    def block(self, stmts) -> int:
        self.blocks.append([dict(s, at=AT) for s in stmts])
        return len(self.blocks) - 1

    def set(self, name, e):
        return {"op": "set", "slot": self.slot(name), "expr": e}

    def observe(self, name, e):
        if name not in self.observes:
            self.observes.append(name)
        return {"op": "observe", "name": self.observes.index(name), "expr": e}

    def run(self, stage, work, mode="plain", growing=None):
        return {"op": "run", "stage": ref(stage), "mode": mode, "work": work, "growing": growing}

    def pool(self, name, cap, block=None, preempt="none", admitted_by=None, evict=None, queue=None,
             requeue="head", preempt_keys=None, share=None):
        if preempt == "by":
            pr = {"kind": "by", "keys": preempt_keys, "requeue": requeue}
        else:
            pr = {"kind": preempt}
        self.pools.append({"name": name, "cap": V(cap), "block": V(block) if block else None,
                           "evict": evict or {"kind": "lru"}, "preempt": pr,
                           "queue": queue or {"kind": "fifo"}, "reserve_held": False,
                           "admitted_by": admitted_by, "share": share})
        return len(self.pools) - 1

    def stage(self, d) -> int:
        self.stages.append(d)
        return len(self.stages) - 1

    def prefix(self, key, length, after=None) -> None:
        """`prefix KEY (LENGTH) [after PARENT];` (docs/content.md §1)."""
        total = Fraction(length) + (next(Fraction(d["total"]) for d in self.prefixes if Fraction(d["key"]) == after)
                                    if after is not None else 0)
        self.prefixes.append({"key": V(key), "length": V(length), "after": V(after) if after is not None else None,
                              "total": V(total)})

    def ir(self, arrival, session, server=None, init=None, turn=None, trace=None) -> dict:
        return {"format": "serq-ir/1", "files": ["built.sq"], "inputs": {}, "attrs": self.attrs,
                "prefixes": self.prefixes,
                "hidden": [], "observes": self.observes, "pools": self.pools, "stages": self.stages,
                "blocks": self.blocks,
                "workload": {"arrival": arrival, "trace": trace, "init": init, "turn": turn,
                             "session": session, "server": server},
                "gauges": []}


def vllm_engine(p: Program, *, budget=8192, bs=16, blocks=10000, max_seqs=16, cost=None,
                chunk=float("inf"), preempt="lifo", cache=True, content=None):
    """Pools kv and reqs and the engine `vllm` of the seed (docs/language.md §6–§7); returns a function
    `call(prompt_expr, output_expr) -> [statements]` that lowers one engine call (§7.2).
    `content`: None, or `(p, n, h)` expressions — kv is then a `share content` pool and the call's
    kv item carries `content (p, n, h)` (docs/content.md)."""
    kv = p.pool("kv", blocks * bs, block=bs, preempt=preempt, share="content" if content is not None else None)
    eng_idx = len(p.stages)
    reqs = p.pool("reqs", max_seqs, admitted_by=eng_idx)
    if cost is None:
        cost = Fn("max", Bin("+", N(Fraction(2, 10000)), Bin("*", N(Fraction(2, 10**9)),
                                                               Bin("+", Eng("batch.kv_decode"), Eng("batch.kv_prefill")))),
                  Bin("*", Eng("batch.tokens"), N(Fraction(2, 100000))))
    thr = Cond(Bin(">", Bin("+", Eng("running.count"), Eng("waiting.count")), N(1)), N(chunk), N(float("inf")))
    p.stage({"name": "vllm", "kind": "step", "budget": N(budget), "granule": None, "cost": cost,
             "memory": kv, "registers": [], "lets": [{"name": "threshold", "expr": thr}],
             "schedule": [
                 {"op": "advance", "only": None, "order": {"kind": "admission"}, "each": {"k": "local", "index": 0}},
                 {"op": "admit", "only": None, "while": Bin("==", Eng("running.preempted"), N(0)),
                  "each": {"k": "local", "index": 0}}]})
    p.pools[kv]["admitted_by"] = None

    def reusable(x):
        return Bin("*", Fn("floor", Bin("/", Bin("-", x, N(1)), N(bs))), N(bs))

    def call(prompt, output):
        A = p.A
        body = p.block([
            p.set("kept", A("known")),
            p.set("c", Fn("min", A("cached"), reusable(A("known")))),
            p.observe("hit", Bin(">", A("c"), N(0))),
            p.observe("prefill_tokens", Bin("-", A("known"), A("c"))),
            p.run(eng_idx, Bin("-", A("known"), A("c")), "prefill", kv),
            p.run(eng_idx, Bin("-", Bin("-", A("output"), N(1)), Bin("-", A("known"), A("prompt"))), "decode", kv),
        ])
        hold = {"op": "hold",
                "pools": [{"pool": ref(reqs), "units": N(1), "reserve": None},
                          {"pool": ref(kv), "units": Fn("min", A("known"), Bin("+", A("reused"), Obs("budget_left", stage=eng_idx))),
                           "reserve": A("known"),
                           "content": None if content is None else
                           {"prefix": content[0], "length": content[1], "history": content[2]}}],
                "reuse": A("reused") if content is not None else None,
                "bindings": [{"slot": p.slot("known"), "expr": Fn("max", A("kept"), Bin("+", A("computed"), N(1)))},
                             {"slot": p.slot("reused"), "expr": Fn("min", Obs("cachedin", pool=kv), reusable(A("known")))}],
                "body": body,
                "cache": Bin("+", A("prompt"), A("output")) if cache and content is None else None,
                "request": {"engine": eng_idx, "prompt": A("prompt"), "output": A("output")}}
        return [p.set("prompt", prompt), p.set("output", output), p.set("kept", A("prompt")), hold]

    return call, kv, reqs, eng_idx


def _chat(p: Program, call, prompt, first_n, Lambda, Z, p_more) -> dict:
    """The seed's multi-turn workload around the lowered call: `prompt(A)` is a turn's prompt
    from the context K and the new tokens n; `first_n` the first turn's new-token draw."""
    tool = p.stage({"name": "tool", "kind": "delay"})
    A = p.A
    server = p.block([p.set("prompt", prompt(A))] + call(A("prompt"), A("o")))
    init = p.block([p.set("K", N(0))])
    turn = p.block([
        p.set("n", Fn("ceil", Cond(Bin("==", A("K"), N(0)), first_n, Draw("exp", N(500))))),
        p.set("o", Bin("+", Fn("floor", Draw("exp", N(200))), N(1))),
        p.set("more", Draw("bernoulli", N(p_more))),
    ])
    loop_body = p.block([
        p.set("K", Bin("+", Bin("+", A("K"), A("n")), A("o"))),
        p.run(tool, Draw("exp", N(Z))),
        {"op": "turn"},
    ])
    session = p.block([{"op": "turn"}, {"op": "while", "cond": A("more"), "body": loop_body}, {"op": "end"}])
    return p.ir({"kind": "poisson", "rate": V(Lambda)}, session, server=server, init=init, turn=turn)


def seed_vllm_ir(Lambda=0.3, blocks=10000, max_seqs=16, Z=3.0, chunk=float("inf"), p_more=0.9) -> dict:
    """The seed program examples/multi-turn/vllm.sq, built directly (docs/language.md §6–§8)."""
    p = Program()
    call, kv, reqs, eng = vllm_engine(p, blocks=blocks, max_seqs=max_seqs, chunk=chunk)
    return _chat(p, call, lambda A: Bin("+", A("K"), A("n")), Draw("uniform", N(1000), N(3000)), Lambda, Z, p_more)


def shared_prompt_ir(Lambda=0.3, blocks=10000, max_seqs=16, Z=3.0, system=1024, p_more=0.9,
                     history=None) -> dict:
    """The seed program with a `system`-token prompt shared by every session: kv is a
    `share content` pool, prefix 1 is the system prompt and each session's history is its serial
    (docs/content.md). `history`: an expression for the history key instead of the serial."""
    p = Program()
    p.prefix(1, system)
    hist = history if history is not None else p.A("serial")
    call, kv, reqs, eng = vllm_engine(p, blocks=blocks, max_seqs=max_seqs, content=(N(1), N(system), hist))
    return _chat(p, call, lambda A: Bin("+", Bin("+", N(system), A("K")), A("n")), Draw("exp", N(500)),
                 Lambda, Z, p_more)


def duplicates_ir() -> dict:
    """Two sessions with one history key send the same 20-token prompt in one iteration: the
    second reuses the first's full blocks, then both fill their own copy of each later block at
    the same step (duplicates, identified in serving order); a third arrives at 200 and takes the
    first copy of each, so the identity map's order is observable (docs/content.md §3)."""
    p = Program()
    A = p.A
    call, kv, reqs, eng = vllm_engine(p, budget=64, bs=8, blocks=40, max_seqs=4, cost=N(1),
                                      content=(N(0), N(0), N(0)))
    wait = p.stage({"name": "wait", "kind": "delay"})
    server = p.block(call(N(20), Bin("-", N(60), Bin("*", A("serial"), N(10)))))
    session = p.block([p.run(wait, Bin("*", Bin("==", A("serial"), N(2)), N(200))), {"op": "turn"}, {"op": "end"}])
    return p.ir({"kind": "batch", "n": 3}, session, server=server)

"""serQ's model of the vLLM scheduler on an oracle scenario: `serq oracle run`.

A scenario (docs/oracle.md §3) becomes one serQ program run (docs/vllm-model.md):

- the program is `examples/oracle/vllm_scenario.sq` (FCFS),
  `examples/oracle/vllm_scenario_async.sq` (FCFS as an explicit hold: async scheduling, the
  watermark) or `examples/oracle/vllm_scenario_priority.sq` (the priority policy, explicit hold),
  with the scenario's config as `args.number` inputs;
- the requests become the sessions of an ordered trace written straight into the IR: one session
  per `after` chain, one turn per request (new = the whole prompt, out = the output length,
  think = the gate delay before the request is added, forced = an ordering key), spawned by
  `batch(n)` at time 0;
- the engine (serq_fast by default, serq_spec with `--engine spec`) prints its per-step state
  lines (docs/state.md); `build_trace` turns them into
  a trace of the oracle format (docs/oracle.md §4), which `serq oracle compare` compares with
  vLLM's;
- facts about vLLM's run the language cannot derive (step-counted `after` delays and same-call
  arrival order on a seconds clock) are read off a run and fed back until the run reproduces
  them (`run_scenario`). Async scheduling is the engine option `lag 1` (docs/async.md).

Scenarios that need a vLLM feature the language cannot express yet are refused with
`Unsupported` naming the feature (never a silently wrong trace).
"""

from __future__ import annotations

import copy
import heapq
import json
import math
import sys
import time as _time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from serq.oracle.scenario import (
    ResolvedScenario,
    ScenarioError,
    fake_output_token,
    load_scenario,
    tokens_for_segment,
)

__all__ = [
    "Unsupported",
    "ModelError",
    "Plan",
    "plan_scenario",
    "run_scenario",
    "run_scenario_file",
    "FEATURES",
    "register_oracle",
]

MODEL_VERSION = "serq-model/1"

#: Feature names used in refusals (the divergence classes of docs/vllm-model.md).
FEATURES = {
    "async": "async scheduling (frees seen one step later)",
    "watermark": "the watermark knob",
    "extra-knob": "a scheduler/cache knob the model does not know",
    "after-fanout": "an `after` fan-out the model cannot place (a child of a parent that never finishes)",
    "priority-clock": "priority ties on a virtual clock that does not advance",
    "mixed-arrivals": "priority: the arrival_time of a request its arrival_step adds does not "
                      "fit the packed trace key (2^53 or more: too large or too fine a decimal)",
    "priority": "the priority policy",
    "async-cache-victim": "async: a request preempted in decode both after and before vLLM "
                          "scheduled it in the preempting call (its cache cap is per request)",
}


class Unsupported(Exception):
    """The scenario needs a vLLM feature serQ's language does not express (yet)."""

    def __init__(self, feature: str, detail: str, all_needs: list | None = None):
        self.feature = feature
        self.detail = detail
        self.needs = all_needs or [(feature, detail)]
        msg = "; ".join(f"{FEATURES.get(f, f)}: {d}" for f, d in self.needs)
        super().__init__(f"unsupported: {msg}")


class ModelError(Exception):
    """The engine failed or produced state lines the trace builder cannot read."""


def _repo_root() -> Path:
    here = Path(__file__).resolve()
    for cand in (here.parents[3], Path.cwd()):
        if (cand / "examples" / "oracle" / "vllm_scenario.sq").is_file():
            return cand
    raise ModelError("cannot find examples/oracle/vllm_scenario.sq (run from the serQ source tree)")


def program_path(priority: bool, hold: bool = False) -> Path:
    name = ("vllm_scenario_async.sq" if hold
            else "vllm_scenario_priority.sq" if priority else "vllm_scenario.sq")
    return _repo_root() / "examples" / "oracle" / name


# --------------------------------------------------------------------------------------------
# scenario -> plan


@dataclass
class Turn:
    rid: str
    index: int  # scenario list index
    prompt: int
    out: int
    think: Fraction  # gate delay before the request is added
    content: tuple[int, int, int]  # (prefix key, shared whole blocks, history), 0s: caching off
    order: int  # FCFS tie key (list index / rank) or the priority key's id rank
    extra: int = 0  # async: an EOS stop gets one more (discarded) token: the hold's `eos (…)`
    parent: str | None = None  # the previous turn (its `after` parent)
    delay: int = 0  # delay_steps


@dataclass
class Plan:
    scenario: ResolvedScenario
    priority: bool
    unit_clock: bool
    settings: dict[str, str]
    sessions: list[list[Turn]]
    radix: int
    prio_min: int = 0
    prio_span: int = 1
    asynchronous: bool = False
    use_hold: bool = False  # the explicit-hold program (async scheduling, watermark)
    # async: added to an idle scheduler (after the empty call that applied the last end)
    idle_added: set = field(default_factory=set)
    by_id: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (serial, turn index)
    forced: list = field(default_factory=list)
    content: "ContentPlan | None" = None  # None: caching off, the kv holds have no content clause
    # `after` fan-out: child id -> parent id for a child that starts a session of its own
    fanout: dict = field(default_factory=dict)
    # seconds clock: requests added when vLLM's step counter reaches their arrival_step
    stepped: set = field(default_factory=set)
    # async, priority: requests whose decode preemptions came after vLLM had scheduled them in
    # the same call (derived from a run, like idle_added)
    cache_victims: set = field(default_factory=set)
    # priority, mixed arrivals: id -> tk = 1 + arrival_time * tscale, vLLM's arrival time of a
    # request its arrival_step adds, which the program takes from the data instead of `now`
    tkeys: dict = field(default_factory=dict)

#: The gate delay of a request whose add time the fixpoint has not derived (yet): a fan-out child
#: whose parent has not finished in a run, a request waiting for the step counter. Later than any
#: step a scenario can reach (max_steps), so it is not added within the run.
ADD_UNKNOWN = Fraction(10**12)


def _dec(x: Fraction) -> str:
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def _request_tokens(sc: ResolvedScenario) -> dict[str, tuple[list[int], list[int]]]:
    """id -> (prompt ids, output ids) assuming every request runs to completion."""
    by_id = {r.id: r for r in sc.requests}
    memo: dict[str, tuple[list[int], list[int]]] = {}

    def get(rid: str):
        if rid not in memo:
            r = by_id[rid]
            prompt: list[int] = []
            for seg in r.prompt:
                if seg.kind == "parent":
                    pp, po = get(seg.source)
                    prompt += tokens_for_segment(seg, pp + po)
                else:
                    prompt += tokens_for_segment(seg)
            outs = [fake_output_token(rid, i, r.eos_at) for i in range(sc.output_len(rid))]
            memo[rid] = (prompt, outs)
        return memo[rid]

    for r in sc.requests:
        get(r.id)
    return memo


def _lcp(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class ContentPlan:
    """vLLM's content-keyed prefix cache as `prefix` declarations and `content (p, n, h)` values
    (docs/content.md): the trie of prompts shared by different histories, and per request its
    deepest shared node `p` (0: none), the shared length `n` = total(p), and its history `h`."""

    prefixes: list[tuple[int, int, int | None, int]]  # (key, length, after, total), parents first
    content: dict[str, tuple[int, int, int]]  # request id -> (p, n, h)


def conversations(sc: ResolvedScenario) -> dict[str, str]:
    """Request id -> the root of its conversation: follow `prompt_from` until a request without
    one (a conversation is the tree of requests that continue one another's prompts)."""
    by_id = {r.id: r for r in sc.requests}
    root: dict[str, str] = {}
    for r in sc.requests:
        cur = r
        while cur.prompt_from is not None:
            cur = by_id[cur.prompt_from]
        root[r.id] = cur.id
    return root


def content_plan(sc: ResolvedScenario, toks: dict[str, tuple[list[int], list[int]]],
                 spread: set[str] = frozenset()) -> ContentPlan:
    """Prefix tree and content values of a scenario (docs/vllm-model.md §5.1).

    A conversation (`conversations`) whose requests continue one another in a line is one
    *history*: its root's prompt takes part in the tree, and every member shares the root's
    (p, n) and history, so a continuation's blocks past the shared part are the history's (one
    identity for one content, since each member extends the previous one's sequence).

    A conversation that forks (two requests continue the same one: the same prompt and output go
    on in two ways) or whose history would have to cross sessions (`spread`, the roots of such
    conversations: a history's identities are a session's) cannot be one history. Every member of
    it takes part in the tree with its whole sequence, prompt and output, and has a history of its
    own: what two members share (the conversation up to the fork, a common append) is a tree
    node, exactly as vLLM's block hashes chain content, and each member's `n` may reach into
    its output (its own blocks there are the node's, which a later member hits).

    Roots that share leading tokens get a trie node for the shared part: a group of two or more
    sequences that agree on their first L tokens (beyond the parent node's total) is a node of
    total L `after` that parent, and the group splits by the token at L. A sequence's `p` is the
    deepest node it belongs to (n = that node's total)."""
    by_id = {r.id: r for r in sc.requests}
    root_of = conversations(sc)
    continued: dict[str, int] = {}
    for r in sc.requests:
        if r.prompt_from is not None:
            continued[r.prompt_from] = continued.get(r.prompt_from, 0) + 1
    whole = {root_of[src] for src, k in continued.items() if k > 1} | set(spread)
    # the tree's members: the root of each linear conversation (its prompt), every request of a
    # forked or spread one (its prompt and output), in scenario order
    members = [r.id for r in sc.requests
               if (root_of[r.id] in whole) or r.prompt_from is None]
    seq = {m: (toks[m][0] + toks[m][1] if root_of[m] in whole else toks[m][0]) for m in members}
    prefixes: list[tuple[int, int, int | None, int]] = []
    node_of: dict[str, tuple[int, int]] = {}

    def split(group: list[str], parent: int | None, parent_total: int) -> None:
        seqs = [seq[m] for m in group]
        first = seqs[0]
        common = min(_lcp(first, q) for q in seqs[1:])
        key, total = parent, parent_total
        if common > parent_total:
            key, total = len(prefixes) + 1, common
            prefixes.append((key, common - parent_total, parent, common))
        parts: dict[int, list[str]] = {}
        for m, q in zip(group, seqs):
            if len(q) == common:
                node_of[m] = (key or 0, total if key else 0)
            else:
                parts.setdefault(q[common], []).append(m)
        for part in parts.values():
            if len(part) == 1:
                node_of[part[0]] = (key or 0, total if key else 0)
            else:
                split(part, key, total)

    if len(members) > 1:
        split(members, None, 0)
    hist_of = {m: i + 1 for i, m in enumerate(members)}
    content: dict[str, tuple[int, int, int]] = {}

    def of(rid: str) -> tuple[int, int, int]:
        if rid not in content:
            src = by_id[rid].prompt_from
            content[rid] = (of(src) if rid not in hist_of
                            else (*node_of.get(rid, (0, 0)), hist_of[rid]))
        return content[rid]

    for r in sc.requests:
        of(r.id)
    return ContentPlan(prefixes, content)


def _content_code(cplan: "ContentPlan", rid: str, bs: int) -> tuple[int, int, int]:
    """(prefix key, shared whole blocks, history) of a request; (0, 0, 0) without caching. Only
    whole blocks of the shared length matter (a block is the prefix's iff it lies inside it)."""
    if rid not in cplan.content:
        return (0, 0, 0)
    p, n, h = cplan.content[rid]
    return (p, n // bs, h)


#: Missing features `force` can approximate (for measuring what a refusal protects against):
#: unknown knobs ignored, priority ties on a frozen clock keyed by step instead, and a request
#: with decode preemptions of both kinds given the readmission cap its run derived. A forced
#: async scenario with a missing feature runs synchronously (plan_scenario).
FORCEABLE = {"extra-knob", "priority-clock", "async-cache-victim"}


def plan_scenario(sc: ResolvedScenario, force: bool = False) -> Plan:
    """Map a resolved scenario to program inputs and sessions, or raise Unsupported.

    With `force`, features in FORCEABLE are approximated instead of refused (the result is then
    NOT a model of vLLM; `Plan.forced` lists what was approximated)."""
    cfg = sc.config
    bs = sc.block_size
    needs: list[tuple[str, str]] = []

    def need(feature: str, detail: str) -> None:
        if all(f != feature for f, _ in needs):
            needs.append((feature, detail))

    if cfg["policy"] == "priority" and sc.step_base_exact <= 0 and not any(
            r.arrival_kind == "time" for r in sc.requests):
        need("priority-clock", "config.step_time.base_s = 0: vLLM's arrival clock never moves")
    if cfg["async_scheduling"]:
        pass
    reserve_full = 1
    watermark_blocks = 0
    adaptive = 0
    active_seqs = cfg["max_num_seqs"]
    for k, v in cfg["scheduler_config_extra"].items():
        if k == "scheduler_reserve_full_isl":
            reserve_full = 1 if v else 0
        elif k == "watermark":
            if v:
                watermark_blocks = math.floor(v * cfg["num_gpu_blocks"])
        elif k == "long_prefill_token_threshold_adaptive":
            # the threshold floored at budget // (running + waiting) (the program's `adaptive`)
            adaptive = 1 if v else 0
        elif k == "max_num_active_seqs":
            # vLLM's admission limit into RUNNING (max_num_seqs only sizes the model runner)
            if v is not None:
                if not (isinstance(v, int) and not isinstance(v, bool)
                        and 1 <= v <= cfg["max_num_seqs"]):
                    need("extra-knob", f"config.scheduler_config_extra.max_num_active_seqs: "
                         f"vLLM takes an integer from 1 to max_num_seqs "
                         f"({cfg['max_num_seqs']}), got {v!r}")
                else:
                    active_seqs = v
        else:
            need("extra-knob", f"config.scheduler_config_extra.{k}")
    for k in cfg["cache_config_extra"]:
        need("extra-knob", f"config.cache_config_extra.{k}")
    extra = [k for k in cfg if k not in (
        "block_size", "num_gpu_blocks", "max_num_batched_tokens", "max_num_seqs", "max_model_len",
        "long_prefill_token_threshold", "enable_prefix_caching", "enable_chunked_prefill", "policy",
        "async_scheduling", "step_time", "scheduler_config_extra", "cache_config_extra")]
    if extra:
        need("extra-knob", f"config.{extra[0]}")
    priority = cfg["policy"] == "priority"
    reqs = sc.requests
    mml = cfg["max_model_len"]
    kinds = {r.arrival_kind for r in reqs}
    time_based = "time" in kinds
    # a request with an arrival_step on a seconds clock (beside arrival_time requests, or with
    # an arrival_time of its own) waits for vLLM's step counter: run_scenario derives its add
    # time as it does an `after` child's (_seconds_steps)
    stepped = {r.id for r in reqs if time_based and r.after is None and r.arrival_step}
    caching = bool(cfg["enable_prefix_caching"])
    # sessions: `after` chains. A parent followed by several requests (fan-out) goes on in its
    # session with the one that continues a history of the chain (`prompt_from`; with caching
    # off histories do not matter), else with the one of least delay_steps; every other child starts
    # a session of its own, added by a gate whose delay run_scenario derives from the parent's
    # finish (Plan.fanout).
    children: dict[str, list] = {}
    for r in reqs:
        if r.after is not None:
            children.setdefault(r.after, []).append(r)
    chains: list[list] = []
    fanout: dict[str, str] = {}
    pending = [r for r in reqs if r.after is None]
    while pending:
        chain = [pending.pop(0)]
        while chain[-1].id in children:
            cs = children[chain[-1].id]
            cont = [c for c in cs if c.prompt_from is not None] if caching else []
            # the earliest added (async: a second child added the instant the parent's end is
            # applied needs _fanout_idle, the session's own child never does)
            nxt = min(cont or cs, key=lambda c: (max(1, c.delay_steps), c.index))
            for c in cs:
                if c is not nxt:
                    fanout[c.id] = c.after
                    pending.append(c)
            chain.append(nxt)
        chains.append(chain)
        pending.sort(key=lambda r: r.index)
    session_of = {r.id: si for si, ch in enumerate(chains) for r in ch}
    # a conversation continued in another session than its source's cannot be one history (a
    # history's identities are a session's): content_plan gives each of its requests its own
    # history and shares their common content through tree nodes instead
    root_of = conversations(sc)
    spread = {root_of[r.id] for r in reqs
              if r.prompt_from is not None and session_of[r.id] != session_of[r.prompt_from]}
    # vLLM's prefix cache by content (docs/content.md): the prefix tree of the prompts and each
    # request's (prefix, shared length, history); caching off: no content clause (model IR)
    toks = _request_tokens(sc)
    cplan = content_plan(sc, toks, spread) if caching else ContentPlan([], {})
    if needs and not (force and all(f in FORCEABLE for f, _ in needs)):
        raise Unsupported(needs[0][0], needs[0][1], needs)
    # ordering keys
    n = len(reqs)
    radix = max(n, 1)
    if priority:
        ranks = {rid: i for i, rid in enumerate(sorted(r.id for r in reqs))}
    else:
        ranks = {r.id: r.index for r in reqs}
    sessions: list[list[Turn]] = []
    plan_by_id: dict[str, tuple[int, int]] = {}
    for si, ch in enumerate(chains):
        turns = []
        for k, r in enumerate(ch):
            if r.id in fanout or r.id in stepped:
                # its own session: added at a time run_scenario derives (from the parent's
                # finish, or the step counter); until then never within the run
                think = ADD_UNKNOWN
            elif r.arrival_kind == "after":
                # on a seconds clock: a first guess, refined by run_scenario's fixpoint
                think = Fraction(max(1, r.delay_steps) - 1) if not time_based else Fraction(0)
            elif r.arrival_kind == "time":
                think = r.arrival_time_exact
            else:
                think = Fraction(r.arrival_step or 0)
            # async: an EOS stop the scheduler cannot foresee (max_tokens and max_model_len it
            # can: no token is scheduled past them)
            room = mml - sc.static_prompt_len(r.id)
            extra = int(bool(cfg["async_scheduling"]) and r.eos_at is not None
                        and r.eos_at + 1 < min(r.max_tokens, room))
            turns.append(Turn(r.id, r.index, len(toks[r.id][0]), sc.output_len(r.id), think,
                              _content_code(cplan, r.id, bs), ranks[r.id], extra,
                              ch[k - 1].id if k else None, r.delay_steps))
            plan_by_id[r.id] = (si, k)
        sessions.append(turns)
    thr = cfg["long_prefill_token_threshold"]
    settings = {
        "budget": str(cfg["max_num_batched_tokens"]),
        "max_seqs": str(active_seqs),
        "block": str(bs),
        "blocks": str(sc.num_usable_blocks),
        "threshold": str(thr) if thr > 0 else "inf",
        "adaptive": str(adaptive),
        "reserve_full": str(reserve_full),
        "chunked": "1" if cfg["enable_chunked_prefill"] else "0",
        "base": _dec(sc.step_base_exact) if time_based else "1",
        "per_token": _dec(sc.step_per_token_exact) if time_based else "0",
        "radix": str(radix),
        "requests": str(len(sessions)),
    }
    prio_min = min((r.priority for r in reqs), default=0)
    prio_span = max((r.priority for r in reqs), default=0) - prio_min + 1
    tkeys: dict[str, int] = {}
    if priority:
        settings["prio_min"] = str(prio_min)
        settings["prio_span"] = str(prio_span)
        # vLLM keys a request with arrival_time by it (the driver passes it on), the program by
        # `now`: equal for one the gate adds at that time, not for one its arrival_step adds
        # (possibly later): that one's key comes as data, in units of 1/tscale
        mixed = [r for r in reqs if r.id in stepped and r.arrival_time is not None]
        if mixed:
            tscale = 1
            while any((r.arrival_time_exact * tscale).denominator != 1 for r in mixed):
                tscale *= 10
            tkeys = {r.id: 1 + int(r.arrival_time_exact * tscale) for r in mixed}
            settings["tscale"] = str(tscale)
            settings["tspan"] = str(max(tkeys.values()) + 1)
    else:
        settings["key_time"] = "1"
    if time_based and sc.step_base_exact <= 0:
        raise Unsupported("extra-knob", "config.step_time.base_s = 0 on a seconds clock")
    settings["pkeys"] = str(len(cplan.prefixes) + 1)
    settings["hists"] = str(max((len({cplan.content[t.rid][2] for t in ts}) for ts in sessions
                                 if caching), default=1))
    plan = Plan(sc, priority, not time_based, settings, sessions, radix, prio_min=prio_min,
                prio_span=prio_span, by_id=plan_by_id, content=cplan if caching else None,
                fanout=fanout, stepped=stepped, tkeys=tkeys)
    plan.forced = [f for f, _ in needs]
    if cfg["async_scheduling"] and not (force and needs):
        plan.asynchronous = True
        settings["async"] = "1"  # the engine's `lag 1` (docs/async.md)
        settings["async_cache"] = "1"
        if plan.unit_clock:  # seconds clocks derive the add times (_seconds_steps)
            settings["late_gate"] = "1"
    else:
        for ts in sessions:  # forced synchronous: no EOS token either
            for t in ts:
                t.extra = 0
    if watermark_blocks:
        settings["watermark"] = str(watermark_blocks * bs)
    plan.use_hold = (plan.asynchronous or bool(watermark_blocks)) and not plan.priority
    return plan


# --------------------------------------------------------------------------------------------
# plan -> IR -> state lines


_IR_CACHE: dict[tuple, dict] = {}


def _ir_for(plan: Plan, order: dict[str, int] | None = None, source: str | None = None,
            thinks: dict[str, Fraction] | None = None) -> dict:
    """The program's IR with the plan's inputs and its sessions written in as an ordered trace.

    `source` replaces the program text (same file name, so `use` paths still resolve): the
    tests use it to seed faults."""
    from serq import frontend

    path = program_path(plan.priority, plan.use_hold)
    key = (str(path), tuple(sorted(plan.settings.items())), source)
    if key not in _IR_CACHE:
        if source is None:
            _IR_CACHE[key] = frontend.load_program(str(path), plan.settings)
        else:
            _IR_CACHE[key] = frontend.compile_source(source, str(path), plan.settings)
    ir = copy.deepcopy(_IR_CACHE[key])
    thinks = thinks or {}
    rows = []
    for turns in plan.sessions:
        srows = []
        local_hist: dict[int, int] = {}  # a session's conversations, numbered from 0
        for t in turns:
            o = t.order if order is None else order[t.rid]
            pk, nb, hist = t.content
            pkeys, hists = int(plan.settings["pkeys"]), int(plan.settings["hists"])
            cc = (nb * pkeys + pk) * hists + local_hist.setdefault(hist, len(local_hist))
            think = thinks.get(t.rid, t.think)
            code = (cc * 2 + int(t.rid in plan.idle_added)) * 2 + t.extra
            if plan.priority:
                # one more bit: an async victim vLLM scheduled earlier in its preempting call
                # (its readmission's cache cap is `computed`, not `computed - 1`: §1 async (5))
                code = code * 2 + int(t.rid in plan.cache_victims)
                pr = plan.scenario.request(t.rid).priority - plan.prio_min
                tspan = int(plan.settings.get("tspan", "1"))
                forced = ((code * tspan + plan.tkeys.get(t.rid, 0)) * plan.prio_span + pr) \
                    * plan.radix + o
                if forced >= 2**53:
                    # serq_fast unpacks it in binary64: beyond 2^53 the integer is not exact
                    raise Unsupported("mixed-arrivals" if plan.tkeys else "priority",
                                      f"{t.rid!r}: its packed trace key {forced} (content "
                                      f"{code}, arrival key {plan.tkeys.get(t.rid, 0)} of "
                                      f"{tspan}, priority, rank) is 2^53 or more")
            elif plan.use_hold:
                forced = code * plan.radix + o
            else:
                forced = cc * plan.radix + o
            srows.append([str(t.prompt), str(t.out), _dec(think), _dec(forced)])
        rows.append(srows)
    ir["workload"]["trace"] = {"ordered": True, "sessions": rows}
    _content_into_ir(ir, plan.content)
    ir["workload"]["arrival"] = {"kind": "batch", "n": len(plan.sessions)}
    return ir


def _content_into_ir(ir: dict, cplan: "ContentPlan | None") -> None:
    """The scenario's prefix tree as the program's `prefix` declarations (docs/ir.md), replacing
    the program's example; with caching off (None) the kv holds lose their content clause, so
    their blocks are never identified and nothing is ever hit (docs/content.md §1)."""
    if cplan is not None:
        ir["prefixes"] = [{"key": str(k), "length": str(ln), "after": None if a is None else str(a),
                           "total": str(tot)} for k, ln, a, tot in cplan.prefixes]
        return
    ir["prefixes"] = []
    kv = [i for i, pool in enumerate(ir["pools"]) if pool["name"] == "kv"]
    for block in ir["blocks"]:
        for st in block:
            if st.get("op") == "hold":
                for item in st["pools"]:
                    if item["pool"]["base"] in kv:
                        item["content"] = None


def _run_engine(ir: dict, engine: str, plan: Plan) -> "_Collector":
    col = _Collector(plan)
    if engine == "fast":
        from serq_fast.engine import Sim
        from serq_fast.expr import RunError

        try:
            # lean lines (serq_fast.state.LEAN): the collector reads no block identities, no
            # gate lists and only the ending sessions, which full lines would list per step
            # (O(KV blocks + requests) each: most of a large scenario's run time)
            Sim(ir, seed=1, horizon=math.inf, warmup=0.0, states=col.feed,
                lean_states=True).run()
        except _Stop:
            pass
        except RunError as exc:
            from serq_fast.lockstep import error_text
            raise ModelError(f"serq_fast run-time error: {error_text(exc, ir, 'vllm_scenario.sq')}") from None
        return col
    if engine == "spec":
        from serq_spec.cli import prepare
        from serq_spec.errors import SpecError
        from serq_spec.step import run
        from serq_spec.trace import state_text
        from serq_spec.workload import Workload

        data = {"format": "serq-sessions/1", "seed": 1, "arrivals": [], "trace_picks": [],
                "machine": [],
                "sessions": [{"serial": i, "init": [], "turns": [[] for _ in s], "session": []}
                             for i, s in enumerate(plan.sessions)]}
        prog = prepare(ir, Workload.replay(data), "vllm_scenario.sq")
        try:
            run(prog, on_step=lambda cfg, rec, k: col.feed(json.loads(state_text(cfg, rec, k))),
                check=False)
        except _Stop:
            pass
        except SpecError as exc:
            from serq_fast.lockstep import error_text
            raise ModelError(f"serq_spec run-time error: {error_text(exc, ir, 'vllm_scenario.sq')}") from None
        return col
    raise ValueError(f"unknown engine {engine!r} (spec or fast)")


def _t(x) -> Fraction:
    """A state-line time (wire string from the spec, float from the fast engine) as a Fraction."""
    if isinstance(x, str):
        return Fraction(x)
    return Fraction(x).limit_denominator(10**12) if isinstance(x, float) else Fraction(x)


# --------------------------------------------------------------------------------------------
# state lines -> trace


@dataclass
class _Iter:
    start: Fraction
    end: Fraction
    assign: list  # [(rid, tokens, computed_before, kind)]
    preempted: list
    used_units: int
    running: int
    waiting: int
    call: int
    step: int = -1
    arrived: list = field(default_factory=list)


class _Stop(Exception):
    """Raised from the state-line callback to end a run early (vLLM's max_steps)."""


class _Collector:
    """Consumes state lines one by one (docs/state.md) and keeps what the trace needs."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.names = None
        self.turn_of: dict[int, int] = {}  # serial -> current turn index (0-based)
        self.join_call: dict[str, int] = {}
        self.join_key: dict[str, int] = {}  # rid -> schedule() calls before it joined
        self.end_call: dict[str, int] = {}  # async: rid -> schedule() calls before its end
        self.calls = 0
        self.join_time: dict[str, Fraction] = {}
        self.assigned: dict[str, list[int]] = {}  # rid -> steps (unit clock) it got tokens in
        self.iters: list[_Iter] = []
        self.end_to_iter: dict[Fraction, _Iter] = {}
        # an iteration's end as read (_t) -> the engine's own value, exactly (serq_fast: the
        # binary64 number itself), so that a gate delay set to it fires at that very instant
        self.raw_end: dict[Fraction, Fraction] = {}
        self.preempt_count: dict[str, int] = {}
        self.seen: set[str] = set()
        self.resume: set[str] = set()
        self.obs: dict[str, dict[str, list]] = {}
        self.maxpos: dict[str, int] = {}
        self.pending_arrivals: list[str] = []
        self.ntoken = 0
        self.idle_calls = 0
        self.truncated = False
        self.admitted: dict[str, int] = {}  # rid -> admission number of its latest (re)admission
        self.admissions = 0
        # (iteration start, victim, the victim's admission number then)
        self.preemptions: list[tuple[Fraction, str, int]] = []
        # (step, victim, scheduled earlier in that call, at a block boundary) of every
        # preemption in decode (async: Plan.cache_victims, run_scenario)
        self.decode_preemptions: list[tuple[int, str, bool, bool]] = []
        # async (docs/async.md): rid -> 1 if its end was applied after a schedule() that had
        # tokens (vLLM's step counter moved before the output was processed), else 0
        self.late: dict[str, int] = {}
        self.due: list[int] = []  # the engine's `due` list on the previous line

    def iter_ending(self, t: Fraction) -> "_Iter | None":
        """The token iteration that ends at time t (an observation's `now`). serq_fast's times are
        binary64, and an observation may be stamped with a value one rounding away from the
        iteration's own end: within 1e-9 s the nearest end is taken (iterations are at least
        base_s apart)."""
        it = self.end_to_iter.get(t)
        if it is None and self.end_to_iter:
            near = min(self.end_to_iter, key=lambda e: abs(e - t))
            if abs(near - t) <= Fraction(1, 10**9):
                it = self.end_to_iter[near]
        return it

    def feed(self, line: dict) -> None:
        plan = self.plan
        if self.names is None:
            self.names = [p["name"] for p in line["pools"]]
            self.kv_i, self.reqs_i = self.names.index("kv"), self.names.index("reqs")
            snames = [s["name"] for s in line["stages"]]
            self.eng_i = snames.index("vllm")
        rec = line["records"]
        ev = line.get("event")
        if ev is not None and ev["kind"] == "ends":
            for serial, late in self.due:
                rid = plan.sessions[serial][self.turn_of[serial]].rid
                self.late[rid] = late
                self.end_call[rid] = self.calls
            self.due = []
        # the ends a schedule() made due, and whether that call had tokens (then vLLM's step
        # counter moved on before it processed them)
        due = line["stages"][self.eng_i].get("due", [])
        empty_call = False
        if len(due) > len(self.due):
            tokens = any(it["assign"] for it in rec["iterations"])
            empty_call = not rec["iterations"]
            self.due += [(serial, int(tokens)) for serial in due[len(self.due):]]
        for st, serial in rec["finished"]:
            if st == "gate":
                k = self.turn_of.get(serial, -1) + 1
                self.turn_of[serial] = k
                rid = plan.sessions[serial][k].rid
                self.join_call[rid] = len(self.iters)
                self.join_key[rid] = self.calls
                self.join_time[rid] = _t(line["now"])
                self.pending_arrivals.append(rid)
        # the schedule() calls so far, an empty one that made ends due included (it has no
        # iteration record), and after this line's joins, which came before it
        self.calls += len(rec["iterations"]) + int(empty_call)
        for name, serial, turn_no, t, value in rec["observations"]:
            rid = plan.sessions[serial][turn_no - 1].rid
            self.obs.setdefault(rid, {}).setdefault(name, []).append((_t(t), _t(value)))
        for it in rec["iterations"]:
            start = _t(it["start"])
            if plan.unit_clock:
                if start.denominator != 1:
                    raise ModelError(f"an iteration starts at {start} on the unit clock")
                step = int(start)
            else:
                step = self.ntoken
            if step >= plan.scenario.max_steps:  # vLLM's loop stops before this schedule()
                self.truncated = True
                raise _Stop()
            stage = line["stages"][self.eng_i]
            residents = {r["serial"]: r for r in stage["residents"]}
            assign = []
            for serial, mode, tokens in it["assign"]:
                rid = plan.sessions[serial][self.turn_of[serial]].rid
                pos = residents[serial]["position"]
                if rid not in self.seen:
                    kind = "new"
                elif rid in self.resume:
                    kind = "resumed"
                else:
                    kind = "running"
                if kind != "running":
                    self.admitted[rid] = self.admissions
                    self.admissions += 1
                self.resume.discard(rid)
                self.seen.add(rid)
                self.maxpos[rid] = max(self.maxpos.get(rid, 0), pos)
                self.assigned.setdefault(rid, []).append(step)
                assign.append((rid, tokens, pos - tokens, kind))
            pre = []
            for serial, pool, position in rec["preempted"]:
                if (self.names[pool] if isinstance(pool, int) else pool) == "kv":
                    rid = plan.sessions[serial][self.turn_of[serial]].rid
                    pre.append(rid)
                    self.preemptions.append((_t(it["start"]), rid, self.admitted.get(rid, -1)))
                    turn = plan.sessions[serial][self.turn_of[serial]]
                    if position > turn.prompt:
                        # a preemption in decode. If a request behind the victim in running
                        # order (admitted later) was scheduled in this call, vLLM scheduled the
                        # victim first (its running loop visits them in order), and that
                        # allocation cached the block its in-flight token completed: async, the
                        # readmission's cap is then `computed`, else `computed - 1`
                        earlier = any(self.admitted.get(a[0], -1) > self.admitted.get(rid, -1)
                                      for a in assign)
                        bs = int(plan.settings["block"])
                        self.decode_preemptions.append((step, rid, earlier, position % bs == 0))
                    self.preempt_count[rid] = self.preempt_count.get(rid, 0) + 1
                    self.resume.add(rid)
            kv = line["pools"][self.kv_i]
            # a finished request preempted before its output was processed is in vLLM's waiting
            # queue until that update (docs/async.md §6)
            gone = sum(1 for serial, status in line["sessions"]
                       if status == "ending:vllm" and serial not in residents)
            itr = _Iter(_t(it["start"]), _t(it["end"]), assign, sorted(pre), kv["used"],
                        len(stage["residents"]), len(line["pools"][self.reqs_i]["queue"]) + gone,
                        len(self.iters))
            itr.arrived = self.pending_arrivals
            self.pending_arrivals = []
            itr.step = step
            if assign:
                self.ntoken += 1
                self.idle_calls = 0
                self.end_to_iter[itr.end] = itr
                self.raw_end[itr.end] = Fraction(it["end"])
            else:
                self.idle_calls += 1
                if self.idle_calls > 10000:
                    raise ModelError("more than 10000 preempt-only iterations in a row (livelock)")
            self.iters.append(itr)


def _seconds_steps(plan: Plan, col: "_Collector") -> tuple[list[int], dict[str, Fraction], set]:
    """vLLM's step numbers of the token iterations of a seconds-clock run, and the clock at which
    vLLM adds each `after` request (docs/oracle.md §2.3, the driver's loop).

    The oracle driver counts a step per token-carrying `schedule()`, and, while the scheduler is
    empty and no `arrival_time` request lies in the future, one idle step per round without moving
    the clock; an `after` request is added before the first call whose step number is at least its
    parent's finish step + max(1, delay_steps). Walking serQ's token iterations in order with that
    rule gives the numbering and each child's vLLM add time; run_scenario feeds the add times back
    as gate delays until they reproduce themselves. Also returned: the requests vLLM adds after
    idle steps or a clock jump, i.e. while its scheduler had no request at all (async: every
    finished request's output had been processed)."""
    sc = plan.scenario
    toks = [it for it in col.iters if it.assign]
    index = {id(it): k for k, it in enumerate(toks)}
    fin_k: dict[str, int] = {}
    for rid, o in col.obs.items():
        if o.get("last_end"):
            it = col.iter_ending(o["last_end"][0][1])
            if it is not None:
                fin_k[rid] = index[id(it)]
    by_fin: dict[int, list[str]] = {}
    for rid, k in fin_k.items():
        by_fin.setdefault(k, []).append(rid)
    children: dict[str, list] = {}
    for r in sc.requests:
        if r.after is not None:
            children.setdefault(r.after, []).append(r)
    timed = {r.id: r.arrival_time_exact for r in sc.requests if r.arrival_kind == "time"}
    # arrival_step beside arrival_time requests: the step counter must reach it (and the clock the
    # request's arrival_time, if it has one)
    target: dict[str, int] = {r.id: r.arrival_step for r in sc.requests
                              if r.after is None and r.arrival_step}
    added: dict[str, Fraction] = {}
    bound: dict[str, Fraction] = {}
    finished: set[str] = set()
    steps: list[int] = []
    idle_added: set = set()
    S = 0
    # A request is ready once the clock reaches its arrival_time (if it has one) and the step
    # counter its step (arrival_step, or an `after` child's target once its parent finished).
    # Waiting requests sit in two heaps by (threshold, list index), so each is looked at when
    # its threshold is reached instead of once per iteration: `by_clock` (an arrival_time not
    # reached yet) and `by_step` (only the step counter left). The step counter only grows; the
    # clock may go back (the next serQ iteration can end before a jump's arrival_time), and then
    # an arrival_time request in `by_step` goes back to `by_clock` (its entry there is skipped).
    by_clock = [(timed[r.id], r.index, r.id) for r in sc.requests if r.arrival_kind == "time"]
    heapq.heapify(by_clock)
    by_step = [(r.arrival_step or 0, r.index, r.id) for r in sc.requests
               if r.arrival_kind == "step"]
    heapq.heapify(by_step)
    timed_on_step: set[str] = set()  # arrival_time requests whose time came (in by_step)
    unadded_target = dict(target)  # the requests of `target` not added yet
    live = 0  # added and not finished

    def finish(rid: str) -> None:
        nonlocal live
        if rid not in finished:
            finished.add(rid)
            if rid in added:
                live -= 1

    # one pass more than serQ's token iterations: a child whose target step lies beyond serQ's
    # last iteration (serQ ran it too early) is added after vLLM's idle steps at the last
    # iteration's end, so the fixpoint learns its add time (c9000_00108)
    for k in range(len(toks) + 1):
        clock = toks[k - 1].end if k else Fraction(0)
        for rid in [rid for rid in timed_on_step if timed[rid] > clock]:
            timed_on_step.discard(rid)
            heapq.heappush(by_clock, (timed[rid], sc.request(rid).index, rid))
        if k:
            for rid in by_fin.get(k - 1, ()):
                # async: the finish is processed after the next schedule() call, and the counter
                # has moved on if that call had tokens (col.late); until then vLLM still has the
                # request (it is scheduled an EOS token, or lingers in its running list), so the
                # engine is not empty before this iteration
                late = col.late.get(rid, 0)
                if not late:
                    finish(rid)
                for c in children.get(rid, ()):
                    target[c.id] = unadded_target[c.id] = t = \
                        steps[k - 1] + max(1 + late, c.delay_steps)
                    heapq.heappush(by_step, (t, c.index, c.id))
            for rid in by_fin.get(k - 2, ()) if k >= 2 else ():
                if col.late.get(rid, 0):
                    finish(rid)

        idled = False
        while True:
            while by_clock and by_clock[0][0] <= clock:
                _, i, rid = heapq.heappop(by_clock)
                heapq.heappush(by_step, (sc.requests[i].arrival_step or 0, i, rid))
                timed_on_step.add(rid)
            while by_step and by_step[0][0] <= S:
                _, i, rid = heapq.heappop(by_step)
                if rid in added or (rid in timed and rid not in timed_on_step):
                    continue  # added already, or its entry is stale (back in by_clock)
                added[rid] = clock
                unadded_target.pop(rid, None)
                timed_on_step.discard(rid)
                live += rid not in finished
                if idled:
                    idle_added.add(rid)
            if live:
                break
            idled = True
            # the driver jumps to the earliest pending arrival_time if it lies ahead, and counts
            # a step otherwise (also when that request waits for its arrival_step)
            if by_clock and not timed_on_step:
                clock = by_clock[0][0]
                # a request waiting for the step counter cannot be added before this jump
                for rid, t in unadded_target.items():
                    if t > S:
                        bound[rid] = max(bound.get(rid, clock), clock)
                continue
            waiting = [t for t in unadded_target.values() if t > S]
            if not waiting:
                break
            S = min(waiting)
        if k == len(toks):
            break
        steps.append(S)
        S += 1
    for rid, b in bound.items():
        if rid in added and added[rid] < b:
            added[rid] = b
    return steps, added, idle_added



def _call_order(sc: ResolvedScenario, join_call: dict[str, int]) -> dict[str, int]:
    """Every request's rank in vLLM's FCFS order: by the schedule() call before which it was
    added, then list index (requests never added last)."""
    new = sorted(join_call, key=lambda rid: (join_call[rid], sc.request(rid).index))
    order = {rid: i for i, rid in enumerate(new)}
    for r in sc.requests:
        order.setdefault(r.id, len(order))
    return order


def _async_call_keys(plan: Plan, col: "_Collector") -> dict[str, int]:
    """Async: each request's schedule() call at joining, counting the empty calls that applied a
    finished request's end (vLLM adds the requests of one step in two rounds around such a call:
    its children come in the second, c21000_00498 on the unit clock, c41000_00035 on a seconds
    clock). A fan-out child counts from its parent's end at the earliest: vLLM adds it with its
    siblings (c20000_00015, c20000_00195)."""
    return {rid: max(k, col.end_call.get(plan.fanout.get(rid), k))
            for rid, k in col.join_key.items()}


def _fanout_idle(plan: Plan, col: "_Collector", thinks: dict[str, Fraction]) -> set:
    """Async: the fan-out children added at the very instant their parent's end is applied by an
    empty schedule() call (late 0). vLLM adds them only after that call has processed the
    finish, but a gate of their own fires before the call and would make it carry tokens; so
    they sit that call out, as requests added after idle steps do (§1 async (4))."""
    if not plan.asynchronous:
        return set()
    out = set()
    for cid, pid in plan.fanout.items():
        rel = col.obs.get(pid, {}).get("release_end")
        # the same instant (serq_fast: up to binary64 rounding; steps are >= base_s apart)
        t = thinks.get(cid)
        if rel and not col.late.get(pid, 0) and t is not None \
                and abs(t - rel[0][1]) <= Fraction(1, 10**9):
            out.add(cid)
    return out


def build_trace(plan: Plan, col: _Collector) -> tuple[dict, dict[str, int]]:
    """The oracle trace from the collected state; also each request's schedule() call at joining."""
    sc = plan.scenario
    bs = sc.block_size
    usable = sc.num_usable_blocks
    iters, obs, join_call = col.iters, col.obs, col.join_call
    preempt_count, maxpos = col.preempt_count, col.maxpos
    token_iters = [it for it in iters if it.assign]
    if not plan.unit_clock:
        numbers, col.vllm_added, col.idle_added = _seconds_steps(plan, col)
        for it, n in zip(token_iters, numbers):
            it.step = n
        nxt = None
        for it in reversed(iters):  # a preempt-only record takes the next step's number
            if it.assign:
                nxt = it.step
            else:
                it.step = nxt if nxt is not None else (numbers[-1] + 1 if numbers else 0)
    # vLLM's virtual clock at each step
    base, per = sc.step_base_s, sc.step_per_token_s
    clock = 0.0
    step_time: dict[int, float] = {}
    if plan.unit_clock:
        for it in token_iters:
            step_time[it.step] = clock
            clock += base + per * sum(a[1] for a in it.assign)
    else:
        for it in token_iters:
            step_time[it.step] = float(it.start)

    def step_of_end(t: Fraction) -> int:
        it = col.iter_ending(t)
        if it is None:
            raise ModelError(f"no iteration ends at {t}")
        return it.step

    # requests
    requests: dict[str, dict] = {}
    finished_at: dict[int, list] = {}
    # each request's first token iteration's step, and for each record the step of the first
    # token iteration at or after it: one pass each, not one per request
    first_sched_of: dict[str, int] = {}
    for it in token_iters:
        for a in it.assign:
            first_sched_of.setdefault(a[0], it.step)
    next_token_step: list = [None] * (len(iters) + 1)
    for k in range(len(iters) - 1, -1, -1):
        next_token_step[k] = iters[k].step if iters[k].assign else next_token_step[k + 1]
    for r in sc.requests:
        o = obs.get(r.id, {})
        added = r.id in join_call
        first_step = None
        fin_step = None
        firsts = [v for _, v in o.get("first_end", []) if v >= 0]
        if firsts:
            first_step = step_of_end(firsts[0])
        if o.get("last_end"):
            fin_step = step_of_end(o["last_end"][0][1])
        first_sched = first_sched_of.get(r.id)
        out_len = sc.output_len(r.id) if fin_step is not None else max(
            0, maxpos.get(r.id, 0) - sc.static_prompt_len(r.id) + 1) if added else 0
        reason = None
        if fin_step is not None:
            reason = sc.finish_reason(r.id)
            finished_at.setdefault(fin_step, []).append({"id": r.id, "reason": reason,
                                                          "output_len": out_len})
        hits = o.get("hit", [])
        arr_step = None
        if added:
            arr_step = next_token_step[join_call[r.id]]
        requests[r.id] = {
            "prompt_len": sc.static_prompt_len(r.id) if added else None,
            "max_tokens": r.max_tokens,
            "priority": r.priority,
            "arrival_step": arr_step,
            "arrival_time": (r.arrival_time if r.arrival_time is not None
                             else step_time.get(arr_step)) if added else None,
            "first_scheduled_step": first_sched,
            "first_token_step": first_step,
            "finish_step": fin_step,
            "finish_reason": reason,
            "num_preemptions": preempt_count.get(r.id, 0),
            "cached_tokens_at_admission": int(hits[0][1]) if hits else None,
            "output_len": out_len,
        }
    steps = []
    carried: list = []
    for it in iters:
        if not it.assign and not it.preempted:
            carried += it.arrived
            continue
        tokens = sum(a[1] for a in it.assign)
        steps.append({
            "step": it.step,
            "time": round(step_time.get(it.step, clock), 9),
            "arrived": carried + it.arrived,
            "scheduled": [{"id": a[0], "tokens": a[1], "computed_before": a[2], "kind": a[3]}
                          for a in it.assign],
            "total_tokens": tokens,
            "preempted": it.preempted,
            "free_blocks_after_schedule": usable - it.used_units // bs,
            "num_running": it.running,
            "num_waiting": it.waiting,
            "finished": finished_at.get(it.step, []) if it.assign else [],
        })
        carried = []
    unfinished = sorted(rid for rid, rr in requests.items() if rr["finish_step"] is None)
    steps = [s for s in steps if s["step"] < sc.max_steps]
    trace = {
        "scenario": sc.name,
        "vllm_version": MODEL_VERSION,
        "config": sc.config,
        "num_usable_blocks": usable,
        "steps": steps,
        "requests": requests,
        "unfinished": unfinished,
        "stalled": bool(unfinished) and not col.truncated,
    }
    return trace, join_call


def run_scenario(sc: ResolvedScenario, engine: str = "auto",
                 sources: dict[str, str] | None = None, force: bool = False) -> dict:
    """The serQ trace of a resolved scenario (raises Unsupported / ModelError).

    `sources` optionally replaces a program's text ({file name: text}, e.g.
    {"vllm_scenario.sq": …}; the tests seed faults with it).

    Some inputs of the program are facts about vLLM's own run that the language cannot derive
    (docs/vllm-model.md §2): on a seconds clock, when vLLM's step counter releases an `after`
    request and in which order requests joined within one schedule() call. They are read off a
    run and fed back until the run reproduces them. Async scheduling needs no such input: it is
    the engine option `lag 1` (docs/async.md)."""
    t0 = _time.perf_counter()
    plan = plan_scenario(sc, force)
    if engine == "auto":
        # serq_fast implements `lag 1` (docs/async.md, docs/fast.md) and agrees on every
        # committed vector, async ones on both clocks included (docs/vllm-model.md §4)
        engine = "fast"
    source = (sources or {}).get(program_path(plan.priority, plan.use_hold).name)
    order = None
    thinks: dict[str, Fraction] = {}
    ir = _ir_for(plan, order, source, thinks)
    col = _run_engine(ir, engine, plan)
    trace, join_call = build_trace(plan, col)
    limit = 40 + 4 * len(sc.requests)
    # async fan-out: first without _fanout_idle's flags (a child the empty call could not admit
    # anyway needs none); if the derived inputs then cycle, the child's own gate made that call
    # carry tokens, and the flags are switched on
    fan_idle = False
    seen: set = set()
    for _ in range(limit):
        state = (tuple(sorted(thinks.items())), tuple(sorted((order or {}).items())),
                 tuple(sorted(plan.idle_added)))
        if state in seen and plan.fanout and plan.asynchronous and not fan_idle:
            fan_idle = True
        seen.add(state)
        changed = False
        if not plan.unit_clock:
            # Seconds clock: (1) an `after` request is added when vLLM's step counter reaches its
            # parent's finish step + max(1 + late, delay_steps); `_seconds_steps` derives that
            # clock, which becomes the request's gate delay after its parent's release. (2) FCFS:
            # the waiting queue is in (schedule() call at joining, list index) order.
            rel = {rid: o["release_end"][0][1] for rid, o in col.obs.items()
                   if o.get("release_end")}
            if not rel:
                rel = {rid: o["last_end"][0][1] for rid, o in col.obs.items() if o.get("last_end")}
            new_thinks = dict(thinks)
            for r in sc.requests:
                if r.id in plan.fanout or r.id in plan.stepped:
                    # its own session (a fan-out child), or added by the step counter (mixed
                    # arrivals): the gate counts from time 0, and it must fire at the engine's
                    # own instant of that iteration end (the priority key t0 = now ties with the
                    # requests vLLM adds in the same call)
                    t = col.vllm_added.get(r.id, ADD_UNKNOWN)
                    new_thinks[r.id] = col.raw_end.get(t, t)
                elif r.after is not None and r.id in col.vllm_added and r.after in rel:
                    # from its parent's release to the add time, both the engine's own instants
                    # (serq_fast: binary64 numbers, not the times as read), so that the gate lands
                    # on that instant: a request added to an idle scheduler sits out the schedule
                    # there (§1 async (4)), and one rounding early lets it in (c30000_00257)
                    start, target = rel[r.after], col.vllm_added[r.id]
                    new_thinks[r.id] = max(Fraction(0), col.raw_end.get(target, target)
                                           - col.raw_end.get(start, start))
            new_order = order
            if not plan.priority:
                plan.settings["key_time"] = "0"
                new_order = _call_order(sc, _async_call_keys(plan, col) if plan.asynchronous
                                        else join_call)
            idle = set(col.idle_added) | (_fanout_idle(plan, col, new_thinks) if fan_idle else set())
            if plan.asynchronous and idle != plan.idle_added:
                # added while vLLM's scheduler was empty: the program keeps it out of the schedule
                # at its own instant that still has residents (vLLM's empty call before the add)
                plan.idle_added = idle
                changed = True
            if new_order != order or new_thinks != thinks:
                order, thinks = new_order, new_thinks
                changed = True
        elif plan.fanout:
            # Unit clock, fan-out: a child in a session of its own is added at its parent's
            # finish step + max(1 + late, delay_steps) (the chained child's rule, §1 async (3));
            # the step is the time
            new_thinks = dict(thinks)
            for cid, pid in plan.fanout.items():
                fin = trace["requests"][pid]["finish_step"]
                new_thinks[cid] = ADD_UNKNOWN if fin is None else Fraction(
                    fin + max(1 + col.late.get(pid, 0), sc.request(cid).delay_steps))
            idle = _fanout_idle(plan, col, new_thinks) if fan_idle else set()
            if new_thinks != thinks or idle != plan.idle_added:
                thinks, plan.idle_added = new_thinks, idle
                changed = True
        if plan.unit_clock and plan.asynchronous and not plan.priority:
            # Async, unit clock: vLLM adds the requests of one step in two rounds when an empty
            # schedule() between them applied a finished request's end (the second round holds
            # that request's children); FCFS is then by (call at joining, list index), as on a
            # seconds clock, not by (step, list index) (c21000_00498)
            plan.settings["key_time"] = "0"
            # a fan-out child's own gate may fire before the empty call, but vLLM adds it after
            # its parent's end, with its siblings
            new_order = _call_order(sc, _async_call_keys(plan, col))
            if new_order != order:
                order = new_order
                changed = True
        if plan.asynchronous and plan.priority and plan.content is not None:
            # a victim vLLM had scheduled earlier in its preempting call keeps the block its
            # in-flight token completed cached (the program's `cv` bit, §1 async (5))
            cv = {rid for _, rid, earlier, _ in col.decode_preemptions if earlier}
            if cv != plan.cache_victims:
                plan.cache_victims = cv
                changed = True
        if not changed:
            break
        ir = _ir_for(plan, order, source, thinks)
        col = _run_engine(ir, engine, plan)
        trace, join_call = build_trace(plan, col)
    else:
        raise ModelError(f"the derived inputs (arrival order, add times) did not "
                         f"settle after {limit} runs")
    for cid, pid in plan.fanout.items():
        if trace["requests"][pid]["finish_step"] is None \
                and trace["requests"][cid]["arrival_step"] is not None:
            # vLLM never adds it; the run added it at ADD_UNKNOWN instead (a run that stops at
            # max_steps first never adds it either, as vLLM: c42000_00071)
            raise Unsupported("after-fanout", f"{cid!r} follows {pid!r}, which never finishes")
    if plan.asynchronous and plan.content is not None:
        # the `cv` bit is per request: one whose decode preemptions at a block boundary are of
        # both kinds (or any such under FCFS, whose victim is never scheduled before the request
        # it makes room for) would need it per preemption
        kinds: dict[str, set] = {}
        for step, rid, earlier, boundary in col.decode_preemptions:
            if boundary:
                kinds.setdefault(rid, set()).add(earlier)
        for step, rid, earlier, boundary in col.decode_preemptions:
            if boundary and (len(kinds[rid]) > 1 or (earlier and not plan.priority)):
                if not force:
                    raise Unsupported("async-cache-victim", f"step {step}: {rid!r} is "
                                      f"preempted in decode both after and before vLLM "
                                      f"scheduled it in the preempting call")
                plan.forced.append("async-cache-victim")
                break
    if plan.forced:
        trace["model_forced"] = plan.forced
    trace["timing"] = {"model_s": round(_time.perf_counter() - t0, 4), "engine": engine,
                       "num_steps": len(trace["steps"])}
    return trace


def run_scenario_file(path: str, engine: str = "auto", **kwargs) -> dict:
    return run_scenario(load_scenario(path, **kwargs), engine)


# --------------------------------------------------------------------------------------------
# CLI: `serq oracle run`


def _err(msg: str) -> None:
    print(f"serq oracle: {msg}", file=sys.stderr)


def cmd_run(args) -> int:
    try:
        sc = load_scenario(args.scenario)
    except ScenarioError as exc:
        _err(f"{args.scenario}: {exc}")
        return 2
    try:
        trace = run_scenario(sc, args.engine)
    except Unsupported as exc:
        _err(f"{args.scenario}: {exc}")
        return 2
    except ModelError as exc:
        _err(f"{args.scenario}: the model failed: {exc}")
        return 1
    text = json.dumps(trace, indent=1) + "\n"
    if args.output:
        from serq.outputfile import write_text

        try:
            write_text(args.output, text)
        except OSError as exc:
            _err(f"cannot write {args.output}: {exc.strerror or exc}")
            return 2
    else:
        sys.stdout.write(text)
    return 0


def register_oracle(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run a scenario through serQ's vLLM model and write its trace",
        description="Map the scenario to examples/oracle/vllm_scenario.sq (docs/vllm-model.md), "
        "run it with the fast simulator (or the exact spec) and write a trace in the oracle "
        "format, to compare with `serq oracle compare`. Exit 0 ok, 1 model failure, 2 bad or "
        "unsupported scenario (the message names the field or the missing feature).",
    )
    p.add_argument("scenario", metavar="SCENARIO.json")
    p.add_argument("-o", "--output", metavar="OUT", help="trace file (default: stdout)")
    p.add_argument("--engine", choices=("auto", "fast", "spec"), default="auto",
                   help="serq_fast (auto, the default) or serq_spec (exact, slower)")
    p.set_defaults(func=cmd_run)

    from serq.oracle import agreement

    agreement.register(sub)

"""A resolved scenario as the model's plan, and the refusals: what the model cannot represent.

`plan_scenario` maps a scenario (docs/oracle.md §3) to the program's inputs and sessions
(docs/vllm-model.md §2): one session per `after` chain, one turn per request, the prefix tree of
vLLM's content-keyed cache (`content_plan`), and the settings the program reads as
`args.number`. A scenario that needs a vLLM feature the language cannot express yet raises
`Unsupported` naming the feature (`FEATURES`), here before any run, or after one in
`refuse_unplaced_fanout` / `refuse_mixed_cache_victims`, whose facts only a run shows (and
`encode.ir_for` refuses a trace key too large to pack exactly): the model never prints a trace it
knows to be wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from serq_vllm.scenario import ResolvedScenario, fake_output_token, tokens_for_segment

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


# --------------------------------------------------------------------------------------------
# scenario -> plan


@dataclass
class Turn:
    """One request as a turn of its session (one engine call after a gate delay)."""

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
    """A scenario as the model runs it: the program (priority, explicit hold), its `args.number`
    settings, the sessions, and the inputs the feedback rules derive from runs (`idle_added`,
    `cache_victims`; the gate delays and FCFS ranks travel beside the plan, model.run_scenario)."""

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
    content: ContentPlan | None = None  # None: caching off, the kv holds have no content clause
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
    # speculative decoding modelled: each trace row carries its request's acceptance counts
    speculative: bool = False


#: The gate delay of a request whose add time the fixpoint has not derived (yet): a fan-out child
#: whose parent has not finished in a run, a request waiting for the step counter. Later than any
#: step a scenario can reach (max_steps), so it is not added within the run.
ADD_UNKNOWN = Fraction(10**12)


def number_text(x: Fraction) -> str:
    """An exact rational as the program's `args.number` text (`n` or `n/d`)."""
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def request_tokens(sc: ResolvedScenario) -> dict[str, tuple[list[int], list[int]]]:
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


def _content_code(cplan: ContentPlan, rid: str, bs: int) -> tuple[int, int, int]:
    """(prefix key, shared whole blocks, history) of a request; (0, 0, 0) without caching. Only
    whole blocks of the shared length matter (a block is the prefix's iff it lies inside it)."""
    if rid not in cplan.content:
        return (0, 0, 0)
    p, n, h = cplan.content[rid]
    return (p, n // bs, h)


#: Missing features `force` can approximate (for measuring what a refusal protects against):
#: unknown knobs ignored, priority ties on a frozen clock keyed by step instead, and a request
#: with decode preemptions of both kinds given the readmission cap its run derived. A forced
#: async scenario with a missing feature runs synchronously (plan_scenario), a speculative one
#: with its drafts ignored (one token per decode step).
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
    # time as it does an `after` child's (collect.seconds_steps, feedback.seconds_add_times)
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
            # applied needs feedback.fanout_idle, the session's own child never does)
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
    toks = request_tokens(sc)
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
        "base": number_text(sc.step_base_exact) if time_based else "1",
        "per_token": number_text(sc.step_per_token_exact) if time_based else "0",
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
        if plan.unit_clock:  # seconds clocks derive the add times (collect.seconds_steps, feedback.seconds_add_times)
            settings["late_gate"] = "1"
    else:
        for ts in sessions:  # forced synchronous: no EOS token either
            for t in ts:
                t.extra = 0
    if watermark_blocks:
        settings["watermark"] = str(watermark_blocks * bs)
    if sc.speculative is not None and not (force and needs):
        # speculative decoding (docs/vllm-model.md §5.6): the engine's `speculate (slots,
        # lookahead, max_model_len)` and the decode's k; the acceptance counts are trace data
        spec = sc.speculative
        settings["drafts"] = str(spec.num_speculative_tokens)
        settings["draft_slots"] = str(spec.draft_slots)
        settings["lookahead"] = str(spec.lookahead_tokens)
        settings["max_len"] = str(mml)
        plan.speculative = True
    plan.use_hold = (plan.asynchronous or bool(watermark_blocks)) and not plan.priority
    return plan


# --------------------------------------------------------------------------------------------
# refusals that need a run


def refuse_unplaced_fanout(plan: Plan, requests: dict[str, dict]) -> None:
    """A fan-out child whose parent never finishes: vLLM never adds it, while the run added it at
    ADD_UNKNOWN (a run that stops at max_steps first never adds it either, as vLLM:
    c42000_00071). `requests` is the run's trace's request table."""
    for cid, pid in plan.fanout.items():
        if requests[pid]["finish_step"] is None and requests[cid]["arrival_step"] is not None:
            raise Unsupported("after-fanout", f"{cid!r} follows {pid!r}, which never finishes")


def refuse_mixed_cache_victims(plan: Plan, decode_preemptions: list, force: bool) -> None:
    """Async with caching: the program's `cv` bit (feedback.cache_victims) is per request, so a
    request whose decode preemptions at a block boundary are of both kinds (scheduled before and
    after the request it made room for), or any such under FCFS, whose victim is never scheduled
    before the request it makes room for, would need it per preemption. `decode_preemptions` is
    the collector's (step, victim, scheduled earlier in that call, at a block boundary) list.
    With `force` the request keeps the bit its run derived and the plan says so."""
    if not (plan.asynchronous and plan.content is not None):
        return
    kinds: dict[str, set] = {}
    for step, rid, earlier, boundary in decode_preemptions:
        if boundary:
            kinds.setdefault(rid, set()).add(earlier)
    for step, rid, earlier, boundary in decode_preemptions:
        if boundary and (len(kinds[rid]) > 1 or (earlier and not plan.priority)):
            if not force:
                raise Unsupported("async-cache-victim", f"step {step}: {rid!r} is "
                                  f"preempted in decode both after and before vLLM "
                                  f"scheduled it in the preempting call")
            plan.forced.append("async-cache-victim")
            return

